//! `[network] mode = "private"` (the default under `isolation = "full"`)
//! end to end: each process-tier sandbox has a network namespace of its
//! own, its way out through the daemon's relay. From inside real runners
//! (`exec python3`): a port the host holds is bound without taking it from
//! the host; the host's sockets are not in the sandbox's `/proc/net/tcp`;
//! two sandboxes bind the same port; the runner reaches its endpoint on
//! the host's 127.0.0.1 at the address its environment gives, and nothing
//! else of the host's loopback; it reaches a listener outside (in a
//! network namespace of the test's) and gets DNS answers from the
//! resolver the daemon is given; UDP other than DNS is refused; the
//! egress posture still refuses what it did, with ECONNREFUSED at once;
//! and under `mode = "host"` the old behaviour holds. Each case runs with
//! views prepared ahead (the default pool, runners parked) and cold (no
//! pool), the two paths that make a sandbox's namespace.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sandboxd_client::{CommandRef, OutputStream, SandboxdClient, Scope};
use sandboxd_tests::commands::{read_all, request};
use sandboxd_tests::{procs, sandbox_env, wait_until, Options, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

/// A daemon whose sandboxes get `mode`, with `extra` top-level keys, and
/// with the default pool (`prepared`) or none.
fn daemon(mode: &str, prepared: bool, extra: &str, egress: Option<&str>) -> TestDaemon {
    let pool = if prepared {
        ""
    } else {
        "[pool]\nsession = 0\nworkflow = 0\n"
    };
    TestDaemon::start(Options {
        extra_toml: format!("{extra}\n[network]\nmode = \"{mode}\"\n{pool}"),
        egress: egress.map(str::to_string),
        ..Options::default()
    })
}

async fn ensure(client: &SandboxdClient, id: &str) {
    client
        .ensure_session_sandbox(id, &sandbox_env(&format!("session:{id}"), "tok"))
        .await
        .unwrap_or_else(|error| panic!("ensure {id}: {error}"));
}

/// What `python3 -c script` printed inside sandbox `id`, and its exit code.
async fn python(client: &SandboxdClient, id: &str, script: &str) -> (String, Option<i32>) {
    let command = client
        .exec(Scope::Session, id, &request(&["python3", "-c", script]))
        .await
        .unwrap_or_else(|error| panic!("exec in {id}: {error}"));
    let command = CommandRef::Id(command.command_id);
    let (stdout, proof) = read_all(client, id, &command, OutputStream::Stdout, WAIT).await;
    let (stderr, _) = read_all(client, id, &command, OutputStream::Stderr, WAIT).await;
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    assert!(
        stderr.is_empty(),
        "python in {id} wrote to stderr: {}\nstdout: {stdout}",
        String::from_utf8_lossy(&stderr)
    );
    (stdout, proof.exit_code)
}

/// Binds TCP `port` on 127.0.0.1 and listens: `bound`, or the errno's name.
fn bind_script(port: u16) -> String {
    format!(
        r#"
import errno, socket
s = socket.socket()
try:
    s.bind(("127.0.0.1", {port})); s.listen(1); print("bound")
except OSError as e:
    print(errno.errorcode[e.errno])
"#
    )
}

/// Whether a LISTEN socket on `port` is in this process's `/proc/net/tcp`
/// and `tcp6`: `seen` or `unseen`, and how many sockets it lists in all.
fn proc_net_script(port: u16) -> String {
    format!(
        r#"
lines = []
for name in ("/proc/net/tcp", "/proc/net/tcp6"):
    with open(name) as f:
        lines += f.read().splitlines()[1:]
hit = any(l.split()[1].endswith(":{port:04X}") and l.split()[3] == "0A" for l in lines)
print("seen" if hit else "unseen", len(lines))
"#
    )
}

/// What `ss -Htln` (sock_diag) lists inside, one socket a line.
const SOCK_DIAG_SCRIPT: &str = r#"
import subprocess
print(subprocess.run(["/usr/bin/ss", "-Htln"], capture_output=True, text=True, check=True).stdout)
"#;

/// Connects to `STIGMER_BACKEND_ENDPOINT`, sends `ping`: what came back,
/// or the errno's name.
const ENDPOINT_SCRIPT: &str = r#"
import errno, os, socket
host, port = os.environ["STIGMER_BACKEND_ENDPOINT"].rsplit(":", 1)
try:
    s = socket.create_connection((host, int(port)), timeout=20)
    s.sendall(b"ping"); print(s.recv(16).decode())
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e)))
"#;

