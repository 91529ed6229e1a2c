// Types of @stigmer/sandboxd, kept by hand beside index.js. The seed's
// contract (src/sandbox/provisioner.ts of @stigmer/server) is restated
// here structurally, so this package needs no import from the server: a
// value of these types is assignable to the seed's own.

/** The seed's SandboxEnvironment. */
export interface SandboxEnvironment {
  readonly taskQueue: string;
  /** The runner credential; "" = none minted. Never logged or echoed by this package. */
  readonly stigmerToken: string;
  readonly callerClass: string;
}

export type SandboxProbeState = "absent" | "stopped" | "running";
export type SandboxScope = "session" | "workflow" | "connect";

/** The seed's SandboxProvisioner. */
export interface SandboxProvisioner {
  ensureSessionSandbox(sessionId: string, env: SandboxEnvironment): Promise<void>;
  deprovisionSessionSandbox(sessionId: string): Promise<void>;
  ensureWorkflowSandbox(executionId: string, env: SandboxEnvironment): Promise<void>;
  deprovisionWorkflowSandbox(executionId: string): Promise<void>;
  createConnectSandbox(connectRequestId: string, env: SandboxEnvironment): Promise<string>;
  deprovisionConnectSandbox(sandboxId: string): Promise<void>;
  probe(scope: SandboxScope, id: string): Promise<SandboxProbeState>;
}

/** The seed's SandboxDriverConfig (the daemon's own configuration wins; see README). */
export interface SandboxDriverConfig {
  readonly backendEndpoint: string;
  readonly temporalAddress: string;
  readonly runnerImage: string;
  readonly runnerCommand: string;
  readonly kubernetesNamespace: string;
}

/** The part of the seed's Logger this driver calls. */
export interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** The seed's SandboxProvisionerFactory. */
export type SandboxProvisionerFactory = (options: {
  readonly config: SandboxDriverConfig;
  readonly logger: Logger;
}) => SandboxProvisioner;

/** What an ensure did. */
export interface EnsureReport {
  readonly state: SandboxProbeState;
  /** True when this call started a runner; false on the fast path. */
  readonly created: boolean;
  /** +1 on every (re)start of the sandbox's runner. */
  readonly generation: number;
  readonly pid: number | null;
  /** On the fast path, requested fields that differ from the running sandbox's (`task_queue`, `caller_class`, `token`). */
  readonly differs: readonly string[];
  /** The incarnation's id (32 hex digits): new at each create, kept across respawns and restarts. */
  readonly uid: string;
}

export interface ExitInfo {
  readonly code: number | null;
  readonly signal: number | null;
  readonly atUnixMs: number;
  readonly oomKilled: boolean;
  readonly oomLimitBytes: number | null;
  readonly pidsRefused: number;
  readonly pidsLimit: number | null;
  readonly diskLimitBytes: number | null;
  /** How the runner ended, e.g. `{exited: {code: 3}}`, `"deprovisioned"`, `{outOfMemory: {...}}`. */
  readonly reason: unknown;
}

/** One sandbox's facts (never the token). Fields the daemon adds later appear as extra keys. */
export interface SandboxInfo {
  /** `sbx-<code>-<hex12>`, the runtime object's name. */
  readonly name: string;
  readonly scope: SandboxScope;
  readonly id: string;
  readonly state: SandboxProbeState;
  readonly pid: number | null;
  readonly containerId: string | null;
  readonly image: string | null;
  readonly generation: number;
  readonly startedAtUnixMs: number | null;
  readonly restarts: number;
  readonly lastExit: ExitInfo | null;
  readonly taskQueue: string;
  readonly callerClass: string;
  readonly egress: Record<string, unknown> | null;
  readonly cluster: Record<string, unknown> | null;
  readonly isolation: readonly { readonly name: string; readonly inForce: boolean; readonly detail: string }[];
  /** Live figures of a running sandbox (`describe` only; protocol 8): `memoryBytes`, `memoryPeakBytes`, `memoryLimitBytes`, `tasks`, `tasksLimit`, `cpuUsec`, `forksRefused`, `oomKills`, `workspaceBytes`, `diskLimitBytes`, `unixUid`, `cgroup`, `sampledAtUnixMs`, each `null` when the tier cannot tell. */
  readonly usage?: Record<string, number | string | null> | null;
  /** Set while paused (protocol 8): since when; `state` then says `stopped`. */
  readonly pausedSinceUnixMs?: number | null;
  readonly [more: string]: unknown;
}

/** Facts about the daemon. */
export interface DaemonStatus {
  readonly version: string;
  readonly protocolVersion: number;
  readonly driver: string;
  readonly driverHealth: string;
  readonly uptimeSecs: number;
  readonly counts: {
    readonly session: number;
    readonly workflow: number;
    readonly connect: number;
    readonly running: number;
    readonly stopped: number;
  };
  readonly socketPath: string;
  readonly stateDir: string;
  readonly [more: string]: unknown;
}

