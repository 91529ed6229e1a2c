//! The process tier's answer to "is this connecting process one of my
//! sandboxes?" (see [`crate::peer_origin`]): by its cgroup, else by its
//! session or process group against the running runners, which are
//! session leaders.
//!
//! A runner is cloned into its cgroup and may connect before its start is
//! recorded (seen under load: its connection accepted 3 ms before "runner
//! started", and its deprovision of its own sandbox went through). So a
//! cgroup counts as a sandbox's when it is one of this daemon's sandboxes'
//! directories, recorded or not. Without cgroups (the process-group
//! fallback) only recorded runners are known, and that window stays.

use std::collections::{HashMap, HashSet};

use super::Inner;
use crate::peer_origin::{self, PeerOrigin};

impl Inner {
    pub(super) fn origin_of_peer(&self, pid: i32) -> PeerOrigin {
        let (names, runners): (HashSet<String>, HashMap<i32, String>) = {
            let records = self.records();
            let running = records
                .iter()
                .filter_map(|(key, record)| Some((key, record.running.as_ref()?)));
            let mut names = HashSet::new();
            let mut runners = HashMap::new();
            for (key, runner) in running {
                names.insert(key.base_name.clone());
                runners.insert(runner.pid as i32, key.base_name.clone());
                runners.insert(runner.leader as i32, key.base_name.clone());
            }
            (names, runners)
        };
        let sandboxes_dir = self.containment.tree().map(|tree| &tree.sandboxes().v2);
        let is_sandbox = |name: &str| {
            names.contains(name) || sandboxes_dir.is_some_and(|dir| dir.join(name).is_dir())
        };
        peer_origin::origin_of(pid, is_sandbox, &runners)
    }
}
