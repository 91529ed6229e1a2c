//! Every sandbox ends with the daemon, even when its group reaper was
//! killed too: nothing then kills the sandboxes' cgroups, and what ends a
//! sandbox is its PID 1 — a cold sandbox's init by its parent-death
//! signal, a prepared view's holder by its lifeline pipe — whose end takes
//! every process of its PID namespace with it.
//!
//! The attack this answers: the init's parent-death signal was cleared
//! when it switched to the runner's uid, so a sandbox started cold (and
//! whatever it had forked, however hidden) ran on, unwatched, until the
//! next daemon's start.
//!
//! Real daemon, real runners (`--escape`: a `setsid` grandchild that
//! ignores SIGTERM), as root under `isolation = "full"`.

use std::time::Duration;

use nix::sys::signal::Signal;
use sandboxd_client::Scope;
use sandboxd_tests::procs::{self, pid_is_gone, wait_until};
use sandboxd_tests::runner::wait_for_runner;
use sandboxd_tests::{sandbox_env, Options, TestDaemon};

/// A bounded wait for a process to end, not a measure of speed.
const DEATH_WAIT: Duration = Duration::from_secs(20);

/// A daemon whose session sandboxes start cold (`pool = 0`) or in views
/// prepared ahead, each runner leaving an escapee.
fn daemon(session_pool: usize) -> TestDaemon {
    TestDaemon::start(Options {
        extra_toml: format!(
            "isolation = \"full\"\n[pool]\nsession = {session_pool}\nworkflow = 0\nconnect = 0\n"
        ),
        ..Options::with_runner_args(&["--escape"])
    })
}

/// The sandbox's processes by host pid: its PID 1 (init or holder), the
/// runner (`describe`'s pid) and the escapee.
async fn start_sandbox(daemon: &TestDaemon, id: &str) -> [u32; 3] {
    let client = daemon.client().await;
    client
        .ensure_session_sandbox(id, &sandbox_env(&format!("session:{id}"), "tok"))
        .await
        .unwrap();
    let runner = client
        .describe(Scope::Session, id)
        .await
        .unwrap()
        .pid
        .expect("describe gives the runner's pid");
    let workspace = daemon.workspace(Scope::Session, id);
    wait_for_runner(&workspace, runner);
    let escapee = procs::read_pid_file(&workspace.join("escapee.pid")).expect("escapee.pid");
    let escapee = procs::host_pid_in_sandbox(&workspace, escapee);
    [pid_one_of(runner), runner, escapee]
}

/// PID 1 of the runner's PID namespace, by host pid: its init when
/// started cold, the view's holder when it joined a prepared view. (The
/// process of that namespace whose `NSpid` there is 1.)
fn pid_one_of(runner: u32) -> u32 {
    let namespace = std::fs::read_link(format!("/proc/{runner}/ns/pid")).unwrap();
    let own = std::fs::read_link("/proc/self/ns/pid").unwrap();
    assert_ne!(
        namespace, own,
        "the runner {runner} is not in a PID namespace"
    );
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|&pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/pid"))
                .ok()
                .as_ref()
                == Some(&namespace)
                && std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .unwrap_or_default()
                    .lines()
                    .any(|line| line.starts_with("NSpid:") && line.ends_with("\t1"))
        })
        .expect("PID 1 of the runner's namespace")
}

/// The daemon's group reaper: its child running `sandboxd __group-reaper`
/// (polled: a command line reads empty until its exec is done).
fn reaper_of(daemon_pid: u32) -> u32 {
    let mut found = None;
    wait_until(Duration::from_secs(5), || {
        found = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|&pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                procs::parent_pid(pid) == Some(daemon_pid)
                    && String::from_utf8_lossy(&cmdline).contains("__group-reaper")
            });
        found.is_some()
    });
    found.expect("the daemon's group reaper")
}

/// SIGKILLs the reaper, then the daemon; asserts each of `pids` ends; then
/// starts the daemon again, which sweeps what the dead one left (cgroups,
/// ledger) so the test leaves nothing behind.
async fn kill_daemon_and_reaper_and_expect_gone(mut daemon: TestDaemon, pids: &[u32]) {
    let reaper = reaper_of(daemon.pid().unwrap());
    procs::signal_pid(reaper, Signal::SIGKILL);
    assert!(wait_until(Duration::from_secs(5), || pid_is_gone(reaper)));
    daemon.kill();
    for &pid in pids {
        assert!(
            wait_until(DEATH_WAIT, || pid_is_gone(pid)),
            "{pid} outlived the daemon and its reaper, both SIGKILLed: {}\ndaemon log:\n{}",
            procs::describe(pids),
            daemon.log_text()
        );
    }
    daemon.launch();
    daemon.wait_ready();
    daemon.client().await.status().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_sandbox_ends_when_the_daemon_and_its_reaper_are_both_killed() {
    let daemon = daemon(0);
    let pids = start_sandbox(&daemon, "cold-lifeline").await;
    let [init, runner, _] = pids;
    assert_ne!(
        init, runner,
        "started cold: the runner's parent is its init"
    );
    // It works as ever until then.
    assert!(!pid_is_gone(init) && !pid_is_gone(runner));
    kill_daemon_and_reaper_and_expect_gone(daemon, &pids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_sandbox_ends_when_the_daemon_and_its_reaper_are_both_killed() {
    let daemon = daemon(1);
    // The pool fills in the background: wait for a view's holder.
    let daemon_pid = daemon.pid().unwrap();
    assert!(wait_until(Duration::from_secs(60), || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .any(|pid| {
                procs::parent_pid(pid) == Some(daemon_pid)
                    && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|name| name.trim() == "sandbox-view")
            })
    }));
    let pids = start_sandbox(&daemon, "warm-lifeline").await;
    kill_daemon_and_reaper_and_expect_gone(daemon, &pids).await;
}
