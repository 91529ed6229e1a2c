//! The clouds' metadata addresses and IPv4 written inside IPv6, dialled
//! from inside a real process-tier runner (an `exec`'d python3), are
//! refused by the daemon's kernel rules under the posture that refuses
//! them.
//!
//! Each target gets a UDP datagram first: the rules drop it at the
//! output hook, so the send fails with EPERM — the rules' own answer, not
//! the network's (a send nothing refuses just leaves). Only once that
//! proved the rule is in force does the runner try a TCP connect, which
//! the same rule resets (ECONNREFUSED at once); so no connect to a
//! metadata address ever leaves the host. A target with no route here
//! (ENETUNREACH: the kernel never reaches the rules) is skipped, saying
//! so. The loopback listener of the test shows the sandbox still dials
//! what its posture allows.

use std::net::{TcpListener, UdpSocket};
use std::time::Duration;

use sandboxd_client::{CommandRef, OutputStream, Scope};
use sandboxd_tests::commands::{read_all, request};
use sandboxd_tests::{start_session, Options, TestDaemon};

/// For each `host:port` argument: `<target> udp=<sent|ERRNO> tcp=<…>`.
const DIAL: &str = r#"
import errno, socket, sys

def name(error):
    return errno.errorcode.get(error.errno, str(error.errno))

for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    loopback = host in ("127.0.0.1", "::1")
    udp = socket.socket(family, socket.SOCK_DGRAM)
    try:
        udp.sendto(b"x", (host, int(port)))
        sent = "sent"
    except OSError as error:
        sent = name(error)
    udp.close()
    tcp = "-"
    if sent == "EPERM" or loopback:
        conn = socket.socket(family, socket.SOCK_STREAM)
        conn.settimeout(5)
        try:
            conn.connect((host, int(port)))
            tcp = "connected"
        except socket.timeout:
            tcp = "timeout"
        except OSError as error:
            tcp = name(error)
        conn.close()
    print(target, "udp=" + sent, "tcp=" + tcp, flush=True)
"#;

/// Every target's line, run in a fresh session of `daemon`.
async fn dial_from_a_runner(daemon: &TestDaemon, targets: &[String]) -> Vec<(String, String)> {
    start_session(daemon, "dialer").await;
    let client = daemon.client().await;
    let mut argv = vec!["/usr/bin/python3", "-c", DIAL];
    argv.extend(targets.iter().map(String::as_str));
    let started = client
        .exec(Scope::Session, "dialer", &request(&argv))
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    let command = CommandRef::Id(started.command_id);
    let wait = Duration::from_secs(60);
    let (stdout, _) = read_all(&client, "dialer", &command, OutputStream::Stdout, wait).await;
    let (stderr, proof) = read_all(&client, "dialer", &command, OutputStream::Stderr, wait).await;
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    eprintln!("what the runner saw:\n{stdout}");
    assert_eq!(
        proof.exit_code,
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&stderr)
    );
    stdout
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(target, verdict)| (target.to_string(), verdict.to_string()))
        .collect()
}

/// Asserts every target was refused by the rules (or had no route here),
/// and that at least `at_least` of them met the rules.
fn assert_refused_by_the_rules(verdicts: &[(String, String)], targets: &[&str], at_least: usize) {
    let mut met = 0;
    for target in targets {
        let verdict = verdicts
            .iter()
            .find(|(dialled, _)| dialled == target)
            .map(|(_, verdict)| verdict.as_str())
            .unwrap_or_else(|| panic!("{target} was not dialled: {verdicts:?}"));
        if verdict.starts_with("udp=ENETUNREACH") {
            eprintln!("skipped {target}: no route here, so the kernel never reaches the rules");
            continue;
        }
        assert_eq!(
            verdict, "udp=EPERM tcp=ECONNREFUSED",
            "{target} was not refused by the egress rules"
        );
        met += 1;
    }
    assert!(
        met >= at_least,
        "only {met} target(s) met the rules: {verdicts:?}"
    );
}

/// A loopback TCP listener (and a UDP socket on the same port, when
/// free) of the test's: the sandbox's positive control.
fn loopback_target() -> (TcpListener, Option<UdpSocket>, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let udp = UdpSocket::bind(&target).ok();
    (listener, udp, target)
}

/// Refused under both postures: every metadata address but
/// 169.254.169.254 itself (never dialled), and link-local and metadata
/// addresses written inside IPv6 (Teredo's client is the last 32 bits
/// inverted: 169.254.0.161 and 100.100.100.200 here).
const METADATA_TARGETS: [&str; 12] = [
    "100.100.100.200:80",
    "168.63.129.16:80",
    "192.0.0.192:80",
    "[fd00:ec2::254]:80",
    "[fd20:ce::254]:80",
    "[64:ff9b::a9fe:a9fe]:80",
    "[64:ff9b::6464:64c8]:80",
    "[2002:a9fe:a9fe::1]:80",
    "[::ffff:0:a9fe:a9fe]:80",
    "[64:ff9b:1:a9fe:a9:fe00::]:80",
    "[2001:0:4136:e378:8000:63bf:5601:ff5e]:80",
    "[2001:0:4136:e378:8000:63bf:9b9b:9b37]:80",
];

/// The two ways a process-tier sandbox meets the rules: the host's table
/// (`host`) and its own namespace's (`private`, the default).
const MODES: [&str; 2] = ["host", "private"];

fn daemon(posture: &str, mode: &str) -> TestDaemon {
    TestDaemon::start(Options {
        egress: Some(posture.to_string()),
        extra_toml: format!("[network]\nmode = \"{mode}\"\n"),
        ..Options::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relaxed_refuses_metadata_addresses_in_every_form_and_allows_loopback() {
    for mode in MODES {
        let daemon = daemon("relaxed", mode);
        let (_listener, _udp, control) = loopback_target();
        let mut targets: Vec<String> = METADATA_TARGETS.map(String::from).to_vec();
        // The test's loopback is the host's: a private sandbox has its own.
        if mode == "host" {
            targets.push(control.clone());
        }
        let verdicts = dial_from_a_runner(&daemon, &targets).await;
        // The three IPv4 ones always meet the rules (the host has IPv4
        // routes; a private namespace routes everything to its table).
        assert_refused_by_the_rules(&verdicts, &METADATA_TARGETS, 3);
        if mode == "host" {
            let control_verdict = &verdicts.iter().find(|(t, _)| *t == control).unwrap().1;
            assert!(
                control_verdict.ends_with("tcp=connected"),
                "relaxed refused the test's loopback listener: {control_verdict}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_also_refuses_shared_reserved_site_local_and_undecodable_prefixes() {
    // 192.0.0.9 rather than .8: a private sandbox's own address is 192.0.0.8.
    let strict_only = [
        "100.64.0.1:80",
        "192.0.0.9:80",
        "198.18.0.1:80",
        "[fec0::1]:80",
        "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:80",
        "[64:ff9b:1:ffff::1]:80",
        "[64:ff9b::a00:1]:80",
    ];
    for mode in MODES {
        let daemon = daemon("strict", mode);
        let targets: Vec<String> = strict_only
            .iter()
            .chain(&METADATA_TARGETS)
            .map(|target| target.to_string())
            .collect();
        let verdicts = dial_from_a_runner(&daemon, &targets).await;
        assert_refused_by_the_rules(&verdicts, &strict_only, 3);
        assert_refused_by_the_rules(&verdicts, &METADATA_TARGETS, 3);
    }
}