/** The seed's contract plus the typed extras this driver offers. */
export interface SandboxdProvisioner extends SandboxProvisioner {
  /** Ensure a session or workflow sandbox and say what it did. */
  ensure(scope: "session" | "workflow", id: string, env: SandboxEnvironment): Promise<EnsureReport>;
  describe(scope: SandboxScope, id: string): Promise<SandboxInfo>;
  list(scope?: SandboxScope): Promise<SandboxInfo[]>;
  status(): Promise<DaemonStatus>;
  /**
   * Deprovision only if the sandbox is still the incarnation the caller saw
   * (`uid` and/or `generation` from an ensure or describe): rejects with
   * ConflictError, changing nothing, when it is not; one already gone is success.
   */
  deprovisionFenced(
    scope: SandboxScope,
    id: string,
    expect: { readonly uid?: string; readonly generation?: number },
  ): Promise<void>;
  /**
   * The daemon's event stream as an async iterator (a long-poll underneath):
   * from `since` (a cursor of an event already seen), else from the oldest
   * event kept; only `scope`/`id` when given. Ends when the caller stops
   * iterating (`break`) or `signal` aborts. An `expired` item means events
   * were missed (a daemon restart, or too far behind): relist, the stream
   * goes on from the present.
   */
  events(options?: {
    readonly since?: string;
    readonly scope?: SandboxScope;
    readonly id?: string;
    readonly signal?: AbortSignal;
  }): AsyncIterableIterator<SandboxdEvent | SandboxdEventsExpired>;
  readonly socketPath: string;
}

/** One event of the stream. */
export interface SandboxdEvent {
  readonly type: "event";
  /** Pass as `since` to resume after this event. */
  readonly cursor: string;
  readonly atUnixMs: number;
  /** `created`, `started`, `exited`, `deprovisioned`, `adopted`, `changed`, `paused`, `resumed`. */
  readonly kind: string;
  readonly scope: SandboxScope;
  readonly id: string;
  readonly name: string;
  readonly uid: string;
  readonly generation: number;
  /** How the runner ended, for `exited` (and `deprovisioned` when one was stopped). */
  readonly exit: ExitInfo | null;
  readonly [more: string]: unknown;
}

/** Events were missed: relist, then carry on (the stream resumes from `now`). */
export interface SandboxdEventsExpired {
  readonly type: "expired";
  readonly reason: string;
  readonly now: string;
}

/**
 * Connects (synchronously) to `$SANDBOXD_SOCKET`, else /run/stigmer/sandboxd.sock,
 * and checks the protocol version: throws UnavailableError (no daemon),
 * PermissionDeniedError (socket not openable) or FailedPreconditionError
 * (protocol mismatch). Warns once, in the background, where `config`
 * differs from what the daemon's `status` reports.
 */
export declare const newSandboxdProvisioner: (options: {
  readonly config: SandboxDriverConfig;
  readonly logger: Logger;
}) => SandboxdProvisioner;

export declare const SYSTEM_SOCKET: "/run/stigmer/sandboxd.sock";
export declare function sandboxdSocket(): string;
export declare const SANDBOXD_PROVISIONER_TYPE: "sandboxd";

/** An extension unit in the shape the seed's resolveExtensions takes. */
export declare const sandboxdExtension: {
  readonly name: "sandboxd";
  readonly drivers: {
    readonly sandboxProvisionerDrivers: ReadonlyMap<string, SandboxProvisionerFactory>;
  };
};

/** The differences between the control plane's config and the daemon's `status` (raw, snake_case). */
export declare function configDifferences(
  config: SandboxDriverConfig,
  status: { readonly driver: string; readonly driver_health: string },
): string[];

export type SandboxdErrorKind =
  | "invalid_argument"
  | "permission_denied"
  | "unavailable"
  | "failed_precondition"
  | "not_found"
  | "internal"
  | "conflict"
  | (string & {});

export declare class SandboxdError extends Error {
  readonly kind: SandboxdErrorKind;
  /** The daemon's own message, intact. */
  readonly daemonMessage: string;
}
export declare class InvalidArgumentError extends SandboxdError {
  readonly kind: "invalid_argument";
}
export declare class PermissionDeniedError extends SandboxdError {
  readonly kind: "permission_denied";
}
export declare class UnavailableError extends SandboxdError {
  readonly kind: "unavailable";
}
export declare class FailedPreconditionError extends SandboxdError {
  readonly kind: "failed_precondition";
}
export declare class NotFoundError extends SandboxdError {
  readonly kind: "not_found";
}
export declare class InternalError extends SandboxdError {
  readonly kind: "internal";
}
export declare class ConflictError extends SandboxdError {
  readonly kind: "conflict";
}
