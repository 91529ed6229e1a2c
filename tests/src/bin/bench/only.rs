//! The `--only-…` runs of one row family each: the family's rows, a table
//! and one JSON line saying which family it was.

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::context::{mode, Bench};
use crate::options::{Counts, Options};
use crate::report::{self, Row};
use crate::setup::{BenchDir, Binaries};
use crate::{
    calls, commands, docker, docker_exec, egress, events, isolation, kubernetes, lifecycle,
    machine, metrics, node, output, peers, scale, spawns,
};

/// Runs the one family an `--only-…` option asks for; false when none is
/// asked (a full run). The first option set wins, in this order.
pub async fn run(bench: &Bench<'_>) -> anyhow::Result<bool> {
    let options = bench.options;
    if options.only_output {
        output_rows(bench).await?;
    } else if options.only_egress {
        egress_rows(bench).await?;
    } else if options.only_lifecycle {
        lifecycle_rows(bench).await?;
    } else if options.only_commands {
        commands_rows(bench).await?;
    } else if options.only_events {
        events_rows(bench).await?;
    } else if options.only_metrics {
        metrics_rows(bench).await?;
    } else if options.only_view {
        view_rows(bench).await?;
    } else if options.scale_only {
        scale_rows(bench).await?;
    } else if options.only_node {
        node_rows(bench).await?;
    } else if let Some((kind, count)) = options.only_calls {
        calls::run(bench.dir.path(), &bench.binaries, kind, count).await?;
    } else if options.only_docker {
        docker_rows(bench).await?;
    } else if options.only_peers {
        peers_rows(bench).await?;
    } else if options.only_prepared {
        spawns::run_prepared_only(bench).await?;
    } else if options.only_spawns {
        spawns::run_spawns_only(bench).await?;
    } else {
        return Ok(false);
    }
    Ok(true)
}

/// Prints the table of `rows`, then the JSON line: the run's mode and
/// date, `only`, the `extra` keys in their order, and the rows.
fn print(bench: &Bench<'_>, only: &str, rows: &[Row], extra: Vec<(&str, Value)>) {
    print!("{}", report::table(rows));
    print_json(bench, only, rows, extra);
}

/// The JSON line alone (see [`print`]).
fn print_json(bench: &Bench<'_>, only: &str, rows: &[Row], extra: Vec<(&str, Value)>) {
    let mut line = json!({
        "bench": "sandboxd",
        "mode": bench.mode(),
        "date": bench.date,
        "only": only,
    });
    if let Value::Object(map) = &mut line {
        for (key, value) in extra {
            map.insert(key.to_string(), value);
        }
        map.insert(
            "rows".to_string(),
            json!(rows.iter().map(Row::json).collect::<Vec<_>>()),
        );
    }
    println!("{line}");
}

async fn output_rows(bench: &Bench<'_>) -> anyhow::Result<()> {
    let counts = bench.counts;
    bench.step("output: a runner writing to stdout, and cat");
    let figures = output::measure(
        bench.dir.path(),
        &bench.binaries,
        counts.output_bytes,
        counts.output_cap,
    )
    .await?;
    print(bench, "output", &output::rows(&figures), Vec::new());
    Ok(())
}

async fn egress_rows(bench: &Bench<'_>) -> anyhow::Result<()> {
    let counts = bench.counts;
    bench.step("egress: new sandboxes and a runner's connects, posture vs none");
    let figures = egress::measure(
        bench.dir.path(),
        &bench.binaries,
        counts.egress_new,
        counts.egress_rounds,
        counts.egress_connects,
    )
    .await?;
    let rows = egress::rows(&figures);
    let load = machine::load_average();
    let load_start = bench.load_start;
    print!("{}", report::table(&rows));
    println!("\ninfo: {}", egress::info(&figures));
    println!(
        "info: load average {:.2} at the start, {:.2} {:.2} {:.2} at the end",
        load_start[0], load[0], load[1], load[2]
    );
    let extra = vec![
        ("load_start", json!(load_start[0])),
        ("load_end", json!(load[0])),
    ];
    print_json(bench, "egress", &rows, extra);
    Ok(())
}

async fn lifecycle_rows(bench: &Bench<'_>) -> anyhow::Result<()> {
    bench.step(
        "lifecycle: the idle watcher's CPU, probe with it on and off, resume against the fast path",
    );
    let (rows, info) = lifecycle::measure(
        bench.dir.path(),
        &bench.binaries,
        bench.counts.lifecycle,
        &bench.options.lifecycle_isolation,
    )
    .await?;
    print!("{}", report::table(&rows));
    println!("\ninfo: {info}");
    print_json(bench, "lifecycle", &rows, Vec::new());
    Ok(())
}

async fn commands_rows(bench: &Bench<'_>) -> anyhow::Result<()> {
    bench.step("commands: exec to its proof, output through the store, background commands");
    let asked = if bench.options.quick {
        commands::Asked {
            execs: 20,
            stream_bytes: 16 << 20,
            background: 50,
        }
    } else {
        commands::Asked {
            execs: 300,
            stream_bytes: 1 << 30,
            background: 1000,
        }
    };
    let figures = commands::measure(bench.dir.path(), &bench.binaries, &asked).await?;
    let mut rows = commands::rows(&figures);
    match docker::unavailable().await {
        Some(reason) => println!("x4 (docker exec) not measured: {reason}"),
        None => {
            bench.step("commands: docker exec against the Engine's own");
            let count = if bench.options.quick { 10 } else { 200 };
            let figures = docker_exec::measure(bench.dir.path(), &bench.binaries, count).await?;
            rows.extend(docker_exec::rows(&figures));
        }
    }
    print(bench, "commands", &rows, Vec::new());
    Ok(())
}

