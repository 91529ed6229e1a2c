//! The rules against real sockets: a cgroup made by hand in the v2
//! hierarchy, processes placed in it before they connect, listeners on
//! loopback, and a link-local address inside a network namespace these
//! tests create (reached through their own veth pair). Root only, like CI.
//!
//! Traffic goes only to loopback and to 169.254.77.1, which the test
//! assigns inside its own namespace; the host side gets a /32 peer route
//! (`ip addr add … peer …`), never a 169.254.0.0/16 route, so the host's
//! own link-local traffic is never diverted.

use std::fs::{self, File};
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sandboxd_protocol::egress::Posture;

use super::*;

const STRICT: EgressSetting = EgressSetting::Enforced(Posture::Strict);
const RELAXED: EgressSetting = EgressSetting::Enforced(Posture::Relaxed);

fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the egress tests run as root, like CI: they load nftables rules and make cgroups"
    );
}

/// `<v2 root>/sandboxd-egress-test-<pid>-<n>/sandboxes`, removed on drop.
struct TestCgroup {
    top: PathBuf,
    /// `sandboxd-egress-test-…/sandboxes`, below the v2 root.
    relative: PathBuf,
    sandboxes: PathBuf,
}

impl TestCgroup {
    fn new() -> TestCgroup {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "sandboxd-egress-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mount = find_v2_mount().expect("a cgroup v2 mount");
        let top = mount.join(&name);
        let sandboxes = top.join("sandboxes");
        fs::create_dir_all(&sandboxes).expect("create the test cgroup");
        TestCgroup {
            top,
            relative: Path::new(&name).join("sandboxes"),
            sandboxes,
        }
    }

