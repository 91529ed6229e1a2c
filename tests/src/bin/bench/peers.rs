//! The peers rows (`--only-peers`, and a section of the full run): one
//! static program (`bench/first_clock.c`) started under each sandbox
//! installed on this host and under sandboxd, and for each the time from
//! the call's start to the program's first instruction, as the program's
//! own clock reads it (see `bench/peers_program.rs`).
//!
//! Peers: a raw exec (the floor), bubblewrap, bubblewrap in cgroups made as
//! sandboxd makes a sandbox's (the kernel's share of sandboxd's extra work,
//! with no daemon), an OCI runtime (runc here;
//! crun on a pure cgroup v2 host), gVisor's `runsc do`, the Docker engine
//! (`bench/peers_host.rs`), and sandboxd cold, prepared and through
//! `sandboxctl` (`bench/peers_sandboxd.rs`). A peer that is not installed
//! is listed as such, never left out. Last, `sandboxctl`'s own start
//! against a plain exec (`bench/cli_start.rs`).
//!
//! Serial starts take turns, one per peer per round, the order rotating
//! every round, after one untimed warm-up start each; every sandboxd's
//! prepared pool is full again before every serial start. Then each peer
//! in turn has a burst: `burst` starts, `parallel` at a time, whose
//! latencies are the same measure under load and whose wall time includes
//! each start's end (the process's exit, the container's removal, the
//! deprovision). A prepared daemon's burst starts with its pool full and
//! refills it while the burst runs.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use crate::cli_start::{self, CliStart};
use crate::peers_host::{self, HostPeer};
use crate::peers_sandboxd::{self, SandboxdPeer};
use crate::report::{Goal, Row};
use crate::setup::Binaries;
use crate::stats::Samples;

/// How many starts the rows make.
#[derive(Debug, Clone, Copy)]
pub struct Asked {
    /// Serial starts per peer.
    pub serial: usize,
    /// Starts in each peer's burst, and how many run at once.
    pub burst: usize,
    pub parallel: usize,
}

pub const FULL: Asked = Asked {
    serial: 100,
    burst: 64,
    parallel: 4,
};

pub const QUICK: Asked = Asked {
    serial: 3,
    burst: 8,
    parallel: 4,
};

/// One peer, ready to start the program.
enum Peer {
    Host(HostPeer),
    Sandboxd(SandboxdPeer),
}

impl Peer {
    fn name(&self) -> &str {
        match self {
            Peer::Host(peer) => &peer.name,
            Peer::Sandboxd(peer) => &peer.name,
        }
    }

    fn how(&self) -> &str {
        match self {
            Peer::Host(peer) => &peer.how,
            Peer::Sandboxd(peer) => &peer.how,
        }
    }

    async fn start(&self, id: &str) -> anyhow::Result<Duration> {
        match self {
            Peer::Host(peer) => peer.start(id).await,
            Peer::Sandboxd(peer) => peer.start_one(id).await,
        }
    }

    async fn quiesce(&self) -> anyhow::Result<()> {
        match self {
            Peer::Host(_) => Ok(()),
            Peer::Sandboxd(peer) => peer.quiesce().await,
        }
    }

    async fn finish(self) -> anyhow::Result<()> {
        match self {
            Peer::Host(peer) => peer.finish().await,
            Peer::Sandboxd(peer) => peer.finish(),
        }
    }
}

/// One peer's figures.
pub struct Measured {
    pub name: String,
    pub how: String,
    pub serial: Samples,
    pub burst: Samples,
    pub burst_wall: Duration,
    /// The whole host's busy CPU time during the burst, in microseconds:
    /// every process's, this one's and the daemon's included.
    pub burst_host_cpu_us: Option<f64>,
}

/// Every peer's figures, and the peers not measured with why.
pub struct PeersFigures {
    pub asked: Asked,
    pub measured: Vec<Measured>,
    /// `sandboxctl`'s own start (see `bench/cli_start.rs`), when it is built.
    pub cli_start: Option<CliStart>,
    pub missing: Vec<(String, String)>,
    pub load_before: f64,
    pub load_after: f64,
}

