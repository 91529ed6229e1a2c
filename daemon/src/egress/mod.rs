//! The egress posture, enforced by the kernel on every sandbox (SPEC §9).
//!
//! The process tier: an nftables table of the daemon's own whose
//! output-hook chain matches every packet whose socket was made by a
//! process under the sandboxes cgroup and refuses the posture's ranges —
//! every TCP connect and every UDP send, IPv4 and IPv6 (an IPv4-mapped
//! IPv6 destination leaves as IPv4 and meets the IPv4 rules). The docker
//! tier: the same kind of table on every packet arriving from the bridge
//! of the daemon's own network (forward and input hooks; under `strict`
//! the host itself is refused too). The ranges come from the one table in
//! `sandboxd_protocol::egress`.
//!
//! On the process tier the table also keeps the sandboxes apart, on every
//! posture ([`separation`]): under `none` it holds only those rules. A
//! kernel or nft that cannot load them gets the posture's rules alone, and
//! [`Egress::separation`] says why (`status` shows it as not in force).
//!
//! Fail closed: [`Egress::establish`] never errors; when the rules cannot
//! be installed and verified, it remembers why and [`Egress::check`]
//! refuses every ensure with `unavailable` naming it, so no sandbox runs
//! unenforced. Only `egress = "none"`, written explicitly, runs sandboxes
//! unrestricted.
//!
//! Life cycle (process tier; the docker tier keeps its table on a clean
//! stop while containers of its instance, which outlive the daemon, or
//! other live daemons of the instance remain): installed at start, before
//! the daemon serves, by one atomic
//! nft transaction that replaces the table a previous instance left (so a
//! restart has no window without rules); re-verified periodically; removed
//! on a clean stop, after every runner is stopped. A crashed daemon leaves
//! its table in force, so runners it leaves behind stay held to it until
//! the next start's sweep kills them; a next start with `none` deletes it.
//! Each table is held by a host-wide lock ([`crate::holders`]) from before
//! it is loaded; other daemons' sweeps ([`orphans`], after they serve)
//! remove it only once that lock is free and nothing it held is left.

mod cgroup_target;
pub mod divert;
pub mod namespace_rules;
mod nft;
pub mod nft_helper;
mod nft_helper_client;
mod nft_library;
mod orphans;
mod ruleset;
mod separation;
mod setting;
mod teredo;

#[cfg(test)]
mod nft_helper_tests;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::{Mutex, MutexGuard, Weak};
use std::time::Duration;

use sandboxd_protocol::egress::Posture;
use sandboxd_protocol::{EgressStatus, SandboxError};

use crate::holders::Held;

use cgroup_target::{find_v2_mount, CgroupTarget};
use nft::Nft;
use ruleset::{Matched, Ruleset};
pub use setting::EgressSetting;

/// The posture's state on this daemon.
pub struct Egress {
    setting: EgressSetting,
    /// Held only to read or replace the state, never across an nft call.
    state: Mutex<State>,
    /// Held across the nft calls made after start.
    work: Mutex<()>,
    /// The table's holder lock (see [`crate::holders`]), held shared from
    /// before the table is loaded until it is removed: while held, no
    /// other daemon's sweep removes the table.
    holder: Mutex<Option<Held>>,
    /// The table's name, when this daemon has one (its sweep skips it).
    table: Option<String>,
}

enum State {
    /// `egress = "none"` and no table: nothing is refused. The text says
    /// why the sandboxes are not kept apart by a table either.
    Unrestricted(String),
    /// The table is installed and was verified (under `none` it holds only
    /// the separation's rules). `unseparated`: why it does not keep the
    /// sandboxes apart, when it does not.
    InForce {
        nft: Nft,
        ruleset: Ruleset,
        unseparated: Option<String>,
    },
    /// Enforced by the runtime, by objects the tier makes with every
    /// sandbox (the kubernetes tier's NetworkPolicy): no table here, so
    /// nothing to re-verify or remove; the text says how.
    ByRuntime(String),
    /// Why the posture cannot be enforced; every ensure is refused.
    Unenforceable(String),
}

impl Egress {
    /// Installs and verifies the rules for `setting` on the sandboxes
    /// cgroup, given by its path below the cgroup v2 root. Blocking (it
    /// runs nft). `None` means the tier has no cgroup v2 to put runners
    /// in, and then any posture is unenforceable.
    pub fn establish(setting: EgressSetting, sandboxes_cgroup: Option<&Path>) -> Egress {
        Egress::establish_on(setting, || locate_cgroup(sandboxes_cgroup))
    }

    /// The same for a container tier: every packet arriving from the
    /// bridge interface of the daemon's own network. Blocking.
    pub fn establish_for_bridge(setting: EgressSetting, bridge: &str) -> Egress {
        Egress::establish_on(setting, || Ok(Matched::Bridge(bridge.to_string())))
    }

