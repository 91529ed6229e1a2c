//! The process tier's answer to "is this connecting process one of my
//! sandboxes?" (see [`crate::peer_origin`]): by its cgroup, else by its
//! session or process group against the running runners, which are
//! session leaders. A sandbox that took a prepared one has that one's
//! cgroup name (see `CgroupTree::adopt`): the name found is mapped back.
//!
//! A runner is cloned into its cgroup and may connect before its start is
//! recorded (seen under load: its connection accepted 3 ms before "runner
//! started", and its deprovision of its own sandbox went through). So a
//! cgroup counts as a sandbox's when it is one of this daemon's sandboxes'
//! directories, recorded or not. Without cgroups (the process-group
//! fallback), a peer whose session a child of the daemon leads is taken
//! for a runner being started (see [`crate::peer_origin`]), named in the
//! log by the workspace it was started in.

use std::collections::HashMap;

use super::Inner;
use crate::peer_origin::{self, PeerOrigin};

impl Inner {
    pub(super) fn origin_of_peer(&self, pid: i32) -> PeerOrigin {
        let (names, runners): (HashMap<String, String>, HashMap<i32, String>) = {
            let records = self.records();
            let running = records
                .iter()
                .filter_map(|(key, record)| Some((key, record.running.as_ref()?)));
            let mut names = HashMap::new();
            let tree = self.containment.tree();
            let mut runners = HashMap::new();
            for (key, runner) in running {
                let cgroup = tree.map_or_else(
                    || key.base_name.clone(),
                    |tree| tree.cgroup_name(&key.base_name),
                );
                names.insert(cgroup, key.base_name.clone());
                runners.insert(runner.pid as i32, key.base_name.clone());
                runners.insert(runner.leader as i32, key.base_name.clone());
            }
            (names, runners)
        };
        let sandboxes_dir = self.containment.tree().map(|tree| &tree.sandboxes().v2);
        // Under this daemon's own `sandboxes` directory only: another
        // daemon's sandboxes have names like ours (`prepared-0`).
        let is_sandbox = |dir: &std::path::Path, name: &str| match sandboxes_dir {
            Some(own) => {
                own.ends_with(dir) && (names.contains_key(name) || own.join(name).is_dir())
            }
            None => names.contains_key(name),
        };
        let starting =
            |leader: i32| peer_origin::workspace_of(leader, &self.settings.sandboxes_dir);
        match peer_origin::origin_of(pid, is_sandbox, &runners, starting) {
            PeerOrigin::Sandbox { base_name, how } => PeerOrigin::Sandbox {
                base_name: names
                    .get(&base_name)
                    .cloned()
                    .or_else(|| self.containment.tree()?.adopter_of(&base_name))
                    .unwrap_or(base_name),
                how,
            },
            other => other,
        }
    }
}
