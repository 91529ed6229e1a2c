//! What a sandbox sees of the host's file system, path by path, and why:
//! the process tier's view under `isolation = "full"` as its mount plan
//! builds it, so an operator can tell "not found" or "read-only file
//! system" inside a sandbox from a fault, and find the config key to change.

use serde::{Deserialize, Serialize};

/// How one path looks inside a sandbox's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViewKind {
    /// The host's file or tree, visible and read-only.
    ReadOnly,
    /// The host's file or tree, visible and writable.
    ReadWrite,
    /// Out of sight: an empty read-only directory, or `/dev/null` over a file.
    Hidden,
    /// A private tmpfs of the sandbox's own, gone with it.
    PrivateTmpfs,
    /// A new instance of a kernel file system, the sandbox's own (its
    /// `/proc`, `/dev/mqueue`, `/dev/pts`).
    OwnInstance,
    /// The sandbox's own workspace, writable.
    Workspace,
}

impl ViewKind {
    /// The word `sandboxctl` and the JSON output use.
    pub fn as_str(self) -> &'static str {
        match self {
            ViewKind::ReadOnly => "read-only",
            ViewKind::ReadWrite => "read-write",
            ViewKind::Hidden => "hidden",
            ViewKind::PrivateTmpfs => "private-tmpfs",
            ViewKind::OwnInstance => "own-instance",
            ViewKind::Workspace => "workspace",
        }
    }
}

impl std::fmt::Display for ViewKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One path a sandbox's view adds over the host's tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewEntry {
    /// The path as the sandbox sees it.
    pub path: String,
    pub kind: ViewKind,
    /// What put it there: `built-in`, or the config key (`[view] read_only`,
    /// `[view] read_write`, `[view] hidden`, `state_dir`, `socket`,
    /// `runner_command`).
    pub source: String,
    /// How, in a few words (a tmpfs's size, a hidden path that is absent
    /// on this host, a path bound back under a hidden one).
    pub detail: String,
    /// Where it is on the host, when that is one sandbox's: the workspace
    /// (in `status`, the sandboxes directory with `<sandbox name>` in
    /// place of the name).
    pub host_path: Option<String>,
}
