//! Which sandbox has which uid of [`UidRange`], and which uid a new
//! sandbox gets.
//!
//! A sandbox keeps its uid for as long as its workspace exists: a respawn,
//! a `deprovision --keep-workspace` and a daemon restart all leave it (the
//! [ledger](super::super::ledger) records every assignment and release). The uid
//! is released only once the workspace is gone, and it is handed out again
//! only when no process with it is left — which is checked then, with a
//! scan of `/proc`, because a process that escaped its group (`setsid`)
//! survives the group's SIGKILL.
//!
//! New sandboxes get uids never handed out before, lowest first, as long
//! as there are any: O(1), and no scan. Only once the range is used up are
//! released uids handed out again, the one released longest ago first, so
//! a uid rests as long as possible before a new sandbox gets it.
//!
//! A uid's user and persistent keyrings are emptied (and freed) when it is
//! released and emptied again as it is handed out (see
//! [`super::uid_keyrings`]); one whose
//! keyrings cannot be emptied is skipped, as one another daemon claims.

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use sandboxd_protocol::SandboxError;

use super::super::ledger::{Ledger, UidLedger};
use super::uid_claims::UidClaims;
use super::uid_keyrings::{clear_keyrings_of, Emptied};
use super::uid_range::UidRange;
use crate::sandbox_key::SandboxKey;

pub struct UidPool {
    range: UidRange,
    by_sandbox: HashMap<String, u32>,
    owners: HashMap<u32, String>,
    /// Every uid from here to the range's end has never been handed out
    /// (u64: one past `u32::MAX - 1` must fit).
    next_fresh: u64,
    /// Uids handed out before the last restart and not looked at since:
    /// released before anything this instance released, in an order the
    /// restart lost, so lowest first. A range, not a list: a wide range
    /// costs nothing.
    before_restart: std::ops::Range<u64>,
    /// Uids released by this instance, the longest-released first.
    released: VecDeque<u32>,
}

/// How a sandbox came by its uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// It had it already (a respawn, a kept workspace).
    Kept(u32),
    /// It was just given this one.
    New(u32),
}

impl Assignment {
    pub fn uid(self) -> u32 {
        match self {
            Assignment::Kept(uid) | Assignment::New(uid) => uid,
        }
    }
}

impl UidPool {
    /// A pool that knows `assigned` (sandbox base name → uid) and that every
    /// uid of the range below `high_water` was handed out once. Assignments
    /// outside the range (it was changed) or of a uid already taken are
    /// dropped and returned, so the caller can say so: those sandboxes get
    /// a new uid at their next start.
    pub fn new(
        range: UidRange,
        assigned: impl IntoIterator<Item = (String, u32)>,
        high_water: u32,
    ) -> (UidPool, Vec<(String, u32)>) {
        let mut pool = UidPool {
            range,
            by_sandbox: HashMap::new(),
            owners: HashMap::new(),
            next_fresh: u64::from(range.first),
            before_restart: 0..0,
            released: VecDeque::new(),
        };
        let mut dropped = Vec::new();
        let mut high =
            u64::from(high_water).clamp(u64::from(range.first), u64::from(range.last) + 1);
        let mut sorted: Vec<(String, u32)> = assigned.into_iter().collect();
        sorted.sort();
        for (base, uid) in sorted {
            if !range.contains(uid) || pool.owners.contains_key(&uid) {
                dropped.push((base, uid));
                continue;
            }
            high = high.max(u64::from(uid) + 1);
            pool.owners.insert(uid, base.clone());
            pool.by_sandbox.insert(base, uid);
        }
        pool.next_fresh = high;
        // Of the uids handed out before, those no sandbox holds now are
        // released (skipped as they come up when a sandbox holds them).
        pool.before_restart = u64::from(range.first)..high;
        (pool, dropped)
    }

    pub fn range(&self) -> UidRange {
        self.range
    }

    pub fn uid_of(&self, base: &str) -> Option<u32> {
        self.by_sandbox.get(base).copied()
    }

