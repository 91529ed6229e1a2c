//! A full run: rows (a) to (g) (`core.rs`), then every other row family
//! in turn, each on daemons of its own, then one table, the notes and
//! goals, and one JSON line.

use anyhow::bail;
use serde_json::{json, Value};

use crate::context::Bench;
use crate::core::{self, CoreFigures};
use crate::core_rows::{self, per_sec};
use crate::only::scale_asked;
use crate::report::{self, Row};
use crate::rows::PROBE_INTERVAL;
use crate::spawns::{comparison_rows, measure_peer};
use crate::{compare, docker, egress, isolation, kubernetes, machine, output, peer, peers, scale};

/// What the families after (g) measured, or why one was not measured.
struct Families {
    comparison: Option<compare::Comparison>,
    peer: Result<peer::PeerFigures, String>,
    output: output::OutputFigures,
    peers: peers::PeersFigures,
    egress: egress::EgressFigures,
    view: isolation::IsolationFigures,
    scale_rows: Vec<Row>,
    scale_info: String,
    docker: Result<docker::DockerFigures, String>,
    kubernetes: Result<kubernetes::KubernetesFigures, String>,
    load_end: [f64; 3],
}

pub async fn run(bench: &Bench<'_>) -> anyhow::Result<()> {
    let core = core::measure(bench).await?;
    let mut families = measure_families(bench).await?;
    bench.step("done");
    let mut rows = core_rows::rows(&core, bench.counts);
    let (docker_note, kubernetes_note) = family_rows(&core, &families, bench, &mut rows);
    print_header(bench, &core, &families);
    rows.extend(std::mem::take(&mut families.scale_rows));
    print!("{}", report::table(&rows));
    print_info(bench, &core, &families);
    print_goals(&rows);
    let notes = (docker_note, kubernetes_note);
    println!("{}", json_line(bench, &core, &families, &rows, notes));
    Ok(())
}

/// Every family after (g), in turn: `--compare`, the peer, output, peers,
/// egress, view and scale rows, then docker and kubernetes where they can run.
async fn measure_families(bench: &Bench<'_>) -> anyhow::Result<Families> {
    let (counts, dir, binaries, options) = (
        bench.counts,
        bench.dir.path(),
        &bench.binaries,
        bench.options,
    );
    let comparison = match &options.compare {
        Some(other) => {
            bench.step(&format!(
                "(c) new sandboxes in turn: this daemon, {}, and this one with fewer limits",
                other.display()
            ));
            Some(compare::measure(dir, binaries, other, counts.serial).await?)
        }
        None => None,
    };
    let peer = measure_peer(bench.started, &bench.runner, dir, counts)?;
    bench.step("output: a runner writing to stdout, and cat");
    let output = output::measure(dir, binaries, counts.output_bytes, counts.output_cap).await?;
    bench.step("peers: one static program under each sandbox installed here");
    let peers_asked = if options.quick {
        peers::QUICK
    } else {
        peers::FULL
    };
    let peers = peers::measure(
        dir,
        binaries,
        peers_asked,
        options.no_docker,
        options.compare.as_deref(),
    )
    .await?;
    bench.step("egress: new sandboxes and a runner's connects, posture vs none");
    let egress = egress::measure(
        dir,
        binaries,
        counts.egress_new,
        counts.egress_rounds,
        counts.egress_connects,
    )
    .await?;
    bench.step("view: new sandboxes, isolation = full vs uid-cgroup; each namespace raw");
    let view = isolation::measure(dir, binaries, counts.view_new, counts.view_raw).await?;
    bench.step(&format!("(s) {} running sandboxes", counts.scale));
    let (scale_rows, scale_info) =
        scale::measure(dir, binaries, &bench.spawner, &scale_asked(bench)).await?;
    let docker = measure_docker(bench).await?;
    let kubernetes = measure_kubernetes(bench).await;
    Ok(Families {
        comparison,
        peer,
        output,
        peers,
        egress,
        view,
        scale_rows,
        scale_info,
        docker,
        kubernetes,
        load_end: machine::load_average(),
    })
}

