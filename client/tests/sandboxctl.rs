//! `sandboxctl` as an operator runs it: the real binary against the
//! in-process stand-in daemon, checking output and exit codes.

mod fake_daemon;

use std::path::Path;
use std::process::Output;

use fake_daemon::{behaviour, socket_path, start};

const TOKEN: &str = "tok-5ecret-value";

async fn sandboxctl(socket: &Path, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_sandboxctl"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .env("SANDBOXCTL_TEST_TOKEN", TOKEN)
        .env_remove("SANDBOXCTL_TEST_UNSET")
        .output()
        .await
        .expect("run sandboxctl")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn human_and_json_output() {
    let path = socket_path();
    let behaviour = behaviour();
    let instance = start(&path, &behaviour);

    let status = sandboxctl(&path, &["status"]).await;
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    assert!(
        stdout(&status).contains("driver:    stand-in (ok)\n"),
        "{}",
        stdout(&status)
    );
    assert!(
        stdout(&status).contains("egress:    strict (stand-in rules)\n"),
        "{}",
        stdout(&status)
    );

    let list = sandboxctl(&path, &["--json", "list", "--scope", "session"]).await;
    assert_eq!(list.status.code(), Some(0));
    assert_eq!(stdout(&list), "[]\n");

    let workspaces = sandboxctl(&path, &["workspaces"]).await;
    assert_eq!(workspaces.status.code(), Some(0), "{}", stderr(&workspaces));
    let text = stdout(&workspaces);
    assert!(text.starts_with("SCOPE "), "{text}");
    let wide = sandboxctl(&path, &["workspaces", "-o", "wide"]).await;
    assert!(stdout(&wide).starts_with("NAME "), "{}", stdout(&wide));
    assert!(
        text.contains(" kept ") && text.contains("2.0 KiB"),
        "{text}"
    );
    let workspaces = sandboxctl(&path, &["--json", "workspaces", "--scope", "workflow"]).await;
    assert_eq!(stdout(&workspaces), "[]\n");

    let probe = sandboxctl(&path, &["probe", "session", "abc"]).await;
    assert_eq!(stdout(&probe), "stopped\n");
    let probe = sandboxctl(&path, &["probe", "workflow", "wf", "--json"]).await;
    let probe: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();
    assert_eq!(
        probe,
        serde_json::json!({"scope": "workflow", "id": "wf", "state": "stopped"})
    );

    let describe = sandboxctl(&path, &["describe", "session", "abc"]).await;
    let text = stdout(&describe);
    assert!(
        text.contains("started:      2024-05-01T12:34:56Z ("),
        "{text}"
    );
    assert!(
        text.contains("last exit:    code 3 at 2024-05-01T12:34:55Z"),
        "{text}"
    );
    let describe = sandboxctl(&path, &["--json", "describe", "session", "abc"]).await;
    let info: sandboxd_client::SandboxInfo = serde_json::from_slice(&describe.stdout).unwrap();
    assert_eq!(info.generation, 2);

    instance.stop().await;
}

#[tokio::test]
async fn ensure_passes_the_token_from_the_environment_and_never_prints_it() {
    let path = socket_path();
    let behaviour = behaviour();
    let instance = start(&path, &behaviour);

    let ensure = sandboxctl(
        &path,
        &[
            "ensure",
            "session",
            "abc",
            "--task-queue",
            "session:abc",
            "--token-env",
            "SANDBOXCTL_TEST_TOKEN",
        ],
    )
    .await;
    assert_eq!(ensure.status.code(), Some(0), "{}", stderr(&ensure));
    assert_eq!(
        stdout(&ensure),
        "session abc: running (created, generation 1, pid 100)\n"
    );
    assert_eq!(*behaviour.last_token.lock().unwrap(), TOKEN);

    let ensure = sandboxctl(
        &path,
        &[
            "--json",
            "ensure",
            "workflow",
            "wf",
            "--task-queue",
            "wfexec:wf",
        ],
    )
    .await;
    let report: sandboxd_client::EnsureReport = serde_json::from_slice(&ensure.stdout).unwrap();
    assert!(!report.created);
    assert_eq!(
        *behaviour.last_token.lock().unwrap(),
        "",
        "no --token-env, no token"
    );

    let create = sandboxctl(
        &path,
        &[
            "connect",
            "create",
            "r1",
            "--task-queue",
            "q",
            "--token-env",
            "SANDBOXCTL_TEST_TOKEN",
        ],
    )
    .await;
    assert_eq!(stdout(&create), "connect-r1\n");
    for output in [&ensure, &create] {
        assert!(!stdout(output).contains(TOKEN) && !stderr(output).contains(TOKEN));
    }
    instance.stop().await;
}

#[tokio::test]
async fn exit_codes() {
    let path = socket_path();
    let behaviour = behaviour();
    let instance = start(&path, &behaviour);

    // A call error: 1, prefixed message on stderr.
    let failed = sandboxctl(&path, &["connect", "deprovision", "x"]).await;
    assert_eq!(failed.status.code(), Some(1));
    assert_eq!(stderr(&failed), "sandboxctl: unavailable: engine down\n");

    // Usage errors: 2, and nothing is sent.
    let unset = sandboxctl(
        &path,
        &[
            "ensure",
            "session",
            "a",
            "--task-queue",
            "q",
            "--token-env",
            "SANDBOXCTL_TEST_UNSET",
        ],
    )
    .await;
    assert_eq!(unset.status.code(), Some(2));
    assert!(stderr(&unset).contains("SANDBOXCTL_TEST_UNSET is not set"));
    let connect = sandboxctl(&path, &["ensure", "connect", "a", "--task-queue", "q"]).await;
    assert_eq!(connect.status.code(), Some(2));
    assert!(stderr(&connect).contains("connect create"));
    let unknown = sandboxctl(&path, &["frobnicate"]).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert_eq!(
        behaviour.ensures.load(std::sync::atomic::Ordering::SeqCst),
        0
    );

    instance.stop().await;

    // No daemon: 1, naming the socket.
    let down = sandboxctl(&path, &["status"]).await;
    assert_eq!(down.status.code(), Some(1));
    assert_eq!(
        stderr(&down),
        format!("sandboxctl: daemon not running at {}\n", path.display())
    );
}

#[tokio::test]
async fn logs_follow_the_cursor_to_the_end_and_pass_bytes_through() {
    let path = socket_path();
    let instance = start(&path, &behaviour());

    // Three calls, one line each: the command follows `next` until `at_end`.
    // Into a pipe the bytes are unchanged, escape sequences included.
    let all = sandboxctl(&path, &["logs", "session", "abc"]).await;
    assert_eq!(all.status.code(), Some(0), "{}", stderr(&all));
    assert_eq!(stdout(&all), fake_daemon::LOG_LINES.concat());

    let tail = sandboxctl(&path, &["logs", "session", "abc", "--tail", "1"]).await;
    assert_eq!(stdout(&tail), "third\n");

    let json = sandboxctl(&path, &["logs", "workflow", "wf", "--json"]).await;
    let chunks: Vec<serde_json::Value> = stdout(&json)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(chunks.len(), 3, "{}", stdout(&json));
    assert_eq!(
        chunks[0],
        serde_json::json!({"data": "first line\n", "gap": false})
    );

    let gone = sandboxctl(&path, &["logs", "session", "gone", "--follow"]).await;
    assert_eq!(gone.status.code(), Some(1));
    assert_eq!(
        stderr(&gone),
        "sandboxctl: failed precondition: session 'gone' has no output to show\n"
    );

    instance.stop().await;
}

#[tokio::test]
async fn egress_check_judges_offline_and_exits_like_diff() {
    // No daemon at all, and a socket path nothing listens on.
    let nowhere = std::env::temp_dir().join("sandboxctl-egress-check-no-daemon.sock");

    let allowed = sandboxctl(&nowhere, &["egress", "check", "10.0.0.1", "::1"]).await;
    assert_eq!(allowed.status.code(), Some(0), "{}", stderr(&allowed));
    assert_eq!(
        stdout(&allowed),
        "posture: relaxed\nADDRESS   VERDICT  REASON\n10.0.0.1  allowed  -\n::1       allowed  -\n"
    );

    let strict = sandboxctl(
        &nowhere,
        &[
            "egress",
            "check",
            "--posture",
            "strict",
            "104.16.0.1",
            "[::ffff:127.0.0.1]",
            "fe80::1%eth0",
            "example.com",
        ],
    )
    .await;
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));
    assert_eq!(stderr(&strict), "");
    let text = stdout(&strict);
    assert!(text.contains("104.16.0.1          allowed  -\n"), "{text}");
    assert!(
        text.contains("[::ffff:127.0.0.1]  refused  loopback\n"),
        "{text}"
    );
    assert!(
        text.contains("fe80::1%eth0        refused  link-local (cloud metadata)\n"),
        "{text}"
    );
    assert!(
        text.contains("example.com         refused  unrecognized\n"),
        "{text}"
    );

    let json = sandboxctl(
        &nowhere,
        &[
            "--json",
            "egress",
            "check",
            "--posture",
            "strict",
            "0.0.0.0",
            "2606:4700::1",
        ],
    )
    .await;
    assert_eq!(json.status.code(), Some(1));
    let answer: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({
            "posture": "strict",
            "verdicts": [
                {"address": "0.0.0.0", "allowed": false, "reason": "unspecified"},
                {"address": "2606:4700::1", "allowed": true, "reason": null},
            ]
        })
    );

    let usage = sandboxctl(&nowhere, &["egress", "check", "--posture", "lax", "::1"]).await;
    assert_eq!(usage.status.code(), Some(2));
    assert!(
        stderr(&usage).contains("relaxed, strict"),
        "{}",
        stderr(&usage)
    );
    let empty = sandboxctl(&nowhere, &["egress", "check"]).await;
    assert_eq!(empty.status.code(), Some(2));
}

