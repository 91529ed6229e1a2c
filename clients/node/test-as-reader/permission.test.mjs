// Run as a uid the daemon lets read but not mutate (tests/tests/daemon/
// node_provisioner.rs runs it as nobody, on the daemon's read list): the
// daemon's permission_denied reaches JavaScript as PermissionDeniedError,
// with the daemon's message intact and without the token. Kept outside
// test/ because it only means something as that uid.
import { test } from "node:test";
import assert from "node:assert/strict";

import { newSandboxdProvisioner, PermissionDeniedError } from "../index.js";

const logger = { info() {}, warn() {}, error() {} };
const config = { backendEndpoint: "", temporalAddress: "", runnerImage: "", runnerCommand: "", kubernetesNamespace: "" };

test("a reader may probe, and an ensure is PermissionDeniedError", async () => {
  assert.notEqual(process.getuid(), 0, "this test runs as a reader, not root");
  const driver = newSandboxdProvisioner({ config, logger });
  assert.equal(await driver.probe("session", "reader-probe"), "absent");
  const token = `${process.env.SANDBOXD_TEST_TOKEN_MARK}reader`;
  const error = await driver
    .ensureSessionSandbox("reader-ensure", { taskQueue: "session:reader-ensure", stigmerToken: token, callerClass: "user" })
    .catch((e) => e);
  assert.ok(error instanceof PermissionDeniedError, String(error));
  assert.equal(error.kind, "permission_denied");
  assert.match(error.daemonMessage, /uid \d+/);
  assert.equal(error.message, `permission_denied: ${error.daemonMessage}`);
  assert.ok(!error.message.includes(token) && !String(error.stack).includes(token));
  assert.equal(await driver.probe("session", "reader-ensure"), "absent");
});