    /// Every uid of the range below this was handed out once (for the ledger).
    pub fn high_water(&self) -> u32 {
        // At most `range.last + 1`, and the range never holds u32::MAX.
        self.next_fresh as u32
    }

    /// The sandbox's uid: the one it has, else a fresh one, else the
    /// longest-released one that `live_uids` (called at most once, only
    /// then) does not list — in both cases one that `claim` could claim
    /// host-wide (see [`super::uid_claims`]): `Ok(false)` means another
    /// daemon has it, so it is skipped (and tried again once it comes up
    /// among the released ones); an error ends the search, with the uid
    /// put back. The error says why none is free.
    pub fn assign(
        &mut self,
        base: &str,
        live_uids: impl FnOnce() -> HashSet<u32>,
        mut claim: impl FnMut(u32) -> Result<bool, String>,
    ) -> Result<Assignment, String> {
        if let Some(uid) = self.uid_of(base) {
            return Ok(Assignment::Kept(uid));
        }
        let uid = match self.take_fresh(&mut claim)? {
            Some(uid) => uid,
            None => self.take_released(live_uids, &mut claim)?,
        };
        self.owners.insert(uid, base.to_owned());
        self.by_sandbox.insert(base.to_owned(), uid);
        Ok(Assignment::New(uid))
    }

    /// The lowest never-handed-out uid that `claim` claims; those claimed
    /// elsewhere join the released ones.
    fn take_fresh(
        &mut self,
        claim: &mut impl FnMut(u32) -> Result<bool, String>,
    ) -> Result<Option<u32>, String> {
        while self.next_fresh <= u64::from(self.range.last) {
            let uid = self.next_fresh as u32;
            match claim(uid) {
                Ok(true) => {
                    self.next_fresh += 1;
                    return Ok(Some(uid));
                }
                Ok(false) => {
                    self.next_fresh += 1;
                    self.released.push_back(uid);
                }
                Err(problem) => return Err(problem),
            }
        }
        Ok(None)
    }

    /// The longest-released uid without a process that `claim` claims.
    /// Those that still have processes, or that another daemon claims, go
    /// to the back of the queue.
    fn take_released(
        &mut self,
        live_uids: impl FnOnce() -> HashSet<u32>,
        claim: &mut impl FnMut(u32) -> Result<bool, String>,
    ) -> Result<u32, String> {
        let mut scan = Some(live_uids);
        let mut live: Option<HashSet<u32>> = None;
        let mut has_processes = |uid: u32| {
            live.get_or_insert_with(|| scan.take().map(|scan| scan()).unwrap_or_default())
                .contains(&uid)
        };
        let mut claimed_elsewhere = 0usize;
        // One candidate: `Some` ends the search (taken, or the claim
        // failed); `None` puts it at the back of the queue.
        let mut try_uid = |released: &mut VecDeque<u32>, uid: u32| {
            if !has_processes(uid) {
                match claim(uid) {
                    Ok(true) => return Some(Ok(uid)),
                    Ok(false) => claimed_elsewhere += 1,
                    Err(problem) => {
                        released.push_front(uid);
                        return Some(Err(problem));
                    }
                }
            }
            released.push_back(uid);
            None
        };
        for uid in self.before_restart.by_ref() {
            // In the range (below the high-water mark), so it fits.
            let uid = uid as u32;
            if self.owners.contains_key(&uid) {
                continue;
            }
            if let Some(taken) = try_uid(&mut self.released, uid) {
                return taken;
            }
        }
        if self.released.is_empty() {
            return Err(format!(
                "every uid of runner_uid_range {} ({}) belongs to a sandbox with a workspace: remove some, or widen the range",
                self.range,
                self.range.len()
            ));
        }
        for _ in 0..self.released.len() {
            let uid = self.released.pop_front().expect("not empty");
            if let Some(taken) = try_uid(&mut self.released, uid) {
                return taken;
            }
        }
        if claimed_elsewhere > 0 {
            return Err(format!(
                "no uid of runner_uid_range {} is free: of the {} not held by this daemon's sandboxes, {claimed_elsewhere} are claimed by other sandboxd daemons on this host and the rest still have processes — widen the range, or give each daemon its own",
                self.range,
                self.released.len()
            ));
        }
        Err(format!(
            "no uid of runner_uid_range {} is free: the {} released ones all still have processes (e.g. uid {})",
            self.range,
            self.released.len(),
            self.released[0]
        ))
    }

