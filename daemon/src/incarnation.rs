//! Incarnation uids: 128 random bits as 32 hex digits, as Kubernetes'
//! `metadata.uid`. Random rather than counted, so no store has to survive
//! for them to stay unique: two daemons, a restart, a restored backup never
//! hand out the same one.

/// A new incarnation uid.
pub fn new_uid() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    #[test]
    fn uids_are_32_hex_digits_and_differ() {
        let (a, b) = (super::new_uid(), super::new_uid());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|byte| byte.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
