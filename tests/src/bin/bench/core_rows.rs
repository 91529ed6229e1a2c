//! The table rows of (a) to (g) (see `core.rs`), each against its
//! baseline and goal.

use crate::core::{Burst, CoreFigures, Probes, RawBurst, Serial};
use crate::options::Counts;
use crate::report::{Goal, Row};
use crate::stats::Samples;

/// The rows of (a) to (g), in that order.
pub fn rows(figures: &CoreFigures, counts: Counts) -> Vec<Row> {
    let mut rows = probe_rows(&figures.probes);
    rows.extend(fast_rows(&figures.probes));
    rows.extend(serial_rows(&figures.serial));
    rows.extend(burst_rows(figures, counts));
    rows.extend(stop_rows(&figures.serial));
    rows.extend(memory_rows(figures, counts));
    rows.extend(during_rows(figures));
    rows
}

/// How many of `count` per second `elapsed` makes.
pub fn per_sec(count: usize, elapsed: std::time::Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64()
}

/// (a) probes against the raw ping-pong, and their diagnostics.
fn probe_rows(probes: &Probes) -> Vec<Row> {
    let Probes {
        ping_pong,
        probes,
        on_worker,
        current_thread,
        bare_version,
        bare_probe,
        daemon_side,
        ..
    } = probes;
    let pp = "raw ping-pong";
    // A diagnostic of (a): another client's probe, against the same baseline.
    let diagnostic = |what: &str, samples: &Samples| Row {
        row: "a",
        what: what.into(),
        unit: "µs",
        value: samples.p50(),
        baseline_what: format!("{pp} p50"),
        baseline: Some(ping_pong.p50()),
        goal: Goal::Info,
    };
    vec![
        Row {
            row: "a",
            what: "probe p50".into(),
            unit: "µs",
            value: probes.p50(),
            baseline_what: format!("{pp} p50"),
            baseline: Some(ping_pong.p50()),
            goal: Goal::RatioAtMost(2.5),
        },
        Row {
            row: "a",
            what: "probe p99".into(),
            unit: "µs",
            value: probes.p99(),
            baseline_what: format!("{pp} p99"),
            baseline: Some(ping_pong.p99()),
            goal: Goal::RatioAtMost(5.0),
        },
        diagnostic(
            "probe p50, called from a task on the runtime's workers",
            on_worker,
        ),
        diagnostic(
            "probe p50, client on a current-thread runtime",
            current_thread,
        ),
        diagnostic("protocol_version p50, bare tarpc stub", bare_version),
        diagnostic("probe p50, bare tarpc stub", bare_probe),
        diagnostic("probe p50, raw-socket client", daemon_side),
    ]
}

/// (b) fast-path ensures against probes.
fn fast_rows(probes: &Probes) -> Vec<Row> {
    let Probes { probes, fast, .. } = probes;
    vec![
        Row {
            row: "b",
            what: "ensure fast path p50".into(),
            unit: "µs",
            value: fast.p50(),
            baseline_what: "probe p50 (a)".into(),
            baseline: Some(probes.p50()),
            goal: Goal::RatioAtMost(1.1),
        },
        Row {
            row: "b",
            what: "ensure fast path p99".into(),
            unit: "µs",
            value: fast.p99(),
            baseline_what: "probe p99 (a)".into(),
            baseline: Some(probes.p99()),
            goal: Goal::RatioAtMost(1.1),
        },
    ]
}

/// (c) new sandboxes one at a time, against raw spawns.
fn serial_rows(serial: &Serial) -> Vec<Row> {
    let Serial {
        raw_spawns,
        cgroup_setups,
        new_serial,
        ..
    } = serial;
    vec![
        Row {
            row: "c",
            what: "ensure new sandbox p50".into(),
            unit: "µs",
            value: new_serial.p50(),
            baseline_what: "raw mkdir+spawn p50".into(),
            baseline: Some(raw_spawns.p50()),
            goal: Goal::RatioAtMost(1.5),
        },
        Row {
            row: "c",
            what: match &cgroup_setups {
                Some(_) => "cgroup create + limits alone p50".into(),
                None => "cgroup create + limits alone (no writable cgroup v2)".into(),
            },
            unit: "µs",
            value: cgroup_setups
                .as_ref()
                .map_or(f64::NAN, |samples| samples.p50()),
            baseline_what: "raw mkdir+spawn p50".into(),
            baseline: Some(raw_spawns.p50()),
            goal: Goal::Info,
        },
        Row {
            row: "c",
            what: "ensure new sandbox p99".into(),
            unit: "µs",
            value: new_serial.p99(),
            baseline_what: "raw mkdir+spawn p99".into(),
            baseline: Some(raw_spawns.p99()),
            goal: Goal::Info,
        },
    ]
}