    /// Undoes [`UidPool::assign`] of a new `uid` that nothing used: it goes
    /// back where it came from, as if it had never been handed out.
    pub fn take_back(&mut self, base: &str, uid: u32) {
        if self.by_sandbox.get(base) != Some(&uid) {
            return;
        }
        self.by_sandbox.remove(base);
        self.owners.remove(&uid);
        if u64::from(uid) + 1 == self.next_fresh {
            self.next_fresh -= 1;
        } else {
            self.released.push_front(uid);
        }
    }

    /// A never-handed-out uid for `base`, when more than `keep` of them
    /// are left (see [`SandboxUids::assign_prepared`]); `Ok(None)` else.
    pub fn assign_fresh(
        &mut self,
        base: &str,
        keep: u64,
        mut claim: impl FnMut(u32) -> Result<bool, String>,
    ) -> Result<Option<u32>, String> {
        let left = (u64::from(self.range.last) + 1).saturating_sub(self.next_fresh);
        if left <= keep || self.by_sandbox.contains_key(base) {
            return Ok(None);
        }
        let Some(uid) = self.take_fresh(&mut claim)? else {
            return Ok(None);
        };
        self.owners.insert(uid, base.to_owned());
        self.by_sandbox.insert(base.to_owned(), uid);
        Ok(Some(uid))
    }

    /// Hands the uid held under `from` (a prepared sandbox's name) to the
    /// sandbox `to`, which has none.
    pub fn rename(&mut self, from: &str, to: &str) -> Option<u32> {
        if self.by_sandbox.contains_key(to) {
            return None;
        }
        let uid = self.by_sandbox.remove(from)?;
        self.by_sandbox.insert(to.to_owned(), uid);
        self.owners.insert(uid, to.to_owned());
        Some(uid)
    }

    /// Releases the sandbox's uid (its workspace is gone); returns it.
    pub fn release(&mut self, base: &str) -> Option<u32> {
        let uid = self.by_sandbox.remove(base)?;
        self.owners.remove(&uid);
        self.released.push_back(uid);
        Some(uid)
    }
}

/// The pool as the driver shares it between its spawner threads, with the
/// ledger records and the host-wide claims of each change.
pub struct SandboxUids {
    pool: Mutex<UidPool>,
    claims: UidClaims,
}

impl SandboxUids {
    /// The restored pool, its uids claimed again host-wide (a uid another
    /// daemon claims meanwhile is a clash: logged here, and its sandbox
    /// refused at its next ensure), and this daemon's claims on uids it no
    /// longer holds removed. Blocking.
    pub fn new(pool: UidPool, claims: UidClaims) -> SandboxUids {
        let held: HashSet<u32> = pool.owners.keys().copied().collect();
        for (base, uid) in &pool.by_sandbox {
            if let Err(error) = claims.hold(*uid, base) {
                tracing::error!(sandbox = %base, uid, %error, "a uid of this daemon's ledger is another daemon's: its sandbox is refused until one of the two is removed");
            }
        }
        let stale = claims.stale_own(&held);
        for &uid in &stale {
            give_back(&claims, uid);
        }
        if !stale.is_empty() {
            tracing::info!(removed = stale.len(), dir = %claims.dir().display(), "removed this daemon's claims on uids it no longer holds, and freed their keyrings");
        }
        SandboxUids {
            pool: Mutex::new(pool),
            claims,
        }
    }

