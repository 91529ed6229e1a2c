//! The prepared-sandbox rows (`--only-prepared`), all in
//! one run beside their raw baselines:
//!
//! - (c) a new sandbox with the pool warm (the pool full before each
//!   ensure, which is not timed) and cold (`[pool]` 0), under
//!   `isolation = "full"` and `"uid-cgroup"`, and warm under `"full"`
//!   without parked runners (`park_runners = false`), each with the
//!   host's network, and warm and cold under `[network] mode = "private"`
//!   (`-private-net`, the default under `full`): seven daemons of this binary
//!   and the raw mkdir+spawn baseline taking new sandboxes in turn, the
//!   order rotating every round, every tenth round the ten new ones of
//!   each deprovisioned (raw: SIGTERM+wait) in turn, so each sees the same
//!   load; before every timed call every warm pool is full again (the
//!   refills, which run after a start, would otherwise land on the next
//!   contender's call);
//! - (e) those deprovisions against raw SIGTERM+wait, in turn;
//! - (d) a burst of distinct ensures from 64 tasks with a pool of 64
//!   (full when it starts, refilling while the burst runs) and with none,
//!   against raw spawns from two threads; the pool's hits and misses;
//! - the idle cost of a pool of 64: the daemon's CPU over ten quiet
//!   seconds, its RSS against a pool-0 daemon's, and the proportional
//!   memory (Pss) of the parked holders;
//! - the peer row (the seed's driver in Node), when `node` is on PATH.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sandboxd_client::{SandboxdClient, Scope};

use crate::raw::{self, Children, RawSpawner};
use crate::report::{Goal, Row};
use crate::rows::{self, connect, sandbox_env};
use crate::setup::{Binaries, Daemon};
use crate::stats::Samples;

/// The pool a warm contender keeps (`[pool] session`).
const WARM_POOL: u32 = 4;
/// The pool the burst runs with.
const BURST_POOL: u32 = 64;
/// Rounds between two deprovisions of every contender's new sandboxes.
const BATCH: usize = 10;
/// How long the idle pool's CPU is watched.
const IDLE_WATCH: Duration = Duration::from_secs(10);

/// One daemon of the in-turn rows.
struct Contender {
    name: &'static str,
    /// The pool it keeps for sessions (0: cold).
    pool: u32,
    daemon: Daemon,
    client: SandboxdClient,
    ensures: Samples,
    deprovisions: Samples,
}

/// What the rows are made of.
pub struct PreparedFigures {
    /// Raw mkdir+spawn and SIGTERM+wait, in turn with the daemons.
    pub raw_spawns: Samples,
    pub raw_stops: Samples,
    /// full-warm, full-cold, uid-cgroup-warm, uid-cgroup-cold, and
    /// full-warm without parked runners.
    pub contenders: Vec<(&'static str, Samples, Samples)>,
    /// The pool-64 burst: wall time, hits, misses.
    pub warm_burst: (Duration, u64, u64),
    pub cold_burst: Duration,
    pub idle: IdleCost,
}

/// A pool of 64 held with nothing to do.
pub struct IdleCost {
    pub cpu_percent: f64,
    pub rss_kib: u64,
    pub rss_no_pool_kib: u64,
    pub holders: usize,
    pub holders_pss_kib: u64,
}

fn config(isolation: &str, pool: u32, park_runners: bool, network: &str) -> (String, String) {
    (
        format!("driver = \"local-process\"\nisolation = \"{isolation}\"\n"),
        format!(
            "[pool]\nsession = {pool}\nworkflow = 0\nconnect = 0\npark_runners = {park_runners}\n[network]\nmode = \"{network}\"\n"
        ),
    )
}

/// Waits (untimed) until the daemon's session pool holds `ready`.
pub async fn wait_for_pool(client: &SandboxdClient, ready: u32) -> anyhow::Result<(u64, u64)> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = client.status().await?;
        let pool = status
            .pools
            .iter()
            .find(|pool| pool.scope == Scope::Session)
            .context("the daemon lists no session pool")?;
        if pool.ready >= ready {
            return Ok((pool.hits, pool.misses));
        }
        if Instant::now() > deadline {
            bail!("the session pool never held {ready}: {pool:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn timed<T, E: Into<anyhow::Error>>(
    samples: &mut Samples,
    call: impl std::future::Future<Output = Result<T, E>>,
) -> anyhow::Result<T> {
    let start = Instant::now();
    let reply = call.await.map_err(Into::into)?;
    samples.push(start.elapsed());
    Ok(reply)
}

/// Waits (untimed) until every warm contender's pool is full.
async fn quiesce(running: &[Contender]) -> anyhow::Result<()> {
    for one in running.iter().filter(|one| one.pool > 0) {
        wait_for_pool(&one.client, one.pool).await?;
    }
    Ok(())
}

/// One raw mkdir+spawn, timed into `samples`.
async fn raw_spawn(
    spawner: &RawSpawner,
    name: String,
    samples: &mut Samples,
    children: &mut Children,
) -> anyhow::Result<()> {
    let spawner = spawner.clone();
    let (elapsed, child) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let start = Instant::now();
        let child = spawner.spawn(&name)?;
        Ok((start.elapsed(), child))
    })
    .await??;
    samples.push(elapsed);
    children.0.push(child);
    Ok(())
}

