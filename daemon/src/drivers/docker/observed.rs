//! What the engine says about a sandbox's container, read into our terms.
//!
//! Everything the driver decides comes from here, fresh from an inspect:
//! there is no cached belief to go stale. A container counts as this
//! sandbox's only when it carries our labels with this sandbox's scope and
//! id; one that merely has the name is someone else's and is never touched.

use std::collections::HashMap;

use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum};
use sandboxd_protocol::naming::{
    LABEL_MANAGED_BY, LABEL_SANDBOX_ID, LABEL_SCOPE, MANAGED_BY_VALUE,
};
use sandboxd_protocol::{ExitInfo, ProbeState, SandboxInfo};

use super::spec::{
    LABEL_CALLER_CLASS, LABEL_GENERATION, LABEL_TASK_QUEUE, LABEL_TOKEN_SHA256, LABEL_UID,
};
use crate::instance::Instance;
use crate::sandbox_key::SandboxKey;

/// The container's lifecycle phase, as the ensure state machine cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Running,
    Paused,
    /// `created` (never started) or `exited`: a start brings it back.
    Stopped,
    /// Between two runs of a restart (an operator's `docker restart`).
    Restarting,
    /// Half-removed or unrecoverable: only removal helps.
    Dead,
    /// The engine is removing it right now.
    Removing,
}

impl Phase {
    fn from_status(status: Option<ContainerStateStatusEnum>) -> Phase {
        match status {
            Some(ContainerStateStatusEnum::RUNNING) => Phase::Running,
            Some(ContainerStateStatusEnum::PAUSED) => Phase::Paused,
            Some(ContainerStateStatusEnum::CREATED | ContainerStateStatusEnum::EXITED) => {
                Phase::Stopped
            }
            Some(ContainerStateStatusEnum::RESTARTING) => Phase::Restarting,
            // Docker 28's "stopping" is still a live runner, on its way to exited.
            Some(ContainerStateStatusEnum::STOPPING) => Phase::Running,
            Some(ContainerStateStatusEnum::REMOVING) => Phase::Removing,
            Some(ContainerStateStatusEnum::DEAD | ContainerStateStatusEnum::EMPTY) | None => {
                Phase::Dead
            }
        }
    }

    /// Probe's answer: paused, created and exited are stopped; dead is absent.
    pub fn probe_state(self) -> ProbeState {
        match self {
            Phase::Running => ProbeState::Running,
            Phase::Paused | Phase::Stopped | Phase::Restarting => ProbeState::Stopped,
            Phase::Dead | Phase::Removing => ProbeState::Absent,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Running => "running",
            Phase::Paused => "paused",
            Phase::Stopped => "stopped",
            Phase::Restarting => "restarting",
            Phase::Dead => "dead",
            Phase::Removing => "removing",
        }
    }
}

/// One inspect of the name a sandbox's container would have.
// Held for one call and never stored in bulk: a Box would add an
// allocation to every inspect for no saving.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Lookup {
    Absent,
    /// A container by that name without our labels for this sandbox.
    Foreign {
        id: String,
    },
    Ours(Observed),
}

/// A container of this sandbox, as inspected.
#[derive(Debug, Clone)]
pub struct Observed {
    pub id: String,
    pub phase: Phase,
    pub image: String,
    /// The user its runner runs as (`Config.User`; empty: the image's).
    pub user: String,
    /// Made with the daemon's seccomp profile as it is now (among
    /// `HostConfig.SecurityOpt`); false for one an earlier daemon made.
    pub own_profile: bool,
    /// The runtime it was made with (`HostConfig.Runtime`, the engine's
    /// default filled in by the engine); `None` when not said.
    pub runtime: Option<String>,
    labels: HashMap<String, String>,
    pub created_at_unix_ms: Option<u64>,
    pub started_at_unix_ms: Option<u64>,
    pub finished_at_unix_ms: Option<u64>,
    pub exit_code: Option<i64>,
    /// The engine's `State.OOMKilled`. False is not proof: containerd's
    /// runc shim (before containerd#12405) watches the cgroup for OOM kills
    /// only once the runner has started, so one killed in its first
    /// milliseconds is reported as a plain exit 137.
    pub oom_killed: bool,
    /// The runner's init as the host sees it (`State.Pid`; 0 when not
    /// running): its `/proc/PID/cgroup` says where its cgroup is.
    pub pid: Option<u32>,
    /// The engine's log file of the container (`LogPath`; the json-file
    /// and local drivers have one, others none).
    pub log_path: Option<String>,
}

/// True when `labels` mark a container of this sandbox.
/// (and of this daemon's instance: another daemon's never matches).
pub fn labels_match(key: &SandboxKey, labels: &HashMap<String, String>) -> bool {
    labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
        && labels.get(LABEL_SCOPE).map(String::as_str) == Some(key.scope.as_str())
        && labels.get(LABEL_SANDBOX_ID) == Some(&key.id)
        && Instance::current().owns(labels)
}

