//! `--serve-net PORT` and `--probe tcp|udp ADDRESS`: the runner fixture as
//! a network peer, for the tests that sandboxes have no road to each
//! other.
//!
//! `--serve-net PORT` listens on TCP and UDP on every address (`[::]`,
//! dual stack, or `0.0.0.0` where IPv6 is off; PORT 0 lets the kernel
//! choose) before `pid` is written, and writes the ports to `net` (`tcp N`
//! and `udp N` lines). TCP connections are accepted and closed; every UDP
//! datagram is answered with `pong`. Then, until SIGTERM, it answers probe
//! requests: a file `probe-NAME` holding `tcp ADDRESS` or `udp ADDRESS`
//! (written by the test, as root) gets `probe-NAME.errno` next to it,
//! the errno of that probe made from inside this sandbox. `tcp-repeat
//! ADDRESS N` makes N TCP connects one after another, each closed at once,
//! and answers how many connected instead.
//!
//! `--probe tcp|udp ADDRESS` makes one probe, prints `errno N` and exits
//! (for `docker exec` into a container, which has no shell).
//!
//! A probe's errno is 0 when it reached a listener: a TCP connect that
//! completed (5 s at most, else ETIMEDOUT), a UDP `ping` that got a reply
//! (3 s at most, else EAGAIN). A refused one is usually ECONNREFUSED (a
//! TCP reset, or an ICMP port unreachable on the connected UDP socket),
//! EPERM when the sender's own output rules drop it.

use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::time::Duration;

/// The listeners' threads run until the process ends.
pub fn listen(workspace: &Path, port: u16) -> std::io::Result<()> {
    let tcp = TcpListener::bind(("::", port)).or_else(|_| TcpListener::bind(("0.0.0.0", port)))?;
    let udp = UdpSocket::bind(("::", port)).or_else(|_| UdpSocket::bind(("0.0.0.0", port)))?;
    let ports = format!(
        "tcp {}\nudp {}\n",
        tcp.local_addr()?.port(),
        udp.local_addr()?.port()
    );
    std::thread::spawn(move || {
        for stream in tcp.incoming() {
            drop(stream);
        }
    });
    std::thread::spawn(move || {
        let mut buffer = [0u8; 64];
        while let Ok((_, peer)) = udp.recv_from(&mut buffer) {
            let _ = udp.send_to(b"pong", peer);
        }
    });
    super::write_atomically(workspace, "net", ports.as_bytes())
}

/// Answers probe requests until SIGTERM (then `false`).
pub fn serve(workspace: &Path) -> bool {
    let mut answered = HashSet::new();
    loop {
        for request in pending(workspace, &answered) {
            let text = std::fs::read_to_string(workspace.join(&request)).unwrap_or_default();
            let words: Vec<&str> = text.split_whitespace().collect();
            let errno = match words[..] {
                ["tcp-repeat", address, count] => repeat(address, count),
                [protocol, address] => probe(protocol, address),
                _ => libc::EINVAL,
            };
            let answer = format!("{errno}\n");
            let name = format!("{request}.errno");
            if let Err(error) = super::write_atomically(workspace, &name, answer.as_bytes()) {
                eprintln!("runner-fixture: cannot write {name}: {error}");
            }
            answered.insert(request);
        }
        if super::attack::sigterm_pending_within(Duration::from_millis(10)) {
            return false;
        }
    }
}

/// `probe-*` requests not answered yet.
fn pending(workspace: &Path, answered: &HashSet<String>) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(workspace) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.starts_with("probe-") && !name.ends_with(".errno"))
        .filter(|name| !answered.contains(name))
        .collect()
}

/// One probe of `address` over `protocol` (`tcp` or `udp`): its errno.
pub fn probe(protocol: &str, address: &str) -> i32 {
    let Ok(address) = address.parse::<SocketAddr>() else {
        eprintln!("runner-fixture: bad probe address {address:?}");
        return libc::EINVAL;
    };
    let outcome = match protocol {
        "tcp" => TcpStream::connect_timeout(&address, Duration::from_secs(5)).map(drop),
        "udp" => udp_round_trip(address),
        _ => return libc::EINVAL,
    };
    match outcome {
        Ok(()) => 0,
        // connect_timeout's own timeout carries no errno.
        Err(error) if error.kind() == std::io::ErrorKind::TimedOut => libc::ETIMEDOUT,
        Err(error) => error.raw_os_error().unwrap_or(-1),
    }
}

/// How many of `count` TCP connects to `address` connected.
fn repeat(address: &str, count: &str) -> i32 {
    let Ok(count) = count.parse::<u32>() else {
        return -1;
    };
    (0..count)
        .filter(|_| probe("tcp", address) == 0)
        .count()
        .try_into()
        .unwrap_or(i32::MAX)
}

fn udp_round_trip(address: SocketAddr) -> std::io::Result<()> {
    let local = if address.is_ipv6() {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    };
    let socket = UdpSocket::bind(local)?;
    socket.connect(address)?;
    socket.set_read_timeout(Some(Duration::from_secs(3)))?;
    socket.send(b"ping")?;
    let mut buffer = [0u8; 16];
    socket.recv(&mut buffer).map(drop)
}
