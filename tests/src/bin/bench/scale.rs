//! The scale row: a daemon holding many running process-tier sandboxes
//! (10,000 in a full run) at once.
//!
//! With its own daemon, so nothing of the other rows is in it: one
//! sandbox first, and probes of it for the baseline; then the rest,
//! ensured from 64 tasks; then its memory, 2 s after the fill (and right
//! after it, in the info line), the same probes again, `list`,
//! and the time from SIGTERM to the daemon's exit with all of them running
//! (every runner is stopped on the way). Goals: VmRSS at most 40 MiB and
//! probe p50 at most 1.2× the one-sandbox p50; the stop at most
//! 1.2× a raw stop of as many contained runners, measured after the
//! daemon's (an absolute 3 s where the raw stop cannot run).
//!
//! Each running sandbox costs the daemon a few descriptors (measured here,
//! over a handful of sandboxes). Where the daemon's open-file limit cannot
//! hold the count asked for (a machine whose hard limit the daemon may not
//! raise, without CAP_SYS_RESOURCE), the row fills what fits, leaving room
//! for connections, and its info line says so: never a figure at a count
//! it did not reach.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::machine::proc_kib;
use crate::raw::{self, RawSpawner};
use crate::report::{Goal, Row};
use crate::rows::{self, connect};
use crate::setup::{Binaries, Daemon};
use crate::stats::Samples;

/// Probes per measurement, after a warm-up of a tenth as many.
const PROBES: usize = 2_000;
/// `list` calls timed; the median is reported.
const LISTS: usize = 5;
/// Concurrent ensures while filling the daemon.
const TASKS: usize = 64;
/// Sandboxes ensured (and removed) to measure descriptors per sandbox.
const SAMPLE: usize = 16;
/// How long the daemon keeps a quiet runner's output file open (its
/// `FILE_IDLE`), and a little more: descriptors are counted after it.
const OUTPUT_FILE_IDLE: Duration = Duration::from_secs(3);
/// How long after the fill the daemon's memory is read: it gives the
/// burst's freed memory back to the kernel once its calls have paused for
/// a second (see the daemon's `memory_trim`).
const SETTLE: Duration = Duration::from_secs(2);
/// Descriptors left free for connections and the daemon's own files.
const DESCRIPTOR_HEADROOM: u64 = 512;

/// Descriptors the daemon holds per running sandbox (the mean over
/// [`SAMPLE`] new ones, at least one: its output pipe) and its soft
/// open-file limit. A mean, not a rounding up: one file of the daemon's
/// own opened meanwhile (or an output file a loaded host closed late) made
/// it 2 instead of 1.06, and the row filled 9,744 instead of 10,000.
async fn descriptors(
    daemon: &Daemon,
    client: &sandboxd_client::SandboxdClient,
) -> anyhow::Result<(f64, u64)> {
    let open = || {
        std::fs::read_dir(format!("/proc/{}/fd", daemon.pid)).map(|entries| entries.count() as u64)
    };
    let before = open()?;
    for n in 0..SAMPLE {
        let id = format!("scale-fd-{n}");
        client
            .ensure_session_sandbox(&id, &rows::sandbox_env(&id))
            .await?;
    }
    // What a quiet runner holds, once its output file is closed.
    tokio::time::sleep(OUTPUT_FILE_IDLE).await;
    let after = open()?;
    for n in 0..SAMPLE {
        client
            .deprovision_session_sandbox(&format!("scale-fd-{n}"))
            .await?;
    }
    let per_runner = (after.saturating_sub(before) as f64 / SAMPLE as f64).max(1.0);
    let limit = sandboxd_tests::procs::soft_open_file_limit(daemon.pid)
        .context("cannot read the daemon's open-file limit")?;
    Ok((per_runner, limit))
}

/// What the row holds: how many sandboxes, under which `isolation`.
pub struct Asked<'a> {
    pub count: usize,
    pub isolation: &'a str,
}