/// (d) the burst, against raw spawns from two threads.
fn burst_rows(figures: &CoreFigures, counts: Counts) -> Vec<Row> {
    let raw_burst_cpu = figures.raw_burst.cpu_us;
    let daemon_burst_cpu = figures.burst.daemon_cpu_us;
    let burst_latencies = &figures.burst.latencies;
    let burst_rate = per_sec(counts.burst, figures.burst.elapsed);
    let raw_rate = per_sec(counts.burst, figures.raw_burst.elapsed);
    vec![
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
            row: "d",
            what: "daemon CPU per ensure in the burst".into(),
            unit: "µs",
            value: daemon_burst_cpu / counts.burst as f64,
            baseline_what: "bench CPU per raw spawn".into(),
            baseline: Some(raw_burst_cpu / counts.burst as f64),
            goal: Goal::Info,
        },
        Row {
            row: "d",
            what: "burst ensure latency p99".into(),
            unit: "µs",
            value: burst_latencies.p99(),
            baseline_what: "—".into(),
            baseline: None,
            goal: Goal::Info,
        },
    ]
}

/// (e) deprovisions against raw stops.
fn stop_rows(serial: &Serial) -> Vec<Row> {
    let Serial {
        raw_stops,
        deprovisions,
        ..
    } = serial;
    vec![
        Row {
            row: "e",
            what: "deprovision p50".into(),
            unit: "µs",
            value: deprovisions.p50(),
            baseline_what: "raw SIGTERM+wait p50".into(),
            baseline: Some(raw_stops.p50()),
            goal: Goal::RatioAtMost(2.0),
        },
        Row {
            row: "e",
            what: "deprovision p99".into(),
            unit: "µs",
            value: deprovisions.p99(),
            baseline_what: "raw SIGTERM+wait p99".into(),
            baseline: Some(raw_stops.p99()),
            goal: Goal::Info,
        },
    ]
}

/// (f) the daemon's memory, idle and with the burst running.
fn memory_rows(figures: &CoreFigures, counts: Counts) -> Vec<Row> {
    let rss_idle = figures.rss_idle;
    let Burst {
        rss_warm,
        rss_loaded,
        ..
    } = figures.burst;
    let loaded_what = format!("daemon VmRSS with {} running", counts.burst + 1);
    let per_sandbox = (rss_loaded as f64 - rss_warm as f64) / counts.burst as f64;
    let full_scale = counts.burst >= 1_000;
    vec![
        Row {
            row: "f",
            what: "daemon VmRSS idle".into(),
            unit: "KiB",
            value: rss_idle as f64,
            baseline_what: "—".into(),
            baseline: None,
            goal: Goal::Info,
        },
        Row {
            row: "f",
            what: loaded_what,
            unit: "KiB",
            value: rss_loaded as f64,
            baseline_what: "—".into(),
            baseline: None,
            goal: if full_scale {
                Goal::AtMost(25.0 * 1024.0, "≤ 25600 KiB")
            } else {
                Goal::Info
            },
        },
        Row {
            row: "f",
            what: "VmRSS per running sandbox".into(),
            unit: "KiB",
            value: per_sandbox,
            baseline_what: "—".into(),
            baseline: None,
            goal: Goal::AtMost(16.0, "≤ 16 KiB"),
        },
    ]
}

/// (g) probes during the second burst, against the raw ping-pong.
fn during_rows(figures: &CoreFigures) -> Vec<Row> {
    let pp = "raw ping-pong";
    let ping_pong = &figures.probes.ping_pong;
    let Burst {
        during,
        during_shared,
        ..
    } = &figures.burst;
    let RawBurst {
        during: raw_during, ..
    } = &figures.raw_burst;
    vec![
        Row {
            row: "g",
            what: "probe p99 during (d)".into(),
            unit: "µs",
            value: during.p99(),
            baseline_what: format!("{pp} p99 (a)"),
            baseline: Some(ping_pong.p99()),
            goal: Goal::RatioAtMost(20.0),
        },
        Row {
            row: "g",
            what: "raw ping-pong p99 during raw burst".into(),
            unit: "µs",
            value: raw_during.p99(),
            baseline_what: format!("{pp} p99 (a)"),
            baseline: Some(ping_pong.p99()),
            goal: Goal::Info,
        },
        Row {
            row: "g",
            what: "probe p99 on the burst's own connection".into(),
            unit: "µs",
            value: during_shared.p99(),
            baseline_what: format!("{pp} p99 (a)"),
            baseline: Some(ping_pong.p99()),
            goal: Goal::Info,
        },
        Row {
            row: "g",
            what: "probe max during (d)".into(),
            unit: "µs",
            value: during.max_us(),
            baseline_what: "—".into(),
            baseline: None,
            goal: Goal::Info,
        },
    ]
}
