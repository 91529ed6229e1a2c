//! Commands in a sandbox through `sandboxctl` (`exec`, `commands`,
//! `attach`, `kill`, `events`) and through the client library's
//! `ExecHandle` and `run_command`, against a real daemon: exit codes pass
//! through, streams stay apart, stdin is forwarded, control bytes are
//! escaped only on a terminal, and `exec -it` is a real terminal (driven
//! by tmux).

use std::io::{Read as _, Write as _};
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use futures::StreamExt as _;
use sandboxd_client::{
    CommandRef, ExecRequest, ExitReason, OutputEvent, OutputStream, PtySize, RunOptions, Scope,
};
use sandboxd_tests::{binaries, procs, wait_until, Options, TestDaemon};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `sandboxctl` and asserts its exit code, showing both streams when
/// it is not the one wanted.
#[track_caller]
fn ctl(daemon: &TestDaemon, args: &[&str], wanted: i32) -> Output {
    let output = daemon.sandboxctl(args);
    assert_eq!(
        code(&output),
        Some(wanted),
        "sandboxctl {args:?}\nstdout: {}\nstderr: {}",
        text(&output.stdout),
        text(&output.stderr)
    );
    output
}

/// A `sandboxctl` run with `input` on its stdin (then end of file).
fn ctl_fed(daemon: &TestDaemon, args: &[&str], input: &[u8]) -> Output {
    let mut command = Command::new(binaries::sandboxctl());
    command
        .args(args)
        .env(sandboxd_client::SOCKET_ENV, daemon.socket())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = procs::spawn(&mut command).expect("run sandboxctl");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    drop(stdin);
    finish(child)
}

