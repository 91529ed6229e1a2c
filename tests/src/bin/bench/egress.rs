//! The egress rows: what the posture costs, each figure against
//! a daemon of this same binary with `egress = "none"` measured in the same
//! run.
//!
//! Row (c) under the posture: three daemons (`relaxed`, the default;
//! `strict`; `none`) take new sandboxes in turn through the comparison's
//! machinery (`bench/compare.rs`), so each sees the same neighbours. What
//! the posture adds there is the daemon's check before the spawn; its
//! nftables table is installed once, at start.
//!
//! A runner's connect() rate: daemons of the same three settings, with the
//! host's network (`[network] mode = "host"`), whose
//! runner is `bench-runner --connect-loop 127.0.0.1:PORT N` against a
//! listener this process runs on loopback (and nowhere else). Each round
//! every setting runs one such sandbox in turn, the order rotating, its
//! daemon alive only for that loop (see [`connect_rates`]); the
//! runner times its own loop and prints it to its stdout, which the daemon
//! keeps in the sandbox's log. Under `relaxed` loopback is allowed, so its
//! figure is the rule's cost on every packet's way out; under `strict` the
//! kernel refuses loopback with a reset, so its figure is a refused
//! connect's rate, a different thing, shown for context.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sandboxd_client::{ProbeState, Scope};

use crate::compare::{self, Contender, Plan};
use crate::report::{Goal, Row};
use crate::rows::{connect, sandbox_env};
use crate::setup::{Binaries, Daemon};

/// How long one runner's loop may take: far more than it needs.
const LOOP_TIMEOUT: Duration = Duration::from_secs(300);

/// The three settings, in the order every list here keeps.
const SETTINGS: [(&str, &str); 3] = [
    ("relaxed", ""),
    ("strict", "egress = \"strict\"\n"),
    ("none", "egress = \"none\"\n"),
];

/// One setting's connect loops, summed over the rounds.
#[derive(Debug, Default, Clone, Copy)]
pub struct ConnectLoops {
    pub connected: u64,
    pub refused: u64,
    pub other: u64,
    pub elapsed: Duration,
    /// The slowest single connect.
    pub slowest: Duration,
}

impl ConnectLoops {
    /// Attempts per second, whatever their outcome.
    pub fn rate(&self) -> f64 {
        (self.connected + self.refused + self.other) as f64 / self.elapsed.as_secs_f64()
    }
}

pub struct EgressFigures {
    /// New sandboxes, in [`SETTINGS`] order.
    pub new: Vec<Contender>,
    /// Connect loops, in [`SETTINGS`] order.
    pub connects: Vec<ConnectLoops>,
    pub rounds: usize,
    pub per_loop: u64,
    /// The most `sandboxd_…` tables on the host during `none`'s loops.
    pub foreign_tables: usize,
}

/// Both parts: `new_count` new sandboxes on each daemon, then `rounds`
/// rounds of one `per_loop`-connect runner on each.
pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    new_count: usize,
    rounds: usize,
    per_loop: u64,
) -> anyhow::Result<EgressFigures> {
    let plans = SETTINGS
        .iter()
        .map(|&(name, key)| Plan {
            name,
            binaries,
            driver_toml: format!("driver = \"local-process\"\n{key}"),
            tables_toml: String::new(),
        })
        .collect();
    let new = compare::interleave(dir, plans, new_count).await?;
    let (connects, foreign_tables) = connect_rates(dir, binaries, rounds, per_loop).await?;
    Ok(EgressFigures {
        new,
        connects,
        foreign_tables,
        rounds,
        per_loop,
    })
}

