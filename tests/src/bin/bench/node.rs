//! The node row: ensure of a new sandbox and the fast path
//! through the Node package (`clients/node`, the Rust client library
//! bound with napi-rs) against the same calls through the Rust client, on
//! one daemon in the same run; and, for context, the seed's in-process
//! `local-process` ensure (mkdir + `spawn`), which isolates nothing.
//!
//! The Node side is `clients/node/bench/calls.mjs`, run once per chunk;
//! it times each call inside the process, so Node's start-up is not in
//! the figures. Rust and Node take turns, chunk by chunk, so both see the
//! same load. The addon is the cdylib next to the `sandboxd` binary
//! measured (`cargo build --release --workspace --bins --lib`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sandboxd_client::SandboxdClient;

use crate::report::{Goal, Row};
use crate::rows::{connect, sandbox_env};
use crate::setup::{Binaries, Daemon};
use crate::stats::Samples;

/// Chunks each side's samples are taken in, alternating.
const CHUNKS: usize = 4;

pub struct NodeFigures {
    pub rust_new: Samples,
    pub node_new: Samples,
    pub rust_fast: Samples,
    pub node_fast: Samples,
    pub seed_spawn: Samples,
}

/// The addon beside the daemon binary, refused when missing.
fn addon(binaries: &Binaries) -> anyhow::Result<PathBuf> {
    let dir = binaries
        .sandboxd
        .parent()
        .context("the sandboxd binary has no directory")?;
    let path = dir.join("libsandboxd_node.so");
    if !path.is_file() {
        bail!(
            "{} not found: build the Node package's addon with the binaries \
             (`cargo build --release --workspace --bins --lib`)",
            path.display()
        );
    }
    Ok(path)
}

fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/node")
}

/// Runs `calls.mjs` and returns its samples.
fn node_calls(socket: &Path, addon: &Path, args: &[&str]) -> anyhow::Result<Samples> {
    let output = Command::new("node")
        .arg(package_dir().join("bench").join("calls.mjs"))
        .args(args)
        .env("SANDBOXD_SOCKET", socket)
        .env("SANDBOXD_NODE_ADDON", addon)
        .output()
        .context("run node (Node.js 20 or later must be on PATH)")?;
    if !output.status.success() {
        bail!(
            "node bench/calls.mjs {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let line: serde_json::Value =
        serde_json::from_str(text.trim()).with_context(|| format!("calls.mjs printed {text:?}"))?;
    let mut samples = Samples::default();
    for value in line["samples_us"].as_array().context("no samples_us")? {
        let micros = value.as_f64().context("a sample is no number")?;
        samples.push(Duration::from_nanos((micros * 1000.0) as u64));
    }
    Ok(samples)
}

async fn rust_new(client: &SandboxdClient, prefix: &str, count: usize) -> anyhow::Result<Samples> {
    let mut samples = Samples::with_capacity(count);
    let ids: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
    for id in &ids {
        let start = Instant::now();
        client.ensure_session_sandbox(id, &sandbox_env(id)).await?;
        samples.push(start.elapsed());
    }
    for id in &ids {
        client.deprovision_session_sandbox(id).await?;
    }
    Ok(samples)
}

async fn rust_fast(client: &SandboxdClient, id: &str, count: usize) -> anyhow::Result<Samples> {
    let env = sandbox_env(id);
    for _ in 0..=100 {
        client.ensure_session_sandbox(id, &env).await?;
    }
    let mut samples = Samples::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        client.ensure_session_sandbox(id, &env).await?;
        samples.push(start.elapsed());
    }
    client.deprovision_session_sandbox(id).await?;
    Ok(samples)
}

/// Starts a daemon in `dir` and measures both sides, `new` new sandboxes
/// and `fast` fast paths each.
pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    new: usize,
    fast: usize,
) -> anyhow::Result<NodeFigures> {
    let addon = addon(binaries)?;
    let mut daemon = Daemon::start_with(dir, "node-", binaries, "driver = \"local-process\"\n")?;
    let client = connect(&daemon.socket).await?;
    let mut figures = NodeFigures {
        rust_new: Samples::default(),
        node_new: Samples::default(),
        rust_fast: Samples::default(),
        node_fast: Samples::default(),
        seed_spawn: Samples::default(),
    };
    let (new_chunk, fast_chunk) = (new.div_ceil(CHUNKS), fast.div_ceil(CHUNKS));
    for chunk in 0..CHUNKS {
        figures
            .rust_new
            .extend(rust_new(&client, &format!("rs-new-{chunk}"), new_chunk).await?);
        let (count, prefix) = (new_chunk.to_string(), format!("js-new-{chunk}"));
        figures.node_new.extend(node_calls(
            &daemon.socket,
            &addon,
            &["new", &count, &prefix],
        )?);
        figures
            .rust_fast
            .extend(rust_fast(&client, &format!("rs-fast-{chunk}"), fast_chunk).await?);
        let (count, id) = (fast_chunk.to_string(), format!("js-fast-{chunk}"));
        figures
            .node_fast
            .extend(node_calls(&daemon.socket, &addon, &["fast", &count, &id])?);
    }
    let runner = binaries.runner.display().to_string();
    figures.seed_spawn = node_calls(&daemon.socket, &addon, &["seed", &new.to_string(), &runner])?;
    daemon.stop()?;
    Ok(figures)
}

pub fn rows(figures: &NodeFigures) -> Vec<Row> {
    vec![
        Row {
            row: "n1",
            what: "ensure new sandbox through the Node package (p50)".to_string(),
            unit: "µs",
            value: figures.node_new.p50(),
            baseline_what: "the same through the Rust client".to_string(),
            baseline: Some(figures.rust_new.p50()),
            goal: Goal::RatioAtMost(1.2),
        },
        Row {
            row: "n2",
            what: "ensure fast path through the Node package (p50)".to_string(),
            unit: "µs",
            value: figures.node_fast.p50(),
            baseline_what: "the same through the Rust client".to_string(),
            baseline: Some(figures.rust_fast.p50()),
            goal: Goal::RatioAtMost(2.0),
        },
        Row {
            row: "n3",
            what: "ensure new sandbox through the Node package (p50)".to_string(),
            unit: "µs",
            value: figures.node_new.p50(),
            baseline_what: "the seed's local-process ensure (mkdir + spawn, no isolation)"
                .to_string(),
            baseline: Some(figures.seed_spawn.p50()),
            goal: Goal::Info,
        },
    ]
}
