//! Rows (c), (d) and (e) on their own (`--only-spawns`) and the
//! prepared-sandbox rows (`--only-prepared`), each with its raw baselines
//! and the peer row; and what the full run shares with them: the raw
//! spawn baselines, the peer row and the `--compare` rows.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::context::{step, Bench};
use crate::options::Counts;
use crate::raw::{self, RawSpawner};
use crate::report::{self, Goal, Row};
use crate::rows::{self, connect};
use crate::setup::Daemon;
use crate::stats::Samples;
use crate::{compare, machine, peer, prepared};

/// Raw spawns one at a time, then their stops: the baselines of (c) and (e).
pub async fn raw_serial(spawner: &RawSpawner, count: usize) -> anyhow::Result<(Samples, Samples)> {
    let spawner = spawner.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let (spawns, children) = raw::spawn_serial(&spawner, count)?;
        let stops = raw::stop_serial(children)?;
        spawner.clean();
        Ok((spawns, stops))
    })
    .await?
}

/// How long `count` raw spawns from two threads take: the baseline of (d).
async fn raw_burst(spawner: &RawSpawner, count: usize) -> anyhow::Result<Duration> {
    let spawner = spawner.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<Duration> {
        let (elapsed, children) = raw::spawn_parallel(&spawner, count, 2)?;
        raw::stop_all(children)?;
        spawner.clean();
        Ok(elapsed)
    })
    .await?
}

/// The peer row's figures, or why it is not measured (no `node`).
pub fn measure_peer(
    started: Instant,
    runner: &Path,
    dir: &Path,
    counts: Counts,
) -> anyhow::Result<Result<peer::PeerFigures, String>> {
    if let Some(reason) = peer::unavailable() {
        eprintln!("bench: peer row skipped: {reason}");
        return Ok(Err(reason));
    }
    step(started, "peer: the seed's local-process driver in Node");
    Ok(Ok(peer::measure(runner, dir, counts.serial, counts.burst)?))
}

/// What `--only-spawns` measures of the daemon: (c), (e), and how long
/// (d)'s burst took.
struct DaemonSpawns {
    new_serial: Samples,
    deprovisions: Samples,
    burst_elapsed: Duration,
}

/// (c), (e) and (d) on a daemon of their own.
async fn daemon_spawns(bench: &Bench<'_>) -> anyhow::Result<DaemonSpawns> {
    let counts = bench.counts;
    let mut daemon = Daemon::start(bench.dir.path(), &bench.binaries)?;
    let client = connect(&daemon.socket).await?;
    bench.step("(c) new sandboxes one at a time");
    let new_serial = rows::ensure_new_serial(&client, "bench-serial", counts.serial).await?;
    bench.step("(e) deprovisions one at a time");
    let deprovisions = rows::deprovision_serial(&client, "bench-serial", counts.serial).await?;
    bench.step(&format!(
        "(d) {} distinct ensures from {} tasks",
        counts.burst, counts.tasks
    ));
    let clients = [client];
    let (burst_elapsed, _) =
        rows::burst(&clients, "bench-burst", counts.burst, counts.tasks, false).await?;
    rows::burst(&clients, "bench-burst", counts.burst, counts.tasks, true).await?;
    drop(clients);
    daemon.stop()?;
    Ok(DaemonSpawns {
        new_serial,
        deprovisions,
        burst_elapsed,
    })
}

/// `--only-spawns`: rows (c), (d) and (e) with their raw baselines, the
/// peer row, and with `--compare` the other daemon in turn, in one run.
pub async fn run_spawns_only(bench: &Bench<'_>) -> anyhow::Result<()> {
    let (counts, dir, options) = (bench.counts, bench.dir.path(), bench.options);
    let date = machine::utc_now();
    let load_start = machine::load_average();
    bench.step("(c)/(e) raw spawn + stop baseline");
    let (raw_spawns, raw_stops) = raw_serial(&bench.spawner, counts.serial).await?;
    bench.step("(d) raw spawn throughput baseline (2 threads)");
    let raw_burst = raw_burst(&bench.spawner, counts.burst).await?;
    let spawns = daemon_spawns(bench).await?;
    let comparison = match &options.compare {
        Some(other) => {
            bench.step("(c)/(e) in turn with --compare");
            Some(compare::measure(dir, &bench.binaries, other, counts.serial).await?)
        }
        None => None,
    };
    let peer_figures = measure_peer(bench.started, &bench.runner, dir, counts)?;
    let load_end = machine::load_average();
    let per_sec = |count: usize, elapsed: Duration| count as f64 / elapsed.as_secs_f64();
    let burst_rate = per_sec(counts.burst, spawns.burst_elapsed);
    let mut rows = spawns_rows(
        &spawns,
        counts,
        (&raw_spawns, &raw_stops),
        per_sec(counts.burst, raw_burst),
    );
    if let Some(comparison) = &comparison {
        rows.extend(comparison_rows(comparison, &raw_spawns));
    }
    let peer_note = match &peer_figures {
        Ok(peer) => {
            rows.extend(peer::rows(peer, &spawns.new_serial, burst_rate));
            "measured".to_string()
        }
        Err(reason) => format!("not measured: {reason}"),
    };
    println!(
        "sandboxd bench, rows c d e and the peer ({} mode) — {date}; load average {:.2} at start, {:.2} at end; peer {peer_note}\n",
        bench.mode(),
        load_start[0],
        load_end[0],
    );
    print!("{}", report::table(&rows));
    let line = json!({
        "bench": "sandboxd",
        "mode": bench.mode(),
        "date": date,
        "only": "spawns",
        "load_start": load_start[0],
        "load_end": load_end[0],
        "peer": peer_note,
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
    });
    println!("{line}");
    Ok(())
}