/// The four contenders' new sandboxes and deprovisions, and the raw
/// baseline's spawns and stops, in turn.
async fn in_turn(
    dir: &Path,
    binaries: &Binaries,
    spawner: &RawSpawner,
    count: usize,
) -> anyhow::Result<(Vec<Contender>, Samples, Samples)> {
    let plans: [(&'static str, &str, u32, bool, &str); 7] = [
        ("full-warm", "full", WARM_POOL, true, "host"),
        ("full-cold", "full", 0, true, "host"),
        ("uid-cgroup-warm", "uid-cgroup", WARM_POOL, true, "host"),
        ("uid-cgroup-cold", "uid-cgroup", 0, true, "host"),
        ("full-warm-unparked", "full", WARM_POOL, false, "host"),
        ("full-warm-private-net", "full", WARM_POOL, true, "private"),
        ("full-cold-private-net", "full", 0, true, "private"),
    ];
    let mut running = Vec::new();
    for (name, isolation, pool, park_runners, network) in plans {
        let (top, tables) = config(isolation, pool, park_runners, network);
        let daemon =
            Daemon::start_with_tables(dir, &format!("prep-{name}-"), binaries, &top, &tables)?;
        let client = connect(&daemon.socket).await?;
        running.push(Contender {
            name,
            pool,
            daemon,
            client,
            ensures: Samples::with_capacity(count),
            deprovisions: Samples::with_capacity(count),
        });
    }
    let contenders = running.len();
    let (mut raw_spawns, mut raw_stops) = (Samples::default(), Samples::default());
    let mut children = Children::default();
    let mut pending = Vec::new();
    for round in 0..count {
        let id = format!("prep-{round}");
        // The raw baseline takes its turn too: position `contenders`.
        for turn in 0..=contenders {
            quiesce(&running).await?;
            let at = (round + turn) % (contenders + 1);
            if at == contenders {
                raw_spawn(spawner, id.clone(), &mut raw_spawns, &mut children).await?;
                continue;
            }
            let one = &mut running[at];
            let env = sandbox_env(&id);
            let report = timed(
                &mut one.ensures,
                one.client.ensure_session_sandbox(&id, &env),
            )
            .await?;
            if !report.created {
                bail!(
                    "{}: ensure of new sandbox {id} took the fast path",
                    one.name
                );
            }
        }
        pending.push(id);
        if pending.len() == BATCH || round + 1 == count {
            let mut to_stop = std::mem::take(&mut children.0).into_iter();
            for (index, id) in pending.drain(..).enumerate() {
                for turn in 0..=contenders {
                    quiesce(&running).await?;
                    let at = (index + turn) % (contenders + 1);
                    if at == contenders {
                        let child = to_stop.next().context("a raw runner per round")?;
                        let stopped = tokio::task::spawn_blocking(move || {
                            raw::stop_serial(Children(vec![child]))
                        })
                        .await??;
                        raw_stops.extend(stopped);
                        continue;
                    }
                    let one = &mut running[at];
                    let report = timed(
                        &mut one.deprovisions,
                        one.client.deprovision_session_sandbox(&id),
                    )
                    .await?;
                    if !report.was_present || report.forced {
                        bail!("{}: deprovision of {id} reported {report:?}", one.name);
                    }
                }
            }
        }
    }
    spawner.clean();
    for one in &running {
        let (hits, misses) = wait_for_pool(&one.client, 0).await?;
        if one.pool > 0 && misses > 0 {
            eprintln!(
                "bench: {}: {misses} of {} new sandboxes started cold",
                one.name,
                hits + misses
            );
        }
    }
    Ok((running, raw_spawns, raw_stops))
}

/// The daemon's children that hold a prepared view or are a parked runner.
fn holders(daemon_pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let parent = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            parent == Some(daemon_pid)
                && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                    let cmdline = String::from_utf8_lossy(&cmdline);
                    cmdline.contains("__sandbox-view-holder")
                        || cmdline.contains("__sandbox-parked-runner")
                })
        })
        .collect()
}

