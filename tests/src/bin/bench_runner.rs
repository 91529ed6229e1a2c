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
//!
//! `bench-runner --connect-loop HOST:PORT N` is the egress row's client
//!: N TCP connects to a listener of the benchmark's, one after
//! another, each closed at once, then one line on stdout,
//! `bench-runner connects N refused R other O in U us slowest S us`, and
//! exit 0. Only a
//! loopback address is accepted: the benchmark sends traffic nowhere else.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => {}
        ["--write-bytes", count] => {
            let Ok(total) = count.parse::<u64>() else {
                usage();
            };
            std::process::exit(match write_bytes(total) {
                Ok(()) => 0,
                Err(error) => {
                    eprintln!("bench-runner: cannot write to stdout: {error}");
                    1
                }
            });
        }
        ["--connect-loop", address, count] => {
            let (Ok(address), Ok(count)) = (address.parse::<SocketAddr>(), count.parse::<u64>())
            else {
                usage();
            };
            if !address.ip().is_loopback() {
                eprintln!("bench-runner: {address} is not a loopback address");
                std::process::exit(2);
            }
            std::process::exit(match connect_loop(address, count) {
                Ok(()) => 0,
                Err(error) => {
                    eprintln!("bench-runner: cannot write to stdout: {error}");
                    1
                }
            });
        }
        _ => usage(),
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

fn usage() -> ! {
    eprintln!(
        "bench-runner: usage: bench-runner [--write-bytes N | --connect-loop 127.0.0.1:PORT N]"
    );
    std::process::exit(2);
}

/// `count` connects to `address`, each closed at once; counts how many
/// were refused (a reset: what `strict` answers) and how many failed
/// otherwise, and prints them with the loop's time and the slowest
/// connect's (a second or more is a SYN retransmitted: the listener's
/// queue was full, and the figure is the listener's, not the posture's).
fn connect_loop(address: SocketAddr, count: u64) -> std::io::Result<()> {
    let (mut connected, mut refused, mut other) = (0u64, 0u64, 0u64);
    let mut slowest = 0;
    let started = Instant::now();
    for _ in 0..count {
        let one = Instant::now();
        let result = TcpStream::connect(address);
        slowest = slowest.max(one.elapsed().as_micros());
        match result {
            Ok(stream) => {
                connected += 1;
                drop(stream);
            }
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => refused += 1,
            Err(_) => other += 1,
        }
    }
    let elapsed = started.elapsed().as_micros();
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "bench-runner connects {connected} refused {refused} other {other} in {elapsed} us slowest {slowest} us"
    )?;
    stdout.flush()
}
