//! The egress posture on the docker tier, against the real engine: runner
//! containers join the daemon's own network, and the rules on its bridge
//! refuse the posture's ranges — under `strict` the host itself too. The
//! target is the test's own listener on the host side of that network
//! (its gateway address), nothing else.
//!
//! Skipped (loudly) without an engine, like the other docker tests. The
//! network and its rules are global to the host (the default instance's,
//! which every other docker test's daemon uses), so everything here runs
//! in one test, in the `docker_host` binary, one at a time with the tests
//! there, and leaves neither behind.

use std::net::TcpListener;
use std::time::Duration;

use sandboxd_client::Scope;
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::docker_image::{
    build_image_tagged, docker, docker_ok, engine_ready, unique_id, Cleanup,
};
use sandboxd_tests::{eventually, sandbox_env, Options, TestDaemon};

use crate::ONE_AT_A_TIME;

/// This checkout's fixture (it knows `--connect`), whatever another
/// checkout on the same engine last tagged as the shared test image.
const IMAGE: &str = "sandboxd-egress-test-runner:latest";
const NETWORK: &str = "sandboxd-egress";
const BRIDGE: &str = "sbxd-egress";

/// Makes the daemon's network ahead of it (the daemon finds it existing),
/// so the test knows the gateway its listener must bind before any
/// container asks for it. Removes network and rules on drop.
struct OwnNetwork {
    gateway: String,
    table: Option<String>,
    /// Held as a daemon of the instance would: the daemons' clean stops
    /// keep the network the test made for as long as the test uses it.
    _held: sandboxd_tests::docker_leftovers::HeldNetwork,
}

impl OwnNetwork {
    fn create() -> OwnNetwork {
        let held = sandboxd_tests::docker_leftovers::hold_network(NETWORK);
        let exists = docker(&["network", "inspect", NETWORK]).status.success();
        if !exists {
            docker_ok(&[
                "network",
                "create",
                "--driver",
                "bridge",
                "-o",
                &format!("com.docker.network.bridge.name={BRIDGE}"),
                // As the daemon makes it: one without is remade under us.
                "-o",
                "com.docker.network.bridge.enable_icc=false",
                "--label",
                "stigmer.ai/managed-by=stigmer-server",
                NETWORK,
            ]);
        }
        let gateway = docker_ok(&[
            "network",
            "inspect",
            NETWORK,
            "--format",
            "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
        ])
        .trim()
        .to_string();
        assert!(!gateway.is_empty(), "the network has no gateway");
        OwnNetwork {
            gateway,
            table: None,
            _held: held,
        }
    }
}

impl Drop for OwnNetwork {
    fn drop(&mut self) {
        let _ = docker(&["network", "rm", NETWORK]);
        if let Some(table) = &self.table {
            let _ = std::process::Command::new("nft")
                .args(["delete", "table", "inet", table])
                .output();
        }
    }
}

fn daemon(posture: &str, target: &str) -> TestDaemon {
    TestDaemon::start(Options {
        args: vec!["--driver".to_string(), "docker".to_string()],
        extra_toml: format!(
            "runner_image = \"{IMAGE}\"\n[docker]\ncommand = [\"--connect\", \"{target}\"]\n"
        ),
        egress: Some(posture.to_string()),
        ..Options::default()
    })
}

/// What the container's runner printed about its connect.
fn connect_line(container: &str) -> Option<String> {
    let output = docker(&["logs", container]);
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find(|line| line.contains("runner-fixture: connect "))
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_refuses_the_host_side_of_the_daemons_network_and_relaxed_allows_it() {
    let test = "strict_refuses_the_host_side_of_the_daemons_network";
    if !engine_ready(test) {
        return;
    }
    let _serial = ONE_AT_A_TIME.lock().await;
    build_image_tagged(IMAGE).expect("build the egress test image");
    let ids = [
        unique_id("egress-strict"),
        unique_id("egress-relaxed"),
        unique_id("egress-foreign"),
    ];
    let _cleanup = Cleanup::new(&ids.each_ref().map(String::as_str));
    let mut network = OwnNetwork::create();
    let listener = TcpListener::bind((network.gateway.as_str(), 0)).expect("listen on the gateway");
    let target = format!(
        "{}:{}",
        network.gateway,
        listener.local_addr().unwrap().port()
    );

    for (posture, id, want) in [
        ("strict", &ids[0], "failed: Connection refused"),
        ("relaxed", &ids[1], "ok"),
    ] {
        let daemon = daemon(posture, &target);
        let client = daemon.client().await;
        let status = client.status().await.unwrap();
        assert!(status.egress.enforced, "{:?}", status.egress);
        assert!(
            status.egress.mechanism.contains(BRIDGE),
            "{:?}",
            status.egress
        );
        network.table = status
            .egress
            .mechanism
            .split_whitespace()
            .find(|word| word.starts_with("sandboxd_"))
            .map(str::to_string);

        let env = sandbox_env(&format!("session:{id}"), "tok-egress");
        client.ensure_session_sandbox(id, &env).await.unwrap();
        let name = base_name(Scope::Session, id);
        let joined = docker_ok(&[
            "inspect",
            &name,
            "--format",
            "{{range $name, $_ := .NetworkSettings.Networks}}{{$name}}{{end}}",
        ]);
        assert_eq!(
            joined.trim(),
            NETWORK,
            "the runner is not on the daemon's network"
        );
        let logged = eventually(Duration::from_secs(20), || {
            let found = connect_line(&name).is_some();
            async move { found }
        })
        .await;
        assert!(
            logged,
            "the runner under {posture} never reported its connect"
        );
        let line = connect_line(&name).unwrap();
        assert!(
            line.starts_with(&format!("runner-fixture: connect {target}: {want}")),
            "under {posture}: {line}"
        );
        client.deprovision(Scope::Session, id, false).await.unwrap();
    }

    // A network of that name on another bridge is not one the rules hold.
    docker_ok(&["network", "rm", NETWORK]);
    docker_ok(&[
        "network",
        "create",
        "-o",
        "com.docker.network.bridge.name=sbxd-foreign",
        NETWORK,
    ]);
    let daemon = daemon("strict", &target);
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{}", ids[2]), "tok-egress");
    let error = client
        .ensure_session_sandbox(&ids[2], &env)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("exists with bridge sbxd-foreign instead of sbxd-egress"),
        "{error}"
    );
    assert!(docker(&["inspect", &base_name(Scope::Session, &ids[2])])
        .status
        .code()
        .is_some_and(|code| code != 0));
}
