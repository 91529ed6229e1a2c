//! Tables of daemons that are gone, and whose cgroup is gone with them.
//!
//! A daemon that does not stop cleanly keeps its table in force (see the
//! module above), so a restart has no window without rules. When its
//! sandboxes cgroup is removed after all (its state directory wiped, a test
//! daemon cleaned up, another `cgroup_root`), the table matches nothing any
//! more — nft resolved the path to a cgroup id at load, and no cgroup will
//! have that id again — but every packet of the host still walks it. nft
//! lists such a match by its bare id instead of the path: that is how an
//! orphan is told from a live table, and only those are removed. Tables that
//! match a bridge (the docker tier's) are never touched here.

use super::nft::Nft;

/// The prefix of every table a sandboxd loads.
const PREFIX: &str = "sandboxd_";

/// Removes every `inet sandboxd_*` table whose cgroup match no longer
/// names an existing cgroup. Returns how many went. Blocking.
pub fn remove_orphans(nft: &Nft) -> usize {
    let Ok(tables) = nft.list_tables() else {
        return 0;
    };
    let mut removed = 0;
    for name in sandboxd_tables(&tables) {
        let spec = format!("inet {name}");
        let Ok(listing) = nft.list_table(&spec) else {
            continue;
        };
        if !matches_a_vanished_cgroup(&listing) {
            continue;
        }
        match nft.delete_table(&spec) {
            Ok(()) => {
                // Whose it was is not recorded in the table: its name (a
                // hash of the other daemon's cgroup) and that its cgroup is
                // gone are what is known.
                tracing::info!(table = %spec, "removed another daemon's egress table: the sandboxes cgroup it matched no longer exists");
                removed += 1
            }
            Err(error) => {
                tracing::warn!(table = %spec, "cannot remove an orphaned egress table: {error}")
            }
        }
    }
    if removed > 0 {
        tracing::info!(
            tables = removed,
            "removed egress tables whose sandboxes cgroup is gone"
        );
    }
    removed
}

/// The `inet sandboxd_*` table names in `nft list tables` output.
fn sandboxd_tables(listing: &str) -> Vec<&str> {
    listing
        .lines()
        .filter_map(|line| line.trim().strip_prefix("table inet "))
        .filter(|name| name.starts_with(PREFIX))
        .collect()
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
    }
}