/// Waits for a spawned `sandboxctl` (killing it after a minute).
fn finish(child: std::process::Child) -> Output {
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(child.wait_with_output()));
    match receiver.recv_timeout(Duration::from_secs(60)) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            procs::signal_pid(pid, nix::sys::signal::Signal::SIGKILL);
            panic!("sandboxctl did not finish within a minute");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_passes_the_exit_code_through_and_keeps_the_streams_apart() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "x1").await;
    let script = "echo out; echo err >&2; exit 3";
    let output = ctl(
        &daemon,
        &["exec", "session", "x1", "--", "sh", "-c", script],
        3,
    );
    assert_eq!(text(&output.stdout), "out\n");
    assert_eq!(text(&output.stderr), "err\n");

    let output = ctl(
        &daemon,
        &[
            "exec",
            "--timeout",
            "300ms",
            "session",
            "x1",
            "sleep",
            "600",
        ],
        124,
    );
    assert!(text(&output.stderr).contains("timed-out"), "{output:?}");
    let output = ctl(
        &daemon,
        &["exec", "session", "x1", "--", "sh", "-c", "kill -KILL $$"],
        137,
    );
    assert!(text(&output.stderr).contains("signaled"), "{output:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_forwards_stdin_only_with_i_and_sets_env_and_workdir() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "x1").await;
    // stdin forwarded, its end closing the command's.
    let output = ctl_fed(
        &daemon,
        &["exec", "-i", "session", "x1", "cat"],
        b"fed\nmore",
    );
    assert_eq!(code(&output), Some(0), "{output:?}");
    assert_eq!(output.stdout, b"fed\nmore");
    // Without -i the command's stdin is /dev/null.
    let output = ctl_fed(&daemon, &["exec", "session", "x1", "cat"], b"not read");
    assert_eq!((code(&output), output.stdout.len()), (Some(0), 0));

    // Environment and working directory.
    ctl(&daemon, &["exec", "session", "x1", "mkdir", "sub"], 0);
    let output = ctl(
        &daemon,
        &[
            "exec",
            "-e",
            "GREETING=hi",
            "-w",
            "sub",
            "session",
            "x1",
            "--",
            "sh",
            "-c",
            "echo $GREETING $(basename $(pwd))",
        ],
        0,
    );
    assert_eq!(text(&output.stdout), "hi sub\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_passes_a_commands_own_limits_on() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "x10").await;
    let hog = [
        "exec",
        "--memory",
        "32m",
        "--cpu",
        "0.5",
        "session",
        "x10",
        "tail",
        "/dev/zero",
    ];
    let output = daemon.sandboxctl(&hog);
    let stderr = text(&output.stderr);
    if code(&output) == Some(1) && stderr.contains("cgroup v1 hierarchy") {
        // A host whose memory controller is cgroup v2's refuses them by name.
        eprintln!("skipped the kill at the limit: {stderr}");
        return;
    }
    // Killed at its own 32 MiB, not at the sandbox's limit.
    assert_eq!(code(&output), Some(137), "{stderr}");
    assert!(stderr.contains("out-of-memory (limit 32"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_refuses_bad_input_by_name() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "x6").await;
    for (args, named) in [
        (
            &["exec", "--memory", "12x", "session", "x6", "true"][..],
            "'12x'",
        ),
        (
            &["exec", "--timeout", "5x", "session", "x6", "true"],
            "'5x'",
        ),
        (&["exec", "--cpu", "0", "session", "x6", "true"], "'0'"),
        (
            &["exec", "-e", "NOEQUALS", "session", "x6", "true"],
            "NAME=VALUE",
        ),
        (&["exec", "session", "x6"], "COMMAND"),
        (
            &["kill", "--signal", "NOPE", "session", "x6", "--tag", "t"],
            "'NOPE'",
        ),
        (&["attach", "session", "x6"], "COMMAND_ID"),
        (
            &["attach", "session", "x6", &"a".repeat(32), "--tag", "t"],
            "--tag",
        ),
    ] {
        let output = ctl(&daemon, args, 2);
        assert!(text(&output.stderr).contains(named), "{args:?}: {output:?}");
    }
    // The daemon's refusals: exit 1, named.
    let output = ctl(
        &daemon,
        &["exec", "-w", "../..", "session", "x6", "true"],
        1,
    );
    assert!(text(&output.stderr).contains("workdir"), "{output:?}");
    let output = ctl(&daemon, &["attach", "session", "x6", "--tag", "absent"], 1);
    assert!(
        text(&output.stderr).contains("no such command"),
        "{output:?}"
    );
}

fn commands_json(daemon: &TestDaemon, id: &str) -> Vec<Value> {
    let output = ctl(daemon, &["commands", "--json", "session", id], 0);
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    value.as_array().expect("an array").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_commands_are_listed_attached_by_id_or_tag_and_killed() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "x2").await;
    let script = "echo started; echo warned >&2; sleep 600";
    let output = ctl(
        &daemon,
        &[
            "exec", "--detach", "--tag", "sleeper", "session", "x2", "--", "sh", "-c", script,
        ],
        0,
    );
    let id = text(&output.stdout).trim().to_string();
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );

    let listed = commands_json(&daemon, "x2");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["command_id"], id.as_str());
    assert_eq!(listed[0]["tag"], "sleeper");
    assert_eq!(listed[0]["state"], "running");
    let table = text(&ctl(&daemon, &["commands", "session", "x2"], 0).stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0]
        .split_whitespace()
        .eq(["ID", "TAG", "PID", "STATE", "STARTED", "EXIT"]));
    assert!(
        lines[1].starts_with(&id) && lines[1].contains(" sleeper ") && lines[1].contains("running")
    );

    // An attach follows it from its first byte to its end.
    let attach = daemon.spawn_sandboxctl(&["attach", "session", "x2", "--tag", "sleeper"]);
    let killed = ctl(
        &daemon,
        &["kill", "session", "x2", "--tag", "sleeper", "-s", "SIGKILL"],
        0,
    );
    assert_eq!(text(&killed.stdout).trim(), id);
    let attached = finish(attach);
    assert_eq!(code(&attached), Some(137), "{attached:?}");
    assert_eq!(text(&attached.stdout), "started\n");
    assert!(
        text(&attached.stderr).starts_with("warned\n"),
        "{attached:?}"
    );
    // Ended: by id, the same bytes and code again.
    let again = ctl(&daemon, &["attach", "session", "x2", &id], 137);
    assert_eq!(text(&again.stdout), "started\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_sends_sigterm_by_default_and_commands_shows_how_it_ended() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "x2").await;
    let output = ctl(&daemon, &["exec", "-d", "session", "x2", "sleep", "600"], 0);
    let second = text(&output.stdout).trim().to_string();
    ctl(&daemon, &["kill", "session", "x2", &second], 0);
    ctl(
        &daemon,
        &["attach", "session", "x2", &second],
        128 + libc::SIGTERM,
    );
    let listed = commands_json(&daemon, "x2");
    let ended = listed
        .iter()
        .find(|info| info["command_id"] == second.as_str())
        .unwrap();
    assert_eq!(ended["state"], "ended");
    assert_eq!(ended["proof"]["signal"], libc::SIGTERM);
    let table = text(&ctl(&daemon, &["commands", "session", "x2"], 0).stdout);
    assert!(table.contains("signaled (signal 15)"), "{table}");
}

