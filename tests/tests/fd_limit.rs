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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_is_an_error_naming_the_limit_and_never_a_hang() {
    let daemon = TestDaemon::start(Options::default());
    let client = daemon.client().await;
    client.status().await.unwrap();
    let pid = daemon.pid().unwrap();
    let limit = open_descriptors(pid) + 12;
    let mut prlimit = Command::new("prlimit");
    prlimit.args([
        "--pid",
        &pid.to_string(),
        &format!("--nofile={limit}:{limit}"),
    ]);
    let output = run_with_timeout(prlimit, Duration::from_secs(10));
    assert!(
        output.status.success(),
        "prlimit: {}",
        String::from_utf8_lossy(&output.stderr)
    );

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
