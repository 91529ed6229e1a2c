//! `isolation = "gvisor"`: each runner under gVisor's runsc, tried from
//! inside real runners (the fixture's `--serve-probes` and `--serve-net`):
//! the kernel they see is gVisor's, a system call gVisor lacks fails there,
//! another sandbox's files, processes and the daemon's socket are out of
//! sight, the egress rules hold the sentry's sockets, an OOM is reported,
//! and neither a deprovision nor a killed daemon leaves a runsc process,
//! gofer, mount or bundle behind.
//!
//! Skipped, with the reason, where runsc is not installed; under `CI=true`
//! (CI installs it: `.ci/install-runsc.sh`) a missing runsc fails instead.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sandboxd_protocol::{ProbeState, SandboxInfo, Scope};
use sandboxd_tests::procs::wait_until;
use sandboxd_tests::{sandbox_env, Options, TestDaemon};

mod prepared;

const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// A runsc sandbox's start takes a few hundred ms here; a loaded machine more.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const GVISOR: &str = "isolation = \"gvisor\"\n";

/// Whether runsc is here; `false` (said why) skips the test, except under
/// `CI=true`, which fails.
pub(crate) fn runsc_installed() -> bool {
    let found = ["/usr/local/bin/runsc", "/usr/bin/runsc", "/usr/sbin/runsc"]
        .iter()
        .any(|path| Path::new(path).exists());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "runsc is not installed (CI installs it with .ci/install-runsc.sh)"
        );
        eprintln!("skipped: runsc is not installed (apt-get install runsc)");
    }
    found
}

/// A daemon under gVisor that starts every sandbox cold (prepared ones
/// have tests of their own, see [`prepared`]), unless `extra_toml` sets
/// a `[pool]`.
pub(crate) fn gvisor_daemon(runner_args: &[&str], extra_toml: &str) -> TestDaemon {
    let pool = match extra_toml.contains("[pool]") {
        true => "",
        false => "[pool]\nsession = 0\nworkflow = 0\nconnect = 0\n",
    };
    TestDaemon::start(Options {
        extra_toml: format!("{GVISOR}{pool}{extra_toml}"),
        ..Options::with_runner_args(runner_args)
    })
}

/// Ensures session `id` and waits for its runner's `pid` file (the pid
/// it sees, gVisor's, not the host's); returns the host pid of `runsc run`.
pub(crate) async fn start(daemon: &TestDaemon, id: &str) -> u32 {
    let client = daemon.client().await;
    let report = client
        .ensure(Scope::Session, id, &sandbox_env(&format!("q:{id}"), "tok"))
        .await
        .unwrap_or_else(|error| panic!("ensure {id}: {error}\n{}", daemon.log_text()));
    let pid_file = daemon.workspace(Scope::Session, id).join("pid");
    assert!(
        wait_until(START_TIMEOUT, || pid_file.exists()),
        "{id}'s runner wrote no pid file; log:\n{}",
        daemon.log_text()
    );
    report.pid.expect("a pid")
}

/// The processes whose command line names `needle`.
pub(crate) fn processes_naming(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| String::from_utf8_lossy(&line).contains(needle))
        })
        .collect()
}

/// `<state>/gvisor/runsc`, which every runsc process of this daemon names.
pub(crate) fn runsc_root(daemon: &TestDaemon) -> PathBuf {
    daemon.state_dir().join("gvisor").join("runsc")
}

