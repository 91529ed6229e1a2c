//! A sandbox's facts as `describe`, `list` and `status` give them: what
//! keeps it apart, the paths its view adds, its record's state.

use sandboxd_protocol::SandboxInfo;

use super::record::Record;
use super::{isolation, Inner};
use crate::sandbox_key::SandboxKey;

impl Inner {
    /// What keeps every sandbox started now apart (the same for each).
    pub(super) fn isolation_features(&self) -> Vec<sandboxd_protocol::IsolationFeature> {
        let mut features = isolation::features(&isolation::Facts {
            identity: &self.settings.identity,
            containment: &self.containment,
            egress: &self.egress,
            uid_claims: self.uids.as_ref().map(|uids| uids.claims_dir()),
            disk_limit: &self.disk_limit,
            filters: &self.settings.filters,
            mode: self.isolation_mode,
            view: self.settings.view.as_deref(),
            view_problem: self.view_problem.as_deref(),
            init_binary: &self.settings.init_binary,
        });
        self.settings.launcher.adjust(&mut features);
        features
    }

    /// Each path the view adds (see `ViewSettings::entries`), the
    /// workspace `workspace` on the host; none without a view.
    pub(super) fn view_entries(
        &self,
        workspace: &std::path::Path,
    ) -> Vec<sandboxd_protocol::ViewEntry> {
        let Some(view) = &self.settings.view else {
            return Vec::new();
        };
        let program = self.settings.resolve_command().ok();
        view.settings.entries(program.as_deref(), workspace)
    }

    /// What kept `record`'s runner apart, as it was started; for a stopped
    /// one, what its next runner will get.
    pub(super) fn isolation_of(&self, record: &Record) -> Vec<sandboxd_protocol::IsolationFeature> {
        match &record.running {
            Some(running) => running.isolation.to_vec(),
            None => self.isolation.to_vec(),
        }
    }

    /// `key`'s facts as `list` gives them: without its isolation features,
    /// as the protocol says (the same for every sandbox of a daemon, and
    /// the largest part of a sandbox's facts: a list of 10,000 that cloned
    /// them held about 30 MB while it was built and sent). `describe` adds
    /// them ([`Inner::isolation_of`]).
    pub(super) fn info(&self, key: &SandboxKey, record: Option<&Record>) -> SandboxInfo {
        let Some(record) = record else {
            return SandboxInfo::absent(key.scope, &key.id, 0, None);
        };
        let running = record.running.as_ref();
        SandboxInfo {
            name: key.base_name.clone(),
            scope: key.scope,
            id: key.id.clone(),
            state: record.state(),
            pid: running.map(|running| running.pid),
            container_id: None,
            image: None,
            generation: record.generation,
            started_at_unix_ms: running.map(|running| running.started_at_unix_ms),
            restarts: record.generation.saturating_sub(1),
            last_exit: record.last_exit.as_deref().copied(),
            task_queue: record.task_queue.clone(),
            caller_class: record.caller_class.clone(),
            egress: None,
            cluster: None,
            isolation: Vec::new(),
            uid: record.uid.clone(),
            usage: None,
            paused_since_unix_ms: running.and_then(|running| running.life.paused_since_unix_ms()),
            view: Vec::new(),
        }
    }
}
