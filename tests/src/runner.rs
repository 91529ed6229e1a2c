//! Reading what the runner fixture wrote into its workspace.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::procs::{read_pid_file, wait_until};

/// How long a runner gets to write its files.
pub const RUNNER_TIMEOUT: Duration = Duration::from_secs(20);

/// The pid the fixture recorded in `workspace/pid`, if it has.
pub fn read_runner_pid(workspace: &Path) -> Option<u32> {
    read_pid_file(&workspace.join("pid"))
}

/// Waits until the runner with `pid` has written its files (its `pid` file
/// names it); panics after [`RUNNER_TIMEOUT`].
pub fn wait_for_runner(workspace: &Path, pid: u32) {
    let mut seen = None;
    let written = wait_until(RUNNER_TIMEOUT, || {
        seen = read_runner_pid(workspace);
        seen == Some(pid)
    });
    assert!(
        written,
        "runner {pid} did not write {}/pid within {RUNNER_TIMEOUT:?} (it holds {seen:?})",
        workspace.display()
    );
}

/// The pid of the grandchild the fixture forked (`--fork-grandchild`).
pub fn read_grandchild_pid(workspace: &Path) -> Option<u32> {
    read_pid_file(&workspace.join("grandchild.pid"))
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
