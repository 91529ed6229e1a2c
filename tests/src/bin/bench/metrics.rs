//! The metrics rows: what recording every call costs
//! the hot paths. Two daemons of the same binary run side by side, one
//! with `metrics_listen` and one without, and the probes and fast paths
//! go to them in alternating rounds, so both sides see the same load
//! (this machine's neighbours come and go). The endpoint is scraped once
//! at the end, to show the calls were recorded.

use std::io::{Read as _, Write as _};
use std::path::Path;

use anyhow::{bail, Context as _};

use crate::report::{Goal, Row};
use crate::rows::{self, connect, sandbox_env};
use crate::setup::{Binaries, Daemon};
use crate::stats::Samples;

/// How many alternating rounds the calls are split into.
const ROUNDS: usize = 10;

pub struct MetricsFigures {
    pub probes_off: Samples,
    pub probes_on: Samples,
    pub fast_off: Samples,
    pub fast_on: Samples,
    /// The `sandboxd_call_duration_seconds_count{method="probe"}` scraped
    /// at the end: the probes the daemon with metrics recorded.
    pub recorded_probes: f64,
}

pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    calls: usize,
    warmup: usize,
) -> anyhow::Result<MetricsFigures> {
    let driver = "driver = \"local-process\"\n";
    let mut off = Daemon::start_with(dir, "metrics-off-", binaries, driver)?;
    let on = Daemon::start_with(
        dir,
        "metrics-on-",
        binaries,
        &format!("{driver}metrics_listen = \"127.0.0.1:0\"\n"),
    );
    let mut on = match on {
        Ok(on) => on,
        Err(error) => {
            let _ = off.stop();
            return Err(error);
        }
    };
    let result = measure_on(&off, &on, calls, warmup).await;
    let stopped = (off.stop(), on.stop());
    let figures = result?;
    stopped.0?;
    stopped.1?;
    Ok(figures)
}

async fn measure_on(
    off: &Daemon,
    on: &Daemon,
    calls: usize,
    warmup: usize,
) -> anyhow::Result<MetricsFigures> {
    let (client_off, client_on) = (connect(&off.socket).await?, connect(&on.socket).await?);
    for client in [&client_off, &client_on] {
        client
            .ensure_session_sandbox("metrics-target", &sandbox_env("metrics-target"))
            .await?;
    }
    let per_round = (calls / ROUNDS).max(1);
    let mut figures = MetricsFigures {
        probes_off: Samples::with_capacity(calls),
        probes_on: Samples::with_capacity(calls),
        fast_off: Samples::with_capacity(calls),
        fast_on: Samples::with_capacity(calls),
        recorded_probes: 0.0,
    };
    let target = "metrics-target";
    for round in 0..ROUNDS {
        // Each side goes first in every other round: neither gets the
        // warmer (or the colder) slot every time.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for with_metrics in order {
            let client = if with_metrics {
                &client_on
            } else {
                &client_off
            };
            let probes = rows::probe_serial(client, target, per_round, warmup).await?;
            let fast = rows::ensure_fast_serial(client, target, per_round, warmup).await?;
            if with_metrics {
                figures.probes_on.extend(probes);
                figures.fast_on.extend(fast);
            } else {
                figures.probes_off.extend(probes);
                figures.fast_off.extend(fast);
            }
        }
    }
    let status = client_on.status().await?;
    let url = status
        .metrics
        .context("the daemon with metrics_listen does not say where it serves them")?;
    figures.recorded_probes = scraped_probe_count(&url)?;
    for client in [&client_off, &client_on] {
        client
            .deprovision(sandboxd_client::Scope::Session, "metrics-target", false)
            .await?;
    }
    Ok(figures)
}

/// One scrape of `url` (`http://host:port/metrics`) over a plain TCP
/// connection: the probe calls it counted.
fn scraped_probe_count(url: &str) -> anyhow::Result<f64> {
    let address = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .with_context(|| format!("not a metrics URL: {url}"))?;
    let mut stream = std::net::TcpStream::connect(address)?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let line = response
        .lines()
        .find(|line| line.starts_with("sandboxd_call_duration_seconds_count{method=\"probe\"}"));
    match line.and_then(|line| line.rsplit(' ').next()?.parse().ok()) {
        Some(count) => Ok(count),
        None => bail!("no probe count in the scrape:\n{response}"),
    }
}

pub fn rows(figures: &MetricsFigures) -> Vec<Row> {
    vec![
        Row {
            row: "a/metrics",
            what: "probe p50, metrics served".into(),
            unit: "µs",
            value: figures.probes_on.p50(),
            baseline_what: "no metrics_listen, alongside".into(),
            baseline: Some(figures.probes_off.p50()),
            goal: Goal::RatioAtMost(1.05),
        },
        Row {
            row: "b/metrics",
            what: "ensure fast path p50, metrics served".into(),
            unit: "µs",
            value: figures.fast_on.p50(),
            baseline_what: "no metrics_listen, alongside".into(),
            baseline: Some(figures.fast_off.p50()),
            goal: Goal::RatioAtMost(1.05),
        },
    ]
}

pub fn info(figures: &MetricsFigures) -> String {
    format!(
        "{} probes and {} fast paths each side in {ROUNDS} alternating rounds; the scrape counted {} probes on the daemon with metrics",
        figures.probes_on.len(),
        figures.fast_on.len(),
        figures.recorded_probes
    )
}
