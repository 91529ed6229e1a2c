//! Runners parked ahead in the prepared sandboxes (`[pool] park_runners`):
//! each prepared sandbox holds a process already in its cgroups,
//! under its uid, with every filter a runner gets, waiting for its launch.
//! A new sandbox's runner *is* that process (same pid), with the
//! sandbox's environment, workspace, output and nice value, under both
//! isolation settings; a runner its uid may not execute fails its ensure
//! naming the step, with nothing left; one whose exec fails past the
//! daemon's answer (not a valid executable) exits 127 saying why in its
//! log; a parked runner killed before its take, or after it with the
//! launch unread, is not used and the sandbox starts cold; a respawn never takes one; nothing
//! parked outlives a stop or a SIGKILLed daemon; `park_runners = false`
//! parks none.

use std::time::Duration;

use sandboxd_protocol::{PoolStatus, Scope};
use sandboxd_tests::{procs, runner_env, sandbox_env, Options, TestDaemon, RUNNER_UIDS};

const TIMEOUT: Duration = Duration::from_secs(60);

fn daemon(isolation: &str, session: usize, extra: &str) -> TestDaemon {
    TestDaemon::start(Options {
        extra_toml: format!(
            "isolation = \"{isolation}\"\n[pool]\nsession = {session}\nworkflow = 0\nconnect = 0\n{extra}"
        ),
        ..Options::with_runner_args(&["--print-lines", "3"])
    })
}

async fn session_pool(daemon: &TestDaemon) -> PoolStatus {
    let status = daemon.client().await.status().await.unwrap();
    status
        .pools
        .into_iter()
        .find(|pool| pool.scope == Scope::Session)
        .expect("a session pool")
}

