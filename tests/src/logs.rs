//! Reading a sandbox's whole output through the `logs` call, the way
//! `sandboxctl logs` does: chunk by chunk, following the cursor.

use sandboxd_client::{SandboxdClient, Scope};
use sandboxd_protocol::{LogStart, MAX_LOG_CHUNK};

/// The whole output and how many chunks it took. Asserts every chunk is
/// within the daemon's bound and reports no gap.
pub async fn read_all_logs(client: &SandboxdClient, scope: Scope, id: &str) -> (Vec<u8>, usize) {
    let mut start = LogStart::Beginning;
    let (mut data, mut chunks) = (Vec::new(), 0);
    loop {
        let chunk = client.logs(scope, id, start, u32::MAX).await.unwrap();
        assert!(chunk.data.len() <= MAX_LOG_CHUNK as usize);
        assert!(!chunk.gap, "a gap in a log nothing rotated");
        data.extend_from_slice(&chunk.data);
        chunks += 1;
        start = LogStart::After(chunk.next);
        if chunk.at_end {
            return (data, chunks);
        }
    }
}

/// The numbers of the runner fixture's `--print-lines` lines, in order.
pub fn fixture_line_numbers(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|line| line.strip_prefix("runner-fixture line ")?.parse().ok())
        .collect()
}
