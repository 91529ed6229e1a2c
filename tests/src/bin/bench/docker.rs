//! The docker row: ensure of a new container through sandboxd, against the
//! same create + start done straight on the Engine API (bollard, as the
//! daemon uses it), against `docker run -d` (the seed's CLI path). Same
//! image, same container settings, one of each per round, taking turns at
//! going first, so drift in the engine hits all alike.
//!
//! The Engine API baseline is taken twice: on Docker's default `bridge`
//! network, and on a network the bench makes as the daemon makes its own
//! (a bridge of a chosen name with inter-container communication off, see
//! the docker tier's `egress_network`), which is where sandboxd's runners
//! go on every posture. The engine's work to join a user-defined network
//! (its embedded DNS above all) is the engine's, not the daemon's: the
//! second baseline is what sandboxd's own cost is measured against, and
//! `docker run` joins that network too.
//!
//! The raw and CLI containers carry labels of the same count and size as
//! sandboxd's under other keys (`bench.sandboxd/…`), so the docker driver
//! never mistakes them for its own; all are removed, volumes too.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, MountVolumeOptions, RestartPolicy,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, ListVolumesOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder,
};
use bollard::Docker;
use sandboxd_client::{SandboxdClient, Scope};

use crate::report::{Goal, Row};
use crate::rows::sandbox_env;
use crate::setup::{Binaries, Daemon};
use crate::stats::Samples;

/// The image `.ci/build-test-image.sh` builds (the runner fixture).
pub const IMAGE: &str = "sandboxd-test-runner:latest";
/// The label that marks the bench's own raw and CLI containers.
const BENCH_LABEL: &str = "bench.sandboxd/run";

/// The three sets of latencies.
pub struct DockerFigures {
    pub sandboxd: Samples,
    pub api: Samples,
    pub cli: Samples,
    /// The Engine API on a network made as the daemon's is.
    pub api_own_network: Samples,
}

/// Why the row cannot be measured here, if it cannot: no engine, no image.
pub async fn unavailable() -> Option<String> {
    let docker = match Docker::connect_with_local_defaults() {
        Ok(docker) => docker,
        Err(error) => return Some(format!("no Docker engine client: {error}")),
    };
    let docker =
        match tokio::time::timeout(Duration::from_secs(3), docker.negotiate_version()).await {
            Ok(Ok(docker)) => docker,
            Ok(Err(error)) => return Some(format!("no Docker engine answers: {error}")),
            Err(_) => return Some("no Docker engine answers within 3 s".to_string()),
        };
    if docker.inspect_image(IMAGE).await.is_err() {
        return Some(format!(
            "image {IMAGE} is not on the engine (build it: cargo build --workspace --bins && \
             bash .ci/build-test-image.sh)"
        ));
    }
    if Command::new("docker")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_or(true, |status| !status.success())
    {
        return Some("the docker CLI is not installed or cannot reach the engine".to_string());
    }
    None
}

/// The engine, and a docker-tier daemon of its own on the test image.
pub async fn engine_and_daemon(
    dir: &Path,
    binaries: &Binaries,
    prefix: &str,
) -> anyhow::Result<(Docker, Daemon)> {
    let docker = Docker::connect_with_local_defaults()?
        .negotiate_version()
        .await?;
    let daemon = Daemon::start_with(
        dir,
        prefix,
        binaries,
        &format!("driver = \"docker\"\nrunner_image = \"{IMAGE}\"\n"),
    )?;
    Ok((docker, daemon))
}

/// Measures `count` rounds of the three ways to get a new running container.
pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    count: usize,
) -> anyhow::Result<DockerFigures> {
    let (docker, mut daemon) = engine_and_daemon(dir, binaries, "docker-").await?;
    let run = std::process::id().to_string();
    let client = SandboxdClient::connect(&daemon.socket)
        .await
        .context("connect to the docker-tier daemon")?
        .with_deadline(Duration::from_secs(60));
    let network = format!("sbxbench-{run}");
    let result = match make_network(&docker, &network, &run).await {
        Ok(()) => rounds(&docker, &client, &run, &network, count).await,
        Err(error) => Err(error),
    };
    // Clean up whatever happened: sandboxd's containers through sandboxd
    // (its volumes go with them), the bench's own by label.
    for i in 0..count {
        let _ = client
            .deprovision(Scope::Session, &sandbox_id(&run, i), false)
            .await;
    }
    drop(client);
    let _ = daemon.stop();
    remove_labelled(&docker, &run).await;
    let _ = docker.remove_network(&network).await;
    result
}

