//! Two daemons on one Docker engine, each with its own instance name (own
//! socket, own state dir): neither lists, adopts or removes the other's
//! containers, and their names cannot collide. The default instance keeps
//! today's names and labels. Skipped loudly without an engine, as the
//! other docker tests are.

use sandboxd_client::{ProbeState, SandboxInfo, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::docker_image::{
    container_status, containers_of, docker_options, engine_ready, inspect, unique_id, Cleanup,
};
use sandboxd_tests::{sandbox_env, Options, TestDaemon};

const INSTANCE_LABEL: &str = "stigmer.ai/instance";

fn named(instance: &str) -> Options {
    let mut options = docker_options("");
    options.extra_toml = format!("instance = \"{instance}\"\n{}", options.extra_toml);
    options
}

fn listed<'a>(sandboxes: &'a [SandboxInfo], id: &str) -> Vec<&'a SandboxInfo> {
    sandboxes.iter().filter(|info| info.id == id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_engine_never_see_or_touch_each_others_containers() {
    let test = "two_instances_on_one_engine_never_see_or_touch_each_others_containers";
    if !engine_ready(test) {
        return;
    }
    let id = unique_id("instances");
    let _cleanup = Cleanup::new(&[&id]);
    let env = sandbox_env(&format!("session:{id}"), "tok");
    let default_name = base_name(Scope::Session, &id);
    let blue_name = format!("blue-{default_name}");

    let mut first = TestDaemon::start(docker_options(""));
    let blue = TestDaemon::start(named("blue"));
    let (a, b) = (first.client().await, blue.client().await);

    // The default instance: today's name, no instance label.
    assert!(a.ensure_session_sandbox(&id, &env).await.unwrap().created);
    let container = inspect("container", &default_name).expect("the default instance's container");
    assert!(
        container["Config"]["Labels"].get(INSTANCE_LABEL).is_none(),
        "the default instance keeps today's labels: {}",
        container["Config"]["Labels"]
    );
    // Blue does not see it, and makes its own under its own name.
    assert_eq!(
        b.probe(Scope::Session, &id).await.unwrap(),
        ProbeState::Absent
    );
    assert!(listed(&b.list(None).await.unwrap(), &id).is_empty());
    assert!(b.ensure_session_sandbox(&id, &env).await.unwrap().created);
    let container = inspect("container", &blue_name).expect("blue's container");
    assert_eq!(container["Config"]["Labels"][INSTANCE_LABEL], "blue");
    assert_eq!(containers_of(&id).len(), 2);
    assert_eq!(listed(&a.list(None).await.unwrap(), &id).len(), 1);
    assert_eq!(listed(&b.list(None).await.unwrap(), &id).len(), 1);
    // describe and list name the container as the engine knows it.
    assert_eq!(
        b.describe(Scope::Session, &id).await.unwrap().name,
        blue_name
    );
    assert_eq!(listed(&b.list(None).await.unwrap(), &id)[0].name, blue_name);
    assert_eq!(
        a.describe(Scope::Session, &id).await.unwrap().name,
        default_name
    );

    // Blue's deprovision removes blue's, and only blue's.
    assert!(
        b.deprovision_session_sandbox(&id)
            .await
            .unwrap()
            .was_present
    );
    assert_eq!(container_status(&blue_name), None);
    assert_eq!(container_status(&default_name).as_deref(), Some("running"));

    // A restarted default daemon re-adopts its own container and not blue's.
    assert!(b.ensure_session_sandbox(&id, &env).await.unwrap().created);
    first.stop();
    drop(first);
    let again = TestDaemon::start(docker_options(""));
    let a = again.client().await;
    let mine = a.list(None).await.unwrap();
    let mine = listed(&mine, &id);
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0].state, ProbeState::Running);
    assert!(
        a.deprovision_session_sandbox(&id)
            .await
            .unwrap()
            .was_present
    );
    assert_eq!(container_status(&default_name), None);
    assert_eq!(container_status(&blue_name).as_deref(), Some("running"));
    assert_eq!(
        b.probe(Scope::Session, &id).await.unwrap(),
        ProbeState::Running
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_instance_name_is_refused_at_start() {
    let mut daemon = TestDaemon::prepare(named("Not_Valid"));
    daemon.launch();
    let status = daemon
        .wait_exit(std::time::Duration::from_secs(20))
        .expect("the daemon exits");
    assert_eq!(status.code(), Some(2));
    assert!(
        daemon.log_text().contains("instance 'Not_Valid'"),
        "{}",
        daemon.log_text()
    );
}
