//! `socket-holder SOCKET COUNT`: opens COUNT connections to SOCKET and holds
//! them, saying nothing on any of them, until killed.
//!
//! The tests run it as a uid of their choosing to flood the daemon's socket
//! from a peer that is not root. Once every connect has returned it prints
//! `connected N` (N: how many the kernel accepted; the daemon may close
//! some of them at once, which is what the tests look at).

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, count] = &args[..] else {
        eprintln!("usage: socket-holder SOCKET COUNT");
        return ExitCode::from(2);
    };
    let Ok(count) = count.parse::<usize>() else {
        eprintln!("socket-holder: COUNT '{count}' is not a number");
        return ExitCode::from(2);
    };
    let held: Vec<UnixStream> = (0..count)
        .filter_map(|_| UnixStream::connect(socket).ok())
        .collect();
    println!("connected {}", held.len());
    let _ = std::io::stdout().flush();
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