/// `--only-spawns`'s rows (c), (d) and (e) against their raw baselines.
fn spawns_rows(
    spawns: &DaemonSpawns,
    counts: Counts,
    (raw_spawns, raw_stops): (&Samples, &Samples),
    raw_rate: f64,
) -> Vec<Row> {
    let burst_rate = counts.burst as f64 / spawns.burst_elapsed.as_secs_f64();
    vec![
        Row {
            row: "c",
            what: "ensure new sandbox p50".into(),
            unit: "µs",
            value: spawns.new_serial.p50(),
            baseline_what: "raw mkdir+spawn p50".into(),
            baseline: Some(raw_spawns.p50()),
            goal: Goal::RatioAtMost(1.5),
        },
        Row {
            row: "d",
            what: format!("{} ensures, {} tasks", counts.burst, counts.tasks),
            unit: "/s",
            value: burst_rate,
            baseline_what: "raw spawns, 2 threads".into(),
            baseline: Some(raw_rate),
            goal: Goal::RatioAtLeast(0.7),
        },
        Row {
            row: "e",
            what: "deprovision p50".into(),
            unit: "µs",
            value: spawns.deprovisions.p50(),
            baseline_what: "raw SIGTERM+wait p50".into(),
            baseline: Some(raw_stops.p50()),
            goal: Goal::RatioAtMost(2.0),
        },
        Row {
            row: "e",
            what: "deprovision p99".into(),
            unit: "µs",
            value: spawns.deprovisions.p99(),
            baseline_what: "raw SIGTERM+wait p99".into(),
            baseline: Some(raw_stops.p99()),
            goal: Goal::Info,
        },
    ]
}

/// `--only-prepared`: the prepared-sandbox rows (see `bench/prepared.rs`)
/// with their raw baselines and the peer row, in one run.
pub async fn run_prepared_only(bench: &Bench<'_>) -> anyhow::Result<()> {
    let (counts, dir) = (bench.counts, bench.dir.path());
    let date = machine::utc_now();
    let load_start = machine::load_average();
    bench.step("(d) raw spawn throughput baseline (2 threads)");
    let raw_burst = raw_burst(&bench.spawner, counts.burst).await?;
    let load_raw = machine::load_average();
    bench.step("(c)/(e) warm and cold, full and uid-cgroup, in turn; (d) bursts; idle pool");
    let figures = prepared::measure(
        dir,
        &bench.binaries,
        &bench.spawner,
        counts.serial,
        counts.burst,
        counts.tasks,
    )
    .await?;
    let load_daemons = machine::load_average();
    let peer_figures = measure_peer(bench.started, &bench.runner, dir, counts)?;
    let load_end = machine::load_average();
    let raw_rate = counts.burst as f64 / raw_burst.as_secs_f64();
    let mut rows = prepared::rows(&figures, raw_rate, counts.burst, counts.tasks);
    let peer_note = match &peer_figures {
        Ok(peer) => {
            rows.extend(peer::rows(
                peer,
                prepared::full_warm(&figures),
                prepared::warm_rate(&figures, counts.burst),
            ));
            "measured (sandboxd: full, warm)".to_string()
        }
        Err(reason) => format!("not measured: {reason}"),
    };
    println!(
        "sandboxd bench, prepared sandboxes ({} mode) — {date}; load average {:.2} at start, {:.2} after the raw baselines, {:.2} after the daemons, {:.2} at end; peer {peer_note}\n",
        bench.mode(),
        load_start[0],
        load_raw[0],
        load_daemons[0],
        load_end[0],
    );
    print!("{}", report::table(&rows));
    let line = json!({
        "bench": "sandboxd",
        "mode": bench.mode(),
        "date": date,
        "only": "prepared",
        "load": [load_start[0], load_raw[0], load_daemons[0], load_end[0]],
        "peer": peer_note,
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
    });
    println!("{line}");
    Ok(())
}

/// Row (c) against the `--compare` daemon, and the parts of the cgroup's
/// cost (see `bench/compare.rs`).
pub fn comparison_rows(comparison: &compare::Comparison, raw_spawns: &Samples) -> Vec<Row> {
    let other = &comparison.other;
    let other_p50 = other.ensures.p50();
    let versus_other = |what: &str, samples: &Samples, goal: Goal| Row {
        row: "c",
        what: what.to_string(),
        unit: "µs",
        value: samples.p50(),
        baseline_what: format!("--compare daemon's p50, in turn ({})", other.name),
        baseline: Some(other_p50),
        goal,
    };
    vec![
        versus_other(
            "ensure new sandbox p50, in turn with --compare",
            &comparison.this.ensures,
            Goal::RatioAtMost(1.25),
        ),
        versus_other(
            "… with [limits] cpu = 0 (v1: memory, pids)",
            &comparison.no_cpu.ensures,
            Goal::Info,
        ),
        versus_other(
            "… with every limit 0 (cgroup v2 only)",
            &comparison.no_limits.ensures,
            Goal::Info,
        ),
        Row {
            row: "c",
            what: "--compare daemon's ensure new sandbox p50".into(),
            unit: "µs",
            value: other_p50,
            baseline_what: "raw mkdir+spawn p50".into(),
            baseline: Some(raw_spawns.p50()),
            goal: Goal::Info,
        },
        Row {
            row: "e",
            what: "deprovision p50, in turn with --compare".into(),
            unit: "µs",
            value: comparison.this.deprovisions.p50(),
            baseline_what: "--compare daemon's deprovision p50".into(),
            baseline: Some(other.deprovisions.p50()),
            goal: Goal::Info,
        },
    ]
}
