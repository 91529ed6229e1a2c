//! The socket under abuse: floods of idle connections from a uid on no
//! allow-list and from a listed uid over its cap, a peer sending a frame a
//! byte at a time, and an idle connection. Root must be served throughout,
//! and the daemon's log must stay bounded.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sandboxd_tests::binaries;
use sandboxd_tests::procs::wait_until;
use sandboxd_tests::{Options, TestDaemon, NOBODY};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Uids on the mutate list in these tests (their gid is nogroup, so the
/// socket lets them connect). Four of them at 4 connections each fill the
/// 15 shared slots of a 16-connection daemon: only the owners' reserve is left.
const LISTED: [u32; 4] = [65530, 65531, 65532, 65533];
/// How long one of root's calls may wait while the flood lasts.
const ROOT_CALL: Duration = Duration::from_secs(10);

/// A small daemon: 16 connections, 4 per listed uid, nogroup on the socket.
fn small_daemon() -> TestDaemon {
    TestDaemon::start(Options {
        extra_toml:
            "socket_group = \"nogroup\"\nmax_connections = 16\n[connections]\nper_uid = 4\n".into(),
        access_toml: Some(format!("mutate_uids = {LISTED:?}")),
        ..Options::default()
    })
}

/// Kills its holder process when dropped.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `socket-holder` as `uid:nogroup`, opening `count` connections, and
/// waits until it has opened them all.
fn hold(daemon: &TestDaemon, uid: u32, count: usize) -> Holder {
    let holder = daemon.executable_copy(&binaries::socket_holder());
    let mut child = Command::new(holder)
        .arg(daemon.socket())
        .arg(count.to_string())
        .uid(uid)
        .gid(NOBODY)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run socket-holder");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        format!("connected {count}"),
        "socket-holder as {uid}"
    );
    Holder(child)
}

fn count_lines(daemon: &TestDaemon, needle: &str) -> usize {
    daemon
        .log_text()
        .lines()
        .filter(|line| line.contains(needle))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_is_served_while_a_stranger_and_a_listed_uid_flood_the_socket() {
    let daemon = small_daemon();
    // More than the whole cap, from a uid on no allow-list…
    let _strangers = hold(&daemon, NOBODY, 40);
    // …and more than the whole cap from each listed uid, which per_uid
    // stops at 4 each: together they take every shared slot.
    let _listed: Vec<Holder> = LISTED.iter().map(|&uid| hold(&daemon, uid, 40)).collect();
    assert!(
        wait_until(Duration::from_secs(10), || count_lines(
            &daemon,
            "this uid already holds 4 connections"
        ) > 0),
        "a listed uid's fifth connection must be refused by per_uid:\n{}",
        daemon.log_text()
    );
    assert!(
        wait_until(Duration::from_secs(10), || count_lines(
            &daemon,
            "the peer is on no access list"
        ) > 0),
        "the stranger's flood must be refused beyond its lane:\n{}",
        daemon.log_text()
    );

    // Root: ten calls, each served within a bounded wait.
    for call in 0..10 {
        let output = daemon.sandboxctl_with_env(&["status"], &[]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "root's call {call} while the socket is flooded: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let client = sandboxd_client::SandboxdClient::builder()
        .socket(daemon.socket())
        .deadline(ROOT_CALL)
        .connect()
        .await
        .expect("root connects while the socket is flooded");
    client.status().await.expect("root is served");

    // 5 × 36 refusals were made; the log holds the first few per uid.
    let refusals = count_lines(&daemon, "closing a new connection at once");
    assert!(
        (5..=50).contains(&refusals),
        "refusals must be rate-limited per uid, got {refusals} lines:\n{}",
        daemon.log_text()
    );
    assert!(
        wait_until(Duration::from_secs(30), || count_lines(
            &daemon,
            "were left out of the log"
        ) >= 2),
        "one summary line per uid must count what was left out:\n{}",
        daemon.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_sent_a_byte_a_second_is_cut_off_and_an_idle_connection_closed() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "[connections]\nframe_timeout = \"2s\"\nidle_timeout = \"3s\"\n".into(),
        ..Options::default()
    });

    // Slowloris: a length header announcing 64 bytes, then one byte a second.
    let mut slow = UnixStream::connect(daemon.socket()).await.unwrap();
    slow.write_all(&[0, 0, 0, 64]).await.unwrap();
    let mut cut_off = false;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if slow.write_all(&[0]).await.is_err() {
            cut_off = true;
            break;
        }
    }
    assert!(
        cut_off,
        "a peer trickling a frame must be cut off:\n{}",
        daemon.log_text()
    );
    assert!(
        daemon.log_text().contains("frame_timeout"),
        "the log must say why:\n{}",
        daemon.log_text()
    );

    // Idle: a connection that never speaks is closed (EOF) by the daemon.
    let mut idle = UnixStream::connect(daemon.socket()).await.unwrap();
    let mut buffer = [0u8; 8];
    let read = tokio::time::timeout(Duration::from_secs(30), idle.read(&mut buffer))
        .await
        .expect("the daemon closes an idle connection");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

    // And the daemon serves on; a client reconnects after its idle close.
    let client = daemon.client().await;
    client.status().await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    client
        .status()
        .await
        .expect("the client reconnects after the daemon closed its idle connection");
}
