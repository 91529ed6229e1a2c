//! The docker tier's own hardening against the real engine on this
//! machine: the daemon's seccomp profile refuses, inside a real runner
//! container, what the process tier's filter refuses (the engine's default
//! profile, in Docker 20.10, lets `io_uring_setup` through), the container
//! still runs as before, and `status` says whether `[limits] disk` holds
//! the container's root file system on this engine, which is checked by
//! trying.
//!
//! The probes are the runner fixture's `--syscall-probe NAME`, run as
//! commands of the sandbox (the daemon's `exec`, an exec of the container:
//! under its seccomp profile). Gated like every docker test: without an
//! engine a loud SKIPPED line, or a failure under
//! `SANDBOXD_REQUIRE_DOCKER=1`. Every test uses ids of its own and
//! removes what it made, by label, even when it fails.

use std::time::Duration;

use sandboxd_client::{ProbeState, SandboxdClient, Scope};
use sandboxd_protocol::naming::{base_name, LABEL_SANDBOX_ID};
use sandboxd_tests::commands::{proof_of, read_all, request};
use sandboxd_tests::docker_image::{
    docker, docker_ok, docker_options, engine_ready, inspect, unique_id, volume_dir, Cleanup,
    TEST_IMAGE,
};
use sandboxd_tests::{eventually, sandbox_env, wait_until, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

/// A daemon on the docker tier with one running session sandbox.
async fn running_sandbox(id: &str, daemon: &TestDaemon) -> SandboxdClient {
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-hardening");
    client
        .ensure(Scope::Session, id, &env)
        .await
        .unwrap_or_else(|error| panic!("ensure {id}: {error}\n{}", daemon.log_text()));
    let running = eventually(WAIT, || {
        let client = client.clone();
        async move { client.probe(Scope::Session, id).await.ok() == Some(ProbeState::Running) }
    })
    .await;
    assert!(running, "the runner is not running\n{}", daemon.log_text());
    client
}

/// The errno the fixture's `--syscall-probe NAME` reports from inside the
/// sandbox's container (0: the call succeeded).
async fn syscall_errno(client: &SandboxdClient, id: &str, name: &str) -> i32 {
    let started = client
        .exec(
            Scope::Session,
            id,
            &request(&["/runner-fixture", "--syscall-probe", name]),
        )
        .await
        .unwrap_or_else(|error| panic!("exec of the {name} probe: {error}"));
    let command = sandboxd_client::CommandRef::Id(started.command_id);
    let (stdout, _) = read_all(
        client,
        id,
        &command,
        sandboxd_client::OutputStream::Stdout,
        WAIT,
    )
    .await;
    let proof = proof_of(client, id, &command, WAIT).await;
    assert_eq!(proof.exit_code, Some(0), "the {name} probe: {proof:?}");
    let stdout = String::from_utf8_lossy(&stdout);
    stdout
        .trim()
        .strip_prefix("errno ")
        .and_then(|errno| errno.parse().ok())
        .unwrap_or_else(|| panic!("the {name} probe said {stdout:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_attack_calls_are_refused_inside_a_runner_container() {
    let test = "kernel_attack_calls_are_refused_inside_a_runner_container";
    if !engine_ready(test) {
        return;
    }
    let id = unique_id("hard-seccomp");
    let _cleanup = Cleanup::new(&[&id]);
    let daemon = TestDaemon::start(docker_options(""));
    let client = running_sandbox(&id, &daemon).await;

    // Each would succeed, or fail with another errno, under the engine's
    // default profile of Docker 20.10 with no capabilities.
    let refused = [
        ("io_uring_setup", libc::EPERM),
        ("unshare-user", libc::EPERM),
        ("clone-user", libc::EPERM),
        ("bpf", libc::EPERM),
        ("perf_event_open", libc::EPERM),
        ("userfaultfd", libc::EPERM),
        ("keyctl", libc::EPERM),
        ("personality-no-aslr", libc::EPERM),
        ("clone3", libc::ENOSYS),
    ];
    for (name, errno) in refused {
        assert_eq!(
            syscall_errno(&client, &id, name).await,
            errno,
            "{name} inside the container"
        );
    }

    // The container works as before: ordinary calls, the personality
    // query, the runner still up with its files written.
    for name in ["getpid", "personality-query"] {
        assert_eq!(syscall_errno(&client, &id, name).await, 0, "{name}");
    }
    let workspace = volume_dir(&format!("{}-workspace", base_name(Scope::Session, &id)));
    assert!(
        wait_until(WAIT, || workspace.join("pid").is_file()),
        "the runner wrote no pid file"
    );
    assert_eq!(
        client.probe(Scope::Session, &id).await.unwrap(),
        ProbeState::Running
    );

    // The profile is the daemon's, given with the container.
    let container = inspect("container", &base_name(Scope::Session, &id)).expect("the container");
    let options = container["HostConfig"]["SecurityOpt"].to_string();
    assert!(options.contains("seccomp="), "{options}");
    assert!(options.contains("io_uring_setup"), "{options}");
    let status = client.status().await.unwrap();
    let seccomp = status
        .isolation
        .iter()
        .find(|feature| feature.name == "seccomp")
        .unwrap_or_else(|| panic!("no seccomp feature: {:?}", status.isolation));
    assert!(seccomp.in_force, "{seccomp:?}");
    assert!(seccomp.detail.contains("io_uring"), "{seccomp:?}");
}

/// Whether this engine takes a size limit on a container's root file
/// system, found by trying: a create (never started) that asks for one.
fn engine_takes_a_root_size(id: &str) -> Result<(), String> {
    let name = format!("{}-size-probe", base_name(Scope::Session, id));
    let label = format!("{LABEL_SANDBOX_ID}={id}");
    let created = docker(&[
        "create",
        "--name",
        &name,
        "--label",
        &label,
        "--storage-opt",
        "size=1G",
        TEST_IMAGE,
    ]);
    let _ = docker(&["rm", "-f", &name]);
    if created.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&created.stderr).trim().to_string())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_whether_the_disk_limit_holds_on_this_engine() {
    let test = "status_says_whether_the_disk_limit_holds_on_this_engine";
    if !engine_ready(test) {
        return;
    }
    let id = unique_id("hard-disk");
    let _cleanup = Cleanup::new(&[&id]);
    let mut options = docker_options("");
    // After the `[docker]` table docker_options ends with.
    options.extra_toml.push_str("\n[limits]\ndisk = \"256m\"\n");
    let daemon = TestDaemon::start(options);
    let client = running_sandbox(&id, &daemon).await;

    let status = client.status().await.unwrap();
    let disk = status
        .isolation
        .iter()
        .find(|feature| feature.name == "disk-limit")
        .unwrap_or_else(|| panic!("no disk-limit feature: {:?}", status.isolation));
    let container = inspect("container", &base_name(Scope::Session, &id)).expect("the container");
    let storage = &container["HostConfig"]["StorageOpt"];
    match engine_takes_a_root_size(&id) {
        Ok(()) => {
            assert!(disk.in_force, "the engine takes a size: {disk:?}");
            assert_eq!(storage["size"], (256_u64 << 20).to_string(), "{storage}");
        }
        Err(refusal) => {
            // This machine's engine (fuse-overlayfs): "--storage-opt is not supported".
            let driver = docker_ok(&["info", "--format", "{{.Driver}}"]);
            assert!(
                !disk.in_force,
                "the engine refused a size ({refusal}): {disk:?}"
            );
            assert!(
                disk.detail.contains(&driver),
                "names the driver {driver}: {disk:?}"
            );
            assert!(
                storage.is_null() || storage.as_object().is_some_and(|map| map.is_empty()),
                "no size asked of an engine that refuses one: {storage}"
            );
        }
    }
    // Either way the workspace volume is unlimited, and status says so.
    assert!(
        disk.detail.contains("workspace volume is not limited"),
        "{disk:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_container_made_without_the_profile_is_recreated_with_it() {
    let test = "a_stopped_container_made_without_the_profile_is_recreated_with_it";
    if !engine_ready(test) {
        return;
    }
    let id = unique_id("hard-old");
    let _cleanup = Cleanup::new(&[&id]);
    let daemon = TestDaemon::start(docker_options(""));
    let client = running_sandbox(&id, &daemon).await;
    let name = base_name(Scope::Session, &id);

    // What an earlier daemon (before the profile) left: the same container,
    // labels and workspace, under the engine's default profile, stopped.
    let made = inspect("container", &name).expect("the container");
    docker_ok(&["rm", "-f", &name]);
    let mut args: Vec<String> = ["create", "--name", &name, "--user", "65534:65534"]
        .map(str::to_string)
        .to_vec();
    for (label, value) in made["Config"]["Labels"].as_object().expect("labels") {
        args.extend([
            "--label".to_string(),
            format!("{label}={}", value.as_str().unwrap()),
        ]);
    }
    let volume = format!("{name}-workspace");
    args.extend(["-v".to_string(), format!("{volume}:/workspace")]);
    args.extend([
        "--network".to_string(),
        "none".to_string(),
        TEST_IMAGE.to_string(),
    ]);
    let old = docker_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());

    let env = sandbox_env(&format!("session:{id}"), "tok-hardening");
    client
        .ensure(Scope::Session, &id, &env)
        .await
        .unwrap_or_else(|error| panic!("ensure {id}: {error}\n{}", daemon.log_text()));
    let now = inspect("container", &name).expect("the container");
    assert_ne!(now["Id"].as_str(), Some(old.as_str()), "not recreated");
    assert!(
        now["HostConfig"]["SecurityOpt"]
            .to_string()
            .contains("io_uring_setup"),
        "{}",
        now["HostConfig"]
    );
    let running = eventually(WAIT, || {
        let client = client.clone();
        let id = id.clone();
        async move { client.probe(Scope::Session, &id).await.ok() == Some(ProbeState::Running) }
    })
    .await;
    assert!(running, "{}", daemon.log_text());
    assert_eq!(
        syscall_errno(&client, &id, "io_uring_setup").await,
        libc::EPERM
    );
}