/// The docker row, when an engine and the test image are here; why not
/// otherwise. A row that starts and fails fails the run.
async fn measure_docker(
    bench: &Bench<'_>,
) -> anyhow::Result<Result<docker::DockerFigures, String>> {
    let docker_check = if bench.options.no_docker {
        Some("skipped (--no-docker)".to_string())
    } else {
        docker::unavailable().await
    };
    match docker_check {
        Some(reason) => {
            eprintln!("bench: docker row skipped: {reason}");
            Ok(Err(reason))
        }
        None => {
            bench.step(&format!(
                "docker: {} new containers through sandboxd, the Engine API and docker run",
                bench.counts.containers
            ));
            match docker::measure(bench.dir.path(), &bench.binaries, bench.counts.containers).await
            {
                Ok(figures) => Ok(Ok(figures)),
                Err(error) => bail!("the docker row failed: {error:#}"),
            }
        }
    }
}

/// The kubernetes row, or why it was not measured.
async fn measure_kubernetes(bench: &Bench<'_>) -> Result<kubernetes::KubernetesFigures, String> {
    if bench.options.no_kubernetes {
        return Err("skipped (--no-kubernetes)".to_string());
    }
    bench.step("kubernetes: new sandboxes through sandboxd and straight through kube");
    let counts = bench.counts;
    kubernetes::measure(
        bench.dir.path(),
        &bench.binaries,
        counts.k8s_new,
        counts.k8s_calls,
    )
    .await
    .map_err(|error| format!("{error:#}"))
}

/// Adds the families' rows after (g)'s (the scale rows aside, which end
/// the table); returns the docker and kubernetes notes.
fn family_rows(
    core: &CoreFigures,
    families: &Families,
    bench: &Bench<'_>,
    rows: &mut Vec<Row>,
) -> (String, String) {
    if let Some(comparison) = &families.comparison {
        rows.extend(comparison_rows(comparison, &core.serial.raw_spawns));
    }
    if let Ok(peer) = &families.peer {
        let burst_rate = per_sec(bench.counts.burst, core.burst.elapsed);
        rows.extend(peer::rows(peer, &core.serial.new_serial, burst_rate));
    }
    rows.extend(output::rows(&families.output));
    rows.extend(peers::rows(&families.peers));
    rows.extend(egress::rows(&families.egress));
    rows.extend(isolation::rows(&families.view));
    let docker_note = match &families.docker {
        Ok(figures) => {
            rows.extend(docker::rows(figures));
            format!(
                "measured: {} new containers each way",
                figures.sandboxd.len()
            )
        }
        Err(reason) => format!("not measured: {reason}"),
    };
    let kubernetes_note = match &families.kubernetes {
        Ok(figures) => {
            let (more, note) = kubernetes::rows(figures);
            rows.extend(more);
            note
        }
        Err(reason) => format!("not measured: {reason}"),
    };
    (docker_note, kubernetes_note)
}

/// The run's setting: mode, date, machine, load, users, probe frames, and
/// what the state directory's file system costs.
fn print_header(bench: &Bench<'_>, core: &CoreFigures, families: &Families) {
    let (machine, date, runner_user) = (&bench.machine, &bench.date, &bench.runner_user);
    let (request_bytes, response_bytes) = (core.request_bytes, core.response_bytes);
    println!(
        "sandboxd bench ({} mode) — {date}\nmachine: {} × {}, kernel {}, {} MiB; load average {:.2} at start, {:.2} at end\n\
         daemon runs as {}; runners run as {runner_user}; probe frames: request {request_bytes} B, response {response_bytes} B\n",
        bench.mode(),
        machine.nproc,
        machine.cpu_model,
        machine.kernel,
        machine.mem_total_mib,
        bench.load_start[0],
        families.load_end[0],
        machine.user,
    );
    println!(
        "state dir {} on {}: creating a file there costs {:.0} µs at the start (p50; \
         {:.0} µs before the daemon's (c)), a directory {:.0} µs — a new sandbox costs the daemon \
         its workspace's inode and, unless a recycled one is at hand, its output file's; the \
         spawn baseline its directory's\n",
        bench.dir.path().display(),
        core.fs_type,
        core.file_creates.p50(),
        core.serial.file_creates_later.p50(),
        core.dir_creates.p50(),
    );
}

