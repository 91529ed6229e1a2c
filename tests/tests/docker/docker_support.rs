//! What the docker tests share: fresh ids with the guard that removes
//! what the engine holds for them, the workspace volume's name, and the
//! waits for a runner's files and for a probe to answer a state.

use std::path::Path;
use std::time::Duration;

use sandboxd_client::{ProbeState, SandboxdClient, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::docker_image::{engine_ready, inspect, unique_id, Cleanup};
use sandboxd_tests::{eventually, wait_until};

/// How long a runner gets to write its files after a (re)start.
const RUNNER_WRITES: Duration = Duration::from_secs(20);

/// Held by the tests that make connect sandboxes: the reaper test's daemon
/// has a TTL of seconds and would remove another test's connect sandbox,
/// in whichever module of this binary.
pub(crate) static CONNECT_SANDBOXES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The sandbox's named workspace volume.
pub(crate) fn workspace_volume(scope: Scope, id: &str) -> String {
    format!("{}-workspace", base_name(scope, id))
}

/// Waits until the runner (re)started in this workspace has written its
/// `pid` file, removed beforehand by the caller when a restart is awaited.
pub(crate) fn wait_for_runner_files(workspace: &Path) {
    assert!(
        wait_until(RUNNER_WRITES, || workspace.join("pid").is_file()),
        "the runner wrote no pid file in {} within {RUNNER_WRITES:?}",
        workspace.display()
    );
}

/// The container's full id, or a panic naming the sandbox.
pub(crate) fn container_id(name: &str) -> String {
    let value = inspect("container", name).unwrap_or_else(|| panic!("no container {name}"));
    value["Id"]
        .as_str()
        .expect("a container has an id")
        .to_string()
}

pub(crate) async fn wait_for_probe(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    want: ProbeState,
) {
    let mut last = None;
    let reached = eventually(Duration::from_secs(15), || {
        let client = client.clone();
        let id = id.to_string();
        async move { client.probe(scope, &id).await.ok() == Some(want) }
    })
    .await;
    if !reached {
        last = client.probe(scope, id).await.ok();
    }
    assert!(
        reached,
        "{scope} '{id}' did not become {want} (last probe: {last:?})"
    );
}

/// `None` (after a loud SKIPPED line) when no engine answers; else a fresh
/// sandbox id for each prefix, with the guard that removes whatever the
/// engine holds for them when the test ends, however it ends.
pub(crate) fn engine_and_fresh_ids<const N: usize>(
    test: &str,
    prefixes: [&str; N],
) -> Option<([String; N], Cleanup)> {
    if !engine_ready(test) {
        return None;
    }
    let ids = prefixes.map(unique_id);
    let cleanup = Cleanup::new(&ids.each_ref().map(String::as_str));
    Some((ids, cleanup))
}
