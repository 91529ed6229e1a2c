//! The egress posture through the real daemon: what status and describe
//! say, and failing closed — a posture whose rules cannot be installed
//! refuses every ensure, naming why, and starts nothing.
//!
//! A runner's own connect to the test's loopback listeners, refused under
//! `strict` and allowed under `relaxed`, shows the rules hold the process
//! tier's sandboxes cgroup end to end. The kernel rules' other cases
//! (link-local refused in a namespace of the test's own, UDP) are
//! exercised against real sockets in the daemon's `egress::tests`.

use std::net::TcpListener;
use std::time::Duration;

use sandboxd_client::{ClientError, ProbeState, SandboxError, Scope};
use sandboxd_tests::{sandbox_env, wait_until, Options, TestDaemon};

/// What the runner fixture printed of its one connect to `target`, under
/// `posture`: `ok`, or `failed: …`.
async fn runner_connect_under(posture: &str, target: &str) -> String {
    // The host's network: the host's loopback is the runner's own to dial
    // (a private sandbox reaches only its endpoints there: `private_network`).
    let daemon = TestDaemon::start(Options {
        egress: Some(posture.to_string()),
        extra_toml: "[network]\nmode = \"host\"\n".to_string(),
        ..Options::with_runner_args(&["--connect", target])
    });
    let client = daemon.client().await;
    client
        .ensure_session_sandbox("dialer", &sandbox_env("session:dialer", "tok"))
        .await
        .unwrap();
    let log = daemon.runner_log(Scope::Session, "dialer");
    let prefix = format!("runner-fixture: connect {target}: ");
    let mut verdict = None;
    wait_until(Duration::from_secs(20), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        verdict = text
            .lines()
            .find_map(|line| line.strip_prefix(&prefix).map(str::to_string));
        verdict.is_some()
    });
    verdict.unwrap_or_else(|| {
        panic!(
            "the runner never tried {target}; log:\n{}",
            daemon.log_text()
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_refuses_a_runners_loopback_connect_and_relaxed_allows_it() {
    for (family, bind) in [("IPv4", "127.0.0.1:0"), ("IPv6", "[::1]:0")] {
        let listener = TcpListener::bind(bind).unwrap();
        let target = listener.local_addr().unwrap().to_string();
        let strict = runner_connect_under("strict", &target).await;
        assert!(
            strict.starts_with("failed") && strict.contains("refused"),
            "{family}: strict let a runner reach the host's loopback: {strict}"
        );
        let relaxed = runner_connect_under("relaxed", &target).await;
        assert_eq!(relaxed, "ok", "{family}: relaxed refused loopback");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posture_that_cannot_be_installed_refuses_every_ensure_naming_why() {
    // The daemon's PATH holds no nft: the rules cannot be installed.
    let daemon = TestDaemon::start(Options {
        egress: Some("strict".to_string()),
        env: vec![(
            "PATH".to_string(),
            "/nonexistent/sandboxd-egress-test".to_string(),
        )],
        ..Options::default()
    });
    let client = daemon.client().await;

    let env = sandbox_env("session:closed-1", "tok-closed");
    let error = client
        .ensure_session_sandbox("closed-1", &env)
        .await
        .unwrap_err();
    let ClientError::Sandbox(SandboxError::Unavailable(message)) = &error else {
        panic!("not unavailable: {error:?}")
    };
    assert!(
        message.contains("egress posture 'strict' is not in force, so no sandbox may start"),
        "{message}"
    );
    assert!(message.contains("nft"), "{message}");
    assert_eq!(
        client.probe(Scope::Session, "closed-1").await.unwrap(),
        ProbeState::Absent,
        "a refused ensure starts nothing"
    );
    assert!(daemon.workspaces().is_empty(), "{:?}", daemon.workspaces());

    // The daemon keeps serving, and says why.
    let status = client.status().await.unwrap();
    assert_eq!(status.egress.posture, "strict");
    assert!(!status.egress.enforced);
    assert!(
        status.egress.mechanism.starts_with("NOT ENFORCED"),
        "{:?}",
        status.egress
    );
    let text = String::from_utf8_lossy(&daemon.sandboxctl(&["status"]).stdout).into_owned();
    assert!(text.contains("egress:    strict (NOT ENFORCED"), "{text}");
    assert_eq!(
        status.health.verdict,
        sandboxd_client::HealthVerdict::Unhealthy,
        "{:?}",
        status.health
    );
    assert!(
        status
            .health
            .reasons
            .iter()
            .any(|reason| reason.contains("egress posture 'strict' is not in force")),
        "{:?}",
        status.health
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_none_is_said_to_be_unrestricted() {
    let daemon = TestDaemon::start(Options {
        egress: Some("none".to_string()),
        ..Options::default()
    });
    let client = daemon.client().await;
    let status = client.status().await.unwrap();
    assert_eq!(status.egress.posture, "none");
    assert!(!status.egress.enforced);
    assert!(
        status.egress.mechanism.starts_with("unrestricted"),
        "{:?}",
        status.egress
    );

    let env = sandbox_env("session:open-1", "tok-open");
    client.ensure_session_sandbox("open-1", &env).await.unwrap();
    let info = client.describe(Scope::Session, "open-1").await.unwrap();
    assert_eq!(info.egress.as_ref(), Some(&status.egress));
    let text =
        String::from_utf8_lossy(&daemon.sandboxctl(&["describe", "session", "open-1"]).stdout)
            .into_owned();
    assert!(
        text.lines().any(|line| line
            .strip_prefix("egress:")
            .is_some_and(|rest| rest.trim_start().starts_with("none (unrestricted"))),
        "{text}"
    );
}

/// The process-tier table `daemon` loaded, from its log.
fn table_of(daemon: &TestDaemon) -> String {
    let log = daemon.log_text();
    log.lines()
        .filter(|line| line.contains("every socket under cgroup"))
        .find_map(|line| line.split("nftables table inet ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no table in the log:\n{log}"))
        .to_string()
}

/// True when no process holds the lock of `path` (or there is no file).
fn lock_is_free(path: &std::path::Path) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    match std::fs::File::open(path) {
        Ok(file) => Flock::lock(file, FlockArg::LockExclusiveNonblock).is_ok(),
        Err(_) => true,
    }
}

fn table_exists(table: &str) -> bool {
    std::process::Command::new("nft")
        .args(["list", "table", "inet", table])
        .output()
        .unwrap()
        .status
        .success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_sweep_keeps_a_live_daemons_table_and_removes_a_sigkilled_ones() {
    // Neither has a sandbox, so both cgroups are empty: only the holder
    // lock tells the live daemon from the gone one.
    let live = TestDaemon::start(Options::default());
    let live_table = table_of(&live);
    let mut killed = TestDaemon::start(Options::default());
    let killed_table = table_of(&killed);
    let killed_socket = killed.socket().display().to_string();
    killed.kill();
    assert!(table_exists(&killed_table), "a SIGKILL removed the table");
    // Gone once no process of it holds its lock any more (the kernel
    // drops it as the last of them exits).
    let holder = std::path::Path::new("/run/stigmer/holders").join(&killed_table);
    assert!(
        wait_until(Duration::from_secs(60), || lock_is_free(&holder)),
        "{} stayed locked after the SIGKILL",
        holder.display()
    );

    let next = TestDaemon::start(Options::default());
    assert!(
        wait_until(Duration::from_secs(60), || next
            .log_text()
            .contains("swept other daemons' egress tables")),
        "the sweep never ended; log:\n{}",
        next.log_text()
    );
    // Other tests' daemons sweep too: whoever removed it, it is gone (or
    // going: one of them may hold its lock to remove it right now, which
    // this daemon's sweep then saw as held).
    assert!(
        wait_until(Duration::from_secs(60), || !table_exists(&killed_table)),
        "inet {killed_table} of a SIGKILLed daemon outlived the next start's sweep; log:\n{}",
        next.log_text()
    );
    assert!(
        table_exists(&live_table),
        "the sweep removed inet {live_table} of a live daemon; log:\n{}",
        next.log_text()
    );
    let log = next.log_text();
    if let Some(line) = log.lines().find(|line| {
        line.contains(&killed_table) && line.contains("removed another daemon's egress table")
    }) {
        assert!(
            line.contains("holder lock") && line.contains(&killed_socket),
            "the removal does not say whose it was and why: {line}"
        );
    }
    // The sweep ran after the daemon served: it answered first.
    let serving = log.find("sandboxd is serving").unwrap();
    let swept = log.find("swept other daemons' egress tables").unwrap();
    assert!(serving < swept, "{log}");
    drop(killed);
    drop(live);
}
