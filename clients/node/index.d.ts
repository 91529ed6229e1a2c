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

/**
 * The seed's SandboxProvisioner. Each call has the client's deadline (10 s),
 * except a deprovision, which waits at least the daemon's stop grace and 5 s
 * more: a runner that ignores SIGTERM is given the whole grace.
 */
export interface SandboxProvisioner {
  ensureSessionSandbox(sessionId: string, env: SandboxEnvironment): Promise<void>;
  deprovisionSessionSandbox(sessionId: string): Promise<void>;
  ensureWorkflowSandbox(executionId: string, env: SandboxEnvironment): Promise<void>;
  deprovisionWorkflowSandbox(executionId: string): Promise<void>;
  createConnectSandbox(connectRequestId: string, env: SandboxEnvironment): Promise<string>;
  deprovisionConnectSandbox(sandboxId: string): Promise<void>;
  probe(scope: SandboxScope, id: string): Promise<SandboxProbeState>;
}

/** The seed's SandboxDriverConfig (the daemon's own configuration wins; see docs/control-plane.md). */
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
  /** How the runner ended, e.g. `{exited: {code: 3}}`, `"deprovisioned"`, `{"out-of-memory": {limitBytes}}`. */
  readonly reason: unknown;
}

/**
 * One path a process-tier sandbox's view adds over the host's tree
 * (`isolation = "full"`), and the setting that put it there.
 */
export interface ViewEntry {
  /** The path as the sandbox sees it. */
  readonly path: string;
  readonly kind: "read-only" | "read-write" | "hidden" | "private-tmpfs" | "own-instance" | "workspace";
  /** `built-in`, or the config key: `[view] read_only`, `[view] read_write`, `[view] hidden`, `state_dir`, `socket`, `runner_command`, `[limits] ptys`. */
  readonly source: string;
  /** How, in a few words (a tmpfs's size, a hidden path absent on the host, a path bound back under a hidden one). */
  readonly detail: string;
  /** Where it is on the host when that is one sandbox's (the workspace); else `null`. */
  readonly hostPath: string | null;
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
  /** Each path its view adds and why, the workspace with its host path (`describe` only, process tier; empty elsewhere). */
  readonly view?: readonly ViewEntry[];
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
  /** Each path every sandbox's view adds and why (process tier under `isolation = "full"`; empty elsewhere). */
  readonly view?: readonly ViewEntry[];
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
  /**
   * Starts a command in a running sandbox (process tier; protocol 10) with
   * the sandbox's own isolation and answers at once with a handle. Never
   * re-sent after a lost call: retry with the same `tag` (refused while a
   * command holds it) and `attach` by it. Rejects with ConflictError,
   * starting nothing, when `expect` no longer holds; InvalidArgumentError
   * names a bad argument (empty argv, a NUL byte, an unknown option, …).
   */
  exec(scope: SandboxScope, id: string, argv: readonly string[], options?: ExecOptions): Promise<CommandHandle>;
  /** A handle on a command already started, by its id or the tag of a live (or the latest) one. */
  attach(scope: SandboxScope, id: string, command: CommandTarget): Promise<CommandHandle>;
  /** The sandbox's commands: live ones and the proofs still kept, oldest first. */
  commands(scope: SandboxScope, id: string): Promise<CommandInfo[]>;
  /**
   * Runs a command to its end and settles it (the routing seed's retained
   * process): its outcome, code and output as text, and the raw proof.
   * Rejects only when the command could not be started or followed; how
   * it ended, timed out or killed included, is the answer's `outcome`.
   */
  runCommand(
    scope: SandboxScope,
    id: string,
    argv: readonly string[],
    options?: RunCommandOptions,
  ): Promise<RunCommandResult>;
  /**
   * Writes a whole file into the sandbox's workspace (protocol 11), as the
   * sandbox's user, in chunks of MAX_FILE_CHUNK bytes. `path` is relative
   * to the workspace and its directory must exist; the file takes its
   * place only after the last chunk (an upload that fails midway leaves
   * nothing at `path`: call again to start over). `data` is the bytes, a
   * string (UTF-8), or an async iterable of them (a Node Readable, say).
   * `mode` defaults to 0o644; setuid, setgid and sticky are dropped.
   * Works on a stopped sandbox whose workspace is kept. A bad path is an
   * InvalidArgumentError naming it; a link that leads out of the
   * workspace a PermissionDeniedError.
   */
  putFile(
    scope: SandboxScope,
    id: string,
    path: string,
    data: FileData,
    options?: { readonly mode?: number },
  ): Promise<PutReport>;
  /** A whole file of the workspace, read as the sandbox's user, chunk by chunk until its end. */
  getFile(scope: SandboxScope, id: string, path: string): Promise<Buffer>;
  /** One file's facts (a symlink is not followed); NotFoundError when there is none. */
  statFile(scope: SandboxScope, id: string, path: string): Promise<FileStat>;
  /** A directory's entries by name (`""`, the default: the workspace itself). */
  listFiles(scope: SandboxScope, id: string, path?: string): Promise<FileList>;
  /** Removes a file, a symlink (never what it points at) or a directory (with everything in it only when `recursive`). */
  removeFile(scope: SandboxScope, id: string, path: string, options?: { readonly recursive?: boolean }): Promise<void>;
  /**
   * Unpacks a tar archive into the existing directory `dir` of the
   * workspace (`""`: the workspace itself; protocol 12), as the sandbox's
   * user, after its last chunk, merging into directories already there:
   * a corrupt or refused archive leaves nothing behind. An absolute name, a `..`, a device node or a link that leads
   * out is refused by its name; modes lose setuid, setgid and sticky.
   */
  putTar(scope: SandboxScope, id: string, dir: string, archive: FileData): Promise<PutReport>;
  /**
   * A tar stream of `path` (a file, or a directory with everything in it;
   * `""`, the default: the whole workspace; protocol 12), read chunk by
   * chunk as it is iterated: `Buffer.concat` of what it yields is the archive.
   */
  getTar(scope: SandboxScope, id: string, path?: string): AsyncIterableIterator<Buffer>;
  readonly socketPath: string;
}