/// Entries of `dir` (none when it is gone).
fn entries(dir: &Path) -> Vec<String> {
    sandboxd_tests::runner::dir_entries(dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_sees_gvisors_kernel_and_nothing_of_its_neighbour_or_the_daemon() {
    if !runsc_installed() {
        return;
    }
    let daemon = gvisor_daemon(&["--serve-probes"], "");
    start(&daemon, "a").await;
    start(&daemon, "b").await;
    let a_workspace = daemon.workspace(Scope::Session, "a");
    let probe =
        |id: &str, script: &str| sandboxd_tests::runner::probe(&daemon, id, script, PROBE_TIMEOUT);

    let planted = probe(
        "a",
        "echo a-secret > /tmp/a-file && echo a > /dev/shm/a-shm && echo planted=ok\n\
         echo mine=$(echo /tmp/* /dev/shm/* | grep -o 'a-[a-z]*' | wc -l)\n",
    );
    assert_eq!(planted["planted"], "ok");
    // Control: the globs below see what is there (this runsc's statx
    // refuses coreutils' flags, so `ls` cannot be used).
    assert_eq!(planted["mine"], "2", "{planted:?}");
    // Put from the host while it runs: seen inside at once (shared access).
    let client = daemon.client().await;
    let put = client.put_file_from(Scope::Session, "a", "from-host", 0o644, &b"hello"[..]);
    assert_eq!(put.await.unwrap(), 5);
    let host_version = std::fs::read_to_string("/proc/version").unwrap();
    let seen = probe(
        "b",
        &format!(
            "echo version=$(head -n 1 /proc/version)\n\
             echo dmesg=$(dmesg 2>&1 | grep -c 'Starting gVisor')\n\
             echo userfaultfd=$(\"$FIXTURE\" --syscall-probe userfaultfd)\n\
             echo tmp=$(echo /tmp/* /dev/shm/* | grep -o 'a-[a-z]*' | wc -l)\n\
             echo pids=$(echo /proc/[0-9]* | wc -w)\n\
             echo fixtures=$(cat /proc/[0-9]*/comm 2>/dev/null | grep -c runner-fixture)\n\
             echo state=$(echo {state}/* | grep -c sandboxes)\n\
             echo other=$(cat {a_ws}/from-host 2>/dev/null || echo unseen)\n\
             echo socket=$(test -e {socket} && echo visible || echo gone)\n\
             echo uid=$(id -u)\n\
             touch /usr/sandboxd-probe 2>/dev/null; echo usr=$?\n\
             touch $WORKSPACE_ROOT_DIR/mine /tmp/mine && echo writable=ok\n",
            state = daemon.state_dir().display(),
            a_ws = a_workspace.display(),
            socket = daemon.socket().display(),
        ),
    );
    assert_ne!(
        seen["version"],
        host_version.trim(),
        "the host's kernel answered"
    );
    assert_eq!(seen["dmesg"], "1", "no gVisor boot message in dmesg");
    assert_eq!(
        seen["userfaultfd"],
        format!("errno {}", libc::ENOSYS),
        "a system call gVisor lacks"
    );
    assert_eq!(seen["tmp"], "0", "B sees A's /tmp or /dev/shm");
    assert_eq!(seen["fixtures"], "1", "B sees another sandbox's runner");
    let pids: u32 = seen["pids"].parse().unwrap();
    assert!((2..16).contains(&pids), "B's /proc lists {pids} processes");
    assert_eq!(seen["state"], "0", "B sees the state directory");
    assert_eq!(seen["other"], "unseen", "B reads A's workspace");
    assert_eq!(seen["socket"], "gone", "B sees the daemon's socket");
    assert!(
        seen["uid"].parse::<u32>().unwrap() >= 2_000_000_000,
        "{seen:?}"
    );
    assert_ne!(seen["usr"], "0", "the system is writable");
    assert_eq!(seen["writable"], "ok");
    let own = probe(
        "a",
        "echo put=$(cat $WORKSPACE_ROOT_DIR/from-host)\n\
         echo inside > $WORKSPACE_ROOT_DIR/from-inside && echo wrote=ok\n",
    );
    assert_eq!(
        own["put"], "hello",
        "a file put from the host is not seen inside"
    );
    assert_eq!(own["wrote"], "ok");
    let mut got = Vec::new();
    let read = client.get_file_into(Scope::Session, "a", "from-inside", &mut got);
    read.await.unwrap();
    assert_eq!(
        got, b"inside\n",
        "a file written inside is not read from the host"
    );

    // Its sentry and gofer live in its cgroup (no runsc cgroup of their own).
    let base = a_workspace
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let root = runsc_root(&daemon).display().to_string();
    let helpers: Vec<u32> = processes_naming(&root)
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.contains("runsc-sandbox") || line.contains("runsc-gofer"))
        })
        .collect();
    assert!(
        helpers.len() >= 4,
        "two sentries and two gofers: {helpers:?}"
    );
    let in_a: Vec<String> = helpers
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok())
        .filter(|cgroups| cgroups.contains(&format!("/sandboxes/{base}")))
        .collect();
    assert_eq!(in_a.len(), 2, "a's sentry and gofer are not in its cgroup");
    for cgroups in &in_a {
        for line in cgroups
            .lines()
            .filter(|line| line.contains("memory") || line.starts_with("0::"))
        {
            assert!(line.contains(&format!("/sandboxes/{base}")), "{line}");
        }
    }

    // `status` says which mode, and that the kernel filters change meaning.
    let status = daemon.sandboxctl(&["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("gvisor"), "{text}");
    assert!(text.contains("not put on runsc"), "{text}");
    let described = daemon.sandboxctl(&["describe", "session", "a"]);
    let text = String::from_utf8_lossy(&described.stdout);
    assert!(
        text.contains("runsc") && text.contains("not put on runsc"),
        "{text}"
    );
    // Commands run (see `gvisor_commands`).
    let exec = daemon.sandboxctl(&["exec", "session", "a", "--", "/bin/true"]);
    assert!(
        exec.status.success(),
        "{}",
        String::from_utf8_lossy(&exec.stderr)
    );
}

/// One `--serve-net` runner's request, answered with an errno.
fn request(workspace: &Path, line: &str) -> i32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!("probe-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let temporary = workspace.join(format!(".{name}.tmp"));
    std::fs::write(&temporary, format!("{line}\n")).unwrap();
    std::fs::rename(&temporary, workspace.join(&name)).unwrap();
    let answer = workspace.join(format!("{name}.errno"));
    let mut errno = None;
    wait_until(PROBE_TIMEOUT, || {
        errno = std::fs::read_to_string(&answer)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok());
        errno.is_some()
    });
    errno.unwrap_or_else(|| panic!("no answer to {line}"))
}

