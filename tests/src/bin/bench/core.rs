//! Rows (a) to (g): one daemon (local-process driver) with a hot sandbox,
//! measured against the raw baselines this process measures beside it in
//! the same run (see `raw.rs`): (a) probes and their diagnostics, (b)
//! fast-path ensures, (c)/(e) new sandboxes and deprovisions one at a
//! time, (d) a burst of distinct ensures, (f) the daemon's memory, (g)
//! probes during a second burst. Their rows are in `core_rows.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use sandboxd_client::SandboxdClient;

use crate::context::Bench;
use crate::rows::{self, connect};
use crate::setup::Daemon;
use crate::spawns::raw_serial;
use crate::stats::Samples;
use crate::{machine, raw};

/// The sandbox every probe and fast path names.
const HOT: &str = "bench-hot";

/// What rows (a) to (g) measured, and the state directory's costs.
pub struct CoreFigures {
    /// The state directory's file system, and what creating a file and a
    /// directory there costs before the daemon starts.
    pub fs_type: String,
    pub file_creates: Samples,
    pub dir_creates: Samples,
    /// A probe's request and response frames, in bytes.
    pub request_bytes: usize,
    pub response_bytes: usize,
    pub rss_idle: u64,
    pub probes: Probes,
    pub serial: Serial,
    pub raw_burst: RawBurst,
    pub burst: Burst,
}

/// (a) and (b).
pub struct Probes {
    pub ping_pong: Samples,
    pub probes: Samples,
    pub on_worker: Samples,
    pub current_thread: Samples,
    pub bare_version: Samples,
    pub bare_probe: Samples,
    pub daemon_side: Samples,
    pub fast: Samples,
}

/// (c) and (e), raw and through the daemon.
pub struct Serial {
    pub raw_spawns: Samples,
    pub raw_stops: Samples,
    pub cgroup_setups: Option<Samples>,
    /// File creations in the state directory again, after the raw spawns.
    pub file_creates_later: Samples,
    pub new_serial: Samples,
    pub deprovisions: Samples,
}

/// (d)'s raw baseline: spawns from two threads, and a paced raw
/// ping-pong during a second such burst (the raw analogue of (g)).
pub struct RawBurst {
    pub elapsed: Duration,
    pub cpu_us: f64,
    pub during: Samples,
}

/// (d), (f) and (g) through the daemon.
pub struct Burst {
    pub rss_warm: u64,
    pub elapsed: Duration,
    pub latencies: Samples,
    pub daemon_cpu_us: f64,
    pub rss_loaded: u64,
    pub reaper_rss: Option<u64>,
    pub teardown_elapsed: Duration,
    /// Probes on a connection of their own during the second burst.
    pub during: Samples,
    /// Probes on the burst's own connection during it.
    pub during_shared: Samples,
    pub second_elapsed: Duration,
}

/// Starts a daemon, measures (a) to (g) on it and stops it.
pub async fn measure(bench: &Bench<'_>) -> anyhow::Result<CoreFigures> {
    let dir = bench.dir.path();
    let fs_type = raw::fs_type(dir);
    let (file_creates, dir_creates) = raw::inode_costs(dir)?;
    bench.step("starting sandboxd");
    let mut daemon = Daemon::start(dir, &bench.binaries)?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_idle = daemon.rss_kib().context("cannot read the daemon's VmRSS")?;
    let client = connect(&daemon.socket).await?;
    let report = client
        .ensure_session_sandbox(HOT, &rows::sandbox_env(HOT))
        .await?;
    if !report.created {
        bail!("the hot sandbox already existed");
    }
    let frames = rows::probe_frame_sizes(&daemon.socket, dir, HOT).await?;
    let probes = measure_probes(bench, &daemon, &client, frames).await?;
    let serial = measure_serial(bench, &client).await?;
    let raw_burst = measure_raw_burst(bench, frames).await?;
    let burst = measure_burst(bench, &daemon, &client).await?;
    client.deprovision_session_sandbox(HOT).await?;
    drop(client);
    bench.step("stopping sandboxd");
    daemon.stop()?;
    Ok(CoreFigures {
        fs_type,
        file_creates,
        dir_creates,
        request_bytes: frames.0,
        response_bytes: frames.1,
        rss_idle,
        probes,
        serial,
        raw_burst,
        burst,
    })
}

