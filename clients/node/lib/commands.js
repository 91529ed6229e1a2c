// Commands in a sandbox (protocol 10) on the driver: `exec` and `attach`
// return a handle (lib/command-handle.js), `commands` lists them, and
// `runCommand` is the routing seed's shape for a retained process: run
// it, collect its output, settle it with its proof.
//
// Calls that change something go through the driver's in-flight cap;
// the long-polls (output, wait) through a cap of their own, so followers
// waiting on quiet commands never hold a runner call back, and the two
// together stay under the daemon's per-connection cap (lib/limiter.js).
import { camel } from "./shape.js";
import { commandHandle } from "./command-handle.js";
import { readAll } from "./command-output.js";
import { execRequest, knownKeys } from "./exec-request.js";
import { InvalidArgumentError } from "./errors.js";

const RUN_OPTIONS = ["env", "workdir", "stdin", "timeoutMs", "tag", "expect", "limits"];

/**
 * The driver's command calls over `client` (a NativeClient); `call` and
 * `poll` run one native call under their caps and type its errors.
 */
export function commandCalls(client, { call, poll }) {
  const calls = nativeCalls(client, call, poll);

  async function exec(scope, id, argv, options = {}) {
    const request = execRequest(argv, options);
    const started = await calls.exec(scope, id, request);
    return commandHandle(calls, scope, id, { ...started, tag: request.tag });
  }

  async function attach(scope, id, command) {
    knownKeys("command", command, ["commandId", "tag"]);
    for (const [key, value] of Object.entries(command)) {
      if (typeof value !== "string") {
        throw new InvalidArgumentError(`command.${key} must be a string, not ${typeof value}`);
      }
    }
    const info = await calls.wait(scope, id, command, 0);
    return commandHandle(calls, scope, id, info);
  }

  async function commands(scope, id) {
    return camel(await call(() => client.commands(scope, id)));
  }

  async function runCommand(scope, id, argv, options = {}) {
    knownKeys("runCommand options", options, RUN_OPTIONS);
    const { stdin, ...rest } = options;
    if (stdin != null && typeof stdin !== "string" && !(stdin instanceof Uint8Array)) {
      throw new InvalidArgumentError("stdin must be a string, a Buffer or a Uint8Array");
    }
    const handle = await exec(scope, id, argv, { ...rest, stdin: stdin != null });
    // A command may end without reading all its input; that is not this
    // call's failure (its proof says how it ended), but it is reported.
    const feeding = stdin == null ? null : handle.stdin.end(stdin).then(() => null, (error) => error);
    const [stdout, stderr] = await Promise.all([readAll(handle.stdout), readAll(handle.stderr)]);
    const inputError = await feeding;
    return settled(handle, stdout, stderr, inputError);
  }

  return { exec, attach, commands, runCommand };
}

/**
 * runCommand's answer: the proof's outcome, code and reason (typed, as
 * the proof and a command-exited event carry it; `description` is its
 * text) and the output as text.
 */
function settled(handle, stdout, stderr, inputError) {
  const proof = handle.stdout.proof;
  return {
    outcome: proof.outcome,
    exitCode: proof.exitCode ?? null,
    signal: proof.signal ?? null,
    reason: proof.reason,
    description: proof.description,
    shellCode: proof.shellCode,
    stdout: stdout.toString("utf8"),
    stderr: stderr.toString("utf8"),
    dropped: { stdout: handle.stdout.dropped, stderr: handle.stderr.dropped },
    stdinError: inputError?.message ?? null,
    commandId: handle.commandId,
    proof,
  };
}

/** The native command calls, capped, with typed errors and camelCase reports. */
function nativeCalls(client, call, poll) {
  return {
    exec: async (scope, id, request) => camel(await call(() => client.exec(scope, id, request))),
    output: async (scope, id, target, stream, offset, maxBytes, waitMs) => {
      const chunk = await poll(() =>
        client.commandOutput(scope, id, target, stream, offset, maxBytes, waitMs),
      );
      return { ...chunk, proof: camel(chunk.proof ?? null) };
    },
    wait: async (scope, id, target, waitMs) =>
      camel(await poll(() => client.commandWait(scope, id, target, waitMs))),
    input: (scope, id, target, data, close) =>
      call(() => client.commandInput(scope, id, target, data, close)),
    signal: (scope, id, target, signal) =>
      call(() => client.commandSignal(scope, id, target, signal)),
    resize: (scope, id, target, rows, cols) =>
      call(() => client.commandResize(scope, id, target, rows, cols)),
  };
}
