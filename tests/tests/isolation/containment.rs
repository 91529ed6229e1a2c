//! One cgroup per sandbox: nothing a runner starts outlives its
//! sandbox or the daemon, whatever it does to hide, and `[limits]` hold
//! with the reason a runner died in `describe`.
//!
//! Real daemon, real runners, real cgroups, as root. This machine's kind
//! is hybrid: cgroup v2 (at /sys/fs/cgroup/unified) holds the sandboxes'
//! tree and kills it, memory, pids and cpu are v1 hierarchies; a pure-v2
//! host takes the same code with every controller in v2.
//!
//! The escapee (`--escape` of the runner fixture) calls setsid in a child
//! that forks again; the grandchild ignores SIGTERM, chdirs to `/` and
//! closes every descriptor: no process group, session, working directory
//! or descriptor connects it to its runner any more.
//!
//! No daemon panic is tested: sandboxd has no way to trigger one from
//! outside (a panic in a request's task is caught by tokio and the daemon
//! goes on serving). A crash is tested as SIGABRT, what `panic = "abort"`
//! or a failed assertion in C code ends a process with; to the runners
//! and the reaper it is the same as any other death of the daemon.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use sandboxd_client::{ProbeState, Scope};
use sandboxd_protocol::naming;
use sandboxd_tests::daemon::{Options, TestDaemon};
use sandboxd_tests::procs::{self, pid_is_gone, wait_until};
use sandboxd_tests::runner::{read_runner_pid, wait_for_runner, RUNNER_TIMEOUT};
use sandboxd_tests::sandbox_env;

/// Time the escapee gets to die once its sandbox or daemon is gone. A
/// bounded wait, not a measure of speed.
const DEATH_WAIT: Duration = Duration::from_secs(2);
/// How long the teardown after a deprovision's answer may take on a loaded machine.
const TEARDOWN_WAIT: Duration = Duration::from_secs(15);

/// Cold starts only: a sandbox in a view prepared ahead has a holder as its
/// PID 1 that exits when the daemon is gone (its lifeline pipe ends), and
/// its namespace's end kills the escapee at once (see prepared_views.rs);
/// these tests are about what reaches an escapee otherwise.
fn escaping_daemon() -> TestDaemon {
    TestDaemon::start(Options {
        extra_toml: "[pool]\nsession = 0\nworkflow = 0\nconnect = 0\n".into(),
        ..Options::with_runner_args(&["--escape"])
    })
}

/// Ensures a session sandbox and returns (runner pid, escapee pid).
async fn ensure_with_escapee(daemon: &TestDaemon, id: &str) -> (u32, u32) {
    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox(id, &sandbox_env(&format!("session:{id}"), "tok"))
        .await
        .unwrap();
    let pid = report.pid.unwrap();
    let workspace = daemon.workspace(Scope::Session, id);
    wait_for_runner(&workspace, pid);
    let escapee = procs::read_pid_file(&workspace.join("escapee.pid")).expect("escapee.pid");
    let escapee = procs::host_pid_in_sandbox(&workspace, escapee);
    // It really did get away from its runner, by every measure but the cgroup.
    assert!(!pid_is_gone(escapee), "the escapee is not running");
    assert_ne!(
        procs::process_group(escapee),
        Some(pid),
        "still in the runner's group"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{escapee}/cwd")).unwrap(),
        Path::new("/"),
        "the escapee did not chdir to /"
    );
    let fds = std::fs::read_dir(format!("/proc/{escapee}/fd"))
        .unwrap()
        .count();
    assert_eq!(fds, 0, "the escapee kept descriptors open");
    assert_eq!(
        cgroup_of(escapee),
        cgroup_of(pid),
        "the escapee is not in its runner's cgroup"
    );
    (pid, escapee)
}

/// The v2 cgroup of `pid` (the `0::` line of `/proc/<pid>/cgroup`).
fn cgroup_of(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::to_string)
}

/// The v1 line of `controller` in `/proc/<pid>/cgroup`, if it has one.
fn v1_cgroup_of(pid: u32, controller: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
        names
            .split(',')
            .any(|name| name == controller)
            .then(|| path.to_string())
    })
}

fn assert_dies(pid: u32, when: &str, daemon: &TestDaemon) {
    assert!(
        wait_until(DEATH_WAIT, || pid_is_gone(pid)),
        "the escapee {pid} survived {when}:\n{}\ndaemon log:\n{}",
        procs::describe(&[pid]),
        daemon.log_text()
    );
}

