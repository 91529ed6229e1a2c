// What this package offers against what it could: every call of the Rust
// client library is bound by the addon or listed below as not bound (with
// why), every bound call is offered by the driver (or a command handle)
// under a member index.d.ts types, and every member of the driver and of
// a command handle is typed there. A call added on either side fails here
// until it is bound, offered, typed, or listed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { native } from "../lib/native.js";
import { provisioner, secretToken, sessionEnv, uniqueId } from "../testing/helpers.mjs";

const packageDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const clientSources = path.resolve(packageDir, "..", "..", "client", "src");

/** Rust calls bound under another name (one generic native call per family). */
const BOUND_AS = new Map([
  ["connect", "connect"],
  ["connectDefault", "connect"],
  ["ensureSessionSandbox", "ensure"],
  ["ensureWorkflowSandbox", "ensure"],
  ["deprovisionSessionSandbox", "deprovision"],
  ["deprovisionWorkflowSandbox", "deprovision"],
  ["deprovisionConnectSandbox", "deprovision"],
  ["createConnectSandbox", "createConnect"],
  ["deprovisionConnectFenced", "deprovisionFenced"],
]);

/** The Rust client's helpers over the raw calls, which the driver builds in JavaScript instead. */
const COMPOSED_IN_JS = new Map([
  ["execHandle", "exec"],
  ["attach", "attach"],
  ["runCommand", "runCommand"],
  ["putTarFrom", "putTar"],
  ["putTarFromAsync", "putTar"],
  ["getTarInto", "getTar"],
  ["putFileFrom", "putFile"],
  ["getFileInto", "getFile"],
]);

/** Rust calls the control plane has not needed yet; `sandboxctl` offers them. */
const NOT_BOUND = new Map([
  ["usage", "live figures of every running sandbox (sandboxctl top)"],
  ["workspaces", "the workspaces on the daemon's disk (sandboxctl workspaces)"],
  ["logs", "a runner's output (sandboxctl logs)"],
  ["ensureFenced", "an ensure that refuses a changed incarnation"],
  ["pause", "freezing a sandbox's runner"],
  ["resume", "thawing it"],
]);

/**
 * Where the driver offers a Rust call under another name: a driver
 * member, a command handle's member (`CommandHandle.…`), or the factory
 * itself. Every other call is the driver member COMPOSED_IN_JS names, or
 * the one of its own name.
 */
const SURFACES_AS = new Map([
  ["connect", "newSandboxdProvisioner"],
  ["connectDefault", "newSandboxdProvisioner"],
  ["deprovision", "deprovisionSessionSandbox"],
  ["deprovisionConnectFenced", "deprovisionFenced"],
  ["commandOutput", "CommandHandle.stdout"],
  ["commandWait", "CommandHandle.wait"],
  ["commandInput", "CommandHandle.stdin"],
  ["commandSignal", "CommandHandle.signal"],
  ["commandResize", "CommandHandle.resize"],
]);

/** The `pub async fn` names of the Rust client's `impl SandboxdClient` blocks, in camelCase. */
function rustCalls() {
  const names = new Set();
  for (const file of readdirSync(clientSources).filter((name) => name.endsWith(".rs"))) {
    const source = readFileSync(path.join(clientSources, file), "utf8");
    for (const block of source.matchAll(/^impl SandboxdClient \{\n([\s\S]*?)^\}/gm)) {
      for (const match of block[1].matchAll(/^\s*pub async fn (\w+)/gm)) {
        names.add(match[1].replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase()));
      }
    }
  }
  return names;
}

/** The member names `interface name` declares in index.d.ts. */
function typedMembers(name) {
  const typings = readFileSync(path.join(packageDir, "index.d.ts"), "utf8");
  const start = typings.search(new RegExp(`^export interface ${name}\\b`, "m"));
  assert.ok(start >= 0, `index.d.ts declares ${name}`);
  const body = typings.slice(start, typings.indexOf("\n}\n", start));
  return new Set(
    [...body.matchAll(/^ {2}(?:readonly )?(\w+)\??[(:<]/gm)].map((match) => match[1]),
  );
}

test("every call of the Rust client is bound by the addon, or listed as not bound", () => {
  const NativeClient = native().NativeClient;
  const { driver } = provisioner();
  const bound = new Set([...Object.getOwnPropertyNames(NativeClient.prototype), "connect"]);
  const calls = rustCalls();
  assert.ok(calls.has("exec") && calls.has("commandOutput"), [...calls].join(","));
  for (const call of calls) {
    if (COMPOSED_IN_JS.has(call)) {
      assert.equal(typeof driver[COMPOSED_IN_JS.get(call)], "function", call);
      continue;
    }
    if (NOT_BOUND.has(call)) {
      assert.ok(!bound.has(call), `${call} is bound now: take it off NOT_BOUND`);
      continue;
    }
    const nativeName = BOUND_AS.get(call) ?? call;
    assert.ok(bound.has(nativeName), `the Rust client's ${call} is neither bound nor listed`);
  }
});

test("every member of the driver and of a command handle is typed", async (t) => {
  const { driver } = provisioner();
  const typed = new Set([...typedMembers("SandboxProvisioner"), ...typedMembers("SandboxdProvisioner")]);
  for (const member of Object.keys(driver)) {
    assert.ok(typed.has(member), `driver.${member} is not in index.d.ts`);
  }
  const id = uniqueId("ses-typed");
  await driver.ensure("session", id, sessionEnv(id, secretToken()));
  t.after(() => driver.deprovisionSessionSandbox(id));
  const handle = await driver.exec("session", id, ["true"]);
  await handle.wait();
  const handleTyped = typedMembers("CommandHandle");
  for (const member of Object.keys(handle)) {
    assert.ok(handleTyped.has(member), `handle.${member} is not in index.d.ts`);
  }
  const result = await driver.runCommand("session", id, ["true"]);
  const resultTyped = typedMembers("RunCommandResult");
  assert.deepEqual(Object.keys(result).sort(), [...resultTyped].sort());
});

test("every call of the Rust client that is bound is offered by the driver and typed", () => {
  const { driver } = provisioner();
  const typings = readFileSync(path.join(packageDir, "index.d.ts"), "utf8");
  const typed = new Set([...typedMembers("SandboxProvisioner"), ...typedMembers("SandboxdProvisioner")]);
  const handleTyped = typedMembers("CommandHandle");
  const calls = rustCalls();
  assert.ok(calls.has("putFile") && calls.has("getTar"), [...calls].join(","));
  for (const call of calls) {
    if (NOT_BOUND.has(call)) continue;
    const where = SURFACES_AS.get(call) ?? COMPOSED_IN_JS.get(call) ?? call;
    if (where === "newSandboxdProvisioner") {
      assert.match(typings, /^export declare const newSandboxdProvisioner\b/m, call);
    } else if (where.startsWith("CommandHandle.")) {
      const member = where.slice("CommandHandle.".length);
      assert.ok(handleTyped.has(member), `${call}: CommandHandle.${member} is not in index.d.ts`);
    } else {
      assert.equal(typeof driver[where], "function", `${call}: the driver has no ${where}`);
      assert.ok(typed.has(where), `${call}: driver.${where} is not in index.d.ts`);
    }
  }
});
