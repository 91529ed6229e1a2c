// A handle on one command: its facts, its two output streams, its stdin,
// signals, its terminal's size and its proof. `exec` and `attach` return
// the same handle; every call it makes names the command by its id (an
// attach by tag is resolved to the id once), so a later command that
// takes the tag is never confused with this one.
import { constants } from "node:os";

import { CommandOutput } from "./command-output.js";
import { InvalidArgumentError } from "./errors.js";

/** How long one wait for the proof lasts at the daemon before it is asked again. */
const WAIT_MS = 30_000;
/**
 * The most one input call carries (the protocol's MAX_COMMAND_INPUT: a
 * request frame's 1 MiB less 16 KiB of room for the call's other fields).
 */
const INPUT_PIECE_BYTES = 1024 * 1024 - 16 * 1024;

/**
 * The handle on command `facts.commandId` of sandbox (scope, id). `calls`
 * are the native calls with typed errors (lib/commands.js).
 */
export function commandHandle(calls, scope, id, facts) {
  const target = { commandId: facts.commandId };
  const read = (stream, offset, maxBytes, waitMs) =>
    calls.output(scope, id, target, stream, offset, maxBytes, waitMs);
  let proof = facts.proof ?? null;
  return {
    commandId: facts.commandId,
    tag: facts.tag ?? null,
    pid: facts.pid,
    uid: facts.uid ?? null,
    generation: facts.generation,
    stdout: new CommandOutput("stdout", read),
    stderr: new CommandOutput("stderr", read),
    stdin: commandInput((data, close) => calls.input(scope, id, target, data, close)),
    async signal(signal) {
      await calls.signal(scope, id, target, signalNumber(signal));
    },
    async resize(rows, cols) {
      for (const [name, value] of [["rows", rows], ["cols", cols]]) {
        if (!Number.isInteger(value) || value < 1) {
          throw new InvalidArgumentError(`${name} must be a whole number of at least 1, not ${String(value)}`);
        }
      }
      await calls.resize(scope, id, target, rows, cols);
    },
    /** The command's proof, once it has ended (waits as long as it runs). */
    async wait() {
      while (proof === null) {
        proof = (await calls.wait(scope, id, target, WAIT_MS)).proof ?? null;
      }
      return proof;
    },
  };
}

/**
 * stdin as `write(data)` and `end(data?)`, each resolving once the daemon
 * took the bytes. Calls go one after another in the order made, so writes
 * that were not awaited still arrive in order.
 */
function commandInput(send) {
  let last = Promise.resolve();
  const inOrder = (run) => {
    const next = last.then(run);
    last = next.catch(() => {});
    return next;
  };
  const sendAll = async (bytes, close) => {
    for (let at = 0; at < bytes.length || (at === 0 && close); at += INPUT_PIECE_BYTES) {
      const piece = bytes.subarray(at, at + INPUT_PIECE_BYTES);
      await send(piece, close && at + INPUT_PIECE_BYTES >= bytes.length);
    }
  };
  return {
    write(data) {
      const bytes = privateCopy(data);
      return inOrder(() => sendAll(bytes, false));
    },
    end(data) {
      const bytes = data === undefined ? Buffer.alloc(0) : privateCopy(data);
      return inOrder(() => sendAll(bytes, true));
    },
  };
}

/**
 * A copy of `data` no caller holds: the native side reads input bytes on
 * another thread, so a Buffer the caller may change must not go there.
 */
function privateCopy(data) {
  if (typeof data === "string") return Buffer.from(data, "utf8");
  if (data instanceof Uint8Array) return Buffer.from(data);
  throw new InvalidArgumentError("stdin data must be a string, a Buffer or a Uint8Array");
}

/** A signal number, or a name (`SIGTERM` or `TERM`) as this host numbers it. */
export function signalNumber(signal) {
  if (Number.isInteger(signal)) return signal;
  if (typeof signal === "string") {
    const name = signal.startsWith("SIG") ? signal : `SIG${signal}`;
    const number = constants.signals[name];
    if (number !== undefined) return number;
  }
  throw new InvalidArgumentError(
    `signal must be a signal number or a name such as SIGTERM, not ${JSON.stringify(signal)}`,
  );
}