/// A network as the daemon makes its own: a bridge of a chosen name, with
/// inter-container communication off.
async fn make_network(docker: &Docker, name: &str, run: &str) -> anyhow::Result<()> {
    let bridge = format!("sbxb{}", &run[run.len().saturating_sub(8)..]);
    docker
        .create_network(bollard::models::NetworkCreateRequest {
            name: name.to_string(),
            driver: Some("bridge".to_string()),
            options: Some(HashMap::from([
                ("com.docker.network.bridge.name".to_string(), bridge),
                (
                    "com.docker.network.bridge.enable_icc".to_string(),
                    "false".to_string(),
                ),
            ])),
            labels: Some(HashMap::from([(BENCH_LABEL.to_string(), run.to_string())])),
            ..Default::default()
        })
        .await
        .with_context(|| format!("create the bench's network {name}"))?;
    Ok(())
}

fn sandbox_id(run: &str, i: usize) -> String {
    format!("bench-docker-{run}-{i}")
}

async fn rounds(
    docker: &Docker,
    client: &SandboxdClient,
    run: &str,
    network: &str,
    count: usize,
) -> anyhow::Result<DockerFigures> {
    // One of each first, unrecorded: the engine's caches, the CLI's binary.
    let mut figures = DockerFigures {
        sandboxd: Samples::default(),
        api: Samples::default(),
        cli: Samples::default(),
        api_own_network: Samples::default(),
    };
    for i in 0..=count {
        let record = i > 0;
        let id = if record {
            sandbox_id(run, i - 1)
        } else {
            format!("bench-docker-{run}-warmup")
        };
        // The three take turns at going first: a container just started
        // keeps the engine busy for a moment, which the next one pays.
        for way in (0..4).map(|k| (k + i) % 4) {
            let start = Instant::now();
            match way {
                0 => {
                    let report = client
                        .ensure_session_sandbox(&id, &sandbox_env(&id))
                        .await
                        .with_context(|| format!("ensure {id} through the docker tier"))?;
                    if !report.created {
                        bail!("ensure of new container sandbox {id} took the fast path");
                    }
                }
                1 | 3 => {
                    let name = format!("sbxbench-{run}-api{way}-{i}");
                    let mut body = container_body(&name, run, &sandbox_env(&id));
                    if way == 3 {
                        if let Some(host) = body.host_config.as_mut() {
                            host.network_mode = Some(network.to_string());
                        }
                    }
                    let options = CreateContainerOptionsBuilder::new().name(&name).build();
                    let created = docker.create_container(Some(options), body).await?;
                    docker.start_container(&created.id, None).await?;
                }
                _ => {
                    let name = format!("sbxbench-{run}-cli-{i}");
                    let output = tokio::process::Command::new("docker")
                        .args(cli_args(&name, run, network, &sandbox_env(&id)))
                        .stdin(Stdio::null())
                        .output()
                        .await?;
                    if !output.status.success() {
                        bail!(
                            "docker run failed: {}",
                            String::from_utf8_lossy(&output.stderr).trim()
                        );
                    }
                }
            }
            let elapsed = start.elapsed();
            if record {
                [
                    &mut figures.sandboxd,
                    &mut figures.api,
                    &mut figures.cli,
                    &mut figures.api_own_network,
                ][way]
                    .push(elapsed);
            }
        }
        if !record {
            let _ = client.deprovision(Scope::Session, &id, false).await;
        }
    }
    Ok(figures)
}

/// The labels: as many as sandboxd puts on a container, of the same sizes.
fn labels(run: &str, env: &sandboxd_client::SandboxEnv) -> HashMap<String, String> {
    HashMap::from([
        (BENCH_LABEL.to_string(), run.to_string()),
        ("bench.sandboxd/scope".to_string(), "session".to_string()),
        (
            "bench.sandboxd/sandbox-id".to_string(),
            env.task_queue.clone(),
        ),
        ("bench.sandboxd/generation".to_string(), "1".to_string()),
        ("bench.sandboxd/token-sha256".to_string(), "0".repeat(64)),
        (
            "bench.sandboxd/task-queue".to_string(),
            env.task_queue.clone(),
        ),
        (
            "bench.sandboxd/caller-class".to_string(),
            env.caller_class.clone(),
        ),
    ])
}

fn runner_env(env: &sandboxd_client::SandboxEnv) -> Vec<String> {
    vec![
        "MODE=local".to_string(),
        format!("STIGMER_TASK_QUEUE={}", env.task_queue),
        "WORKSPACE_ROOT_DIR=/workspace".to_string(),
        "HOME=/workspace".to_string(),
        format!("STIGMER_TOKEN={}", env.stigmer_token.expose()),
    ]
}