/// The `events --json` lines of sandbox `id`.
fn event_lines(daemon: &TestDaemon, id: &str) -> Vec<Value> {
    let output = ctl(daemon, &["events", "--json", "--id", id], 0);
    text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_name_the_command_and_how_it_exited() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "x3").await;
    let output = ctl(
        &daemon,
        &[
            "exec", "-d", "--tag", "t3", "session", "x3", "sh", "-c", "exit 3",
        ],
        0,
    );
    let id = text(&output.stdout).trim().to_string();
    let mut lines = Vec::new();
    assert!(
        wait_until(WAIT, || {
            lines = event_lines(&daemon, "x3");
            lines.iter().any(|line| line["kind"] == "command-exited")
        }),
        "no command-exited event: {lines:?}"
    );
    let started = lines
        .iter()
        .find(|line| line["kind"] == "command-started")
        .unwrap();
    assert_eq!(
        (&started["command_id"], &started["tag"]),
        (&Value::from(id.as_str()), &Value::from("t3"))
    );
    let exited = lines
        .iter()
        .find(|line| line["kind"] == "command-exited")
        .unwrap();
    assert_eq!(exited["command_id"], id.as_str());
    assert_eq!(exited["tag"], "t3");
    assert_eq!(exited["exit"]["code"], 3);
    assert_eq!(exited["exit"]["signal"], Value::Null);
    assert_eq!(exited["exit"]["reason"], "exited");

    let output = ctl(&daemon, &["events", "--id", "x3"], 0);
    let human = text(&output.stdout);
    let exited = human
        .lines()
        .find(|line| line.contains(" command-exited "))
        .unwrap();
    assert!(
        exited.contains(&format!("command_id={id}, tag=t3"))
            && exited.contains("reason=exited, code=3"),
        "{human}"
    );
}

