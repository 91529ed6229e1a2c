// The seed's local-process.integration.test.ts cases, against sandboxd
// through this package: ensure twice is one runner; a stale token is
// refreshed on the next ensure (the one that starts a runner); deprovision
// is idempotent; a runner that dies is respawned by the next ensure.
import { test } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import path from "node:path";

import {
  provisioner,
  runnerEnv,
  secretToken,
  sessionEnv,
  uniqueId,
  waitFor,
  workspaceOf,
} from "../testing/helpers.mjs";

test("ensure twice is one runner", async () => {
  const { driver } = provisioner();
  const id = uniqueId("ses-twice");
  const env = sessionEnv(id, secretToken());
  await driver.ensureSessionSandbox(id, env);
  const first = await driver.describe("session", id);
  assert.equal(first.state, "running");
  assert.equal(first.generation, 1);
  const runner = await runnerEnv(await workspaceOf(driver, "session", id));
  assert.equal(runner.STIGMER_TASK_QUEUE, `session:${id}`);
  assert.equal(runner.STIGMER_TOKEN, env.stigmerToken);

  await driver.ensureSessionSandbox(id, env);
  const second = await driver.describe("session", id);
  assert.equal(second.generation, 1, "the second ensure took the fast path");
  assert.equal(second.pid, first.pid);
  assert.equal(second.restarts, 0);

  await driver.deprovisionSessionSandbox(id);
});

test("a stale token is refreshed on the next ensure that starts a runner", async () => {
  const { driver, logger } = provisioner();
  const id = uniqueId("ses-stale");
  const stale = secretToken();
  const fresh = secretToken();
  const started = await driver.ensure("session", id, sessionEnv(id, stale));
  assert.equal(started.created, true);
  const workspace = await workspaceOf(driver, "session", id);
  assert.equal((await runnerEnv(workspace)).STIGMER_TOKEN, stale);

  // While it runs, the fast path changes nothing and says so; the warning
  // names the field, never a value.
  const fast = await driver.ensure("session", id, sessionEnv(id, fresh));
  assert.equal(fast.created, false);
  assert.deepEqual(fast.differs, ["token"]);
  const warned = logger.lines.filter((line) => line.level === "warn");
  assert.equal(warned.length, 1, JSON.stringify(warned));
  assert.equal(warned[0].fields.differs, "token");
  assert.ok(!JSON.stringify(logger.lines).includes(fresh));
  assert.ok(!JSON.stringify(logger.lines).includes(stale));

  // The runner goes (its token expired, say); the next ensure starts one
  // with the token it carries. The seed's case ends tokenless: "" = none.
  process.kill(started.pid, "SIGKILL");
  await waitFor(async () => (await driver.probe("session", id)) === "absent", 20_000, "the kill");
  rmSync(path.join(workspace, "pid"), { force: true });
  rmSync(path.join(workspace, "env.json"), { force: true });
  const respawned = await driver.ensure("session", id, sessionEnv(id, ""));
  assert.equal(respawned.created, true);
  assert.equal(respawned.generation, 2);
  const runner = await runnerEnv(workspace);
  assert.equal(runner.STIGMER_TOKEN, undefined, "a tokenless sandbox gets no STIGMER_TOKEN");

  await driver.deprovisionSessionSandbox(id);
});

test("deprovision is idempotent", async () => {
  const { driver } = provisioner();
  const id = uniqueId("ses-deprov");
  // Missing is success, before it ever existed …
  await driver.deprovisionSessionSandbox(id);
  await driver.ensureSessionSandbox(id, sessionEnv(id, secretToken()));
  assert.equal(await driver.probe("session", id), "running");
  await driver.deprovisionSessionSandbox(id);
  assert.equal(await driver.probe("session", id), "absent");
  // … and after it is gone.
  await driver.deprovisionSessionSandbox(id);
  await driver.deprovisionWorkflowSandbox(uniqueId("wfx-never"));
  await driver.deprovisionConnectSandbox(uniqueId("mcp-never"));
  assert.deepEqual(
    (await driver.list()).filter((info) => info.id === id),
    [],
  );
});

test("a runner that dies is respawned by the next ensure", async () => {
  const { driver } = provisioner();
  const id = uniqueId("ses-phoenix");
  const env = sessionEnv(id, secretToken());
  const first = await driver.ensure("session", id, env);
  await runnerEnv(await workspaceOf(driver, "session", id));

  process.kill(first.pid, "SIGKILL");
  await waitFor(async () => (await driver.probe("session", id)) === "absent", 20_000, "the kill");

  await driver.ensureSessionSandbox(id, env);
  const info = await driver.describe("session", id);
  assert.equal(info.state, "running");
  assert.equal(info.generation, 2);
  assert.notEqual(info.pid, first.pid);
  assert.ok(info.lastExit !== null, "describe reports how the first runner ended");
  assert.equal(info.lastExit.signal, 9);

  await driver.deprovisionSessionSandbox(id);
});

test("a deprovision outlasting the client's deadline still succeeds", async () => {
  // This runner ignores SIGTERM (its queue says so), and the daemon of
  // these tests gives it 11 s before the SIGKILL: past the client's 10 s
  // deadline, which a deprovision outwaits by the daemon's stop grace.
  const { driver } = provisioner();
  const id = uniqueId("ses-ignore-term");
  await driver.ensureSessionSandbox(id, sessionEnv(id, secretToken()));
  await runnerEnv(await workspaceOf(driver, "session", id));
  const started = Date.now();
  await driver.deprovisionSessionSandbox(id);
  assert.ok(Date.now() - started >= 10_000, "the runner was stopped before the grace ran out");
  assert.equal(await driver.probe("session", id), "absent");
});
