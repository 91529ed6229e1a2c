//! The command line: how many of each operation a run does, and which
//! rows it measures.

use crate::{calls, output};

/// How many of each operation a run does.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    /// (a) probes and their ping-pong baseline.
    pub probes: usize,
    /// (b) fast-path ensures.
    pub fast: usize,
    /// (c)/(e) new sandboxes one at a time, then their deprovisions.
    pub serial: usize,
    /// (d)/(f)/(g) the burst of distinct ensures.
    pub burst: usize,
    /// (d) concurrent client tasks.
    pub tasks: usize,
    /// Calls made before recording, for (a) and (b).
    pub warmup: usize,
    /// Docker row: new containers each way.
    pub containers: usize,
    /// Output row: bytes the runner writes, and the cap on its output.
    pub output_bytes: u64,
    pub output_cap: u64,
    /// (s) running sandboxes held at once.
    pub scale: usize,
    /// Kubernetes row: new sandboxes each way, then fast paths, probes and GETs.
    pub k8s_new: usize,
    pub k8s_calls: usize,
    /// Egress rows: new sandboxes on each posture's daemon, then rounds of
    /// one connect-loop runner on each, and its connects.
    pub egress_new: usize,
    pub egress_rounds: usize,
    pub egress_connects: u64,
    /// View rows: new sandboxes on each isolation setting (twice: with the
    /// host's mounts and with 200 more), and raw unshares of each namespace.
    pub view_new: usize,
    pub view_raw: usize,
    /// Event rows: probes and fast paths, and new sandboxes, each side.
    pub events_probes: usize,
    /// Metrics rows: probes and fast paths on each side (more than the
    /// other quick rows: the difference sought is a few percent).
    pub metrics_calls: usize,
    pub events_new: usize,
    /// Lifecycle rows: quiet running sandboxes each daemon holds.
    pub lifecycle: usize,
}

pub const FULL: Counts = Counts {
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

pub const QUICK: Counts = Counts {
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
pub struct Options {
    pub quick: bool,
    pub keep: bool,
    pub burst_connections: usize,
    /// Another `sandboxd` binary to measure (for before/after comparisons).
    pub daemon: Option<std::path::PathBuf>,
    /// Skip the docker row.
    pub no_docker: bool,
    /// Run only the output row.
    pub only_output: bool,
    /// Run only the egress rows.
    pub only_egress: bool,
    /// Run only the view rows (isolation = full vs uid-cgroup).
    pub only_view: bool,
    /// Run only the event-stream rows.
    pub only_events: bool,
    pub only_commands: bool,
    /// Run only the metrics rows (metrics_listen on vs off).
    pub only_metrics: bool,
    /// Run only the lifecycle rows (the idle watcher, resume).
    pub only_lifecycle: bool,
    /// Run only the scale row (s).
    pub scale_only: bool,
    /// Run only the node row (the Node package against the Rust client).
    pub only_node: bool,
    /// Run only rows (c), (d), (e), the peer row and `--compare`.
    pub only_spawns: bool,
    /// Run only the docker row.
    pub only_docker: bool,
    /// Run only the prepared-sandbox rows.
    pub only_prepared: bool,
    /// Run only the peers rows (the same program under each sandbox).
    pub only_peers: bool,
    /// Row (s)'s count instead of the mode's.
    pub scale_count: Option<usize>,
    pub lifecycle_count: Option<usize>,
    /// The lifecycle rows' daemons' `isolation` (default `full`).
    pub lifecycle_isolation: String,
    /// Row (s)'s daemon's `isolation` (default `full`).
    pub scale_isolation: String,
    /// Skip the kubernetes row.
    pub no_kubernetes: bool,
    /// Run the kubernetes row and nothing else.
    pub only_kubernetes: bool,
    /// Another `sandboxd` to measure row (c) against, beside this one, and
    /// a cold private-network peer of it beside this one's.
    pub compare: Option<std::path::PathBuf>,
    /// Only a stream of one kind of call, for a system-call count.
    pub only_calls: Option<(calls::Kind, usize)>,
}

/// The value of `flag`, an `isolation` setting.
fn isolation_arg(flag: &str, value: Option<String>) -> Result<String, String> {
    match value {
        Some(value) if value == "full" || value == "uid-cgroup" => Ok(value),
        Some(value) => Err(format!("{flag} '{value}': full or uid-cgroup")),
        None => Err(format!("{flag} needs full or uid-cgroup")),
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
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
        }
    }
}

impl Options {
    /// The mode's counts, with the counts the command line gives instead.
    pub fn counts(&self) -> Counts {
        let mut counts = if self.quick { QUICK } else { FULL };
        if let Some(count) = self.lifecycle_count {
            counts.lifecycle = count;
        }
        if let Some(count) = self.scale_count {
            counts.scale = count;
        }
        counts
    }
}

pub fn parse_args() -> Result<Options, String> {
    let mut options = Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if !switch(&mut options, &arg) {
            valued(&mut options, &arg, &mut args)?;
        }
    }
    Ok(options)
}

