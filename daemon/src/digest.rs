//! Short stable names from a SHA-256: the token digest the container tiers
//! label their objects with, and the hashed suffixes of cgroup, bridge and
//! nftables table names. One helper, so every name is spelt the same way.

use sha2::{Digest, Sha256};

/// The first `bytes` bytes of the SHA-256 of `data`, as lower-case hex
/// (`2 × bytes` characters; all 64 with `bytes` = 32).
pub fn sha256_hex(data: &[u8], bytes: usize) -> String {
    let digest = sha256(data);
    hex(&digest[..bytes.min(digest.len())])
}

/// The SHA-256 of `data`: 32 bytes, for what is kept per sandbox (its
/// hex is twice the size, and on the heap).
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// `bytes` as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut text, byte| {
            let _ = write!(text, "{byte:02x}");
            text
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_vector_whole_and_cut() {
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(sha256_hex(b"", 32), empty);
        assert_eq!(sha256_hex(b"", 6), &empty[..12]);
        assert_eq!(hex(&sha256(b"")), empty);
    }
}