/// A listener on 127.0.0.1 that accepts and closes every connection on a
/// thread of its own until dropped.
struct Listener {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    fn start() -> anyhow::Result<Listener> {
        let listener = TcpListener::bind("127.0.0.1:0").context("listen on 127.0.0.1")?;
        // A second listen() only lengthens the queue (the kernel caps it at
        // net.core.somaxconn): a runner that outruns the accepting thread
        // must not meet a full queue, whose SYN is dropped and resent a
        // second later.
        // SAFETY: listen on a descriptor this listener owns.
        if unsafe { libc::listen(listener.as_raw_fd(), 65_535) } != 0 {
            return Err(std::io::Error::last_os_error()).context("listen(65535) on 127.0.0.1");
        }
        let address = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    drop(stream);
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                }
            })
        };
        Ok(Listener {
            address,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accepting thread so it sees the flag.
        let _ = TcpStream::connect(self.address);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Each round, each setting in turn (the order rotating): its daemon is
/// started, runs one loop, and stops. Only one of them lives at a time, so
/// `none`'s loop meets no table of this run's (an output-hook table sees
/// every packet of the host, its cgroup match failing on others' sockets);
/// the tables of other daemons on the host are counted instead.
async fn connect_rates(
    dir: &Path,
    binaries: &Binaries,
    rounds: usize,
    per_loop: u64,
) -> anyhow::Result<(Vec<ConnectLoops>, usize)> {
    let listener = Listener::start()?;
    let mut figures = vec![ConnectLoops::default(); SETTINGS.len()];
    let mut foreign_tables = 0;
    for round in 0..rounds {
        let id = format!("egress-connect-{round}");
        for turn in 0..SETTINGS.len() {
            let index = (round + turn) % SETTINGS.len();
            let (name, key) = SETTINGS[index];
            let prefix = format!("egc-{name}-");
            let driver_toml = format!(
                "driver = \"local-process\"\n{key}runner_args = [\"--connect-loop\", \"{}\", \"{per_loop}\"]\n",
                listener.address
            );
            // The host's network: the listener is on the host's loopback,
            // and the figure is the host table's rule on each packet (a
            // private sandbox reaches that loopback only at its endpoints).
            let mut daemon = Daemon::start_with_tables(
                dir,
                &prefix,
                binaries,
                &driver_toml,
                "[network]\nmode = \"host\"\n",
            )?;
            let client = connect(&daemon.socket).await?;
            if name == "none" {
                foreign_tables = foreign_tables.max(sandboxd_tables());
            }
            let one = run_loop(dir, &prefix, &client, &id)
                .await
                .with_context(|| format!("the connect loop under `{name}`"))?;
            drop(client);
            daemon.stop()?;
            let sum = &mut figures[index];
            sum.connected += one.connected;
            sum.refused += one.refused;
            sum.other += one.other;
            sum.elapsed += one.elapsed;
            sum.slowest = sum.slowest.max(one.slowest);
        }
    }
    drop(listener);
    // What each posture must do to loopback: the figures are of the
    // posture in force, or they are not figures of it.
    for ((name, _), loops) in SETTINGS.iter().zip(&figures) {
        let expected = if *name == "strict" {
            loops.refused
        } else {
            loops.connected
        };
        if expected != rounds as u64 * per_loop {
            bail!("under `{name}` the runner's connects to 127.0.0.1 came out {loops:?}");
        }
    }
    Ok((figures, foreign_tables))
}

/// How many `sandboxd_…` nftables tables the host has now (0 when `nft`
/// cannot be asked): other daemons' tables, which every packet meets.
fn sandboxd_tables() -> usize {
    std::process::Command::new("nft")
        .args(["list", "tables"])
        .output()
        .map(|output| {
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter(|line| line.contains(" sandboxd_"))
                .count()
        })
        .unwrap_or(0)
}

/// Runs one connect-loop sandbox to its end and reads its line from the log.
async fn run_loop(
    dir: &Path,
    prefix: &str,
    client: &sandboxd_client::SandboxdClient,
    id: &str,
) -> anyhow::Result<ConnectLoops> {
    let started = Instant::now();
    client.ensure_session_sandbox(id, &sandbox_env(id)).await?;
    let exit = loop {
        let info = client.describe(Scope::Session, id).await?;
        if info.state == ProbeState::Absent {
            if let Some(exit) = info.last_exit {
                break exit;
            }
        }
        if started.elapsed() > LOOP_TIMEOUT {
            bail!("the runner did not finish within {LOOP_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let base = sandboxd_protocol::naming::base_name(Scope::Session, id);
    let log = dir
        .join(format!("{prefix}state/logs"))
        .join(format!("{base}.log"));
    let text = std::fs::read_to_string(&log).with_context(|| format!("read {}", log.display()))?;
    if exit.code != Some(0) {
        bail!("the runner exited with {exit:?}; its log:\n{text}");
    }
    let line = text
        .lines()
        .rev()
        .find(|line| line.starts_with("bench-runner connects "))
        .with_context(|| format!("no figures in {}:\n{text}", log.display()))?;
    client.deprovision_session_sandbox(id).await?;
    parse_line(line).with_context(|| format!("cannot read the runner's line '{line}'"))
}

/// `bench-runner connects C refused R other O in U us slowest S us`.
fn parse_line(line: &str) -> Option<ConnectLoops> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words[..] {
        ["bench-runner", "connects", c, "refused", r, "other", o, "in", us, "us", "slowest", s, "us"] => {
            Some(ConnectLoops {
                connected: c.parse().ok()?,
                refused: r.parse().ok()?,
                other: o.parse().ok()?,
                elapsed: Duration::from_micros(us.parse().ok()?),
                slowest: Duration::from_micros(s.parse().ok()?),
            })
        }
        _ => None,
    }
}

/// The rows: each posture's figure against `none`'s.
pub fn rows(figures: &EgressFigures) -> Vec<Row> {
    let [relaxed, strict, none] = &figures.new[..] else {
        return Vec::new();
    };
    let [c_relaxed, c_strict, c_none] = figures.connects[..] else {
        return Vec::new();
    };
    let ms = |contender: &Contender| contender.ensures.p50() / 1e3;
    let new_row = |contender: &Contender| Row {
        row: "egress",
        what: format!(
            "ensure new sandbox p50, egress = {}, in turn",
            contender.name
        ),
        unit: "ms",
        value: ms(contender),
        baseline_what: "egress = none, in turn".into(),
        baseline: Some(ms(none)),
        goal: Goal::Info,
    };
    let attempts = |loops: &ConnectLoops| loops.connected + loops.refused + loops.other;
    vec![
        new_row(relaxed),
        new_row(strict),
        Row {
            row: "egress",
            what: format!(
                "runner connect()s to 127.0.0.1 per s, relaxed ({} of {} connected, slowest {:.1} ms)",
                c_relaxed.connected,
                attempts(&c_relaxed),
                c_relaxed.slowest.as_secs_f64() * 1e3
            ),
            unit: "/s",
            value: c_relaxed.rate(),
            baseline_what: format!(
                "egress = none ({} of {} connected, slowest {:.1} ms)",
                c_none.connected,
                attempts(&c_none),
                c_none.slowest.as_secs_f64() * 1e3
            ),
            baseline: Some(c_none.rate()),
            goal: Goal::Info,
        },
        Row {
            row: "egress",
            what: format!(
                "runner connect()s to 127.0.0.1 per s, strict ({} of {} refused)",
                c_strict.refused,
                attempts(&c_strict)
            ),
            unit: "/s",
            value: c_strict.rate(),
            baseline_what: "egress = none (connected)".into(),
            baseline: Some(c_none.rate()),
            goal: Goal::Info,
        },
    ]
}

/// What the rows were measured from, for the info line.
pub fn info(figures: &EgressFigures) -> String {
    format!(
        "egress: {} new sandboxes on each of relaxed, strict, none in turn; {} round(s) of one \
         {}-connect runner on each, one daemon at a time; other daemons' nftables tables on the \
         host during none's loops: {}",
        figures.new.first().map_or(0, |c| c.ensures.len()),
        figures.rounds,
        figures.per_loop,
        figures.foreign_tables
    )
}
