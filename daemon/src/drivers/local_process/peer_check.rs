//! The process tier's answer to "is this connecting process one of my
//! sandboxes?" (see [`crate::peer_origin`]): by its cgroup, else by its
//! session or process group against the running runners, which are
//! session leaders.

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
        peer_origin::origin_of(pid, |name| names.contains(name), &runners)
    }
}