/// The runners parked by `daemon`: its children named `sandbox-parked`.
fn parked(daemon: &TestDaemon) -> Vec<u32> {
    let Some(daemon_pid) = daemon.pid() else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "sandbox-parked")
                && procs::parent_pid(*pid) == Some(daemon_pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Waits until the session pool holds `ready`, each with its runner parked.
async fn wait_for_parked(daemon: &TestDaemon, ready: usize) -> Vec<u32> {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let pool = session_pool(daemon).await;
        let pids = parked(daemon);
        if pool.ready as usize == ready && pids.len() == ready {
            return pids;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never {ready} parked runners: {pool:?}, parked {pids:?}\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A field of `/proc/<pid>/status`.
fn status_field(pid: u32, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .map(|value| value.trim().to_string())
}

/// Field 19 of `/proc/<pid>/stat`: the nice value.
fn nice_of(pid: u32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 2..]
        .split_whitespace()
        .nth(16)?
        .parse()
        .ok()
}

async fn a_new_sandbox_is_the_runner_parked_for_it(isolation: &str) {
    let daemon = daemon(isolation, 2, "");
    let waiting = wait_for_parked(&daemon, 2).await;
    for pid in &waiting {
        let uid = procs::uid_of(*pid).unwrap();
        assert!(RUNNER_UIDS.contains(&uid), "parked as uid {uid}");
        assert_eq!(status_field(*pid, "NoNewPrivs").as_deref(), Some("1"));
        assert_eq!(status_field(*pid, "Seccomp").as_deref(), Some("2"));
        assert_eq!(
            status_field(*pid, "CapEff").as_deref(),
            Some("0000000000000000")
        );
        // A view's passwd copy is written when it is prepared, so its take
        // only reads it back.
        let passwd = daemon.state_dir().join(format!("identities/{uid}.passwd"));
        let written = std::fs::read_to_string(&passwd).unwrap_or_default();
        let ids = format!(":x:{uid}:{uid}:");
        assert_eq!(
            written
                .lines()
                .any(|line| line.contains(&ids) && line.ends_with(":/workspace:/bin/sh")),
            isolation == "full",
            "{}: {written:?}",
            passwd.display()
        );
    }
    let report = daemon
        .client()
        .await
        .ensure_session_sandbox("parked", &sandbox_env("session:parked", "tok"))
        .await
        .unwrap();
    let pid = report.pid.unwrap();
    assert!(
        waiting.contains(&pid),
        "the runner {pid} is not one of the parked {waiting:?}"
    );
    let workspace = daemon.workspace(Scope::Session, "parked");
    sandboxd_tests::wait_for_runner(&workspace, pid);
    let env = runner_env(&workspace);
    assert_eq!(env["STIGMER_TASK_QUEUE"], "session:parked");
    assert_eq!(env["STIGMER_TOKEN"], "tok");
    // At /workspace in a view; at its host path without one.
    let seen = match isolation {
        "full" => std::path::PathBuf::from("/workspace"),
        _ => workspace.clone(),
    };
    assert_eq!(env["WORKSPACE_ROOT_DIR"], seen.display().to_string());
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&workspace).unwrap());
    assert_eq!(
        procs::uid_of(pid),
        Some(owner),
        "runs as its workspace's uid"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
        seen
    );
    assert_eq!(nice_of(pid), Some(0), "a parked runner keeps nice 0");
    let log = daemon.runner_log(Scope::Session, "parked");
    assert!(
        procs::wait_until(TIMEOUT, || std::fs::read_to_string(&log)
            .is_ok_and(|text| text.contains("runner-fixture line 3"))),
        "the runner's output is not in its log"
    );
    let pool = session_pool(&daemon).await;
    assert_eq!((pool.hits, pool.misses), (1, 0), "{pool:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_sandbox_is_the_runner_parked_for_it_under_uid_cgroup() {
    a_new_sandbox_is_the_runner_parked_for_it("uid-cgroup").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_sandbox_is_the_runner_parked_for_it_under_full() {
    a_new_sandbox_is_the_runner_parked_for_it("full").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_cannot_exec_fails_its_ensure_naming_the_step_and_leaves_nothing() {
    let daemon = daemon("uid-cgroup", 1, "");
    let waiting = wait_for_parked(&daemon, 1).await;
    // Executable by root only: the daemon still finds it, the sandbox's
    // uid cannot run it.
    let runner = daemon.dir().join("bin").join("runner-fixture");
    sandboxd_tests::executables::copy_executable(
        &sandboxd_tests::binaries::runner_fixture(),
        &runner.with_extension("root-only"),
        0o700,
    );
    std::fs::rename(runner.with_extension("root-only"), &runner).unwrap();
    let error = daemon
        .client()
        .await
        .ensure_session_sandbox("noexec", &sandbox_env("session:noexec", "tok"))
        .await
        .expect_err("the runner cannot exec");
    let text = error.to_string();
    assert!(
        text.contains("access(X_OK) of the program") && text.contains("Permission denied"),
        "{text}"
    );
    assert!(
        procs::wait_until(TIMEOUT, || waiting
            .iter()
            .all(|pid| procs::pid_is_gone(*pid))),
        "the parked runner outlived its failed start"
    );
    assert!(!daemon.workspace(Scope::Session, "noexec").exists());
    // The daemon serves on.
    assert!(daemon.client().await.status().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_runner_killed_before_its_take_is_not_used() {
    let daemon = daemon("uid-cgroup", 1, "");
    let waiting = wait_for_parked(&daemon, 1).await;
    procs::signal_pid(waiting[0], nix::sys::signal::Signal::SIGKILL);
    assert!(procs::wait_until(TIMEOUT, || procs::state(waiting[0]) != Some('S')));
    let pid = sandboxd_tests::start_session(&daemon, "after-kill").await;
    assert!(!waiting.contains(&pid));
    let status = daemon.client().await.status().await.unwrap();
    let feature = status
        .isolation
        .iter()
        .find(|feature| feature.name == "prepared-sandboxes")
        .expect("the pool's feature");
    assert!(
        feature.detail.contains("a parked runner could not be used"),
        "{feature:?}"
    );
}

/// The race a liveness look cannot close: the stub is killed after the
/// daemon sent it the launch, before it read it (held stopped until the
/// launch is in its socket, then killed). Nothing of the launch ran, so
/// the sandbox starts cold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_runner_killed_with_its_launch_unread_is_not_used() {
    let daemon = daemon("uid-cgroup", 1, "");
    let waiting = wait_for_parked(&daemon, 1).await;
    let stub = waiting[0];
    procs::signal_pid(stub, nix::sys::signal::Signal::SIGSTOP);
    assert!(procs::wait_until(TIMEOUT, || procs::state(stub) == Some('T')));
    let kill_once_the_launch_waits = async {
        let deadline = std::time::Instant::now() + TIMEOUT;
        while queued_on_stdin(stub).unwrap_or(0) == 0 {
            assert!(std::time::Instant::now() < deadline, "no launch was sent");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        procs::signal_pid(stub, nix::sys::signal::Signal::SIGKILL);
    };
    let (pid, ()) = tokio::join!(
        sandboxd_tests::start_session(&daemon, "launch-unread"),
        kill_once_the_launch_waits
    );
    assert_ne!(pid, stub);
    assert!(procs::wait_until(TIMEOUT, || procs::pid_is_gone(stub)));
}

/// The bytes waiting in the receive queue of `pid`'s standard input, a
/// socket (`ss` reports a Unix socket's queue by its inode).
fn queued_on_stdin(pid: u32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/0")).ok()?;
    let inode = link
        .to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .to_string();
    let output = std::process::Command::new("ss")
        .args(["-x", "-a", "-H"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.get(5) == Some(&inode.as_str()))
        .and_then(|fields| fields.get(2)?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_respawn_takes_no_parked_runner() {
    let daemon = daemon("uid-cgroup", 1, "");
    let first = sandboxd_tests::start_session(&daemon, "again").await;
    let uid = procs::uid_of(first).unwrap();
    let client = daemon.client().await;
    client
        .deprovision(Scope::Session, "again", true)
        .await
        .unwrap();
    let waiting = wait_for_parked(&daemon, 1).await;
    let hits = session_pool(&daemon).await.hits;
    let again = sandboxd_tests::start_session(&daemon, "again").await;
    assert!(!waiting.contains(&again), "a respawn took a parked runner");
    assert_eq!(procs::uid_of(again), Some(uid), "its own uid");
    assert_eq!(session_pool(&daemon).await.hits, hits);
    assert_eq!(parked(&daemon), waiting, "the parked one is still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_parked_outlives_a_stop_or_a_killed_daemon() {
    let mut stopped = daemon("full", 2, "");
    let waiting = wait_for_parked(&stopped, 2).await;
    assert!(stopped.stop().success(), "{}", stopped.log_text());
    assert!(
        waiting.iter().all(|pid| procs::pid_is_gone(*pid)),
        "parked runners outlived a stop: {}",
        procs::describe(&waiting)
    );

    let mut killed = daemon("uid-cgroup", 2, "");
    let waiting = wait_for_parked(&killed, 2).await;
    killed.kill();
    assert!(
        procs::wait_until(TIMEOUT, || waiting
            .iter()
            .all(|pid| procs::pid_is_gone(*pid))),
        "parked runners outlived a SIGKILLed daemon: {}",
        procs::describe(&waiting)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn park_runners_false_parks_none_and_the_pool_still_serves() {
    let daemon = daemon("uid-cgroup", 2, "park_runners = false\n");
    let deadline = std::time::Instant::now() + TIMEOUT;
    while session_pool(&daemon).await.ready < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(parked(&daemon), Vec::<u32>::new());
    sandboxd_tests::start_session(&daemon, "unparked").await;
    assert_eq!(session_pool(&daemon).await.hits, 1);
    let status = daemon.client().await.status().await.unwrap();
    assert!(status
        .isolation
        .iter()
        .any(|feature| feature.name == "prepared-sandboxes"
            && feature.detail.contains("park_runners = false")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_that_fails_past_the_answer_is_the_runners_exit_127_saying_why() {
    let daemon = daemon("uid-cgroup", 1, "");
    let waiting = wait_for_parked(&daemon, 1).await;
    // Executable by everyone, and no executable at all.
    let runner = daemon.dir().join("bin").join("runner-fixture");
    sandboxd_tests::executables::write_executable(
        &runner.with_extension("garbage"),
        "not a program\n",
        0o755,
    );
    std::fs::rename(runner.with_extension("garbage"), &runner).unwrap();
    let client = daemon.client().await;
    let since = sandboxd_tests::events::events_now(&client).await;
    let report = client
        .ensure_session_sandbox("garbage", &sandbox_env("session:garbage", "tok"))
        .await
        .expect("answered once only the exec was left");
    assert!(waiting.contains(&report.pid.unwrap()));
    let (exited, _) = sandboxd_tests::events::wait_for_event(&client, Some(since), |event| {
        event.kind == sandboxd_client::EventKind::Exited && event.id == "garbage"
    })
    .await;
    assert_eq!(
        exited.exit.map(|exit| exit.reason),
        Some(sandboxd_client::ExitReason::Exited { code: 127 })
    );
    let log = std::fs::read_to_string(daemon.runner_log(Scope::Session, "garbage")).unwrap();
    assert!(
        log.contains("sandboxd: cannot exec") && log.contains("Exec format error"),
        "{log}"
    );
}