#[tokio::test]
async fn a_down_daemon_is_unreachable_to_status_check_and_a_file_is_not_a_socket() {
    let missing =
        std::env::temp_dir().join(format!("sandboxctl-absent-{}.sock", std::process::id()));
    let check = sandboxctl(&missing, &["status", "--check"]).await;
    assert_eq!(check.status.code(), Some(4), "{}", stderr(&check));
    assert_eq!(
        stdout(&check),
        format!("unreachable: daemon not running at {}\n", missing.display())
    );

    let passwd = sandboxctl(Path::new("/etc/passwd"), &["status"]).await;
    assert_eq!(passwd.status.code(), Some(1));
    assert!(
        stderr(&passwd).contains("/etc/passwd: not a socket (a regular file)"),
        "{}",
        stderr(&passwd)
    );
}

#[tokio::test]
async fn version_prints_the_clients_version_even_with_no_socket_path() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandboxctl"))
        .arg("version")
        .env_remove("SANDBOXD_SOCKET")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .await
        .expect("run sandboxctl");
    // As root the system path is the default; as anyone else, with no
    // runtime directory and no system socket, no path is known at all:
    // either way the client's own version is printed and the run succeeds.
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).starts_with(&format!(
            "client: version {}, protocol {}\n",
            env!("CARGO_PKG_VERSION"),
            sandboxd_client::PROTOCOL_VERSION
        )),
        "{}",
        stdout(&output)
    );
}
