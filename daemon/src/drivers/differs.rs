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
    pub token_sha256: Option<TokenDigest<'a>>,
}

/// A running sandbox's token digest, as its tier keeps it.
#[derive(Clone, Copy)]
pub enum TokenDigest<'a> {
    /// As hex, from a container's label or a Deployment's annotation.
    Hex(&'a str),
    /// As its 32 bytes (the process tier's table): compared as bytes, so
    /// the ensure fast path makes no hex of either side.
    Sha256(&'a [u8; 32]),
}

impl TokenDigest<'_> {
    fn is_of(self, token: &Token) -> bool {
        match self {
            TokenDigest::Hex(hex) => hex == token_digest(token),
            TokenDigest::Sha256(bytes) => *bytes == token_sha256(token),
        }
    }
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
        .is_some_and(|digest| !digest.is_of(&requested.stigmer_token))
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
        let hex = token_digest(&env("", "", "tok").stigmer_token);
        let bytes = token_sha256(&env("", "", "tok").stigmer_token);
        for digest in [TokenDigest::Hex(&hex), TokenDigest::Sha256(&bytes)] {
            let running = RunsWith {
                task_queue: "q1",
                caller_class: "user",
                token_sha256: Some(digest),
            };
            assert!(differing_fields(&env("q1", "user", "tok"), &running).is_empty());
            assert_eq!(
                differing_fields(&env("q2", "system", "other"), &running),
                ["task_queue", "caller_class", "token"]
            );
        }
        let running = RunsWith {
            task_queue: "q1",
            caller_class: "user",
            token_sha256: None,
        };
        let unknown_token = RunsWith {
            token_sha256: None,
            ..running
        };
        assert!(differing_fields(&env("q1", "user", "other"), &unknown_token).is_empty());
    }
}
