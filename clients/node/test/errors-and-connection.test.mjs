// Errors a TypeScript caller can act on, the token's absence from every
// error, log line and stack, and the connection: a protocol mismatch or
// an absent daemon fails construction; a daemon restart is survived.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import {
  newSandboxdProvisioner,
  FailedPreconditionError,
  InvalidArgumentError,
  SandboxdError,
  UnavailableError,
} from "../index.js";
import {
  emptyConfig,
  mismatchSocket,
  provisioner,
  recordingLogger,
  restartDaemon,
  secretToken,
  sessionEnv,
  uniqueId,
} from "../testing/helpers.mjs";

/** Runs `run` with SANDBOXD_SOCKET set to `socket`, restoring it after. */
function withSocket(socket, run) {
  const saved = process.env.SANDBOXD_SOCKET;
  process.env.SANDBOXD_SOCKET = socket;
  try {
    return run();
  } finally {
    process.env.SANDBOXD_SOCKET = saved;
  }
}

test("each daemon error kind is an Error subclass with kind and the daemon's message intact", async () => {
  const { driver } = provisioner();
  const token = secretToken();
  const id = uniqueId("ses-kinds");

  const invalid = await driver.ensureSessionSandbox("", sessionEnv(id, token)).catch((e) => e);
  assert.ok(invalid instanceof InvalidArgumentError);
  assert.ok(invalid instanceof SandboxdError);
  assert.ok(invalid instanceof Error);
  assert.equal(invalid.kind, "invalid_argument");
  assert.match(invalid.daemonMessage, /session_id/);
  assert.equal(invalid.message, `invalid_argument: ${invalid.daemonMessage}`);

  // The daemon's own answer (not the client's pre-check): a caller class
  // the daemon refuses reaches JavaScript as the daemon worded it.
  const badClass = await driver
    .ensureSessionSandbox(id, { ...sessionEnv(id, token), callerClass: "Not Allowed" })
    .catch((e) => e);
  assert.ok(badClass instanceof InvalidArgumentError, String(badClass));
  assert.match(badClass.daemonMessage, /caller_class/);

  const request = uniqueId("mcp-kinds");
  const sandboxId = await driver.createConnectSandbox(request, sessionEnv(request, token));
  const precondition = await driver
    .createConnectSandbox(request, sessionEnv(request, token))
    .catch((e) => e);
  assert.ok(precondition instanceof FailedPreconditionError, String(precondition));
  assert.equal(precondition.kind, "failed_precondition");
  await driver.deprovisionConnectSandbox(sandboxId);

  // No error, stack or log line of any of it carries the token.
  for (const error of [invalid, badClass, precondition]) {
    assert.ok(!error.message.includes(token));
    assert.ok(!String(error.stack).includes(token));
    assert.ok(!JSON.stringify(error).includes(token));
  }
});

test("a token the daemon refuses is never echoed", async () => {
  const { driver, logger } = provisioner();
  const id = uniqueId("ses-tok");
  const token = `${secretToken()}\nwith a newline`;
  const error = await driver.ensureSessionSandbox(id, sessionEnv(id, token)).catch((e) => e);
  assert.ok(error instanceof InvalidArgumentError, String(error));
  assert.match(error.daemonMessage, /stigmer_token/);
  const secret = token.split("\n")[0];
  assert.ok(!error.message.includes(secret));
  assert.ok(!String(error.stack).includes(secret));
  assert.ok(!JSON.stringify(logger.lines).includes(secret));
  assert.equal(await driver.probe("session", id), "absent");
});

test("a protocol mismatch is a clear error at construction", () => {
  assert.throws(
    () =>
      withSocket(mismatchSocket(), () =>
        newSandboxdProvisioner({ config: emptyConfig, logger: recordingLogger() }),
      ),
    (error) => {
      assert.ok(error instanceof FailedPreconditionError, String(error));
      assert.match(error.message, /daemon speaks protocol \d+, this client speaks \d+/);
      return true;
    },
  );
});

test("no daemon at the socket is unavailable at construction, naming the path", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "sandboxd-node-"));
  try {
    const socket = path.join(dir, "nobody-here.sock");
    assert.throws(
      () =>
        withSocket(socket, () =>
          newSandboxdProvisioner({ config: emptyConfig, logger: recordingLogger() }),
        ),
      (error) => {
        assert.ok(error instanceof UnavailableError, String(error));
        assert.ok(error.message.includes(socket), error.message);
        return true;
      },
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a daemon restart is survived: the next call reconnects", async () => {
  const { driver } = provisioner();
  const id = uniqueId("ses-restart");
  const env = sessionEnv(id, secretToken());
  await driver.ensureSessionSandbox(id, env);
  const before = await driver.status();

  await restartDaemon();

  // Same provisioner object, no reconstruction: the client library opens
  // a new connection and sends the (idempotent) call again.
  const after = await driver.status();
  assert.ok(after.uptimeSecs <= before.uptimeSecs + 60);
  await driver.ensureSessionSandbox(id, env);
  assert.equal(await driver.probe("session", id), "running");
  await driver.deprovisionSessionSandbox(id);
});
