//! Running out of file descriptors is an error that names the limit, never
//! a hang: the daemon's open-file limit is lowered from outside (prlimit)
//! to a few above what it holds, then sandboxes are ensured until one
//! cannot be; the error names RLIMIT_NOFILE and its value, a new caller is
//! answered at once rather than left waiting, and once sandboxes are gone
//! the daemon serves as before.

use std::process::Command;
use std::time::Duration;

use sandboxd_client::{ClientError, SandboxError};
use sandboxd_tests::{run_with_timeout, sandbox_env, Options, TestDaemon};

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Sets the daemon's open-file limit from outside: `soft:hard`, or the
/// soft one alone (the hard one kept) when `hard` is `None`.
fn set_open_file_limit(pid: u32, soft: usize, hard: Option<usize>) {
    let hard = hard.map(|hard| hard.to_string()).unwrap_or_default();
    let mut prlimit = Command::new("prlimit");
    prlimit.args([
        "--pid",
        &pid.to_string(),
        &format!("--nofile={soft}:{hard}"),
    ]);
    let output = run_with_timeout(prlimit, Duration::from_secs(10));
    assert!(
        output.status.success(),
        "prlimit: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// No views prepared ahead: the pool's descriptors (one per ready view,
/// and three per spawner thread for its way back from a view) are a fixed
/// few, made on its own thread whenever it refills, not a runner's; these
/// tests count what each runner costs.
const NO_POOL: &str = "[pool]\nsession = 0\nworkflow = 0\nconnect = 0\n";

/// A daemon whose runner is `sh -c script`.
fn shell_runner_daemon(script: &str) -> TestDaemon {
    TestDaemon::start(Options {
        runner_command: Some("/bin/sh".into()),
        runner_args: vec!["-c".into(), script.into()],
        extra_toml: NO_POOL.into(),
        ..Options::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_is_an_error_naming_the_limit_and_never_a_hang() {
    let daemon = TestDaemon::start(Options {
        extra_toml: NO_POOL.into(),
        ..Options::default()
    });
    let client = daemon.client().await;
    client.status().await.unwrap();
    let pid = daemon.pid().unwrap();
    // Room for a spawn's descriptors while it runs, none of them held once
    // the runner has started: under `isolation = "full"` the runner's own
    // stdio (/dev/null and two copies of the output pipe) and the status
    // file beside init's, and the view's bind sources (the runner program,
    // the workspace), which the sandbox's first process opens in its copy
    // of the daemon's descriptor table, under the daemon's limit.
    let limit = open_descriptors(pid) + 20;
    set_open_file_limit(pid, limit, Some(limit));

    let mut started = Vec::new();
    let mut refusal = None;
    for n in 0..200 {
        let id = format!("fd-{n}");
        match client
            .ensure_session_sandbox(&id, &sandbox_env(&format!("session:{id}"), ""))
            .await
        {
            Ok(_) => started.push(id),
            Err(error) => {
                refusal = Some(error);
                break;
            }
        }
    }
    eprintln!(
        "fd-limit: {} sandboxes within {limit} descriptors",
        started.len()
    );
    let message = match refusal {
        Some(ClientError::Sandbox(SandboxError::Unavailable(message))) => message,
        other => panic!(
            "expected an unavailable error after {} sandboxes, got {other:?}",
            started.len()
        ),
    };
    assert!(
        message.contains("RLIMIT_NOFILE") && message.contains(&limit.to_string()),
        "the error must name the limit and its value: {message}"
    );
    assert!(message.contains("LimitNOFILE="), "{message}");
    eprintln!("fd-limit: {message}");

    // A new caller, while the daemon is at its limit, is answered (or
    // turned away) at once: sandboxctl finishes, it does not hang.
    let output = daemon.sandboxctl(&["status"]);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // With sandboxes gone, descriptors are free again and all is served.
    for id in started.iter().take(6) {
        client.deprovision_session_sandbox(id).await.unwrap();
    }
    let status = daemon.sandboxctl(&["status"]);
    assert_eq!(
        status.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    client
        .ensure_session_sandbox("fd-again", &sandbox_env("session:fd-again", ""))
        .await
        .expect("an ensure succeeds once descriptors are free");
}

/// The daemon's descriptors that point at `path`.
fn descriptors_on(pid: u32, path: &std::path::Path) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|entry| std::fs::read_link(entry.path()).is_ok_and(|target| target == path))
        .count()
}

/// A quiet runner costs the daemon four descriptors: the read end of its
/// output pipe, and its network relay's listener and two DNS sockets (a
/// private network, the default): its output file is closed after two
/// quiet seconds and opened again when it writes, and nothing it wrote is
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_runner_holds_four_descriptors_and_its_later_output_still_arrives() {
    const PER_SANDBOX: usize = 4;
    const COUNT: usize = 8;
    let daemon = shell_runner_daemon("echo first; sleep 5; echo second; exec sleep 600");
    let client = daemon.client().await;
    client.status().await.unwrap();
    let pid = daemon.pid().unwrap();
    let before = open_descriptors(pid);
    let ids: Vec<String> = (0..COUNT).map(|n| format!("quiet-{n}")).collect();
    for id in &ids {
        client
            .ensure_session_sandbox(id, &sandbox_env(&format!("session:{id}"), ""))
            .await
            .unwrap();
    }
    let log = |id: &str| daemon.runner_log(sandboxd_client::Scope::Session, id);
    let text = |id: &str| std::fs::read_to_string(log(id)).unwrap_or_default();

    // "first" is out, and two quiet seconds (plus a tick) later each file
    // is closed: what is left per runner is its pipe and its relay.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    for id in &ids {
        assert_eq!(text(id), "first\n", "{id}");
        assert_eq!(
            descriptors_on(pid, &log(id)),
            0,
            "{id}'s output file is still open"
        );
    }
    // Two more are the daemon's own, made with its first runner: the pump
    // thread's epoll set and its wake-up eventfd.
    let quiet = open_descriptors(pid);
    assert!(
        quiet <= before + COUNT * PER_SANDBOX + 2,
        "{COUNT} quiet runners hold {} descriptors in the daemon ({before} before, {quiet} now)",
        quiet.saturating_sub(before)
    );

    // The later line reaches the file, after the earlier one.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    for id in &ids {
        while text(id) != "first\nsecond\n" {
            assert!(std::time::Instant::now() < deadline, "{id}: {:?}", text(id));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// With no descriptor left to open its output file, a runner's output waits
/// in its pipe, and reaches the file once a descriptor is free: nothing is
/// lost, and the daemon says why once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_waits_for_a_free_descriptor_and_is_not_lost() {
    let daemon = shell_runner_daemon("echo first; sleep 4; echo second; exec sleep 600");
    let client = daemon.client().await;
    client
        .ensure_session_sandbox("waits", &sandbox_env("session:waits", ""))
        .await
        .unwrap();
    let pid = daemon.pid().unwrap();
    let log = daemon.runner_log(sandboxd_client::Scope::Session, "waits");
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    // "first" is written and, two quiet seconds later, the file closed.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(text(), "first\n");
    assert_eq!(descriptors_on(pid, &log), 0);

    // No descriptor left: "second" cannot be written when it comes.
    let soft = sandboxd_tests::procs::soft_open_file_limit(pid).unwrap() as usize;
    // The lowest free descriptor number is at the limit: every open fails.
    let held: std::collections::BTreeSet<usize> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect();
    set_open_file_limit(pid, (0..).find(|fd| !held.contains(fd)).unwrap(), None);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !daemon.log_text().contains("its output waits in its pipe") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(text(), "first\n", "written without a descriptor?");

    set_open_file_limit(pid, soft, None);
    while text() != "first\nsecond\n" {
        assert!(std::time::Instant::now() < deadline, "{:?}", text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(daemon
        .log_text()
        .contains("a runner's output file is open again"));
}
