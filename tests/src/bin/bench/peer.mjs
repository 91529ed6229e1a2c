// The peer row's other side: the seed's own `local-process`
// driver (package/src/sandbox/local-process.ts in the seed, see
// /work/shared/reference/seeds/), written fresh here with the same logic —
// mkdir of the workspace, spawn of the runner with the sandbox's env, a Map
// of children, an exit listener that removes its own entry — so the bench
// can time sandboxd against it in the same run. It isolates nothing: no uid
// of its own, no cgroup, no egress rule, no ledger; that is the point of
// the comparison. Differences from the seed, all in the peer's favour or
// neutral: the workspaces live under ROOT (not ~/.stigmer/sandboxes), the
// runner's stdio is ignored (the seed inherits it, which would write into
// the bench's output), and the logger prints nothing.
//
//   node peer.mjs new COUNT RUNNER ROOT    COUNT new sandboxes one at a time: each sample is one ensure
//   node peer.mjs burst COUNT RUNNER ROOT  COUNT distinct ensures issued at once: the wall time of all
//
// Prints one JSON line: {"samples_us": [...]} for `new`, {"seconds": s} for
// `burst`. Every child is stopped (SIGTERM, as the seed's deprovision does)
// and waited for, and ROOT's workspaces removed, before it prints.

import { spawn } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";

const [mode, countText, runner, root] = process.argv.slice(2);
const count = Number(countText);
if (!["new", "burst"].includes(mode) || !Number.isInteger(count) || count < 1 || !runner || !root) {
  console.error("usage: node peer.mjs new|burst COUNT RUNNER ROOT");
  process.exit(2);
}

/** The seed's driver, as its factory builds it (its logic, line for line). */
function newLocalProcessSandboxProvisioner(config) {
  const DEPROVISION_SIGNAL = "SIGTERM";
  const children = new Map();
  process.once("exit", () => {
    for (const child of children.values()) child.kill(DEPROVISION_SIGNAL);
  });
  const key = (scope, id) => `${scope}:${id}`;

  function ensure(scope, id, env) {
    // No awaits from here to children.set — the seed's double-spawn guard.
    const existing = children.get(key(scope, id));
    if (existing !== undefined && existing.exitCode === null && !existing.killed) {
      return; // Running — the fast path.
    }
    const workspaceRoot = path.join(config.sandboxesDir, `${scope}-${id}`);
    mkdirSync(workspaceRoot, { recursive: true });
    const childEnv = {
      ...process.env,
      MODE: "local",
      STIGMER_TASK_QUEUE: env.taskQueue,
      WORKSPACE_ROOT_DIR: workspaceRoot,
    };
    if (env.stigmerToken !== "") childEnv.STIGMER_TOKEN = env.stigmerToken;
    const child = spawn(config.runnerCommand, [], { env: childEnv, stdio: "ignore" });
    children.set(key(scope, id), child);
    child.once("exit", () => {
      if (children.get(key(scope, id)) === child) children.delete(key(scope, id));
    });
    child.once("error", () => {
      if (children.get(key(scope, id)) === child) children.delete(key(scope, id));
    });
  }

  function deprovision(scope, id) {
    const child = children.get(key(scope, id));
    if (child === undefined) return;
    children.delete(key(scope, id));
    child.kill(DEPROVISION_SIGNAL);
  }

  return {
    children,
    async ensureSessionSandbox(id, env) {
      ensure("session", id, env);
    },
    async deprovisionSessionSandbox(id) {
      deprovision("session", id);
    },
  };
}

const driver = newLocalProcessSandboxProvisioner({ runnerCommand: runner, sandboxesDir: root });
const env = (id) => ({ taskQueue: `session:${id}`, stigmerToken: "stg_bench_0123456789abcdef0123456789abcdef" });
const ids = Array.from({ length: count }, (_, i) => `peer-${mode}-${i}`);
const started = [];
let line;
try {
  if (mode === "new") {
    const samples = [];
    for (const id of ids) {
      const start = performance.now();
      await driver.ensureSessionSandbox(id, env(id));
      samples.push((performance.now() - start) * 1000);
      started.push(driver.children.get(`session:${id}`));
    }
    line = { samples_us: samples };
  } else {
    const start = performance.now();
    await Promise.all(ids.map((id) => driver.ensureSessionSandbox(id, env(id))));
    const seconds = (performance.now() - start) / 1000;
    for (const id of ids) started.push(driver.children.get(`session:${id}`));
    line = { seconds };
  }
} finally {
  const exits = started
    .filter((child) => child !== undefined && child.exitCode === null && child.signalCode === null)
    .map((child) => new Promise((resolve) => child.once("exit", resolve)));
  for (const id of ids) await driver.deprovisionSessionSandbox(id);
  await Promise.all(exits);
  rmSync(root, { recursive: true, force: true });
}
if (started.some((child) => child === undefined || child.pid === undefined)) {
  console.error("peer: a runner did not start");
  process.exit(1);
}
console.log(JSON.stringify(line));