/// (a) probe round trips against a raw ping-pong of the same frame sizes,
/// with the diagnostics beside them; (b) fast-path ensures.
async fn measure_probes(
    bench: &Bench<'_>,
    daemon: &Daemon,
    client: &SandboxdClient,
    (request_bytes, response_bytes): (usize, usize),
) -> anyhow::Result<Probes> {
    let counts = bench.counts;
    bench.step("(a) raw ping-pong baseline");
    let ping_pong = {
        let dir = bench.dir.path().to_path_buf();
        let (count, warmup) = (counts.probes, counts.warmup);
        tokio::task::spawn_blocking(move || {
            raw::ping_pong(&dir, request_bytes, response_bytes, count, warmup)
        })
        .await??
    };
    bench.step("(a) probe round trips");
    let probes = rows::probe_serial(client, HOT, counts.probes, counts.warmup).await?;
    // The same calls from a task on the runtime's workers, where a server's
    // request handlers run (the line above calls from `block_on`'s thread,
    // so each reply crosses from a worker to it).
    let on_worker = {
        let (client, count, warmup) = (client.clone(), counts.probes / 2, counts.warmup);
        tokio::spawn(async move { rows::probe_serial(&client, HOT, count, warmup).await }).await??
    };
    let current_thread = {
        let (socket, count, warmup) = (daemon.socket.clone(), counts.probes / 2, counts.warmup);
        tokio::task::spawn_blocking(move || {
            rows::probe_serial_current_thread(socket, HOT.to_string(), count, warmup)
        })
        .await??
    };
    bench.step("(a) tarpc floor: bare stub");
    let (bare_version, bare_probe) =
        rows::bare_stub_serial(&daemon.socket, HOT, counts.probes / 2, counts.warmup).await?;
    // (b) fast-path ensure vs probe.
    let daemon_side = {
        let (socket, count, warmup) = (daemon.socket.clone(), counts.probes / 2, counts.warmup);
        tokio::task::spawn_blocking(move || raw::probe_from_raw_socket(&socket, HOT, count, warmup))
            .await??
    };
    bench.step("(b) fast-path ensures");
    let fast = rows::ensure_fast_serial(client, HOT, counts.fast, counts.warmup).await?;
    Ok(Probes {
        ping_pong,
        probes,
        on_worker,
        current_thread,
        bare_version,
        bare_probe,
        daemon_side,
        fast,
    })
}

/// (c) + (e) one at a time: raw first, then the daemon.
async fn measure_serial(bench: &Bench<'_>, client: &SandboxdClient) -> anyhow::Result<Serial> {
    let count = bench.counts.serial;
    bench.step("(c)/(e) raw spawn + stop baseline");
    let (raw_spawns, raw_stops) = raw_serial(&bench.spawner, count).await?;
    bench.step("(c) cgroup creation + limit writes alone (raw)");
    let cgroup_setups =
        tokio::task::spawn_blocking(move || raw::cgroup_setup_serial(count)).await??;
    // Inodes cost more once the file system has seen deletions (ext4
    // without a journal scans for recently deleted ones): look again.
    let (file_creates_later, _) = raw::inode_costs(bench.dir.path())?;
    bench.step("(c) new sandboxes one at a time");
    let new_serial = rows::ensure_new_serial(client, "bench-serial", count).await?;
    bench.step("(e) deprovisions one at a time");
    let deprovisions = rows::deprovision_serial(client, "bench-serial", count).await?;
    Ok(Serial {
        raw_spawns,
        raw_stops,
        cgroup_setups,
        file_creates_later,
        new_serial,
        deprovisions,
    })
}