    fn establish_on(
        setting: EgressSetting,
        matched: impl FnOnce() -> Result<Matched, String>,
    ) -> Egress {
        let posture = setting.posture();
        if posture.is_none() {
            tracing::warn!("egress = \"none\": sandboxes may connect anywhere, the cloud metadata endpoint included");
        }
        let (state, holder, table) = match matched() {
            Ok(matched) => {
                let ruleset = Ruleset::new(posture, matched);
                let table = ruleset.table.clone();
                // Before the table is loaded, so no sweep can take it
                // for a gone daemon's in between.
                let holder = Held::take(&table)
                    .inspect_err(|error| tracing::warn!(%table, "the table's holder lock cannot be taken, so another daemon's sweep may take this daemon for gone and remove it: {error}"))
                    .ok();
                (install_or_fall_back(ruleset), holder, Some(table))
            }
            Err(reason) => (not_enforced(posture, reason), None, None),
        };
        Egress {
            setting,
            state: Mutex::new(state),
            work: Mutex::new(()),
            holder: Mutex::new(holder),
            table,
        }
    }

    /// Nothing installed and nothing removed: `none` as it is, and any
    /// posture unenforceable for `reason` (every ensure refused).
    pub fn not_installed(setting: EgressSetting, reason: String) -> Egress {
        let state = match setting {
            EgressSetting::Unrestricted => State::Unrestricted(reason),
            EgressSetting::Enforced(posture) => not_enforced(Some(posture), reason),
        };
        Egress {
            setting,
            state: Mutex::new(state),
            work: Mutex::new(()),
            holder: Mutex::new(None),
            table: None,
        }
    }

    /// A posture the tier enforces itself with every sandbox it makes (the
    /// kubernetes tier: a NetworkPolicy per sandbox), described by
    /// `mechanism`; `none` as it is. Installs and removes nothing here.
    pub fn by_runtime(setting: EgressSetting, mechanism: String) -> Egress {
        let state = match setting {
            EgressSetting::Unrestricted => State::Unrestricted(format!(
                "no table of the daemon's: the runtime's own objects keep sandboxes apart ({mechanism})"
            )),
            EgressSetting::Enforced(_) => State::ByRuntime(mechanism),
        };
        Egress {
            setting,
            state: Mutex::new(state),
            work: Mutex::new(()),
            holder: Mutex::new(None),
            table: None,
        }
    }

    /// Ok when a sandbox may start: the rules are in force, or egress is
    /// unrestricted by configuration. Cheap: no syscall.
    pub fn check(&self) -> Result<(), SandboxError> {
        match &*self.state() {
            State::Unrestricted(_) | State::InForce { .. } | State::ByRuntime(_) => Ok(()),
            State::Unenforceable(reason) => Err(SandboxError::Unavailable(format!(
                "egress posture '{}' is not in force, so no sandbox may start: {reason}",
                self.setting
            ))),
        }
    }

    /// The posture and how it is enforced, for `status` and `describe`.
    pub fn status(&self) -> EgressStatus {
        let (enforced, mechanism) = match &*self.state() {
            State::Unrestricted(_) => (false, UNRESTRICTED.to_string()),
            State::InForce { ruleset, .. } if ruleset.posture.is_none() => (
                false,
                format!(
                    "{UNRESTRICTED} (table {} holds only the rules that keep sandboxes apart)",
                    ruleset.table_spec()
                ),
            ),
            State::InForce { ruleset, .. } => (true, ruleset.describe()),
            State::ByRuntime(mechanism) => (true, mechanism.clone()),
            State::Unenforceable(reason) => {
                (false, format!("NOT ENFORCED, ensure refused: {reason}"))
            }
        };
        EgressStatus {
            posture: self.setting.to_string(),
            enforced,
            mechanism,
        }
    }

    /// Whether the table keeps the sandboxes apart:
    /// how, or why not. For `status`'s `network` feature.
    pub fn separation(&self) -> Result<String, String> {
        match &*self.state() {
            State::InForce {
                ruleset,
                unseparated,
                ..
            } => ruleset.describe_separation().ok_or_else(|| {
                unseparated
                    .clone()
                    .unwrap_or_else(|| "the table holds no separation rules".to_string())
            }),
            State::Unrestricted(why) => Err(why.clone()),
            State::ByRuntime(mechanism) => Err(format!(
                "no table of the daemon's: the runtime keeps sandboxes apart ({mechanism})"
            )),
            State::Unenforceable(reason) => Err(format!(
                "the daemon's nftables table is not in force: {reason}"
            )),
        }
    }

