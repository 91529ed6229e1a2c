//! Base names and labels, identical on every tier.
//!
//! Base name: `sbx-<scope code>-<first 12 hex chars of SHA-256(id)>`. It is
//! DNS-1123-safe whatever the id's alphabet or length, and it is the only
//! thing derived from an id that ever becomes a path or an object name, so
//! an id like `../../etc` cannot escape anything. The full id travels in a
//! label, so the mapping is recoverable from the runtime alone.

use sha2::{Digest, Sha256};

use crate::Scope;

/// Label naming the owner of a runtime object; the filter for listing and reaping.
pub const LABEL_MANAGED_BY: &str = "stigmer.ai/managed-by";
/// Label carrying the scope (`session`, `workflow`, `connect`).
pub const LABEL_SCOPE: &str = "stigmer.ai/scope";
/// Label carrying the full sandbox id.
pub const LABEL_SANDBOX_ID: &str = "stigmer.ai/sandbox-id";
/// The value of [`LABEL_MANAGED_BY`] on everything we create.
pub const MANAGED_BY_VALUE: &str = "stigmer-server";

/// How many hex characters of the digest a base name keeps.
const DIGEST_HEX_CHARS: usize = 12;

/// `sbx-<code>-<hex12>` for this scope and id.
pub fn base_name(scope: Scope, id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    let mut name = String::with_capacity(8 + DIGEST_HEX_CHARS);
    name.push_str("sbx-");
    name.push_str(scope.code());
    name.push('-');
    for byte in &digest[..DIGEST_HEX_CHARS / 2] {
        name.push(char::from_digit(u32::from(byte >> 4), 16).expect("nibble"));
        name.push(char::from_digit(u32::from(byte & 0xf), 16).expect("nibble"));
    }
    name
}

/// The three labels every runtime object of this sandbox carries.
pub fn labels(scope: Scope, id: &str) -> [(&'static str, String); 3] {
    [
        (LABEL_MANAGED_BY, MANAGED_BY_VALUE.to_string()),
        (LABEL_SCOPE, scope.as_str().to_string()),
        (LABEL_SANDBOX_ID, id.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_names_match_known_sha256_vectors() {
        // sha256("abc") = ba7816bf8f01cfea…, sha256("hello") = 2cf24dba5fb0a30e…
        assert_eq!(base_name(Scope::Session, "abc"), "sbx-ses-ba7816bf8f01");
        assert_eq!(base_name(Scope::Workflow, "hello"), "sbx-wfx-2cf24dba5fb0");
        assert_eq!(base_name(Scope::Connect, "abc"), "sbx-mcp-ba7816bf8f01");
    }

    #[test]
    fn base_names_are_dns_safe_for_hostile_ids() {
        for id in ["../../etc", "ses_ABC/DEF", "ü ñ 漢字", &"x".repeat(253)] {
            let name = base_name(Scope::Session, id);
            assert_eq!(name.len(), 20, "{name}");
            assert!(name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
        }
    }

    #[test]
    fn labels_carry_the_full_id() {
        let labels = labels(Scope::Workflow, "wfx_123");
        assert_eq!(
            labels[0],
            ("stigmer.ai/managed-by", "stigmer-server".to_string())
        );
        assert_eq!(labels[1], ("stigmer.ai/scope", "workflow".to_string()));
        assert_eq!(labels[2], ("stigmer.ai/sandbox-id", "wfx_123".to_string()));
    }
}
