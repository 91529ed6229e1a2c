//! How a client error crosses into JavaScript.
//!
//! napi-rs gives a rejected promise one string, so the reason is a small
//! JSON object, `{"kind": "...", "message": "..."}`, which `index.js`
//! parses into the matching `Error` subclass. The kinds are the daemon's
//! own (`SandboxError::kind`, `conflict` included: a fenced call whose
//! expectation no longer holds); the
//! client's own failures (no daemon, lost call, deadline) are
//! `unavailable`, a socket this user may not open is `permission_denied`,
//! and a protocol mismatch is `failed_precondition`. The message is the
//! daemon's (or the client's) text intact; no message here can carry the
//! token, since neither the daemon nor the client's validation echoes it.

use sandboxd_client::{ClientError, SandboxError};

/// The error kind and message for one client error.
pub(crate) fn kind_and_message(error: &ClientError) -> (&'static str, String) {
    match error {
        ClientError::Sandbox(sandbox) => (sandbox.kind(), daemon_message(sandbox)),
        ClientError::SocketPermissionDenied { .. } => ("permission_denied", error.to_string()),
        ClientError::ProtocolMismatch { .. } => ("failed_precondition", error.to_string()),
        ClientError::NotRunning { .. }
        | ClientError::ConnectFailed { .. }
        | ClientError::NoSocketPath(_)
        | ClientError::Transport(_)
        | ClientError::DeadlineExceeded => ("unavailable", error.to_string()),
    }
}

/// The daemon's own text, without the kind's prefix the Rust `Display`
/// adds (the JavaScript error carries the kind separately).
fn daemon_message(error: &SandboxError) -> String {
    match error {
        SandboxError::InvalidArgument(message)
        | SandboxError::PermissionDenied(message)
        | SandboxError::Unavailable(message)
        | SandboxError::FailedPrecondition(message)
        | SandboxError::Internal(message)
        | SandboxError::NotFound(message)
        | SandboxError::Conflict(message) => message.clone(),
    }
}

/// The napi error `index.js` decodes.
pub(crate) fn to_napi(error: ClientError) -> napi::Error {
    let (kind, message) = kind_and_message(&error);
    let reason = serde_json::json!({ "kind": kind, "message": message });
    napi::Error::from_reason(reason.to_string())
}

/// An argument JavaScript passed that is not one of the values it may be.
pub(crate) fn invalid_argument(message: String) -> napi::Error {
    to_napi(ClientError::Sandbox(SandboxError::InvalidArgument(message)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemon_kinds_pass_through_with_the_message_intact() {
        let error = ClientError::Sandbox(SandboxError::FailedPrecondition(
            "connect sandbox mcp-1 already exists".into(),
        ));
        assert_eq!(
            kind_and_message(&error),
            (
                "failed_precondition",
                "connect sandbox mcp-1 already exists".to_string()
            )
        );
    }

    #[test]
    fn client_failures_are_unavailable_or_permission_denied() {
        let gone = ClientError::NotRunning {
            path: "/run/x.sock".into(),
        };
        assert_eq!(kind_and_message(&gone).0, "unavailable");
        assert_eq!(
            kind_and_message(&ClientError::DeadlineExceeded).0,
            "unavailable"
        );
        let denied = ClientError::SocketPermissionDenied {
            path: "/run/x.sock".into(),
        };
        assert_eq!(kind_and_message(&denied).0, "permission_denied");
        let mismatch = ClientError::ProtocolMismatch {
            daemon: 9,
            client: 4,
        };
        let (kind, message) = kind_and_message(&mismatch);
        assert_eq!(kind, "failed_precondition");
        assert!(message.contains("protocol 9"), "{message}");
    }
}
