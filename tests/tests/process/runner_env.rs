//! What a runner gets (SPEC §5): exactly the env contract, and nothing of
//! the daemon's own environment.

use std::collections::BTreeSet;

use sandboxd_client::Scope;
use sandboxd_tests::{
    runner_env, sandbox_env, wait_for_runner, wait_until, Options, TestDaemon, RUNNER_TIMEOUT,
};

/// Every variable a runner may have; anything else leaked from the daemon.
const CONTRACT: [&str; 10] = [
    "MODE",
    "STIGMER_TASK_QUEUE",
    "WORKSPACE_ROOT_DIR",
    "HOME",
    "PATH",
    "LANG",
    "TZ",
    "STIGMER_BACKEND_ENDPOINT",
    "TEMPORAL_SERVICE_ADDRESS",
    "STIGMER_TOKEN",
];

/// The sandbox's limits in force, told by the daemon too.
const LIMITS: [&str; 4] = [
    "SANDBOXD_MEMORY_LIMIT_BYTES",
    "SANDBOXD_CPU_QUOTA",
    "SANDBOXD_PIDS_LIMIT",
    "SANDBOXD_DISK_LIMIT_BYTES",
];

fn daemon_env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    [
        ("SECRET_DAEMON_VAR", "x"),
        ("NOTIFY_SOCKET", "/x"),
        ("LISTEN_FDS", "3"),
        ("LISTEN_PID", "1"),
        ("LISTEN_FDNAMES", "sandboxd.sock"),
        ("WATCHDOG_USEC", "30000000"),
        ("WATCHDOG_PID", "1"),
        ("INVOCATION_ID", "0123456789abcdef"),
        ("HOME", "/root"),
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("LANG", "C.UTF-8"),
        ("TZ", "Europe/Berlin"),
    ]
    .iter()
    .chain(extra)
    .map(|(key, value)| (key.to_string(), value.to_string()))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_gets_the_env_contract_and_nothing_of_the_daemons_environment() {
    // One address from the environment (which beats the file), one from the file.
    let daemon = TestDaemon::start(Options {
        env: daemon_env(&[("STIGMER_SANDBOX_BACKEND_ENDPOINT", "host.internal:7234")]),
        extra_toml:
            "temporal_address = \"temporal.internal:7233\"\nbackend_endpoint = \"ignored:1\"\n"
                .into(),
        ..Options::default()
    });
    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox("env-1", &sandbox_env("session:env-1", "tok-env-1"))
        .await
        .unwrap();
    let workspace = daemon.workspace(Scope::Session, "env-1");
    wait_for_runner(&workspace, report.pid.unwrap());
    let env = runner_env(&workspace);
    let get = |name: &str| env.get(name).map(String::as_str);

    // Where its view mounts the workspace (the host's path is not in it).
    let ws = "/workspace";
    assert_eq!(get("MODE"), Some("local"));
    assert_eq!(get("STIGMER_TASK_QUEUE"), Some("session:env-1"));
    assert_eq!(get("WORKSPACE_ROOT_DIR"), Some(ws));
    assert_eq!(get("HOME"), Some(ws), "HOME is the workspace");
    assert_eq!(get("STIGMER_TOKEN"), Some("tok-env-1"));
    assert_eq!(
        get("STIGMER_BACKEND_ENDPOINT"),
        Some("host.internal:7234"),
        "environment beats the file"
    );
    assert_eq!(
        get("TEMPORAL_SERVICE_ADDRESS"),
        Some("temporal.internal:7233")
    );
    assert_eq!(
        get("PATH"),
        Some("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        "PATH is inherited"
    );
    assert_eq!(get("LANG"), Some("C.UTF-8"), "LANG is inherited");
    assert_eq!(get("TZ"), Some("Europe/Berlin"), "TZ is inherited");

    // `[runner] env`, as the tests' daemons are configured.
    assert_eq!(
        get(sandboxd_tests::daemon::TEST_DIR_VARIABLE),
        Some(format!("{}/", daemon.dir().display()).as_str())
    );
    let mut allowed: BTreeSet<&str> = CONTRACT.into_iter().collect();
    allowed.insert(sandboxd_tests::daemon::TEST_DIR_VARIABLE);
    // The sandbox's limits (see honest_limits.rs).
    allowed.extend(LIMITS);
    let leaked: Vec<&String> = env
        .keys()
        .filter(|key| !allowed.contains(key.as_str()))
        .collect();
    assert!(
        leaked.is_empty(),
        "variables outside the runner's env contract: {leaked:?}\nfull env: {env:#?}"
    );
    for name in [
        "SECRET_DAEMON_VAR",
        "NOTIFY_SOCKET",
        "LISTEN_FDS",
        "LISTEN_PID",
        "WATCHDOG_USEC",
        "INVOCATION_ID",
    ] {
        assert!(
            get(name).is_none(),
            "{name} leaked from the daemon into the runner"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_token_and_unset_addresses_are_left_out() {
    let daemon = TestDaemon::start(Options {
        env: daemon_env(&[])
            .into_iter()
            .filter(|(key, _)| key != "TZ")
            .collect(),
        // Configured but empty is the same as not configured.
        extra_toml: "backend_endpoint = \"\"\n".into(),
        ..Options::default()
    });
    let client = daemon.client().await;
    let report = client
        .ensure_workflow_sandbox("env-2", &sandbox_env("wfexec:env-2", ""))
        .await
        .unwrap();
    let workspace = daemon.workspace(Scope::Workflow, "env-2");
    wait_for_runner(&workspace, report.pid.unwrap());
    let env = runner_env(&workspace);
    for name in [
        "STIGMER_TOKEN",
        "STIGMER_BACKEND_ENDPOINT",
        "TEMPORAL_SERVICE_ADDRESS",
        "TZ",
    ] {
        assert!(
            !env.contains_key(name),
            "{name} must be absent, got {:?}",
            env.get(name)
        );
    }
    assert_eq!(env.get("MODE").map(String::as_str), Some("local"));
    assert_eq!(
        env.get("STIGMER_TASK_QUEUE").map(String::as_str),
        Some("wfexec:env-2")
    );
    assert!(env.contains_key("PATH"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_output_goes_to_its_log_file() {
    let daemon = TestDaemon::start(Options::with_runner_args(&["--print-lines", "5"]));
    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox("talker", &sandbox_env("session:talker", ""))
        .await
        .unwrap();
    wait_for_runner(
        &daemon.workspace(Scope::Session, "talker"),
        report.pid.unwrap(),
    );
    let log = daemon.runner_log(Scope::Session, "talker");
    let complete = wait_until(RUNNER_TIMEOUT, || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.contains("runner-fixture line 5"))
    });
    assert!(
        complete,
        "runner stdout is not in {}: {:?}",
        log.display(),
        std::fs::read_to_string(&log)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("runner-fixture line 1\n"), "{text}");
}

/// A daemon shielded from the OOM killer (systemd's `OOMScoreAdjust=-500`)
/// must not pass the shield on: runners get `runner_oom_score_adj`. (This
/// machine cannot lower a score, so the test raises it; the daemon writes
/// the value the same way either way.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_get_the_configured_oom_score_adj() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "runner_oom_score_adj = 300\n".into(),
        ..Options::default()
    });
    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox("oom", &sandbox_env("session:oom", ""))
        .await
        .unwrap();
    let pid = report.pid.unwrap();
    wait_for_runner(&daemon.workspace(Scope::Session, "oom"), pid);
    let runner_adj = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
    assert_eq!(runner_adj.trim(), "300");
    let daemon_adj =
        std::fs::read_to_string(format!("/proc/{}/oom_score_adj", daemon.pid().unwrap())).unwrap();
    assert_eq!(daemon_adj.trim(), "0", "only the runner changed");
}
