//! `--only-calls probe|ensure|new|warm N`: a daemon, one running sandbox,
//! and N calls of one kind on one connection — nothing else — so a tracer
//! attached to the daemon counts the system calls one call costs (the goal:
//! "probe and the ensure fast path gain no syscall"). `new` is N sandboxes
//! started cold (`isolation = "full"`, no pool), `warm` N taken from a pool
//! of [`WARM_POOL`] that is full again (untimed) before each; each is
//! deprovisioned before the next: the starts and deprovisions that a tracer
//! such as `perf sched` or `perf trace` takes apart.
//!
//! ```text
//! bench --only-calls probe 10000 &      # prints "daemon pid P", waits 3 s
//! strace -f -c -p P -o probe.txt        # attach within those 3 s
//! ```
//!
//! The calls start 3 s after the pid is printed; 1 s after the last, a
//! line says to detach, and 2 s later the sandbox and daemon are stopped.
//! Divide the tracer's counts by N (the daemon's once-a-second
//! housekeeping adds a few calls per second of the window).
//!
//! The calls go through the bare tarpc stub, which works with a daemon of
//! an older protocol version too (`--daemon`), so two binaries can be
//! compared; the client library refuses one. `probe` and `ensure` give
//! such a daemon the default config, which it understands; `new` and
//! `warm` set keys (`isolation`, `[pool]`) that only this one knows.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use sandboxd_client::{ProbeState, Scope};

use crate::prepared::wait_for_pool;
use crate::rows::{connect, sandbox_env};
use crate::setup::{Binaries, Daemon};

/// How long to wait for a tracer to attach.
const ATTACH_WAIT: Duration = Duration::from_secs(3);
/// How long to wait, after saying so, for the tracer to detach.
const DETACH_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Probe,
    Ensure,
    /// A new sandbox, started cold and deprovisioned.
    New,
    /// A new sandbox taken from a full pool, and deprovisioned.
    Warm,
}

/// The session pool `warm` keeps.
const WARM_POOL: u32 = 2;

impl Kind {
    pub fn parse(text: &str) -> Option<Kind> {
        match text {
            "probe" => Some(Kind::Probe),
            "ensure" => Some(Kind::Ensure),
            "new" => Some(Kind::New),
            "warm" => Some(Kind::Warm),
            _ => None,
        }
    }
}

pub async fn run(dir: &Path, binaries: &Binaries, kind: Kind, count: usize) -> anyhow::Result<()> {
    let pool = match kind {
        Kind::Probe | Kind::Ensure => None,
        Kind::New => Some(0),
        Kind::Warm => Some(WARM_POOL),
    };
    let mut daemon = match pool {
        None => Daemon::start(dir, binaries)?,
        Some(pool) => Daemon::start_with_tables(
            dir,
            "",
            binaries,
            "driver = \"local-process\"\nisolation = \"full\"\n",
            &format!("[pool]\nsession = {pool}\nworkflow = 0\nconnect = 0\n"),
        )?,
    };
    let stub = sandboxd_tests::tarpc_client(&daemon.socket).await;
    // The pool's state, read through the client library (this daemon's).
    let client = match kind {
        Kind::Warm => Some(connect(&daemon.socket).await?),
        _ => None,
    };
    let hot = "bench-hot".to_string();
    let env = sandbox_env(&hot);
    let ensure = || async {
        stub.ensure(context(), Scope::Session, hot.clone(), env.clone())
            .await?
            .map_err(|error| anyhow::anyhow!("ensure: {error}"))
    };
    let probe = || async {
        let state = stub
            .probe(context(), Scope::Session, hot.clone())
            .await?
            .map_err(|error| anyhow::anyhow!("probe: {error}"))?;
        if state != ProbeState::Running {
            bail!("probe of a running sandbox said {state}");
        }
        Ok(())
    };
    if !ensure().await?.created {
        bail!("the hot sandbox already existed");
    }
    // One of each before the tracer attaches: nothing first-time is counted.
    probe().await?;
    ensure().await?;
    println!("daemon pid {}", daemon.pid);
    std::io::stdout().flush()?;
    tokio::time::sleep(ATTACH_WAIT).await;
    let start = Instant::now();
    for call in 0..count {
        match kind {
            Kind::Probe => probe().await?,
            Kind::Ensure => {
                if ensure().await?.created {
                    bail!("a fast-path ensure created a sandbox");
                }
            }
            Kind::New | Kind::Warm => {
                if let Some(client) = &client {
                    wait_for_pool(client, WARM_POOL).await?;
                }
                let id = format!("bench-new-{call}");
                let env = sandbox_env(&id);
                let report = stub
                    .ensure(context(), Scope::Session, id.clone(), env)
                    .await?
                    .map_err(|error| anyhow::anyhow!("ensure {id}: {error}"))?;
                if !report.created {
                    bail!("the new sandbox {id} already existed");
                }
                stub.deprovision(context(), Scope::Session, id.clone(), false)
                    .await?
                    .map_err(|error| anyhow::anyhow!("deprovision {id}: {error}"))?;
            }
        }
    }
    let elapsed = start.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "{count} {kind:?} calls in {:.3} s ({:.1} µs each); detach now",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / count as f64
    );
    std::io::stdout().flush()?;
    // Time for the tracer to detach before the clean-up's own calls.
    tokio::time::sleep(DETACH_WAIT).await;
    stub.deprovision(context(), Scope::Session, hot.clone(), false)
        .await?
        .map_err(|error| anyhow::anyhow!("deprovision: {error}"))?;
    drop((stub, client));
    daemon.stop()
}

fn context() -> tarpc::context::Context {
    sandboxd_tests::context(Duration::from_secs(30))
}
