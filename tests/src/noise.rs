//! Test data that no two runs of a test share a pattern of, and that
//! compresses to nothing a file system or a pipe could shortcut.

/// `len` bytes of a seeded xorshift.
pub fn noise(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}
