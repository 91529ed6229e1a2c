//! The native half of the `@stigmer/sandboxd` Node package: a thin N-API
//! binding of the Rust client library (`sandboxd-client`), so the
//! TypeScript control plane speaks the daemon's wire contract through the
//! very code the Rust callers use: one wire implementation, its protocol
//! version check, reconnect rule and deadlines included.
//!
//! The JavaScript side (`index.js`) turns what this returns into the
//! seed's `SandboxProvisioner` and its command handles
//! (`native_commands`); this side only converts values. Errors
//! cross as a JSON reason (`{"kind", "message"}`, see [`error`]) so the
//! JavaScript side can throw one `Error` subclass per kind.

mod error;
mod native_client;
mod native_commands;
mod native_files;

pub use native_client::NativeClient;