/// A new terminal: (leader, follower), the follower raw so the bytes the
/// test reads are exactly the ones sandboxctl wrote.
fn terminal() -> (OwnedFd, OwnedFd) {
    let (mut leader, mut follower) = (-1, -1);
    // SAFETY: openpty writes two descriptors through valid pointers; the
    // name, termios and winsize pointers may be null.
    let opened = unsafe {
        libc::openpty(
            &mut leader,
            &mut follower,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: two descriptors openpty just returned, owned by nobody else.
    let (leader, follower) =
        unsafe { (OwnedFd::from_raw_fd(leader), OwnedFd::from_raw_fd(follower)) };
    // SAFETY: termios is plain data, filled by tcgetattr before it is used.
    let mut mode: libc::termios = unsafe { std::mem::zeroed() };
    use std::os::fd::AsRawFd as _;
    // SAFETY: a terminal descriptor of ours and a valid termios pointer.
    unsafe {
        assert_eq!(libc::tcgetattr(follower.as_raw_fd(), &mut mode), 0);
        libc::cfmakeraw(&mut mode);
        assert_eq!(
            libc::tcsetattr(follower.as_raw_fd(), libc::TCSANOW, &mode),
            0
        );
    }
    (leader, follower)
}

/// `sandboxctl args` with its stdout on a terminal: what it showed there,
/// and its exit code.
fn on_terminal(daemon: &TestDaemon, args: &[&str]) -> (Vec<u8>, Option<i32>) {
    let (leader, follower) = terminal();
    let mut command = Command::new(binaries::sandboxctl());
    command
        .args(args)
        .env(sandboxd_client::SOCKET_ENV, daemon.socket())
        .stdin(Stdio::null())
        .stdout(Stdio::from(follower))
        .stderr(Stdio::piped());
    let child = procs::spawn(&mut command).expect("run sandboxctl");
    drop(command); // the parent's copy of the follower: EOF comes with the child's end
    let reader = std::thread::spawn(move || {
        let mut leader = std::fs::File::from(leader);
        let mut shown = Vec::new();
        let mut buffer = [0; 4096];
        // EIO once no one holds the follower any more.
        while let Ok(read @ 1..) = leader.read(&mut buffer) {
            shown.extend_from_slice(&buffer[..read]);
        }
        shown
    });
    let output = finish(child);
    (reader.join().unwrap(), code(&output))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_bytes_are_escaped_on_a_terminal_unless_raw_and_pipes_get_them_exactly() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "x4").await;
    let hostile = r"printf 'a\033]0;owned\007b\rc\302\233d\r\n'";
    let exec = [
        "exec", "--tag", "hostile", "session", "x4", "sh", "-c", hostile,
    ];
    let (shown, code) = on_terminal(&daemon, &exec);
    assert_eq!(code, Some(0));
    assert_eq!(text(&shown), "a\\u{1b}]0;owned\\u{7}b\\rc\\u{9b}d\r\n");
    let (shown, _) = on_terminal(&daemon, &["attach", "session", "x4", "--tag", "hostile"]);
    assert_eq!(text(&shown), "a\\u{1b}]0;owned\\u{7}b\\rc\\u{9b}d\r\n");
    let exact = b"a\x1b]0;owned\x07b\rc\xc2\x9bd\r\n".to_vec();
    let (shown, _) = on_terminal(
        &daemon,
        &["attach", "--raw", "session", "x4", "--tag", "hostile"],
    );
    assert_eq!(shown, exact);
    let (shown, _) = on_terminal(
        &daemon,
        &["exec", "--raw", "session", "x4", "sh", "-c", hostile],
    );
    assert_eq!(shown, exact);
    // A pipe: the bytes as written.
    let piped = ctl(&daemon, &["exec", "session", "x4", "sh", "-c", hostile], 0);
    assert_eq!(piped.stdout, exact);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_command_feeds_stdin_collects_both_streams_and_settles_a_timeout() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "x9").await;
    let client = daemon.client().await;

    let fed = RunOptions {
        stdin: Some(b"abc".to_vec()),
        ..RunOptions::default()
    };
    let outcome = client
        .run_command(
            Scope::Session,
            "x9",
            argv(&["sh", "-c", "cat; echo e >&2; exit 4"]),
            fed,
        )
        .await
        .unwrap();
    assert_eq!(
        (outcome.outcome.as_str(), outcome.exit_code),
        ("exited", Some(4))
    );
    assert_eq!(
        (outcome.stdout, outcome.stderr),
        (b"abc".to_vec(), b"e\n".to_vec())
    );
    let timed = RunOptions {
        timeout: Some(Duration::from_millis(300)),
        ..RunOptions::default()
    };
    let outcome = client
        .run_command(Scope::Session, "x9", argv(&["sleep", "600"]), timed)
        .await
        .unwrap();
    assert_eq!(outcome.outcome, "timed-out");
    assert_eq!(outcome.reason, ExitReason::TimedOut { limit_ms: 300 });
}

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| arg.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_reports_what_was_dropped_and_starts_at_any_offset() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "[commands]\noutput_bytes = 1024".to_string(),
        ..Options::default()
    });
    sandboxd_tests::start_session(&daemon, "x7").await;
    let client = daemon.client().await;
    // More than the store keeps: the follower says how much it missed.
    let flood = ExecRequest {
        argv: argv(&["sh", "-c", "head -c 5000 /dev/zero; echo; echo tail"]),
        tag: Some("flood".into()),
        ..ExecRequest::default()
    };
    let handle = client
        .exec_handle(Scope::Session, "x7", &flood)
        .await
        .unwrap();
    handle.wait().await.unwrap();
    let attached = client
        .attach(Scope::Session, "x7", CommandRef::Tag("flood".into()))
        .await
        .unwrap();
    assert_eq!(
        (attached.command_id(), attached.pid()),
        (handle.command_id(), handle.pid())
    );
    let events: Vec<OutputEvent> = attached.stdout().map(Result::unwrap).collect().await;
    assert!(
        matches!(events[0], OutputEvent::Dropped { count, offset } if count == 3982 && offset == 3982),
        "{events:?}"
    );
    assert!(
        matches!(&events[1], OutputEvent::Bytes { data, .. } if data.ends_with(b"\ntail\n") && data.len() == 1024)
    );
    assert!(matches!(&events[2], OutputEvent::Ended(proof) if proof.stdout.dropped == 3982));
    // From an offset.
    let from: Vec<OutputEvent> = attached
        .follow(OutputStream::Stdout, 5002)
        .map(Result::unwrap)
        .collect()
        .await;
    assert!(
        matches!(&from[0], OutputEvent::Bytes { offset: 5002, data } if data == b"ail\n"),
        "{from:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_resizes_feeds_and_signals_its_command() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "x8").await;
    let client = daemon.client().await;
    // A terminal: resized, then fed; a signal ends another.
    let terminal = ExecRequest {
        argv: argv(&["sh", "-c", "read line; stty size; echo got:$line"]),
        pty: Some(PtySize { rows: 24, cols: 80 }),
        stdin: true,
        ..ExecRequest::default()
    };
    let handle = client
        .exec_handle(Scope::Session, "x8", &terminal)
        .await
        .unwrap();
    handle.resize(30, 100).await.unwrap();
    handle.write_stdin(b"typed\n").await.unwrap();
    let mut shown = Vec::new();
    let mut stdout = handle.stdout();
    while let Some(event) = stdout.next().await {
        match event.unwrap() {
            OutputEvent::Bytes { data, .. } => shown.extend_from_slice(&data),
            OutputEvent::Dropped { .. } => panic!("nothing was dropped"),
            OutputEvent::Ended(proof) => assert_eq!(proof.reason, ExitReason::Exited { code: 0 }),
        }
    }
    let shown = text(&shown);
    assert!(
        shown.contains("30 100\r\n") && shown.contains("got:typed"),
        "{shown:?}"
    );
    let sleeper = client
        .exec_handle(
            Scope::Session,
            "x8",
            &ExecRequest {
                argv: argv(&["sleep", "600"]),
                ..ExecRequest::default()
            },
        )
        .await
        .unwrap();
    sleeper.signal(libc::SIGTERM).await.unwrap();
    assert_eq!(
        sleeper.wait().await.unwrap().reason,
        ExitReason::Signaled {
            signal: libc::SIGTERM
        }
    );
}