async fn events_rows(bench: &Bench<'_>) -> anyhow::Result<()> {
    let counts = bench.counts;
    bench.step("events: probe, fast path and new sandboxes with and without a follower");
    let figures = events::measure(
        bench.dir.path(),
        &bench.binaries,
        counts.events_probes,
        counts.warmup,
        counts.events_new,
    )
    .await?;
    let rows = events::rows(&figures);
    print!("{}", report::table(&rows));
    println!("\ninfo: {}", events::info(&figures));
    print_json(bench, "events", &rows, Vec::new());
    Ok(())
}

async fn metrics_rows(bench: &Bench<'_>) -> anyhow::Result<()> {
    let counts = bench.counts;
    bench.step("metrics: probe and fast path, metrics_listen on vs off, side by side");
    let figures = metrics::measure(
        bench.dir.path(),
        &bench.binaries,
        counts.metrics_calls,
        counts.warmup,
    )
    .await?;
    let rows = metrics::rows(&figures);
    print!("{}", report::table(&rows));
    println!("\ninfo: {}", metrics::info(&figures));
    print_json(bench, "metrics", &rows, Vec::new());
    Ok(())
}

async fn view_rows(bench: &Bench<'_>) -> anyhow::Result<()> {
    let counts = bench.counts;
    bench.step("view: new sandboxes, isolation = full vs uid-cgroup; each namespace raw");
    let figures = isolation::measure(
        bench.dir.path(),
        &bench.binaries,
        counts.view_new,
        counts.view_raw,
    )
    .await?;
    let rows = isolation::rows(&figures);
    print!("{}", report::table(&rows));
    println!("\ninfo: {}", isolation::info(&figures));
    print_json(bench, "view", &rows, Vec::new());
    Ok(())
}

async fn scale_rows(bench: &Bench<'_>) -> anyhow::Result<()> {
    bench.step(&format!("(s) {} running sandboxes", bench.counts.scale));
    let (rows, info) = scale::measure(
        bench.dir.path(),
        &bench.binaries,
        &bench.spawner,
        &scale_asked(bench),
    )
    .await?;
    print!("{}", report::table(&rows));
    println!("\ninfo: {info}");
    let machine = &bench.machine;
    let extra = vec![(
        "machine",
        json!({ "nproc": machine.nproc, "kernel": machine.kernel, "mem_total_mib": machine.mem_total_mib }),
    )];
    print_json(bench, "scale", &rows, extra);
    Ok(())
}

/// What row (s) is asked to hold.
pub fn scale_asked<'a>(bench: &'a Bench<'_>) -> scale::Asked<'a> {
    scale::Asked {
        count: bench.counts.scale,
        isolation: &bench.options.scale_isolation,
    }
}

async fn node_rows(bench: &Bench<'_>) -> anyhow::Result<()> {
    let counts = bench.counts;
    bench.step("node: ensure through the Node package vs the Rust client");
    let figures = node::measure(
        bench.dir.path(),
        &bench.binaries,
        counts.serial,
        counts.fast,
    )
    .await?;
    print(bench, "node", &node::rows(&figures), Vec::new());
    Ok(())
}

async fn docker_rows(bench: &Bench<'_>) -> anyhow::Result<()> {
    if let Some(reason) = docker::unavailable().await {
        bail!("the docker row cannot run here: {reason}");
    }
    let figures =
        docker::measure(bench.dir.path(), &bench.binaries, bench.counts.containers).await?;
    print(bench, "docker", &docker::rows(&figures), Vec::new());
    Ok(())
}

async fn peers_rows(bench: &Bench<'_>) -> anyhow::Result<()> {
    bench.step("peers: one static program under each sandbox installed here");
    let asked = if bench.options.quick {
        peers::QUICK
    } else {
        peers::FULL
    };
    let figures = peers::measure(
        bench.dir.path(),
        &bench.binaries,
        asked,
        bench.options.no_docker,
        bench.options.compare.as_deref(),
    )
    .await?;
    let rows = peers::rows(&figures);
    print!("{}", report::table(&rows));
    println!("\n{}", peers::summary(&figures));
    print_json(
        bench,
        "peers",
        &rows,
        vec![("peers", peers::json(&figures))],
    );
    Ok(())
}

/// `--only-kubernetes`: the kubernetes row alone, before anything else of
/// a run is set up.
pub async fn kubernetes_rows(options: &Options, counts: Counts) -> anyhow::Result<()> {
    let binaries = Binaries::locate(options.quick)?;
    let dir = BenchDir::create(options.keep)?;
    let figures = kubernetes::measure(dir.path(), &binaries, counts.k8s_new, counts.k8s_calls)
        .await
        .context("the kubernetes row")?;
    let (rows, note) = kubernetes::rows(&figures);
    println!(
        "sandboxd bench, kubernetes row only ({} mode) — {}
{note}
",
        mode(options),
        machine::utc_now()
    );
    print!("{}", report::table(&rows));
    let line = json!({
        "bench": "sandboxd",
        "mode": mode(options),
        "driver": "kubernetes",
        "kubernetes": note,
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
    });
    println!("{line}");
    Ok(())
}
