//! Honest answers from `sandboxctl` and the daemon: an ensure that changes
//! nothing says what it did not change, `status` gives a health verdict
//! scripts can check by exit code, `logs` tells "no such sandbox" from "no
//! output yet" and a follow ends when its sandbox goes, look-alike ids are
//! shown escaped, and the CLI's errors use the CLI's words.

use std::io::Read;
use std::process::Output;
use std::time::Duration;

use sandboxd_client::Scope;
use sandboxd_tests::{wait_for_runner, wait_until, Options, TestDaemon, RUNNER_TIMEOUT};

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
fn ok(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(output));
    stdout(output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensure_that_changes_nothing_says_which_fields_differ_and_is_logged_once() {
    let daemon = TestDaemon::start(Options::default());
    let first = ok(&daemon.sandboxctl_with_env(
        &[
            "ensure",
            "session",
            "s1",
            "--task-queue",
            "session:s1",
            "--token-env",
            "TOK",
        ],
        &[("TOK", "first-token")],
    ));
    assert!(first.contains("created"), "{first}");
    // The same request again: the fast path, and nothing to say.
    let same = ok(&daemon.sandboxctl_with_env(
        &[
            "ensure",
            "session",
            "s1",
            "--task-queue",
            "session:s1",
            "--token-env",
            "TOK",
        ],
        &[("TOK", "first-token")],
    ));
    assert!(same.contains("already running"), "{same}");
    assert!(!same.contains("note:"), "{same}");

    let other = [
        "ensure",
        "session",
        "s1",
        "--task-queue",
        "session:other",
        "--caller-class",
        "machine",
        "--token-env",
        "TOK",
    ];
    let text = ok(&daemon.sandboxctl_with_env(&other, &[("TOK", "second-token")]));
    assert!(
        text.contains("keeps running with its own task_queue, caller_class, token"),
        "{text}"
    );
    let mut json_args = vec!["--json"];
    json_args.extend(other);
    let json: serde_json::Value = serde_json::from_str(&ok(
        &daemon.sandboxctl_with_env(&json_args, &[("TOK", "second-token")])
    ))
    .unwrap();
    assert_eq!(
        json["differs"],
        serde_json::json!(["task_queue", "caller_class", "token"])
    );
    assert_eq!(json["created"], false);
    // Side-effect free: still the first runner, with the first queue.
    let describe: serde_json::Value = serde_json::from_str(&ok(
        &daemon.sandboxctl(&["--json", "describe", "session", "s1"])
    ))
    .unwrap();
    assert_eq!(describe["task_queue"], "session:s1");
    assert_eq!(describe["generation"], 1);
    assert!(!daemon.log_text().contains("second-token"));
    let logged = daemon
        .log_text()
        .lines()
        .filter(|line| line.contains("sandbox already running with other settings"))
        .count();
    assert_eq!(
        logged,
        1,
        "logged once for two such ensures:\n{}",
        daemon.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_gives_a_health_verdict_that_check_turns_into_an_exit_code() {
    let healthy = TestDaemon::start(Options::default());
    let text = ok(&healthy.sandboxctl(&["status"]));
    assert!(text.contains("health:    healthy\n"), "{text}");
    assert_eq!(ok(&healthy.sandboxctl(&["status", "--check"])), "healthy\n");
    drop(healthy);

    let missing = TestDaemon::start(Options {
        runner_command: Some("/nonexistent/stigmer-runner".into()),
        ..Options::default()
    });
    let output = missing.sandboxctl(&["status"]);
    let text = ok(&output);
    assert!(text.contains("health:    unhealthy: "), "{text}");
    assert!(text.contains("/nonexistent/stigmer-runner"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&missing.sandboxctl(&["--json", "status"]))).unwrap();
    assert_eq!(json["health"]["verdict"], "unhealthy");
    assert!(json["health"]["reasons"][0]
        .as_str()
        .unwrap()
        .contains("/nonexistent/stigmer-runner"));
    let check = missing.sandboxctl(&["status", "--check"]);
    assert_eq!(check.status.code(), Some(4), "{}", stderr(&check));
    assert!(
        stdout(&check).starts_with("unhealthy\n"),
        "{}",
        stdout(&check)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_an_unknown_id_say_no_such_sandbox_and_a_follow_ends_at_deprovision() {
    let daemon = TestDaemon::start(Options::with_runner_args(&["--print-lines", "3"]));
    let unknown = daemon.sandboxctl(&["logs", "session", "never-was"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("no such sandbox"),
        "{}",
        stderr(&unknown)
    );
    assert!(!stderr(&unknown).contains("has not run since"));

    ok(&daemon.sandboxctl(&["ensure", "session", "f1", "--task-queue", "session:f1"]));
    let pid = daemon
        .client()
        .await
        .describe(Scope::Session, "f1")
        .await
        .unwrap()
        .pid
        .unwrap();
    wait_for_runner(&daemon.workspace(Scope::Session, "f1"), pid);
    let mut follower = daemon.spawn_sandboxctl(&["logs", "session", "f1", "--follow"]);
    let log = daemon.runner_log(Scope::Session, "f1");
    assert!(wait_until(RUNNER_TIMEOUT, || std::fs::metadata(&log)
        .is_ok_and(|meta| meta.len() > 0)));
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        follower.try_wait().unwrap().is_none(),
        "--follow ended early"
    );
    ok(&daemon.sandboxctl(&["deprovision", "session", "f1"]));
    let mut status = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            status = follower.try_wait().unwrap();
            status.is_some()
        }),
        "the follower must end once its sandbox is deprovisioned"
    );
    let mut errors = String::new();
    follower
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut errors)
        .unwrap();
    assert_eq!(status.unwrap().code(), Some(0), "{errors}");
    // The follower names how the generation it followed ended, after its
    // last bytes (here the deprovision stopped the runner, which
    // exited 0 on SIGTERM).
    assert!(
        errors.contains("generation 1: the runner exited")
            && errors.contains("its output ends here"),
        "{errors}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn look_alike_ids_are_accepted_and_shown_escaped() {
    let daemon = TestDaemon::start(Options::default());
    let hostile = "ab\u{202e}cd\u{200b}\u{feff}";
    ok(&daemon.sandboxctl(&["ensure", "session", hostile, "--task-queue", "session:x"]));
    ok(&daemon.sandboxctl(&["ensure", "session", "abcd", "--task-queue", "session:y"]));
    let list = ok(&daemon.sandboxctl(&["list"]));
    assert!(list.contains("ab\\u{202e}cd\\u{200b}\\u{feff}"), "{list}");
    assert!(
        !list.contains('\u{202e}') && !list.contains('\u{feff}'),
        "{list}"
    );
    let describe = ok(&daemon.sandboxctl(&["describe", "session", hostile]));
    assert!(describe.contains("ab\\u{202e}cd"), "{describe}");
    // Machine output keeps the id exactly.
    let json: serde_json::Value = serde_json::from_str(&ok(
        &daemon.sandboxctl(&["--json", "describe", "session", hostile])
    ))
    .unwrap();
    assert_eq!(json["id"], hostile);
    let log = daemon.log_text();
    assert!(
        !log.contains('\u{202e}'),
        "the daemon's log holds the raw id:\n{log}"
    );
    assert!(log.contains("ab\\u{202e}cd"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_names_its_own_arguments_in_its_errors() {
    let daemon = TestDaemon::start(Options::default());
    let output = daemon.sandboxctl(&["probe", "session", ""]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("SESSION_ID"),
        "{}",
        stderr(&output)
    );
    let output = daemon.sandboxctl(&["describe", "workflow", "a/b"]);
    assert!(
        stderr(&output).contains("EXECUTION_ID"),
        "{}",
        stderr(&output)
    );
    let output = daemon.sandboxctl(&["ensure", "session", "a", "--task-queue", ""]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("--task-queue"),
        "{}",
        stderr(&output)
    );
    assert!(daemon.workspaces().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_on_the_docker_tier_is_unhealthy_when_the_runner_image_is_absent() {
    let test = "status_on_the_docker_tier_is_unhealthy_when_the_runner_image_is_absent";
    if !sandboxd_tests::docker_image::engine_ready(test) {
        return;
    }
    let daemon = TestDaemon::start(Options {
        args: vec!["--driver".into(), "docker".into()],
        extra_toml: "runner_image = \"sandboxd-test-no-such-image:absent\"\n".into(),
        ..Options::default()
    });
    let check = daemon.sandboxctl(&["status", "--check"]);
    assert_eq!(check.status.code(), Some(4), "{}", stdout(&check));
    assert!(
        stdout(&check).contains("sandboxd-test-no-such-image:absent is not on the engine"),
        "{}",
        stdout(&check)
    );
    let healthy = TestDaemon::start(sandboxd_tests::docker_image::docker_options(""));
    assert_eq!(ok(&healthy.sandboxctl(&["status", "--check"])), "healthy\n");
}