/// The TCP port a `--serve-net 0` runner listens on.
fn tcp_port(workspace: &Path) -> u16 {
    let text = std::fs::read_to_string(workspace.join("net")).expect("the runner's ports");
    text.lines()
        .find_map(|line| line.strip_prefix("tcp "))
        .and_then(|port| port.trim().parse().ok())
        .unwrap_or_else(|| panic!("no tcp port in {text:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentrys_sockets_are_held_by_the_hosts_egress_rules() {
    if !runsc_installed() {
        return;
    }
    let daemon = gvisor_daemon(&["--serve-net", "0"], "");
    start(&daemon, "a").await;
    start(&daemon, "b").await;
    let (a, b) = (
        daemon.workspace(Scope::Session, "a"),
        daemon.workspace(Scope::Session, "b"),
    );
    let a_port = tcp_port(&a);
    // An endpoint of the host's on 127.0.0.1 (a backend, say): reached.
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend_port = backend.local_addr().unwrap().port();
    assert_eq!(
        request(&b, &format!("tcp 127.0.0.1:{backend_port}")),
        0,
        "the host's endpoint"
    );
    // Its own socket, yes; its neighbour's, no: the rules match the
    // sentry's sockets by the sandbox's cgroup.
    assert_eq!(
        request(&a, &format!("tcp 127.0.0.1:{a_port}")),
        0,
        "its own"
    );
    assert_eq!(
        request(&b, &format!("tcp 127.0.0.1:{a_port}")),
        libc::ECONNREFUSED,
        "B reached A on loopback"
    );
    let from_host = TcpStream::connect(("127.0.0.1", a_port)).map(drop);
    assert_eq!(
        from_host.err().and_then(|error| error.raw_os_error()),
        Some(libc::ECONNREFUSED),
        "the host reached A"
    );
}

/// Waits for session `id`'s runner to have ended; its description then.
async fn last_exit_of(daemon: &TestDaemon, id: &str) -> SandboxInfo {
    let client = daemon.client().await;
    let mut info = None;
    for _ in 0..600 {
        let described = client.describe(Scope::Session, id).await.unwrap();
        if described.last_exit.is_some() && described.state == ProbeState::Absent {
            info = Some(described);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    info.unwrap_or_else(|| panic!("{id} did not end; log:\n{}", daemon.log_text()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_under_gvisor_is_reported_as_out_of_memory() {
    if !runsc_installed() {
        return;
    }
    let options = Options::past_the_memory_limit();
    let daemon = TestDaemon::start(Options {
        extra_toml: format!("{GVISOR}{}", options.extra_toml),
        ..options
    });
    start(&daemon, "oom").await;
    std::fs::write(daemon.workspace(Scope::Session, "oom").join("go"), "").unwrap();
    let exit = last_exit_of(&daemon, "oom").await.last_exit.unwrap();
    assert!(exit.oom_killed, "{exit:?}\n{}", daemon.log_text());
    assert_eq!(exit.to_string(), "killed: out of memory (limit 64 MiB)");
}

/// Waits until no runsc process of `daemon`'s is left, `after` what.
pub(crate) fn assert_runsc_gone(daemon: &TestDaemon, after: &str) {
    let root = runsc_root(daemon).display().to_string();
    assert!(
        wait_until(START_TIMEOUT, || processes_naming(&root).is_empty()),
        "runsc processes outlived {after}: {:?}",
        processes_naming(&root)
    );
}

/// No runsc process of `daemon`'s, no bundle, no runsc state, no mount
/// under its directory.
fn nothing_left(daemon: &TestDaemon) -> Result<(), String> {
    let root = runsc_root(daemon);
    let processes = processes_naming(&root.display().to_string());
    let bundles = entries(&daemon.state_dir().join("gvisor").join("bundles"));
    let state = entries(&root);
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = daemon.dir().display().to_string();
    let mounts: Vec<&str> = mountinfo
        .lines()
        .filter(|line| line.contains(&dir))
        .collect();
    if processes.is_empty() && bundles.is_empty() && state.is_empty() && mounts.is_empty() {
        return Ok(());
    }
    Err(format!(
        "processes {processes:?}, bundles {bundles:?}, runsc state {state:?}, mounts {mounts:?}"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprovision_and_a_killed_daemon_leave_no_runsc_behind() {
    if !runsc_installed() {
        return;
    }
    let mut daemon = gvisor_daemon(&["--serve-probes"], "");
    let client = daemon.client().await;
    start(&daemon, "gone").await;
    assert!(!processes_naming(&runsc_root(&daemon).display().to_string()).is_empty());
    client
        .deprovision(Scope::Session, "gone", false)
        .await
        .unwrap();
    let mut left = Err(String::new());
    wait_until(START_TIMEOUT, || {
        left = nothing_left(&daemon);
        left.is_ok()
    });
    assert!(left.is_ok(), "after a deprovision: {left:?}");
    // Its SIGTERM reached the runner (through `runsc kill`): no cgroup kill.
    assert!(
        !daemon.log_text().contains("ignored SIGTERM"),
        "{}",
        daemon.log_text()
    );

    start(&daemon, "orphan").await;
    daemon.kill();
    // The group reaper kills the sandboxes' cgroups when the daemon dies.
    assert_runsc_gone(&daemon, "the daemon");
    daemon.launch();
    daemon.wait_ready();
    let left = nothing_left(&daemon);
    assert!(left.is_ok(), "after a restart: {left:?}");
    daemon.stop();
}

/// The `cgroup.events` of `pid`'s cgroup v2 directory.
fn cgroup_events(pid: u32) -> PathBuf {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let v2 = cgroups
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .expect("a cgroup v2 line");
    let mount = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .into_iter()
        .find(|mount| Path::new(&format!("{mount}{v2}/cgroup.events")).exists())
        .expect("the cgroup v2 mount");
    PathBuf::from(format!("{mount}{v2}/cgroup.events"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_gvisor_sandbox_is_frozen_whole_and_resumes() {
    if !runsc_installed() {
        return;
    }
    let daemon = gvisor_daemon(&["--serve-probes"], "");
    let client = daemon.client().await;
    let pid = start(&daemon, "p").await;
    let events = cgroup_events(pid);
    client.pause(Scope::Session, "p").await.unwrap();
    assert_eq!(
        client.probe(Scope::Session, "p").await.unwrap(),
        ProbeState::Stopped
    );
    // Its sentry and gofer are in the cgroup the freezer holds.
    assert!(
        wait_until(PROBE_TIMEOUT, || std::fs::read_to_string(&events)
            .is_ok_and(|text| text.contains("frozen 1"))),
        "not frozen: {events:?}"
    );
    client.resume(Scope::Session, "p").await.unwrap();
    let after = sandboxd_tests::runner::probe(&daemon, "p", "echo after=ok\n", PROBE_TIMEOUT);
    assert_eq!(after["after"], "ok");
}
