//! `bench`: how close sandboxd comes to the machine's own limits, measured
//! in one run.
//!
//! ```text
//! cargo build --release --workspace --bins && cargo run --release -p sandboxd-tests --bin bench
//! ```
//!
//! It starts the release `sandboxd` (local-process driver) on a temporary
//! socket and state directory with a tiny runner (`bench-runner`: waits for
//! SIGTERM, exits 0), and measures each row of the issue's table next to a
//! baseline this same process measures in the same run, with no daemon in
//! between (see `bench/raw.rs` for exactly what each baseline does). It
//! prints a table, then ONE line of JSON. No figure is asserted: the
//! machines are noisy, and the point is the ratio to the baseline.
//!
//! The order: raw ping-pong, then (a) probes and their diagnostics (a
//! current-thread client, a bare tarpc stub, pre-encoded frames from a
//! plain socket), (b) fast-path ensures, (c)/(e) raw spawns and stops then
//! the daemon's (and, next to them, one sandbox's cgroup made and limited
//! alone), (d) raw spawns from two threads, then the daemon's burst
//! of distinct ensures from 64 tasks on one connection, (f) VmRSS with the
//! burst running, (g) a second burst with a paced prober on a connection
//! of its own (and one on the burst's own connection), and, when an engine
//! and the test image are here, the docker row. The state directory lives
//! under `$TMPDIR` (else /tmp); its file system shows in the output, since
//! a new sandbox creates up to two inodes there.
//!
//! `--quick` runs the same code with small counts (seconds), so CI can
//! check the benchmark still runs; without a release build it falls back
//! to the binaries next to itself (a debug build), figures meaningless. `--keep` keeps the temporary directory
//! (daemon log included). `--burst-connections N` spreads row (d)'s 64
//! tasks over N client connections (default 1: one shared client, as the
//! client library is meant to be used). `--daemon PATH` measures another
//! `sandboxd` binary (a build from before a change, say) in its place;
//! `--no-docker` skips the docker row (which otherwise runs when an engine
//! answers and the test image is built). `--only-output` runs only the
//! output row (see `bench/output.rs`), which a full run measures after the
//! other local-process rows; `--only-egress` runs only the egress rows
//! (row (c) and a runner's connects to 127.0.0.1 under each
//! posture against `egress = "none"`, see `bench/egress.rs`), which a full
//! run measures after the output row; `--only-view` runs only the view rows
//! (row (c) with `isolation = "full"` against `"uid-cgroup"`, on
//! the host's mounts and with 200 more, and each namespace's raw cost, see
//! `bench/isolation.rs`), which a full run measures after the egress rows;
//! `--only-commands` runs only the commands rows (exec to its proof
//! against a setns'd fork+exec, output through the store against a raw
//! pipe, memory per background command; see `bench/commands.rs`; and,
//! where an engine answers, the docker tier's exec against the Engine's
//! own create + start + inspect, see `bench/docker_exec.rs`; a full run
//! does not measure them);
//! `--only-events` runs only the event-stream rows (see
//! `bench/events.rs`; a full run does not measure them); `--only-metrics`
//! runs only the metrics rows (probe and fast path with
//! `metrics_listen` on vs off, see `bench/metrics.rs`); `--only-lifecycle`
//! runs only the lifecycle rows (the idle watcher's daemon CPU
//! with many quiet sandboxes, probe with it on and off, resume against the
//! fast path; see `bench/lifecycle.rs`; `--lifecycle-count N` holds N
//! sandboxes per daemon instead of 1,000, `--lifecycle-isolation
//! uid-cgroup` runs them without the private view, whose kernel memory,
//! about 2 MiB a sandbox, keeps 10,000 from fitting a 24 GiB machine); a
//! full run measures neither.
//! `--compare PATH` measures row (c) once more,
//! in turn with another `sandboxd` (the build before a change) and with
//! this one with fewer limits, so the ratio of the two binaries is taken
//! in the same run (see `bench/compare.rs`). `--only-calls probe|ensure|new|warm N`
//! makes only N calls of one kind, for a system-call tracer attached to
//! the daemon (see `bench/calls.rs`).
//! A full run ends with (s), a daemon of its
//! own holding 10,000 running sandboxes (200 with `--quick`: see
//! `bench/scale.rs`); `--scale-only` runs that row alone. `--only-node` runs only
//! the node row (the Node package against the Rust client, and the
//! seed's in-process spawn; see `bench/node.rs`). The peer row sets rows (c) and (d) against the seed's own `local-process` driver
//! run in Node (`bench/peer.mjs`), when `node` is on PATH; `--only-spawns`
//! runs only rows (c), (d), (e) with their raw baselines, the peer row and,
//! with `--compare`, row (c)/(e) in turn with the other daemon;
//! `--only-prepared` runs only the prepared-sandbox rows (row
//! (c) warm and cold under both isolation settings in turn, (e), (d) with
//! a pool of 64 and with none, the idle cost of a pool of 64, the peer
//! row; see `bench/prepared.rs`);
//! `--only-docker` runs only the docker row; `--scale-count N` holds N
//! sandboxes in row (s) instead of 10,000, and `--scale-isolation
//! uid-cgroup` runs row (s)'s daemon without the private view (to tell the
//! daemon's share of its stop from the view's).
//! The kubernetes row runs against
//! the in-process stand-in API server (figures meaningless) unless
//! `SANDBOXD_TEST_KUBECONFIG` names a real cluster; `--no-kubernetes`
//! skips it and `--only-kubernetes` runs nothing else.
//! `--only-peers` runs only the peers rows: one static program started
//! under each sandbox installed here (bubblewrap, runc or crun, `runsc do`,
//! `docker run`), a raw exec, and sandboxd cold, prepared and through
//! `sandboxctl`, each timed to the program's own first-instruction clock
//! (see `bench/peers.rs`); a full run measures them after the output row.
//! `--only-files` runs only the files rows: a tree copied in and out with
//! put_tar/get_tar and put_file/get_file against `tar -c | tar -x` (see
//! `bench/files.rs`).

