//! Commands in a running process-tier sandbox (`exec`): they run with the
//! runner's isolation, their output is kept and read back from any
//! offset, and each ends with exactly one proof saying how.

use std::time::Duration;

use sandboxd_client::{CommandProof, CommandRef, ExitReason, OutputStream, SandboxdClient, Scope};
use sandboxd_tests::commands::{request, shell};
use sandboxd_tests::{Options, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

/// Everything `stream` holds, read to its end, and the proof.
async fn read_all(
    client: &SandboxdClient,
    id: &str,
    command: &CommandRef,
    stream: OutputStream,
) -> (Vec<u8>, CommandProof) {
    sandboxd_tests::commands::read_all(client, id, command, stream, WAIT).await
}

/// The real uid of host process `pid`, read from the host.
fn uid_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().next().map(str::to_string))
        .unwrap()
}

async fn proof_of(client: &SandboxdClient, id: &str, command: &CommandRef) -> CommandProof {
    sandboxd_tests::commands::proof_of(client, id, command, WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_runs_as_the_runner_and_ends_with_its_code_and_output() {
    let daemon = TestDaemon::start(Options::default());
    let runner_pid = sandboxd_tests::start_session(&daemon, "c1").await;
    let client = daemon.client().await;
    let started = client
        .exec(
            Scope::Session,
            "c1",
            &shell(
                "echo out; echo err >&2; \
                 echo uid=$(id -u) pwd=$(pwd); \
                 for ns in mnt pid ipc; do echo $ns=$(readlink /proc/self/ns/$ns); done; \
                 echo cgroup=$(cat /proc/self/cgroup | sort | md5sum); \
                 exit 3",
            ),
        )
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    assert_eq!(started.command_id.len(), 32);
    let command = CommandRef::Id(started.command_id.clone());
    let (stdout, proof) = read_all(&client, "c1", &command, OutputStream::Stdout).await;
    let (stderr, _) = read_all(&client, "c1", &command, OutputStream::Stderr).await;
    let stdout = String::from_utf8(stdout).unwrap();
    assert_eq!(proof.reason, ExitReason::Exited { code: 3 }, "{stdout}");
    assert_eq!(proof.exit_code, Some(3));
    assert_eq!(stderr, b"err\n");
    assert_eq!(proof.stderr.written, 4);
    assert!(stdout.starts_with("out\n"), "{stdout}");
    // The runner's own, read from the host.
    let runner_uid = uid_of(runner_pid);
    assert!(stdout.contains(&format!("uid={runner_uid} ")), "{stdout}");
    // At the short path its view mounts it on, not the host's.
    assert!(stdout.contains("pwd=/workspace\n"), "{stdout}");
    for ns in ["mnt", "pid", "ipc"] {
        let runner_ns = std::fs::read_link(format!("/proc/{runner_pid}/ns/{ns}")).unwrap();
        assert!(
            stdout.contains(&format!("{ns}={}", runner_ns.display())),
            "{ns}: {stdout}"
        );
    }
    let list = client.commands(Scope::Session, "c1").await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].proof.as_ref(), Some(&proof));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_a_kill_and_a_deprovision_each_settle_with_their_own_proof() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "c2").await;
    let client = daemon.client().await;
    let mut timed = shell("sleep 600");
    timed.timeout_ms = Some(300);
    let timed = client.exec(Scope::Session, "c2", &timed).await.unwrap();
    let proof = proof_of(&client, "c2", &CommandRef::Id(timed.command_id)).await;
    assert_eq!(proof.reason, ExitReason::TimedOut { limit_ms: 300 });
    assert_eq!(proof.shell_code(), 124);

    let mut tagged = shell("sleep 600");
    tagged.tag = Some("sleeper".into());
    client.exec(Scope::Session, "c2", &tagged).await.unwrap();
    let again = client.exec(Scope::Session, "c2", &tagged).await;
    assert!(
        format!("{:?}", again).contains("tag 'sleeper' is in use"),
        "{again:?}"
    );
    let sleeper = CommandRef::Tag("sleeper".into());
    client
        .command_signal(Scope::Session, "c2", &sleeper, libc::SIGKILL)
        .await
        .unwrap();
    let proof = proof_of(&client, "c2", &sleeper).await;
    assert_eq!(proof.reason, ExitReason::Signaled { signal: 9 });
    assert_eq!(proof.shell_code(), 137);

    let long = client
        .exec(Scope::Session, "c2", &shell("sleep 600"))
        .await
        .unwrap();
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { proof_of(&client, "c2", &CommandRef::Id(long.command_id)).await })
    };
    client
        .deprovision(Scope::Session, "c2", false)
        .await
        .unwrap();
    let proof = waiter.await.unwrap();
    assert_eq!(proof.reason, ExitReason::SandboxEnded, "{proof:?}");
    // Its commands and proofs go with the deprovisioned incarnation.
    let mut left = client.commands(Scope::Session, "c2").await.unwrap();
    for _ in 0..500 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = client.commands(Scope::Session, "c2").await.unwrap();
    }
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_fed_and_closed_and_bad_requests_name_their_field() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "c3").await;
    let client = daemon.client().await;
    let mut cat = request(&["cat"]);
    cat.stdin = true;
    let cat = client.exec(Scope::Session, "c3", &cat).await.unwrap();
    let command = CommandRef::Id(cat.command_id);
    client
        .command_input(Scope::Session, "c3", &command, b"fed\n", false)
        .await
        .unwrap();
    client
        .command_input(Scope::Session, "c3", &command, b"more\n", true)
        .await
        .unwrap();
    let (stdout, proof) = read_all(&client, "c3", &command, OutputStream::Stdout).await;
    assert_eq!(stdout, b"fed\nmore\n");
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 });

    // The largest input one call may carry fits its request frame (a
    // frame past the daemon's bound closes the connection instead).
    let mut count = shell("wc -c");
    count.stdin = true;
    let count = client.exec(Scope::Session, "c3", &count).await.unwrap();
    let count = CommandRef::Id(count.command_id);
    let largest = vec![b'x'; sandboxd_protocol::commands::MAX_COMMAND_INPUT];
    client
        .command_input(Scope::Session, "c3", &count, &largest, true)
        .await
        .expect("the largest input a call may carry");
    let (stdout, _) = read_all(&client, "c3", &count, OutputStream::Stdout).await;
    assert_eq!(
        String::from_utf8_lossy(&stdout).trim(),
        largest.len().to_string()
    );

    let refused = |result: Result<sandboxd_client::ExecStarted, sandboxd_client::ClientError>| {
        format!("{}", result.expect_err("refused"))
    };
    let mut outside = shell("true");
    outside.workdir = Some("../..".into());
    assert!(refused(client.exec(Scope::Session, "c3", &outside).await).contains("workdir"));
    std::os::unix::fs::symlink("/etc", daemon.workspace(Scope::Session, "c3").join("out")).unwrap();
    outside.workdir = Some("out".into());
    let message = refused(client.exec(Scope::Session, "c3", &outside).await);
    assert!(message.contains("leads out of the workspace"), "{message}");
    let message = refused(client.exec(Scope::Session, "absent", &shell("true")).await);
    assert!(message.contains("does not exist"), "{message}");
    let message = refused(
        client
            .exec(Scope::Session, "c3", &request(&["no-such-program-here"]))
            .await,
    );
    assert!(message.contains("argv[0]"), "{message}");
    let mut stale = shell("true");
    stale.expect.generation = Some(99);
    let message = refused(client.exec(Scope::Session, "c3", &stale).await);
    assert!(message.contains("conflict"), "{message}");
}