/// Makes every peer ready, measures them, and removes what they made
/// (bundles, containers, the image, the daemons) whether or not the
/// measuring succeeded.
pub async fn measure(
    dir: &std::path::Path,
    binaries: &Binaries,
    asked: Asked,
    no_docker: bool,
    compared: Option<&std::path::Path>,
) -> anyhow::Result<PeersFigures> {
    let dir = dir.join("peers");
    std::fs::create_dir_all(&dir)?;
    crate::setup::set_mode(&dir, 0o755)?;
    let program = crate::peers_program::build(&dir)?;
    let mut peers = Vec::new();
    let mut missing = Vec::new();
    let ready = gather(
        &dir,
        binaries,
        &program,
        no_docker,
        compared,
        &mut peers,
        &mut missing,
    )
    .await;
    let load_before = crate::machine::load_average()[0];
    let measured = match ready {
        Ok(()) => measure_all(&peers, asked).await,
        Err(error) => Err(error),
    };
    let cli_start = match &measured {
        Ok(_) => measure_cli_start(&dir, binaries, &program, &peers, asked, &mut missing).await,
        Err(_) => Ok(None),
    };
    let load_after = crate::machine::load_average()[0];
    let mut cleanup = Ok(());
    for peer in peers {
        let name = peer.name().to_string();
        if let Err(error) = peer.finish().await {
            eprintln!("bench: peers: cleaning up after {name}: {error:#}");
            cleanup = Err(error.context(format!("clean up after {name}")));
        }
    }
    let measured = measured?;
    let cli_start = cli_start?;
    cleanup?;
    std::fs::remove_dir_all(&dir).ok();
    Ok(PeersFigures {
        asked,
        measured,
        cli_start,
        missing,
        load_before,
        load_after,
    })
}

/// `sandboxctl`'s start, against the first sandboxd peer's daemon, one
/// round per serial start; `None` (and a line in `missing`) when it is not
/// built beside `sandboxd`.
async fn measure_cli_start(
    dir: &std::path::Path,
    binaries: &Binaries,
    program: &std::path::Path,
    peers: &[Peer],
    asked: Asked,
    missing: &mut Vec<(String, String)>,
) -> anyhow::Result<Option<CliStart>> {
    let name = "sandboxctl's start";
    let sandboxctl = peers_sandboxd::sandboxctl(binaries);
    if !sandboxctl.is_file() {
        missing.push((
            name.into(),
            format!("not built ({} is missing)", sandboxctl.display()),
        ));
        return Ok(None);
    }
    let Some(socket) = peers.iter().find_map(|peer| match peer {
        Peer::Sandboxd(peer) => Some(peer.socket().to_path_buf()),
        Peer::Host(_) => None,
    }) else {
        missing.push((name.into(), "no sandboxd daemon to call".into()));
        return Ok(None);
    };
    let programs = cli_start::Programs {
        static_exec: program.to_path_buf(),
        glibc_exec: cli_start::build_glibc_program(dir)?,
        sandboxctl,
        socket,
    };
    Ok(Some(cli_start::measure(programs, asked.serial).await?))
}

