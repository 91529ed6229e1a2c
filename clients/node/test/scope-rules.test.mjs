// The scope rules of the seed's provisioner.ts, the probe's states and
// the caller class, through this package against the real daemon.
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  provisioner,
  runnerEnv,
  secretToken,
  sessionEnv,
  uniqueId,
  workspaceOf,
} from "../testing/helpers.mjs";
import { FailedPreconditionError, InvalidArgumentError } from "../index.js";

test("connect is not idempotent and returns an id", async () => {
  const { driver } = provisioner();
  const request = uniqueId("mcp-req");
  const env = { taskQueue: `connect:${request}`, stigmerToken: secretToken(), callerClass: "user" };
  const sandboxId = await driver.createConnectSandbox(request, env);
  assert.equal(typeof sandboxId, "string");
  assert.notEqual(sandboxId, "");
  assert.equal(await driver.probe("connect", sandboxId), "running");

  // A second create for the same request fails: the first owns it.
  await assert.rejects(driver.createConnectSandbox(request, env), (error) => {
    assert.ok(error instanceof FailedPreconditionError, String(error));
    assert.equal(error.kind, "failed_precondition");
    return true;
  });
  assert.equal((await driver.list("connect")).filter((i) => i.id === sandboxId).length, 1);

  // The caller's `finally`: deprovision by the id it was given.
  await driver.deprovisionConnectSandbox(sandboxId);
  assert.equal(await driver.probe("connect", sandboxId), "absent");
});

test("workflow ensure is critical: a failure rejects, it is never swallowed", async () => {
  const { driver } = provisioner();
  const id = uniqueId("wfx-crit");
  const env = { taskQueue: `wfexec:${id}`, stigmerToken: secretToken(), callerClass: "user" };
  await driver.ensureWorkflowSandbox(id, env);
  assert.equal(await driver.probe("workflow", id), "running");
  await driver.deprovisionWorkflowSandbox(id);

  // A request the daemon cannot serve rejects the promise, so steps.ts's
  // critical posture (throw Unavailable before the execution persists)
  // sees it and nothing was created.
  await assert.rejects(
    driver.ensureWorkflowSandbox("bad id/with a slash", env),
    InvalidArgumentError,
  );
  await assert.rejects(
    driver.ensureWorkflowSandbox(id, { ...env, taskQueue: "" }),
    InvalidArgumentError,
  );
  assert.equal(await driver.probe("workflow", id), "absent");
});

test("probe states: absent, running, absent again (a process has no stopped state)", async () => {
  const { driver } = provisioner();
  const id = uniqueId("ses-probe");
  assert.equal(await driver.probe("session", id), "absent");
  assert.equal(await driver.probe("workflow", id), "absent");
  await driver.ensureSessionSandbox(id, sessionEnv(id, secretToken()));
  assert.equal(await driver.probe("session", id), "running");
  // Scopes are separate namespaces: the same id in another scope is absent.
  assert.equal(await driver.probe("workflow", id), "absent");
  await driver.deprovisionSessionSandbox(id);
  assert.equal(await driver.probe("session", id), "absent");
  await assert.rejects(driver.probe("nonsense", id), InvalidArgumentError);
});

test("callerClass is carried to the sandbox", async () => {
  const { driver } = provisioner();
  const id = uniqueId("ses-class");
  await driver.ensureSessionSandbox(id, sessionEnv(id, secretToken(), "guest.scheduled"));
  const info = await driver.describe("session", id);
  assert.equal(info.callerClass, "guest.scheduled");
  assert.equal(info.taskQueue, `session:${id}`);
  const runner = await runnerEnv(await workspaceOf(driver, "session", id));
  assert.equal(runner.STIGMER_TASK_QUEUE, `session:${id}`);
  await driver.deprovisionSessionSandbox(id);
});
