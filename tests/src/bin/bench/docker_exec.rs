//! The docker commands row (x4, with `--only-commands` where an engine
//! answers): `exec` of a short command in a docker-tier sandbox to its
//! proof, through the client library, against the same exec done straight
//! on the Engine API the way `docker exec` does it (create, start with the
//! output attached and read to its end, inspect for the exit code), on the
//! same container, the two taking turns so drift in the engine hits both.
//!
//! The command is the runner image's own program in its one-shot probe
//! mode (`runner-fixture --probe tcp 127.0.0.1:9`: one refused connect on
//! the container's loopback, a line, exit): the image is built from local
//! files and has no `/bin/true`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::Docker;
use futures::StreamExt;
use sandboxd_client::{ExecRequest, SandboxdClient, Scope};
use sandboxd_protocol::naming::base_name;

use crate::report::{Goal, Row};
use crate::rows::sandbox_env;
use crate::setup::Binaries;
use crate::stats::Samples;

const ID: &str = "bench-docker-exec";
/// The command both sides run.
const ARGV: [&str; 4] = ["/runner-fixture", "--probe", "tcp", "127.0.0.1:9"];

pub struct DockerExecFigures {
    pub sandboxd: Samples,
    pub engine: Samples,
}

/// `count` execs of each kind, in turn, on one docker-tier sandbox.
pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    count: usize,
) -> anyhow::Result<DockerExecFigures> {
    let (docker, mut daemon) =
        crate::docker::engine_and_daemon(dir, binaries, "docker-exec-").await?;
    let client = SandboxdClient::connect(&daemon.socket)
        .await
        .context("connect to the docker-tier daemon")?
        .with_deadline(Duration::from_secs(60));
    let result = match client.ensure(Scope::Session, ID, &sandbox_env(ID)).await {
        Ok(_) => rounds(&docker, &client, count).await,
        Err(error) => Err(anyhow::anyhow!("ensure {ID}: {error}")),
    };
    let _ = client.deprovision(Scope::Session, ID, false).await;
    drop(client);
    daemon.stop()?;
    result
}

async fn rounds(
    docker: &Docker,
    client: &SandboxdClient,
    count: usize,
) -> anyhow::Result<DockerExecFigures> {
    let container = base_name(Scope::Session, ID);
    let user = docker
        .inspect_container(&container, None)
        .await?
        .config
        .and_then(|config| config.user)
        .unwrap_or_default();
    let request = ExecRequest {
        argv: ARGV.iter().map(|arg| arg.to_string()).collect(),
        ..ExecRequest::default()
    };
    let (mut sandboxd, mut engine) = (Samples::with_capacity(count), Samples::with_capacity(count));
    // The first rounds warm both paths up.
    for round in 0..count + 3 {
        let engine_first = round % 2 == 1;
        if engine_first {
            let took = engine_exec(docker, &container, &user).await?;
            push_after_warmup(&mut engine, round, took);
        }
        let took = crate::commands::exec_to_proof(client, ID, &request).await?;
        push_after_warmup(&mut sandboxd, round, took);
        if !engine_first {
            let took = engine_exec(docker, &container, &user).await?;
            push_after_warmup(&mut engine, round, took);
        }
    }
    Ok(DockerExecFigures { sandboxd, engine })
}

fn push_after_warmup(samples: &mut Samples, round: usize, took: Duration) {
    if round >= 3 {
        samples.push(took);
    }
}

/// Create, start attached and read to the end, inspect: `docker exec`.
async fn engine_exec(docker: &Docker, container: &str, user: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions::<&str> {
                cmd: Some(ARGV.to_vec()),
                user: Some(user),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..CreateExecOptions::default()
            },
        )
        .await?;
    match docker
        .start_exec(&exec.id, Some(StartExecOptions::default()))
        .await?
    {
        StartExecResults::Attached { mut output, .. } => {
            while let Some(chunk) = output.next().await {
                chunk?;
            }
        }
        StartExecResults::Detached => bail!("the engine started the exec detached"),
    }
    let inspected = docker.inspect_exec(&exec.id).await?;
    let took = started.elapsed();
    if inspected.running == Some(true) || inspected.exit_code.is_none() {
        bail!("the engine's exec had no exit code after its output ended");
    }
    Ok(took)
}

pub fn rows(figures: &DockerExecFigures) -> Vec<Row> {
    let row = |what: &str, value: f64, baseline: f64| Row {
        row: "x4",
        what: format!("docker tier: exec of a probe to its proof {what}"),
        unit: "ms",
        value: value / 1e3,
        baseline_what: format!("Engine API create+start+inspect {what}"),
        baseline: Some(baseline / 1e3),
        goal: Goal::RatioAtMost(1.1),
    };
    vec![
        row("p50", figures.sandboxd.p50(), figures.engine.p50()),
        row("p99", figures.sandboxd.p99(), figures.engine.p99()),
    ]
}