    fn pool(&self) -> MutexGuard<'_, UidPool> {
        self.pool
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// The sandbox's uid: the one it has (a respawn, a kept workspace), else
    /// a new one, which [`SandboxUids::settle_new`] records or takes back.
    /// Either way claimed host-wide: a uid another daemon claims is
    /// skipped when new, and refused (a clash) when the sandbox has it.
    pub fn assign(&self, key: &SandboxKey) -> Result<Assignment, SandboxError> {
        let mut pool = self.pool();
        let range = pool.range();
        let base = &key.base_name;
        let claims = &self.claims;
        let assignment = pool
            .assign(
                base,
                || live_uids_in(range),
                |uid| self.claim_cleared(uid, base),
            )
            .map_err(|problem| {
                SandboxError::Unavailable(format!(
                    "cannot start the runner of {} '{}': {problem}",
                    key.scope, key.id
                ))
            })?;
        if let Assignment::Kept(uid) = assignment {
            claims.hold(uid, base).map_err(|error| {
                let problem = format!(
                    "cannot start the runner of {} '{}' as its uid {uid}: {error}",
                    key.scope, key.id
                );
                if error.is_held() {
                    SandboxError::FailedPrecondition(problem)
                } else {
                    SandboxError::Unavailable(problem)
                }
            })?;
        }
        Ok(assignment)
    }

    /// Records a new uid once its runner started (a crash before that
    /// leaves at most a workspace owned by it, which the next start
    /// adopts). When the spawn failed, the empty workspace it may have made
    /// goes and the uid is taken back (and its claim removed): a failed
    /// ensure leaves nothing behind. A workspace with files in it (`rmdir`
    /// refuses) keeps the uid.
    pub fn settle_new(
        &self,
        key: &SandboxKey,
        uid: u32,
        spawned: bool,
        workspace: &Path,
        ledger: &Ledger,
    ) {
        let unused = !spawned
            && match std::fs::remove_dir(workspace) {
                Ok(()) => true,
                Err(error) => error.kind() == std::io::ErrorKind::NotFound,
            };
        if unused {
            let mut pool = self.pool();
            pool.take_back(&key.base_name, uid);
            self.claims.release(uid);
        } else if let Err(error) = ledger.record_uid(&key.base_name, uid) {
            tracing::warn!(%error, uid, "cannot record the sandbox's uid in the ledger");
        }
    }

    /// Gives the sandbox's uid back once its runner is gone and its
    /// workspace removed, with its host-wide claim. Whether a process of
    /// it survived elsewhere is checked when the uid is handed out again.
    pub fn release(&self, key: &SandboxKey, ledger: &Ledger) {
        let released = {
            let mut pool = self.pool();
            let released = pool.release(&key.base_name);
            if let Some(uid) = released {
                // Its processes are gone (a survivor's keys stay; the uid
                // is emptied again before it goes out, once none is left).
                give_back(&self.claims, uid);
            }
            released
        };
        if let Some(uid) = released {
            if let Err(error) = ledger.release_uid(&key.base_name, uid) {
                tracing::warn!(%error, uid, "cannot record the release of a sandbox's uid in the ledger");
            }
        }
    }

    /// A new uid for a sandbox prepared ahead under `name` (see
    /// `prepared::host_parts`), claimed host-wide for that name; nothing is
    /// recorded in the ledger until a sandbox adopts it. Only a
    /// never-handed-out uid, and only while more than `keep` of them are
    /// left: a pool must never hold the uids a sandbox started cold needs
    /// (`Ok(None)`: the prepared sandbox gets its uid at its take).
    pub fn assign_prepared(&self, name: &str, keep: u64) -> Result<Option<u32>, String> {
        self.pool()
            .assign_fresh(name, keep, |uid| self.claim_cleared(uid, name))
    }

    /// Claims `uid` host-wide for `name` and empties its keyrings, as a
    /// uid is handed out: `Ok(false)` when another daemon claims it, or
    /// when its keyrings cannot be emptied (its claim is dropped again and
    /// the uid skipped: a sandbox must never find another's keys).
    fn claim_cleared(&self, uid: u32, name: &str) -> Result<bool, String> {
        match self.claims.hold(uid, name) {
            Ok(()) => {}
            Err(error) if error.is_held() => {
                tracing::debug!(uid, %error, "skipping a uid another daemon claims");
                return Ok(false);
            }
            Err(error) => return Err(error.to_string()),
        }
        if let Err(error) = clear_keyrings_of(uid, Emptied::Kept) {
            tracing::warn!(uid, %error, "skipping a uid whose keyrings cannot be emptied: a sandbox given it would find what the last one left there");
            self.claims.release(uid);
            return Ok(false);
        }
        Ok(true)
    }

