// The Node side of the bench's node row (tests/src/bin/bench/node.rs runs
// it): times calls through this package against the daemon at
// $SANDBOXD_SOCKET and prints one JSON line, {"samples_us": [...]}.
//
//   node bench/calls.mjs new COUNT PREFIX    COUNT new session sandboxes (then deprovisions them, untimed)
//   node bench/calls.mjs fast COUNT ID       COUNT fast-path ensures of ID (after 100 untimed)
//   node bench/calls.mjs seed COUNT RUNNER   the seed's local-process ensure: mkdir + spawn(RUNNER), to its 'spawn' event
//
// Times are taken around the awaited call only (process start excluded).
import { spawn } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

import { newSandboxdProvisioner } from "../index.js";

const [mode, countText, name] = process.argv.slice(2);
const count = Number(countText);
if (!["new", "fast", "seed"].includes(mode) || !Number.isInteger(count) || count < 1 || !name) {
  console.error("usage: node bench/calls.mjs new|fast|seed COUNT PREFIX|ID|RUNNER");
  process.exit(2);
}

const silent = { info() {}, warn() {}, error() {} };
const config = { backendEndpoint: "", temporalAddress: "", runnerImage: "", runnerCommand: "", kubernetesNamespace: "" };
const env = (id) => ({ taskQueue: `session:${id}`, stigmerToken: "stg_bench_0123456789abcdef0123456789abcdef", callerClass: "user" });
const now = () => process.hrtime.bigint();
const micros = (start) => Number(now() - start) / 1000;
const samples = [];

if (mode === "new") {
  const driver = newSandboxdProvisioner({ config, logger: silent });
  const ids = [];
  for (let i = 0; i < count; i += 1) {
    const id = `${name}-${i}`;
    const start = now();
    await driver.ensureSessionSandbox(id, env(id));
    samples.push(micros(start));
    ids.push(id);
  }
  for (const id of ids) await driver.deprovisionSessionSandbox(id);
} else if (mode === "fast") {
  const driver = newSandboxdProvisioner({ config, logger: silent });
  await driver.ensureSessionSandbox(name, env(name));
  for (let i = 0; i < 100; i += 1) await driver.ensureSessionSandbox(name, env(name));
  for (let i = 0; i < count; i += 1) {
    const start = now();
    await driver.ensureSessionSandbox(name, env(name));
    samples.push(micros(start));
  }
  await driver.deprovisionSessionSandbox(name);
} else {
  // The seed's local-process ensure (src/sandbox/local-process.ts): make
  // the workspace, spawn the runner with the sandbox's env. Its ensure
  // returns right after spawn(); the 'spawn' event is when the child runs.
  const root = path.join(tmpdir(), `sandboxd-bench-seed-${process.pid}`);
  const children = [];
  try {
    for (let i = 0; i < count; i += 1) {
      const workspace = path.join(root, `session-${i}`);
      const start = now();
      mkdirSync(workspace, { recursive: true });
      const child = spawn(name, [], {
        env: { ...process.env, MODE: "local", STIGMER_TASK_QUEUE: `session:seed-${i}`, WORKSPACE_ROOT_DIR: workspace },
        stdio: "ignore",
      });
      await new Promise((resolve, reject) => {
        child.once("spawn", resolve);
        child.once("error", reject);
      });
      samples.push(micros(start));
      children.push(child);
    }
  } finally {
    for (const child of children) child.kill("SIGKILL");
    await Promise.all(children.map((child) => (child.exitCode === null && child.signalCode === null ? new Promise((r) => child.once("exit", r)) : null)));
    rmSync(root, { recursive: true, force: true });
  }
}
console.log(JSON.stringify({ samples_us: samples }));