/// Sets the flag `arg` names; false when it is not a flag without a value.
fn switch(options: &mut Options, arg: &str) -> bool {
    match arg {
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
        "--scale-only" => options.scale_only = true,
        "--only-node" => options.only_node = true,
        "--only-spawns" => options.only_spawns = true,
        "--only-docker" => options.only_docker = true,
        "--only-prepared" => options.only_prepared = true,
        "--only-peers" => options.only_peers = true,
        "--no-kubernetes" => options.no_kubernetes = true,
        "--only-kubernetes" => options.only_kubernetes = true,
        _ => return false,
    }
    true
}

/// Sets the option `arg` names, from the arguments after it when it takes
/// a value; an unknown argument is an error naming it.
fn valued(
    options: &mut Options,
    arg: &str,
    args: &mut impl Iterator<Item = String>,
) -> Result<(), String> {
    match arg {
        // Dispatched in `run` (see `bench/files.rs`).
        "--only-files" => {}
        "--lifecycle-isolation" => options.lifecycle_isolation = isolation_arg(arg, args.next())?,
        "--scale-isolation" => options.scale_isolation = isolation_arg(arg, args.next())?,
        "--lifecycle-count" => {
            let value = args.next().ok_or("--lifecycle-count needs a count")?;
            options.lifecycle_count = Some(
                value
                    .parse()
                    .ok()
                    .filter(|n| *n >= 2)
                    .ok_or_else(|| format!("--lifecycle-count '{value}': a number from 2"))?,
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
        "--only-calls" => options.only_calls = Some(only_calls(args)?),
        "-h" | "--help" => {
            print_usage();
            std::process::exit(0);
        }
        other => return Err(format!("unknown argument '{other}' (try --help)")),
    }
    Ok(())
}

/// `--only-calls KIND N`'s two values.
fn only_calls(args: &mut impl Iterator<Item = String>) -> Result<(calls::Kind, usize), String> {
    let kind = args
        .next()
        .ok_or("--only-calls needs probe|ensure|new|warm and a count")?;
    let kind = calls::Kind::parse(&kind)
        .ok_or_else(|| format!("--only-calls '{kind}': probe, ensure, new or warm"))?;
    let value = args.next().ok_or("--only-calls needs a count")?;
    let count = value
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("--only-calls count '{value}': a positive number"))?;
    Ok((kind, count))
}

fn print_usage() {
    println!(
        "usage: bench [--quick] [--keep] [--burst-connections N] [--daemon PATH] [--compare PATH] \
         [--no-docker] [--only-output] [--only-egress] [--only-view] [--only-events] [--only-commands] [--only-metrics] [--only-lifecycle] [--lifecycle-count N] [--lifecycle-isolation full|uid-cgroup] [--only-calls probe|ensure|new|warm N] [--scale-only] [--only-node] [--only-spawns] [--only-prepared] [--only-peers] [--only-docker] [--scale-count N] [--scale-isolation full|uid-cgroup] [--no-kubernetes] [--only-kubernetes]\n\n\
         Runs the release sandboxd against its baselines and prints a table and one \
         JSON line.\nBuild first: cargo build --release --workspace --bins"
    );
}