/// Serves one `pong` per connection on `listener`, on a thread.
fn serve_pong(listener: TcpListener) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buffer = [0u8; 4];
            if stream.read_exact(&mut buffer).is_ok() {
                let _ = stream.write_all(b"pong");
            }
        }
    });
}

/// The `network-namespace` feature in `status`.
async fn network_feature(client: &SandboxdClient) -> (bool, String) {
    let status = client.status().await.unwrap();
    let feature = status
        .isolation
        .iter()
        .find(|feature| feature.name == "network-namespace")
        .unwrap_or_else(|| panic!("no network-namespace in {:?}", status.isolation));
    (feature.in_force, feature.detail.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_sandbox_has_its_own_ports_and_proc_net() {
    for prepared in [true, false] {
        let host = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = host.local_addr().unwrap().port();
        let daemon = daemon("private", prepared, "", None);
        let client = daemon.client().await;
        let (in_force, detail) = network_feature(&client).await;
        assert!(in_force, "private networking not in force: {detail}");
        ensure(&client, "ports").await;

        let (seen, _) = python(&client, "ports", &proc_net_script(port)).await;
        assert!(
            seen.starts_with("unseen"),
            "prepared {prepared}: the host's listener on {port} is in the sandbox's /proc/net: {seen}"
        );
        // sock_diag (what `ss` asks) lists the namespace's sockets alone.
        if Path::new("/usr/bin/ss").exists() {
            let (listed, _) = python(&client, "ports", SOCK_DIAG_SCRIPT).await;
            assert!(
                !listed.contains(&format!(":{port} ")),
                "prepared {prepared}: sock_diag inside lists the host's listener on {port}: {listed}"
            );
        }
        let (bound, code) = python(&client, "ports", &bind_script(port)).await;
        assert_eq!(
            (bound.trim(), code),
            ("bound", Some(0)),
            "prepared {prepared}: binding the host's port {port} inside"
        );
        // The host's socket is untouched: it still accepts.
        let _client_side = TcpStream::connect(("127.0.0.1", port)).unwrap();
        host.set_nonblocking(false).unwrap();
        host.accept().expect("the host's listener still accepts");
        // Nothing of the host's loopback but the endpoints is reachable.
        let script = format!(
            "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=10); print('reached')\nexcept OSError as e:\n    print(e.errno)"
        );
        let (reached, _) = python(&client, "ports", &script).await;
        assert_eq!(
            reached.trim(),
            libc::ECONNREFUSED.to_string(),
            "prepared {prepared}: a host loopback port that is no endpoint"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_private_sandboxes_bind_the_same_port_at_once() {
    // One prepared (the pool holds one), one cold (the pool is empty then).
    let daemon = daemon("private", true, "", None);
    let client = daemon.client().await;
    ensure(&client, "first").await;
    ensure(&client, "second").await;
    let port = 47_321;
    // The first holds the port until the test lets it go (its view has
    // its workspace at /workspace, the host path outside).
    let release = daemon.workspace(Scope::Session, "first").join("release");
    let bound = daemon.workspace(Scope::Session, "first").join("bound");
    let holder = format!(
        r#"
import os, socket, time
s = socket.socket(); s.bind(("127.0.0.1", {port})); s.listen(1)
open("/workspace/bound", "w").close()
while not os.path.exists("/workspace/release"):
    time.sleep(0.05)
print("released")
"#
    );
    let holding = {
        let client = client.clone();
        tokio::spawn(async move { python(&client, "first", &holder).await })
    };
    assert!(
        wait_until(WAIT, || bound.exists()),
        "the first sandbox never bound {port}"
    );
    let (second, _) = python(&client, "second", &bind_script(port)).await;
    std::fs::write(&release, "").unwrap();
    let (first, code) = holding.await.unwrap();
    assert_eq!((first.trim(), code), ("released", Some(0)));
    assert_eq!(
        second.trim(),
        "bound",
        "the second sandbox could not bind the port the first holds"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_runner_reaches_its_endpoint_on_the_hosts_loopback() {
    for prepared in [true, false] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = listener.local_addr().unwrap().to_string();
        serve_pong(listener);
        let extra = format!("backend_endpoint = \"{endpoint}\"");
        let daemon = daemon("private", prepared, &extra, None);
        let client = daemon.client().await;
        ensure(&client, "dialer").await;
        let (answer, _) = python(&client, "dialer", ENDPOINT_SCRIPT).await;
        assert_eq!(
            answer.trim(),
            "pong",
            "prepared {prepared}: the endpoint {endpoint} from inside"
        );
    }
}

/// Counts the connections `listener` accepts, on a thread.
fn count_connections(listener: TcpListener) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            if stream.is_err() {
                return;
            }
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    count
}

/// An IPv4 address of the host's in a private range that is not loopback
/// (docker0's, when there is one): strict refuses it.
fn hosts_private_address() -> Option<String> {
    let output = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "docker0"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let address = text
        .split_whitespace()
        .skip_while(|word| *word != "inet")
        .nth(1)?;
    Some(address.split('/').next()?.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_egress_posture_still_refuses_a_private_sandbox() {
    for prepared in [true, false] {
        // `strict` refuses the host's loopback: the endpoint's port is not
        // carried, and the namespace's own loopback has nothing there.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = listener.local_addr().unwrap().to_string();
        let reached = count_connections(listener);
        // And a private address of the host's: refused inside the
        // namespace, at once.
        let private = TcpListener::bind("0.0.0.0:0").unwrap();
        let private_port = private.local_addr().unwrap().port();
        let private_reached = count_connections(private);
        let extra = format!("backend_endpoint = \"{endpoint}\"");
        let daemon = daemon("private", prepared, &extra, Some("strict"));
        let client = daemon.client().await;
        ensure(&client, "dialer").await;
        let (answer, _) = python(&client, "dialer", ENDPOINT_SCRIPT).await;
        assert_eq!(
            answer.trim(),
            "ECONNREFUSED",
            "prepared {prepared}: strict and a private sandbox's endpoint {endpoint}"
        );
        assert_eq!(
            reached.load(Ordering::SeqCst),
            0,
            "prepared {prepared}: strict let a private sandbox's connection reach {endpoint} ({answer})"
        );
        if let Some(address) = hosts_private_address() {
            let script = format!(
                "import errno, socket\ntry:\n    socket.create_connection(('{address}', {private_port}), timeout=3); print('reached')\nexcept OSError as e:\n    print(errno.errorcode.get(e.errno, str(e)))"
            );
            let (answer, _) = python(&client, "dialer", &script).await;
            assert_eq!(
                answer.trim(),
                "ECONNREFUSED",
                "prepared {prepared}: strict and {address}:{private_port}"
            );
            assert_eq!(private_reached.load(Ordering::SeqCst), 0);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_mode_keeps_the_hosts_network() {
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    let daemon = daemon("host", true, "", None);
    let client = daemon.client().await;
    let (in_force, detail) = network_feature(&client).await;
    assert!(
        !in_force && detail.contains("mode = \"host\""),
        "status: {detail}"
    );
    ensure(&client, "shared").await;
    let (seen, _) = python(&client, "shared", &proc_net_script(port)).await;
    assert!(seen.starts_with("seen"), "host mode: {seen}");
    if Path::new("/usr/bin/ss").exists() {
        let (listed, _) = python(&client, "shared", SOCK_DIAG_SCRIPT).await;
        assert!(
            listed.contains(&format!(":{port} ")),
            "host mode: sock_diag does not list the host's listener on {port}: {listed}"
        );
    }
    let (bound, _) = python(&client, "shared", &bind_script(port)).await;
    assert_eq!(bound.trim(), "EADDRINUSE", "host mode");
}

/// Dials `address:port` and sends `ping`: the answer or the errno's name;
/// then a UDP datagram to `address:9` (EPERM: only DNS leaves) and a DNS
/// query to 192.0.2.53 (a documentation address the query never reaches:
/// the relay asks the daemon's resolver).
fn outward_script(address: &str, port: u16) -> String {
    format!(
        r#"
import errno, socket
def name(e): return errno.errorcode.get(e.errno, str(e))
try:
    s = socket.create_connection(("{address}", {port}), timeout=20)
    s.sendall(b"ping"); tcp = s.recv(16).decode()
except OSError as e:
    tcp = name(e)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"x", ("{address}", 9)); udp = "sent"
except OSError as e:
    udp = name(e)
d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); d.settimeout(20)
try:
    d.sendto(b"query", ("192.0.2.53", 53)); dns = d.recv(64).decode()
except OSError as e:
    dns = name(e)
print(tcp, udp, dns)
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_sandbox_reaches_out_and_resolves_through_the_relay() {
    let peer = super::sandbox_network::Peer::new("r", 90);
    let outside = peer.listen();
    let outside_port = outside.local_addr().unwrap().port();
    serve_pong(outside);
    let resolver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let resolver_address = resolver.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut query = [0u8; 512];
        while let Ok((_, asker)) = resolver.recv_from(&mut query) {
            let _ = resolver.send_to(b"answer", asker);
        }
    });
    for prepared in [true, false] {
        let extra = format!("[network]\nresolvers = [\"{resolver_address}\"]\n");
        let pool = if prepared {
            ""
        } else {
            "[pool]\nsession = 0\nworkflow = 0\n"
        };
        let daemon = TestDaemon::start(Options {
            extra_toml: format!("{extra}{pool}"),
            ..Options::default()
        });
        let client = daemon.client().await;
        let (in_force, detail) = network_feature(&client).await;
        assert!(in_force, "private networking is not the default: {detail}");
        ensure(&client, "outward").await;
        let (seen, _) = python(
            &client,
            "outward",
            &outward_script(&peer.peer_v4, outside_port),
        )
        .await;
        assert_eq!(
            seen.trim(),
            "pong EPERM answer",
            "prepared {prepared}: TCP to {}:{outside_port}, UDP elsewhere, DNS",
            peer.peer_v4
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_over_its_relayed_connections_is_reset_and_others_are_not() {
    let outside = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = outside.local_addr().unwrap().to_string();
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let holding = held.clone();
    std::thread::spawn(move || {
        for stream in outside.incoming().flatten() {
            holding.lock().unwrap().push(stream);
        }
    });
    let daemon = TestDaemon::start(Options {
        extra_toml: format!(
            "backend_endpoint = \"{endpoint}\"\n[network]\nrelayed_connections = 2\n[pool]\nsession = 0\nworkflow = 0\n"
        ),
        ..Options::default()
    });
    let client = daemon.client().await;
    ensure(&client, "greedy").await;
    ensure(&client, "other").await;
    // Three connections held open at once: the third is over the bound.
    let script = r#"
import errno, os, socket, time
host, port = os.environ["STIGMER_BACKEND_ENDPOINT"].rsplit(":", 1)
kept, seen = [], []
for _ in range(3):
    try:
        s = socket.create_connection((host, int(port)), timeout=20); kept.append(s)
        s.settimeout(2)
        seen.append("closed" if s.recv(1) == b"" else "data")
    except socket.timeout:
        seen.append("open")
    except OSError as e:
        seen.append(errno.errorcode.get(e.errno, str(e)))
print(" ".join(seen))
"#;
    let (greedy, _) = python(&client, "greedy", script).await;
    assert_eq!(greedy.trim(), "open open ECONNRESET", "the greedy sandbox");
    let connect = r#"
import os, socket
host, port = os.environ["STIGMER_BACKEND_ENDPOINT"].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=20); s.settimeout(2)
try:
    print("closed" if s.recv(1) == b"" else "data")
except socket.timeout:
    print("connected")
"#;
    let (other, _) = python(&client, "other", connect).await;
    assert_eq!(
        other.trim(),
        "connected",
        "another sandbox is not bound by the first's"
    );
}

/// The nft helper's pid, as `status` names it.
fn nft_helper_pid(detail: &str) -> u32 {
    let wanted = "loaded by nftables' library in a helper process (pid ";
    let at = detail
        .find(wanted)
        .unwrap_or_else(|| panic!("the tables are not loaded by the helper: {detail}"))
        + wanted.len();
    detail[at..]
        .split(')')
        .next()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no helper pid in: {detail}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tables_are_loaded_by_one_helper_in_the_daemons_namespace_which_ends_with_the_daemon() {
    let mut daemon = daemon("private", false, "", Some("strict"));
    let client = daemon.client().await;
    let (in_force, detail) = network_feature(&client).await;
    assert!(in_force, "private networking not in force: {detail}");
    let helper = nft_helper_pid(&detail);
    assert_eq!(
        procs::parent_pid(helper),
        daemon.pid(),
        "the helper's parent"
    );
    for id in ["helper-a", "helper-b", "helper-c"] {
        ensure(&client, id).await;
        // The posture holds inside: a refused range answers ECONNREFUSED.
        let (refused, _) = python(&client, id, REFUSED_CONNECT_SCRIPT).await;
        assert_eq!(refused.trim(), libc::ECONNREFUSED.to_string(), "in {id}");
    }
    // Still the one helper, and back in the daemon's network namespace
    // (it keeps no sandbox's namespace alive).
    let (_, detail) = network_feature(&client).await;
    assert_eq!(nft_helper_pid(&detail), helper);
    let netns = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
    assert_eq!(netns(helper), netns(daemon.pid().unwrap()));
    // A daemon killed outright leaves no helper behind.
    daemon.kill();
    assert!(
        wait_until(WAIT, || procs::pid_is_gone(helper)),
        "the nft helper {helper} outlived its daemon"
    );
}

/// Connects to 169.254.169.254:80, which every posture refuses: the errno,
/// or `reached`.
const REFUSED_CONNECT_SCRIPT: &str = r#"
import socket
try:
    socket.create_connection(("169.254.169.254", 80), timeout=10); print("reached")
except OSError as e:
    print(e.errno)
"#;
