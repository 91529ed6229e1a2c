//! `sandboxd-init`: the daemon execs it, not its own binary, as each
//! sandbox's init, each prepared view's holder and each parked runner when
//! it stands next to the daemon; without it, or with one of another build,
//! the daemon plays those roles itself, says so in `status`, and sandboxes
//! start and run as before (under `isolation = "full"`, with a pool).

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandboxd_protocol::{IsolationFeature, Scope};
use sandboxd_tests::runner::{start_session, wait_for_runner};
use sandboxd_tests::{
    binaries, make_test_dir, procs, sandbox_env, wait_until, Options, TestDaemon,
};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A daemon with one session view prepared ahead and none for workflows
/// (so a workflow sandbox always starts cold), run from `binary`.
fn daemon(binary: Option<PathBuf>) -> TestDaemon {
    TestDaemon::start(Options {
        extra_toml: "[pool]\nsession = 1\nworkflow = 0\nconnect = 0\n".to_string(),
        daemon_binary: binary,
        ..Options::with_runner_args(&["--serve-probes"])
    })
}

async fn init_binary_feature(daemon: &TestDaemon) -> IsolationFeature {
    let status = daemon.client().await.status().await.unwrap();
    status
        .isolation
        .into_iter()
        .find(|feature| feature.name == "init-binary")
        .expect("status names the init binary")
}

fn exe(pid: u32) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default()
}

fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The daemon's children playing a role, by its hidden argument: the
/// prepared view's holder and the parked runner, once the pool is full.
fn parked(daemon: &TestDaemon) -> Vec<(String, u32)> {
    let daemon_pid = daemon.pid().unwrap();
    pids()
        .into_iter()
        .filter(|&pid| procs::parent_pid(pid) == Some(daemon_pid))
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let role = cmdline.split(|&byte| byte == 0).nth(1)?;
            let role = String::from_utf8_lossy(role).to_string();
            role.starts_with("__sandbox-").then_some((role, pid))
        })
        .collect()
}

/// PID 1 of the PID namespace `pid` runs in, as the host sees it: a cold
/// sandbox's init, or a prepared view's holder.
fn namespace_init(pid: u32) -> Option<u32> {
    let namespace = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    pids().into_iter().find(|&other| {
        std::fs::read_link(format!("/proc/{other}/ns/pid")).ok() == Some(namespace.clone())
            && std::fs::read_to_string(format!("/proc/{other}/status")).is_ok_and(|status| {
                status
                    .lines()
                    .find(|line| line.starts_with("NSpid:"))
                    .is_some_and(|line| line.split_whitespace().last() == Some("1"))
            })
    })
}

/// Waits for the session pool's view and runner, and checks that both run
/// `binary`.
fn assert_parked_run(daemon: &TestDaemon, binary: &Path) {
    let full = wait_until(TIMEOUT, || {
        let roles: Vec<String> = parked(daemon).into_iter().map(|(role, _)| role).collect();
        roles.contains(&"__sandbox-view-holder".to_string())
            && roles.contains(&"__sandbox-parked-runner".to_string())
    });
    assert!(full, "no view and runner parked:\n{}", daemon.log_text());
    for (role, pid) in parked(daemon) {
        assert_eq!(exe(pid), binary, "{role} (pid {pid})");
    }
}

/// Starts a session sandbox (from the pool) and a workflow sandbox (cold),
/// checks that the PID 1 of each runs `binary` and that each runner runs.
async fn assert_sandboxes_run(daemon: &TestDaemon, binary: &Path) {
    let warm = start_session(daemon, "warm").await;
    let client = daemon.client().await;
    let cold = client
        .ensure(Scope::Workflow, "cold", &sandbox_env("q:cold", "tok"))
        .await
        .unwrap_or_else(|error| panic!("ensure cold: {error}\n{}", daemon.log_text()))
        .pid
        .expect("the process tier reports the pid");
    wait_for_runner(&daemon.workspace(Scope::Workflow, "cold"), cold);
    for (name, runner) in [("warm", warm), ("cold", cold)] {
        let init = namespace_init(runner)
            .unwrap_or_else(|| panic!("{name}: no PID 1 in the runner's namespace"));
        assert_ne!(
            init, runner,
            "{name}: the runner is not its sandbox's PID 1"
        );
        assert_eq!(exe(init), binary, "{name}: PID 1 ({init})");
    }
    let seen = sandboxd_tests::runner::probe(daemon, "warm", "echo ok=1\n", TIMEOUT);
    assert_eq!(seen.get("ok").map(String::as_str), Some("1"));
}

#[tokio::test]
async fn sandboxes_run_the_sandboxd_init_next_to_the_daemon() {
    let init = binaries::sandboxd_init();
    let daemon = daemon(None);
    let feature = init_binary_feature(&daemon).await;
    assert!(feature.in_force, "{feature:?}");
    assert!(
        feature.detail.contains(&init.display().to_string()),
        "{feature:?}"
    );
    assert_parked_run(&daemon, &init);
    assert_sandboxes_run(&daemon, &init).await;
}

#[tokio::test]
async fn without_a_sandboxd_init_of_its_build_the_daemon_plays_its_roles() {
    // The built daemon, linked into a directory of this test's (the same
    // file system as the build): at first with nothing beside it.
    let dir = make_test_dir();
    let linked = dir.join("sandboxd");
    std::fs::hard_link(binaries::sandboxd(), &linked).unwrap();
    let mut missing = daemon(Some(linked.clone()));
    let feature = init_binary_feature(&missing).await;
    assert!(!feature.in_force, "{feature:?}");
    assert!(
        feature.detail.contains("cannot open") && feature.detail.contains("sandboxd-init"),
        "{feature:?}"
    );
    assert!(
        missing.log_text().contains("this daemon's own binary"),
        "the start says why:\n{}",
        missing.log_text()
    );
    assert_parked_run(&missing, &linked);
    assert_sandboxes_run(&missing, &linked).await;
    missing.stop();

    // Then beside a `sandboxd-init` that is not of its build (`echo`
    // prints its own argument for the stamp): not used either.
    let other = dir.join("sandboxd-init");
    std::fs::copy("/bin/echo", &other).unwrap();
    let stranger = daemon(Some(linked.clone()));
    let feature = init_binary_feature(&stranger).await;
    assert!(!feature.in_force, "{feature:?}");
    assert!(feature.detail.contains("another build"), "{feature:?}");
    assert_parked_run(&stranger, &linked);
}
