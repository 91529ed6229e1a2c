//! `bench-runner`: the benchmark's runner. It does nothing but wait for
//! SIGTERM and exit 0 on it, so what the benchmark measures is the cost of
//! starting and stopping a process, not of the runner's own work.
//!
//! SIGTERM is blocked before anything else, so one that arrives while the
//! program is still starting is pending, and `sigwait` returns at once.
//!
//! `bench-runner --write-bytes N` is the output row's writer instead: it
//! writes N bytes of text lines to stdout in 1 MiB writes, then the line
//! `bench-runner wrote N bytes`, and exits 0 — as fast as the reader lets it.

use std::io::Write;

fn main() {
    let mut args = std::env::args().skip(1);
    if let (Some(flag), Some(count)) = (args.next(), args.next()) {
        let Some(total) = (flag == "--write-bytes")
            .then(|| count.parse::<u64>().ok())
            .flatten()
        else {
            eprintln!("bench-runner: usage: bench-runner [--write-bytes N]");
            std::process::exit(2);
        };
        std::process::exit(match write_bytes(total) {
            Ok(()) => 0,
            Err(error) => {
                eprintln!("bench-runner: cannot write to stdout: {error}");
                1
            }
        });
    }
    // SAFETY: plain libc calls on a zeroed, then initialised, signal set.
    unsafe {
        let mut term: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut term);
        libc::sigaddset(&mut term, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &term, std::ptr::null_mut());
        let mut received = 0;
        while libc::sigwait(&term, &mut received) != 0 {}
    }
}

/// `total` bytes of 64-byte lines, then the closing line.
fn write_bytes(total: u64) -> std::io::Result<()> {
    const WRITE: usize = 1 << 20;
    let line = format!("{:<63}\n", "bench-runner output line");
    let block = line.repeat(WRITE / line.len());
    let mut stdout = std::io::stdout().lock();
    let mut left = total;
    while left > 0 {
        let take = left.min(block.len() as u64) as usize;
        stdout.write_all(&block.as_bytes()[..take])?;
        left -= take as u64;
    }
    writeln!(stdout, "bench-runner wrote {total} bytes")?;
    stdout.flush()
}
