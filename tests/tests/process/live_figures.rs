//! The live figures: `describe` shows what the
//! sandbox's cgroup counts (process tier) or the Engine's stats (docker),
//! the figures move when the runner allocates, and `top --once --json`
//! lists the running sandboxes with them. Real daemon, real runners, real
//! cgroups (hybrid here: memory and pids in v1, CPU time from v2's
//! `cpu.stat`). The docker test prints SKIPPED without an engine.

use sandboxd_client::{ProbeState, Scope, Usage};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::daemon::{Options, TestDaemon};
use sandboxd_tests::docker_image::{docker_options, engine_ready, unique_id, volume_dir, Cleanup};
use sandboxd_tests::runner::{wait_for_runner, RUNNER_TIMEOUT};
use sandboxd_tests::{sandbox_env, wait_until};

const MIB: u64 = 1 << 20;

/// Runners that allocate 96 MiB once their workspace has `allocate-now`,
/// under a 512 MiB memory limit and a 64 pids limit.
fn allocating_daemon() -> TestDaemon {
    TestDaemon::start(Options {
        extra_toml: "[limits]\nmemory = \"512m\"\npids = 64\n".to_string(),
        ..Options::with_runner_args(&["--allocate-mib", "96", "--allocate-when", "allocate-now"])
    })
}

async fn figures(daemon: &TestDaemon, id: &str) -> Usage {
    let info = daemon
        .client()
        .await
        .describe(Scope::Session, id)
        .await
        .unwrap();
    assert_eq!(info.state, ProbeState::Running, "{info:?}");
    match info.usage {
        Some(usage) => usage,
        None => panic!("no figures: {info:?}\n{}", daemon.log_text()),
    }
}

