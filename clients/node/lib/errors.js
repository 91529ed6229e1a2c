// The errors a TypeScript caller can act on: one Error subclass per
// daemon error kind, each with `kind` and the daemon's message intact
// (`daemonMessage`; `message` is `<kind>: <daemonMessage>`).
//
// The native side rejects with a JSON reason (clients/node/src/error.rs);
// fromNative turns it into one of these. The error is built here, in
// JavaScript, from the kind and the message only, so its stack holds this
// package's frames and nothing the call was given (never the token).

/** The base class: every error this package throws for a daemon or client failure. */
export class SandboxdError extends Error {
  constructor(kind, daemonMessage) {
    super(`${kind}: ${daemonMessage}`);
    this.name = "SandboxdError";
    /** The daemon's error kind (`invalid_argument`, `unavailable`, …). */
    this.kind = kind;
    /** The daemon's (or the client library's) own text, unchanged. */
    this.daemonMessage = daemonMessage;
  }
}

/** The request itself is malformed: retrying it unchanged cannot succeed. */
export class InvalidArgumentError extends SandboxdError {
  constructor(message) {
    super("invalid_argument", message);
    this.name = "InvalidArgumentError";
  }
}

/** This caller may not make the call (the daemon's access lists, or the socket's mode). */
export class PermissionDeniedError extends SandboxdError {
  constructor(message) {
    super("permission_denied", message);
    this.name = "PermissionDeniedError";
  }
}

/** The daemon or its runtime cannot do it now (not running, lost call, deadline): retry later. */
export class UnavailableError extends SandboxdError {
  constructor(message) {
    super("unavailable", message);
    this.name = "UnavailableError";
  }
}

/** Well-formed, but the state does not allow it (a connect sandbox that exists; a protocol mismatch). */
export class FailedPreconditionError extends SandboxdError {
  constructor(message) {
    super("failed_precondition", message);
    this.name = "FailedPreconditionError";
  }
}

/** The sandbox the call is about does not exist. */
export class NotFoundError extends SandboxdError {
  constructor(message) {
    super("not_found", message);
    this.name = "NotFoundError";
  }
}

/** A bug or an unexpected condition inside the daemon. */
export class InternalError extends SandboxdError {
  constructor(message) {
    super("internal", message);
    this.name = "InternalError";
  }
}

/** A fenced call whose expectation (uid, generation) no longer holds: nothing was changed. */
export class ConflictError extends SandboxdError {
  constructor(message) {
    super("conflict", message);
    this.name = "ConflictError";
  }
}

/**
 * Kind → class. A kind the protocol gains later reaches callers as a
 * plain SandboxdError with that `kind` until it has its entry here.
 */
const CLASSES = new Map([
  ["invalid_argument", InvalidArgumentError],
  ["permission_denied", PermissionDeniedError],
  ["unavailable", UnavailableError],
  ["failed_precondition", FailedPreconditionError],
  ["not_found", NotFoundError],
  ["internal", InternalError],
  ["conflict", ConflictError],
]);

/** The typed error for a native rejection (anything else is returned unchanged). */
export function fromNative(error) {
  let decoded;
  try {
    decoded = JSON.parse(error?.message ?? "");
  } catch {
    return error;
  }
  if (typeof decoded?.kind !== "string" || typeof decoded?.message !== "string") {
    return error;
  }
  const Class = CLASSES.get(decoded.kind);
  return Class === undefined
    ? new SandboxdError(decoded.kind, decoded.message)
    : new Class(decoded.message);
}

/** Runs a native call, turning its failure into the typed error. */
export async function call(run) {
  try {
    return await run();
  } catch (error) {
    throw fromNative(error);
  }
}

/** The same for the synchronous construction. */
export function callSync(run) {
  try {
    return run();
  } catch (error) {
    throw fromNative(error);
  }
}
