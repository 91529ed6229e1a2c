//! A devpts of its own in every process-tier view (`[limits] ptys`): a
//! runner that opens pseudo-terminals until refused is refused at its own
//! `max`, while the host (this test process) still opens one and the
//! host's `/dev/pts` holds none of the sandbox's; `exec` terminals come
//! from the sandbox's devpts (a `/dev/pts/N` that exists there, counted
//! against its `max`); `sandboxctl exec -t` still works. Tried in a view
//! prepared ahead and in one built cold.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use sandboxd_client::{CommandRef, ExecRequest, ExitReason, OutputStream, PtySize, SandboxdClient};
use sandboxd_protocol::{IsolationFeature, Scope};
use sandboxd_tests::commands::{proof_of, read_all, read_text_until, request};
use sandboxd_tests::{Options, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);
/// `[limits] ptys` of these tests.
const MAX: usize = 12;

/// Opens ptys until refused, prints how many it holds and the errno, and
/// holds them until the file `release` appears in its directory.
const TAKE_EVERY_PTY: &str = r#"
import os, time
held = []
try:
    while len(held) < 100000:
        held.append(os.openpty())
except OSError as error:
    print(len(held), error.errno, flush=True)
while not os.path.exists("release"):
    time.sleep(0.02)
"#;

fn daemon(pool: usize) -> TestDaemon {
    TestDaemon::start(Options {
        extra_toml: format!(
            "[limits]\nptys = {MAX}\n[pool]\nsession = {pool}\nworkflow = 0\nconnect = 0\n"
        ),
        ..Options::default()
    })
}

async fn feature(daemon: &TestDaemon, name: &str) -> IsolationFeature {
    let status = daemon.client().await.status().await.unwrap();
    status
        .isolation
        .into_iter()
        .find(|feature| feature.name == name)
        .unwrap_or_else(|| panic!("status lists no {name}"))
}

/// Waits until the session pool holds a view.
async fn wait_for_a_prepared_view(daemon: &TestDaemon) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let pool = feature(daemon, "prepared-views").await;
        if pool.in_force && pool.detail.starts_with("session: 1 of") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pool never held a view: {pool:?}\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The ptys the host's `/dev/pts` holds now.
fn host_ptys() -> usize {
    std::fs::read_dir("/dev/pts")
        .unwrap()
        .flatten()
        .filter(|entry| entry.file_name() != "ptmx")
        .count()
}

/// Whether this process, on the host, can open a pty.
fn host_can_open_a_pty() -> std::io::Result<()> {
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
    if opened != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: two descriptors openpty just returned, owned by nobody else.
    drop(unsafe { (OwnedFd::from_raw_fd(leader), OwnedFd::from_raw_fd(follower)) });
    Ok(())
}

/// `sh -c script` on a terminal.
fn on_terminal(script: &str) -> ExecRequest {
    ExecRequest {
        pty: Some(PtySize { rows: 24, cols: 80 }),
        ..request(&["sh", "-c", script])
    }
}

/// The first line `command` prints, waited for.
async fn first_line(client: &SandboxdClient, id: &str, command: &CommandRef) -> String {
    let (text, _) = read_text_until(client, id, command, 0, "\n", WAIT).await;
    text.lines().next().unwrap_or_default().to_string()
}

/// What a terminal command inside says of its terminal: `tty`, whether
/// that name exists there, and the device of its `/dev/pts`.
async fn terminal_inside(client: &SandboxdClient, id: &str) -> (String, bool, u64) {
    let script = "tty; test -c \"$(tty)\" && echo exists; stat -c dev=%d /dev/pts";
    let started = client
        .exec(Scope::Session, id, &on_terminal(script))
        .await
        .unwrap();
    let command = CommandRef::Id(started.command_id);
    let (shown, proof) = read_all(client, id, &command, OutputStream::Stdout, WAIT).await;
    let shown = String::from_utf8_lossy(&shown).replace('\r', "");
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 }, "{shown}");
    let name = shown.lines().next().unwrap_or_default().to_string();
    let device = shown
        .lines()
        .find_map(|line| line.strip_prefix("dev="))
        .and_then(|device| device.parse().ok())
        .unwrap_or_else(|| panic!("no dev= in {shown:?}"));
    (name, shown.lines().any(|line| line == "exists"), device)
}

/// The attack and the checks, in the running sandbox `id`.
async fn a_sandbox_takes_every_pty_it_can(daemon: &TestDaemon, id: &str) {
    let client = daemon.client().await;
    let host_device = std::fs::metadata("/dev/pts").unwrap().dev();
    let before = host_ptys();
    let started = client
        .exec(
            Scope::Session,
            id,
            &request(&["python3", "-c", TAKE_EVERY_PTY]),
        )
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    let taker = CommandRef::Id(started.command_id);
    let line = first_line(&client, id, &taker).await;
    // Refused with ENOSPC at its own max, not the host's.
    assert_eq!(line, format!("{MAX} {}", libc::ENOSPC), "held, errno");
    host_can_open_a_pty().expect("the host's openpty, while a sandbox holds all it may");
    let during = host_ptys();
    assert!(
        during < before + MAX,
        "the host's /dev/pts went from {before} to {during}: the sandbox's ptys are there"
    );
    // A terminal for a command counts against the same max.
    let refused = client
        .exec(Scope::Session, id, &on_terminal("tty"))
        .await
        .expect_err("a terminal past the sandbox's max");
    let refused = refused.to_string();
    assert!(refused.contains("[limits] ptys"), "{refused}");
    std::fs::write(daemon.workspace(Scope::Session, id).join("release"), "").unwrap();
    let proof = proof_of(&client, id, &taker, WAIT).await;
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 });

    // Released: a terminal again, a name of the sandbox's own devpts.
    let (name, exists, device) = terminal_inside(&client, id).await;
    assert!(
        name.strip_prefix("/dev/pts/")
            .is_some_and(|n| n.parse::<u32>().is_ok()),
        "tty said {name:?}"
    );
    assert!(exists, "{name} does not exist in the sandbox's view");
    assert_ne!(device, host_device, "the sandbox's /dev/pts is the host's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_in_a_prepared_view_is_refused_at_its_own_max_and_the_host_keeps_its_ptys() {
    let daemon = daemon(1);
    let ptys = feature(&daemon, "private-ptys").await;
    assert!(
        ptys.in_force && ptys.detail.contains(&format!("at most {MAX} ptys")),
        "{ptys:?}"
    );
    wait_for_a_prepared_view(&daemon).await;
    sandboxd_tests::start_session(&daemon, "p1").await;
    let pool = feature(&daemon, "prepared-views").await;
    assert!(pool.detail.contains("1 taken"), "{pool:?}");
    a_sandbox_takes_every_pty_it_can(&daemon, "p1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_started_cold_is_refused_at_its_own_max_and_sandboxctl_exec_t_works() {
    let daemon = daemon(0);
    sandboxd_tests::start_session(&daemon, "c1").await;
    a_sandbox_takes_every_pty_it_can(&daemon, "c1").await;
    let output = daemon.sandboxctl(&[
        "exec",
        "-t",
        "session",
        "c1",
        "--",
        "sh",
        "-c",
        "tty; test -c \"$(tty)\" && echo exists",
    ]);
    let shown = String::from_utf8_lossy(&output.stdout).replace('\r', "");
    assert!(
        output.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = shown.lines();
    assert!(
        lines
            .next()
            .is_some_and(|line| line.starts_with("/dev/pts/")),
        "{shown:?}"
    );
    assert_eq!(lines.next(), Some("exists"), "{shown:?}");
}