/// A daemon whose sandboxes are started cold (no prepared views), so a
/// command joins a view through its sandbox's own init.
fn cold_daemon(extra_toml: &str) -> TestDaemon {
    TestDaemon::start(Options {
        extra_toml: format!("[pool]\nsession = 0\nworkflow = 0\n{extra_toml}"),
        ..Options::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_the_memory_limit_is_the_oom_killers_and_the_runner_lives_on() {
    let daemon = cold_daemon("[limits]\nmemory = \"64m\"");
    let runner_pid = sandboxd_tests::start_session(&daemon, "oom").await;
    let client = daemon.client().await;
    // tail buffers a line that never ends: it grows until killed.
    let hog = client
        .exec(Scope::Session, "oom", &request(&["tail", "/dev/zero"]))
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    let proof = proof_of(&client, "oom", &CommandRef::Id(hog.command_id)).await;
    assert!(
        matches!(proof.reason, ExitReason::OutOfMemory { .. }),
        "{proof:?}"
    );
    assert_eq!(proof.signal, Some(libc::SIGKILL));
    assert!(
        !sandboxd_tests::pid_is_gone(runner_pid),
        "the runner lives on"
    );
    let info = client.describe(Scope::Session, "oom").await.unwrap();
    assert_eq!(info.pid, Some(runner_pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_nobody_reads_is_bounded_and_an_escaped_command_ends_with_its_sandbox() {
    let daemon = cold_daemon("[commands]\noutput_bytes = \"64k\"");
    sandboxd_tests::start_session(&daemon, "flood").await;
    let client = daemon.client().await;
    let flood = client
        .exec(
            Scope::Session,
            "flood",
            &shell("yes | head -c 20000000; echo done >&2"),
        )
        .await
        .unwrap();
    let command = CommandRef::Id(flood.command_id);
    // Nobody read: the command still ran to its end.
    let proof = proof_of(&client, "flood", &command).await;
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 });
    assert_eq!(proof.stdout.written, 20_000_000);
    assert_eq!(proof.stdout.dropped, 20_000_000 - 64 * 1024);
    let tail = client
        .command_output(
            Scope::Session,
            "flood",
            &command,
            OutputStream::Stdout,
            0,
            1 << 20,
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!(
        (tail.start, tail.dropped),
        (proof.stdout.dropped, proof.stdout.dropped)
    );
    assert_eq!(tail.data.len(), 64 * 1024);
    assert!(tail.data.starts_with(b"y\n"), "aligned on the kept bytes");

    // A command that leaves a process behind in a session of its own.
    let escaper = client
        .exec(
            Scope::Session,
            "flood",
            &shell("setsid sh -c 'sleep 600 & sleep 600' >/dev/null 2>&1 < /dev/null & echo left"),
        )
        .await
        .unwrap();
    let proof = proof_of(&client, "flood", &CommandRef::Id(escaper.command_id)).await;
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 });
    assert!(
        !daemon.leftover_processes().is_empty(),
        "the escaped sleeps run"
    );
    client
        .deprovision(Scope::Session, "flood", false)
        .await
        .unwrap();
    assert!(
        sandboxd_tests::wait_until(WAIT, || daemon.leftover_processes().is_empty()),
        "left: {:?}",
        daemon.leftover_processes()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_flood_grows_its_pipe_and_arrives_whole_without_holding_up_the_sandbox() {
    let daemon = cold_daemon("[commands]\noutput_bytes = \"64m\"");
    sandboxd_tests::start_session(&daemon, "busy").await;
    let client = daemon.client().await;
    const BYTES: usize = 40_000_000;
    // After the flood, the command reads the size of the pipe it wrote
    // to (F_GETPIPE_SZ): the daemon grew it once the stream proved busy.
    let flood = client
        .exec(
            Scope::Session,
            "busy",
            &shell(&format!(
                "yes | head -c {BYTES}; python3 -c 'import fcntl, sys; print(fcntl.fcntl(1, 1032), file=sys.stderr)'"
            )),
        )
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    let command = CommandRef::Id(flood.command_id);
    // Meanwhile another command in the same sandbox starts and ends.
    let beside = client
        .exec(Scope::Session, "busy", &shell("echo beside"))
        .await
        .unwrap();
    let beside_proof = proof_of(&client, "busy", &CommandRef::Id(beside.command_id)).await;
    assert_eq!(beside_proof.reason, ExitReason::Exited { code: 0 });
    let (stdout, proof) = read_all(&client, "busy", &command, OutputStream::Stdout).await;
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 });
    assert_eq!(
        (proof.stdout.written, proof.stdout.dropped),
        (BYTES as u64, 0)
    );
    assert_eq!(stdout.len(), BYTES, "every byte, none dropped");
    assert!(
        stdout.chunks(2).all(|pair| pair == b"y\n"),
        "in order, nothing torn or repeated"
    );
    let (stderr, _) = read_all(&client, "busy", &command, OutputStream::Stderr).await;
    assert_eq!(String::from_utf8_lossy(&stderr).trim(), "1048576");
    client
        .deprovision(Scope::Session, "busy", false)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_stop_cleanly_at_the_pids_limit_and_a_paused_sandbox_runs_none() {
    let daemon = cold_daemon("[limits]\npids = 40");
    sandboxd_tests::start_session(&daemon, "pids").await;
    let client = daemon.client().await;
    let mut refused = None;
    for _ in 0..60 {
        match client
            .exec(Scope::Session, "pids", &request(&["sleep", "600"]))
            .await
        {
            Ok(_) => {}
            Err(error) => {
                refused = Some(error.to_string());
                break;
            }
        }
    }
    let refused = refused.expect("the pids limit refused a command");
    assert!(refused.contains("pids limit"), "{refused}");
    assert!(refused.contains("pids = 40"), "{refused}");
    // The daemon and the sandbox still serve.
    assert_eq!(
        client.probe(Scope::Session, "pids").await.unwrap(),
        sandboxd_client::ProbeState::Running
    );

    client.pause(Scope::Session, "pids").await.unwrap();
    let paused = client
        .exec(Scope::Session, "pids", &shell("true"))
        .await
        .expect_err("refused while paused");
    assert!(paused.to_string().contains("paused"), "{paused}");
    client.resume(Scope::Session, "pids").await.unwrap();
    let live = client.commands(Scope::Session, "pids").await.unwrap();
    assert!(live.len() >= 30, "{}", live.len());
    client
        .deprovision(Scope::Session, "pids", false)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_uid_cgroup_a_command_runs_as_the_sandbox_without_a_view() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "isolation = \"uid-cgroup\"".to_string(),
        ..Options::default()
    });
    let runner_pid = sandboxd_tests::start_session(&daemon, "plain").await;
    let client = daemon.client().await;
    let started = client
        .exec(
            Scope::Session,
            "plain",
            &shell("echo uid=$(id -u); cat /proc/self/cgroup | sort | md5sum"),
        )
        .await
        .unwrap();
    let (stdout, proof) = read_all(
        &client,
        "plain",
        &CommandRef::Id(started.command_id),
        OutputStream::Stdout,
    )
    .await;
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 });
    let stdout = String::from_utf8(stdout).unwrap();
    let runner_uid = uid_of(runner_pid);
    assert!(
        stdout.starts_with(&format!("uid={runner_uid}\n")),
        "{stdout}"
    );
    let runner_cgroup = std::fs::read_to_string(format!("/proc/{runner_pid}/cgroup")).unwrap();
    let mut lines: Vec<&str> = runner_cgroup.lines().collect();
    lines.sort();
    let digest = std::process::Command::new("md5sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(format!("{}\n", lines.join("\n")).as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let digest = String::from_utf8(digest.stdout).unwrap();
    assert!(
        stdout.ends_with(&digest),
        "same cgroups: {stdout} vs {digest}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_stop_ends_every_command_with_a_daemon_stopped_proof() {
    let mut daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "stop").await;
    let client = daemon.client().await;
    let started = client
        .exec(Scope::Session, "stop", &shell("sleep 600"))
        .await
        .unwrap();
    drop(client);
    assert!(daemon.stop().success());
    // Connections close before the sandboxes stop, so the proof is the
    // log's (a control plane that reconnects finds the command gone: lost).
    let log = daemon.log_text();
    let ended = format!("command ended command={}", started.command_id);
    let line = log
        .lines()
        .find(|line| line.contains(&ended))
        .unwrap_or_else(|| panic!("no end logged for the command:\n{log}"));
    assert!(line.contains("reason=daemon-stopped"), "{line}");
    assert!(daemon.leftover_processes().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_with_its_own_memory_limit_is_killed_at_it_and_the_sandbox_lives_on() {
    let daemon = cold_daemon("");
    let runner_pid = sandboxd_tests::start_session(&daemon, "own").await;
    let client = daemon.client().await;
    let mut hog = request(&["tail", "/dev/zero"]);
    hog.limits.memory_bytes = Some(32 * 1024 * 1024);
    hog.limits.cpu_millis = Some(500);
    let started = client.exec(Scope::Session, "own", &hog).await;
    let started = match started {
        Ok(started) => started,
        // A host whose memory controller is cgroup v2's says why, by name.
        Err(error) if error.to_string().contains("cgroup v1 hierarchy") => {
            eprintln!("skipped: {error}");
            return;
        }
        Err(error) => panic!("exec: {error}\n{}", daemon.log_text()),
    };
    let proof = proof_of(&client, "own", &CommandRef::Id(started.command_id)).await;
    assert_eq!(
        proof.reason,
        ExitReason::OutOfMemory {
            limit_bytes: Some(32 * 1024 * 1024)
        },
        "{proof:?}"
    );
    assert!(
        !sandboxd_tests::pid_is_gone(runner_pid),
        "the runner lives on"
    );
    // Its cgroup went with it: the sandbox's is removed cleanly.
    let usage = client.describe(Scope::Session, "own").await.unwrap();
    assert_eq!(usage.pid, Some(runner_pid));
    let mut too_big = shell("true");
    too_big.limits.memory_bytes = Some(1 << 40);
    let refused = client
        .exec(Scope::Session, "own", &too_big)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("above its sandbox's memory limit"),
        "{refused}"
    );
    client
        .deprovision(Scope::Session, "own", false)
        .await
        .unwrap();
    assert!(sandboxd_tests::wait_until(WAIT, || daemon
        .leftover_processes()
        .is_empty()));
}

/// Python printing `clone3=<errno>` for a `clone3` with no arguments
/// (EINVAL without a filter) and `personality=<errno>` for
/// `ADDR_NO_RANDOMIZE` (0: allowed).
fn seccomp_probes() -> String {
    format!(
        "import ctypes\n\
         l = ctypes.CDLL(None, use_errno=True)\n\
         for name, call, arg in ((\"clone3\", {clone3}, 0), (\"personality\", {personality}, 0x0040000)):\n\
         \x20   print(\"%s=%d\" % (name, 0 if l.syscall(call, arg, 0) >= 0 else ctypes.get_errno()))",
        clone3 = libc::SYS_clone3,
        personality = libc::SYS_personality,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_inside_a_command_no_new_namespace_and_no_other_sandbox_is_reachable() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "inside").await;
    let other_runner = sandboxd_tests::start_session(&daemon, "other").await;
    let other_workspace = daemon.workspace(Scope::Session, "other");
    let client = daemon.client().await;
    let script = format!(
        "unshare -U true 2>/dev/null; echo unshare=$?\n\
         python3 -c '{calls}'\n\
         grep -E '^(CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -d ' \\t' | sed 's/:/=/'\n\
         ls {other} >/dev/null 2>&1; echo other_workspace=$?\n\
         echo processes=$(ls /proc | grep -cE '^[0-9]+$')\n\
         echo init=$(cat /proc/1/comm)\n\
         kill -0 {other_runner} 2>/dev/null; echo kill_other=$?\n\
         echo workspaces=$(ls -A {state}/sandboxes 2>/dev/null | wc -l)\n",
        other = other_workspace.display(),
        state = daemon.state_dir().display(),
        calls = seccomp_probes(),
    );
    let started = client
        .exec(Scope::Session, "inside", &shell(&script))
        .await
        .unwrap();
    let (stdout, proof) = read_all(
        &client,
        "inside",
        &CommandRef::Id(started.command_id),
        OutputStream::Stdout,
    )
    .await;
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 });
    let stdout = String::from_utf8(stdout).unwrap();
    let value = |key: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
            .to_string()
    };
    assert_ne!(value("unshare"), "0", "a user namespace was made: {stdout}");
    // The runner's filter and privileges, whole, though a command inherits
    // most of them from the thread that clones it: clone3 refused with
    // ENOSYS (the part each command attaches), personality's
    // ADDR_NO_RANDOMIZE with EPERM (the part the thread holds), no
    // bounding set, no new privileges.
    assert_eq!(value("clone3"), libc::ENOSYS.to_string(), "{stdout}");
    assert_eq!(value("personality"), libc::EPERM.to_string(), "{stdout}");
    assert_eq!(value("CapBnd"), "0000000000000000", "{stdout}");
    assert_eq!(value("NoNewPrivs"), "1", "{stdout}");
    assert_eq!(value("Seccomp"), "2", "{stdout}");
    assert_ne!(value("other_workspace"), "0", "{stdout}");
    assert_ne!(value("kill_other"), "0", "{stdout}");
    // None of the daemon's workspaces is there (its own is at /workspace).
    assert_eq!(value("workspaces"), "0", "{stdout}");
    // Its sandbox's init, the runner, the shell and ls: a handful, never
    // the host's hundreds.
    let processes: usize = value("processes").parse().unwrap();
    assert!(processes < 10, "{stdout}");
    assert_ne!(value("init"), "systemd", "{stdout}");
}