    /// Gives the uid prepared under `name` to `key`'s new sandbox: the
    /// pool's record names it from here on, and the host-wide claim once
    /// the caller calls [`SandboxUids::claim_adopted`] (after the ensure's
    /// answer). The caller then settles it as a new uid
    /// ([`SandboxUids::settle_new`]).
    pub fn adopt_prepared(&self, name: &str, key: &SandboxKey) -> Option<u32> {
        self.pool().rename(name, &key.base_name)
    }

    /// Renames the host-wide claim of `uid`, adopted from a prepared
    /// sandbox, to `key`'s sandbox, if the sandbox still holds it.
    ///
    /// Under the pool's lock, as a release is: it runs after the ensure's
    /// answer, so the sandbox may have failed to start or been deprovisioned
    /// in between, its uid given back and its claim removed; a rename then
    /// would leave a claim that no uid of this daemon stands behind.
    pub fn claim_adopted(&self, uid: u32, key: &SandboxKey) {
        let pool = self.pool();
        if pool.uid_of(&key.base_name) != Some(uid) {
            return;
        }
        if let Err(error) = self.claims.rename_own(uid, &key.base_name) {
            // Still this daemon's claim, under the prepared name: the next
            // start claims it again for the sandbox (see `SandboxUids::new`).
            tracing::warn!(uid, %error, "cannot rename the claim of a prepared uid to its sandbox");
        }
        drop(pool);
    }

    /// Gives back a prepared uid that no sandbox took.
    pub fn release_prepared(&self, name: &str) {
        let mut pool = self.pool();
        if let Some(uid) = pool.uid_of(name) {
            pool.take_back(name, uid);
            self.claims.release(uid);
        }
    }

    /// The sandbox's uid, if it has one.
    pub fn uid_of(&self, key: &SandboxKey) -> Option<u32> {
        self.pool().uid_of(&key.base_name)
    }

    /// Where the host-wide claims are (for `status`).
    pub fn claims_dir(&self) -> &Path {
        self.claims.dir()
    }
}

/// How a uid leaves this daemon (released, or found claimed but no longer
/// held at start): what its last sandbox kept in the kernel's keyrings is
/// emptied and freed (see `uid_keyrings` for why freed), then its claim
/// goes. In that order: until the claim goes, no other daemon has it.
fn give_back(claims: &UidClaims, uid: u32) {
    if let Err(error) = clear_keyrings_of(uid, Emptied::Freed) {
        tracing::warn!(uid, %error, "cannot empty the keyrings of a uid given back; tried again before it is handed out");
    }
    claims.release(uid);
}

/// The pool after a restart, and what to write into the new ledger: the
/// recorded assignments of sandboxes whose workspace is still in
/// `sandboxes` (the others' uids are released: no runner survived the
/// start-up sweep), plus any workspace the ledger does not know whose owner
/// is a free uid of the range (a line lost in a crash). Blocking: one
/// `lstat` per workspace.
pub fn restore(range: UidRange, recorded: UidLedger, sandboxes: &Path) -> (UidPool, UidLedger) {
    let owners: HashMap<String, u32> = std::fs::read_dir(sandboxes)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let metadata = entry.metadata().ok()?;
            (!name.starts_with('.') && metadata.is_dir()).then(|| (name, metadata.uid()))
        })
        .collect();
    let mut assigned: Vec<(String, u32)> = recorded
        .assigned
        .into_iter()
        .filter(|(base, _)| owners.contains_key(base))
        .collect();
    let mut taken: HashSet<u32> = assigned.iter().map(|(_, uid)| *uid).collect();
    for (base, owner) in &owners {
        let known = assigned.iter().any(|(recorded, _)| recorded == base);
        if !known && range.contains(*owner) && taken.insert(*owner) {
            tracing::info!(
                base,
                uid = owner,
                "the ledger had no uid for a workspace; it keeps its owner's"
            );
            assigned.push((base.clone(), *owner));
        }
    }
    let (pool, dropped) = UidPool::new(range, assigned, recorded.high_water);
    for (base, uid) in dropped {
        tracing::warn!(base, uid, %range, "a sandbox's recorded uid is outside runner_uid_range or taken; it gets a new one at its next start");
    }
    let restored = UidLedger {
        assigned: pool.by_sandbox.clone(),
        // Nothing to say (an empty journal stays empty) when none went out.
        high_water: if pool.next_fresh == u64::from(range.first) {
            0
        } else {
            pool.high_water()
        },
    };
    (pool, restored)
}

