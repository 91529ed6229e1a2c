//! What an ensure of a running sandbox asked for that the sandbox does not
//! run with.
//!
//! The fast path never changes a running sandbox (a runner's queue, class
//! and token are fixed when it starts), but it must not pretend it did:
//! the report names the fields that differ, so a caller learns its new
//! queue did not take, and the server logs it.

use sandboxd_protocol::{SandboxEnv, Token};

/// What a running sandbox runs with. The token only as its digest: the
/// daemon keeps no token.
pub struct RunsWith<'a> {
    pub task_queue: &'a str,
    pub caller_class: &'a str,
    /// `None` when the tier does not know it (nothing is then said of it).
    pub token_sha256: Option<&'a str>,
}

/// The names of the fields of `requested` that differ, in a fixed order.
pub fn differing_fields(requested: &SandboxEnv, running: &RunsWith<'_>) -> Vec<String> {
    let mut differs = Vec::new();
    if requested.task_queue != running.task_queue {
        differs.push("task_queue".to_string());
    }
    if requested.caller_class != running.caller_class {
        differs.push("caller_class".to_string());
    }
    if running
        .token_sha256
        .is_some_and(|digest| digest != token_digest(&requested.stigmer_token))
    {
        differs.push("token".to_string());
    }
    differs
}

/// Hex SHA-256 of a token (of "" when none was minted): what the container
/// tiers label or annotate their objects with, and what a running
/// sandbox's token is compared by — never the token itself.
pub fn token_digest(token: &Token) -> String {
    crate::digest::hex(&token_sha256(token))
}

/// The same digest as its 32 bytes, as the process tier keeps it for each
/// of its thousands of sandboxes.
pub fn token_sha256(token: &Token) -> [u8; 32] {
    crate::digest::sha256(token.expose().as_bytes())
}

#[cfg(test)]
mod tests {
    use sandboxd_protocol::Token;

    use super::*;

    fn env(queue: &str, class: &str, token: &str) -> SandboxEnv {
        SandboxEnv {
            task_queue: queue.into(),
            stigmer_token: Token::new(token),
            caller_class: class.into(),
        }
    }

    #[test]
    fn names_each_field_that_differs_and_only_those() {
        let digest = token_digest(&env("", "", "tok").stigmer_token);
        let running = RunsWith {
            task_queue: "q1",
            caller_class: "user",
            token_sha256: Some(&digest),
        };
        assert!(differing_fields(&env("q1", "user", "tok"), &running).is_empty());
        assert_eq!(
            differing_fields(&env("q2", "system", "other"), &running),
            ["task_queue", "caller_class", "token"]
        );
        let unknown_token = RunsWith {
            token_sha256: None,
            ..running
        };
        assert!(differing_fields(&env("q1", "user", "other"), &unknown_token).is_empty());
    }
}
