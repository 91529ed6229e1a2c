//! Views prepared ahead of demand (`[pool]`, on by default under
//! `isolation = "full"`): a sandbox that takes one sees exactly what a
//! sandbox started cold sees, its view's holder ends with it, the views no
//! sandbox took end with the daemon, and a burst larger than the pool
//! starts the rest cold and says so in `status`. Tried with real runners
//! (the fixture's `--serve-probes`).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use sandboxd_protocol::{IsolationFeature, Scope};
use sandboxd_tests::procs;
use sandboxd_tests::runner::wait_for_runner;
use sandboxd_tests::{sandbox_env, wait_until, Options, TestDaemon};

const TIMEOUT: Duration = Duration::from_secs(60);
const PROBE_TIMEOUT: Duration = TIMEOUT;

fn daemon_with_pool(session: usize) -> TestDaemon {
    TestDaemon::start(Options {
        extra_toml: format!("[pool]\nsession = {session}\nworkflow = 0\nconnect = 0\n"),
        ..Options::with_runner_args(&["--serve-probes"])
    })
}

async fn pool_feature(daemon: &TestDaemon) -> IsolationFeature {
    let status = daemon.client().await.status().await.unwrap();
    status
        .isolation
        .into_iter()
        .find(|feature| feature.name == "prepared-views")
        .expect("status lists the prepared views")
}

/// Waits until the session pool holds `ready` views.
async fn wait_for_ready(daemon: &TestDaemon, ready: usize) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let pool = pool_feature(daemon).await;
        assert!(pool.in_force, "{pool:?}\n{}", daemon.log_text());
        if pool.detail.starts_with(&format!("session: {ready} of")) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pool never held {ready} session views: {pool:?}\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The daemon's children that hold a prepared view.
fn holders(daemon: &TestDaemon) -> BTreeSet<u32> {
    let daemon_pid = daemon.pid().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| procs::parent_pid(pid) == Some(daemon_pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                String::from_utf8_lossy(&cmdline).contains("__sandbox-view-holder")
            })
        })
        .collect()
}

/// Runs `script` in the sandbox `id` and returns its `key=value` lines.
fn probe(daemon: &TestDaemon, id: &str, script: &str) -> HashMap<String, String> {
    sandboxd_tests::runner::probe(daemon, id, script, PROBE_TIMEOUT)
}

/// What a runner sees of its view: every mount point with whether it is
/// read-only, the processes in its `/proc`, what it can write, who it is.
/// The daemon's own test directory reads `DIR`, so two daemons compare.
fn view_from_inside(daemon: &TestDaemon, id: &str) -> Vec<(String, String)> {
    let seen = probe(
        daemon,
        id,
        &(String::from("echo mounts=$(awk '{split($6, o, \",\"); print $5 \":\" o[1]}' /proc/self/mountinfo | sort | tr '\\n' ' ')\n\
         echo processes=$(ls /proc | grep -c '^[0-9]')\n\
         echo pid=$$\n\
         echo uid=$(id -u)\n\
         echo tmp=$(touch /tmp/x 2>/dev/null && echo writable || echo no)\n\
         echo workspace=$(touch \"$WORKSPACE_ROOT_DIR/x\" 2>/dev/null && echo writable || echo no)\n\
         echo system=$(touch /usr/x 2>/dev/null && echo writable || echo read-only)\n\
         echo home=$HOME:$(pwd)\n")
            + &format!(
                "echo others=$(ls -A {}/sandboxes 2>&1 | grep -c sbx-)\n",
                daemon.state_dir().display()
            )),
    );
    let dir = daemon.dir().display().to_string();
    let mut view: Vec<(String, String)> = seen
        .into_iter()
        // Which uid and pid differ by design; how many processes a shell
        // pipeline shows at the moment it looks is not a property of the view.
        .filter(|(key, _)| key != "uid" && key != "pid" && key != "processes")
        .map(|(key, value)| (key, value.replace(&dir, "DIR").replace(id, "ID")))
        .collect();
    view.sort();
    view
}