/// The uids (real, effective, saved or file-system, and the same of gids)
/// of every process in the range, from `/proc/<pid>/status`. Only called
/// when a released uid is about to be handed out again.
pub fn live_uids_in(range: UidRange) -> HashSet<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashSet::new();
    };
    let mut live = HashSet::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|name| name.bytes().all(|byte| byte.is_ascii_digit()))
        {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue; // gone meanwhile
        };
        live.extend(
            status
                .lines()
                .filter_map(|line| {
                    line.strip_prefix("Uid:")
                        .or_else(|| line.strip_prefix("Gid:"))
                })
                .flat_map(str::split_ascii_whitespace)
                .filter_map(|id| id.parse::<u32>().ok())
                .filter(|&id| range.contains(id)),
        );
    }
    live
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANGE: UidRange = UidRange {
        first: 1000,
        last: 1003,
    };

    fn nothing_live() -> HashSet<u32> {
        HashSet::new()
    }

    fn claim_all(_: u32) -> Result<bool, String> {
        Ok(true)
    }

    fn empty_pool() -> UidPool {
        UidPool::new(RANGE, [], 0).0
    }

    #[test]
    fn a_prepared_uid_is_fresh_leaves_enough_to_cold_starts_and_moves_to_its_sandbox() {
        let mut pool = empty_pool();
        // Four uids, two kept for cold starts: two may be prepared.
        assert_eq!(
            pool.assign_fresh("prepared-0", 2, claim_all),
            Ok(Some(1000))
        );
        assert_eq!(
            pool.assign_fresh("prepared-1", 2, claim_all),
            Ok(Some(1001))
        );
        assert_eq!(pool.assign_fresh("prepared-2", 2, claim_all), Ok(None));
        // A cold start still finds a fresh one.
        assert_eq!(
            pool.assign("cold", nothing_live, claim_all),
            Ok(Assignment::New(1002))
        );
        assert_eq!(pool.rename("prepared-1", "taker"), Some(1001));
        assert_eq!(pool.uid_of("taker"), Some(1001));
        assert_eq!(pool.uid_of("prepared-1"), None);
        // A sandbox that has a uid takes no other.
        assert_eq!(pool.rename("prepared-0", "taker"), None);
        assert_eq!(pool.uid_of("prepared-0"), Some(1000));
        // Given back untaken: not lost.
        pool.take_back("prepared-0", 1000);
        assert_eq!(
            pool.assign("next", nothing_live, claim_all),
            Ok(Assignment::New(1003))
        );
        assert_eq!(
            pool.assign("last", nothing_live, claim_all),
            Ok(Assignment::New(1000))
        );
    }

    #[test]
    fn fresh_uids_go_out_lowest_first_without_a_scan_and_a_sandbox_keeps_its_own() {
        let mut pool = empty_pool();
        let no_scan = || -> HashSet<u32> { panic!("a fresh uid needs no scan") };
        assert_eq!(
            pool.assign("a", no_scan, claim_all),
            Ok(Assignment::New(1000))
        );
        assert_eq!(
            pool.assign("b", no_scan, claim_all),
            Ok(Assignment::New(1001))
        );
        assert_eq!(
            pool.assign("a", no_scan, claim_all),
            Ok(Assignment::Kept(1000))
        );
        assert_eq!(pool.uid_of("b"), Some(1001));
        assert_eq!(pool.high_water(), 1002);
    }

    #[test]
    fn released_uids_wait_until_the_fresh_ones_are_used_up_then_go_longest_released_first() {
        let mut pool = empty_pool();
        for base in ["a", "b", "c"] {
            pool.assign(base, nothing_live, claim_all).unwrap();
        }
        assert_eq!(pool.release("b"), Some(1001));
        assert_eq!(pool.release("a"), Some(1000));
        assert_eq!(pool.release("a"), None, "released twice");
        assert_eq!(
            pool.assign("d", nothing_live, claim_all),
            Ok(Assignment::New(1003))
        );
        assert_eq!(
            pool.assign("e", nothing_live, claim_all),
            Ok(Assignment::New(1001))
        );
        assert_eq!(
            pool.assign("f", nothing_live, claim_all),
            Ok(Assignment::New(1000))
        );
        let error = pool.assign("g", nothing_live, claim_all).unwrap_err();
        assert!(
            error.contains("every uid of runner_uid_range 1000-1003 (4)"),
            "{error}"
        );
    }

    #[test]
    fn a_released_uid_with_a_live_process_is_skipped_until_it_has_none() {
        let mut pool = empty_pool();
        for base in ["a", "b", "c", "d"] {
            pool.assign(base, nothing_live, claim_all).unwrap();
        }
        pool.release("a");
        pool.release("b");
        let a_lives = || HashSet::from([1000]);
        assert_eq!(
            pool.assign("e", a_lives, claim_all),
            Ok(Assignment::New(1001))
        );
        let error = pool.assign("f", a_lives, claim_all).unwrap_err();
        assert!(
            error.contains("still have processes (e.g. uid 1000)"),
            "{error}"
        );
        assert_eq!(
            pool.assign("f", nothing_live, claim_all),
            Ok(Assignment::New(1000))
        );
    }

    #[test]
    fn a_uid_taken_back_goes_out_next_as_if_never_handed_out() {
        let mut pool = empty_pool();
        assert_eq!(
            pool.assign("a", nothing_live, claim_all),
            Ok(Assignment::New(1000))
        );
        pool.take_back("a", 1000);
        assert_eq!(pool.uid_of("a"), None);
        assert_eq!(pool.high_water(), 1000);
        assert_eq!(
            pool.assign("b", nothing_live, claim_all),
            Ok(Assignment::New(1000))
        );
    }

    #[test]
    fn a_restored_pool_keeps_assignments_and_treats_used_uids_as_released() {
        let assigned = [
            ("b".to_string(), 1001),
            ("x".to_string(), 5),
            ("y".to_string(), 1001),
        ];
        let (mut pool, dropped) = UidPool::new(RANGE, assigned, 1001);
        assert_eq!(dropped, [("x".to_string(), 5), ("y".to_string(), 1001)]);
        assert_eq!(pool.uid_of("b"), Some(1001));
        assert_eq!(pool.high_water(), 1002);
        // Fresh first, then 1000, which was handed out before the restart.
        assert_eq!(
            pool.assign("c", nothing_live, claim_all),
            Ok(Assignment::New(1002))
        );
        assert_eq!(
            pool.assign("d", nothing_live, claim_all),
            Ok(Assignment::New(1003))
        );
        assert_eq!(
            pool.assign("e", nothing_live, claim_all),
            Ok(Assignment::New(1000))
        );
    }

    #[test]
    fn a_wide_range_restored_high_up_costs_nothing_and_goes_lowest_first() {
        let range = UidRange {
            first: 1000,
            last: 4_000_000_000,
        };
        let adopted = [("old".to_string(), 3_999_999_999)];
        let (mut pool, _) = UidPool::new(range, adopted, 0);
        assert_eq!(
            pool.assign("a", nothing_live, claim_all),
            Ok(Assignment::New(4_000_000_000))
        );
        let busy = || HashSet::from([1000, 1001]);
        assert_eq!(pool.assign("b", busy, claim_all), Ok(Assignment::New(1002)));
        // The busy ones wait at the back; the rest keep coming lowest first.
        assert_eq!(
            pool.assign("c", nothing_live, claim_all),
            Ok(Assignment::New(1003))
        );
    }

    #[test]
    fn uids_another_daemon_claims_are_skipped_and_tried_again_once_released_ones_are_due() {
        let mut pool = empty_pool();
        let mut elsewhere = HashSet::from([1000, 1001]);
        let mut claim = |uid: u32| Ok(!elsewhere.contains(&uid));
        assert_eq!(
            pool.assign("a", nothing_live, &mut claim),
            Ok(Assignment::New(1002))
        );
        assert_eq!(
            pool.assign("b", nothing_live, &mut claim),
            Ok(Assignment::New(1003))
        );
        let error = pool.assign("c", nothing_live, &mut claim).unwrap_err();
        assert!(
            error.contains("2 are claimed by other sandboxd daemons"),
            "{error}"
        );
        // The other daemon released 1001.
        elsewhere.remove(&1001);
        let mut claim = |uid: u32| Ok(!elsewhere.contains(&uid));
        assert_eq!(
            pool.assign("c", nothing_live, &mut claim),
            Ok(Assignment::New(1001))
        );
    }

    #[test]
    fn a_failing_claim_ends_the_search_and_uses_up_no_uid() {
        let mut pool = empty_pool();
        let broken = |_: u32| Err("cannot claim: no such directory".to_string());
        assert_eq!(
            pool.assign("a", nothing_live, broken),
            Err("cannot claim: no such directory".to_string())
        );
        assert_eq!(pool.high_water(), 1000);
        assert_eq!(
            pool.assign("a", nothing_live, claim_all),
            Ok(Assignment::New(1000))
        );
    }

    #[test]
    fn an_adopted_uids_claim_is_renamed_unless_the_uid_was_given_back_first() {
        let dir = std::env::temp_dir().join(format!("sandboxd-adopted-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state/sandboxes")).unwrap();
        let claims = UidClaims::open(&dir.join("claims"), "blue", &dir.join("state")).unwrap();
        let uids = SandboxUids::new(empty_pool(), claims);
        let ledger = Ledger::open(&dir.join("state")).unwrap();
        let claimed_by = |uid: u32| {
            let text = std::fs::read_to_string(dir.join("claims").join(uid.to_string())).ok()?;
            text.lines()
                .find_map(|line| line.strip_prefix("sandbox "))
                .map(str::to_string)
        };
        let kept = SandboxKey::new(sandboxd_protocol::Scope::Session, "kept");
        let uid = uids.assign_prepared("prepared-0", 0).unwrap().unwrap();
        assert_eq!(uids.adopt_prepared("prepared-0", &kept), Some(uid));
        assert_eq!(claimed_by(uid).as_deref(), Some("prepared-0"));
        uids.claim_adopted(uid, &kept);
        assert_eq!(claimed_by(uid), Some(kept.base_name.clone()));

        // A start that failed gave its uid back, claim and all, before the
        // rename ran: the rename brings no claim back.
        let failed = SandboxKey::new(sandboxd_protocol::Scope::Session, "failed");
        let uid = uids.assign_prepared("prepared-1", 0).unwrap().unwrap();
        assert_eq!(uids.adopt_prepared("prepared-1", &failed), Some(uid));
        let never_made = dir.join("state/sandboxes").join(&failed.base_name);
        uids.settle_new(&failed, uid, false, &never_made, &ledger);
        assert_eq!(claimed_by(uid), None);
        uids.claim_adopted(uid, &failed);
        assert_eq!(claimed_by(uid), None);
        assert_eq!(uids.uid_of(&failed), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_scan_sees_this_process() {
        let me = nix::unistd::getuid().as_raw();
        let range = UidRange {
            first: me,
            last: me,
        };
        assert_eq!(live_uids_in(range), HashSet::from([me]));
    }
}