fn pss_kib(pid: u32) -> u64 {
    crate::machine::proc_kib(&format!("/proc/{pid}/smaps_rollup"), "Pss:").unwrap_or(0)
}

/// The bursts (pool 64, then none) and the pool's idle cost.
async fn bursts(
    dir: &Path,
    binaries: &Binaries,
    count: usize,
    tasks: usize,
) -> anyhow::Result<((Duration, u64, u64), Duration, IdleCost)> {
    let (top, tables) = config("full", 0, true, "host");
    let mut cold = Daemon::start_with_tables(dir, "prep-burst-cold-", binaries, &top, &tables)?;
    let cold_client = connect(&cold.socket).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_no_pool_kib = cold.rss_kib().unwrap_or(0);

    let (top, tables) = config("full", BURST_POOL, true, "host");
    let mut warm = Daemon::start_with_tables(dir, "prep-burst-warm-", binaries, &top, &tables)?;
    let warm_client = connect(&warm.socket).await?;
    wait_for_pool(&warm_client, BURST_POOL).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu_before = crate::machine::cpu_us(warm.pid).unwrap_or(f64::NAN);
    let watched = Instant::now();
    tokio::time::sleep(IDLE_WATCH).await;
    let cpu_after = crate::machine::cpu_us(warm.pid).unwrap_or(f64::NAN);
    let held = holders(warm.pid);
    let idle = IdleCost {
        cpu_percent: (cpu_after - cpu_before) / watched.elapsed().as_micros() as f64 * 100.0,
        rss_kib: warm.rss_kib().unwrap_or(0),
        rss_no_pool_kib,
        holders: held.len(),
        holders_pss_kib: held.iter().map(|&pid| pss_kib(pid)).sum(),
    };

    let clients = [warm_client.clone()];
    let (warm_elapsed, _) = rows::burst(&clients, "prep-burst", count, tasks, false).await?;
    let (hits, misses) = wait_for_pool(&warm_client, 0).await?;
    rows::burst(&clients, "prep-burst", count, tasks, true).await?;
    drop(clients);
    drop(warm_client);
    warm.stop()?;

    let clients = [cold_client.clone()];
    let (cold_elapsed, _) = rows::burst(&clients, "prep-burst", count, tasks, false).await?;
    rows::burst(&clients, "prep-burst", count, tasks, true).await?;
    drop(clients);
    drop(cold_client);
    cold.stop()?;
    Ok(((warm_elapsed, hits, misses), cold_elapsed, idle))
}

pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    spawner: &RawSpawner,
    serial: usize,
    burst: usize,
    tasks: usize,
) -> anyhow::Result<PreparedFigures> {
    let mut contenders = Vec::new();
    let (running, raw_spawns, raw_stops) = in_turn(dir, binaries, spawner, serial).await?;
    for mut one in running {
        drop(one.client);
        one.daemon.stop()?;
        contenders.push((one.name, one.ensures, one.deprovisions));
    }
    let (warm_burst, cold_burst, idle) = bursts(dir, binaries, burst, tasks).await?;
    Ok(PreparedFigures {
        raw_spawns,
        raw_stops,
        contenders,
        warm_burst,
        cold_burst,
        idle,
    })
}

