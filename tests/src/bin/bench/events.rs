//! The event stream's rows: what a follower costs the hot paths
//! (probe, the fast path, row (c)'s new sandboxes) against the same daemon
//! with no follower, and how soon a follower receives the `started` event
//! of a sandbox after the ensure that started it has replied.
//!
//! One daemon, so both sides of every ratio see the same binary and the
//! same neighbours: first without a follower, then with one long-polling
//! `events` on a connection of its own.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use sandboxd_client::{EventKind, EventsReply, Scope};
use tokio::sync::mpsc;

use crate::report::{Goal, Row};
use crate::rows::{self, connect, sandbox_env};
use crate::setup::{Binaries, Daemon};
use crate::stats::Samples;

/// One side's figures.
pub struct Side {
    pub probes: Samples,
    pub fast: Samples,
    pub new: Samples,
}

pub struct EventFigures {
    pub without: Side,
    pub with: Side,
    /// From an ensure's reply to the follower's receipt of its `started`.
    pub receipt: Samples,
}

/// `probes` probes and fast paths, and `new` new sandboxes, each side.
pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    probes: usize,
    warmup: usize,
    new: usize,
) -> anyhow::Result<EventFigures> {
    let mut daemon = Daemon::start_with(dir, "events-", binaries, "driver = \"local-process\"\n")?;
    let result = measure_on(&daemon, probes, warmup, new).await;
    daemon.stop()?;
    result
}

async fn measure_on(
    daemon: &Daemon,
    probes: usize,
    warmup: usize,
    new: usize,
) -> anyhow::Result<EventFigures> {
    let client = connect(&daemon.socket).await?;
    client
        .ensure_session_sandbox("events-target", &sandbox_env("events-target"))
        .await?;
    let without = Side {
        probes: rows::probe_serial(&client, "events-target", probes, warmup).await?,
        fast: rows::ensure_fast_serial(&client, "events-target", probes, warmup).await?,
        new: rows::ensure_new_serial(&client, "events-plain", new).await?,
    };
    rows::deprovision_serial(&client, "events-plain", new).await?;

    // The follower: every event, stamped the moment its call returns.
    let follower = connect(&daemon.socket).await?;
    let mut since = match follower.events(None, 1000, Duration::ZERO).await? {
        EventsReply::Events { next, .. } => next,
        EventsReply::Expired { reason, .. } => bail!("a fresh cursor expired: {reason}"),
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<(String, EventKind, Instant)>();
    let follow = tokio::spawn(async move {
        loop {
            match follower
                .events(Some(&since), 256, Duration::from_secs(25))
                .await
            {
                Ok(EventsReply::Events { events, next }) => {
                    let at = Instant::now();
                    for event in events {
                        if tx.send((event.id, event.kind, at)).is_err() {
                            return;
                        }
                    }
                    since = next;
                }
                Ok(EventsReply::Expired { now, .. }) => since = now,
                Err(_) => return,
            }
        }
    });
    let probes_with = rows::probe_serial(&client, "events-target", probes, warmup).await?;
    let fast_with = rows::ensure_fast_serial(&client, "events-target", probes, warmup).await?;
    let mut new_with = Samples::with_capacity(new);
    let mut receipt = Samples::with_capacity(new);
    let mut early: HashMap<String, Instant> = HashMap::new();
    for i in 0..new {
        let id = format!("events-followed-{i}");
        let env = sandbox_env(&id);
        let start = Instant::now();
        let report = client.ensure_session_sandbox(&id, &env).await?;
        let replied = Instant::now();
        new_with.push(replied - start);
        if !report.created {
            bail!("ensure of new sandbox {id} took the fast path");
        }
        let received = match early.remove(&id) {
            Some(at) => at,
            None => loop {
                let Some((event_id, kind, at)) =
                    tokio::time::timeout(Duration::from_secs(30), rx.recv()).await?
                else {
                    bail!("the follower stopped");
                };
                if kind != EventKind::Started {
                    continue;
                }
                if event_id == id {
                    break at;
                }
                early.insert(event_id, at);
            },
        };
        // Received before the reply arrived is a receipt at once.
        receipt.push(received.saturating_duration_since(replied));
    }
    follow.abort();
    for i in 0..new {
        client
            .deprovision(Scope::Session, &format!("events-followed-{i}"), false)
            .await?;
    }
    client
        .deprovision(Scope::Session, "events-target", false)
        .await?;
    Ok(EventFigures {
        without,
        with: Side {
            probes: probes_with,
            fast: fast_with,
            new: new_with,
        },
        receipt,
    })
}

pub fn rows(figures: &EventFigures) -> Vec<Row> {
    let (with, without) = (&figures.with, &figures.without);
    vec![
        Row {
            row: "a/events",
            what: "probe p50, a follower long-polling events".into(),
            unit: "µs",
            value: with.probes.p50(),
            baseline_what: "no follower, same daemon".into(),
            baseline: Some(without.probes.p50()),
            goal: Goal::RatioAtMost(1.03),
        },
        Row {
            row: "b/events",
            what: "ensure fast path p50, a follower".into(),
            unit: "µs",
            value: with.fast.p50(),
            baseline_what: "no follower, same daemon".into(),
            baseline: Some(without.fast.p50()),
            goal: Goal::RatioAtMost(1.03),
        },
        Row {
            row: "c/events",
            what: "ensure new sandbox p50, a follower".into(),
            unit: "ms",
            value: with.new.p50() / 1e3,
            baseline_what: "no follower, same daemon".into(),
            baseline: Some(without.new.p50() / 1e3),
            goal: Goal::RatioAtMost(1.05),
        },
        Row {
            row: "events",
            what: "ensure reply → follower receives `started`, p50".into(),
            unit: "µs",
            value: figures.receipt.p50(),
            baseline_what: String::new(),
            baseline: None,
            goal: Goal::AtMost(1000.0, "≤ 1 ms"),
        },
        Row {
            row: "events",
            what: "ensure reply → follower receives `started`, p99".into(),
            unit: "µs",
            value: figures.receipt.percentile_us(99.0),
            baseline_what: String::new(),
            baseline: None,
            goal: Goal::Info,
        },
    ]
}

pub fn info(figures: &EventFigures) -> String {
    format!(
        "events: {} probes and fast paths, {} new sandboxes, each without and then with a follower, on one daemon",
        figures.without.probes.len(),
        figures.without.new.len()
    )
}