/// Every peer made ready, in the table's order, into `peers`; the ones
/// not measured, with why, into `missing`.
async fn gather(
    dir: &std::path::Path,
    binaries: &Binaries,
    program: &std::path::Path,
    no_docker: bool,
    compared: Option<&std::path::Path>,
    peers: &mut Vec<Peer>,
    missing: &mut Vec<(String, String)>,
) -> anyhow::Result<()> {
    let mut add = |name: &str, found: peers_host::Found| match found {
        Ok(peer) => peers.push(Peer::Host(peer)),
        Err(reason) => missing.push((name.to_string(), reason)),
    };
    add("raw exec", peers_host::raw(program));
    add("bwrap", peers_host::bwrap(program));
    add("bwrap in cgroups", peers_host::bwrap_in_cgroups(program)?);
    add("runc", peers_host::oci_runtime(dir, program).await?);
    add("runsc do", peers_host::runsc(dir, program));
    if no_docker {
        add("docker run", Err("skipped (--no-docker)".into()));
    } else {
        add("docker run", peers_host::docker(dir, program).await?);
    }
    for found in
        peers_sandboxd::start_all(&dir.join("sandboxd"), binaries, program, compared).await?
    {
        match found {
            Ok(peer) => peers.push(Peer::Sandboxd(peer)),
            Err(name_and_reason) => missing.push(name_and_reason),
        }
    }
    Ok(())
}

/// The warm-up, the serial rounds in turn, then each peer's burst.
async fn measure_all(peers: &[Peer], asked: Asked) -> anyhow::Result<Vec<Measured>> {
    let pid = std::process::id();
    for (index, peer) in peers.iter().enumerate() {
        peer.quiesce().await?;
        peer.start(&format!("peers-{pid}-w{index}")).await?;
    }
    let mut serial = vec![Samples::with_capacity(asked.serial); peers.len()];
    for round in 0..asked.serial {
        for turn in 0..peers.len() {
            let at = (round + turn) % peers.len();
            // Every pool full, so no refill of one peer's last start runs
            // during another's.
            for peer in peers {
                peer.quiesce().await?;
            }
            let id = format!("peers-{pid}-s{round}-{at}");
            serial[at].push(peers[at].start(&id).await?);
        }
    }
    let mut measured = Vec::new();
    for ((at, peer), serial) in peers.iter().enumerate().zip(serial) {
        peer.quiesce().await?;
        let busy_before = crate::machine::host_busy_us();
        let started = Instant::now();
        let latencies: Vec<anyhow::Result<Duration>> = futures::stream::iter(0..asked.burst)
            .map(|n| {
                let id = format!("peers-{pid}-b{n}-{at}");
                async move { peer.start(&id).await }
            })
            .buffer_unordered(asked.parallel)
            .collect()
            .await;
        let burst_wall = started.elapsed();
        let burst_host_cpu_us = crate::machine::host_busy_us()
            .zip(busy_before)
            .map(|(after, before)| after - before);
        let mut burst = Samples::with_capacity(asked.burst);
        for latency in latencies {
            burst.push(latency?);
        }
        measured.push(Measured {
            name: peer.name().to_string(),
            how: peer.how().to_string(),
            serial,
            burst,
            burst_wall,
            burst_host_cpu_us,
        });
    }
    Ok(measured)
}

fn ms(samples: &Samples, p: f64) -> f64 {
    samples.percentile_us(p) / 1e3
}

/// The rows: each peer's p50, p90, p99, its burst's p50 and p99 (each
/// against the raw exec's same figure), its burst's starts per second, and
/// the host's CPU per start in its burst.
pub fn rows(figures: &PeersFigures) -> Vec<Row> {
    let floor = figures.measured.iter().find(|m| m.name == "raw exec");
    let burst_what = format!(
        "burst of {}, {} at a time",
        figures.asked.burst, figures.asked.parallel
    );
    let mut rows = Vec::new();
    for peer in &figures.measured {
        let against = |samples: fn(&Measured) -> &Samples, p: f64, what: &str| Row {
            row: "peers",
            what: format!("{}: first instruction {what}", peer.name),
            unit: "ms",
            value: ms(samples(peer), p),
            baseline_what: format!("raw exec {what}"),
            baseline: floor.map(|floor| ms(samples(floor), p)),
            goal: Goal::Info,
        };
        rows.push(against(|m| &m.serial, 50.0, "p50"));
        rows.push(against(|m| &m.serial, 90.0, "p90"));
        rows.push(against(|m| &m.serial, 99.0, "p99"));
        rows.push(against(|m| &m.burst, 50.0, &format!("{burst_what} p50")));
        rows.push(against(|m| &m.burst, 99.0, &format!("{burst_what} p99")));
        rows.push(Row {
            row: "peers",
            what: format!("{}: {burst_what}, starts/s", peer.name),
            unit: "/s",
            value: rate(figures.asked.burst, peer.burst_wall),
            baseline_what: "raw exec".into(),
            baseline: floor.map(|floor| rate(figures.asked.burst, floor.burst_wall)),
            goal: Goal::Info,
        });
        rows.push(Row {
            row: "peers",
            what: format!("{}: {burst_what}, the host's CPU per start", peer.name),
            unit: "ms",
            value: cpu_per_start(figures.asked.burst, peer),
            baseline_what: "raw exec".into(),
            baseline: floor.map(|floor| cpu_per_start(figures.asked.burst, floor)),
            goal: Goal::Info,
        });
    }
    if let Some(cli_start) = &figures.cli_start {
        rows.extend(cli_start::rows(cli_start));
    }
    rows
}