#[path = "bench/calls.rs"]
mod calls;
#[path = "bench/commands.rs"]
mod commands;
#[path = "bench/compare.rs"]
mod compare;
#[path = "bench/docker.rs"]
mod docker;
#[path = "bench/docker_exec.rs"]
mod docker_exec;
#[path = "bench/egress.rs"]
mod egress;
#[path = "bench/events.rs"]
mod events;
#[path = "bench/files.rs"]
mod files;
#[path = "bench/isolation.rs"]
mod isolation;
#[path = "bench/kubernetes.rs"]
mod kubernetes;
#[path = "bench/lifecycle.rs"]
mod lifecycle;
#[path = "bench/machine.rs"]
mod machine;
#[path = "bench/metrics.rs"]
mod metrics;
#[path = "bench/node.rs"]
mod node;
#[path = "bench/output.rs"]
mod output;
#[path = "bench/peer.rs"]
mod peer;
#[path = "bench/peers.rs"]
mod peers;
#[path = "bench/peers_host.rs"]
mod peers_host;
#[path = "bench/peers_program.rs"]
mod peers_program;
#[path = "bench/peers_sandboxd.rs"]
mod peers_sandboxd;
#[path = "bench/prepared.rs"]
mod prepared;
#[path = "bench/raw.rs"]
mod raw;
#[path = "bench/report.rs"]
mod report;
#[path = "bench/rows.rs"]
mod rows;
#[path = "bench/scale.rs"]
mod scale;
#[path = "bench/setup.rs"]
mod setup;
#[path = "bench/stats.rs"]
mod stats;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::json;

use report::{Goal, Row};
use rows::connect;
use setup::{BenchDir, Binaries, Daemon};
use stats::Samples;

/// How many of each operation a run does.
#[derive(Debug, Clone, Copy)]
struct Counts {
    /// (a) probes and their ping-pong baseline.
    probes: usize,
    /// (b) fast-path ensures.
    fast: usize,
    /// (c)/(e) new sandboxes one at a time, then their deprovisions.
    serial: usize,
    /// (d)/(f)/(g) the burst of distinct ensures.
    burst: usize,
    /// (d) concurrent client tasks.
    tasks: usize,
    /// Calls made before recording, for (a) and (b).
    warmup: usize,
    /// Docker row: new containers each way.
    containers: usize,
    /// Output row: bytes the runner writes, and the cap on its output.
    output_bytes: u64,
    output_cap: u64,
    /// (s) running sandboxes held at once.
    scale: usize,
    /// Kubernetes row: new sandboxes each way, then fast paths, probes and GETs.
    k8s_new: usize,
    k8s_calls: usize,
    /// Egress rows: new sandboxes on each posture's daemon, then rounds of
    /// one connect-loop runner on each, and its connects.
    egress_new: usize,
    egress_rounds: usize,
    egress_connects: u64,
    /// View rows: new sandboxes on each isolation setting (twice: with the
    /// host's mounts and with 200 more), and raw unshares of each namespace.
    view_new: usize,
    view_raw: usize,
    /// Event rows: probes and fast paths, and new sandboxes, each side.
    events_probes: usize,
    /// Metrics rows: probes and fast paths on each side (more than the
    /// other quick rows: the difference sought is a few percent).
    metrics_calls: usize,
    events_new: usize,
    /// Lifecycle rows: quiet running sandboxes each daemon holds.
    lifecycle: usize,
}

const FULL: Counts = Counts {
    probes: 10_000,
    fast: 10_000,
    serial: 500,
    burst: 1_000,
    tasks: 64,
    warmup: 1_000,
    containers: 20,
    output_bytes: 1024 * output::MIB,
    output_cap: 16 * output::MIB,
    scale: 10_000,
    k8s_new: 50,
    k8s_calls: 500,
    egress_new: 200,
    egress_rounds: 6,
    egress_connects: 5_000,
    view_new: 200,
    view_raw: 500,
    events_probes: 10_000,
    metrics_calls: 10_000,
    events_new: 200,
    lifecycle: 1_000,
};

const QUICK: Counts = Counts {
    probes: 1_000,
    fast: 1_000,
    serial: 40,
    burst: 100,
    tasks: 64,
    warmup: 100,
    containers: 2,
    output_bytes: 32 * output::MIB,
    output_cap: 4 * output::MIB,
    scale: 200,
    k8s_new: 3,
    k8s_calls: 20,
    egress_new: 10,
    egress_rounds: 1,
    egress_connects: 100,
    view_new: 10,
    view_raw: 20,
    events_probes: 1_000,
    metrics_calls: 4_000,
    events_new: 40,
    lifecycle: 100,
};

#[derive(Debug)]
struct Options {
    quick: bool,
    keep: bool,
    burst_connections: usize,
    /// Another `sandboxd` binary to measure (for before/after comparisons).
    daemon: Option<std::path::PathBuf>,
    /// Skip the docker row.
    no_docker: bool,
    /// Run only the output row.
    only_output: bool,
    /// Run only the egress rows.
    only_egress: bool,
    /// Run only the view rows (isolation = full vs uid-cgroup).
    only_view: bool,
    /// Run only the event-stream rows.
    only_events: bool,
    only_commands: bool,
    /// Run only the metrics rows (metrics_listen on vs off).
    only_metrics: bool,
    /// Run only the lifecycle rows (the idle watcher, resume).
    only_lifecycle: bool,
    /// Run only the scale row (s).
    scale_only: bool,
    /// Run only the node row (the Node package against the Rust client).
    only_node: bool,
    /// Run only rows (c), (d), (e), the peer row and `--compare`.
    only_spawns: bool,
    /// Run only the docker row.
    only_docker: bool,
    /// Run only the prepared-sandbox rows.
    only_prepared: bool,
    /// Run only the peers rows (the same program under each sandbox).
    only_peers: bool,
    /// Row (s)'s count instead of the mode's.
    scale_count: Option<usize>,
    lifecycle_count: Option<usize>,
    /// The lifecycle rows' daemons' `isolation` (default `full`).
    lifecycle_isolation: String,
    /// Row (s)'s daemon's `isolation` (default `full`).
    scale_isolation: String,
    /// Skip the kubernetes row.
    no_kubernetes: bool,
    /// Run the kubernetes row and nothing else.
    only_kubernetes: bool,
    /// Another `sandboxd` to measure row (c) against, beside this one.
    compare: Option<std::path::PathBuf>,
    /// Only a stream of one kind of call, for a system-call count.
    only_calls: Option<(calls::Kind, usize)>,
}