/// What the default private network costs a new sandbox: each `full`
/// contender with it against the same without it, in the same rounds (a
/// prepared view holds its namespace ready, so warm may cost at most 1.2×).
fn private_network_rows(contenders: &[(&'static str, Samples, Samples)]) -> Vec<Row> {
    let p50_of = |wanted: &str| {
        contenders
            .iter()
            .find(|(name, _, _)| *name == wanted)
            .map(|(_, ensures, _)| ensures.p50())
    };
    [
        ("full-warm", Goal::RatioAtMost(1.2)),
        ("full-cold", Goal::Info),
    ]
    .into_iter()
    .filter_map(|(host, goal)| {
        let private = format!("{host}-private-net");
        Some(Row {
            row: "c",
            what: format!("ensure new sandbox p50, {private}, in turn"),
            unit: "µs",
            value: p50_of(&private)?,
            baseline_what: format!("{host} (host network) p50, in turn"),
            baseline: Some(p50_of(host)?),
            goal,
        })
    })
    .collect()
}

/// The rows, against the raw baselines taken in turn and `raw_rate`
/// (spawns per second from two threads).
pub fn rows(figures: &PreparedFigures, raw_rate: f64, burst: usize, tasks: usize) -> Vec<Row> {
    let (raw_spawns, raw_stops) = (&figures.raw_spawns, &figures.raw_stops);
    let mut rows = Vec::new();
    for (name, ensures, deprovisions) in &figures.contenders {
        let warm = name.contains("-warm");
        rows.push(Row {
            row: "c",
            what: format!("ensure new sandbox p50, {name}, in turn"),
            unit: "µs",
            value: ensures.p50(),
            baseline_what: "raw mkdir+spawn p50, in turn".into(),
            baseline: Some(raw_spawns.p50()),
            goal: match (warm, name.starts_with("full")) {
                _ if name.ends_with("-private-net") => Goal::Info,
                (true, true) if *name == "full-warm" => Goal::RatioAtMost(1.0),
                (true, true) => Goal::Info,
                (false, true) => Goal::RatioAtMost(1.5),
                _ => Goal::Info,
            },
        });
        rows.push(Row {
            row: "c",
            what: format!("ensure new sandbox p99, {name}, in turn"),
            unit: "µs",
            value: ensures.p99(),
            baseline_what: "raw mkdir+spawn p99".into(),
            baseline: Some(raw_spawns.p99()),
            goal: Goal::Info,
        });
        rows.push(Row {
            row: "e",
            what: format!("deprovision p50, {name}, in turn"),
            unit: "µs",
            value: deprovisions.p50(),
            baseline_what: "raw SIGTERM+wait p50, in turn".into(),
            baseline: Some(raw_stops.p50()),
            goal: if *name == "full-warm" {
                Goal::RatioAtMost(2.0)
            } else {
                Goal::Info
            },
        });
    }
    rows.extend(private_network_rows(&figures.contenders));
    let per_sec = |elapsed: Duration| burst as f64 / elapsed.as_secs_f64();
    let (warm_elapsed, hits, misses) = figures.warm_burst;
    rows.push(Row {
        row: "d",
        what: format!(
            "{burst} ensures, {tasks} tasks, pool of {BURST_POOL} (full): {hits} taken, {misses} cold"
        ),
        unit: "/s",
        value: per_sec(warm_elapsed),
        baseline_what: "raw spawns, 2 threads".into(),
        baseline: Some(raw_rate),
        goal: Goal::RatioAtLeast(1.0),
    });
    rows.push(Row {
        row: "d",
        what: format!("{burst} ensures, {tasks} tasks, no pool (full)"),
        unit: "/s",
        value: per_sec(figures.cold_burst),
        baseline_what: "raw spawns, 2 threads".into(),
        baseline: Some(raw_rate),
        goal: Goal::Info,
    });
    let idle = &figures.idle;
    rows.push(Row {
        row: "pool",
        what: format!(
            "idle daemon CPU, pool of {BURST_POOL} ready, over {} s",
            IDLE_WATCH.as_secs()
        ),
        unit: "%",
        value: idle.cpu_percent,
        baseline_what: String::new(),
        baseline: None,
        goal: Goal::Info,
    });
    rows.push(Row {
        row: "pool",
        what: format!("daemon VmRSS, pool of {BURST_POOL} ready"),
        unit: "KiB",
        value: idle.rss_kib as f64,
        baseline_what: "daemon VmRSS, no pool".into(),
        baseline: Some(idle.rss_no_pool_kib as f64),
        goal: Goal::Info,
    });
    rows.push(Row {
        row: "pool",
        what: format!(
            "Pss of the {} parked holders and runners, together",
            idle.holders
        ),
        unit: "KiB",
        value: idle.holders_pss_kib as f64,
        baseline_what: String::new(),
        baseline: None,
        goal: Goal::Info,
    });
    rows
}

/// The full-warm contender's ensures (for the peer row).
pub fn full_warm(figures: &PreparedFigures) -> &Samples {
    &figures.contenders[0].1
}

/// The pool-64 burst's rate.
pub fn warm_rate(figures: &PreparedFigures, burst: usize) -> f64 {
    burst as f64 / figures.warm_burst.0.as_secs_f64()
}