/** What putFile and putTar take: bytes, a string (UTF-8), or an async iterable of them. */
export type FileData = Uint8Array | string | AsyncIterable<Uint8Array | string>;

/** What an upload ended with. */
export interface PutReport {
  /** The bytes the daemon received. */
  readonly received: number;
  /** True: the file is at its path (the archive unpacked). */
  readonly complete: boolean;
}

/** One file's facts, as statFile and listFiles give them. */
export interface FileStat {
  /** Its name in its directory (`.` for the workspace itself). */
  readonly name: string;
  readonly fileType: "file" | "dir" | "symlink" | "other";
  readonly size: number;
  /** Permission bits and the setuid, setgid and sticky bits. */
  readonly mode: number;
  readonly mtimeUnixMs: number;
}

/** A directory's entries, by name. */
export interface FileList {
  readonly entries: readonly FileStat[];
  /** True when the directory holds more than the daemon lists at once (10,000). */
  readonly truncated: boolean;
}

/** Which incarnation a fenced call expects (`uid` and/or `generation` from an ensure or describe). */
export interface Expectation {
  readonly uid?: string;
  readonly generation?: number;
}

/** exec's options; an option it does not know is an InvalidArgumentError. */
export interface ExecOptions {
  /** Added to the runner's variables (its PATH, HOME, WORKSPACE_ROOT_DIR, …); the runner's own names are refused. */
  readonly env?: Readonly<Record<string, string>>;
  /** Relative to the workspace (the workspace itself when absent); never outside it. */
  readonly workdir?: string;
  /** True: stdin stays open for `handle.stdin`; false (default): /dev/null. */
  readonly stdin?: boolean;
  /** A terminal of this size as stdin, stdout and stderr (output is then `stdout` only). */
  readonly pty?: { readonly rows: number; readonly cols: number };
  /** Killed, and settled `timed-out`, this long after its start. */
  readonly timeoutMs?: number;
  /** A name unique among the sandbox's live commands (1-128 of `A-Za-z0-9_.:-`). */
  readonly tag?: string;
  /** Refused with ConflictError, nothing started, unless the sandbox is this incarnation. */
  readonly expect?: Expectation;
  /** Limits for this command alone, inside its sandbox's. */
  readonly limits?: { readonly cpuMillis?: number; readonly memoryBytes?: number };
}

/** runCommand's options: exec's without a terminal, and `stdin` as the input itself. */
export interface RunCommandOptions extends Omit<ExecOptions, "stdin" | "pty"> {
  /** Written to the command's stdin, which is then closed; absent: stdin is /dev/null. */
  readonly stdin?: string | Uint8Array;
}

/** A command: `{ commandId }` or `{ tag }`. */
export type CommandTarget = { readonly commandId: string } | { readonly tag: string };

/** How a command ended. */
export type CommandOutcome =
  | "exited"
  | "signaled"
  | "timed-out"
  | "out-of-memory"
  | "sandbox-ended"
  | "daemon-stopped"
  | "lost"
  | (string & {});

/** What one output stream carried over the command's life. */
export interface StreamFigures {
  readonly written: number;
  /** Bytes dropped from the daemon's bounded store (counted whether read or not). */
  readonly dropped: number;
}

