//! The lifecycle rows: what the idle watcher costs, and resume
//! against the fast path.
//!
//! Three daemons in turn, each holding the same number of quiet running
//! sandboxes: one with no `[lifecycle]` limit (no watcher), one whose
//! watcher samples at the production tick (10 s, `idle = "1h"`), measured
//! over three ticks, and one whose
//! watcher samples every session sandbox every 250 ms — the shortest tick,
//! forty times as often as a 30-minute `idle` samples (10 s). Each daemon's
//! CPU time (utime + stime of `/proc/<pid>/stat`) is read over the same
//! window; the watcher's cost is the difference, and its extrapolation to
//! 10,000 sandboxes at the 10 s tick is that difference scaled by sandboxes
//! and by tick (the watcher's work is one read per sandbox per tick). Probe
//! p50 is taken on both daemons with the sandboxes running. Resume is an
//! `ensure` of a paused sandbox (pause before each one, untimed) against
//! the fast-path `ensure` of the same running sandbox, on the watcher's
//! daemon.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sandboxd_client::Scope;

use crate::report::{Goal, Row};
use crate::rows::{self, connect, sandbox_env};
use crate::setup::{Binaries, Daemon};
use crate::stats::Samples;

/// Probes, fast paths and resumes timed per daemon, after a tenth as many.
const CALLS: usize = 1_000;
/// How long each daemon's CPU time is read over: three ticks of the
/// production tick, so the 10 s tick's daemon is measured over whole ticks.
const WINDOW: Duration = Duration::from_secs(30);
/// Concurrent ensures while filling a daemon.
const TASKS: usize = 32;
/// The watcher's tick in the measured configuration, and a 30-minute
/// `idle`'s.
const TICK: Duration = Duration::from_millis(250);
const PRODUCTION_TICK: Duration = Duration::from_secs(10);
/// The sandbox count the goal is stated for.
const GOAL_COUNT: f64 = 10_000.0;

/// `[workflow] max_lifetime = "1s"` sets the tick to 250 ms (a quarter of
/// the shortest window); no workflow sandbox runs, so nothing is stopped,
/// and every session sandbox is sampled at that tick for an `idle` of an
/// hour that none reaches.
const WATCHED: &str =
    "[lifecycle.session]\nidle = \"1h\"\n[lifecycle.workflow]\nmax_lifetime = \"1s\"\n";

/// `[session] idle = "1h"` alone: the tick is its longest, 10 s, as a
/// 30-minute `idle` gets; the watcher's cost measured, not extrapolated.
const WATCHED_PRODUCTION: &str = "[lifecycle.session]\nidle = \"1h\"\n";

struct Side {
    cpu_share: f64,
    probes: Samples,
    fast: Samples,
    /// Each resume's pause before it, and the resume.
    pauses_and_resumes: Option<(Samples, Samples)>,
}

fn cpu_us(pid: u32) -> anyhow::Result<f64> {
    crate::machine::cpu_us(pid).context("cannot read the daemon's CPU time")
}

async fn side(
    dir: &Path,
    binaries: &Binaries,
    prefix: &str,
    top: &str,
    tables: &str,
    count: usize,
    resume: bool,
) -> anyhow::Result<Side> {
    // The daemon before this one may have left thousands of cgroups dying.
    crate::machine::wait_for_dying_cgroups(50, Duration::from_secs(600));
    let mut daemon = Daemon::start_with_tables(dir, prefix, binaries, top, tables)?;
    let result = side_on(&daemon, count, resume).await;
    daemon.stop()?;
    result
}

async fn side_on(daemon: &Daemon, count: usize, resume: bool) -> anyhow::Result<Side> {
    let client = connect(&daemon.socket).await?;
    let hot = "lifecycle-hot";
    client
        .ensure_session_sandbox(hot, &sandbox_env(hot))
        .await?;
    rows::burst(
        std::slice::from_ref(&client),
        "lifecycle",
        count - 1,
        TASKS,
        false,
    )
    .await?;
    let running = client.status().await?.counts.running as usize;
    if running != count {
        bail!("expected {count} running sandboxes, status says {running}");
    }
    // Past the start-up work of the last runners (output files close
    // after 2 s of quiet).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = cpu_us(daemon.pid)?;
    let begun = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let used = (cpu_us(daemon.pid)? - before) / 1e6;
    let cpu_share = used / begun.elapsed().as_secs_f64() * 100.0;
    let probes = rows::probe_serial(&client, hot, CALLS, CALLS / 10).await?;
    let fast = rows::ensure_fast_serial(&client, hot, CALLS, CALLS / 10).await?;
    // Said as soon as measured: a later daemon that fails (a call past its
    // deadline on a loaded machine) must not take these figures with it.
    eprintln!(
        "bench: lifecycle: {} with {count} running: daemon CPU {cpu_share:.2} % core over {:.0} s, probe p50 {:.0} µs, fast-path ensure p50 {:.0} µs (load {:.2})",
        daemon.log.display(),
        WINDOW.as_secs_f64(),
        probes.p50(),
        fast.p50(),
        crate::machine::load_average()[0]
    );
    let pauses_and_resumes = if resume {
        let env = sandbox_env(hot);
        let mut samples = Samples::with_capacity(CALLS);
        let mut pauses = Samples::with_capacity(CALLS);
        for i in 0..CALLS + CALLS / 10 {
            let start = Instant::now();
            client.pause(Scope::Session, hot).await?;
            let paused = start.elapsed();
            let start = Instant::now();
            let report = client.ensure_session_sandbox(hot, &env).await?;
            let took = start.elapsed();
            if report.created || report.generation != 1 {
                bail!("the ensure of a paused sandbox started a new runner: {report:?}");
            }
            if i >= CALLS / 10 {
                samples.push(took);
                pauses.push(paused);
            }
        }
        Some((pauses, samples))
    } else {
        None
    };
    Ok(Side {
        cpu_share,
        probes,
        fast,
        pauses_and_resumes,
    })
}

