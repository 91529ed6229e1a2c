// newSandboxdProvisioner: the seed's SandboxProvisionerFactory over the
// sandboxd daemon. Every call goes through the Rust client library (the
// native addon), so the wire, the protocol-version check, the reconnect
// after a daemon restart and the per-call deadline are that library's.
//
// The scope rules are the seed's (provisioner.ts): session and workflow
// ensures are idempotent state machines and safe to race (the daemon
// serialises them per sandbox, so concurrent ensures of one id start one
// runner); connect creation is NOT idempotent: it returns the sandbox id
// to deprovision by, fails when that request's sandbox exists, and is
// never re-sent after a lost call. Failures reject the promise with a
// typed SandboxdError; whether a failure is fatal is the caller's posture
// (steps.ts treats workflow ensures as critical and session ones not),
// so this driver never swallows one.
//
// The token is handed to the native side and nowhere else: no log line
// here carries the environment, and the errors are built from the
// daemon's kind and message only (errors.js).
import { native } from "./native.js";
import { call as callNative, callSync } from "./errors.js";
import { configDifferences } from "./config-check.js";
import { camel } from "./shape.js";
import { limiter, maxInFlightFromEnv, MAX_POLLS_IN_FLIGHT } from "./limiter.js";
import { commandCalls } from "./commands.js";
import { fileCalls } from "./files.js";

/** The system daemon's socket, used when SANDBOXD_SOCKET is unset or empty. */
export const SYSTEM_SOCKET = "/run/stigmer/sandboxd.sock";

/** The socket a provisioner connects to: `$SANDBOXD_SOCKET`, else the system path. */
export function sandboxdSocket() {
  const explicit = process.env.SANDBOXD_SOCKET;
  return explicit !== undefined && explicit !== "" ? explicit : SYSTEM_SOCKET;
}

export const newSandboxdProvisioner = ({ config, logger }) => {
  const socket = sandboxdSocket();
  const limited = limiter(maxInFlightFromEnv());
  const pollLimited = limiter(MAX_POLLS_IN_FLIGHT);
  // Synchronous, like the factory: no daemon, or one speaking another
  // protocol, fails the control plane's boot here with a typed error.
  const client = callSync(() => native().NativeClient.connect(socket));
  logger.info("sandboxd provisioner connected", { socket: client.socketPath });
  warnOnceWhereConfigDiffers(client, config, logger);
  // Every call below goes through the in-flight cap; a command's
  // long-polls (output, wait) through their own (limiter.js).
  const call = (run) => limited(() => callNative(run));
  const poll = (run) => pollLimited(() => callNative(run));

  async function ensure(scope, id, env) {
    const report = await call(() =>
      client.ensure(scope, id, env.taskQueue, env.stigmerToken, env.callerClass),
    );
    if (report.differs.length > 0) {
      // The fast path changed nothing; the daemon says which requested
      // fields differ from the running sandbox's (never their values).
      logger.warn("sandboxd sandbox already running with other settings", {
        scope,
        id,
        differs: report.differs.join(","),
      });
    }
    return camel(report);
  }

  const provisioner = {
    async ensureSessionSandbox(sessionId, env) {
      await ensure("session", sessionId, env);
    },
    async deprovisionSessionSandbox(sessionId) {
      await call(() => client.deprovision("session", sessionId));
    },
    async ensureWorkflowSandbox(executionId, env) {
      await ensure("workflow", executionId, env);
    },
    async deprovisionWorkflowSandbox(executionId) {
      await call(() => client.deprovision("workflow", executionId));
    },
    async createConnectSandbox(connectRequestId, env) {
      return call(() =>
        client.createConnect(connectRequestId, env.taskQueue, env.stigmerToken, env.callerClass),
      );
    },
    async deprovisionConnectSandbox(sandboxId) {
      await call(() => client.deprovision("connect", sandboxId));
    },
    async probe(scope, id) {
      return call(() => client.probe(scope, id));
    },

    // Beyond the seed's interface (typed in index.d.ts).
    /** What an ensure did (`created`, `generation`, `pid`, `differs`). */
    async ensure(scope, id, env) {
      return ensure(scope, id, env);
    },
    /** One sandbox's facts; an unknown one is `state: "absent"`. */
    async describe(scope, id) {
      return camel(await call(() => client.describe(scope, id)));
    },
    /** Every sandbox the daemon owns, optionally of one scope. */
    async list(scope) {
      return camel(await call(() => client.list(scope ?? null)));
    },
    /** Facts about the daemon. */
    async status() {
      return camel(await call(() => client.status()));
    },
    /** Deprovision only if it is still the incarnation `expect` names (ConflictError if not). */
    async deprovisionFenced(scope, id, expect = {}) {
      const uid = expect.uid ?? null;
      const generation = expect.generation ?? null;
      await call(() => client.deprovisionFenced(scope, id, uid, generation));
    },
    /** The event stream as an async iterator over the daemon's long-poll. */
    events(options = {}) {
      return followEvents(client, options);
    },
    /** Commands in a sandbox: exec, attach, commands, runCommand (lib/commands.js). */
    ...commandCalls(client, { call, poll }),
    /** Files in a sandbox's workspace: putFile, getFile, statFile, listFiles, removeFile, putTar, getTar (lib/files.js). */
    ...fileCalls(client, { call }),
    /** The socket this provisioner talks to. */
    get socketPath() {
      return client.socketPath;
    },
  };
  return provisioner;
};

/** How long one long-poll waits for an event, and how many it takes at once. */
const EVENTS_WAIT_MS = 10_000;
const EVENTS_BATCH = 256;

/**
 * The async iterator behind `events()`: one long-poll at a time (outside
 * the in-flight cap: a waiting poll holds no runner call back), each
 * event filtered by scope and id, an expiry passed on and followed from
 * the daemon's present.
 */
async function* followEvents(client, { since, scope, id, signal } = {}) {
  let cursor = since ?? null;
  while (!signal?.aborted) {
    const page = await callNative(() => client.events(cursor, EVENTS_BATCH, EVENTS_WAIT_MS));
    if (page.type === "expired") {
      cursor = page.now;
      yield { type: "expired", reason: page.reason, now: page.now };
      continue;
    }
    cursor = page.next;
    for (const event of page.events) {
      if ((scope && event.scope !== scope) || (id && event.id !== id)) continue;
      yield eventItem(event);
      if (signal?.aborted) return;
    }
  }
}

/**
 * An event as the iterator yields it: camelCase, and a command event's
 * command flattened to `commandId` and `tag` beside the sandbox's fields.
 */
function eventItem(event) {
  const { command, ...rest } = camel(event);
  const item = { type: "event", ...rest };
  if (command != null) {
    item.commandId = command.commandId;
    item.tag = command.tag ?? null;
  }
  return item;
}

/** Compares the control plane's driver config with `status`, once, in the background. */
function warnOnceWhereConfigDiffers(client, config, logger) {
  callNative(() => client.status()).then(
    (status) => {
      const differences = configDifferences(config, status);
      if (differences.length > 0) {
        logger.warn(
          "sandboxd runs its own runner configuration; the control plane's SandboxDriverConfig differs from it (the daemon's wins)",
          { driver: status.driver, differences: differences.join("; ") },
        );
      }
    },
    (error) => {
      logger.warn("sandboxd status unavailable: the driver config was not compared", {
        error: error.message,
      });
    },
  );
}
