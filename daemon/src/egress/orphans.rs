//! Tables of daemons that are gone.
//!
//! A daemon that does not stop cleanly keeps its table in force (see the
//! module above), so a restart has no window without rules, and runners
//! it left behind stay held to it. Another daemon removes such a table
//! only when its daemon provably is gone: the table's holder lock (see
//! [`crate::holders`]) is free. Even then the table stays while what it
//! holds is still there: a sandboxes cgroup that still has processes (a
//! crashed daemon's runners), or a bridge interface that still exists (a
//! docker network's containers outlive their daemon; the docker tier's
//! own sweep removes that network with its table once no container uses
//! it). A table with no holder file at all was loaded by a sandboxd from
//! before holder locks: it goes only when its cgroup is gone (nft then
//! lists the match by a bare cgroup id instead of the path), as before.
//!
//! The sweep runs after the daemon serves, on a thread of its own, with
//! every nft call bounded ([`SWEEP_CALL_TIMEOUT`]): it never delays start.
//! Each removal is logged with whose table it was and why.

use std::path::Path;
use std::time::Duration;

use crate::holders::{self, Probe};

use super::nft::Nft;

/// The prefix of every table a sandboxd loads.
const PREFIX: &str = "sandboxd_";

/// The bound on each nft call of the sweep.
pub const SWEEP_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What one sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    pub removed: Vec<String>,
    pub kept: usize,
}

/// Removes every `inet sandboxd_*` table but `own` whose daemon is gone
/// and which holds nothing any more. Blocking.
pub fn sweep(own: Option<&str>) -> Swept {
    let mut swept = Swept::default();
    let nft = match Nft::find() {
        Ok(nft) => nft.bounded(SWEEP_CALL_TIMEOUT),
        Err(_) => return swept,
    };
    let tables = match nft.list_tables() {
        Ok(tables) => tables,
        Err(error) => {
            tracing::warn!("the sweep of other daemons' egress tables cannot list them: {error}");
            return swept;
        }
    };
    for name in sandboxd_tables(&tables) {
        if Some(name) == own {
            continue;
        }
        match sweep_one(&nft, name) {
            true => swept.removed.push(name.to_string()),
            false => swept.kept += 1,
        }
    }
    forget_stale_files(&tables);
    tracing::info!(
        removed = swept.removed.len(),
        kept = swept.kept,
        "swept other daemons' egress tables"
    );
    swept
}

/// Removes the holder files of tables that are gone (removed by hand, or
/// by a stop that could not remove its file) and that no daemon holds.
fn forget_stale_files(tables: &str) {
    let listed = sandboxd_tables(tables);
    let Ok(entries) = std::fs::read_dir(holders::DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|name| name.starts_with(PREFIX)) else {
            continue;
        };
        if listed.contains(&name) {
            continue;
        }
        if let Probe::Free(gone) = holders::probe(name) {
            tracing::debug!(file = %gone.path().display(), "removed the holder file of a table that is gone");
            gone.forget();
        }
    }
}

/// One table: true when it was removed.
fn sweep_one(nft: &Nft, name: &str) -> bool {
    let spec = format!("inet {name}");
    match holders::probe(name) {
        Probe::Held(about) => {
            tracing::debug!(table = %spec, "kept: a live sandboxd holds it ({about})");
            false
        }
        Probe::BeingRemoved(about) => {
            tracing::debug!(table = %spec, "left alone: another sandboxd is removing it (it was held by {about})");
            false
        }
        Probe::NoFile => {
            let Ok(listing) = nft.list_table(&spec) else {
                return false;
            };
            if !matches_a_vanished_cgroup(&listing) {
                return false;
            }
            remove(
                nft,
                &spec,
                "it has no holder file (a sandboxd from before holder locks loaded it) and the sandboxes cgroup it matched no longer exists",
            )
        }
        Probe::Free(gone) => {
            let Ok(listing) = nft.list_table(&spec) else {
                return false;
            };
            if let Some(still) = still_holds(&listing) {
                tracing::info!(table = %spec, holder = gone.about(), "kept a gone daemon's egress table: {still}");
                return false;
            }
            let why = format!(
                "its holder lock {} was free, so the sandboxd that loaded it ({}) is gone, and nothing it matched is left",
                gone.path().display(),
                gone.about()
            );
            let removed = remove(nft, &spec, &why);
            if removed {
                gone.forget();
            }
            removed
        }
    }
}

