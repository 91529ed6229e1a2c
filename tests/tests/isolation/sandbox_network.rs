//! No road between sandboxes over the network on the process tier, end
//! to end on every egress posture: two runners A and B
//! listen on TCP and UDP on every address (the fixture's `--serve-net`),
//! and each probes from inside its own sandbox.
//!
//! B reaches none of A's sockets — on 127.0.0.1, ::1, or an address of the
//! host's that is not loopback (the host end of a veth pair this test
//! makes, 198.51.100.N and 2001:db8:N::2) — while A reaches its own on
//! every one of them the posture allows; a listener of the test's on
//! 127.0.0.1 (a backend endpoint) is reached under `relaxed` and `none`
//! and refused under `strict`; a listener of the test's inside its own
//! network namespace (203.0.113.N, 2001:db8:N::1: documentation
//! ranges, nobody's network, which `strict` does not refuse) is reached outbound on every
//! posture. And the host itself cannot open a connection to a sandbox's
//! socket: the daemon refuses every opener that is not the sandbox.
//!
//! The namespace and its veth pair are removed on drop, passed or failed.

use std::fs::File;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sandboxd_client::Scope;
use sandboxd_tests::procs::wait_until;
use sandboxd_tests::{sandbox_env, wait_for_runner, Options, TestDaemon};

const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

const EREFUSED: i32 = libc::ECONNREFUSED;

/// One runner of the fixture's `--serve-net 0`, and its ports.
struct Sandbox {
    name: &'static str,
    workspace: PathBuf,
    tcp: u16,
    udp: u16,
}

impl Sandbox {
    async fn start(daemon: &TestDaemon, name: &'static str) -> Sandbox {
        let client = daemon.client().await;
        let report = client
            .ensure(
                Scope::Session,
                name,
                &sandbox_env(&format!("q:{name}"), "tok"),
            )
            .await
            .unwrap_or_else(|error| panic!("ensure {name}: {error}"));
        let workspace = daemon.workspace(Scope::Session, name);
        wait_for_runner(&workspace, report.pid.expect("a pid"));
        // `net` is written before `pid`.
        let text = std::fs::read_to_string(workspace.join("net")).expect("the runner's ports");
        let port = |protocol: &str| -> u16 {
            text.lines()
                .find_map(|line| line.strip_prefix(&format!("{protocol} ")))
                .and_then(|port| port.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {protocol} port in {text:?}"))
        };
        Sandbox {
            name,
            tcp: port("tcp"),
            udp: port("udp"),
            workspace,
        }
    }

    /// `host:port` of this sandbox's listener for `protocol`.
    fn address(&self, protocol: &str, host: &str) -> String {
        let port = if protocol == "tcp" {
            self.tcp
        } else {
            self.udp
        };
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    }

    /// The errno of one probe made from inside this sandbox.
    fn probe(&self, protocol: &str, address: &str) -> i32 {
        self.request(&format!("{protocol} {address}"))
    }

    /// How many of `count` connects to `address` from inside this sandbox
    /// connected.
    fn connects(&self, address: &str, count: u32) -> i32 {
        self.request(&format!("tcp-repeat {address} {count}"))
    }

    fn request(&self, request: &str) -> i32 {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("probe-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let temporary = self.workspace.join(format!(".{name}.tmp"));
        std::fs::write(&temporary, format!("{request}\n")).unwrap();
        std::fs::rename(&temporary, self.workspace.join(&name)).unwrap();
        let answer = self.workspace.join(format!("{name}.errno"));
        let mut errno = None;
        wait_until(PROBE_TIMEOUT, || {
            errno = std::fs::read_to_string(&answer)
                .ok()
                .and_then(|text| text.trim().parse::<i32>().ok());
            errno.is_some()
        });
        errno.unwrap_or_else(|| panic!("{} never answered {name}", self.name))
    }
}

/// A network namespace of the test's own, joined to the host by a veth
/// pair: the host end has 198.51.100.N and 2001:db8:N::2 (addresses of
/// the host that are not loopback), the namespace's end 203.0.113.N and
/// 2001:db8:N::1, point to point, so no other route of the host changes.
/// Each test has its own `subnet` (77, 78, …): they run side by side.
pub(super) struct Peer {
    namespace: String,
    host_link: String,
    pub(super) peer_v4: String,
    host_v4: String,
    peer_v6: String,
    host_v6: String,
}

impl Peer {
    pub(super) fn new(tag: &str, subnet: u8) -> Peer {
        let id = std::process::id() % 100_000;
        let peer = Peer {
            namespace: format!("sbxnet-{tag}-{id}"),
            host_link: format!("vsn{tag}{id}a"),
            peer_v4: format!("203.0.113.{subnet}"),
            host_v4: format!("198.51.100.{subnet}"),
            peer_v6: format!("2001:db8:{subnet}::1"),
            host_v6: format!("2001:db8:{subnet}::2"),
        };
        let ns_link = format!("vsn{tag}{id}b");
        let (ns, host) = (peer.namespace.as_str(), peer.host_link.as_str());
        let (peer_v4, host_v4) = (peer.peer_v4.as_str(), peer.host_v4.as_str());
        let host_v6 = format!("{}/128", peer.host_v6);
        let peer_v6 = format!("{}/128", peer.peer_v6);
        for args in [
            vec!["netns", "add", ns],
            vec![
                "link", "add", host, "type", "veth", "peer", "name", &ns_link,
            ],
            vec!["link", "set", &ns_link, "netns", ns],
            vec!["addr", "add", host_v4, "peer", peer_v4, "dev", host],
            vec!["addr", "add", &host_v6, "dev", host, "nodad"],
            vec!["link", "set", host, "up"],
            vec!["route", "add", &peer_v6, "dev", host],
            vec![
                "-n", ns, "addr", "add", peer_v4, "peer", host_v4, "dev", &ns_link,
            ],
            vec!["-n", ns, "addr", "add", &peer_v6, "dev", &ns_link, "nodad"],
            vec!["-n", ns, "link", "set", &ns_link, "up"],
            vec!["-n", ns, "route", "add", &host_v6, "dev", &ns_link],
            vec!["-n", ns, "link", "set", "lo", "up"],
        ] {
            ip(&args);
        }
        peer
    }

    /// A TCP listener on every address of the namespace, made inside it.
    pub(super) fn listen(&self) -> TcpListener {
        let netns = File::open(format!("/run/netns/{}", self.namespace)).expect("open the netns");
        std::thread::spawn(move || {
            // This thread alone enters the namespace; the socket stays there.
            nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            TcpListener::bind("[::]:0").expect("listen in the namespace")
        })
        .join()
        .expect("the listener thread")
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.namespace])
            .output();
    }
}

fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// What one posture must show.
struct Expected {
    /// A's probes of its own listeners on loopback (the posture may refuse
    /// loopback to every sandbox: `strict`).
    own_loopback: [i32; 2],
    /// B's probes of A's on loopback: TCP, UDP.
    other_loopback: [i32; 2],
    /// Probes of the test's listener on 127.0.0.1.
    host_service: i32,
}

async fn sandboxes_are_kept_apart_under(posture: &str, subnet: u8, expected: Expected) {
    let peer = Peer::new(&posture[..1], subnet);
    let outside = peer.listen();
    let outside_port = outside.local_addr().unwrap().port();
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend = backend
        .local_addr()
        .map(|address| (backend, address))
        .unwrap();

    // The host's network, shared: what the table's separation is for (a
    // private sandbox has no road to another by construction, see
    // `private_network`).
    let mut daemon = TestDaemon::start(Options {
        egress: Some(posture.to_string()),
        extra_toml: "[network]\nmode = \"host\"\n".to_string(),
        ..Options::with_runner_args(&["--serve-net", "0"])
    });
    let status = daemon.client().await.status().await.unwrap();
    let network = status
        .isolation
        .iter()
        .find(|feature| feature.name == "network")
        .unwrap_or_else(|| panic!("no network feature in {:?}", status.isolation));
    assert!(network.in_force, "{posture}: {network:?}");
    assert!(
        network
            .detail
            .contains("only from a socket of the same sandbox"),
        "{network:?}"
    );

    let a = Sandbox::start(&daemon, "net-a").await;
    let b = Sandbox::start(&daemon, "net-b").await;
    let mut failures = Vec::new();
    let mut check = |who: &Sandbox, what: &str, protocol: &str, address: String, want: i32| {
        let got = who.probe(protocol, &address);
        eprintln!(
            "{posture}: {} -> {what} {protocol} {address}: errno {got}",
            who.name
        );
        if got != want {
            failures.push(format!(
                "{} -> {what} {protocol} {address}: errno {got}, expected {want}",
                who.name
            ));
        }
    };

    for (index, protocol) in ["tcp", "udp"].into_iter().enumerate() {
        for host in ["127.0.0.1", "::1"] {
            check(
                &b,
                "A's",
                protocol,
                a.address(protocol, host),
                expected.other_loopback[index],
            );
            check(
                &a,
                "its own",
                protocol,
                a.address(protocol, host),
                expected.own_loopback[index],
            );
        }
        // Not loopback, and in no posture's ranges: only the separation refuses.
        for host in [&peer.host_v4, &peer.host_v6] {
            check(&b, "A's", protocol, a.address(protocol, host), EREFUSED);
            check(&a, "its own", protocol, a.address(protocol, host), 0);
        }
    }
    check(
        &a,
        "the backend's",
        "tcp",
        backend.1.to_string(),
        expected.host_service,
    );
    for host in [&peer.peer_v4, &peer.peer_v6] {
        let address = if host.contains(':') {
            format!("[{host}]:{outside_port}")
        } else {
            format!("{host}:{outside_port}")
        };
        check(&a, "the outside's", "tcp", address, 0);
    }

    // The host cannot open a connection to a sandbox's socket either.
    let refused = TcpStream::connect(("127.0.0.1", a.tcp)).map(drop);
    let refused = refused.err().and_then(|error| error.raw_os_error());
    assert_eq!(refused, Some(EREFUSED), "{posture}: the host reached A");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.connect(("127.0.0.1", a.udp)).unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    udp.send(b"ping").unwrap();
    let mut buffer = [0u8; 8];
    let answer = udp
        .recv(&mut buffer)
        .map(drop)
        .err()
        .and_then(|e| e.raw_os_error());
    assert_eq!(
        answer,
        Some(EREFUSED),
        "{posture}: the host's datagram reached A"
    );

    assert!(failures.is_empty(), "{posture}:\n{}", failures.join("\n"));
    daemon.stop();
    drop(peer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relaxed_keeps_sandboxes_apart_and_lets_them_reach_the_host_and_out() {
    let expected = Expected {
        own_loopback: [0, 0],
        other_loopback: [EREFUSED, EREFUSED],
        host_service: 0,
    };
    sandboxes_are_kept_apart_under("relaxed", 77, expected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_keeps_sandboxes_apart_on_every_host_address() {
    // Loopback is refused to every sandbox by the posture itself (a TCP
    // reset, a UDP send dropped: EPERM), its own listeners included.
    let expected = Expected {
        own_loopback: [EREFUSED, libc::EPERM],
        other_loopback: [EREFUSED, libc::EPERM],
        host_service: EREFUSED,
    };
    sandboxes_are_kept_apart_under("strict", 78, expected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_still_keeps_sandboxes_apart() {
    let expected = Expected {
        own_loopback: [0, 0],
        other_loopback: [EREFUSED, EREFUSED],
        host_service: 0,
    };
    sandboxes_are_kept_apart_under("none", 79, expected).await;
}

/// Measured: with a conntrack id alone as the key, B's connects to A got
/// through while A churned connections to its own listener (which closes
/// first): B's kernel reuses A's freed ports, and B's SYN then shares A's
/// conntrack id, or meets A's listener's TIME_WAIT socket. Here A makes
/// 3,000 connects to itself, and B, right after, 1,000 to A: none may
/// connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_reusing_anothers_ports_is_still_refused() {
    let mut daemon = TestDaemon::start(Options::with_runner_args(&["--serve-net", "0"]));
    let a = Sandbox::start(&daemon, "churn-a").await;
    let b = Sandbox::start(&daemon, "churn-b").await;
    let target = a.address("tcp", "127.0.0.1");
    for round in 0..2 {
        let own = a.connects(&target, 3_000);
        let through = b.connects(&target, 1_000);
        eprintln!("round {round}: A connected {own} of 3000 to itself, B {through} of 1000 to A");
        assert!(own > 0, "A cannot reach its own listener");
        assert_eq!(through, 0, "B reached A {through} times in round {round}");
    }
    daemon.stop();
}
