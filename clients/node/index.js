// @stigmer/sandboxd: the `sandboxd` sandbox provisioner for the Stigmer
// control plane (the seed's SandboxProvisioner contract), over the
// sandboxd daemon's Rust client library. Types: index.d.ts.
export { newSandboxdProvisioner, sandboxdSocket, SYSTEM_SOCKET } from "./lib/provisioner.js";
export { sandboxdExtension, SANDBOXD_PROVISIONER_TYPE } from "./lib/extension.js";
export { configDifferences } from "./lib/config-check.js";
export { MAX_FILE_CHUNK } from "./lib/files.js";
export {
  SandboxdError,
  InvalidArgumentError,
  PermissionDeniedError,
  UnavailableError,
  FailedPreconditionError,
  NotFoundError,
  InternalError,
  ConflictError,
} from "./lib/errors.js";
