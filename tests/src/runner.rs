//! Reading what the runner fixture wrote into its workspace.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::procs::{host_pid_in_sandbox, innermost_pid, read_pid_file, wait_until};

/// How long a runner gets to write its files.
pub const RUNNER_TIMEOUT: Duration = Duration::from_secs(20);

/// The pid a runner sees as its own under `isolation = "full"`: it is the
/// first child of its sandbox's init, PID 1 of the namespace.
pub const RUNNER_PID_IN_SANDBOX: u32 = 2;

/// The pid the fixture recorded in `workspace/pid`, as a host pid (see
/// [`host_pid_in_sandbox`]), if it has.
pub fn read_runner_pid(workspace: &Path) -> Option<u32> {
    read_pid_file(&workspace.join("pid")).map(|inner| host_pid_in_sandbox(workspace, inner))
}

/// Waits until the runner with (host) `pid` has written its files (its
/// `pid` file names it, as the runner sees itself); panics after
/// [`RUNNER_TIMEOUT`].
pub fn wait_for_runner(workspace: &Path, pid: u32) {
    let mut seen = None;
    let written = wait_until(RUNNER_TIMEOUT, || {
        seen = read_pid_file(&workspace.join("pid"));
        seen.is_some() && seen == innermost_pid(pid)
    });
    assert!(
        written,
        "runner {pid} did not write {}/pid within {RUNNER_TIMEOUT:?} (it holds {seen:?})",
        workspace.display()
    );
}

/// Hands a `--serve-attacks` fixture its request: written whole under
/// another name, then renamed to `attack`, because the fixture acts the
/// moment the name exists and a plain write lets it read a half-written
/// (or empty) request.
pub fn request_attack(workspace: &Path, request: &str) {
    let pending = workspace.join(".attack.pending");
    std::fs::write(&pending, request)
        .unwrap_or_else(|error| panic!("write {}: {error}", pending.display()));
    std::fs::rename(&pending, workspace.join("attack"))
        .unwrap_or_else(|error| panic!("rename {}: {error}", pending.display()));
}

/// The pid of the grandchild the fixture forked (`--fork-grandchild`).
pub fn read_grandchild_pid(workspace: &Path) -> Option<u32> {
    read_pid_file(&workspace.join("grandchild.pid"))
        .map(|inner| host_pid_in_sandbox(workspace, inner))
}

/// The environment the fixture recorded in `workspace/env.json`.
pub fn runner_env(workspace: &Path) -> BTreeMap<String, String> {
    let path = workspace.join("env.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("parse {}: {error}", path.display()))
}

/// Names of the entries in a directory (empty when it does not exist).
pub fn dir_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Ensures the session sandbox `id` (task queue `q:<id>`, token `tok`) and
/// waits until its runner has written its files; returns the runner's pid
/// as the daemon reports it. Panics with the daemon's log on failure.
pub async fn start_session(daemon: &crate::TestDaemon, id: &str) -> u32 {
    use sandboxd_protocol::Scope;
    let client = daemon.client().await;
    let report = client
        .ensure(
            Scope::Session,
            id,
            &crate::sandbox_env(&format!("q:{id}"), "tok"),
        )
        .await
        .unwrap_or_else(|error| panic!("ensure {id}: {error}\n{}", daemon.log_text()));
    let pid = report.pid.expect("the process tier reports the pid");
    wait_for_runner(&daemon.workspace(Scope::Session, id), pid);
    pid
}

/// Runs `script` as the runner of the session sandbox `id` (the fixture's
/// `--serve-probes`: it runs `probe.sh` when one appears in its workspace,
/// written whole under another name and renamed) and returns the
/// `key=value` lines it printed. Panics with the daemon's log when no
/// answer comes within `timeout`.
pub fn probe(
    daemon: &crate::TestDaemon,
    id: &str,
    script: &str,
    timeout: Duration,
) -> std::collections::HashMap<String, String> {
    let workspace = daemon.workspace(sandboxd_protocol::Scope::Session, id);
    let done = workspace.join("probe.done");
    let _ = std::fs::remove_file(&done);
    let staged = workspace.join("probe.staged");
    std::fs::write(&staged, script).unwrap();
    std::fs::rename(&staged, workspace.join("probe.sh")).unwrap();
    assert!(
        wait_until(timeout, || done.exists()),
        "{id} ran no probe; daemon log:\n{}",
        daemon.log_text()
    );
    let output = std::fs::read_to_string(workspace.join("probe.out")).unwrap();
    eprintln!("--- {id}:\n{output}");
    output
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.to_string(), value.trim().to_string()))
        .collect()
}
