//! Commands under `isolation = "gvisor"`: `runsc exec` into the sandbox,
//! as the runner's uid (named inside, as the runner is), in its view, with
//! its output, stdin, terminal, signals and timeout, and the requests it
//! cannot honour refused with nothing started.
//!
//! Skipped, with the reason, where runsc is not installed (see `gvisor`).

use std::time::Duration;

use sandboxd_client::{CommandProof, CommandRef, ExitReason, OutputStream, SandboxdClient, Scope};
use sandboxd_protocol::PtySize;
use sandboxd_tests::commands::{read_text_until, request, shell};
use sandboxd_tests::TestDaemon;

use super::gvisor::{
    assert_runsc_gone, gvisor_daemon, processes_naming, runsc_installed, runsc_root, start,
};

/// A command's start under gVisor is a runsc process of its own.
const WAIT: Duration = Duration::from_secs(60);
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

async fn read_all(
    client: &SandboxdClient,
    id: &str,
    command: &CommandRef,
    stream: OutputStream,
) -> (String, CommandProof) {
    let (data, proof) = sandboxd_tests::commands::read_all(client, id, command, stream, WAIT).await;
    (String::from_utf8_lossy(&data).into_owned(), proof)
}

async fn input(client: &SandboxdClient, id: &str, command: &CommandRef, data: &[u8], close: bool) {
    client
        .command_input(Scope::Session, id, command, data, close)
        .await
        .expect("command_input");
}