/// The rows, and one line of context for the report.
pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    spawner: &RawSpawner,
    asked: &Asked<'_>,
) -> anyhow::Result<(Vec<Row>, String)> {
    let Asked { count, isolation } = *asked;
    let config = format!("driver = \"local-process\"\nisolation = \"{isolation}\"\n");
    let mut daemon = Daemon::start_with(dir, "scale-", binaries, &config)?;
    let client = connect(&daemon.socket).await?;
    let hot = "scale-hot";
    client
        .ensure_session_sandbox(hot, &rows::sandbox_env(hot))
        .await?;
    let alone = rows::probe_serial(&client, hot, PROBES, PROBES / 10).await?;
    let (per_runner, limit) = descriptors(&daemon, &client).await?;
    let asked = count;
    let fits = (limit.saturating_sub(DESCRIPTOR_HEADROOM) as f64 / per_runner) as u64;
    let count = count.min(fits as usize);

    let (fill, _) = rows::burst(
        std::slice::from_ref(&client),
        "scale",
        count - 1,
        TASKS,
        false,
    )
    .await?;
    let running = client.status().await?.counts.running as usize;
    if running != count {
        bail!("expected {count} running sandboxes, status says {running}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_at_fill = daemon.rss_kib().context("cannot read the daemon's VmRSS")?;
    // What it holds for its sandboxes, not what the burst left behind:
    // the daemon gives freed memory back once its calls pause.
    tokio::time::sleep(SETTLE).await;
    let rss_kib = daemon.rss_kib().context("cannot read the daemon's VmRSS")?;
    let status = format!("/proc/{}/status", daemon.pid);
    let [anon, file] = ["RssAnon:", "RssFile:"].map(|key| proc_kib(&status, key).unwrap_or(0));
    let crowded = rows::probe_serial(&client, hot, PROBES, PROBES / 10).await?;
    let mut lists = Samples::with_capacity(LISTS);
    for _ in 0..LISTS {
        let begun = Instant::now();
        let listed = client.list(None).await?;
        lists.push(begun.elapsed());
        if listed.len() != count {
            bail!("list returned {} of {count} sandboxes", listed.len());
        }
    }
    drop(client);
    let stopping = Instant::now();
    daemon.stop()?;
    let stop = stopping.elapsed();
    // Stopped in this process, after the daemon is gone, so the two never
    // share the machine.
    let raw_stop = tokio::task::block_in_place(|| raw::stop_contained(spawner, count))?;

    let what = |figure: &str| match isolation {
        "full" => format!("{figure} with {count} running"),
        other => format!("{figure} with {count} running, {other}"),
    };
    let rows = vec![
        Row {
            row: "s",
            what: what("daemon VmRSS"),
            unit: "MiB",
            value: rss_kib as f64 / 1024.0,
            baseline_what: "—".into(),
            baseline: None,
            goal: Goal::AtMost(40.0, "≤ 40 MiB"),
        },
        Row {
            row: "s",
            what: what("probe p50"),
            unit: "µs",
            value: crowded.p50(),
            baseline_what: "probe p50 with 1 running".into(),
            baseline: Some(alone.p50()),
            goal: Goal::RatioAtMost(1.2),
        },
        Row {
            row: "s",
            what: what("list"),
            unit: "ms",
            value: lists.p50() / 1000.0,
            baseline_what: "—".into(),
            baseline: None,
            goal: Goal::Info,
        },
        Row {
            row: "s",
            what: what("SIGTERM to exit"),
            unit: "s",
            value: stop.as_secs_f64(),
            baseline_what: match raw_stop {
                Some(_) => "raw: SIGTERM, waitpid, rmdir of as many contained runners".into(),
                None => "— (no writable cgroup v2 for the raw stop)".into(),
            },
            baseline: raw_stop.map(|raw| raw.as_secs_f64()),
            // Against the raw stop of as many runners, measured in this
            // run; an absolute 3 s where there
            // is no raw stop to compare with.
            goal: match raw_stop {
                Some(_) => Goal::RatioAtMost(1.2),
                None => Goal::AtMost(3.0, "≤ 3 s"),
            },
        },
    ];
    let mut info = format!(
        "(s) {count} sandboxes ensured in {:.1} s ({:.0}/s) from {TASKS} tasks; \
         {per_runner:.2} descriptors per running sandbox, open-file limit {limit}; \
         daemon VmRSS {:.1} MiB right after the fill, {:.1} MiB {} s later \
         ({:.1} MiB anonymous, {:.1} MiB file-backed)",
        fill.as_secs_f64(),
        (count - 1) as f64 / fill.as_secs_f64(),
        rss_at_fill as f64 / 1024.0,
        rss_kib as f64 / 1024.0,
        SETTLE.as_secs(),
        anon as f64 / 1024.0,
        file as f64 / 1024.0,
    );
    if count < asked {
        info.push_str(&format!(
            "; {asked} asked, only {count} fit in the daemon's open-file limit"
        ));
    }
    Ok((rows, info))
}