/// The `mounts` entry, out of `view`: mount point to its options (one per
/// mount stacked there, in order).
fn take_mounts(view: &mut Vec<(String, String)>) -> HashMap<String, Vec<String>> {
    let at = view
        .iter()
        .position(|(key, _)| key == "mounts")
        .expect("the probe lists mounts");
    let (_, listing) = view.remove(at);
    let mut mounts: HashMap<String, Vec<String>> = HashMap::new();
    for entry in listing.split_whitespace() {
        let (point, option) = entry.rsplit_once(':').unwrap();
        mounts
            .entry(point.to_string())
            .or_default()
            .push(option.to_string());
    }
    mounts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_in_a_prepared_view_sees_exactly_what_a_cold_one_sees() {
    let warm = daemon_with_pool(1);
    let cold = daemon_with_pool(0);
    wait_for_ready(&warm, 1).await;
    sandboxd_tests::start_session(&warm, "same").await;
    sandboxd_tests::start_session(&cold, "same").await;
    let pool = pool_feature(&warm).await;
    assert!(
        pool.detail.contains("1 taken, 0 started cold"),
        "the warm sandbox did not take the prepared view: {pool:?}"
    );
    let cold_pool = pool_feature(&cold).await;
    assert!(cold_pool.detail.contains("session: off"), "{cold_pool:?}");

    let (mut warm_view, mut cold_view) = (
        view_from_inside(&warm, "same"),
        view_from_inside(&cold, "same"),
    );
    eprintln!("warm: {warm_view:#?}\ncold: {cold_view:#?}");
    let (warm_mounts, cold_mounts) = (take_mounts(&mut warm_view), take_mounts(&mut cold_view));
    assert_eq!(warm_view, cold_view, "the two views differ");
    // The host's own mounts may change between the two views' making (other
    // tests make network namespaces and containers): each view is a copy
    // of the host's table when it was made. Every mount point both have is
    // the same in both, and everything the view itself adds is in both.
    for (point, options) in &warm_mounts {
        if let Some(cold_options) = cold_mounts.get(point) {
            assert_eq!(options, cold_options, "{point} differs");
        }
    }
    for own in [
        "/tmp",
        "/var/tmp",
        "/dev/shm",
        "/proc",
        "/home",
        "/root",
        "DIR/bin/runner-fixture",
    ] {
        assert!(
            warm_mounts.contains_key(own),
            "{own} missing: {warm_mounts:?}"
        );
        assert!(
            cold_mounts.contains_key(own),
            "{own} missing: {cold_mounts:?}"
        );
    }
    // At /workspace, and nowhere under the daemon's state directory.
    let workspace = "/workspace";
    assert!(
        !warm_mounts
            .keys()
            .any(|point| point.starts_with("DIR/state")),
        "{warm_mounts:?}"
    );
    assert_eq!(warm_mounts[workspace], ["rw"]);
    assert_eq!(cold_mounts.get(workspace), Some(&vec!["rw".to_string()]));
    let warm_view: HashMap<_, _> = warm_view.into_iter().collect();
    assert_eq!(warm_view["tmp"], "writable");
    assert_eq!(warm_view["workspace"], "writable");
    assert_eq!(warm_view["system"], "read-only");
    assert_eq!(warm_view["home"], "/workspace:/workspace");
    assert_eq!(warm_view["others"], "0", "workspaces are in sight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sandboxes_from_prepared_views_share_nothing() {
    let daemon = daemon_with_pool(2);
    wait_for_ready(&daemon, 2).await;
    sandboxd_tests::start_session(&daemon, "a").await;
    sandboxd_tests::start_session(&daemon, "b").await;
    let pool = pool_feature(&daemon).await;
    assert!(pool.detail.contains("2 taken, 0 started cold"), "{pool:?}");
    let planted = probe(
        &daemon,
        "a",
        "echo a-secret > /tmp/a-file && echo a > /dev/shm/a-shm && echo planted=ok\n\
         echo shm=$(\"$FIXTURE\" --ipc shm-create 4096)\n",
    );
    assert_eq!(planted["planted"], "ok");
    let looked = probe(
        &daemon,
        "b",
        &format!(
            "echo tmp=$(cat /tmp/a-file 2>&1 || true)\n\
             echo shm=$(cat /dev/shm/a-shm 2>&1 || true)\n\
             echo sysv=$(\"$FIXTURE\" --ipc shm-attach {} 2>&1 || true)\n\
             echo processes=$(ls /proc | grep -c '^[0-9]')\n",
            planted["shm"]
        ),
    );
    assert!(looked["tmp"].contains("No such file"), "{looked:?}");
    assert!(looked["shm"].contains("No such file"), "{looked:?}");
    assert!(!looked["sysv"].starts_with("attached"), "{looked:?}");
    let processes: u32 = looked["processes"].parse().unwrap();
    assert!(
        processes <= 6,
        "b sees {processes} processes: more than its own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_view_ends_with_its_sandbox_and_the_rest_with_the_daemon() {
    let mut daemon = daemon_with_pool(2);
    wait_for_ready(&daemon, 2).await;
    let before = holders(&daemon);
    assert_eq!(before.len(), 2, "{before:?}");
    let pid = sandboxd_tests::start_session(&daemon, "a").await;
    // Its PID 1 is one of the holders, seen from the host.
    let pid_namespace = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let inner_init = *before
        .iter()
        .find(|&&holder| pid_namespace(holder) == pid_namespace(pid))
        .unwrap_or_else(|| panic!("a's PID namespace is none of the holders' {before:?}"));
    assert_eq!(procs::innermost_pid(inner_init), Some(1));
    assert_eq!(
        procs::parent_pid(pid),
        daemon.pid(),
        "the runner is the daemon's child"
    );
    let report = daemon
        .client()
        .await
        .deprovision(Scope::Session, "a", false)
        .await
        .unwrap();
    assert!(report.was_present && !report.forced, "{report:?}");
    assert!(
        wait_until(TIMEOUT, || procs::pid_is_gone(inner_init)),
        "the taken view's holder outlived its sandbox"
    );
    // The pool made another; every holder left ends with the daemon.
    wait_for_ready(&daemon, 2).await;
    let left = holders(&daemon);
    assert_eq!(left.len(), 2, "{left:?}");
    daemon.stop();
    for holder in left {
        assert!(
            wait_until(TIMEOUT, || procs::pid_is_gone(holder)),
            "holder {holder} outlived the daemon's stop"
        );
    }
}

/// Host pids whose command line is exactly `words`.
fn processes_running(words: &[&str]) -> Vec<u32> {
    let wanted: Vec<u8> = words
        .iter()
        .flat_map(|w| [w.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .ok()
                .as_deref()
                == Some(&wanted[..])
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_ends_by_itself_ends_its_view_and_what_it_left_there() {
    let daemon = daemon_with_pool(1);
    wait_for_ready(&daemon, 1).await;
    let before = holders(&daemon);
    let pid = sandboxd_tests::start_session(&daemon, "a").await;
    let pid_namespace = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let holder = *before
        .iter()
        .find(|&&holder| pid_namespace(holder) == pid_namespace(pid))
        .unwrap_or_else(|| panic!("a's PID namespace is none of the holders' {before:?}"));
    // A process the runner leaves behind (in its own session, so the
    // runner's group signal does not reach it), then the runner's own end.
    let marker = ["sleep", "6061.5"];
    let left = probe(
        &daemon,
        "a",
        "setsid sleep 6061.5 </dev/null >/dev/null 2>&1 &\necho started=yes\n",
    );
    assert_eq!(left["started"], "yes");
    assert!(
        wait_until(TIMEOUT, || processes_running(&marker).len() == 1),
        "the process the runner left never ran"
    );
    // SAFETY: kill with a pid of the test's sandbox runner and a signal.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    assert!(
        wait_until(TIMEOUT, || procs::pid_is_gone(holder)),
        "the view's holder outlived its runner's own end"
    );
    assert!(
        wait_until(TIMEOUT, || processes_running(&marker).is_empty()),
        "a process the runner left in its view outlived the view"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_larger_than_the_pool_starts_the_rest_cold_and_says_so() {
    let daemon = daemon_with_pool(1);
    wait_for_ready(&daemon, 1).await;
    let client = daemon.client().await;
    let ensures = (0..4).map(|n| {
        let client = client.clone();
        async move {
            let id = format!("burst-{n}");
            client
                .ensure(Scope::Session, &id, &sandbox_env(&format!("q:{id}"), "tok"))
                .await
                .map(|report| (id, report.pid.unwrap()))
        }
    });
    for started in futures::future::join_all(ensures).await {
        let (id, pid) = started.expect("every ensure of the burst starts a runner");
        wait_for_runner(&daemon.workspace(Scope::Session, &id), pid);
    }
    let pool = pool_feature(&daemon).await;
    let counts: Vec<u64> = pool
        .detail
        .split(';')
        .next()
        .unwrap()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    // "session: R of 1 ready, T taken, C started cold"
    let [_, _, taken, cold] = counts[..] else {
        panic!("unexpected pool line: {pool:?}");
    };
    assert!(taken >= 1, "{pool:?}");
    assert_eq!(taken + cold, 4, "{pool:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_holder_and_the_runners_in_its_view_end_when_the_daemon_is_killed() {
    let mut daemon = daemon_with_pool(2);
    wait_for_ready(&daemon, 2).await;
    let runner = sandboxd_tests::start_session(&daemon, "a").await;
    // The taken one (now PID 1 of a's view) and the ready ones.
    let held = holders(&daemon);
    assert!(held.len() >= 2, "{held:?}");
    daemon.kill();
    for pid in held.iter().copied().chain([runner]) {
        assert!(
            wait_until(TIMEOUT, || procs::pid_is_gone(pid)),
            "{pid} outlived a SIGKILLed daemon: {}",
            procs::describe(&[pid])
        );
    }
}