/// A tmux server of this test's own, its socket in the test's directory
/// (`TMUX_TMPDIR`, not `/tmp/tmux-UID`), killed at the end.
struct Tmux {
    socket: String,
    dir: std::path::PathBuf,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .env("TMUX_TMPDIR", &self.dir)
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("run tmux");
        assert!(
            output.status.success(),
            "tmux {args:?}: {}",
            text(&output.stderr)
        );
        text(&output.stdout)
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "t"])
    }

    /// Waits until the pane shows a line for which `wanted` holds.
    #[track_caller]
    fn wait_for_line(&self, what: &str, wanted: impl Fn(&str) -> bool) {
        let mut screen = String::new();
        let shown = wait_until(WAIT, || {
            screen = self.screen();
            screen.lines().any(|line| wanted(line.trim_end()))
        });
        assert!(shown, "the pane never showed {what}:\n{screen}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .env("TMUX_TMPDIR", &self.dir)
            .args(["-L", &self.socket, "kill-server"])
            .output();
        // tmux leaves its socket file behind; the directory goes with the
        // test's, unless the test failed and keeps it.
        let uid = nix::unistd::geteuid();
        let _ = std::fs::remove_file(self.dir.join(format!("tmux-{uid}")).join(&self.socket));
    }
}

/// tmux, or why the test cannot run: absent tmux fails the test in CI
/// (`.ci/run` installs it) and skips it, said, elsewhere.
fn tmux_or_skip() -> bool {
    let present = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|out| out.status.success());
    if !present {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but tmux is not installed"
        );
        eprintln!("skipped: tmux is not installed (apt-get install -y tmux)");
    }
    present
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_it_is_a_real_terminal_driven_by_tmux() {
    if !tmux_or_skip() {
        return;
    }
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "x5").await;
    let tmux = Tmux {
        socket: format!("sandboxd-test-{}", std::process::id()),
        dir: daemon.dir().to_path_buf(),
    };
    // After sandboxctl: its code, and whether its terminal is cooked again.
    let inner = format!(
        "{}={} {} exec -it session x5 -- /bin/sh; echo \"sandboxctl exited $?\"; \
         stty -a | tr ' ;' '\\n\\n' | grep -x -- '-\\{{0,1\\}}icanon'; exec sleep 600",
        sandboxd_client::SOCKET_ENV,
        daemon.socket().display(),
        binaries::sandboxctl().display()
    );
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "80",
        "-y",
        "24",
        "sh",
        "-c",
        &inner,
    ]);
    // Keys typed before the shell prompts are echoed by the terminal and
    // then read after the prompt, so its output would follow the `$ ` on
    // the prompt's line: wait for the prompt first.
    tmux.wait_for_line("the shell's prompt", |line| line == "$");
    tmux.run(&["send-keys", "-t", "t", "echo h''i", "Enter"]);
    tmux.wait_for_line("hi", |line| line == "hi");
    tmux.run(&["send-keys", "-t", "t", "stty size", "Enter"]);
    tmux.wait_for_line("24 80", |line| line == "24 80");
    tmux.run(&["resize-window", "-t", "t", "-x", "100", "-y", "30"]);
    // The resize reaches the command by SIGWINCH and command_resize; ask
    // until it has.
    let mut screen = String::new();
    let resized = wait_until(WAIT, || {
        tmux.run(&["send-keys", "-t", "t", "clear; stty size", "Enter"]);
        wait_until(Duration::from_secs(2), || {
            screen = tmux.screen();
            screen.lines().any(|line| line.trim_end() == "30 100")
        })
    });
    assert!(resized, "stty size never said 30 100:\n{screen}");
    tmux.run(&["send-keys", "-t", "t", "C-d"]);
    tmux.wait_for_line("sandboxctl exited 0", |line| line == "sandboxctl exited 0");
    tmux.wait_for_line("icanon restored", |line| line == "icanon");
}
