//! What a program in a process-tier sandbox is told of its limits: `nproc`
//! (the affinity mask) says as many CPUs as the cpu quota rounds up to,
//! and the runner and every command get the configured limits in
//! `SANDBOXD_*` variables, and its own cgroup's limit files are where
//! `/proc/self/cgroup` says; with no quota, `nproc` is the host's.

use std::time::Duration;

use sandboxd_client::{CommandRef, ExitReason, OutputStream, Scope};
use sandboxd_tests::commands::shell;
use sandboxd_tests::{runner_env, sandbox_env, wait_for_runner, Options, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);

/// What `script` prints in session `id`'s sandbox; it must exit 0.
async fn run(daemon: &TestDaemon, id: &str, script: &str) -> String {
    let client = daemon.client().await;
    let started = client
        .exec(Scope::Session, id, &shell(script))
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    let command = CommandRef::Id(started.command_id);
    let read = |stream| sandboxd_tests::commands::read_all(&client, id, &command, stream, WAIT);
    let (stdout, proof) = read(OutputStream::Stdout).await;
    let (stderr, _) = read(OutputStream::Stderr).await;
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    assert_eq!(
        proof.reason,
        ExitReason::Exited { code: 0 },
        "{script}\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&stderr)
    );
    stdout
}

/// The CPUs this test may use (what `nproc` says on the host).
fn host_cpus() -> usize {
    std::thread::available_parallelism().unwrap().get()
}

/// `Cpus_allowed_list` of a host pid, e.g. `1` or `0-1`.
fn cpus_allowed(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

/// Starts session `id` and returns its runner's environment and pid.
async fn started(
    daemon: &TestDaemon,
    id: &str,
) -> (std::collections::BTreeMap<String, String>, u32) {
    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox(id, &sandbox_env(&format!("session:{id}"), ""))
        .await
        .unwrap_or_else(|error| panic!("ensure: {error}\n{}", daemon.log_text()));
    let pid = report.pid.unwrap();
    let workspace = daemon.workspace(Scope::Session, id);
    wait_for_runner(&workspace, pid);
    (runner_env(&workspace), pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_of_one_cpu_is_one_cpu_to_nproc_and_the_limits_are_in_the_environment() {
    // Both a prepared sandbox (the pool's first) and one started cold.
    let daemon = TestDaemon::start(Options {
        extra_toml: "[limits]\ncpu = 1\nmemory = \"256m\"\npids = 200\ndisk = \"64m\"\n\
                     [pool]\nsession = 1\n"
            .into(),
        ..Options::default()
    });
    let wanted = [
        ("SANDBOXD_CPU_QUOTA", "1"),
        ("SANDBOXD_MEMORY_LIMIT_BYTES", "268435456"),
        ("SANDBOXD_PIDS_LIMIT", "200"),
        ("SANDBOXD_DISK_LIMIT_BYTES", "67108864"),
    ];
    for id in ["limits-1", "limits-2"] {
        let (env, pid) = started(&daemon, id).await;
        for (name, value) in wanted {
            assert_eq!(
                env.get(name).map(String::as_str),
                Some(value),
                "runner: {name}"
            );
        }
        let allowed = cpus_allowed(pid);
        assert!(
            !allowed.contains(['-', ',']),
            "the runner may run on more than one CPU: {allowed}"
        );
        let said = run(
            &daemon,
            id,
            "nproc; python3 -c 'import os; print(len(os.sched_getaffinity(0)))'; \
             echo $SANDBOXD_CPU_QUOTA $SANDBOXD_MEMORY_LIMIT_BYTES $SANDBOXD_PIDS_LIMIT $SANDBOXD_DISK_LIMIT_BYTES; \
             grep Cpus_allowed_list /proc/self/status; \
             m=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup); \
             if [ -n \"$m\" ]; then cat /sys/fs/cgroup/memory$m/memory.limit_in_bytes; \
             else cat /sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/memory.max; fi",
        )
        .await;
        let lines: Vec<&str> = said.lines().collect();
        assert_eq!(lines[0], "1", "nproc in {id}: {said}");
        assert_eq!(lines[1], "1", "sched_getaffinity in {id}: {said}");
        assert_eq!(lines[2], "1 268435456 200 67108864", "{said}");
        // A command runs on its sandbox's CPU, not another.
        assert!(
            lines[3].ends_with(&format!("\t{allowed}")),
            "{said} vs the runner's {allowed}"
        );
        // Its own cgroup's memory limit, where /proc/self/cgroup says it is
        // (what container-aware runtimes read).
        assert_eq!(lines[4], "268435456", "{said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_quota_nproc_is_the_hosts_and_no_cpu_figure_is_told() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "[limits]\ncpu = 0\n[pool]\nsession = 0\n".into(),
        ..Options::default()
    });
    let (env, _) = started(&daemon, "unlimited").await;
    assert!(!env.contains_key("SANDBOXD_CPU_QUOTA"), "{env:?}");
    // The defaults still hold for the others.
    assert_eq!(
        env.get("SANDBOXD_MEMORY_LIMIT_BYTES").map(String::as_str),
        Some("2147483648")
    );
    let said = run(
        &daemon,
        "unlimited",
        "nproc; echo ${SANDBOXD_CPU_QUOTA-unset}",
    )
    .await;
    assert_eq!(said, format!("{}\nunset\n", host_cpus()));
}