/// The sandbox a listed container belongs to: its labels name the scope
/// and id, and its name must be the base name they derive (a container
/// whose labels were copied onto another name is not one of ours).
pub fn key_of(labels: &HashMap<String, String>, names: &[String]) -> Option<SandboxKey> {
    let instance = Instance::current();
    if labels.get(LABEL_MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_VALUE)
        || !instance.owns(labels)
    {
        return None;
    }
    let scope = labels.get(LABEL_SCOPE)?.parse().ok()?;
    let key = SandboxKey::new(scope, labels.get(LABEL_SANDBOX_ID)?.clone());
    let object_name = instance.object_name(&key.base_name);
    let named = names
        .iter()
        .any(|name| name.trim_start_matches('/') == object_name);
    named.then_some(key)
}

impl Lookup {
    pub fn from_inspect(key: &SandboxKey, inspect: ContainerInspectResponse) -> Lookup {
        let id = inspect.id.unwrap_or_default();
        let config = inspect.config.unwrap_or_default();
        let labels = config.labels.unwrap_or_default();
        if !labels_match(key, &labels) {
            return Lookup::Foreign { id };
        }
        let state = inspect.state.unwrap_or_default();
        let finished_at_unix_ms = state.finished_at.as_deref().and_then(unix_ms);
        let host = inspect.host_config.unwrap_or_default();
        Lookup::Ours(Observed {
            id,
            phase: Phase::from_status(state.status),
            image: config.image.unwrap_or_default(),
            user: config.user.unwrap_or_default(),
            own_profile: host
                .security_opt
                .unwrap_or_default()
                .iter()
                .any(|option| option == super::seccomp_profile::security_option()),
            runtime: host.runtime.filter(|runtime| !runtime.is_empty()),
            labels,
            created_at_unix_ms: inspect.created.as_deref().and_then(unix_ms),
            started_at_unix_ms: state.started_at.as_deref().and_then(unix_ms),
            finished_at_unix_ms,
            // The engine reports 0 for a container that never ran; only a finish gives a code meaning.
            exit_code: finished_at_unix_ms.and(state.exit_code),
            oom_killed: state.oom_killed.unwrap_or(false),
            pid: state
                .pid
                .and_then(|pid| u32::try_from(pid).ok())
                .filter(|&pid| pid > 0),
            log_path: inspect.log_path.filter(|path| !path.is_empty()),
        })
    }

    pub fn probe_state(&self) -> ProbeState {
        match self {
            Lookup::Ours(observed) => observed.phase.probe_state(),
            Lookup::Absent | Lookup::Foreign { .. } => ProbeState::Absent,
        }
    }
}

impl Observed {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels.get(name).map(String::as_str)
    }

    /// The generation the container was created at (0 if unlabelled).
    pub fn created_generation(&self) -> u64 {
        self.label(LABEL_GENERATION)
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    }

    pub fn token_digest(&self) -> Option<&str> {
        self.label(LABEL_TOKEN_SHA256)
    }

    /// The incarnation's uid (empty for a container made before uids).
    pub fn uid(&self) -> &str {
        self.label(LABEL_UID).unwrap_or_default()
    }

    pub fn task_queue(&self) -> &str {
        self.label(LABEL_TASK_QUEUE).unwrap_or_default()
    }

    pub fn caller_class(&self) -> &str {
        self.label(LABEL_CALLER_CLASS).unwrap_or_default()
    }

    /// How the runner last ended, when it has ended at least once.
    pub fn last_exit(&self) -> Option<ExitInfo> {
        let at_unix_ms = self.finished_at_unix_ms?;
        Some(exit_info(
            self.exit_code.unwrap_or_default(),
            at_unix_ms,
            self.oom_killed,
        ))
    }

    /// describe's facts. `generation` is the sandbox's, not only the
    /// container's. The name is the container's own (`<instance>-<base>`
    /// for a named instance), so `docker inspect NAME` finds it.
    pub fn info(&self, key: &SandboxKey, generation: u64) -> SandboxInfo {
        let state = self.phase.probe_state();
        SandboxInfo {
            name: crate::instance::Instance::current().object_name(&key.base_name),
            scope: key.scope,
            id: key.id.clone(),
            state,
            pid: None,
            container_id: Some(self.id.clone()),
            image: Some(self.image.clone()).filter(|image| !image.is_empty()),
            generation,
            started_at_unix_ms: if state == ProbeState::Running {
                self.started_at_unix_ms
            } else {
                None
            },
            restarts: generation.saturating_sub(1),
            last_exit: self.last_exit(),
            task_queue: self.task_queue().to_string(),
            caller_class: self.caller_class().to_string(),
            egress: None,
            cluster: None,
            isolation: Vec::new(),
            uid: self.uid().to_string(),
            usage: None,
            paused_since_unix_ms: None,
            view: Vec::new(),
        }
    }
}