/// The notes under the table: scale, egress, view, the peers' summary,
/// and how (d) and (g) went.
fn print_info(bench: &Bench<'_>, core: &CoreFigures, families: &Families) {
    let (counts, burst) = (bench.counts, &core.burst);
    println!("\ninfo: {}", families.scale_info);
    println!("info: {}", egress::info(&families.egress));
    println!("info: {}", isolation::info(&families.view));
    println!("\n{}", peers::summary(&families.peers));
    println!(
        "\ninfo: (d) burst over {} connection(s); (g) {} probes (one per {:?}) during a second \
         burst ({:.0} ensures/s); daemon warm VmRSS before the burst {} KiB; group \
         reaper VmRSS {} KiB; burst teardown {:.0} deprovisions/s",
        bench.options.burst_connections,
        burst.during.len(),
        PROBE_INTERVAL,
        per_sec(counts.burst, burst.second_elapsed),
        burst.rss_warm,
        burst
            .reaper_rss
            .map_or_else(|| "n/a".to_string(), |kib| kib.to_string()),
        per_sec(counts.burst, burst.teardown_elapsed),
    );
}

/// How many rows met their goal, and which missed.
fn print_goals(rows: &[Row]) {
    let passed = rows.iter().filter(|row| row.pass() == Some(true)).count();
    let missed: Vec<String> = rows
        .iter()
        .filter(|row| row.pass() == Some(false))
        .map(|row| format!("{} {}", row.row, row.what))
        .collect();
    println!(
        "goals: {passed} pass, {} miss{}",
        missed.len(),
        if missed.is_empty() {
            String::new()
        } else {
            format!(" ({})", missed.join("; "))
        }
    );
}

/// The one JSON line of a full run.
fn json_line(
    bench: &Bench<'_>,
    core: &CoreFigures,
    families: &Families,
    rows: &[Row],
    (docker_note, kubernetes_note): (String, String),
) -> Value {
    let (machine, counts, options) = (&bench.machine, bench.counts, bench.options);
    json!({
        "bench": "sandboxd",
        "mode": bench.mode(),
        "date": bench.date,
        "machine": {
            "nproc": machine.nproc,
            "cpu_model": machine.cpu_model,
            "kernel": machine.kernel,
            "mem_total_mib": machine.mem_total_mib,
            "load_avg_1m_start": bench.load_start[0],
            "load_avg_1m_end": families.load_end[0],
        },
        "daemon_user": machine.user,
        "runner_user": bench.runner_user,
        "driver": "local-process",
        "counts": {
            "probes": counts.probes,
            "fast_path": counts.fast,
            "serial": counts.serial,
            "burst": counts.burst,
            "burst_tasks": counts.tasks,
            "burst_connections": options.burst_connections,
            "probes_during_burst": core.burst.during.len(),
            "probe_interval_us": PROBE_INTERVAL.as_micros() as u64,
        },
        "probe_frame_bytes": { "request": core.request_bytes, "response": core.response_bytes },
        "state_dir_fs": { "type": core.fs_type, "file_create_p50_us": core.file_creates.p50(), "file_create_before_c_p50_us": core.serial.file_creates_later.p50(), "mkdir_p50_us": core.dir_creates.p50() },
        "docker": docker_note,
        "kubernetes": kubernetes_note,
        "peers": peers::json(&families.peers),
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
    })
}