    /// Lists the table again and checks it; when it is gone or altered,
    /// installs it anew, and when that fails too, refuses ensures from now
    /// on. Blocking.
    pub fn reverify(&self) {
        let _work = self.work();
        let Some((nft, ruleset)) = self.in_force() else {
            return;
        };
        let listed = nft.list_table(&ruleset.table_spec());
        let Err(problem) = listed.and_then(|listing| ruleset.verify(&listing)) else {
            return;
        };
        tracing::warn!(table = %ruleset.table_spec(), "egress rules no longer verify ({problem}); installing them again");
        let again = nft
            .apply(&ruleset.script())
            .and_then(|()| nft.list_table(&ruleset.table_spec()))
            .and_then(|listing| ruleset.verify(&listing));
        if let Err(reason) = again {
            let why = format!(
                "the rules were altered after start ({problem}) and cannot be restored: {reason}"
            );
            *self.state() = if ruleset.posture.is_none() {
                // `none` refuses nothing: ensures go on, unseparated.
                tracing::error!("the rules that keep sandboxes apart cannot be restored: {reason}");
                State::Unrestricted(why)
            } else {
                tracing::error!(
                    "egress rules cannot be restored, so every ensure will be refused: {reason}"
                );
                State::Unenforceable(why)
            };
        }
    }

    /// Removes the table, unless another live daemon holds it too (the
    /// docker tier's, shared by every daemon of an instance): the last
    /// holder removes it. Only on a clean stop, once no runner is left;
    /// nothing starts or reinstalls it afterwards. Blocking.
    pub fn remove(&self) {
        let _work = self.work();
        let holder = self
            .holder
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        if holder.as_ref().is_some_and(|holder| !holder.claim_last()) {
            tracing::info!(
                table = self.table.as_deref().unwrap_or_default(),
                "egress rules kept: another live sandboxd holds the same table"
            );
            return;
        }
        if let Some((nft, ruleset)) = self.in_force() {
            *self.state() =
                State::Unenforceable("sandboxd is stopping: its rules were removed".into());
            match nft.delete_table(&ruleset.table_spec()) {
                Ok(()) => tracing::info!(table = %ruleset.table_spec(), "egress rules removed"),
                Err(error) => tracing::warn!("egress rules left in place: {error}"),
            }
        }
        if let Some(holder) = holder {
            holder.release();
        }
    }

    /// Removes the egress tables of other daemons that are gone (see
    /// [`orphans`]), never this one's. Blocking, every nft call bounded:
    /// run it once the daemon serves, on a thread of its own.
    pub fn sweep_others(&self) {
        orphans::sweep(self.table.as_deref());
    }

    /// The tool and the rules, when in force; the state lock is held only
    /// for the copy, so `check` never waits on nft.
    fn in_force(&self) -> Option<(Nft, Ruleset)> {
        match &*self.state() {
            State::InForce { nft, ruleset, .. } => Some((nft.clone(), ruleset.clone())),
            _ => None,
        }
    }