/// The create request sandboxd's docker driver sends with its default
/// settings (see daemon/src/drivers/docker/spec.rs).
fn container_body(name: &str, run: &str, env: &sandboxd_client::SandboxEnv) -> ContainerCreateBody {
    let memory = 2 * 1024 * 1024 * 1024;
    ContainerCreateBody {
        image: Some(IMAGE.to_string()),
        env: Some(runner_env(env)),
        labels: Some(labels(run, env)),
        user: Some("65534:65534".to_string()),
        hostname: Some(name.chars().take(20).collect()),
        working_dir: Some("/workspace".to_string()),
        stop_signal: Some("SIGTERM".to_string()),
        stop_timeout: Some(10),
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        open_stdin: Some(false),
        tty: Some(false),
        host_config: Some(HostConfig {
            init: Some(true),
            cap_drop: Some(vec!["ALL".to_string()]),
            security_opt: Some(vec!["no-new-privileges".to_string()]),
            memory: Some(memory),
            memory_swap: Some(memory),
            nano_cpus: Some(2_000_000_000),
            pids_limit: Some(512),
            network_mode: Some("bridge".to_string()),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            mounts: Some(vec![Mount {
                target: Some("/workspace".to_string()),
                source: Some(format!("{name}-workspace")),
                typ: Some(MountType::VOLUME),
                read_only: Some(false),
                volume_options: Some(MountVolumeOptions {
                    no_copy: Some(false),
                    labels: Some(HashMap::from([(BENCH_LABEL.to_string(), run.to_string())])),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `docker run -d` with the same settings, on `network` (made as the
/// daemon's own is, where sandboxd's containers go).
fn cli_args(
    name: &str,
    run: &str,
    network: &str,
    env: &sandboxd_client::SandboxEnv,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "-d",
        "--name",
        name,
        "--user",
        "65534:65534",
        "--workdir",
        "/workspace",
        "--stop-signal",
        "SIGTERM",
        "--stop-timeout",
        "10",
        "--init",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--memory",
        "2g",
        "--memory-swap",
        "2g",
        "--cpus",
        "2",
        "--pids-limit",
        "512",
        "--network",
        network,
        "--restart",
        "no",
    ]
    .map(str::to_string)
    .to_vec();
    args.push("--hostname".to_string());
    args.push(name.chars().take(20).collect());
    args.push("--mount".to_string());
    args.push(format!(
        "type=volume,src={name}-workspace,dst=/workspace,volume-label={BENCH_LABEL}={run}"
    ));
    for (key, value) in labels(run, env) {
        args.push("--label".to_string());
        args.push(format!("{key}={value}"));
    }
    for var in runner_env(env) {
        args.push("--env".to_string());
        args.push(var);
    }
    args.push(IMAGE.to_string());
    args
}

/// Removes the bench's own containers and volumes of this run.
async fn remove_labelled(docker: &Docker, run: &str) {
    let filter = HashMap::from([("label".to_string(), vec![format!("{BENCH_LABEL}={run}")])]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filter)
        .build();
    if let Ok(containers) = docker.list_containers(Some(options)).await {
        for container in containers {
            if let Some(id) = container.id {
                let options = RemoveContainerOptionsBuilder::new()
                    .force(true)
                    .v(true)
                    .build();
                let _ = docker.remove_container(&id, Some(options)).await;
            }
        }
    }
    let options = ListVolumesOptionsBuilder::new().filters(&filter).build();
    if let Ok(volumes) = docker.list_volumes(Some(options)).await {
        for volume in volumes.volumes.unwrap_or_default() {
            let options = RemoveVolumeOptionsBuilder::new().force(true).build();
            let _ = docker.remove_volume(&volume.name, Some(options)).await;
        }
    }
}

/// The docker row's figures as table rows.
pub fn rows(figures: &DockerFigures) -> Vec<Row> {
    vec![
        Row {
            row: "docker",
            what: "ensure new container p50".into(),
            unit: "ms",
            value: figures.sandboxd.p50() / 1e3,
            baseline_what: "Engine API create+start p50, on a network made as the daemon's".into(),
            baseline: Some(figures.api_own_network.p50() / 1e3),
            goal: Goal::RatioAtMost(1.05),
        },
        Row {
            row: "docker",
            what: "ensure new container p50".into(),
            unit: "ms",
            value: figures.sandboxd.p50() / 1e3,
            baseline_what: "Engine API create+start p50, on the default bridge".into(),
            baseline: Some(figures.api.p50() / 1e3),
            goal: Goal::Info,
        },
        Row {
            row: "docker",
            what: "ensure new container p50".into(),
            unit: "ms",
            value: figures.sandboxd.p50() / 1e3,
            baseline_what: "docker run -d p50".into(),
            baseline: Some(figures.cli.p50() / 1e3),
            goal: Goal::RatioAtMost(1.0),
        },
        Row {
            row: "docker",
            what: "ensure new container p99".into(),
            unit: "ms",
            value: figures.sandboxd.p99() / 1e3,
            baseline_what: "Engine API create+start p99".into(),
            baseline: Some(figures.api.p99() / 1e3),
            goal: Goal::Info,
        },
    ]
}
