//! The peer row: sandboxd's ensure of a new sandbox and its
//! burst rate against the seed's own `local-process` driver, which spawns
//! each runner in-process and isolates nothing (`bench/peer.mjs`, written
//! from the seed's logic). Run only when `node` is on PATH. The peer's
//! ensure is timed inside Node (no process start in it); sandboxd's goes
//! through its RPC, with a uid, cgroups and egress membership per sandbox.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::report::{Goal, Row};
use crate::stats::Samples;

/// The peer's figures: serial new sandboxes, and one burst's wall time.
pub struct PeerFigures {
    pub new: Samples,
    pub burst: Duration,
    pub burst_count: usize,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/bench/peer.mjs")
}

/// Why the row cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    match Command::new("node").arg("--version").output() {
        Ok(output) if output.status.success() => None,
        Ok(output) => Some(format!("node --version failed ({})", output.status)),
        Err(error) => Some(format!("node is not on PATH: {error}")),
    }
}

fn run(mode: &str, count: usize, runner: &Path, dir: &Path) -> anyhow::Result<serde_json::Value> {
    let root = dir.join(format!("peer-{mode}"));
    let output = Command::new("node")
        .arg(script())
        .args([mode, &count.to_string()])
        .arg(runner)
        .arg(&root)
        .output()
        .context("run node bench/peer.mjs")?;
    if !output.status.success() {
        bail!(
            "node bench/peer.mjs {mode} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(text.trim()).with_context(|| format!("peer.mjs printed {text:?}"))
}

/// `serial` new sandboxes one at a time, then a burst of `burst`, through
/// the peer; `runner` is the bench's runner, `dir` the bench's directory.
pub fn measure(
    runner: &Path,
    dir: &Path,
    serial: usize,
    burst: usize,
) -> anyhow::Result<PeerFigures> {
    let line = run("new", serial, runner, dir)?;
    let mut new = Samples::with_capacity(serial);
    for value in line["samples_us"].as_array().context("no samples_us")? {
        let micros = value.as_f64().context("a sample is no number")?;
        new.push(Duration::from_nanos((micros * 1000.0) as u64));
    }
    let line = run("burst", burst, runner, dir)?;
    let seconds = line["seconds"].as_f64().context("no seconds")?;
    Ok(PeerFigures {
        new,
        burst: Duration::from_secs_f64(seconds),
        burst_count: burst,
    })
}

/// sandboxd's row (c) p50 and row (d) rate against the peer's; the goal is
/// sandboxd at least 1.5× faster on both.
pub fn rows(peer: &PeerFigures, sandboxd_new: &Samples, sandboxd_rate: f64) -> Vec<Row> {
    let peer_rate = peer.burst_count as f64 / peer.burst.as_secs_f64();
    vec![
        Row {
            row: "peer",
            what: "ensure new sandbox p50 (row c)".into(),
            unit: "µs",
            value: sandboxd_new.p50(),
            baseline_what: "the seed's local-process driver (Node, in-process) p50".into(),
            baseline: Some(peer.new.p50()),
            // 1 ÷ 1.5, rounded down.
            goal: Goal::RatioAtMost(0.66),
        },
        Row {
            row: "peer",
            what: "burst of distinct ensures (row d)".into(),
            unit: "/s",
            value: sandboxd_rate,
            baseline_what: format!("the seed's driver, {} at once", peer.burst_count),
            baseline: Some(peer_rate),
            goal: Goal::RatioAtLeast(1.5),
        },
    ]
}
