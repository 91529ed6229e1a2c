//! A clean stop of a docker-tier daemon leaves nothing of its own on the
//! host when no sandbox of its instance remains: no `inet sandboxd_*`
//! egress table and no `<instance>-sandboxd-egress` network. While a container of the instance is left, both stay, since
//! that container still runs under them; the last one's stop removes them.
//!
//! Skipped (loudly) without an engine, like the other docker tests. A
//! named instance of its own keeps it apart from every other test.

use std::process::Command;

use sandboxd_tests::docker_image::{docker, engine_ready, unique_id, TEST_IMAGE};
use sandboxd_tests::{sandbox_env, Options, TestDaemon};
use serde_json::Value;

use crate::ONE_AT_A_TIME;

fn daemon(instance: &str) -> TestDaemon {
    TestDaemon::start(Options {
        args: vec!["--driver".to_string(), "docker".to_string()],
        extra_toml: format!(
            "instance = \"{instance}\"\nrunner_image = \"{TEST_IMAGE}\"\n[docker]\n"
        ),
        ..Options::default()
    })
}

/// The daemon's egress table, from what `status --json` says of it.
fn egress_table(daemon: &TestDaemon) -> String {
    let output = daemon.sandboxctl(&["--json", "status"]);
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    let mechanism = status["egress"]["mechanism"].as_str().unwrap_or_default();
    let start = mechanism
        .find("sandboxd_")
        .unwrap_or_else(|| panic!("no table named in {mechanism}"));
    mechanism[start..]
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .next()
        .unwrap()
        .to_string()
}

fn table_exists(table: &str) -> bool {
    Command::new("nft")
        .args(["list", "table", "inet", table])
        .output()
        .unwrap()
        .status
        .success()
}

fn network_exists(network: &str) -> bool {
    docker(&["network", "inspect", network]).status.success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_with_no_sandbox_left_removes_the_table_and_the_network() {
    if !engine_ready("a_clean_stop_with_no_sandbox_left_removes_the_table_and_the_network") {
        return;
    }
    let _serial = ONE_AT_A_TIME.lock().await;
    let instance = format!("t17s{}", std::process::id());
    let network = format!("{instance}-sandboxd-egress");
    let id = unique_id("stop");

    // One sandbox left running: the stop keeps what it runs under.
    let mut first = daemon(&instance);
    let table = egress_table(&first);
    let client = first.client().await;
    client
        .ensure_session_sandbox(&id, &sandbox_env(&format!("session:{id}"), "tok"))
        .await
        .unwrap();
    assert!(table_exists(&table) && network_exists(&network));
    first.stop();
    assert!(
        table_exists(&table),
        "the table went under a running container"
    );
    assert!(
        network_exists(&network),
        "the network went under a running container"
    );
    drop(first);

    // The next daemon adopts it; once it is gone, a clean stop removes both.
    let mut second = daemon(&instance);
    assert_eq!(egress_table(&second), table);
    let client = second.client().await;
    client.deprovision_session_sandbox(&id).await.unwrap();
    second.stop();
    assert!(!table_exists(&table), "inet {table} is left after the stop");
    assert!(
        !network_exists(&network),
        "{network} is left after the stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_network_goes_only_at_the_last_daemons_clean_stop() {
    if !engine_ready("the_instance_network_goes_only_at_the_last_daemons_clean_stop") {
        return;
    }
    let _serial = ONE_AT_A_TIME.lock().await;
    let instance = format!("t17l{}", std::process::id());
    let network = format!("{instance}-sandboxd-egress");
    let id = unique_id("last");

    // Two daemons of one instance share its network and table.
    let mut first = daemon(&instance);
    let mut second = daemon(&instance);
    let table = egress_table(&first);
    assert_eq!(egress_table(&second), table);
    let client = first.client().await;
    client
        .ensure_session_sandbox(&id, &sandbox_env(&format!("session:{id}"), "tok"))
        .await
        .unwrap();
    client.deprovision_session_sandbox(&id).await.unwrap();
    assert!(table_exists(&table) && network_exists(&network));

    // No sandbox is left, but the second daemon still serves on them.
    assert!(first.stop().success());
    assert!(
        table_exists(&table),
        "the first stop removed the table another live daemon holds; its log:\n{}",
        first.log_text()
    );
    assert!(
        network_exists(&network),
        "the first stop removed the network another live daemon holds"
    );
    assert!(
        first
            .log_text()
            .contains("another live sandboxd of this instance holds them"),
        "{}",
        first.log_text()
    );
    drop(first);

    assert!(second.stop().success());
    assert!(
        !table_exists(&table),
        "inet {table} is left after the last stop"
    );
    assert!(
        !network_exists(&network),
        "{network} is left after the last stop; log:\n{}",
        second.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_instances_unused_network_and_table_are_removed_by_the_next_start() {
    if !engine_ready("a_sigkilled_instances_unused_network_and_table_are_removed_by_the_next_start")
    {
        return;
    }
    let _serial = ONE_AT_A_TIME.lock().await;
    let instance = format!("t17k{}", std::process::id());
    let network = format!("{instance}-sandboxd-egress");
    let id = unique_id("killed");
    let mut killed = daemon(&instance);
    let table = egress_table(&killed);
    let client = killed.client().await;
    client
        .ensure_session_sandbox(&id, &sandbox_env(&format!("session:{id}"), "tok"))
        .await
        .unwrap();
    client.deprovision_session_sandbox(&id).await.unwrap();
    killed.kill();
    assert!(table_exists(&table) && network_exists(&network));

    // A live daemon of another instance keeps its own, and takes these.
    let other = daemon(&format!("t17o{}", std::process::id()));
    let own_table = egress_table(&other);
    assert!(
        sandboxd_tests::wait_until(std::time::Duration::from_secs(60), || {
            !network_exists(&network) && !table_exists(&table)
        }),
        "the killed instance's network or table is left; the next daemon's log:\n{}",
        other.log_text()
    );
    assert!(table_exists(&own_table));
    // Whoever removed them (this daemon, or another test's daemon sweeping
    // at the same moment, which this one then leaves alone and says so),
    // a removal by this daemon says why it was allowed.
    let log = other.log_text();
    let removal = log.lines().find(|line| {
        line.contains(&format!("network={network}")) && line.contains("removed another instance")
    });
    if let Some(line) = removal {
        assert!(
            line.contains("its holder lock") && line.contains("was free"),
            "the removal does not say why:\n{log}"
        );
    }
    drop(killed);
}