/// The value of `flag`, an `isolation` setting.
fn isolation_arg(flag: &str, value: Option<String>) -> Result<String, String> {
    match value {
        Some(value) if value == "full" || value == "uid-cgroup" => Ok(value),
        Some(value) => Err(format!("{flag} '{value}': full or uid-cgroup")),
        None => Err(format!("{flag} needs full or uid-cgroup")),
    }
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        quick: false,
        keep: false,
        burst_connections: 1,
        daemon: None,
        no_docker: false,
        only_output: false,
        only_egress: false,
        only_view: false,
        only_events: false,
        only_commands: false,
        only_metrics: false,
        only_lifecycle: false,
        scale_only: false,
        no_kubernetes: false,
        only_kubernetes: false,
        compare: None,
        only_calls: None,
        only_node: false,
        only_spawns: false,
        only_docker: false,
        only_prepared: false,
        only_peers: false,
        scale_count: None,
        lifecycle_count: None,
        lifecycle_isolation: "full".to_string(),
        scale_isolation: "full".to_string(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--keep" => options.keep = true,
            "--no-docker" => options.no_docker = true,
            "--only-output" => options.only_output = true,
            "--only-egress" => options.only_egress = true,
            "--only-view" => options.only_view = true,
            "--only-events" => options.only_events = true,
            "--only-commands" => options.only_commands = true,
            "--only-metrics" => options.only_metrics = true,
            "--only-lifecycle" => options.only_lifecycle = true,
            // Dispatched in `run` (see `bench/files.rs`).
            "--only-files" => {}
            "--scale-only" => options.scale_only = true,
            "--only-node" => options.only_node = true,
            "--only-spawns" => options.only_spawns = true,
            "--only-docker" => options.only_docker = true,
            "--only-prepared" => options.only_prepared = true,
            "--only-peers" => options.only_peers = true,
            "--lifecycle-isolation" => {
                options.lifecycle_isolation = isolation_arg(&arg, args.next())?
            }
            "--scale-isolation" => options.scale_isolation = isolation_arg(&arg, args.next())?,
            "--lifecycle-count" => {
                let value = args.next().ok_or("--lifecycle-count needs a count")?;
                options.lifecycle_count =
                    Some(
                        value.parse().ok().filter(|n| *n >= 2).ok_or_else(|| {
                            format!("--lifecycle-count '{value}': a number from 2")
                        })?,
                    );
            }
            "--scale-count" => {
                let value = args.next().ok_or("--scale-count needs a count")?;
                options.scale_count = Some(
                    value
                        .parse()
                        .ok()
                        .filter(|n| *n >= 2)
                        .ok_or_else(|| format!("--scale-count '{value}': a number from 2"))?,
                );
            }
            "--no-kubernetes" => options.no_kubernetes = true,
            "--only-kubernetes" => options.only_kubernetes = true,
            "--burst-connections" => {
                let value = args.next().ok_or("--burst-connections needs a value")?;
                options.burst_connections = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=64).contains(n))
                    .ok_or_else(|| format!("--burst-connections '{value}': 1 to 64"))?;
            }
            "--daemon" => {
                let value = args.next().ok_or("--daemon needs a path")?;
                options.daemon = Some(value.into());
            }
            "--compare" => {
                let value = args.next().ok_or("--compare needs a path")?;
                options.compare = Some(value.into());
            }
            "--only-calls" => {
                let kind = args
                    .next()
                    .ok_or("--only-calls needs probe|ensure|new|warm and a count")?;
                let kind = calls::Kind::parse(&kind)
                    .ok_or_else(|| format!("--only-calls '{kind}': probe, ensure, new or warm"))?;
                let value = args.next().ok_or("--only-calls needs a count")?;
                let count =
                    value.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("--only-calls count '{value}': a positive number")
                    })?;
                options.only_calls = Some((kind, count));
            }
            "-h" | "--help" => {
                println!(
                    "usage: bench [--quick] [--keep] [--burst-connections N] [--daemon PATH] [--compare PATH] \
                     [--no-docker] [--only-output] [--only-egress] [--only-view] [--only-events] [--only-commands] [--only-metrics] [--only-lifecycle] [--lifecycle-count N] [--lifecycle-isolation full|uid-cgroup] [--only-calls probe|ensure|new|warm N] [--scale-only] [--only-node] [--only-spawns] [--only-prepared] [--only-peers] [--only-docker] [--scale-count N] [--scale-isolation full|uid-cgroup] [--no-kubernetes] [--only-kubernetes]\n\n\
                     Runs the release sandboxd against its baselines and prints a table and one \
                     JSON line.\nBuild first: cargo build --release --workspace --bins"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}' (try --help)")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("bench: {message}");
            return ExitCode::from(2);
        }
    };
    if cfg!(debug_assertions) {
        eprintln!(
            "bench: warning: this is a debug build of the bench (the client side of every \
             figure is slower); use `cargo run --release -p sandboxd-tests --bin bench`"
        );
    }
    setup::raise_open_file_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("bench: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs a step to stderr, with the time since the start.
fn step(started: Instant, what: &str) {
    eprintln!("bench: [{:6.1}s] {what}", started.elapsed().as_secs_f64());
}

/// The kubernetes row's figures as table rows, and a note on where they came from.
fn kubernetes_rows(figures: &kubernetes::KubernetesFigures) -> (Vec<Row>, String) {
    let ms = |samples: &Samples, p: f64| samples.percentile_us(p) / 1e3;
    let rows = vec![
        Row {
            row: "k8s",
            what: "ensure new sandbox p50".into(),
            unit: "ms",
            value: ms(&figures.sandboxd_new, 50.0),
            baseline_what: "the 4 writes with kube p50".into(),
            baseline: Some(ms(&figures.direct_new, 50.0)),
            goal: Goal::RatioAtMost(1.1),
        },
        Row {
            row: "k8s",
            what: "ensure fast path p50".into(),
            unit: "ms",
            value: ms(&figures.fast, 50.0),
            baseline_what: "GET deployment with kube p50".into(),
            baseline: Some(ms(&figures.direct_get, 50.0)),
            goal: Goal::Info,
        },
        Row {
            row: "k8s",
            what: "probe p50".into(),
            unit: "ms",
            value: ms(&figures.probe, 50.0),
            baseline_what: "GET deployment with kube p50".into(),
            baseline: Some(ms(&figures.direct_get, 50.0)),
            goal: Goal::Info,
        },
    ];
    let note = format!(
        "measured against {}: {} new sandboxes each way, {} fast paths, probes and GETs",
        figures.cluster,
        figures.sandboxd_new.len(),
        figures.fast.len()
    );
    (rows, note)
}

/// `--only-kubernetes`: the kubernetes row alone.
async fn run_kubernetes_only(options: &Options, counts: Counts) -> anyhow::Result<()> {
    let binaries = Binaries::locate(options.quick)?;
    let dir = BenchDir::create(options.keep)?;
    let figures = kubernetes::measure(dir.path(), &binaries, counts.k8s_new, counts.k8s_calls)
        .await
        .context("the kubernetes row")?;
    let (rows, note) = kubernetes_rows(&figures);
    println!(
        "sandboxd bench, kubernetes row only ({} mode) — {}
{note}
",
        if options.quick { "quick" } else { "full" },
        machine::utc_now()
    );
    print!("{}", report::table(&rows));
    let line = json!({
        "bench": "sandboxd",
        "mode": if options.quick { "quick" } else { "full" },
        "driver": "kubernetes",
        "kubernetes": note,
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
    });
    println!("{line}");
    Ok(())
}

async fn run(options: &Options) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut counts = if options.quick { QUICK } else { FULL };
    if let Some(count) = options.lifecycle_count {
        counts.lifecycle = count;
    }
    if let Some(count) = options.scale_count {
        counts.scale = count;
    }
    let scale_asked = scale::Asked {
        count: counts.scale,
        isolation: &options.scale_isolation,
    };
    if options.only_kubernetes {
        return run_kubernetes_only(options, counts).await;
    }
    if std::env::args().any(|arg| arg == "--only-files") {
        return files::run_only(options.quick, options.keep).await;
    }
    let machine = machine::Machine::read();
    let load_start = machine::load_average();
    let date = machine::utc_now();
    let mut binaries = Binaries::locate(options.quick)?;
    if let Some(daemon) = &options.daemon {
        binaries.sandboxd = daemon.clone();
    }
    let identity = setup::runner_identity()?;
    let dir = BenchDir::create(options.keep)?;
    let runner = setup::runner_copy(dir.path(), &binaries)?;
    let spawner = raw::RawSpawner::new(
        runner.clone(),
        identity.as_ref().map(|(uid, gid, _)| (*uid, *gid)),
        dir.path().join("raw"),
    )?;
    // The raw baseline's user; a root daemon gives each sandbox a uid of
    // its own from `runner_uid_range`, which costs the same.
    let runner_user = identity.as_ref().map_or_else(
        || format!("{} (no switch)", machine.user),
        |i| {
            format!(
                "{} in the raw baseline, a uid per sandbox in the daemon",
                i.2
            )
        },
    );
    eprintln!(
        "bench: {} mode; {} × {}; kernel {}; load {:.2}; daemon as {}, runners as {}",
        if options.quick { "quick" } else { "full" },
        machine.nproc,
        machine.cpu_model,
        machine.kernel,
        load_start[0],
        machine.user,
        runner_user
    );

    if options.only_output {
        step(started, "output: a runner writing to stdout, and cat");
        let figures = output::measure(
            dir.path(),
            &binaries,
            counts.output_bytes,
            counts.output_cap,
        )
        .await?;
        let rows = output::rows(&figures);
        print!("{}", report::table(&rows));
        let line = json!({
            "bench": "sandboxd",
            "mode": if options.quick { "quick" } else { "full" },
            "date": date,
            "only": "output",
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if options.only_egress {
        step(
            started,
            "egress: new sandboxes and a runner's connects, posture vs none",
        );
        let figures = egress::measure(
            dir.path(),
            &binaries,
            counts.egress_new,
            counts.egress_rounds,
            counts.egress_connects,
        )
        .await?;
        let rows = egress::rows(&figures);
        let load = machine::load_average();
        print!("{}", report::table(&rows));
        println!("\ninfo: {}", egress::info(&figures));
        println!(
            "info: load average {:.2} at the start, {:.2} {:.2} {:.2} at the end",
            load_start[0], load[0], load[1], load[2]
        );
        let line = json!({
            "bench": "sandboxd",
            "mode": if options.quick { "quick" } else { "full" },
            "date": date,
            "only": "egress",
            "load_start": load_start[0],
            "load_end": load[0],
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if options.only_lifecycle {
        step(
            started,
            "lifecycle: the idle watcher's CPU, probe with it on and off, resume against the fast path",
        );
        let (rows, info) = lifecycle::measure(
            dir.path(),
            &binaries,
            counts.lifecycle,
            &options.lifecycle_isolation,
        )
        .await?;
        print!("{}", report::table(&rows));
        println!("\ninfo: {info}");
        let line = json!({
            "bench": "sandboxd",
            "mode": if options.quick { "quick" } else { "full" },
            "date": date,
            "only": "lifecycle",
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if options.only_commands {
        step(
            started,
            "commands: exec to its proof, output through the store, background commands",
        );
        let asked = if options.quick {
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
        let figures = commands::measure(dir.path(), &binaries, &asked).await?;
        let mut rows = commands::rows(&figures);
        match docker::unavailable().await {
            Some(reason) => println!("x4 (docker exec) not measured: {reason}"),
            None => {
                step(started, "commands: docker exec against the Engine's own");
                let count = if options.quick { 10 } else { 200 };
                let figures = docker_exec::measure(dir.path(), &binaries, count).await?;
                rows.extend(docker_exec::rows(&figures));
            }
        }
        print!("{}", report::table(&rows));
        let line = json!({
            "bench": "sandboxd",
            "mode": if options.quick { "quick" } else { "full" },
            "date": date,
            "only": "commands",
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if options.only_events {
        step(
            started,
            "events: probe, fast path and new sandboxes with and without a follower",
        );
        let figures = events::measure(
            dir.path(),
            &binaries,
            counts.events_probes,
            counts.warmup,
            counts.events_new,
        )
        .await?;
        let rows = events::rows(&figures);
        print!("{}", report::table(&rows));
        println!("\ninfo: {}", events::info(&figures));
        let line = json!({
            "bench": "sandboxd",
            "mode": if options.quick { "quick" } else { "full" },
            "date": date,
            "only": "events",
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if options.only_metrics {
        step(
            started,
            "metrics: probe and fast path, metrics_listen on vs off, side by side",
        );
        let figures =
            metrics::measure(dir.path(), &binaries, counts.metrics_calls, counts.warmup).await?;
        let rows = metrics::rows(&figures);
        print!("{}", report::table(&rows));
        println!("\ninfo: {}", metrics::info(&figures));
        let line = json!({
            "bench": "sandboxd",
            "mode": if options.quick { "quick" } else { "full" },
            "date": date,
            "only": "metrics",
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if options.only_view {
        step(
            started,
            "view: new sandboxes, isolation = full vs uid-cgroup; each namespace raw",
        );
        let figures =
            isolation::measure(dir.path(), &binaries, counts.view_new, counts.view_raw).await?;
        let rows = isolation::rows(&figures);
        print!("{}", report::table(&rows));
        println!("\ninfo: {}", isolation::info(&figures));
        let line = json!({
            "bench": "sandboxd",
            "mode": if options.quick { "quick" } else { "full" },
            "date": date,
            "only": "view",
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if options.scale_only {
        step(started, &format!("(s) {} running sandboxes", counts.scale));
        let (rows, info) = scale::measure(dir.path(), &binaries, &spawner, &scale_asked).await?;
        print!("{}", report::table(&rows));
        println!("\ninfo: {info}");
        let line = json!({
            "bench": "sandboxd",
            "mode": if options.quick { "quick" } else { "full" },
            "date": date,
            "only": "scale",
            "machine": { "nproc": machine.nproc, "kernel": machine.kernel, "mem_total_mib": machine.mem_total_mib },
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if options.only_node {
        step(
            started,
            "node: ensure through the Node package vs the Rust client",
        );
        let figures = node::measure(dir.path(), &binaries, counts.serial, counts.fast).await?;
        let rows = node::rows(&figures);
        print!("{}", report::table(&rows));
        let line = json!({
            "bench": "sandboxd",
            "mode": if options.quick { "quick" } else { "full" },
            "date": date,
            "only": "node",
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if let Some((kind, count)) = options.only_calls {
        return calls::run(dir.path(), &binaries, kind, count).await;
    }
    if options.only_docker {
        if let Some(reason) = docker::unavailable().await {
            bail!("the docker row cannot run here: {reason}");
        }
        let figures = docker::measure(dir.path(), &binaries, counts.containers).await?;
        let rows = docker_rows(&figures);
        print!("{}", report::table(&rows));
        let line = json!({
            "bench": "sandboxd",
            "mode": if options.quick { "quick" } else { "full" },
            "date": date,
            "only": "docker",
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if options.only_peers {
        step(
            started,
            "peers: one static program under each sandbox installed here",
        );
        let asked = if options.quick {
            peers::QUICK
        } else {
            peers::FULL
        };
        let figures = peers::measure(dir.path(), &binaries, asked, options.no_docker).await?;
        let rows = peers::rows(&figures);
        print!("{}", report::table(&rows));
        println!("\n{}", peers::summary(&figures));
        let line = json!({
            "bench": "sandboxd",
            "mode": if options.quick { "quick" } else { "full" },
            "date": date,
            "only": "peers",
            "peers": peers::json(&figures),
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if options.only_prepared {
        let setting = Spawns {
            binaries: &binaries,
            dir: dir.path(),
            spawner: &spawner,
            runner: &runner,
        };
        return run_prepared_only(options, counts, setting, started).await;
    }
    if options.only_spawns {
        let setting = Spawns {
            binaries: &binaries,
            dir: dir.path(),
            spawner: &spawner,
            runner: &runner,
        };
        return run_spawns_only(options, counts, setting, started).await;
    }
    let fs_type = raw::fs_type(dir.path());
    let (file_creates, dir_creates) = raw::inode_costs(dir.path())?;
    step(started, "starting sandboxd");
    let mut daemon = Daemon::start(dir.path(), &binaries)?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_idle = daemon.rss_kib().context("cannot read the daemon's VmRSS")?;
    let client = connect(&daemon.socket).await?;
    let hot = "bench-hot";
    let report = client
        .ensure_session_sandbox(hot, &rows::sandbox_env(hot))
        .await?;
    if !report.created {
        bail!("the hot sandbox already existed");
    }
    let (request_bytes, response_bytes) =
        rows::probe_frame_sizes(&daemon.socket, dir.path(), hot).await?;

    // (a) probe round trip vs raw ping-pong of the same frame sizes.
    step(started, "(a) raw ping-pong baseline");
    let ping_pong = {
        let dir = dir.path().to_path_buf();
        let (count, warmup) = (counts.probes, counts.warmup);
        tokio::task::spawn_blocking(move || {
            raw::ping_pong(&dir, request_bytes, response_bytes, count, warmup)
        })
        .await??
    };
    step(started, "(a) probe round trips");
    let probes = rows::probe_serial(&client, hot, counts.probes, counts.warmup).await?;
    // The same calls from a task on the runtime's workers, where a server's
    // request handlers run (the line above calls from `block_on`'s thread,
    // so each reply crosses from a worker to it).
    let probes_on_worker = {
        let (client, count, warmup) = (client.clone(), counts.probes / 2, counts.warmup);
        tokio::spawn(async move { rows::probe_serial(&client, hot, count, warmup).await }).await??
    };
    let probes_current_thread = {
        let (socket, count, warmup) = (daemon.socket.clone(), counts.probes / 2, counts.warmup);
        tokio::task::spawn_blocking(move || {
            rows::probe_serial_current_thread(socket, hot.to_string(), count, warmup)
        })
        .await??
    };
    step(started, "(a) tarpc floor: bare stub");
    let (bare_version, bare_probe) =
        rows::bare_stub_serial(&daemon.socket, hot, counts.probes / 2, counts.warmup).await?;

    // (b) fast-path ensure vs probe.
    let daemon_side = {
        let (socket, count, warmup) = (daemon.socket.clone(), counts.probes / 2, counts.warmup);
        tokio::task::spawn_blocking(move || raw::probe_from_raw_socket(&socket, hot, count, warmup))
            .await??
    };

    step(started, "(b) fast-path ensures");
    let fast = rows::ensure_fast_serial(&client, hot, counts.fast, counts.warmup).await?;

    // (c) + (e) one at a time: raw first, then the daemon.
    step(started, "(c)/(e) raw spawn + stop baseline");
    let (raw_spawns, raw_stops) = {
        let (spawner, count) = (spawner.clone(), counts.serial);
        tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let (spawns, children) = raw::spawn_serial(&spawner, count)?;
            let stops = raw::stop_serial(children)?;
            spawner.clean();
            Ok((spawns, stops))
        })
        .await??
    };
    step(started, "(c) cgroup creation + limit writes alone (raw)");
    let cgroup_setups = {
        let count = counts.serial;
        tokio::task::spawn_blocking(move || raw::cgroup_setup_serial(count)).await??
    };
    // Inodes cost more once the file system has seen deletions (ext4
    // without a journal scans for recently deleted ones): look again.
    let (file_creates_later, _) = raw::inode_costs(dir.path())?;
    step(started, "(c) new sandboxes one at a time");
    let new_serial = rows::ensure_new_serial(&client, "bench-serial", counts.serial).await?;
    step(started, "(e) deprovisions one at a time");
    let deprovisions = rows::deprovision_serial(&client, "bench-serial", counts.serial).await?;

    // (d) raw spawn throughput from 2 threads; then the same burst again
    // with a paced raw ping-pong alongside, the raw analogue of row (g).
    step(started, "(d) raw spawn throughput baseline (2 threads)");
    let (raw_burst, raw_burst_cpu, raw_during) = {
        let (spawner, count, dir) = (spawner.clone(), counts.burst, dir.path().to_path_buf());
        tokio::task::spawn_blocking(move || -> anyhow::Result<(Duration, f64, Samples)> {
            let cpu_before = machine::own_cpu_us();
            let (elapsed, children) = raw::spawn_parallel(&spawner, count, 2)?;
            let cpu = machine::own_cpu_us() - cpu_before;
            raw::stop_all(children)?;
            spawner.clean();
            let stop = std::sync::atomic::AtomicBool::new(false);
            let (burst, paced) = std::thread::scope(|scope| {
                let paced = scope.spawn(|| {
                    raw::ping_pong_paced(
                        &dir,
                        request_bytes,
                        response_bytes,
                        rows::PROBE_INTERVAL,
                        &stop,
                    )
                });
                std::thread::sleep(Duration::from_millis(20));
                let burst = raw::spawn_parallel(&spawner, count, 2);
                stop.store(true, std::sync::atomic::Ordering::Release);
                (burst, paced.join())
            });
            let (_, children) = burst?;
            raw::stop_all(children)?;
            spawner.clean();
            let paced = paced.map_err(|_| anyhow::anyhow!("the paced ping-pong panicked"))??;
            Ok((elapsed, cpu, paced))
        })
        .await??
    };

    // (d) the burst alone; (f) memory with all of it running.
    let rss_warm = daemon.rss_kib().context("cannot read the daemon's VmRSS")?;
    step(
        started,
        &format!(
            "(d) {} distinct ensures from {} tasks over {} connection(s)",
            counts.burst, counts.tasks, options.burst_connections
        ),
    );
    let mut burst_clients = Vec::new();
    for _ in 0..options.burst_connections {
        burst_clients.push(connect(&daemon.socket).await?);
    }
    let daemon_cpu_before = machine::cpu_us(daemon.pid).unwrap_or(f64::NAN);
    let (burst_elapsed, burst_latencies) = rows::burst(
        &burst_clients,
        "bench-burst",
        counts.burst,
        counts.tasks,
        false,
    )
    .await?;
    let daemon_burst_cpu = machine::cpu_us(daemon.pid).unwrap_or(f64::NAN) - daemon_cpu_before;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = client.status().await?;
    let running = status.counts.running as usize;
    if running != counts.burst + 1 {
        bail!(
            "expected {} running sandboxes, status says {running}",
            counts.burst + 1
        );
    }
    let rss_loaded = daemon.rss_kib().context("cannot read the daemon's VmRSS")?;
    let reaper_rss = daemon.reaper_rss_kib();
    step(started, "deprovisioning the burst");
    let (teardown_elapsed, _) = rows::burst(
        &burst_clients,
        "bench-burst",
        counts.burst,
        counts.tasks,
        true,
    )
    .await?;

    // (g) the same burst again, with a paced prober on a connection of its own.
    step(started, "(g) probes during a second burst");
    let prober = rows::Prober::start(daemon.socket.clone(), hot.to_string())?;
    let stop_shared = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let shared_prober = tokio::spawn(rows::probe_paced(
        burst_clients[0].clone(),
        hot.to_string(),
        stop_shared.clone(),
    ));
    prober.begin();
    // One task fewer, so the shared prober keeps the connection within the
    // daemon's 64 calls in flight per connection.
    let second = rows::burst(
        &burst_clients,
        "bench-again",
        counts.burst,
        counts.tasks - 1,
        false,
    )
    .await;
    let during = prober.finish()?;
    stop_shared.store(true, std::sync::atomic::Ordering::Release);
    let during_shared = shared_prober.await??;
    let (second_elapsed, _) = second?;
    rows::burst(
        &burst_clients,
        "bench-again",
        counts.burst,
        counts.tasks,
        true,
    )
    .await?;
    client.deprovision_session_sandbox(hot).await?;
    drop((client, burst_clients));
    step(started, "stopping sandboxd");
    daemon.stop()?;
    let comparison = match &options.compare {
        Some(other) => {
            step(
                started,
                &format!(
                    "(c) new sandboxes in turn: this daemon, {}, and this one with fewer limits",
                    other.display()
                ),
            );
            Some(compare::measure(dir.path(), &binaries, other, counts.serial).await?)
        }
        None => None,
    };
    let peer_figures = measure_peer(started, &runner, dir.path(), counts)?;
    step(started, "output: a runner writing to stdout, and cat");
    let output_figures = output::measure(
        dir.path(),
        &binaries,
        counts.output_bytes,
        counts.output_cap,
    )
    .await?;
    step(
        started,
        "peers: one static program under each sandbox installed here",
    );
    let peers_asked = if options.quick {
        peers::QUICK
    } else {
        peers::FULL
    };
    let peers_figures =
        peers::measure(dir.path(), &binaries, peers_asked, options.no_docker).await?;
    step(
        started,
        "egress: new sandboxes and a runner's connects, posture vs none",
    );
    let egress_figures = egress::measure(
        dir.path(),
        &binaries,
        counts.egress_new,
        counts.egress_rounds,
        counts.egress_connects,
    )
    .await?;
    step(
        started,
        "view: new sandboxes, isolation = full vs uid-cgroup; each namespace raw",
    );
    let view_figures =
        isolation::measure(dir.path(), &binaries, counts.view_new, counts.view_raw).await?;
    step(started, &format!("(s) {} running sandboxes", counts.scale));
    let (scale_rows, scale_info) =
        scale::measure(dir.path(), &binaries, &spawner, &scale_asked).await?;

    // The docker row, when an engine and the test image are here.
    let docker_check = if options.no_docker {
        Some("skipped (--no-docker)".to_string())
    } else {
        docker::unavailable().await
    };
    let docker_figures = match docker_check {
        Some(reason) => {
            eprintln!("bench: docker row skipped: {reason}");
            Err(reason)
        }
        None => {
            step(
                started,
                &format!(
                    "docker: {} new containers through sandboxd, the Engine API and docker run",
                    counts.containers
                ),
            );
            match docker::measure(dir.path(), &binaries, counts.containers).await {
                Ok(figures) => Ok(figures),
                Err(error) => bail!("the docker row failed: {error:#}"),
            }
        }
    };
    let kubernetes_figures = if options.no_kubernetes {
        Err("skipped (--no-kubernetes)".to_string())
    } else {
        step(
            started,
            "kubernetes: new sandboxes through sandboxd and straight through kube",
        );
        kubernetes::measure(dir.path(), &binaries, counts.k8s_new, counts.k8s_calls)
            .await
            .map_err(|error| format!("{error:#}"))
    };
    let load_end = machine::load_average();
    step(started, "done");

    let per_sec = |count: usize, elapsed: Duration| count as f64 / elapsed.as_secs_f64();
    let burst_rate = per_sec(counts.burst, burst_elapsed);
    let raw_rate = per_sec(counts.burst, raw_burst);
    let loaded_what = format!("daemon VmRSS with {} running", counts.burst + 1);
    let per_sandbox = (rss_loaded as f64 - rss_warm as f64) / counts.burst as f64;
    let full_scale = counts.burst >= 1_000;
    let pp = "raw ping-pong";
    let mut rows = vec![
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
        Row {
            row: "a",
            what: "probe p50, called from a task on the runtime's workers".into(),
            unit: "µs",
            value: probes_on_worker.p50(),
            baseline_what: format!("{pp} p50"),
            baseline: Some(ping_pong.p50()),
            goal: Goal::Info,
        },
        Row {
            row: "a",
            what: "probe p50, client on a current-thread runtime".into(),
            unit: "µs",
            value: probes_current_thread.p50(),
            baseline_what: format!("{pp} p50"),
            baseline: Some(ping_pong.p50()),
            goal: Goal::Info,
        },
        Row {
            row: "a",
            what: "protocol_version p50, bare tarpc stub".into(),
            unit: "µs",
            value: bare_version.p50(),
            baseline_what: format!("{pp} p50"),
            baseline: Some(ping_pong.p50()),
            goal: Goal::Info,
        },
        Row {
            row: "a",
            what: "probe p50, bare tarpc stub".into(),
            unit: "µs",
            value: bare_probe.p50(),
            baseline_what: format!("{pp} p50"),
            baseline: Some(ping_pong.p50()),
            goal: Goal::Info,
        },
        Row {
            row: "a",
            what: "probe p50, raw-socket client".into(),
            unit: "µs",
            value: daemon_side.p50(),
            baseline_what: format!("{pp} p50"),
            baseline: Some(ping_pong.p50()),
            goal: Goal::Info,
        },
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
    ];
    if let Some(comparison) = &comparison {
        rows.extend(comparison_rows(comparison, &raw_spawns));
    }
    if let Ok(peer) = &peer_figures {
        rows.extend(peer::rows(peer, &new_serial, burst_rate));
    }
    rows.extend(output::rows(&output_figures));
    rows.extend(peers::rows(&peers_figures));
    rows.extend(egress::rows(&egress_figures));
    rows.extend(isolation::rows(&view_figures));
    let docker_note = match &docker_figures {
        Ok(figures) => {
            rows.extend(docker_rows(figures));
            format!(
                "measured: {} new containers each way",
                figures.sandboxd.len()
            )
        }
        Err(reason) => format!("not measured: {reason}"),
    };
    let kubernetes_note = match &kubernetes_figures {
        Ok(figures) => {
            let (more, note) = kubernetes_rows(figures);
            rows.extend(more);
            note
        }
        Err(reason) => format!("not measured: {reason}"),
    };

    println!(
        "sandboxd bench ({} mode) — {date}\nmachine: {} × {}, kernel {}, {} MiB; load average {:.2} at start, {:.2} at end\n\
         daemon runs as {}; runners run as {runner_user}; probe frames: request {request_bytes} B, response {response_bytes} B\n",
        if options.quick { "quick" } else { "full" },
        machine.nproc,
        machine.cpu_model,
        machine.kernel,
        machine.mem_total_mib,
        load_start[0],
        load_end[0],
        machine.user,
    );
    println!(
        "state dir {} on {fs_type}: creating a file there costs {:.0} µs at the start (p50; \
         {:.0} µs before the daemon's (c)), a directory {:.0} µs — a new sandbox costs the daemon \
         its workspace's inode and, unless a recycled one is at hand, its output file's; the \
         spawn baseline its directory's\n",
        dir.path().display(),
        file_creates.p50(),
        file_creates_later.p50(),
        dir_creates.p50(),
    );
    rows.extend(scale_rows);
    print!("{}", report::table(&rows));
    println!("\ninfo: {scale_info}");
    println!("info: {}", egress::info(&egress_figures));
    println!("info: {}", isolation::info(&view_figures));
    println!("\n{}", peers::summary(&peers_figures));
    println!(
        "\ninfo: (d) burst over {} connection(s); (g) {} probes (one per {:?}) during a second \
         burst ({:.0} ensures/s); daemon warm VmRSS before the burst {rss_warm} KiB; group \
         reaper VmRSS {} KiB; burst teardown {:.0} deprovisions/s",
        options.burst_connections,
        during.len(),
        rows::PROBE_INTERVAL,
        per_sec(counts.burst, second_elapsed),
        reaper_rss.map_or_else(|| "n/a".to_string(), |kib| kib.to_string()),
        per_sec(counts.burst, teardown_elapsed),
    );
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
    let line = json!({
        "bench": "sandboxd",
        "mode": if options.quick { "quick" } else { "full" },
        "date": date,
        "machine": {
            "nproc": machine.nproc,
            "cpu_model": machine.cpu_model,
            "kernel": machine.kernel,
            "mem_total_mib": machine.mem_total_mib,
            "load_avg_1m_start": load_start[0],
            "load_avg_1m_end": load_end[0],
        },
        "daemon_user": machine.user,
        "runner_user": runner_user,
        "driver": "local-process",
        "counts": {
            "probes": counts.probes,
            "fast_path": counts.fast,
            "serial": counts.serial,
            "burst": counts.burst,
            "burst_tasks": counts.tasks,
            "burst_connections": options.burst_connections,
            "probes_during_burst": during.len(),
            "probe_interval_us": rows::PROBE_INTERVAL.as_micros() as u64,
        },
        "probe_frame_bytes": { "request": request_bytes, "response": response_bytes },
        "state_dir_fs": { "type": fs_type, "file_create_p50_us": file_creates.p50(), "file_create_before_c_p50_us": file_creates_later.p50(), "mkdir_p50_us": dir_creates.p50() },
        "docker": docker_note,
        "kubernetes": kubernetes_note,
        "peers": peers::json(&peers_figures),
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
    });
    println!("{line}");
    Ok(())
}

/// The docker row's figures as table rows.
fn docker_rows(figures: &docker::DockerFigures) -> Vec<Row> {
    vec![
        Row {
            row: "docker",
            what: "ensure new container p50".into(),
            unit: "ms",
            value: figures.sandboxd.p50() / 1e3,
            baseline_what: "Engine API create+start p50, on a network made as the daemon's".into(),
            baseline: Some(figures.api_own_network.p50() / 1e3),
            goal: Goal::RatioAtMost(1.05),
        },
        Row {
            row: "docker",
            what: "ensure new container p50".into(),
            unit: "ms",
            value: figures.sandboxd.p50() / 1e3,
            baseline_what: "Engine API create+start p50, on the default bridge".into(),
            baseline: Some(figures.api.p50() / 1e3),
            goal: Goal::Info,
        },
        Row {
            row: "docker",
            what: "ensure new container p50".into(),
            unit: "ms",
            value: figures.sandboxd.p50() / 1e3,
            baseline_what: "docker run -d p50".into(),
            baseline: Some(figures.cli.p50() / 1e3),
            goal: Goal::RatioAtMost(1.0),
        },
        Row {
            row: "docker",
            what: "ensure new container p99".into(),
            unit: "ms",
            value: figures.sandboxd.p99() / 1e3,
            baseline_what: "Engine API create+start p99".into(),
            baseline: Some(figures.api.p99() / 1e3),
            goal: Goal::Info,
        },
    ]
}

/// The peer row's figures, or why it is not measured (no `node`).
fn measure_peer(
    started: Instant,
    runner: &std::path::Path,
    dir: &std::path::Path,
    counts: Counts,
) -> anyhow::Result<Result<peer::PeerFigures, String>> {
    if let Some(reason) = peer::unavailable() {
        eprintln!("bench: peer row skipped: {reason}");
        return Ok(Err(reason));
    }
    step(started, "peer: the seed's local-process driver in Node");
    Ok(Ok(peer::measure(runner, dir, counts.serial, counts.burst)?))
}

/// What `--only-spawns` runs with.
struct Spawns<'a> {
    binaries: &'a Binaries,
    dir: &'a std::path::Path,
    spawner: &'a raw::RawSpawner,
    runner: &'a std::path::Path,
}

/// `--only-spawns`: rows (c), (d) and (e) with their raw baselines, the
/// peer row, and with `--compare` the other daemon in turn, in one run.
async fn run_spawns_only(
    options: &Options,
    counts: Counts,
    setting: Spawns<'_>,
    started: Instant,
) -> anyhow::Result<()> {
    let Spawns {
        binaries,
        dir,
        spawner,
        runner,
    } = setting;
    let date = machine::utc_now();
    let load_start = machine::load_average();
    step(started, "(c)/(e) raw spawn + stop baseline");
    let (raw_spawns, raw_stops) = {
        let (spawner, count) = (spawner.clone(), counts.serial);
        tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let (spawns, children) = raw::spawn_serial(&spawner, count)?;
            let stops = raw::stop_serial(children)?;
            spawner.clean();
            Ok((spawns, stops))
        })
        .await??
    };
    step(started, "(d) raw spawn throughput baseline (2 threads)");
    let raw_burst = {
        let (spawner, count) = (spawner.clone(), counts.burst);
        tokio::task::spawn_blocking(move || -> anyhow::Result<Duration> {
            let (elapsed, children) = raw::spawn_parallel(&spawner, count, 2)?;
            raw::stop_all(children)?;
            spawner.clean();
            Ok(elapsed)
        })
        .await??
    };
    let mut daemon = Daemon::start(dir, binaries)?;
    let client = connect(&daemon.socket).await?;
    step(started, "(c) new sandboxes one at a time");
    let new_serial = rows::ensure_new_serial(&client, "bench-serial", counts.serial).await?;
    step(started, "(e) deprovisions one at a time");
    let deprovisions = rows::deprovision_serial(&client, "bench-serial", counts.serial).await?;
    step(
        started,
        &format!(
            "(d) {} distinct ensures from {} tasks",
            counts.burst, counts.tasks
        ),
    );
    let clients = [client];
    let (burst_elapsed, _) =
        rows::burst(&clients, "bench-burst", counts.burst, counts.tasks, false).await?;
    rows::burst(&clients, "bench-burst", counts.burst, counts.tasks, true).await?;
    drop(clients);
    daemon.stop()?;
    let comparison = match &options.compare {
        Some(other) => {
            step(started, "(c)/(e) in turn with --compare");
            Some(compare::measure(dir, binaries, other, counts.serial).await?)
        }
        None => None,
    };
    let peer_figures = measure_peer(started, runner, dir, counts)?;
    let load_end = machine::load_average();
    let per_sec = |count: usize, elapsed: Duration| count as f64 / elapsed.as_secs_f64();
    let burst_rate = per_sec(counts.burst, burst_elapsed);
    let mut rows = vec![
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
            row: "d",
            what: format!("{} ensures, {} tasks", counts.burst, counts.tasks),
            unit: "/s",
            value: burst_rate,
            baseline_what: "raw spawns, 2 threads".into(),
            baseline: Some(per_sec(counts.burst, raw_burst)),
            goal: Goal::RatioAtLeast(0.7),
        },
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
    ];
    if let Some(comparison) = &comparison {
        rows.extend(comparison_rows(comparison, &raw_spawns));
    }
    let peer_note = match &peer_figures {
        Ok(peer) => {
            rows.extend(peer::rows(peer, &new_serial, burst_rate));
            "measured".to_string()
        }
        Err(reason) => format!("not measured: {reason}"),
    };
    println!(
        "sandboxd bench, rows c d e and the peer ({} mode) — {date}; load average {:.2} at start, {:.2} at end; peer {peer_note}\n",
        if options.quick { "quick" } else { "full" },
        load_start[0],
        load_end[0],
    );
    print!("{}", report::table(&rows));
    let line = json!({
        "bench": "sandboxd",
        "mode": if options.quick { "quick" } else { "full" },
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

/// `--only-prepared`: the prepared-sandbox rows (see `bench/prepared.rs`)
/// with their raw baselines and the peer row, in one run.
async fn run_prepared_only(
    options: &Options,
    counts: Counts,
    setting: Spawns<'_>,
    started: Instant,
) -> anyhow::Result<()> {
    let Spawns {
        binaries,
        dir,
        spawner,
        runner,
    } = setting;
    let date = machine::utc_now();
    let load_start = machine::load_average();
    step(started, "(d) raw spawn throughput baseline (2 threads)");
    let raw_burst = {
        let (spawner, count) = (spawner.clone(), counts.burst);
        tokio::task::spawn_blocking(move || -> anyhow::Result<Duration> {
            let (elapsed, children) = raw::spawn_parallel(&spawner, count, 2)?;
            raw::stop_all(children)?;
            spawner.clean();
            Ok(elapsed)
        })
        .await??
    };
    let load_raw = machine::load_average();
    step(
        started,
        "(c)/(e) warm and cold, full and uid-cgroup, in turn; (d) bursts; idle pool",
    );
    let figures = prepared::measure(
        dir,
        binaries,
        spawner,
        counts.serial,
        counts.burst,
        counts.tasks,
    )
    .await?;
    let load_daemons = machine::load_average();
    let peer_figures = measure_peer(started, runner, dir, counts)?;
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
        if options.quick { "quick" } else { "full" },
        load_start[0],
        load_raw[0],
        load_daemons[0],
        load_end[0],
    );
    print!("{}", report::table(&rows));
    let line = json!({
        "bench": "sandboxd",
        "mode": if options.quick { "quick" } else { "full" },
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
fn comparison_rows(comparison: &compare::Comparison, raw_spawns: &Samples) -> Vec<Row> {
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