    /// Serializes the calls that run nft after start (re-verify, remove).
    fn work(&self) -> MutexGuard<'_, ()> {
        self.work
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// How often the installed rules are listed and checked again.
pub const REVERIFY_EVERY: Duration = Duration::from_secs(30);

/// Re-verifies the rules every [`REVERIFY_EVERY`] until the driver that
/// owns `egress` is dropped.
pub async fn keep_verified(egress: Weak<Egress>) {
    let mut ticker = tokio::time::interval(REVERIFY_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await; // The first tick is immediate: start just verified.
    loop {
        ticker.tick().await;
        let Some(egress) = egress.upgrade() else {
            return;
        };
        let _ = tokio::task::spawn_blocking(move || egress.reverify()).await;
    }
}

/// The name of the table that holds `bridge` (the docker tier's), for a
/// sweep that removes a gone instance's network with it.
pub fn bridge_table(bridge: &str) -> String {
    Ruleset::new(None, Matched::Bridge(bridge.to_string())).table
}

/// Removes `table` (a gone docker instance's) when it exists. Blocking,
/// bounded. Ok(false) when there was none.
pub fn remove_table(table: &str) -> Result<bool, String> {
    let nft = Nft::find()?.bounded(orphans::SWEEP_CALL_TIMEOUT);
    let spec = format!("inet {table}");
    if nft.list_table(&spec).is_err() {
        return Ok(false);
    }
    nft.delete_table(&spec).map(|()| true)
}

/// How `status` names `egress = "none"`.
const UNRESTRICTED: &str = "unrestricted: egress = \"none\" in the configuration";

/// Installs `ruleset`; when that fails and it holds the separation's
/// rules, installs the posture's alone and remembers why. With nothing
/// left to install (`none`), removes what an earlier instance left.
fn install_or_fall_back(ruleset: Ruleset) -> State {
    let posture = ruleset.posture;
    let unseparated = match &ruleset.matched {
        Matched::Cgroup(_) => None,
        Matched::Bridge(bridge) => Some(format!(
            "not this table's job: the network of bridge {bridge} keeps containers apart"
        )),
        Matched::Namespace(_) => Some(
            "not this table's job: each sandbox's own network namespace keeps it apart".to_string(),
        ),
    };
    if ruleset.is_empty() {
        remove_leftover(&ruleset);
        return State::Unrestricted(unseparated.unwrap_or_default());
    }
    let reason = match install(&ruleset) {
        Ok(nft) => return in_force(nft, ruleset, unseparated),
        Err(reason) if !ruleset.separate => return not_enforced(posture, reason),
        Err(reason) => reason,
    };
    let unseparated = format!("the rules that keep sandboxes apart cannot be loaded: {reason}");
    tracing::error!("{unseparated}");
    let fallback = ruleset.without_separation();
    if fallback.is_empty() {
        remove_leftover(&fallback);
        return State::Unrestricted(unseparated);
    }
    match install(&fallback) {
        Ok(nft) => in_force(nft, fallback, Some(unseparated)),
        Err(reason) => not_enforced(posture, reason),
    }
}

fn in_force(nft: Nft, ruleset: Ruleset, unseparated: Option<String>) -> State {
    match ruleset.describe_separation() {
        Some(separation) => tracing::info!("sandboxes kept apart: {separation}"),
        None => tracing::warn!(
            "sandboxes are not kept apart by the daemon's table: {}",
            unseparated.as_deref().unwrap_or("no separation rules")
        ),
    }
    if let Some(posture) = ruleset.posture {
        tracing::info!(posture = %posture, "egress rules in force: {}", ruleset.describe());
    }
    State::InForce {
        nft,
        ruleset,
        unseparated,
    }
}

/// Nothing could be installed for `reason`: a posture refuses every
/// ensure, `none` goes on unseparated.
fn not_enforced(posture: Option<Posture>, reason: String) -> State {
    match posture {
        Some(posture) => {
            tracing::error!(posture = %posture, "egress posture cannot be enforced, so every ensure will be refused: {reason}");
            State::Unenforceable(reason)
        }
        None => {
            tracing::warn!("sandboxes are not kept apart by the daemon's table: {reason}");
            State::Unrestricted(reason)
        }
    }
}

/// Deletes the table a crashed instance left on the same cgroup (or
/// bridge), when this one installs none, so that `status` tells the
/// truth. Best effort: with no nft or no such table there is nothing to
/// remove.
fn remove_leftover(ruleset: &Ruleset) {
    let Ok(nft) = Nft::find() else {
        return;
    };
    // The table's name depends only on what it matches.
    let table = ruleset.table_spec();
    if nft.list_table(&table).is_ok() {
        match nft.delete_table(&table) {
            Ok(()) => tracing::info!(%table, "removed the egress rules an earlier sandboxd left"),
            Err(error) => tracing::error!(
                "egress = \"none\", but an earlier sandboxd's rules stay in force: {error}"
            ),
        }
    }
}

/// The sandboxes cgroup, located for nft: an absolute path below the
/// cgroup v2 mount, or one relative to it. It must exist (nft resolves it
/// to an id when the rules are loaded).
fn locate_cgroup(sandboxes_cgroup: Option<&Path>) -> Result<Matched, String> {
    let dir = sandboxes_cgroup.ok_or(
        "runners are not placed in a cgroup v2 of their own on this daemon, so no kernel rule can tell their traffic apart",
    )?;
    let mount = find_v2_mount()?;
    // Absolute (as the driver knows it), or already below the v2 root.
    let relative = match dir.strip_prefix(&mount) {
        Ok(relative) => relative,
        Err(_) if dir.is_relative() => dir,
        Err(_) => {
            return Err(format!(
                "the sandboxes cgroup {} is not below the cgroup v2 mount {}",
                dir.display(),
                mount.display()
            ))
        }
    };
    let target = CgroupTarget::new(&mount, relative)?;
    if !target.dir.is_dir() {
        return Err(format!(
            "the sandboxes cgroup {} does not exist",
            target.dir.display()
        ));
    }
    Ok(Matched::Cgroup(target))
}

/// Finds nft, loads the table and checks the kernel lists back exactly
/// what was loaded.
fn install(ruleset: &Ruleset) -> Result<Nft, String> {
    let nft = Nft::find()?;
    nft.apply(&ruleset.script())?;
    let listing = nft.list_table(&ruleset.table_spec())?;
    ruleset.verify(&listing).map_err(|why| {
        format!(
            "the table {} does not hold the rules loaded: {why}",
            ruleset.table_spec()
        )
    })?;
    Ok(nft)
}
