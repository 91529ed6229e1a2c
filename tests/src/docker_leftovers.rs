//! What a docker-tier test daemon leaves on the host: its instance's
//! network and the egress table on that network's bridge. The daemons of one instance share both, and the last of them
//! to stop cleanly removes them (its holder lock, see the daemon's
//! `holders` module, tells it is the last). The harness fails a test whose
//! daemon stopped cleanly yet left them with no reason logged, and
//! removes what a killed daemon, or one that kept them for containers the
//! test removed since, left once no daemon holds them.

use std::fs::File;
use std::path::Path;
use std::process::Command;

use nix::fcntl::{Flock, FlockArg};

use crate::docker_image::docker;

/// Where daemons hold their host-wide objects.
const HOLDERS: &str = "/run/stigmer/holders";

/// Why a clean stop may keep the network and table: the lines the
/// daemon logs then.
const KEPT_FOR_A_REASON: [&str; 3] = [
    "another live sandboxd of this instance holds them",
    "for the containers left running",
    "cannot list the containers",
];

/// The instance's network and table, as one test daemon knew them.
pub struct Leftovers {
    pub network: String,
    pub table: Option<String>,
}

impl Leftovers {
    /// From the daemon's configuration and log.
    pub fn of(config_text: &str, log: &str) -> Leftovers {
        let instance = config_text.lines().find_map(|line| {
            let value = line.trim().strip_prefix("instance")?.trim();
            let value = value.strip_prefix('=')?.trim().trim_matches('"');
            (value != "default").then(|| value.to_string())
        });
        let network = match instance {
            Some(instance) => format!("{instance}-sandboxd-egress"),
            None => "sandboxd-egress".to_string(),
        };
        let table = log
            .lines()
            .filter(|line| line.contains("every packet from bridge"))
            .find_map(|line| line.split("nftables table inet ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_string);
        Leftovers { network, table }
    }

    /// A network the harness found (one a test's containers joined), and
    /// the table on its bridge, when one is loaded.
    pub fn of_network(network: &str) -> Leftovers {
        let bridge = docker(&[
            "network",
            "inspect",
            network,
            "--format",
            "{{index .Options \"com.docker.network.bridge.name\"}}",
        ]);
        let bridge = String::from_utf8_lossy(&bridge.stdout).trim().to_string();
        let table = (!bridge.is_empty())
            .then(|| table_on_bridge(&bridge))
            .flatten();
        Leftovers {
            network: network.to_string(),
            table,
        }
    }

    /// What is still there of them.
    pub fn present(&self) -> Vec<String> {
        let mut left = Vec::new();
        if network_exists(&self.network) {
            left.push(format!("network {}", self.network));
        }
        if let Some(table) = self.table.as_deref().filter(|table| table_exists(table)) {
            left.push(format!("table inet {table}"));
        }
        left
    }

    /// A clean stop that left them and logged no reason to: the complaint.
    ///
    /// Tests run side by side, and the daemons of one instance share the
    /// network and table: another test's daemon may make them again right
    /// after this one removed them (and may be killed on purpose, leaving
    /// them). So what this daemon's log says it removed is not its
    /// leftover, and the lock is looked at *after* what is there (a daemon
    /// takes its lock before it makes either).
    pub fn complaint_after_clean_stop(&self, log: &str) -> Option<String> {
        if KEPT_FOR_A_REASON.iter().any(|reason| log.contains(reason)) {
            return None;
        }
        let left: Vec<String> = self
            .present()
            .into_iter()
            .filter(|item| !removal_logged(log, item))
            .collect();
        (!left.is_empty() && !self.held()).then(|| {
            format!("sandboxd stopped cleanly as the last of its instance but left {left:?}")
        })
    }

    /// Removes them once no daemon holds them and no container uses the
    /// network (the engine refuses to remove one in use). The holder files
    /// are locked exclusively throughout and unlinked only under that lock,
    /// as the daemon does (see its `holders` module): a daemon that starts
    /// meanwhile either waits for the lock or finds its file unlinked and
    /// takes a new one, so what it makes is never removed here.
    pub fn remove_when_unheld(&self) {
        let names: Vec<&str> = [Some(self.network.as_str()), self.table.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        let mut locks = Vec::new();
        for name in &names {
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(Path::new(HOLDERS).join(name));
            let Ok(file) = opened else {
                return;
            };
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => locks.push(lock),
                Err(_) => return,
            }
        }
        if network_exists(&self.network) {
            let removed = docker(&["network", "rm", &self.network]).status.success();
            if !removed {
                return;
            }
        }
        if let Some(table) = self.table.as_deref().filter(|table| table_exists(table)) {
            let _ = Command::new("nft")
                .args(["delete", "table", "inet", table])
                .status();
        }
        for name in &names {
            let _ = std::fs::remove_file(Path::new(HOLDERS).join(name));
        }
        drop(locks);
    }

    /// True while a live daemon holds the network's name (a lock of our
    /// own, exclusive and non-blocking, fails).
    fn held(&self) -> bool {
        let Ok(file) = File::open(Path::new(HOLDERS).join(&self.network)) else {
            return false;
        };
        Flock::lock(file, FlockArg::LockExclusiveNonblock).is_err()
    }
}

/// Whether `log` records the removal of `item` (as [`Leftovers::present`]
/// names it: `network NAME` or `table inet NAME`).
fn removal_logged(log: &str, item: &str) -> bool {
    log.lines().any(|line| {
        if let Some(network) = item.strip_prefix("network ") {
            line.contains("removed the sandboxes' network")
                && line
                    .split_whitespace()
                    .any(|word| word == format!("network={network}"))
        } else if let Some(table) = item.strip_prefix("table ") {
            line.contains("egress rules removed") && line.contains(&format!("table={table}"))
        } else {
            false
        }
    })
}

/// The `inet sandboxd_*` table whose rules match `bridge`.
fn table_on_bridge(bridge: &str) -> Option<String> {
    let tables = Command::new("nft").args(["list", "tables"]).output().ok()?;
    let wanted = format!("iifname \"{bridge}\"");
    String::from_utf8_lossy(&tables.stdout)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("table inet "))
        .filter(|name| name.starts_with("sandboxd_"))
        .find(|name| {
            Command::new("nft")
                .args(["list", "table", "inet", name])
                .output()
                .is_ok_and(|listing| String::from_utf8_lossy(&listing.stdout).contains(&wanted))
        })
        .map(str::to_string)
}

fn network_exists(network: &str) -> bool {
    docker(&["network", "inspect", network]).status.success()
}

fn table_exists(table: &str) -> bool {
    Command::new("nft")
        .args(["list", "table", "inet", table])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// A test that made a daemon's network itself holds its name as one more
/// daemon of the instance would, so that no daemon's clean stop removes
/// it under the test. Dropped, it removes the holder file when it is the
/// last holder (as a daemon's last stop does).
pub struct HeldNetwork {
    path: std::path::PathBuf,
    lock: Flock<File>,
}

/// Holds `network`'s name shared (waiting, bounded, while a sweep or a
/// stopping daemon has it exclusively).
pub fn hold_network(network: &str) -> HeldNetwork {
    std::fs::create_dir_all(HOLDERS).expect("create the holders directory");
    let path = Path::new(HOLDERS).join(network);
    let mut lock = None;
    crate::wait_until(std::time::Duration::from_secs(20), || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .expect("open the holder file");
        lock = Flock::lock(file, FlockArg::LockSharedNonblock).ok();
        lock.is_some()
    });
    HeldNetwork {
        lock: lock.expect("the network's holder file stayed locked exclusively"),
        path,
    }
}

impl Drop for HeldNetwork {
    fn drop(&mut self) {
        if self.lock.relock(FlockArg::LockExclusiveNonblock).is_ok() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::removal_logged;

    /// Lines as a docker daemon's clean stop logs them.
    const LOG: &str = "\
2026-12-02T07:15:48.086355Z  INFO sandboxd::egress: egress rules removed table=inet sandboxd_0134f4ead361
2026-12-02T07:15:48.280381Z  INFO sandboxd::drivers::docker::egress_network: removed the sandboxes' network: no sandbox of this instance is left network=sandboxd-egress
";

    #[test]
    fn a_removal_the_daemon_logged_is_not_its_leftover() {
        assert!(removal_logged(LOG, "table inet sandboxd_0134f4ead361"));
        assert!(removal_logged(LOG, "network sandboxd-egress"));
        assert!(!removal_logged(LOG, "table inet sandboxd_c5ba8f37e81b"));
        assert!(!removal_logged(LOG, "network blue-sandboxd-egress"));
        assert!(!removal_logged("", "network sandboxd-egress"));
    }
}