/// The daemon's group reaper: its child running `sandboxd __group-reaper`.
/// (Polled: a process's command line reads empty until its exec is done.)
fn reaper_of(daemon_pid: u32) -> u32 {
    let mut found = None;
    wait_until(Duration::from_secs(5), || {
        found = find_reaper(daemon_pid);
        found.is_some()
    });
    found.expect("the daemon's group reaper")
}

fn find_reaper(daemon_pid: u32) -> Option<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .find(|&pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            ppid == Some(daemon_pid) && String::from_utf8_lossy(&cmdline).contains("__group-reaper")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escaped_descendant_dies_with_deprovision() {
    let daemon = escaping_daemon();
    let (pid, escapee) = ensure_with_escapee(&daemon, "escape-deprovision").await;
    let client = daemon.client().await;
    let report = client
        .deprovision(Scope::Session, "escape-deprovision", false)
        .await
        .unwrap();
    assert!(report.was_present);
    // Deprovision answers at the runner's exit; its cgroup's kill follows.
    assert!(wait_until(TEARDOWN_WAIT, || pid_is_gone(pid)));
    assert!(
        wait_until(TEARDOWN_WAIT, || pid_is_gone(escapee)),
        "the escapee outlived deprovision: {}",
        procs::describe(&[escapee])
    );
    assert!(
        wait_until(TEARDOWN_WAIT, || daemon.leftover_processes().is_empty()),
        "{:?}",
        daemon.leftover_processes()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escaped_descendant_dies_with_a_daemon_sigterm() {
    let mut daemon = escaping_daemon();
    let (_, escapee) = ensure_with_escapee(&daemon, "escape-term").await;
    assert!(daemon.stop().success(), "{}", daemon.log_text());
    assert_dies(escapee, "the daemon's SIGTERM", &daemon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escaped_descendant_dies_with_a_daemon_sigkill() {
    let mut daemon = escaping_daemon();
    let (_, escapee) = ensure_with_escapee(&daemon, "escape-kill").await;
    daemon.kill();
    assert_dies(
        escapee,
        "the daemon's SIGKILL (the reaper kills the cgroup tree)",
        &daemon,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escaped_descendant_dies_with_a_daemon_crash() {
    let mut daemon = escaping_daemon();
    let (_, escapee) = ensure_with_escapee(&daemon, "escape-abort").await;
    procs::signal_pid(daemon.pid().unwrap(), Signal::SIGABRT);
    assert!(daemon.wait_exit(Duration::from_secs(20)).is_some());
    assert_dies(escapee, "a crash of the daemon (SIGABRT)", &daemon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escaped_descendant_is_killed_before_a_restarted_daemon_serves_when_daemon_and_reaper_were_both_killed(
) {
    // Without a view: under `isolation = "full"` the sandbox's init dies
    // with the daemon and takes its namespace along (see init_lifeline.rs).
    let mut daemon = TestDaemon::start(Options {
        extra_toml: "isolation = \"uid-cgroup\"\n[pool]\nsession = 0\nworkflow = 0\nconnect = 0\n"
            .into(),
        ..Options::with_runner_args(&["--escape"])
    });
    let (_, escapee) = ensure_with_escapee(&daemon, "escape-both").await;
    let daemon_pid = daemon.pid().unwrap();
    let reaper = reaper_of(daemon_pid);
    procs::signal_pid(reaper, Signal::SIGKILL);
    assert!(wait_until(Duration::from_secs(5), || pid_is_gone(reaper)));
    daemon.kill();
    // Nothing is left to kill it: it lives on until the next start.
    std::thread::sleep(Duration::from_millis(300));
    assert!(!pid_is_gone(escapee), "nothing should have killed it yet");
    daemon.launch();
    daemon.wait_ready();
    // The socket accepts before the driver is ready; the first answer
    // comes once the daemon serves.
    daemon.client().await.status().await.unwrap();
    assert!(
        pid_is_gone(escapee),
        "the restarted daemon serves while the escapee lives: {}\n{}",
        procs::describe(&[escapee]),
        daemon.log_text()
    );
    assert!(daemon
        .log_text()
        .contains("killed runners left by an earlier sandboxd"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_live_in_their_sandbox_cgroup_in_v2_and_in_each_v1_controller_with_the_limits() {
    let options = Options {
        extra_toml: "[limits]\nmemory = \"96m\"\npids = 40\ncpu = 0.5".to_string(),
        ..Options::default()
    };
    let daemon = TestDaemon::start(options);
    let client = daemon.client().await;
    let status = client.status().await.unwrap();
    assert!(
        status.containment.starts_with("cgroup v2 ") && status.containment.contains("cgroup.kill"),
        "{}",
        status.containment
    );
    let id = "in-cgroup";
    let pid = client
        .ensure_session_sandbox(id, &sandbox_env("session:in-cgroup", "tok"))
        .await
        .unwrap()
        .pid
        .unwrap();
    let base = naming::base_name(Scope::Session, id);
    let v2 = cgroup_of(pid).unwrap();
    // Its own, or the prepared one it took (see prepared_sandboxes.rs).
    let suffix = own_cgroup_suffix(&v2, &base);
    assert!(v2.ends_with(&suffix), "v2 cgroup {v2}");
    let v2_dir = v2_mount().join(v2.trim_start_matches('/'));
    assert!(v2_dir.join("cgroup.kill").exists() || !v2_dir.join("cgroup.freeze").exists());
    // Each controller where it lives: in v2 when v2 holds it, else its v1 hierarchy.
    let v2_controllers =
        std::fs::read_to_string(v2_dir.join("cgroup.controllers")).unwrap_or_default();
    for (controller, file, value) in [
        (
            "memory",
            ["memory.max", "memory.limit_in_bytes"],
            (96u64 << 20).to_string(),
        ),
        ("pids", ["pids.max", "pids.max"], "40".to_string()),
        ("cpu", ["cpu.max", "cpu.cfs_quota_us"], String::new()),
    ] {
        let (dir, file) = if v2_controllers
            .split_whitespace()
            .any(|name| name == controller)
        {
            (v2_dir.clone(), file[0])
        } else {
            let path = v1_cgroup_of(pid, controller)
                .unwrap_or_else(|| panic!("no {controller} cgroup, v1 or v2"));
            assert!(path.ends_with(&suffix), "{controller} cgroup {path}");
            (v1_dir(controller, &path), file[1])
        };
        let written = std::fs::read_to_string(dir.join(file)).unwrap();
        let expected = if controller == "cpu" {
            if file == "cpu.max" {
                "50000 100000".to_string()
            } else {
                "50000".to_string()
            }
        } else {
            value
        };
        assert_eq!(written.trim(), expected, "{}", dir.join(file).display());
    }
    client.deprovision(Scope::Session, id, false).await.unwrap();
    assert!(
        wait_until(TEARDOWN_WAIT, || !v2_dir.exists()),
        "the sandbox's cgroup was not removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_past_the_memory_limit_is_oom_killed_and_describe_says_so() {
    // Each runner allocates once its workspace has `go` in it.
    let daemon = TestDaemon::start(Options::past_the_memory_limit());
    let client = daemon.client().await;
    let id = "oom";
    let pid = client
        .ensure_session_sandbox(id, &sandbox_env("session:oom", "tok"))
        .await
        .unwrap()
        .pid
        .unwrap();
    let workspace = daemon.workspace(Scope::Session, id);
    wait_for_runner(&workspace, pid);
    std::fs::write(workspace.join("go"), "").unwrap();
    let info = last_exit_of(&client, id).await;
    // The blow-up stayed in its cgroup: another sandbox is created and served.
    let other = client
        .ensure_session_sandbox("bystander", &sandbox_env("session:bystander", "tok"))
        .await
        .unwrap();
    assert!(other.created);
    assert_eq!(
        client.probe(Scope::Session, "bystander").await.unwrap(),
        ProbeState::Running
    );
    assert!(
        info.state == ProbeState::Absent && info.last_exit.is_some(),
        "the runner did not end: {info:?}\n{}",
        daemon.log_text()
    );
    let exit = info.last_exit.unwrap();
    assert!(exit.oom_killed, "{exit:?}");
    assert_eq!(exit.oom_limit_bytes, Some(64 << 20));
    assert_eq!(exit.to_string(), "killed: out of memory (limit 64 MiB)");
    let described = daemon.sandboxctl(&["describe", "session", id]);
    let text = String::from_utf8_lossy(&described.stdout);
    assert!(
        text.contains("killed: out of memory (limit 64 MiB)"),
        "{text}"
    );
    assert!(
        daemon
            .log_text()
            .contains("killed: out of memory (limit 64 MiB)"),
        "the log line does not say it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_forking_past_the_pids_limit_is_refused_while_another_sandbox_is_ensured() {
    let options = Options {
        runner_args: vec![
            "--fork-many".into(),
            "100".into(),
            "--exit-code".into(),
            "3".into(),
        ],
        extra_toml: "[limits]\npids = 16".to_string(),
        ..Options::default()
    };
    let daemon = TestDaemon::start(options);
    let client = daemon.client().await;
    let first = client
        .ensure_session_sandbox("forker", &sandbox_env("session:forker", "tok"))
        .await
        .unwrap();
    assert!(first.created);
    let forks = daemon.workspace(Scope::Session, "forker").join("forks");
    assert!(
        wait_until(RUNNER_TIMEOUT, || forks.exists()),
        "{}",
        daemon.log_text()
    );
    let text = std::fs::read_to_string(&forks).unwrap();
    let words: Vec<&str> = text.split_whitespace().collect();
    let started: u32 = words[1].parse().unwrap();
    let refused: u32 = words[3].parse().unwrap();
    assert!(started < 16 && refused > 0, "{text}");
    assert_eq!(words[5], libc::EAGAIN.to_string(), "{text}");
    // The daemon is outside every sandbox's cgroup: another one still starts.
    let second = client
        .ensure_session_sandbox("bystander", &sandbox_env("session:bystander", "tok"))
        .await
        .unwrap();
    assert!(second.created && second.pid.is_some());
    let exit = last_exit_of(&client, "forker").await.last_exit;
    assert!(exit.is_some(), "{}", daemon.log_text());
    let exit = exit.unwrap();
    assert_eq!(exit.code, Some(3));
    assert!(exit.pids_refused > 0, "{exit:?}");
    assert_eq!(exit.pids_limit, Some(16));
    assert!(
        exit.to_string()
            .contains("fork(s) refused at the pids limit (16)"),
        "{exit}"
    );
    // Its sleeping children went with its cgroup.
    assert!(
        wait_until(DEATH_WAIT, || daemon.leftover_processes().is_empty()
            || read_runner_pid(&daemon.workspace(Scope::Session, "forker"))
                .is_some()),
        "{:?}",
        daemon.leftover_processes()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_usable_cgroup_the_process_group_fallback_serves_and_status_says_so() {
    // Under an egress posture the fallback fails closed: no kernel rule can
    // tell a runner's traffic apart without the sandboxes' cgroup.
    let closed = TestDaemon::start(Options {
        extra_toml: "containment = \"process-group\"".to_string(),
        ..Options::default()
    });
    let refused = closed
        .client()
        .await
        .ensure_session_sandbox("fallback", &sandbox_env("session:fallback", "tok"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("unavailable") && refused.contains("cgroup"),
        "{refused}"
    );
    drop(closed);
    let options = Options {
        extra_toml: "containment = \"process-group\"".to_string(),
        egress: Some("none".to_string()),
        ..Options::default()
    };
    let daemon = TestDaemon::start(options);
    let client = daemon.client().await;
    let status = client.status().await.unwrap();
    assert!(
        status
            .containment
            .starts_with("process groups (fallback: containment = \"process-group\""),
        "{}",
        status.containment
    );
    // No prepared sandboxes without their cgroups, and `status` says why
    // rather than leaving the pool out.
    let pool = status
        .isolation
        .iter()
        .find(|feature| feature.name.starts_with("prepared-"))
        .unwrap_or_else(|| panic!("no pool in status: {:?}", status.isolation));
    assert!(
        !pool.in_force && pool.detail.starts_with("off: no cgroups for the sandboxes"),
        "{pool:?}"
    );
    let pid = client
        .ensure_session_sandbox("fallback", &sandbox_env("session:fallback", "tok"))
        .await
        .unwrap()
        .pid
        .unwrap();
    let v2 = cgroup_of(pid).unwrap_or_default();
    assert!(!v2.contains("/sandboxes/"), "in a sandbox cgroup: {v2}");
    assert_eq!(
        procs::process_group(pid),
        Some(pid),
        "not its own group's leader"
    );
    let text = daemon.sandboxctl(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("isolation: process groups (fallback"),
        "{text}"
    );
    let json = daemon.sandboxctl(&["status", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(
        json["containment"]
            .as_str()
            .unwrap()
            .starts_with("process groups"),
        "{json}"
    );
    client
        .deprovision(Scope::Session, "fallback", false)
        .await
        .unwrap();
    assert!(pid_is_gone(pid));

    // Insisting on cgroups where the root given is not cgroup v2 is refused at start.
    let mut refused = TestDaemon::prepare(Options {
        extra_toml: "containment = \"cgroup\"\ncgroup_root = \"/tmp/not-a-cgroup\"".to_string(),
        ..Options::default()
    });
    refused.launch();
    let status = refused
        .wait_exit(Duration::from_secs(20))
        .expect("it exits");
    assert!(!status.success());
    assert!(
        refused
            .log_text()
            .contains("cgroup_root /tmp/not-a-cgroup is not inside the cgroup v2 hierarchy"),
        "{}",
        refused.log_text()
    );
}

/// `describe` of the session sandbox `id`, polled until its runner has
/// ended (or [`RUNNER_TIMEOUT`] passed).
async fn last_exit_of(
    client: &sandboxd_client::SandboxdClient,
    id: &str,
) -> sandboxd_client::SandboxInfo {
    let deadline = std::time::Instant::now() + RUNNER_TIMEOUT;
    loop {
        let info = client.describe(Scope::Session, id).await.unwrap();
        if (info.state == ProbeState::Absent && info.last_exit.is_some())
            || std::time::Instant::now() >= deadline
        {
            return info;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_in_a_delegated_cgroup_moves_into_a_leaf_and_puts_sandboxes_beside_it() {
    // What systemd does for a unit with Delegate=yes: its own cgroup,
    // marked with trusted.delegate=1, the daemon started inside.
    let own = v2_mount().join(format!("sbxt-delegated-{}", std::process::id()));
    std::fs::create_dir(&own).unwrap();
    let _cleanup = RemoveTree(own.clone());
    let c_own = std::ffi::CString::new(own.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: C strings and a one-byte value.
    let set = unsafe {
        libc::setxattr(
            c_own.as_ptr(),
            c"trusted.delegate".as_ptr(),
            b"1".as_ptr().cast(),
            1,
            0,
        )
    };
    assert_eq!(set, 0, "setxattr: {}", std::io::Error::last_os_error());
    let mut daemon = TestDaemon::start(Options {
        cgroup: Some(own.clone()),
        ..Options::default()
    });
    let daemon_pid = daemon.pid().unwrap();
    let relative = own.strip_prefix(v2_mount()).unwrap().display().to_string();
    assert_eq!(cgroup_of(daemon_pid), Some(format!("/{relative}/daemon")));
    assert_eq!(
        cgroup_of(reaper_of(daemon_pid)),
        Some(format!("/{relative}/daemon")),
        "the reaper is not in the daemon's leaf"
    );
    let client = daemon.client().await;
    let status = client.status().await.unwrap();
    assert!(
        status
            .containment
            .starts_with(&format!("cgroup v2 {}/sandboxes ", own.display())),
        "{}",
        status.containment
    );
    let pid = client
        .ensure_session_sandbox("delegated", &sandbox_env("session:delegated", "tok"))
        .await
        .unwrap()
        .pid
        .unwrap();
    let base = naming::base_name(Scope::Session, "delegated");
    let v2 = cgroup_of(pid).unwrap();
    assert_eq!(
        v2,
        format!("/{relative}{}", own_cgroup_suffix(&v2, &base)),
        "not beside the daemon's leaf"
    );
    assert!(daemon.stop().success());
    // A clean stop leaves the delegated cgroup as it was given, but for the
    // leaf the daemon lived in.
    assert!(!own.join("sandboxes").exists());
    assert!(own.join("daemon").exists());
}

/// Removes a cgroup tree (empty once its processes are gone) when dropped.
struct RemoveTree(PathBuf);

impl Drop for RemoveTree {
    fn drop(&mut self) {
        let mut dirs = vec![self.0.clone()];
        let mut index = 0;
        while index < dirs.len() {
            let children: Vec<PathBuf> = std::fs::read_dir(&dirs[index])
                .into_iter()
                .flatten()
                .flatten()
                .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
                .map(|entry| entry.path())
                .collect();
            dirs.extend(children);
            index += 1;
        }
        for dir in dirs.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// `/sandboxes/<base>`, or `/sandboxes/prepared-<n>` when `v2` (a
/// runner's cgroup) is one prepared ahead that its sandbox took.
fn own_cgroup_suffix(v2: &str, base: &str) -> String {
    let prepared = v2.rsplit('/').next().filter(|name| {
        name.strip_prefix("prepared-")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    match prepared {
        Some(name) => format!("/sandboxes/{name}"),
        None => format!("/sandboxes/{base}"),
    }
}

fn v2_mount() -> PathBuf {
    mount_of(|fs_type, _| fs_type == "cgroup2").expect("a cgroup v2 mount")
}

/// The directory of the v1 cgroup `path` of `controller`.
fn v1_dir(controller: &str, path: &str) -> PathBuf {
    let mount = mount_of(|fs_type, options| {
        fs_type == "cgroup" && options.split(',').any(|option| option == controller)
    })
    .unwrap_or_else(|| panic!("no v1 {controller} mount"));
    mount.join(path.trim_start_matches('/'))
}

/// The first mount point whose type and super options match.
fn mount_of(matches: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut after = after.split(' ');
        let (fs_type, _, options) = (after.next()?, after.next()?, after.next()?);
        let point = before.split(' ').nth(4)?;
        matches(fs_type, options).then(|| PathBuf::from(point))
    })
}