/// The runner's own answers: its uid and the names it has inside.
fn runner_identity(daemon: &TestDaemon, id: &str) -> std::collections::HashMap<String, String> {
    sandboxd_tests::runner::probe(
        daemon,
        id,
        "echo uid=$(id -u)\necho whoami=$(whoami)\n",
        PROBE_TIMEOUT,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_runs_as_the_named_runner_with_its_output_stdin_and_terminal() {
    if !runsc_installed() {
        return;
    }
    let daemon = gvisor_daemon(&["--serve-probes"], "");
    start(&daemon, "g").await;
    let client = daemon.client().await;
    let runner = runner_identity(&daemon, "g");
    assert!(
        !runner["whoami"].is_empty(),
        "the runner's uid has no name: {runner:?}"
    );
    std::fs::create_dir(daemon.workspace(Scope::Session, "g").join("sub")).unwrap();
    let host_version = std::fs::read_to_string("/proc/version").unwrap();

    let mut first = shell(
        "echo out; echo err >&2; \
         echo uid=$(id -u) whoami=$(whoami) idun=$(id -un) pwd=$(pwd) foo=$FOO; \
         echo py=$(python3 -c 'import os, pwd; print(pwd.getpwuid(os.getuid()).pw_name)' 2>/dev/null || echo none); \
         echo kernel=$(head -n 1 /proc/version); exit 3",
    );
    first.env = vec![("FOO".into(), "bar".into())];
    first.workdir = Some("sub".into());
    let started = client
        .exec(Scope::Session, "g", &first)
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    let command = CommandRef::Id(started.command_id);
    let (stdout, proof) = read_all(&client, "g", &command, OutputStream::Stdout).await;
    let (stderr, _) = read_all(&client, "g", &command, OutputStream::Stderr).await;
    assert_eq!(proof.reason, ExitReason::Exited { code: 3 }, "{stdout}");
    assert_eq!(stderr, "err\n");
    let name = &runner["whoami"];
    let expected = format!(
        "uid={} whoami={name} idun={name} pwd=/workspace/sub foo=bar\n",
        runner["uid"]
    );
    assert!(stdout.starts_with(&format!("out\n{expected}")), "{stdout}");
    let python = std::path::Path::new("/usr/bin/python3").exists();
    assert!(
        !python || stdout.contains(&format!("py={name}\n")),
        "{stdout}"
    );
    assert!(
        !stdout.contains(host_version.trim()),
        "the host's kernel: {stdout}"
    );
    assert!(stdout.contains("kernel="), "{stdout}");

    // stdin fed, then closed.
    let mut cat = request(&["cat"]);
    cat.stdin = true;
    let cat = CommandRef::Id(
        client
            .exec(Scope::Session, "g", &cat)
            .await
            .unwrap()
            .command_id,
    );
    input(&client, "g", &cat, b"fed\n", false).await;
    input(&client, "g", &cat, b"more\n", true).await;
    let (stdout, proof) = read_all(&client, "g", &cat, OutputStream::Stdout).await;
    assert_eq!(stdout, "fed\nmore\n");
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 });

    // A terminal: a tty inside, its size, a resize seen and signalled.
    let mut terminal = request(&["sh"]);
    terminal.pty = Some(PtySize {
        rows: 30,
        cols: 100,
    });
    let started = client.exec(Scope::Session, "g", &terminal).await.unwrap();
    let terminal = CommandRef::Id(started.command_id);
    input(
        &client,
        "g",
        &terminal,
        b"trap 'echo winched' WINCH; test -t 0 && echo is-a-tty; stty size\n",
        false,
    )
    .await;
    let (_, offset) = read_text_until(&client, "g", &terminal, 0, "30 100", WAIT).await;
    client
        .command_resize(Scope::Session, "g", &terminal, 40, 120)
        .await
        .expect("command_resize");
    input(&client, "g", &terminal, b"stty size; exit 5\n", false).await;
    read_text_until(&client, "g", &terminal, offset, "40 120", WAIT).await;
    let (stdout, proof) = read_all(&client, "g", &terminal, OutputStream::Stdout).await;
    assert!(stdout.contains("is-a-tty"), "{stdout}");
    // Its SIGWINCH reached the shell (whose trap runs before its next line).
    assert!(stdout.contains("winched"), "{stdout}");
    assert_eq!(proof.reason, ExitReason::Exited { code: 5 }, "{stdout}");
    assert_eq!(proof.stderr.written, 0, "a terminal is one stream");

    // The command line's exec, with its exit code.
    let cli = daemon.sandboxctl(&["exec", "session", "g", "--", "sh", "-c", "whoami; exit 4"]);
    assert_eq!(
        cli.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&cli.stdout), format!("{name}\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_and_timeouts_end_a_command_and_what_gvisor_cannot_honour_is_refused() {
    if !runsc_installed() {
        return;
    }
    let daemon = gvisor_daemon(&["--serve-probes"], "");
    start(&daemon, "s").await;
    let client = daemon.client().await;

    let mut timed = request(&["sleep", "600"]);
    timed.timeout_ms = Some(300);
    let timed = client.exec(Scope::Session, "s", &timed).await.unwrap();
    let proof =
        sandboxd_tests::commands::proof_of(&client, "s", &CommandRef::Id(timed.command_id), WAIT)
            .await;
    assert_eq!(proof.reason, ExitReason::TimedOut { limit_ms: 300 });
    assert_eq!(proof.shell_code(), 124);

    let mut killed = request(&["sleep", "600"]);
    killed.tag = Some("sleeper".into());
    client.exec(Scope::Session, "s", &killed).await.unwrap();
    let sleeper = CommandRef::Tag("sleeper".into());
    client
        .command_signal(Scope::Session, "s", &sleeper, libc::SIGKILL)
        .await
        .unwrap();
    let proof = sandboxd_tests::commands::proof_of(&client, "s", &sleeper, WAIT).await;
    assert_eq!(proof.reason, ExitReason::Signaled { signal: 9 });
    assert_eq!(proof.shell_code(), 137);

    // A catchable signal reaches the command itself.
    let trapped = shell("trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 1; done");
    let trapped = CommandRef::Id(
        client
            .exec(Scope::Session, "s", &trapped)
            .await
            .unwrap()
            .command_id,
    );
    read_text_until(&client, "s", &trapped, 0, "ready", WAIT).await;
    client
        .command_signal(Scope::Session, "s", &trapped, libc::SIGTERM)
        .await
        .unwrap();
    let (stdout, proof) = read_all(&client, "s", &trapped, OutputStream::Stdout).await;
    assert_eq!(proof.reason, ExitReason::Exited { code: 7 }, "{stdout}");
    assert!(stdout.contains("got-term"), "{stdout}");

    let before = client.commands(Scope::Session, "s").await.unwrap().len();
    let refused = |result: Result<sandboxd_client::ExecStarted, sandboxd_client::ClientError>| {
        format!("{}", result.expect_err("refused"))
    };
    let mut outside = shell("true");
    outside.workdir = Some("../..".into());
    let message = refused(client.exec(Scope::Session, "s", &outside).await);
    assert!(message.contains("workdir"), "{message}");
    std::os::unix::fs::symlink("/etc", daemon.workspace(Scope::Session, "s").join("out")).unwrap();
    outside.workdir = Some("out".into());
    let message = refused(client.exec(Scope::Session, "s", &outside).await);
    assert!(message.contains("leads out of the workspace"), "{message}");
    let mut limited = shell("true");
    limited.limits.memory_bytes = Some(32 << 20);
    let message = refused(client.exec(Scope::Session, "s", &limited).await);
    assert!(
        message.contains("limits of its own") && message.contains("gvisor"),
        "{message}"
    );
    let message = refused(
        client
            .exec(Scope::Session, "s", &request(&["no-such-program-here"]))
            .await,
    );
    assert!(message.contains("argv[0]"), "{message}");
    // Nothing started: no command listed, no runsc exec on the host.
    assert_eq!(
        client.commands(Scope::Session, "s").await.unwrap().len(),
        before
    );
    let root = runsc_root(&daemon).display().to_string();
    let execs: Vec<u32> = processes_naming(&root)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.split(|byte| *byte == 0).any(|arg| arg == b"exec"))
        })
        .collect();
    assert!(execs.is_empty(), "runsc exec left running: {execs:?}");
    let exec_files =
        sandboxd_tests::runner::dir_entries(&daemon.state_dir().join("gvisor").join("exec"));
    assert!(exec_files.is_empty(), "{exec_files:?}");

    // A deprovision ends a command with its sandbox, and leaves no runsc.
    let long = client
        .exec(Scope::Session, "s", &request(&["sleep", "600"]))
        .await
        .unwrap();
    let long = CommandRef::Id(long.command_id);
    let waiter = {
        let client = client.clone();
        tokio::spawn(
            async move { sandboxd_tests::commands::proof_of(&client, "s", &long, WAIT).await },
        )
    };
    client
        .deprovision(Scope::Session, "s", false)
        .await
        .unwrap();
    let proof = waiter.await.unwrap();
    assert_eq!(proof.reason, ExitReason::SandboxEnded, "{proof:?}");
    assert_runsc_gone(&daemon, "the sandbox");
}
