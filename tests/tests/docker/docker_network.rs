//! No road between a daemon's containers, against the
//! real engine: on every posture the runners join the daemon's own network,
//! made with inter-container communication off, so sandbox B's container
//! cannot reach a listener in sandbox A's (TCP or UDP) while A reaches its
//! own. A network an older daemon made with it on, and no container on it,
//! is recreated without it.
//!
//! The daemon runs under an instance name of this test's own, so its
//! network, bridge and nftables table are nobody else's; all are removed
//! at the end, passed or failed. Skipped (loudly) without an engine.

use sandboxd_client::{SandboxdClient, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::docker_image::{
    build_image_tagged, docker, docker_ok, engine_ready, unique_id, Cleanup,
};
use sandboxd_tests::{Options, TestDaemon};

/// This checkout's fixture (it knows `--serve-net` and `--probe`).
const IMAGE: &str = "sandboxd-network-test-runner:latest";
/// The port the runners listen on inside their containers.
const PORT: u16 = 7070;

fn instance() -> String {
    format!("netsep{}", std::process::id())
}

fn network() -> String {
    format!("{}-sandboxd-egress", instance())
}

/// Removes the daemon's network and its table when dropped.
struct NetworkCleanup {
    table: Option<String>,
}

impl Drop for NetworkCleanup {
    fn drop(&mut self) {
        let _ = docker(&["network", "rm", &network()]);
        if let Some(table) = &self.table {
            let _ = std::process::Command::new("nft")
                .args(["delete", "table", "inet", table])
                .output();
        }
    }
}

fn daemon(posture: &str) -> TestDaemon {
    TestDaemon::start(Options {
        args: vec!["--driver".to_string(), "docker".to_string()],
        extra_toml: format!(
            "instance = \"{}\"\nrunner_image = \"{IMAGE}\"\n[docker]\ncommand = [\"--serve-net\", \"{PORT}\"]\n",
            instance()
        ),
        egress: Some(posture.to_string()),
        ..Options::default()
    })
}

/// Ensures a session sandbox and returns its container's name and address.
async fn start(client: &SandboxdClient, id: &str) -> (String, String) {
    let env = sandboxd_tests::sandbox_env(&format!("session:{id}"), "tok-net");
    client.ensure_session_sandbox(id, &env).await.unwrap();
    let name = format!("{}-{}", instance(), base_name(Scope::Session, id));
    let address = docker_ok(&[
        "inspect",
        &name,
        "--format",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
    ])
    .trim()
    .to_string();
    assert!(!address.is_empty(), "{name} has no address");
    (name, address)
}

/// The errno of one probe made inside `container` (`docker exec` of the
/// fixture in its image, which has no shell).
fn probe(container: &str, protocol: &str, address: &str) -> Option<i32> {
    let output = docker(&[
        "exec",
        container,
        "/runner-fixture",
        "--probe",
        protocol,
        address,
    ]);
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .strip_prefix("errno ")
        .and_then(|errno| errno.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_of_one_daemon_cannot_reach_each_other_on_any_posture() {
    let test = "containers_of_one_daemon_cannot_reach_each_other_on_any_posture";
    if !engine_ready(test) {
        return;
    }
    build_image_tagged(IMAGE).expect("build the network test image");
    let mut network_cleanup = NetworkCleanup { table: None };
    // An older daemon's network: inter-container communication on, unused.
    docker_ok(&[
        "network",
        "create",
        "-o",
        &format!(
            "com.docker.network.bridge.name=sbxd-{}",
            &sha256_hex(&instance())[..10]
        ),
        &network(),
    ]);

    // `none` first: no table of the daemon's holds the bridge yet (a
    // posture's is kept when its daemon stops), so only the network's own
    // setting keeps A and B apart there.
    for posture in ["none", "relaxed", "strict"] {
        let ids = [
            unique_id(&format!("net-a-{posture}")),
            unique_id(&format!("net-b-{posture}")),
        ];
        let _cleanup = Cleanup::new(&ids.each_ref().map(String::as_str));
        let mut daemon = daemon(posture);
        let client = daemon.client().await;
        let (a, a_ip) = start(&client, &ids[0]).await;
        let (b, _) = start(&client, &ids[1]).await;
        let status = client.status().await.unwrap();
        if network_cleanup.table.is_none() {
            network_cleanup.table = status
                .egress
                .mechanism
                .split_whitespace()
                .find(|word| word.starts_with("sandboxd_"))
                .map(str::to_string);
        }
        let feature = status
            .isolation
            .iter()
            .find(|feature| feature.name == "network")
            .unwrap_or_else(|| panic!("no network feature: {:?}", status.isolation));
        assert!(feature.in_force, "{posture}: {feature:?}");
        let icc = docker_ok(&[
            "network",
            "inspect",
            &network(),
            "--format",
            "{{index .Options \"com.docker.network.bridge.enable_icc\"}}",
        ]);
        assert_eq!(icc.trim(), "false", "{posture}: the network keeps ICC on");

        for protocol in ["tcp", "udp"] {
            let target = format!("{a_ip}:{PORT}");
            // A's own listener answers (waiting until its runner listens).
            let mut own = None;
            sandboxd_tests::procs::wait_until(std::time::Duration::from_secs(30), || {
                own = probe(&a, protocol, &target);
                own == Some(0)
            });
            assert_eq!(
                own,
                Some(0),
                "{posture}: A cannot reach its own {protocol} listener"
            );
            let other = probe(&b, protocol, &target);
            eprintln!("{posture}: B -> A {protocol} {target}: errno {other:?}");
            assert!(
                other.is_some_and(|errno| errno != 0),
                "{posture}: B reached A over {protocol}: {other:?}"
            );
        }
        for id in &ids {
            client.deprovision(Scope::Session, id, false).await.unwrap();
        }
        daemon.stop();
    }
}

/// The first hex digits of SHA-256 of `text`, as the daemon names a named
/// instance's bridge.
fn sha256_hex(text: &str) -> String {
    let output = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .expect("run sha256sum");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The network's check is kept between ensures, so the
/// daemon must notice when the network is removed, or replaced by one that
/// lets containers reach each other, under it: the next ensures make it
/// again, without inter-container communication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_removed_or_replaced_under_the_daemon_is_made_again() {
    let test = "a_network_removed_or_replaced_under_the_daemon_is_made_again";
    if !engine_ready(test) {
        return;
    }
    build_image_tagged(IMAGE).expect("build the network test image");
    let instance = format!("netwatch{}", std::process::id());
    let network = format!("{instance}-sandboxd-egress");
    let bridge = format!("sbxd-{}", &sha256_hex(&instance)[..10]);
    let ids: Vec<String> = (0..3).map(|n| unique_id(&format!("watch-{n}"))).collect();
    let (_made, mut daemon) = daemon_of_its_own_instance(&instance, &ids);
    let client = daemon.client().await;
    let icc = || {
        docker_ok(&[
            "network",
            "inspect",
            &network,
            "--format",
            "{{index .Options \"com.docker.network.bridge.enable_icc\"}}",
        ])
    };
    let first = ensure_apart(&client, &network, &ids[0]).await;
    assert!(first.is_empty(), "{first:?}");
    client
        .deprovision(Scope::Session, &ids[0], false)
        .await
        .unwrap();

    // Removed under the daemon.
    docker_ok(&["network", "rm", &network]);
    let attempts = ensure_apart(&client, &network, &ids[1]).await;
    eprintln!(
        "after the removal: {} failed attempt(s) {attempts:?}",
        attempts.len()
    );
    client
        .deprovision(Scope::Session, &ids[1], false)
        .await
        .unwrap();

    // Replaced, by someone else, with one that lets containers meet.
    docker_ok(&["network", "rm", &network]);
    docker_ok(&[
        "network",
        "create",
        "-o",
        &format!("com.docker.network.bridge.name={bridge}"),
        &network,
    ]);
    // No option: ICC on, Docker's default.
    assert_ne!(icc().trim(), "false", "the replacement has ICC on");
    let attempts = ensure_apart(&client, &network, &ids[2]).await;
    eprintln!(
        "after the replacement: {} attempt(s) on it {attempts:?}",
        attempts.len()
    );
    assert_eq!(icc().trim(), "false");
    client
        .deprovision(Scope::Session, &ids[2], false)
        .await
        .unwrap();
    drop(client);
    daemon.stop();
}

/// A stopped container was made on the network as it was; removed under
/// the daemon (and made again by the next ensure, with a new id), that
/// container can no longer start: the engine answers 404 for its old
/// network. The ensure recreates it on the network as it is now, with the
/// same incarnation (once, a start failed with 404 eight times and the
/// ensure gave up with "kept changing state").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_container_whose_network_was_removed_starts_on_the_new_one() {
    let test = "a_stopped_container_whose_network_was_removed_starts_on_the_new_one";
    if !engine_ready(test) {
        return;
    }
    build_image_tagged(IMAGE).expect("build the network test image");
    let instance = format!("netgone{}", std::process::id());
    let network = format!("{instance}-sandboxd-egress");
    let id = unique_id("netgone");
    let container = format!("{instance}-{}", base_name(Scope::Session, &id));
    let (_made, mut daemon) = daemon_of_its_own_instance(&instance, std::slice::from_ref(&id));
    let client = daemon.client().await;
    let env = sandboxd_tests::sandbox_env(&format!("session:{id}"), "tok");
    let first = client.ensure_session_sandbox(&id, &env).await.unwrap();
    let old_network_id = docker_ok(&["network", "inspect", &network, "--format", "{{.Id}}"]);

    docker_ok(&["stop", &container]);
    docker_ok(&["network", "rm", &network]);
    let again = client.ensure_session_sandbox(&id, &env).await.unwrap();
    assert!(again.created, "{again:?}");
    assert_eq!(again.uid, first.uid, "the same incarnation");
    let running = docker_ok(&["inspect", &container, "--format", "{{.State.Running}}"]);
    assert_eq!(running.trim(), "true");
    let new_network_id = docker_ok(&["network", "inspect", &network, "--format", "{{.Id}}"]);
    assert_ne!(new_network_id, old_network_id, "the network was made again");
    let joined = docker_ok(&[
        "inspect",
        &container,
        "--format",
        &format!("{{{{(index .NetworkSettings.Networks \"{network}\").NetworkID}}}}"),
    ]);
    assert_eq!(joined.trim(), new_network_id.trim(), "on the new network");
    assert!(
        daemon
            .log_text()
            .contains("the stopped container's network is gone"),
        "the daemon says why it recreated the container"
    );
    client
        .deprovision(Scope::Session, &id, false)
        .await
        .unwrap();
    drop(client);
    daemon.stop();
}

/// Removes what a test of its own instance made, passed or failed: the
/// sandboxes' containers (with their volumes) and the instance's network.
struct Made(String, Vec<String>);

impl Drop for Made {
    fn drop(&mut self) {
        for container in &self.1 {
            let _ = docker(&["rm", "-f", "-v", container]);
            // `-v` takes only anonymous volumes; the workspace is named.
            let _ = docker(&["volume", "rm", &format!("{container}-workspace")]);
        }
        let _ = docker(&["network", "rm", &self.0]);
    }
}

/// A docker daemon of `instance` (so its network is the test's alone, to
/// remove under it), with egress off, and what to remove after the test:
/// the containers of `ids` and the network.
fn daemon_of_its_own_instance(instance: &str, ids: &[String]) -> (Made, TestDaemon) {
    let made = Made(
        format!("{instance}-sandboxd-egress"),
        ids.iter()
            .map(|id| format!("{instance}-{}", base_name(Scope::Session, id)))
            .collect(),
    );
    let daemon = TestDaemon::start(Options {
        args: vec!["--driver".to_string(), "docker".to_string()],
        extra_toml: format!("instance = \"{instance}\"\nrunner_image = \"{IMAGE}\"\n"),
        egress: Some("none".to_string()),
        ..Options::default()
    });
    (made, daemon)
}

/// Ensures `id` until it starts on `network` with ICC off, deprovisioning
/// between tries; the failed tries. The daemon learns of a change to the
/// network from the engine's events, or from a create that failed on it,
/// so one try may come before it knows.
async fn ensure_apart(client: &SandboxdClient, network: &str, id: &str) -> Vec<String> {
    let env = sandboxd_tests::sandbox_env(&format!("session:{id}"), "tok");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut attempts = Vec::new();
    loop {
        let ensured = client.ensure_session_sandbox(id, &env).await;
        let options = docker(&[
            "network",
            "inspect",
            network,
            "--format",
            "{{index .Options \"com.docker.network.bridge.enable_icc\"}}",
        ]);
        if ensured.is_ok() && options.stdout.starts_with(b"false") {
            return attempts;
        }
        attempts.push(format!("{ensured:?}"));
        let _ = client.deprovision(Scope::Session, id, false).await;
        assert!(
            std::time::Instant::now() < deadline,
            "{id} never started on a network with ICC off: {attempts:?}"
        );
    }
}