fn remove(nft: &Nft, spec: &str, why: &str) -> bool {
    match nft.delete_table(spec) {
        Ok(()) => {
            tracing::info!(table = %spec, "removed another daemon's egress table: {why}");
            true
        }
        Err(error) => {
            tracing::warn!(table = %spec, "cannot remove another daemon's egress table ({why}): {error}");
            false
        }
    }
}

/// What the table still holds, when something: a sandboxes cgroup with
/// processes in it, or a bridge interface that exists.
fn still_holds(listing: &str) -> Option<String> {
    if let Some(path) = matched_cgroup_path(listing) {
        let dir = Path::new("/sys/fs/cgroup").join(path);
        if populated(&dir) {
            return Some(format!(
                "processes are left in its sandboxes cgroup {}",
                dir.display()
            ));
        }
    }
    matched_bridge(listing)
        .filter(|bridge| Path::new("/sys/class/net").join(bridge).exists())
        .map(|bridge| format!("its bridge {bridge} still exists (a docker network's)"))
}

/// True when the cgroup exists and has a process in it or below.
fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .is_ok_and(|events| events.lines().any(|line| line.trim() == "populated 1"))
}

/// The `inet sandboxd_*` table names in `nft list tables` output.
fn sandboxd_tables(listing: &str) -> Vec<&str> {
    listing
        .lines()
        .filter_map(|line| line.trim().strip_prefix("table inet "))
        .filter(|name| name.starts_with(PREFIX))
        .collect()
}

/// The quoted cgroup path of the table's match (`socket cgroupv2 level 2
/// "unified/x/sandboxes"`), relative to `/sys/fs/cgroup`.
fn matched_cgroup_path(listing: &str) -> Option<&str> {
    listing.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("socket cgroupv2 level ")?;
        let (_level, target) = rest.split_once(' ')?;
        let quoted = target.strip_prefix('"')?;
        quoted.split_once('"').map(|(path, _)| path)
    })
}

/// The bridge of the table's match (`iifname "sbxd-egress" jump …`).
fn matched_bridge(listing: &str) -> Option<&str> {
    listing.lines().find_map(|line| {
        let quoted = line.trim().strip_prefix("iifname \"")?;
        quoted.split_once('"').map(|(bridge, _)| bridge)
    })
}

/// True when the table's cgroup match shows a bare id (`socket cgroupv2
/// level 2 47791`) rather than a quoted path: its cgroup no longer exists.
fn matches_a_vanished_cgroup(listing: &str) -> bool {
    listing.lines().any(|line| {
        let Some(rest) = line.trim().strip_prefix("socket cgroupv2 level ") else {
            return false;
        };
        let mut words = rest.split_whitespace();
        let _level = words.next();
        words
            .next()
            .is_some_and(|target| target.bytes().all(|byte| byte.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sandboxd_tables_are_considered() {
        let listing = "table inet sandboxd_0123456789ab\ntable ip filter\ntable inet other\n";
        assert_eq!(sandboxd_tables(listing), ["sandboxd_0123456789ab"]);
    }

    #[test]
    fn a_bare_cgroup_id_is_an_orphan_and_a_path_or_a_bridge_is_not() {
        let orphan = "chain output {\n\t\tsocket cgroupv2 level 2 47791 jump sandboxes\n}";
        let live = "chain output {\n\t\tsocket cgroupv2 level 2 \"unified/sandboxd-x/sandboxes\" jump sandboxes\n}";
        let bridge = "chain forward {\n\t\tiifname \"sbxd-egress\" jump sandboxes\n}";
        assert!(matches_a_vanished_cgroup(orphan));
        assert!(!matches_a_vanished_cgroup(live));
        assert!(!matches_a_vanished_cgroup(bridge));
        assert_eq!(
            matched_cgroup_path(live),
            Some("unified/sandboxd-x/sandboxes")
        );
        assert_eq!(matched_cgroup_path(orphan), None);
        assert_eq!(matched_bridge(bridge), Some("sbxd-egress"));
        assert_eq!(matched_bridge(live), None);
    }

    #[test]
    fn a_table_whose_cgroup_and_bridge_are_gone_holds_nothing() {
        let gone = "socket cgroupv2 level 2 \"unified/sandboxd-no-such-cgroup/sandboxes\" jump sandboxes\niifname \"sbxd-nosuch0\" jump host";
        assert_eq!(still_holds(gone), None);
        let up = "iifname \"lo\" jump sandboxes";
        assert!(still_holds(up).is_some_and(|why| why.contains("bridge lo")));
    }
}