/// (d) raw spawn throughput from 2 threads; then the same burst again
/// with a paced raw ping-pong alongside, the raw analogue of row (g).
async fn measure_raw_burst(
    bench: &Bench<'_>,
    (request_bytes, response_bytes): (usize, usize),
) -> anyhow::Result<RawBurst> {
    bench.step("(d) raw spawn throughput baseline (2 threads)");
    let spawner = bench.spawner.clone();
    let (count, dir) = (bench.counts.burst, bench.dir.path().to_path_buf());
    tokio::task::spawn_blocking(move || -> anyhow::Result<RawBurst> {
        let cpu_before = machine::own_cpu_us();
        let (elapsed, children) = raw::spawn_parallel(&spawner, count, 2)?;
        let cpu_us = machine::own_cpu_us() - cpu_before;
        raw::stop_all(children)?;
        spawner.clean();
        let stop = AtomicBool::new(false);
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
            stop.store(true, Ordering::Release);
            (burst, paced.join())
        });
        let (_, children) = burst?;
        raw::stop_all(children)?;
        spawner.clean();
        let during = paced.map_err(|_| anyhow::anyhow!("the paced ping-pong panicked"))??;
        Ok(RawBurst {
            elapsed,
            cpu_us,
            during,
        })
    })
    .await?
}

/// (d) the burst alone and (f) memory with all of it running; then (g) the
/// same burst again with paced probers, each burst deprovisioned after.
async fn measure_burst(
    bench: &Bench<'_>,
    daemon: &Daemon,
    client: &SandboxdClient,
) -> anyhow::Result<Burst> {
    let counts = bench.counts;
    let rss_warm = daemon.rss_kib().context("cannot read the daemon's VmRSS")?;
    bench.step(&format!(
        "(d) {} distinct ensures from {} tasks over {} connection(s)",
        counts.burst, counts.tasks, bench.options.burst_connections
    ));
    let mut clients = Vec::new();
    for _ in 0..bench.options.burst_connections {
        clients.push(connect(&daemon.socket).await?);
    }
    let cpu_before = machine::cpu_us(daemon.pid).unwrap_or(f64::NAN);
    let (elapsed, latencies) =
        rows::burst(&clients, "bench-burst", counts.burst, counts.tasks, false).await?;
    let daemon_cpu_us = machine::cpu_us(daemon.pid).unwrap_or(f64::NAN) - cpu_before;
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
    bench.step("deprovisioning the burst");
    let (teardown_elapsed, _) =
        rows::burst(&clients, "bench-burst", counts.burst, counts.tasks, true).await?;
    let (during, during_shared, second_elapsed) =
        probes_during_burst(bench, daemon, &clients).await?;
    Ok(Burst {
        rss_warm,
        elapsed,
        latencies,
        daemon_cpu_us,
        rss_loaded,
        reaper_rss,
        teardown_elapsed,
        during,
        during_shared,
        second_elapsed,
    })
}

/// (g): the burst again, with a paced prober on a connection of its own
/// and one on the burst's first connection; the probers' samples and how
/// long the burst took.
async fn probes_during_burst(
    bench: &Bench<'_>,
    daemon: &Daemon,
    clients: &[SandboxdClient],
) -> anyhow::Result<(Samples, Samples, Duration)> {
    let counts = bench.counts;
    bench.step("(g) probes during a second burst");
    let prober = rows::Prober::start(daemon.socket.clone(), HOT.to_string())?;
    let stop_shared = Arc::new(AtomicBool::new(false));
    let shared_prober = tokio::spawn(rows::probe_paced(
        clients[0].clone(),
        HOT.to_string(),
        stop_shared.clone(),
    ));
    prober.begin();
    // One task fewer, so the shared prober keeps the connection within the
    // daemon's 64 calls in flight per connection.
    let second = rows::burst(
        clients,
        "bench-again",
        counts.burst,
        counts.tasks - 1,
        false,
    )
    .await;
    let during = prober.finish()?;
    stop_shared.store(true, Ordering::Release);
    let during_shared = shared_prober.await??;
    let (second_elapsed, _) = second?;
    rows::burst(clients, "bench-again", counts.burst, counts.tasks, true).await?;
    Ok((during, during_shared, second_elapsed))
}
