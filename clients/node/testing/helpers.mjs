// Test support, kept outside test/ so `node --test test/` does not run it as a test file.
// What the package's tests share: the daemon they run against (started by
// tests/tests/daemon/node_provisioner.rs, which sets the variables below), a
// logger that records, and polling with a deadline (never a fixed sleep).
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { randomBytes } from "node:crypto";

import { newSandboxdProvisioner } from "../index.js";

function required(name) {
  const value = process.env[name];
  if (value === undefined || value === "") {
    throw new Error(
      `${name} is not set: these tests run against a daemon the Rust test starts; ` +
        "run `cargo test -p sandboxd-tests --test daemon node_provisioner::`",
    );
  }
  return value;
}

export const stateDir = () => required("SANDBOXD_TEST_STATE_DIR");
export const controlDir = () => required("SANDBOXD_TEST_CONTROL_DIR");
export const mismatchSocket = () => required("SANDBOXD_TEST_MISMATCH_SOCKET");

/** A token the Rust side looks for in every log and output afterwards. */
export function secretToken() {
  return `${required("SANDBOXD_TEST_TOKEN_MARK")}${randomBytes(6).toString("hex")}`;
}

/** A unique id per call, so tests never share a sandbox. */
let counter = 0;
export function uniqueId(prefix) {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}`;
}

/** A Logger (the seed's shape) that keeps every line it was given. */
export function recordingLogger() {
  const lines = [];
  const record = (level) => (message, fields) => lines.push({ level, message, fields });
  return { lines, info: record("info"), warn: record("warn"), error: record("error") };
}

/** The seed's SandboxDriverConfig with nothing set (the daemon's own config applies). */
export const emptyConfig = Object.freeze({
  backendEndpoint: "",
  temporalAddress: "",
  runnerImage: "",
  runnerCommand: "",
  kubernetesNamespace: "",
});

/** A provisioner on the test daemon, through the package's own factory. */
export function provisioner(logger = recordingLogger(), config = emptyConfig) {
  return { driver: newSandboxdProvisioner({ config, logger }), logger };
}

export function sessionEnv(id, token, callerClass = "user") {
  return { taskQueue: `session:${id}`, stigmerToken: token, callerClass };
}

/** Polls `check` (sync or async) until it is truthy or `timeoutMs` passed. */
export async function waitFor(check, timeoutMs = 20_000, what = "the condition") {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The sandbox's workspace on the daemon's disk (`<state>/sandboxes/<base name>`). */
export async function workspaceOf(driver, scope, id) {
  const info = await driver.describe(scope, id);
  return path.join(stateDir(), "sandboxes", info.name);
}

/**
 * The environment the runner fixture started with (its env.json), once
 * it wrote its pid file (written last, after env.json), and that pid.
 */
export async function runnerEnv(workspace) {
  const pidFile = path.join(workspace, "pid");
  await waitFor(() => existsSync(pidFile), 20_000, `${pidFile}`);
  return JSON.parse(readFileSync(path.join(workspace, "env.json"), "utf8"));
}

/** Asks the Rust side to restart the daemon on the same socket, and waits for it. */
export async function restartDaemon() {
  const done = path.join(controlDir(), "restart-done");
  writeFileSync(path.join(controlDir(), "restart-request"), "");
  await waitFor(() => existsSync(done), 60_000, "the daemon's restart");
}
