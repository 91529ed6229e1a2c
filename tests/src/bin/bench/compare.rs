//! Row (c) against another `sandboxd` in the same run (`--compare PATH`):
//! the daemon before a change, measured beside this one, so the
//! goal "new sandbox p50 at most 25 % over the old tree's" is a ratio of
//! two figures taken under the same load.
//!
//! Four fresh daemons serve at once, each in files of its own in the bench
//! directory: this binary as configured for the other rows (`[limits]`
//! defaults: on a hybrid host memory, pids and cpu in v1 hierarchies), the
//! other binary, and this binary twice more with limits switched off in
//! part — `cpu = 0` (memory and pids only) and everything `0` (no v1
//! cgroup at all: the cgroup v2 directory and `CLONE_INTO_CGROUP` alone,
//! what a sandbox's cgroup costs where no limit is set). The calls take
//! turns, one new sandbox on each daemon per round, the order rotating
//! every round, so each daemon sees the same neighbours; every tenth round
//! the ten new sandboxes of each are deprovisioned, also in turn, so no
//! daemon holds more than ten runners.
//!
//! The calls go through the bare tarpc stub, not the client library, for
//! all four: the library refuses a daemon of another protocol version (an
//! older daemon speaks an older protocol version, which differs only in
//! methods added at the end; `ensure` and `deprovision` are unchanged on the wire). So these
//! figures are a little below row (c)'s, which go through the library.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use sandboxd_client::Scope;
use sandboxd_protocol::{SandboxError, SandboxdClient};

use crate::rows::sandbox_env;
use crate::setup::{Binaries, Daemon};
use crate::stats::Samples;

/// Rounds between two deprovisions of every daemon's new sandboxes.
const BATCH: usize = 10;

/// One daemon of the comparison and what it measured.
pub struct Contender {
    /// Short name, for the table.
    pub name: &'static str,
    pub ensures: Samples,
    pub deprovisions: Samples,
}

/// The four daemons' figures, in the order [`measure`] lists them.
pub struct Comparison {
    /// This binary, `[limits]` defaults.
    pub this: Contender,
    /// The other binary (`--compare`).
    pub other: Contender,
    /// This binary, `cpu = 0`.
    pub no_cpu: Contender,
    /// This binary, every limit 0.
    pub no_limits: Contender,
}

struct Running {
    name: &'static str,
    daemon: Daemon,
    client: SandboxdClient,
    ensures: Samples,
    deprovisions: Samples,
}

/// One daemon to start for [`interleave`]: its name (also the prefix of
/// its files, `cmp-<name>-`), its binaries, the top of its config (the
/// driver and top-level keys) and whole tables at the end.
pub struct Plan<'a> {
    pub name: &'static str,
    pub binaries: &'a Binaries,
    pub driver_toml: String,
    pub tables_toml: String,
}

/// Starts the four daemons, takes `count` new sandboxes of each in turn
/// (deprovisioning them in batches), stops the daemons.
pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    other: &Path,
    count: usize,
) -> anyhow::Result<Comparison> {
    let driver = "driver = \"local-process\"\n";
    let other_binaries = binaries.with_other_daemon(other);
    let plans: [(&'static str, &Binaries, &str); 4] = [
        ("this", binaries, ""),
        ("other", &other_binaries, ""),
        ("no-cpu", binaries, "[limits]\ncpu = 0.0\n"),
        (
            "no-limits",
            binaries,
            "[limits]\nmemory = 0\npids = 0\ncpu = 0.0\n",
        ),
    ];
    let plans = plans
        .into_iter()
        .map(|(name, binaries, tables)| Plan {
            name,
            binaries,
            driver_toml: driver.to_string(),
            tables_toml: tables.to_string(),
        })
        .collect();
    let mut done = interleave(dir, plans, count).await?.into_iter();
    let mut next = || done.next().expect("four contenders");
    Ok(Comparison {
        this: next(),
        other: next(),
        no_cpu: next(),
        no_limits: next(),
    })
}

/// Starts one daemon per plan, takes `count` new sandboxes of each in turn
/// (the order rotating every round, deprovisioning them in batches), stops
/// the daemons; their figures in the plans' order. The egress rows (issue
/// 12) use it too.
pub async fn interleave(
    dir: &Path,
    plans: Vec<Plan<'_>>,
    count: usize,
) -> anyhow::Result<Vec<Contender>> {
    let mut running = Vec::new();
    for plan in plans {
        let prefix = format!("cmp-{}-", plan.name);
        let daemon = Daemon::start_with_tables(
            dir,
            &prefix,
            plan.binaries,
            &plan.driver_toml,
            &plan.tables_toml,
        )?;
        let client = sandboxd_tests::tarpc_client(&daemon.socket).await;
        running.push(Running {
            name: plan.name,
            daemon,
            client,
            ensures: Samples::with_capacity(count),
            deprovisions: Samples::with_capacity(count),
        });
    }
    let contenders = running.len();
    let mut pending: Vec<String> = Vec::new();
    for round in 0..count {
        let id = format!("cmp-{round}");
        for turn in 0..contenders {
            let one = &mut running[(round + turn) % contenders];
            let env = sandbox_env(&id);
            let call = one
                .client
                .ensure(context(), Scope::Session, id.clone(), env);
            let report = timed(&mut one.ensures, call).await?;
            if !report.created {
                bail!(
                    "{}: ensure of new sandbox {id} took the fast path",
                    one.name
                );
            }
        }
        pending.push(id);
        if pending.len() == BATCH || round + 1 == count {
            for (index, id) in pending.drain(..).enumerate() {
                for turn in 0..contenders {
                    let one = &mut running[(index + turn) % contenders];
                    let call = one
                        .client
                        .deprovision(context(), Scope::Session, id.clone(), false);
                    let report = timed(&mut one.deprovisions, call).await?;
                    if !report.was_present || report.forced {
                        bail!("{}: deprovision of {id} reported {report:?}", one.name);
                    }
                }
            }
        }
    }
    let mut done = Vec::new();
    for mut one in running {
        drop(one.client);
        one.daemon.stop()?;
        done.push(Contender {
            name: one.name,
            ensures: one.ensures,
            deprovisions: one.deprovisions,
        });
    }
    Ok(done)
}

/// A call's context: a deadline far beyond what any call here takes.
fn context() -> tarpc::context::Context {
    sandboxd_tests::context(Duration::from_secs(30))
}

/// Awaits `call`, adding its latency to `samples`.
async fn timed<Reply>(
    samples: &mut Samples,
    call: impl Future<Output = Result<Result<Reply, SandboxError>, tarpc::client::RpcError>>,
) -> anyhow::Result<Reply> {
    let start = Instant::now();
    let reply = call.await;
    samples.push(start.elapsed());
    reply?.map_err(|error| anyhow::anyhow!("{error}"))
}
