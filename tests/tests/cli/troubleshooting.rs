//! What docs/troubleshooting.md says a program meets inside a process-tier
//! sandbox (`isolation = "full"`), tried for real: the error text of each
//! case and where `describe` shows it.

use std::time::Duration;

use sandboxd_client::{CommandRef, ExitReason, OutputStream, Scope};
use sandboxd_tests::commands::shell;
use sandboxd_tests::{make_test_dir, Options, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);

/// How `script` ended in session `id`'s sandbox, and its stdout and stderr.
async fn run(daemon: &TestDaemon, id: &str, script: &str) -> (ExitReason, String, String) {
    let client = daemon.client().await;
    let started = client
        .exec(Scope::Session, id, &shell(script))
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    let command = CommandRef::Id(started.command_id);
    let read = |stream| sandboxd_tests::commands::read_all(&client, id, &command, stream, WAIT);
    let (stdout, proof) = read(OutputStream::Stdout).await;
    let (stderr, _) = read(OutputStream::Stderr).await;
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (proof.reason, text(stdout), text(stderr))
}

/// Asserts `script` failed with `message` on its stderr.
async fn fails_with(daemon: &TestDaemon, id: &str, script: &str, message: &str) {
    let (reason, out, err) = run(daemon, id, script).await;
    assert_ne!(reason, ExitReason::Exited { code: 0 }, "{script}: {out}");
    assert!(
        err.contains(message),
        "{script}: wanted {message:?}, got {err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_error_of_the_troubleshooting_page_is_what_a_sandbox_meets() {
    let scratch = make_test_dir();
    std::fs::write(scratch.join("on-the-host"), "x").unwrap();
    let daemon = TestDaemon::start(Options {
        extra_toml: "[limits]\nmemory = \"64m\"\npids = 64\n[view]\ntmp_size = \"8m\"\n"
            .to_string(),
        ..Options::default()
    });
    sandboxd_tests::start_session(&daemon, "one").await;
    sandboxd_tests::start_session(&daemon, "two").await;
    let on_host = scratch.join("on-the-host");
    // The host's /tmp is not the sandbox's; /root and the state dir are hidden.
    let missing = "No such file or directory";
    fails_with(
        &daemon,
        "one",
        &format!("cat {}", on_host.display()),
        missing,
    )
    .await;
    let in_root = std::fs::read_dir("/root")
        .ok()
        .and_then(|mut dir| dir.next());
    if let Some(Ok(entry)) = in_root {
        let script = format!("ls {}", entry.path().display());
        fails_with(&daemon, "one", &script, missing).await;
    }
    // Another sandbox's workspace, by its host path: out of sight, not refused.
    let other = daemon.workspace(Scope::Session, "two");
    fails_with(&daemon, "one", &format!("ls {}", other.display()), missing).await;
    fails_with(
        &daemon,
        "one",
        "touch /usr/sandboxd-probe",
        "Read-only file system",
    )
    .await;
    fails_with(&daemon, "one", "unshare -U true", "Operation not permitted").await;
    // The private tmpfs is full at `[view] tmp_size`, before the memory limit.
    let fill = "dd if=/dev/zero of=/tmp/fill bs=1M count=16";
    fails_with(&daemon, "one", fill, "No space left on device").await;
    // bwrap blames the kernel's settings: it is the filter.
    if std::path::Path::new("/usr/bin/bwrap").exists() {
        let bwrap = "bwrap --ro-bind / / true";
        fails_with(
            &daemon,
            "one",
            bwrap,
            "No permissions to create new namespace",
        )
        .await;
    }
    // Which call it was: strace, where the host has it, may trace the
    // sandbox's own processes (the filter does not refuse ptrace).
    if std::path::Path::new("/usr/bin/strace").exists() {
        let traced = "strace -f -e trace=unshare unshare -U true";
        // Only unshare is traced: the line is its own, padded by strace.
        fails_with(
            &daemon,
            "one",
            traced,
            "= -1 EPERM (Operation not permitted)",
        )
        .await;
    } else {
        eprintln!("no /usr/bin/strace on this host: the strace line is not tried");
    }

    // The pids limit: a fork past it fails with EAGAIN, counted by describe.
    let forks = "import os, time\n\
                 n = 0\n\
                 try:\n    \
                     while True:\n        \
                         if os.fork() == 0:\n            \
                             time.sleep(20); os._exit(0)\n        \
                         n += 1\n\
                 except OSError as error:\n    \
                     print(error)\n";
    let (_, out, err) = run(&daemon, "one", &format!("python3 -c '{forks}'")).await;
    assert!(
        out.contains("Resource temporarily unavailable"),
        "{out} {err}"
    );
    let client = daemon.client().await;
    let usage = |info: sandboxd_client::SandboxInfo| info.usage.expect("figures of a running one");
    let figures = usage(client.describe(Scope::Session, "one").await.unwrap());
    assert!(figures.forks_refused.unwrap_or(0) >= 1, "{figures:?}");

    // Past the memory limit: the OOM killer ends the biggest process.
    let hog = "exec python3 -c 'b = bytearray(512 << 20)'";
    let (reason, _, err) = run(&daemon, "two", hog).await;
    assert_eq!(
        reason,
        ExitReason::OutOfMemory {
            limit_bytes: Some(64 << 20)
        },
        "{err}"
    );
    let figures = usage(client.describe(Scope::Session, "two").await.unwrap());
    assert!(figures.oom_kills.unwrap_or(0) >= 1, "{figures:?}");
    let text = String::from_utf8_lossy(&daemon.sandboxctl(&["describe", "session", "two"]).stdout)
        .into_owned();
    let kills = text
        .lines()
        .find_map(|line| line.strip_prefix("oom kills:"));
    assert_eq!(kills.map(str::trim), Some("1"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_view_another_sandboxs_workspace_is_refused_not_hidden() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "isolation = \"uid-cgroup\"\n".to_string(),
        ..Options::default()
    });
    sandboxd_tests::start_session(&daemon, "one").await;
    sandboxd_tests::start_session(&daemon, "two").await;
    let other = daemon.workspace(Scope::Session, "two");
    let script = format!("ls {}", other.display());
    fails_with(&daemon, "one", &script, "Permission denied").await;
}
