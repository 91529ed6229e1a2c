// exec's JavaScript options as the daemon's ExecRequest (its serde shape,
// protocol/src/commands.rs). Only JavaScript's types are checked here,
// each error naming the option: the rules of the values themselves (argv
// names a program and has no NUL, a tag's characters, a workdir inside the
// workspace, a timeout of at least 1 ms, …) are the protocol's, checked
// by the client library before anything is sent, so they have one source
// and one wording.
import { InvalidArgumentError } from "./errors.js";

const OPTIONS = ["env", "workdir", "stdin", "pty", "timeoutMs", "tag", "expect", "limits"];

/** The request for `argv` and `options`; throws InvalidArgumentError naming a bad option. */
export function execRequest(argv, options = {}) {
  if (!Array.isArray(argv) || !argv.every((arg) => typeof arg === "string")) {
    throw new InvalidArgumentError("argv must be an array of strings");
  }
  knownKeys("exec options", options, OPTIONS);
  return {
    argv: [...argv],
    env: envPairs(options.env),
    workdir: optional("workdir", options.workdir, "string"),
    stdin: optional("stdin", options.stdin, "boolean") ?? false,
    pty: ptySize(options.pty),
    timeout_ms: count("timeoutMs", options.timeoutMs),
    tag: optional("tag", options.tag, "string"),
    limits: limits(options.limits),
    expect: expectation(options.expect),
  };
}

/** `{uid, generation}` as the protocol's Expectation (either may be absent). */
export function expectation(expect) {
  if (expect === undefined || expect === null) return { uid: null, generation: null };
  knownKeys("expect", expect, ["uid", "generation"]);
  return {
    uid: optional("expect.uid", expect.uid, "string"),
    generation: count("expect.generation", expect.generation),
  };
}

function envPairs(env) {
  if (env === undefined || env === null) return [];
  if (typeof env !== "object" || Array.isArray(env)) {
    throw new InvalidArgumentError("env must be an object of variable names to string values");
  }
  return Object.entries(env).map(([name, value]) => {
    if (typeof value !== "string") {
      throw new InvalidArgumentError(`env.${name} must be a string, not ${typeof value}`);
    }
    return [name, value];
  });
}

function ptySize(pty) {
  if (pty === undefined || pty === null) return null;
  knownKeys("pty", pty, ["rows", "cols"]);
  return { rows: count("pty.rows", pty.rows) ?? 0, cols: count("pty.cols", pty.cols) ?? 0 };
}

function limits(given) {
  if (given === undefined || given === null) return { cpu_millis: null, memory_bytes: null };
  knownKeys("limits", given, ["cpuMillis", "memoryBytes"]);
  return {
    cpu_millis: count("limits.cpuMillis", given.cpuMillis),
    memory_bytes: count("limits.memoryBytes", given.memoryBytes),
  };
}

/** A whole number of 0 or more, or null when absent. */
function count(name, value) {
  if (value === undefined || value === null) return null;
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new InvalidArgumentError(`${name} must be a whole number of 0 or more, not ${String(value)}`);
  }
  return value;
}

function optional(name, value, type) {
  if (value === undefined || value === null) return null;
  if (typeof value !== type) {
    throw new InvalidArgumentError(`${name} must be a ${type}, not ${typeof value}`);
  }
  return value;
}

/** Refuses a key the call does not know (a typo such as `timeout` would otherwise do nothing). */
export function knownKeys(what, object, known) {
  if (typeof object !== "object" || object === null) {
    throw new InvalidArgumentError(`${what} must be an object`);
  }
  const unknown = Object.keys(object).filter((key) => !known.includes(key));
  if (unknown.length > 0) {
    throw new InvalidArgumentError(
      `${what}: unknown ${unknown.map((key) => JSON.stringify(key)).join(", ")} (known: ${known.join(", ")})`,
    );
  }
}