/** How a command ended: given once, never changed (the daemon's CommandProof). */
export interface CommandProof {
  readonly outcome: CommandOutcome;
  /** The typed reason, e.g. `{exited: {code: 3}}`, `{"timed-out": {limitMs: 300}}`, `"sandbox-ended"`. */
  readonly reason: unknown;
  /** The reason as the daemon's log writes it: `exited (code 3)`, `timed-out (after 300 ms)`. */
  readonly description: string;
  readonly exitCode: number | null;
  readonly signal: number | null;
  /** The code a shell would report: the code, 128 + the signal, 124 for a timeout, 137 when the sandbox or daemon ended it, 1 when lost. */
  readonly shellCode: number;
  readonly startedAtUnixMs: number;
  readonly endedAtUnixMs: number;
  readonly stdout: StreamFigures;
  readonly stderr: StreamFigures;
}

/** One command, as `commands` lists it. */
export interface CommandInfo {
  readonly commandId: string;
  readonly tag: string | null;
  readonly argv: readonly string[];
  /** Its host pid. */
  readonly pid: number;
  readonly state: "running" | "ended";
  readonly startedAtUnixMs: number;
  readonly pty: boolean;
  readonly stdinOpen: boolean;
  readonly generation: number;
  readonly proof: CommandProof | null;
  readonly [more: string]: unknown;
}

/**
 * One output stream, followed by long-poll from the first byte the daemon
 * still keeps to the command's end: each byte once, in order. Iterating
 * again after a `break` continues where it stopped; one iteration at a time.
 */
export interface CommandOutputStream extends AsyncIterable<Buffer> {
  readonly stream: "stdout" | "stderr";
  /** Bytes the daemon dropped (its store was full) before this follower read them. */
  readonly dropped: number;
  /** The stream offset the next read starts at. */
  readonly offset: number;
  /** The proof, once the stream was read to its end. */
  readonly proof: CommandProof | null;
  /** The same pieces with their place: `dropped` bytes were lost just before `start`. */
  chunks(): AsyncIterableIterator<{ readonly data: Buffer; readonly start: number; readonly dropped: number }>;
}

/** A command in a sandbox. */
export interface CommandHandle {
  readonly commandId: string;
  readonly tag: string | null;
  readonly pid: number;
  /** The sandbox incarnation it runs in (null on a handle from `attach`: the daemon does not say). */
  readonly uid: string | null;
  readonly generation: number;
  readonly stdout: CommandOutputStream;
  /** Empty for a command with a terminal. */
  readonly stderr: CommandOutputStream;
  /** Writes go in the order made; each resolves once the daemon took the bytes. */
  readonly stdin: {
    write(data: string | Uint8Array): Promise<void>;
    /** Writes `data` when given, then closes stdin. */
    end(data?: string | Uint8Array): Promise<void>;
  };
  /** To the command's process group: a number, or a name (`SIGTERM` or `TERM`). */
  signal(signal: number | string): Promise<void>;
  resize(rows: number, cols: number): Promise<void>;
  /** Resolves to the proof once the command has ended. */
  wait(): Promise<CommandProof>;
}

/** runCommand's answer. */
export interface RunCommandResult {
  readonly outcome: CommandOutcome;
  /** Its exit code when it exited by itself; else null (see `signal`, `shellCode`). */
  readonly exitCode: number | null;
  readonly signal: number | null;
  /** The typed reason, as the proof has it: `{exited: {code: 3}}`, `{"timed-out": {limitMs: 300}}`, `"sandbox-ended"`. */
  readonly reason: unknown;
  /** The reason as text: `exited (code 3)`, `timed-out (after 300 ms)`. */
  readonly description: string;
  readonly shellCode: number;
  /** The output decoded as UTF-8. */
  readonly stdout: string;
  readonly stderr: string;
  /** Bytes missing from `stdout`/`stderr` because the daemon dropped them first. */
  readonly dropped: { readonly stdout: number; readonly stderr: number };
  /** Why the `stdin` input could not all be written (the command ended without reading it), else null. */
  readonly stdinError: string | null;
  readonly commandId: string;
  readonly proof: CommandProof;
}

/** One event of the stream. */
export interface SandboxdEvent {
  readonly type: "event";
  /** Pass as `since` to resume after this event. */
  readonly cursor: string;
  readonly atUnixMs: number;
  /** `created`, `started`, `exited`, `deprovisioned`, `adopted`, `changed`, `paused`, `resumed`, `command-started`, `command-exited`. */
  readonly kind: string;
  readonly scope: SandboxScope;
  readonly id: string;
  readonly name: string;
  readonly uid: string;
  readonly generation: number;
  /** How the runner ended, for `exited` (and `deprovisioned` when one was stopped); how the command ended, for `command-exited`. */
  readonly exit: (ExitInfo & { readonly outcome: string }) | null;
  /** The command, on `command-started` and `command-exited`. */
  readonly commandId?: string;
  readonly tag?: string | null;
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
/** The most bytes one file or tar chunk carries: 1 MiB less 16 KiB (1032192). */
export declare const MAX_FILE_CHUNK: number;
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