/// The rows, and one line of context.
pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    count: usize,
    isolation: &str,
) -> anyhow::Result<(Vec<Row>, String)> {
    let top = format!("driver = \"local-process\"\nisolation = \"{isolation}\"\n");
    let off = side(dir, binaries, "lifecycle-off-", &top, "", count, false).await?;
    let production = side(
        dir,
        binaries,
        "lifecycle-10s-",
        &top,
        WATCHED_PRODUCTION,
        count,
        false,
    )
    .await?;
    let on = side(dir, binaries, "lifecycle-on-", &top, WATCHED, count, true).await?;
    let watcher = (on.cpu_share - off.cpu_share).max(0.0);
    let watcher_production = (production.cpu_share - off.cpu_share).max(0.0);
    let extrapolated = watcher
        * (GOAL_COUNT / count as f64)
        * (TICK.as_secs_f64() / PRODUCTION_TICK.as_secs_f64());
    let (pauses, resumes) = on
        .pauses_and_resumes
        .as_ref()
        .context("the watcher's daemon measured resumes")?;
    let what = |figure: &str| format!("{figure} with {count} quiet running");
    let rows = vec![
        Row {
            row: "l",
            what: what("daemon CPU, watcher at a 250 ms tick,"),
            unit: "% core",
            value: on.cpu_share,
            baseline_what: "the same, no [lifecycle] limit (no watcher)".into(),
            baseline: Some(off.cpu_share),
            goal: Goal::Info,
        },
        Row {
            row: "l",
            what: what("daemon CPU, watcher at the 10 s tick (30 m idle), measured,"),
            unit: "% core",
            value: production.cpu_share,
            baseline_what: "the same, no [lifecycle] limit (no watcher)".into(),
            baseline: Some(off.cpu_share),
            goal: Goal::Info,
        },
        Row {
            row: "l",
            what: what("watcher CPU (on − off) at the 10 s tick,"),
            unit: "% core",
            value: watcher_production,
            baseline_what: "—".into(),
            baseline: None,
            goal: Goal::AtMost(2.0, "< 2 % of one core"),
        },
        Row {
            row: "l",
            what: what("probe p50, watcher at the 10 s tick,"),
            unit: "µs",
            value: production.probes.p50(),
            baseline_what: "probe p50, watcher off".into(),
            baseline: Some(off.probes.p50()),
            goal: Goal::RatioAtMost(1.2),
        },
        Row {
            row: "l",
            what: "watcher CPU extrapolated to 10,000 at the 10 s tick (30 m idle)".into(),
            unit: "% core",
            value: extrapolated,
            baseline_what: "—".into(),
            baseline: None,
            goal: Goal::AtMost(2.0, "< 2 % of one core"),
        },
        Row {
            row: "l",
            what: what("probe p50, watcher on,"),
            unit: "µs",
            value: on.probes.p50(),
            baseline_what: "probe p50, watcher off".into(),
            baseline: Some(off.probes.p50()),
            goal: Goal::RatioAtMost(1.2),
        },
        Row {
            row: "l",
            what: "resume (ensure of a paused sandbox) p50".into(),
            unit: "µs",
            value: resumes.p50(),
            baseline_what: "fast-path ensure p50 (same daemon)".into(),
            baseline: Some(on.fast.p50()),
            goal: Goal::RatioAtMost(2.0),
        },
        Row {
            row: "l",
            what: "pause p50 (the freeze, until every task is frozen), just after a resume".into(),
            unit: "µs",
            value: pauses.p50(),
            baseline_what: "fast-path ensure p50 (same daemon)".into(),
            baseline: Some(on.fast.p50()),
            goal: Goal::Info,
        },
    ];
    let info = format!(
        "(l) watcher: {watcher:.2} % of a core for {count} sandboxes sampled every 250 ms \
         ({:.0} reads/s, {:.1} µs a sample); linear in sandboxes and in 1/tick (a 20 s idle's 5 s tick: \
         twice the extrapolated figure). Fast path off-watcher p50 {:.0} µs",
        count as f64 / TICK.as_secs_f64(),
        watcher / 100.0 * 1e6 / (count as f64 / TICK.as_secs_f64()),
        off.fast.p50()
    );
    Ok((rows, info))
}