/// Describes `id` until its memory is at least `at_least` bytes (or
/// [`RUNNER_TIMEOUT`] passed): whether it got there, and the last figures.
async fn memory_reaching(daemon: &TestDaemon, id: &str, at_least: u64) -> (bool, Usage) {
    let deadline = std::time::Instant::now() + RUNNER_TIMEOUT;
    loop {
        let now = figures(daemon, id).await;
        if now.memory_bytes.is_some_and(|bytes| bytes >= at_least) {
            return (true, now);
        }
        if std::time::Instant::now() >= deadline {
            return (false, now);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_the_cgroup_figures_and_they_move_when_the_runner_allocates() {
    let daemon = allocating_daemon();
    let id = "figures-1";
    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox(id, &sandbox_env(&format!("session:{id}"), "tok"))
        .await
        .unwrap();
    let workspace = daemon.workspace(Scope::Session, id);
    wait_for_runner(&workspace, report.pid.unwrap());

    let before = figures(&daemon, id).await;
    let memory = before.memory_bytes.expect("memory is counted");
    assert!(memory < 64 * MIB, "before allocating: {before:?}");
    assert_eq!(before.memory_limit_bytes, Some(512 * MIB), "{before:?}");
    assert!(before.tasks.is_some_and(|tasks| tasks >= 1), "{before:?}");
    assert_eq!(before.tasks_limit, Some(64), "{before:?}");
    assert!(before.cpu_usec.is_some(), "{before:?}");
    assert_eq!(before.forks_refused, Some(0), "{before:?}");
    assert_eq!(before.oom_kills, Some(0), "{before:?}");
    assert!(before.workspace_bytes.is_some(), "{before:?}");
    // The cgroup the runner is in: named after the sandbox, or the
    // prepared one it took (`prepared-<n>`) when the pool had one ready.
    let cgroup = before.cgroup.clone().expect("the cgroup's path");
    assert!(std::path::Path::new(&cgroup).is_dir(), "{cgroup}");
    let runner_cgroups = std::fs::read_to_string(format!("/proc/{}/cgroup", report.pid.unwrap()))
        .expect("the runner's cgroups");
    assert!(
        runner_cgroups
            .lines()
            .any(|line| !line.is_empty() && cgroup.ends_with(line.splitn(3, ':').nth(2).unwrap())),
        "describe's cgroup {cgroup} is not the runner's: {runner_cgroups}"
    );
    assert!(
        cgroup.ends_with(&base_name(Scope::Session, id)) || cgroup.contains("/prepared-"),
        "{cgroup}"
    );

    std::fs::write(workspace.join("allocate-now"), "").unwrap();
    let (moved, after) = memory_reaching(&daemon, id, memory + 90 * MIB).await;
    assert!(
        moved,
        "memory did not grow by 96 MiB: {before:?} → {after:?}"
    );
    assert!(
        after.cpu_usec >= before.cpu_usec,
        "CPU time went back: {before:?} → {after:?}"
    );
    if let (Some(peak), Some(now)) = (after.memory_peak_bytes, after.memory_bytes) {
        assert!(peak >= now, "{after:?}");
    }

    // As a person reads it.
    let output = daemon.sandboxctl(&["describe", "session", id]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let memory_line = text
        .lines()
        .find(|line| line.starts_with("memory:"))
        .unwrap_or_else(|| panic!("no memory line:\n{text}"));
    assert!(memory_line.ends_with("limit 512M)"), "{memory_line}");
    assert!(
        text.lines()
            .any(|line| line.starts_with("tasks:") && line.ends_with("(limit 64)")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|line| line.starts_with("cpu:") && line.ends_with('s')),
        "{text}"
    );
    assert!(text.contains(&cgroup), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_json_lists_the_running_sandboxes_with_their_figures() {
    let daemon = allocating_daemon();
    let client = daemon.client().await;
    for id in ["top-a", "top-b"] {
        let report = client
            .ensure_session_sandbox(id, &sandbox_env(&format!("session:{id}"), "tok"))
            .await
            .unwrap();
        wait_for_runner(&daemon.workspace(Scope::Session, id), report.pid.unwrap());
    }
    // Only b allocates: by memory it comes first.
    let workspace = daemon.workspace(Scope::Session, "top-b");
    std::fs::write(workspace.join("allocate-now"), "").unwrap();
    let (grown, _) = memory_reaching(&daemon, "top-b", 90 * MIB).await;
    assert!(grown, "b did not allocate");

    let output = daemon.sandboxctl(&[
        "top", "--once", "--json", "--sort", "memory", "--delay", "0.2",
    ]);
    assert!(output.status.success(), "{output:?}");
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = rows.as_array().expect("an array");
    let ids: Vec<&str> = rows.iter().map(|row| row["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["top-b", "top-a"], "{rows:#?}");
    for row in rows {
        assert_eq!(row["scope"], "session", "{row}");
        assert!(row["usage"]["memory_bytes"].as_u64().is_some(), "{row}");
        assert!(row["usage"]["tasks"].as_u64().is_some(), "{row}");
        assert!(row["cpu_percent"].as_f64().is_some(), "{row}");
    }

    // The table a person reads fits 80 columns.
    let output =
        daemon.sandboxctl_with_env(&["top", "--once", "--delay", "0.2"], &[("COLUMNS", "80")]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(text.starts_with("2 running, by CPU\nSCOPE"), "{text}");
    assert!(
        text.lines().all(|line| line.chars().count() <= 80),
        "{text}"
    );

    // A bad delay is a usage error, before any call.
    let output = daemon.sandboxctl(&["top", "--delay", "0"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--delay"),
        "{output:?}"
    );
}

/// `top` without `--once` refreshes until stopped: through a pipe, one
/// table (or JSON array) after another, no screen-clearing codes, and the
/// figures of each refresh are new ones: a runner that allocates while it
/// runs shows in a later refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_refreshes_until_stopped_and_shows_what_changed_meanwhile() {
    let daemon = allocating_daemon();
    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox("live", &sandbox_env("session:live", "tok"))
        .await
        .unwrap();
    let workspace = daemon.workspace(Scope::Session, "live");
    wait_for_runner(&workspace, report.pid.unwrap());

    /// Kills the `top` it holds, passed or failed.
    struct Top(std::process::Child);
    impl Drop for Top {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut top = Top(daemon.spawn_sandboxctl(&["top", "--json", "--delay", "0.2"]));
    let frames = serde_json::Deserializer::from_reader(top.0.stdout.take().unwrap())
        .into_iter::<serde_json::Value>();
    let (sender, refreshes) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for frame in frames {
            if sender.send(frame).is_err() {
                break;
            }
        }
    });
    let memory_of = |frame: &serde_json::Value| {
        frame.as_array().and_then(|rows| rows.first()).map(|row| {
            assert_eq!(row["id"], "live", "{row}");
            row["usage"]["memory_bytes"].as_u64().unwrap_or(0)
        })
    };
    let next = || {
        refreshes
            .recv_timeout(RUNNER_TIMEOUT)
            .expect("top stopped refreshing")
            .expect("top printed something that is not JSON")
    };
    let first = next();
    let before = memory_of(&first).unwrap_or_else(|| panic!("no row: {first}"));
    assert!(before < 90 * MIB, "{first}");
    std::fs::write(workspace.join("allocate-now"), "").unwrap();
    let deadline = std::time::Instant::now() + RUNNER_TIMEOUT;
    let mut seen = 1;
    loop {
        let frame = next();
        seen += 1;
        if memory_of(&frame).is_some_and(|bytes| bytes >= 90 * MIB) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{seen} refreshes, none showed the 96 MiB; the last: {frame}"
        );
    }
    assert!(
        top.0.try_wait().unwrap().is_none(),
        "top ended by itself after {seen} refreshes"
    );
    drop(top);

    // The table through a pipe: refreshes one after another, no screen codes.
    let mut table = Top(daemon.spawn_sandboxctl(&["top", "--delay", "0.2"]));
    let mut lines =
        std::io::BufRead::lines(std::io::BufReader::new(table.0.stdout.take().unwrap()));
    let mut headers = 0;
    while headers < 2 {
        let line = lines
            .next()
            .expect("top stopped refreshing")
            .expect("read top's output");
        assert!(
            !line.contains('\x1b'),
            "a screen code through a pipe: {line:?}"
        );
        if line.starts_with("1 running, by CPU") {
            headers += 1;
        }
    }
    drop(table);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_describe_has_the_engines_figures() {
    if !engine_ready("docker_describe_figures") {
        return;
    }
    let id = unique_id("figures");
    let _cleanup = Cleanup::new(&[id.as_str()]);
    let daemon = TestDaemon::start(docker_options(
        r#"command = ["--allocate-mib", "64", "--allocate-when", "allocate-now"]"#,
    ));
    let client = daemon.client().await;
    client
        .ensure(
            Scope::Session,
            &id,
            &sandbox_env(&format!("session:{id}"), ""),
        )
        .await
        .unwrap();
    let workspace = volume_dir(&format!("{}-workspace", base_name(Scope::Session, &id)));
    assert!(
        wait_until(RUNNER_TIMEOUT, || workspace.join("pid").is_file()),
        "the runner started"
    );
    let before = figures(&daemon, &id).await;
    let memory = before.memory_bytes.expect("the engine reports memory");
    assert!(before.tasks.is_some_and(|tasks| tasks >= 1), "{before:?}");
    assert!(before.cpu_usec.is_some(), "{before:?}");
    assert!(before.memory_limit_bytes.is_some(), "{before:?}");
    std::fs::write(workspace.join("allocate-now"), "").unwrap();
    let (moved, after) = memory_reaching(&daemon, &id, memory + 60 * MIB).await;
    assert!(
        moved,
        "memory did not grow by 64 MiB: {before:?} → {after:?}"
    );
}
