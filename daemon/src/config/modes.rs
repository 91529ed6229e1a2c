//! `isolation` and `containment`: the process tier's two one-word
//! settings of how its sandboxes are kept apart and contained.

use serde::Deserialize;

/// `isolation`: how far apart the process tier keeps its sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationMode {
    /// A uid and a cgroup, and a private view: its own mount, PID and IPC
    /// namespaces (where the daemon can make them; `status` says).
    #[default]
    Full,
    /// A uid and a cgroup only: the runner sees the host's file system,
    /// processes and IPC (the opt-out for runners that need the host's view).
    UidCgroup,
    /// A uid and a cgroup, and a kernel of its own: each runner runs under
    /// gVisor's `runsc` (its sentry and gofer in the sandbox's cgroups),
    /// in a view built like `full`'s; the process tier only.
    Gvisor,
}

impl IsolationMode {
    /// The word the config file and `status` use.
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationMode::Full => "full",
            IsolationMode::UidCgroup => "uid-cgroup",
            IsolationMode::Gvisor => "gvisor",
        }
    }
}

/// `containment`: how the process tier contains its runners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContainmentMode {
    /// A cgroup per sandbox where a writable cgroup v2 exists, else
    /// process groups (with a warning).
    #[default]
    Auto,
    /// A cgroup per sandbox, or the daemon does not start.
    Cgroup,
    /// Process groups only (weaker: `setsid` escapes, no limits).
    ProcessGroup,
}
