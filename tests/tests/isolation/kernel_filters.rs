//! The kernel filters of the process tier, end to end: two sandboxes A
//! and B attack each other and the daemon from inside, as their runners,
//! under `relaxed` and `strict` egress. New namespaces, mounts and `clone3` are refused, the
//! daemon's session key and the other sandbox's key are out of reach, the
//! other sandbox's abstract socket refuses the connect — and each runner
//! still forks, threads, runs a shell and python, reads its own key and
//! reaches its own socket from a child. Each runner started with systemd's
//! open-file limit, the defined PATH and only descriptors 0, 1 and 2.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use sandboxd_client::Scope;
use sandboxd_tests::procs::wait_until;
use sandboxd_tests::{runner_env, Options, TestDaemon};

const REPORT_TIMEOUT: Duration = Duration::from_secs(30);
/// What the fixture's `attack::DAEMON_KEY_DESCRIPTION` searches for.
const DAEMON_KEY_DESCRIPTION: &str = "sandboxd-test-daemon-key";
const SYSTEMD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Joins this thread to a new session keyring (so nothing is left in a
/// shared one: the kernel frees it with the last process holding it) and
/// puts a key in it, which the daemon started from this thread inherits.
fn daemon_session_key() -> i32 {
    // SAFETY: keyctl and add_key with C strings and a sized payload; they
    // change only this thread's session keyring.
    unsafe {
        let joined = libc::syscall(
            libc::SYS_keyctl,
            libc::KEYCTL_JOIN_SESSION_KEYRING,
            c"sandboxd-test".as_ptr(),
        );
        assert!(joined >= 0, "join: {}", std::io::Error::last_os_error());
        let description = std::ffi::CString::new(DAEMON_KEY_DESCRIPTION).unwrap();
        let payload = b"the daemon's secret";
        let key = libc::syscall(
            libc::SYS_add_key,
            c"user".as_ptr(),
            description.as_ptr(),
            payload.as_ptr(),
            payload.len(),
            libc::KEY_SPEC_SESSION_KEYRING,
        );
        assert!(key > 0, "add_key: {}", std::io::Error::last_os_error());
        key as i32
    }
}

/// Ensures a session sandbox and waits for its runner; returns its pid.
async fn start(daemon: &TestDaemon, id: &str) -> u32 {
    sandboxd_tests::start_session(daemon, id).await
}

/// The hard `Max open files` of the daemon, from its `/proc/<pid>/limits`.
fn daemon_open_file_hard_limit(daemon: &TestDaemon) -> u64 {
    let pid = daemon.pid().expect("the daemon runs");
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(4).unwrap().parse().unwrap()
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Each attempt's errno, by name, from an attack report.
fn outcomes(report: &serde_json::Value) -> HashMap<String, i32> {
    report["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|attempt| {
            let name = attempt["name"].as_str().unwrap().to_string();
            (name, attempt["errno"].as_i64().unwrap() as i32)
        })
        .collect()
}

fn errno_text(errno: i32) -> String {
    match errno {
        0 => "succeeded".to_string(),
        -1 => "failed".to_string(),
        errno => std::io::Error::from_raw_os_error(errno).to_string(),
    }
}

/// A and B started, each told of the other's key and socket and of the
/// daemon's key; checks every outcome of both.
async fn attack_each_other(egress: Option<&str>) {
    let daemon_key = daemon_session_key();
    // The host's network, shared: what keeps a neighbour's abstract
    // socket out of reach there is Landlock's scope (EPERM). In a private
    // network namespace (the default) the name is not even in the
    // neighbour's namespace (ECONNREFUSED); `private_network` covers that.
    let daemon = TestDaemon::start(Options {
        egress: egress.map(str::to_string),
        extra_toml: "[network]\nmode = \"host\"\n".to_string(),
        ..Options::with_runner_args(&["--serve-attacks", "--kernel-probes"])
    });
    let pids = [start(&daemon, "a").await, start(&daemon, "b").await];
    let workspaces = ["a", "b"].map(|id| daemon.workspace(Scope::Session, id));
    let held = workspaces
        .clone()
        .map(|workspace| read_json(&workspace.join("kernel-start.json")));

    for (me, other) in [(0, 1), (1, 0)] {
        let other_id = ["a", "b"][other];
        let request = format!(
            "pid {}\nworkspace {}\nlog {}\nabstract {}\nkey {}\ndaemon-key {daemon_key}\n",
            pids[other],
            workspaces[other].display(),
            daemon.runner_log(Scope::Session, other_id).display(),
            held[other]["abstract"].as_str().unwrap(),
            held[other]["key"],
        );
        sandboxd_tests::request_attack(&workspaces[me], &request);
    }
    let expected = [
        ("unshare(CLONE_NEWUSER)", libc::EPERM),
        ("unshare(CLONE_NEWNS)", libc::EPERM),
        ("clone(CLONE_NEWUSER)", libc::EPERM),
        ("setns into its own user namespace", libc::EPERM),
        ("mount a tmpfs", libc::EPERM),
        ("clone3", libc::ENOSYS),
        ("read the daemon's session key", libc::EACCES),
        (
            "find the daemon's key from its session keyring",
            libc::ENOKEY,
        ),
        ("read the other sandbox's key", libc::EACCES),
        (
            "connect to the other sandbox's abstract socket",
            libc::EPERM,
        ),
        ("control: read its own key", 0),
        (
            "control: connect to its own abstract socket from a child",
            0,
        ),
        ("control: fork", 0),
        ("control: a thread", 0),
        ("control: sh -c", 0),
    ];
    for (me, workspace) in workspaces.iter().enumerate() {
        let report_path = workspace.join("attack-report.json");
        assert!(
            wait_until(REPORT_TIMEOUT, || report_path.exists()),
            "runner {me} wrote no report; daemon log:\n{}",
            daemon.log_text()
        );
        let outcomes = outcomes(&read_json(&report_path));
        eprintln!("runner {} (egress {egress:?}):", ["a", "b"][me]);
        for (name, _) in expected {
            let errno = outcomes.get(name).copied().unwrap_or(-999);
            eprintln!("  {name}: {}", errno_text(errno));
        }
        for (name, errno) in expected {
            assert_eq!(
                outcomes.get(name).copied(),
                Some(errno),
                "runner {me}: {name}: expected {}",
                errno_text(errno)
            );
        }
        if Path::new("/usr/bin/python3").exists() {
            assert_eq!(outcomes.get("control: python3 -c").copied(), Some(0));
        }
    }

    // A clean start, seen from inside.
    for (me, workspace) in workspaces.iter().enumerate() {
        let start = &held[me];
        // The listing's own descriptor, `/proc/<its pid>/fd` (its pid in
        // its own PID namespace under isolation = "full").
        let own_listing = |target: &str| target.starts_with("/proc/") && target.ends_with("/fd");
        let fds: Vec<(i64, &str)> = start["fds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| (pair[0].as_i64().unwrap(), pair[1].as_str().unwrap()))
            .filter(|(_, target)| !own_listing(target))
            .collect();
        assert_eq!(
            fds.iter().map(|(fd, _)| *fd).collect::<Vec<_>>(),
            [0, 1, 2],
            "runner {me} started with {fds:?}"
        );
        // systemd's 1024/524288, the hard limit within the daemon's own
        // (which it raises to 524288 where it may).
        let hard = daemon_open_file_hard_limit(&daemon).min(524288);
        assert_eq!(start["nofile"], serde_json::json!([1024, hard]));
        let env = runner_env(workspace);
        assert_eq!(env.get("PATH").map(String::as_str), Some(SYSTEMD_PATH));
    }
    // Each runner has a session keyring of its own.
    let keyrings = held
        .clone()
        .map(|start| start["session_keyring"].as_i64().unwrap());
    assert_ne!(
        keyrings[0], keyrings[1],
        "one session keyring for two sandboxes"
    );

    // status says so.
    let status = daemon.client().await.status().await.unwrap();
    for name in [
        "keyring",
        "seccomp",
        "no-new-namespaces",
        "abstract-sockets",
        "signals",
        "clean-start",
    ] {
        let feature = status
            .isolation
            .iter()
            .find(|feature| feature.name == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", status.isolation));
        assert!(feature.in_force, "{name} not in force: {}", feature.detail);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_relaxed_egress_sandboxes_cannot_reach_each_other_through_the_kernel() {
    attack_each_other(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_strict_egress_sandboxes_cannot_reach_each_other_through_the_kernel() {
    attack_each_other(Some("strict")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_path_sets_the_runners_path() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "runner_path = \"/opt/sandboxd-test/bin:/usr/bin:/bin\"\n".to_string(),
        ..Options::default()
    });
    let pid = start(&daemon, "path").await;
    let env = runner_env(&daemon.workspace(Scope::Session, "path"));
    assert_eq!(
        env.get("PATH").map(String::as_str),
        Some("/opt/sandboxd-test/bin:/usr/bin:/bin"),
        "runner {pid}"
    );
}
