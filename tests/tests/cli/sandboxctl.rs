//! `sandboxctl` against the real daemon: exit codes (0 ok, 1 the call
//! failed, 2 usage) and its `--json` output.

use std::process::Output;

use sandboxd_client::Scope;
use sandboxd_tests::{
    pid_is_gone, run_with_timeout, wait_for_runner, wait_until, Options, TestDaemon,
};
use serde_json::Value;

fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
fn json(output: &Output) -> Value {
    assert_eq!(code(output), Some(0), "stderr: {}", stderr(output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "not JSON ({error}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_tell_usage_from_call_failures() {
    let daemon = TestDaemon::start(Options::default());
    // Usage errors: 2, whether or not the daemon could be reached.
    for args in [
        &[][..],
        &["frobnicate"],
        &["probe", "sessions", "x"],
        &["probe", "session"],
        &["ensure", "session", "a"],
        &["ensure", "connect", "r", "--task-queue", "q"],
        &["list", "--scope", "pods"],
        &[
            "ensure",
            "session",
            "a",
            "--task-queue",
            "q",
            "--token-env",
            "SBX_SURELY_UNSET_VARIABLE",
        ],
        &["--socket"],
    ] {
        let output = daemon.sandboxctl(args);
        assert_eq!(
            code(&output),
            Some(2),
            "{args:?}: stderr {}",
            stderr(&output)
        );
        assert!(output.stdout.is_empty(), "{args:?}");
    }
    assert!(
        daemon.leftover_processes().is_empty(),
        "a usage error started something"
    );
    let help = daemon.sandboxctl(&["--help"]);
    assert_eq!(code(&help), Some(0));

    // Call failures: 1, with the reason on stderr.
    let nowhere = daemon.dir().join("nowhere.sock").display().to_string();
    let output = daemon.sandboxctl(&["--socket", &nowhere, "status"]);
    assert_eq!(code(&output), Some(1));
    assert!(
        stderr(&output).contains("not running") && stderr(&output).contains(&nowhere),
        "{}",
        stderr(&output)
    );
    let output = daemon.sandboxctl(&[
        "ensure",
        "session",
        "a",
        "--task-queue",
        "q",
        "--caller-class",
        "Not Valid",
    ]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("invalid argument") && stderr(&output).contains("caller_class"),
        "{}",
        stderr(&output)
    );
    let output = daemon.sandboxctl(&["probe", "session", ""]);
    assert_eq!(code(&output), Some(1), "{}", stderr(&output));

    // A create of a connect request that exists: 1, failed precondition.
    let first = daemon.sandboxctl(&["connect", "create", "req-1", "--task-queue", "mcp:req-1"]);
    assert_eq!(code(&first), Some(0), "{}", stderr(&first));
    let sandbox_id = String::from_utf8_lossy(&first.stdout).trim().to_string();
    assert!(!sandbox_id.is_empty());
    let second = daemon.sandboxctl(&["connect", "create", "req-1", "--task-queue", "mcp:req-1"]);
    assert_eq!(code(&second), Some(1));
    assert!(
        stderr(&second).contains("failed precondition"),
        "{}",
        stderr(&second)
    );
    assert_eq!(
        code(&daemon.sandboxctl(&["connect", "deprovision", &sandbox_id])),
        Some(0)
    );
    assert_eq!(
        code(&daemon.sandboxctl(&["connect", "deprovision", &sandbox_id])),
        Some(0),
        "idempotent"
    );

    // The explicit --socket flag works as well as the environment.
    let socket = daemon.socket().display().to_string();
    let mut command = std::process::Command::new(sandboxd_tests::binaries::sandboxctl());
    command
        .args(["--socket", &socket, "status"])
        .env_remove("SANDBOXD_SOCKET");
    assert_eq!(
        code(&run_with_timeout(
            command,
            std::time::Duration::from_secs(60)
        )),
        Some(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_of_every_command() {
    let daemon = TestDaemon::start(Options::default());

    let ensured = json(&daemon.sandboxctl(&[
        "ensure",
        "session",
        "cli-1",
        "--task-queue",
        "session:cli-1",
        "--json",
    ]));
    assert_eq!(ensured["state"], "running");
    assert_eq!(ensured["created"], true);
    assert_eq!(ensured["generation"], 1);
    let pid = ensured["pid"].as_u64().expect("pid") as u32;
    wait_for_runner(&daemon.workspace(Scope::Session, "cli-1"), pid);
    let again = json(&daemon.sandboxctl(&[
        "ensure",
        "session",
        "cli-1",
        "--task-queue",
        "session:cli-1",
        "--json",
    ]));
    assert_eq!(
        (again["created"].clone(), again["pid"].as_u64()),
        (Value::Bool(false), Some(pid as u64))
    );

    let probe = json(&daemon.sandboxctl(&["probe", "session", "cli-1", "--json"]));
    assert_eq!(probe["state"], "running");
    assert_eq!(probe["id"], "cli-1");
    assert_eq!(probe["scope"], "session");
    let plain = daemon.sandboxctl(&["probe", "session", "cli-1"]);
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "running\n");

    let described = json(&daemon.sandboxctl(&["describe", "session", "cli-1", "--json"]));
    assert_eq!(
        described["name"],
        sandboxd_protocol::naming::base_name(Scope::Session, "cli-1")
    );
    assert_eq!(described["scope"], "session");
    assert_eq!(described["id"], "cli-1");
    assert_eq!(described["state"], "running");
    assert_eq!(described["pid"].as_u64(), Some(pid as u64));
    assert_eq!(described["generation"], 1);
    assert_eq!(described["task_queue"], "session:cli-1");
    assert_eq!(
        described["caller_class"], "internal",
        "sandboxctl's default caller class"
    );
    let object = described.as_object().unwrap();
    assert!(
        object.keys().all(|key| !key.contains("token")),
        "{described}"
    );

    let listed = json(&daemon.sandboxctl(&["list", "--json"]));
    let listed = listed.as_array().expect("list --json is an array");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], "cli-1");
    let workflows = json(&daemon.sandboxctl(&["list", "--scope", "workflow", "--json"]));
    assert_eq!(workflows, Value::Array(Vec::new()));
    let table = String::from_utf8_lossy(&daemon.sandboxctl(&["list"]).stdout).into_owned();
    assert!(
        table.contains("cli-1") && table.contains("running"),
        "{table}"
    );

    let status = json(&daemon.sandboxctl(&["status", "--json"]));
    assert_eq!(status["driver"], "local-process");
    assert_eq!(
        status["protocol_version"],
        sandboxd_protocol::PROTOCOL_VERSION
    );
    assert_eq!(status["socket_path"], daemon.socket().display().to_string());
    assert_eq!(
        status["state_dir"],
        daemon.state_dir().display().to_string()
    );
    assert_eq!(status["counts"]["session"], 1);
    assert_eq!(status["counts"]["running"], 1);

    let created = json(&daemon.sandboxctl(&[
        "connect",
        "create",
        "req-j",
        "--task-queue",
        "mcp:req-j",
        "--json",
    ]));
    assert_eq!(created["request_id"], "req-j");
    let sandbox_id = created["sandbox_id"]
        .as_str()
        .expect("sandbox_id")
        .to_string();
    let down = json(&daemon.sandboxctl(&["connect", "deprovision", &sandbox_id, "--json"]));
    assert_eq!(
        (down["was_present"].clone(), down["forced"].clone()),
        (Value::Bool(true), Value::Bool(false))
    );

    let down = json(&daemon.sandboxctl(&["deprovision", "session", "cli-1", "--json"]));
    assert_eq!(down["was_present"], true);
    assert_eq!(down["forced"], false);
    assert!(wait_until(std::time::Duration::from_secs(15), || {
        pid_is_gone(pid)
    }));
    let down = json(&daemon.sandboxctl(&["deprovision", "session", "cli-1", "--json"]));
    assert_eq!(down["was_present"], false);
    assert_eq!(
        json(&daemon.sandboxctl(&["probe", "session", "cli-1", "--json"]))["state"],
        "absent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_workspace_from_the_command_line() {
    let daemon = TestDaemon::start(Options::default());
    let ensured = json(&daemon.sandboxctl(&[
        "ensure",
        "workflow",
        "wk",
        "--task-queue",
        "wfexec:wk",
        "--json",
    ]));
    let workspace = daemon.workspace(Scope::Workflow, "wk");
    wait_for_runner(&workspace, ensured["pid"].as_u64().unwrap() as u32);

    let kept = daemon.sandboxctl(&["deprovision", "workflow", "wk", "--keep-workspace"]);
    assert_eq!(code(&kept), Some(0), "{}", stderr(&kept));
    assert!(
        workspace.join("env.json").is_file(),
        "--keep-workspace keeps the workspace"
    );
    let removed = daemon.sandboxctl(&["deprovision", "workflow", "wk"]);
    assert_eq!(code(&removed), Some(0), "{}", stderr(&removed));
    assert!(
        !workspace.exists(),
        "a plain deprovision removes the workspace"
    );
}
