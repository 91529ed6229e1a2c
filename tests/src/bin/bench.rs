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
//! `bench/files.rs`), with `--daemon PATH` against another `sandboxd`.

#[path = "bench/calls.rs"]
mod calls;
#[path = "bench/cgroups.rs"]
mod cgroups;
#[path = "bench/cli_start.rs"]
mod cli_start;
#[path = "bench/commands.rs"]
mod commands;
#[path = "bench/compare.rs"]
mod compare;
#[path = "bench/context.rs"]
mod context;
#[path = "bench/core.rs"]
mod core;
#[path = "bench/core_rows.rs"]
mod core_rows;
#[path = "bench/dir_changes.rs"]
mod dir_changes;
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
#[path = "bench/full.rs"]
mod full;
#[path = "bench/isolation.rs"]
mod isolation;
#[path = "bench/kept_uids.rs"]
mod kept_uids;
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
#[path = "bench/only.rs"]
mod only;
#[path = "bench/options.rs"]
mod options;
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
#[path = "bench/spawns.rs"]
mod spawns;
#[path = "bench/stats.rs"]
mod stats;

use std::process::ExitCode;
use std::time::Instant;

use context::Bench;
use options::Options;

fn main() -> ExitCode {
    let options = match options::parse_args() {
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

/// Sets the run up, then measures what the options ask for: one family
/// alone, or everything.
async fn run(options: &Options) -> anyhow::Result<()> {
    let started = Instant::now();
    let counts = options.counts();
    if options.only_kubernetes {
        return only::kubernetes_rows(options, counts).await;
    }
    if std::env::args().any(|arg| arg == "--only-files") {
        return files::run_only(options.quick, options.keep, options.daemon.as_deref()).await;
    }
    let bench = Bench::set_up(options, counts, started)?;
    if only::run(&bench).await? {
        return Ok(());
    }
    full::run(&bench).await
}