    /// A sandbox's own cgroup under `sandboxes/`, made *after* the rules
    /// were loaded (as the driver makes them), which the rules still cover.
    fn sandbox(&self, name: &str) -> PathBuf {
        let dir = self.sandboxes.join(name);
        fs::create_dir_all(&dir).expect("create a sandbox cgroup");
        dir
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let mut dirs: Vec<PathBuf> = fs::read_dir(&self.sandboxes)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.is_dir())
            .collect();
        dirs.extend([self.sandboxes.clone(), self.top.clone()]);
        for dir in dirs {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// The rules of one test, removed when it ends (whether or not it passed).
struct Installed(Egress);

impl Drop for Installed {
    fn drop(&mut self) {
        self.0.remove();
    }
}

fn install(setting: EgressSetting, cgroup: &TestCgroup) -> Installed {
    let egress = Installed(Egress::establish(setting, Some(&cgroup.relative)));
    let status = egress.0.status();
    assert!(status.enforced, "{status:?}");
    assert_eq!(egress.0.check(), Ok(()));
    egress
}

/// Runs a bash snippet as a process of `cgroup`: it joins the cgroup
/// between fork and exec, so it never sends a packet from anywhere else.
/// Returns whether it succeeded, and its stderr.
fn run_in(cgroup: &Path, snippet: &str) -> (bool, String) {
    let procs = File::options()
        .write(true)
        .open(cgroup.join("cgroup.procs"))
        .expect("open cgroup.procs");
    let fd = procs.as_raw_fd();
    let mut command = Command::new("timeout");
    command.args(["10", "bash", "-c", snippet]);
    // SAFETY: the closure only calls write(2) on an fd opened before the
    // fork, which is async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            // "0" moves the writing process itself.
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = command.output().expect("run bash in the cgroup");
    drop(procs);
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn tcp(host: &str, port: u16) -> String {
    format!("exec 3<>/dev/tcp/{host}/{port}")
}

fn udp(host: &str, port: u16) -> String {
    format!("echo probe >/dev/udp/{host}/{port}")
}

#[test]
fn strict_refuses_loopback_in_both_families_and_relaxed_allows_it() {
    require_root();
    let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
    let v6 = TcpListener::bind("[::1]:0").unwrap();
    let udp4 = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (p4, p6, pu) = (
        v4.local_addr().unwrap().port(),
        v6.local_addr().unwrap().port(),
        udp4.local_addr().unwrap().port(),
    );
    let cgroup = TestCgroup::new();

    let strict = install(STRICT, &cgroup);
    let sandbox = cgroup.sandbox("sbx-ses-000000000001");
    for (what, snippet, error) in [
        ("tcp 127.0.0.1", tcp("127.0.0.1", p4), "Connection refused"),
        ("tcp ::1", tcp("::1", p6), "Connection refused"),
        (
            "tcp ::ffff:127.0.0.1",
            tcp("::ffff:127.0.0.1", p4),
            "Connection refused",
        ),
        (
            "udp 127.0.0.1",
            udp("127.0.0.1", pu),
            "Operation not permitted",
        ),
    ] {
        let (ok, stderr) = run_in(&sandbox, &snippet);
        assert!(!ok, "strict let a sandbox reach {what}");
        assert!(stderr.contains(error), "{what}: {stderr}");
    }
    // The rules are the sandboxes' alone: the same listeners answer here.
    std::net::TcpStream::connect(("127.0.0.1", p4)).expect("the test reaches its own listener");
    let (ok, stderr) = run_in(&cgroup.top, &tcp("127.0.0.1", p4));
    assert!(ok, "a process outside sandboxes/ was refused: {stderr}");
    drop(strict);

    let _relaxed = install(RELAXED, &cgroup);
    for snippet in [tcp("127.0.0.1", p4), tcp("::1", p6), udp("127.0.0.1", pu)] {
        let (ok, stderr) = run_in(&sandbox, &snippet);
        assert!(ok, "relaxed refused {snippet}: {stderr}");
    }
}

/// A network namespace with `169.254.77.1` and `fe80::77:1` on its end of
/// a veth pair whose host end is `169.254.77.2` and `fe80::77:2`, point to
/// point (IPv6
/// link-local routes are per interface and need a zone, so they divert
/// nothing either). Removed on drop.
struct LinkLocalPeer {
    namespace: String,
    host_link: String,
}

const PEER: &str = "169.254.77.1";
const HOST_SIDE: &str = "169.254.77.2";
const PEER_V6: &str = "fe80::77:1";

impl LinkLocalPeer {
    fn new() -> LinkLocalPeer {
        let id = std::process::id();
        let peer = LinkLocalPeer {
            namespace: format!("sbxeg-{id}"),
            host_link: format!("veg{id}a"),
        };
        let ns_link = format!("veg{id}b");
        let ns = peer.namespace.as_str();
        let host = peer.host_link.as_str();
        for args in [
            vec!["netns", "add", ns],
            vec![
                "link", "add", host, "type", "veth", "peer", "name", &ns_link,
            ],
            vec!["link", "set", &ns_link, "netns", ns],
            vec!["addr", "add", HOST_SIDE, "peer", PEER, "dev", host],
            vec!["addr", "add", "fe80::77:2/64", "dev", host, "nodad"],
            vec!["link", "set", host, "up"],
            vec![
                "-n", ns, "addr", "add", PEER, "peer", HOST_SIDE, "dev", &ns_link,
            ],
            vec![
                "-n",
                ns,
                "addr",
                "add",
                "fe80::77:1/64",
                "dev",
                &ns_link,
                "nodad",
            ],
            vec!["-n", ns, "link", "set", &ns_link, "up"],
            vec!["-n", ns, "link", "set", "lo", "up"],
        ] {
            ip(&args);
        }
        // `ip link set up` returns before the kernel's link watcher has
        // turned the carrier on (it batches such events, and runs late on
        // a loaded machine); until then the veth's queue drops every
        // packet, ARP fails and a connect says "no route to host". Wait
        // for both ends to be operationally up.
        let up = |args: &[&str]| {
            let output = Command::new("ip").args(args).output().expect("run ip");
            String::from_utf8_lossy(&output.stdout).contains("state UP")
        };
        for args in [
            vec!["link", "show", host],
            vec!["-n", ns, "link", "show", &ns_link],
        ] {
            assert!(
                wait_for(Duration::from_secs(60), || up(&args)),
                "ip {} never said state UP",
                args.join(" ")
            );
        }
        peer
    }

    /// `fe80::77:1%<host end>`: the peer's IPv6 link-local address as the
    /// host reaches it.
    fn peer_v6(&self) -> String {
        format!("{PEER_V6}%{}", self.host_link)
    }

    /// A TCP listener on every address of the namespace (its own: nothing
    /// else can reach it), made inside it.
    fn listen(&self) -> TcpListener {
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

impl Drop for LinkLocalPeer {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.namespace])
            .output();
    }
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes.
fn wait_for(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while !condition() {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
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

#[test]
fn link_local_is_refused_under_both_postures_and_reachable_with_none() {
    require_root();
    let peer = LinkLocalPeer::new();
    let listener = peer.listen();
    let port = listener.local_addr().unwrap().port();
    let cgroup = TestCgroup::new();
    let sandbox = cgroup.sandbox("sbx-wfx-000000000002");

    let peers = [PEER.to_string(), peer.peer_v6()];

    let none = Installed(Egress::establish(
        EgressSetting::Unrestricted,
        Some(&cgroup.relative),
    ));
    assert_eq!(none.0.check(), Ok(()));
    assert!(!none.0.status().enforced);
    for address in &peers {
        let (ok, stderr) = run_in(&sandbox, &tcp(address, port));
        assert!(
            ok,
            "with none, the test's own peer {address} is unreachable: {stderr}"
        );
    }

    for setting in [RELAXED, STRICT] {
        let _rules = install(setting, &cgroup);
        for address in &peers {
            let (ok, stderr) = run_in(&sandbox, &tcp(address, port));
            assert!(!ok, "{setting} let a sandbox reach {address}");
            assert!(
                stderr.contains("Connection refused"),
                "{setting}, {address}: {stderr}"
            );
        }
    }
}

#[test]
fn a_daemon_with_no_sandboxes_cgroup_refuses_every_ensure() {
    let egress = Egress::establish(STRICT, None);
    let error = egress.check().unwrap_err();
    let SandboxError::Unavailable(message) = &error else {
        panic!("{error:?}")
    };
    assert!(
        message.contains("egress posture 'strict' is not in force"),
        "{message}"
    );
    let status = egress.status();
    assert!(!status.enforced);
    assert_eq!(status.posture, "strict");
    assert!(status.mechanism.starts_with("NOT ENFORCED"), "{status:?}");
}

#[test]
fn a_missing_sandboxes_cgroup_is_named() {
    require_root();
    let egress = Egress::establish(
        RELAXED,
        Some(Path::new("sandboxd-egress-test-absent/sandboxes")),
    );
    let error = egress.check().unwrap_err().to_string();
    assert!(
        error.contains("sandboxd-egress-test-absent/sandboxes does not exist"),
        "{error}"
    );
}

#[test]
fn rules_altered_behind_the_daemon_are_restored() {
    require_root();
    let cgroup = TestCgroup::new();
    let rules = install(STRICT, &cgroup);
    let (nft, table) = match &*rules.0.state() {
        State::InForce { nft, ruleset, .. } => (nft.clone(), ruleset.table_spec()),
        _ => panic!("not in force"),
    };
    nft.delete_table(&table)
        .expect("delete the table behind the daemon's back");
    rules.0.reverify();
    assert_eq!(rules.0.check(), Ok(()));
    let listing = nft.list_table(&table).expect("the table is back");
    assert!(listing.contains("jump sandboxes"), "{listing}");
}

#[test]
fn none_replaces_the_rules_a_crashed_daemon_left_with_the_separation_alone() {
    require_root();
    let cgroup = TestCgroup::new();
    // A daemon that never stopped cleanly: its rules are never removed.
    let crashed = Egress::establish(STRICT, Some(&cgroup.relative));
    let (nft, table) = match &*crashed.state() {
        State::InForce { nft, ruleset, .. } => (nft.clone(), ruleset.table_spec()),
        _ => panic!("not in force"),
    };
    drop(crashed);
    assert!(nft.list_table(&table).is_ok(), "the leftover table");

    let none = Installed(Egress::establish(
        EgressSetting::Unrestricted,
        Some(&cgroup.relative),
    ));
    assert_eq!(none.0.check(), Ok(()));
    let status = none.0.status();
    assert!(!status.enforced, "{status:?}");
    assert!(status.mechanism.starts_with("unrestricted"), "{status:?}");
    let separation = none.0.separation().expect("the separation is in force");
    assert!(separation.contains(&table), "{separation}");
    let listing = nft.list_table(&table).expect("the separation's table");
    assert!(
        !listing.contains("refused_ipv4") && !listing.contains("jump sandboxes"),
        "strict's rules outlived egress = none: {listing}"
    );
    assert!(listing.contains("jump foreign"), "{listing}");

    // Altered behind the daemon's back, it is restored like a posture's.
    nft.delete_table(&table).expect("delete the table");
    none.0.reverify();
    assert!(none.0.separation().is_ok());
    assert!(nft.list_table(&table).is_ok(), "{table} was not restored");
}

#[test]
fn without_a_sandboxes_cgroup_none_says_the_sandboxes_are_not_kept_apart() {
    let none = Egress::establish(EgressSetting::Unrestricted, None);
    assert_eq!(none.check(), Ok(()));
    let why = none.separation().unwrap_err();
    assert!(why.contains("not placed in a cgroup v2"), "{why}");
}

#[test]
fn rules_removed_on_a_clean_stop_are_not_reinstalled() {
    require_root();
    let cgroup = TestCgroup::new();
    let egress = Egress::establish(STRICT, Some(&cgroup.relative));
    let (nft, table) = match &*egress.state() {
        State::InForce { nft, ruleset, .. } => (nft.clone(), ruleset.table_spec()),
        _ => panic!("not in force"),
    };
    egress.remove();
    assert!(nft.list_table(&table).is_err(), "{table} outlived remove");
    egress.reverify();
    assert!(
        nft.list_table(&table).is_err(),
        "{table} came back after remove"
    );
    assert!(egress.check().is_err());
}

#[test]
fn a_gone_daemons_table_is_swept_and_a_live_ones_stays_even_with_its_cgroup_empty() {
    require_root();
    // Both cgroups exist and are empty: only the holder lock tells the
    // live daemon from the gone one.
    let live = TestCgroup::new();
    let in_force = Egress::establish(STRICT, Some(&live.relative));
    let gone = TestCgroup::new();
    let crashed = Egress::establish(STRICT, Some(&gone.relative));
    let table_of = |egress: &Egress| match &*egress.state() {
        State::InForce { nft, ruleset, .. } => (nft.clone(), ruleset.table_spec()),
        _ => panic!("not in force"),
    };
    let (nft, orphan) = table_of(&crashed);
    let (_, kept) = table_of(&in_force);
    // The crashed daemon never removes its table; its lock goes with it.
    drop(crashed);
    sweep_until_gone(&nft, &orphan, in_force.table.as_deref());
    assert!(
        nft.list_table(&kept).is_ok(),
        "{kept} was removed while in force"
    );
    // Another daemon's sweep keeps it too: its lock is held.
    orphans::sweep(None);
    assert!(
        nft.list_table(&kept).is_ok(),
        "{kept} was removed while its daemon lives"
    );
    in_force.remove();
    drop(gone);
}

#[test]
fn a_gone_daemons_table_stays_while_its_cgroup_holds_processes() {
    require_root();
    let cgroup = TestCgroup::new();
    let crashed = Egress::establish(STRICT, Some(&cgroup.relative));
    let (nft, table) = match &*crashed.state() {
        State::InForce { nft, ruleset, .. } => (nft.clone(), ruleset.table_spec()),
        _ => panic!("not in force"),
    };
    let mut runner = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let sandbox = cgroup.sandbox("left");
    fs::write(sandbox.join("cgroup.procs"), runner.id().to_string()).unwrap();
    drop(crashed);
    orphans::sweep(None);
    let kept = nft.list_table(&table).is_ok();
    runner.kill().unwrap();
    runner.wait().unwrap();
    assert!(kept, "{table} went while a runner it holds was left");
    // Once the runner is gone, the next sweep takes it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fs::read_to_string(cgroup.sandboxes.join("cgroup.events"))
        .unwrap_or_default()
        .contains("populated 1")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the cgroup stayed populated"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    sweep_until_gone(&nft, &table, None);
}

/// Sweeps (keeping `own`) until `table` is gone, failing after a minute.
/// Another test's sweep (they run side by side in this binary) may hold
/// the table's lock to remove it at the moment one sweep looks, and a
/// process another test forks holds every descriptor until it execs: that
/// sweep then leaves the table, rightly. So one sweep is not the proof.
fn sweep_until_gone(nft: &Nft, table: &str, own: Option<&str>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut sweeps = Vec::new();
    while nft.list_table(table).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "{table} outlived its daemon: {sweeps:?}"
        );
        sweeps.push(orphans::sweep(own));
        std::thread::sleep(Duration::from_millis(20));
    }
}