fn rate(count: usize, wall: Duration) -> f64 {
    count as f64 / wall.as_secs_f64()
}

/// The host's busy CPU during a burst ÷ its starts, in ms (NaN where
/// `/proc/stat` could not be read).
fn cpu_per_start(count: usize, peer: &Measured) -> f64 {
    peer.burst_host_cpu_us
        .map_or(f64::NAN, |us| us / 1e3 / count as f64)
}

/// A compact table (ms; one line a peer, the missing ones included), and
/// how each peer was started.
pub fn summary(figures: &PeersFigures) -> String {
    let asked = figures.asked;
    let mut text = format!(
        "peers: first instruction of one static program, from the call's start (ms); \
         {} serial starts each in turn, then a burst of {}, {} at a time \
         (CPU/start: the whole host's busy CPU during it ÷ its starts, ms); \
         load average {:.2} before, {:.2} after\n",
        asked.serial, asked.burst, asked.parallel, figures.load_before, figures.load_after
    );
    text.push_str(&format!(
        "{:<22} {:>8} {:>8} {:>8} {:>10} {:>10} {:>9} {:>10}\n",
        "peer", "p50", "p90", "p99", "burst p50", "burst p99", "starts/s", "CPU/start"
    ));
    for peer in &figures.measured {
        text.push_str(&format!(
            "{:<22} {:>8.2} {:>8.2} {:>8.2} {:>10.2} {:>10.2} {:>9.1} {:>10.2}\n",
            peer.name,
            ms(&peer.serial, 50.0),
            ms(&peer.serial, 90.0),
            ms(&peer.serial, 99.0),
            ms(&peer.burst, 50.0),
            ms(&peer.burst, 99.0),
            rate(asked.burst, peer.burst_wall),
            cpu_per_start(asked.burst, peer),
        ));
    }
    for (name, reason) in &figures.missing {
        text.push_str(&format!("{name:<22} {reason}\n"));
    }
    if let Some(cli_start) = &figures.cli_start {
        text.push_str(&cli_start::summary(cli_start));
    }
    for peer in &figures.measured {
        text.push_str(&format!("  {}: {}\n", peer.name, peer.how));
    }
    text
}

/// The figures' JSON: the rows, the missing peers, the counts.
pub fn json(figures: &PeersFigures) -> Value {
    json!({
        "serial": figures.asked.serial,
        "burst": figures.asked.burst,
        "parallel": figures.asked.parallel,
        "load_before": figures.load_before,
        "load_after": figures.load_after,
        "how": figures.measured.iter().map(|m| (m.name.clone(), Value::from(m.how.clone()))).collect::<serde_json::Map<_, _>>(),
        "not_measured": figures.missing.iter().map(|(name, reason)| (name.clone(), Value::from(reason.clone()))).collect::<serde_json::Map<_, _>>(),
    })
}