/// An exit code as the engine reports it: above 128 (up to 128 + the last
/// real-time signal) means the runner's init died of signal `code - 128`.
pub fn exit_info(code: i64, at_unix_ms: u64, oom_killed: bool) -> ExitInfo {
    let code = i32::try_from(code).unwrap_or(i32::MAX);
    let signal = (129..=128 + 64).contains(&code).then(|| code - 128);
    ExitInfo::from_facts(Some(code), signal, at_unix_ms, oom_killed)
}

/// The engine's RFC 3339 timestamps in ms since the epoch; the zero time
/// (`0001-01-01T00:00:00Z`, "never") and anything unreadable are `None`.
pub fn unix_ms(text: &str) -> Option<u64> {
    let time = humantime::parse_rfc3339(text).ok()?;
    let since = time.duration_since(std::time::UNIX_EPOCH).ok()?;
    u64::try_from(since.as_millis()).ok().filter(|&ms| ms > 0)
}

#[cfg(test)]
mod tests {
    use bollard::models::{ContainerConfig, ContainerState};
    use sandboxd_protocol::Scope;

    use super::*;

    fn inspect(
        labels: &[(&str, &str)],
        status: ContainerStateStatusEnum,
    ) -> ContainerInspectResponse {
        ContainerInspectResponse {
            id: Some("c0ffee".into()),
            config: Some(ContainerConfig {
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                image: Some("runner:1".into()),
                ..Default::default()
            }),
            state: Some(ContainerState {
                status: Some(status),
                started_at: Some("2024-05-01T10:00:00.123456789Z".into()),
                finished_at: Some("0001-01-01T00:00:00Z".into()),
                exit_code: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const OURS: [(&str, &str); 4] = [
        ("stigmer.ai/managed-by", "stigmer-server"),
        ("stigmer.ai/scope", "session"),
        ("stigmer.ai/sandbox-id", "s1"),
        ("stigmer.ai/generation", "4"),
    ];

    #[test]
    fn only_our_labels_make_it_ours() {
        let key = SandboxKey::new(Scope::Session, "s1");
        let Lookup::Ours(observed) =
            Lookup::from_inspect(&key, inspect(&OURS, ContainerStateStatusEnum::RUNNING))
        else {
            panic!("ours")
        };
        assert_eq!(observed.phase, Phase::Running);
        assert_eq!(observed.created_generation(), 4);
        assert_eq!(observed.started_at_unix_ms, Some(1_714_557_600_123));
        assert_eq!(observed.last_exit(), None, "never finished");
        let other = SandboxKey::new(Scope::Session, "s2");
        assert!(matches!(
            Lookup::from_inspect(&other, inspect(&OURS, ContainerStateStatusEnum::RUNNING)),
            Lookup::Foreign { .. }
        ));
        let unlabelled = inspect(&[], ContainerStateStatusEnum::RUNNING);
        assert_eq!(
            Lookup::from_inspect(&key, unlabelled).probe_state(),
            ProbeState::Absent
        );
    }

    #[test]
    fn listed_containers_map_back_to_keys() {
        let labels: HashMap<String, String> = OURS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let key = SandboxKey::new(Scope::Session, "s1");
        assert_eq!(key_of(&labels, &[format!("/{}", key.base_name)]), Some(key));
        assert_eq!(key_of(&labels, &["/renamed".to_string()]), None);
        let mut bad_scope = labels.clone();
        bad_scope.insert("stigmer.ai/scope".into(), "nope".into());
        assert_eq!(key_of(&bad_scope, &["/x".to_string()]), None);
    }

    #[test]
    fn phases_map_to_probe_states() {
        let key = SandboxKey::new(Scope::Session, "s1");
        for (status, probe) in [
            (ContainerStateStatusEnum::RUNNING, ProbeState::Running),
            (ContainerStateStatusEnum::PAUSED, ProbeState::Stopped),
            (ContainerStateStatusEnum::CREATED, ProbeState::Stopped),
            (ContainerStateStatusEnum::EXITED, ProbeState::Stopped),
            (ContainerStateStatusEnum::DEAD, ProbeState::Absent),
            (ContainerStateStatusEnum::REMOVING, ProbeState::Absent),
        ] {
            assert_eq!(
                Lookup::from_inspect(&key, inspect(&OURS, status)).probe_state(),
                probe,
                "{status}"
            );
        }
    }

    #[test]
    fn exit_codes_above_128_are_signals() {
        assert_eq!(exit_info(137, 5, false).signal, Some(9));
        assert_eq!(exit_info(143, 5, false).signal, Some(15));
        assert_eq!(exit_info(1, 5, false).signal, None);
        assert_eq!(exit_info(0, 5, false).code, Some(0));
    }

    #[test]
    fn timestamps() {
        assert_eq!(unix_ms("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(unix_ms("2024-05-01T10:00:00.5Z"), Some(1_714_557_600_500));
        assert_eq!(unix_ms("0001-01-01T00:00:00Z"), None);
        assert_eq!(unix_ms("yesterday"), None);
    }
}
