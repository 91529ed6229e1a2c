//! Each process-tier sandbox's private view under `isolation = "full"` (the
//! default): its own mount, PID and IPC namespaces, tried from inside two
//! real runners A and B (the fixture's `--serve-probes`, which runs the
//! shell scripts these tests write, as the runner, in its sandbox).

use std::collections::HashMap;
use std::time::Duration;

use sandboxd_protocol::{ProbeState, Scope};
use sandboxd_tests::procs;
use sandboxd_tests::{sandbox_env, wait_until, Options, TestDaemon};

const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `script` in the sandbox `id` and returns its `key=value` lines.
fn probe(daemon: &TestDaemon, id: &str, script: &str) -> HashMap<String, String> {
    sandboxd_tests::runner::probe(daemon, id, script, PROBE_TIMEOUT)
}

fn probing_daemon(extra_toml: &str) -> TestDaemon {
    TestDaemon::start(Options {
        extra_toml: extra_toml.to_string(),
        ..Options::with_runner_args(&["--serve-probes"])
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sandboxes_share_no_tmp_shm_ipc_processes_or_files() {
    let daemon = probing_daemon("");
    let a = sandboxd_tests::start_session(&daemon, "a").await;
    let b = sandboxd_tests::start_session(&daemon, "b").await;
    let (a_workspace, b_workspace) = (
        daemon.workspace(Scope::Session, "a"),
        daemon.workspace(Scope::Session, "b"),
    );

    // A leaves things where a neighbour would look, and a trap.
    let planted = probe(
        &daemon,
        "a",
        &format!(
            "echo a-secret > /tmp/a-file && echo a > /dev/shm/a-shm && \
             ln -s {}/stolen /tmp/predictable && echo planted=ok\n\
             echo shm=$(\"$FIXTURE\" --ipc shm-create 4096)\n\
             echo queue=$(\"$FIXTURE\" --ipc msg-create)\n",
            a_workspace.display()
        ),
    );
    assert_eq!(planted["planted"], "ok");
    let (shm, queue) = (&planted["shm"], &planted["queue"]);
    assert!(
        shm.parse::<i32>().is_ok() && queue.parse::<i32>().is_ok(),
        "{planted:?}"
    );
    // Control: A reaches its own.
    let own = probe(
        &daemon,
        "a",
        &format!("echo attach=$(\"$FIXTURE\" --ipc shm-attach {shm})\n"),
    );
    assert_eq!(own["attach"], "0");

    let state_dir = daemon.state_dir();
    let seen = probe(
        &daemon,
        "b",
        &format!(
            "echo tmp=$(ls -A /tmp | tr '\\n' ' ')\n\
             echo shm=$(ls -A /dev/shm | tr '\\n' ' ')\n\
             echo secret-of-b > /tmp/predictable; echo wrote=$?\n\
             echo attach=$(\"$FIXTURE\" --ipc shm-attach {shm})\n\
             echo receive=$(\"$FIXTURE\" --ipc msg-receive {queue})\n\
             echo pids=$(ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' ')\n\
             echo init=$(cat /proc/1/comm)\n\
             echo fixtures=$(cat /proc/[0-9]*/comm 2>/dev/null | grep -c runner-fixture)\n\
             echo root=$(ls -A /root 2>&1 | tr '\\n' ' ')\n\
             echo home=$(ls -A /home 2>&1 | tr '\\n' ' ')\n\
             echo sandboxes=$(ls -A {state}/sandboxes 2>&1 | tr '\\n' ' ')\n\
             echo state=$(ls -A {state} 2>&1 | tr '\\n' ' ')\n\
             echo other=$(ls {a_ws} 2>&1 >/dev/null | grep -c 'No such file')\n\
             echo socket=$(test -e {socket} && echo visible || echo gone)\n\
             touch /usr/sandboxd-probe 2>/dev/null; echo usr=$?\n\
             touch /etc/sandboxd-probe 2>&1 | grep -c 'Read-only file system' | sed 's/^/etc=/'\n\
             touch $WORKSPACE_ROOT_DIR/mine /tmp/mine /var/tmp/mine /dev/shm/mine && echo writable=ok\n\
             touch /tmp/tmp-only; echo apart=$(ls -A /var/tmp /dev/shm | grep -c tmp-only)\n\
             touch /root/probe 2>&1 | grep -c 'Read-only file system' | sed 's/^/root_ro=/'\n\
             echo devices=$(stat -c %d /tmp /var/tmp /dev/shm | sort -u | wc -l)\n\
             echo sh=$(sh -c 'echo $((6*7))')\n\
             if [ -x /usr/bin/python3 ]; then echo python=$(/usr/bin/python3 -c 'print(6*7)'); \
             else echo python=42; fi\n",
            state = state_dir.display(),
            a_ws = a_workspace.display(),
            socket = daemon.socket().display(),
        ),
    );
    // Nothing but the mount points of its own workspace and program (the
    // test's directory lives in /tmp).
    let test_dir = daemon
        .dir()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        ["", test_dir.as_str()].contains(&seen["tmp"].as_str()),
        "B sees A's /tmp: {}",
        seen["tmp"]
    );
    assert_eq!(seen["shm"], "", "B sees A's /dev/shm");
    assert_eq!(seen["wrote"], "0", "B writes its own /tmp");
    assert!(
        !a_workspace.join("stolen").exists(),
        "A's symlink redirected B's write"
    );
    assert_eq!(
        seen["attach"],
        format!("errno {}", libc::EINVAL),
        "B attached A's segment"
    );
    assert_eq!(
        seen["receive"],
        format!("errno {}", libc::EINVAL),
        "B read A's queue"
    );
    // Its own init (or a prepared view's holder), itself, and what the
    // probe runs: no host process.
    assert!(
        ["sandbox-init", "sandbox-view"].contains(&seen["init"].as_str()),
        "PID 1 is {}",
        seen["init"]
    );
    let pids: Vec<u32> = seen["pids"]
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(&pids[..2], [1, 2], "{pids:?}");
    assert!(pids.len() < 16, "B's /proc lists {pids:?}");
    assert_eq!(seen["fixtures"], "1", "B sees another sandbox's runner");
    assert_eq!(seen["root"], "");
    assert_eq!(seen["home"], "");
    // Not even its own: it is at /workspace (the state directory, under
    // the test's /tmp, is not in its private /tmp at all).
    assert!(
        seen["sandboxes"].contains("No such file"),
        "B sees workspaces: {}",
        seen["sandboxes"]
    );
    assert!(
        seen["state"].contains("No such file"),
        "B sees the state directory: {}",
        seen["state"]
    );
    assert_eq!(seen["other"], "1", "B reaches A's workspace");
    assert_eq!(seen["socket"], "gone", "B reaches the daemon's socket");
    assert_ne!(seen["usr"], "0", "B wrote into /usr");
    assert_eq!(seen["etc"], "1", "/etc is not read-only");
    assert_eq!(seen["writable"], "ok");
    assert_eq!(seen["apart"], "0", "/tmp shows in /var/tmp or /dev/shm");
    assert_eq!(seen["root_ro"], "1", "the hidden /root is not read-only");
    assert_eq!((seen["sh"].as_str(), seen["python"].as_str()), ("42", "42"));
    // From the host: the pids reported are the runners', pid 2 of their
    // views, under their inits (started cold) or the daemon's own children
    // (in a view prepared ahead, whose holder is PID 1).
    for pid in [a, b] {
        assert_eq!(procs::innermost_pid(pid), Some(2));
        let leader = procs::sandbox_leader(pid);
        assert!(
            leader != pid || procs::parent_pid(pid) == daemon.pid(),
            "runner {pid} has neither an init nor the daemon as its parent"
        );
    }
    assert!(
        b_workspace.join("mine").exists(),
        "the workspace is the real one"
    );

    // Orphans are reaped by init: a grandchild whose parent is gone exits.
    let leader = procs::sandbox_leader(b);
    probe(&daemon, "b", "sh -c 'sleep 0.3 &'\necho started=1\n");
    let no_zombies = wait_until(PROBE_TIMEOUT, || {
        let children = std::fs::read_to_string(format!("/proc/{leader}/task/{leader}/children"))
            .unwrap_or_default();
        let orphans: Vec<u32> = children
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .filter(|&pid| pid != b)
            .collect();
        orphans.is_empty()
    });
    assert!(no_zombies, "init left an orphan unreaped");

    // status and describe say what is in force.
    let client = daemon.client().await;
    let status = client.status().await.unwrap();
    assert_eq!(status.isolation_mode, "full");
    for name in ["mount-namespace", "pid-namespace", "ipc-namespace"] {
        let feature = status
            .isolation
            .iter()
            .find(|feature| feature.name == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", status.isolation));
        assert!(feature.in_force, "{feature:?}");
    }
    // One tmpfs for the private directories where the daemon says so (a
    // directory of it on each), else one each.
    let mount = status
        .isolation
        .iter()
        .find(|feature| feature.name == "mount-namespace")
        .unwrap();
    let file_systems = if mount.detail.contains("one tmpfs of") {
        "1"
    } else {
        assert!(mount.detail.contains("a tmpfs of"), "{mount:?}");
        "3"
    };
    assert_eq!(seen["devices"], file_systems, "{mount:?}");
    let info = client.describe(Scope::Session, "b").await.unwrap();
    assert_eq!(info.pid, Some(b));
    // `status` alone adds the pool's live counts.
    let status_features: Vec<_> = status
        .isolation
        .into_iter()
        .filter(|feature| feature.name != "prepared-views")
        .collect();
    assert_eq!(info.isolation, status_features);
    // `list` leaves them out, as the protocol says: they are the same for
    // every sandbox, and `describe` gives them.
    let listed = client.list(None).await.unwrap();
    assert!(listed.iter().any(|sandbox| sandbox.id == "b"), "{listed:?}");
    assert!(
        listed.iter().all(|sandbox| sandbox.isolation.is_empty()),
        "{listed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_signals_are_the_runners_own() {
    let daemon = TestDaemon::start(Options::with_runner_args(&["--exit-code", "7"]));
    let client = daemon.client().await;
    client
        .ensure(Scope::Session, "seven", &sandbox_env("q:seven", "tok"))
        .await
        .unwrap();
    let exited = sandboxd_tests::eventually(PROBE_TIMEOUT, || async {
        let info = client.describe(Scope::Session, "seven").await.unwrap();
        info.last_exit.is_some_and(|exit| exit.code == Some(7))
    })
    .await;
    assert!(
        exited,
        "exit code 7 was not reported: {}",
        daemon.log_text()
    );

    let daemon = probing_daemon("");
    let pid = sandboxd_tests::start_session(&daemon, "usr2").await;
    let leader = procs::sandbox_leader(pid);
    procs::signal_pid(pid, nix::sys::signal::Signal::SIGUSR2);
    let client = daemon.client().await;
    let killed = sandboxd_tests::eventually(PROBE_TIMEOUT, || async {
        let info = client.describe(Scope::Session, "usr2").await.unwrap();
        info.last_exit
            .is_some_and(|exit| exit.signal == Some(libc::SIGUSR2) && exit.code.is_none())
    })
    .await;
    assert!(
        killed,
        "SIGUSR2 was not reported (runner {:?}, init {:?}): {}",
        procs::state(pid),
        procs::state(leader),
        daemon.log_text()
    );
}

/// `Shmem:` of `/proc/meminfo` in bytes: tmpfs and System V pages in use.
fn host_shmem() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = meminfo
        .lines()
        .find(|line| line.starts_with("Shmem:"))
        .unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprovision_reaches_the_runner_and_gives_its_shm_and_sysv_memory_back() {
    const MIB: u64 = 1024 * 1024;
    let daemon = probing_daemon("");
    sandboxd_tests::start_session(&daemon, "hog").await;
    let before = host_shmem();
    let made = probe(
        &daemon,
        "hog",
        &format!(
            "dd if=/dev/zero of=/dev/shm/big bs=1M count=128 2>/dev/null && echo file=ok\n\
             echo segment=$(\"$FIXTURE\" --ipc shm-create {})\n",
            128 * MIB
        ),
    );
    assert_eq!(made["file"], "ok");
    assert!(made["segment"].parse::<i32>().is_ok(), "{made:?}");
    let during = host_shmem();
    assert!(
        during > before + 200 * MIB,
        "the sandbox's 256 MiB are not in use: {before} -> {during}"
    );
    let client = daemon.client().await;
    let report = client
        .deprovision(Scope::Session, "hog", false)
        .await
        .unwrap();
    // The fixture exits at SIGTERM: it reached the runner through init.
    assert!(report.was_present && !report.forced, "{report:?}");
    assert_eq!(
        client.probe(Scope::Session, "hog").await.unwrap(),
        ProbeState::Absent
    );
    let mut after = during;
    let freed = wait_until(PROBE_TIMEOUT, || {
        after = host_shmem();
        after + 200 * MIB < during
    });
    assert!(freed, "the memory is not back: {during} -> {after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uid_cgroup_keeps_the_hosts_view_and_says_so() {
    let daemon = probing_daemon("isolation = \"uid-cgroup\"");
    let pid = sandboxd_tests::start_session(&daemon, "host").await;
    assert_eq!(
        procs::innermost_pid(pid),
        Some(pid),
        "a namespace of its own"
    );
    assert_eq!(procs::sandbox_leader(pid), pid);
    let seen = probe(&daemon, "host", "echo init=$(cat /proc/1/comm)\n");
    assert_ne!(seen["init"], "sandbox-init");
    let status = daemon.client().await.status().await.unwrap();
    assert_eq!(status.isolation_mode, "uid-cgroup");
    for name in ["mount-namespace", "pid-namespace", "ipc-namespace"] {
        let feature = status.isolation.iter().find(|f| f.name == name).unwrap();
        assert!(!feature.in_force, "{feature:?}");
        assert!(feature.detail.contains("uid-cgroup"), "{feature:?}");
    }
}
