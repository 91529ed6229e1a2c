//! Who may call what: the decision from a connection's peer credentials.
//!
//! The socket's mode and group are the first gate; this is the second, so a
//! member of the socket's group who should only read (a monitoring agent,
//! an admin's `sandboxctl list`) cannot also create or destroy sandboxes.
//!
//! The rules, in order:
//! - `protocol_version` is open to every peer, so any client can report a
//!   version mismatch instead of a permission error.
//! - root and the daemon's own effective uid may call everything.
//! - `access.mutate_uids` / `access.mutate_gids` may call everything
//!   (mutating implies reading).
//! - `access.read_uids` / `access.read_gids` may probe, describe, list,
//!   list workspaces, read events and ask for status.
//! - `logs` is a read, but of what a runner printed, which may include the
//!   credential it was handed: it takes the mutate lists.
//!
//! The gid is the peer's primary gid as the kernel reports it through
//! `SO_PEERCRED`; supplementary groups are not available there, and reading
//! them from `/proc/<pid>` would race with pid reuse.

use sandboxd_protocol::SandboxError;

pub use crate::calls::{Call, CallClass};
use crate::config::AccessConfig;

/// The credentials of a connected peer, as `SO_PEERCRED` reported them when
/// it connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    /// Absent only on platforms that do not report it.
    pub pid: Option<i32>,
}

/// Where a peer stands before any call, from its credentials alone: what
/// the accept loop decides a connection slot by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Root or the daemon's own uid.
    Owner,
    /// On at least one allow-list.
    Listed,
    /// On none: it may only ask the protocol version.
    Stranger,
}

/// The allow-lists and the daemon's own uid, fixed at start.
#[derive(Debug, Clone)]
pub struct AccessPolicy {
    daemon_uid: u32,
    lists: AccessConfig,
}

impl AccessPolicy {
    pub fn new(lists: AccessConfig, daemon_uid: u32) -> Self {
        AccessPolicy { daemon_uid, lists }
    }

    /// Where `peer` stands, before any call.
    pub fn standing(&self, peer: &Peer) -> Standing {
        let lists = &self.lists;
        if peer.uid == 0 || peer.uid == self.daemon_uid {
            Standing::Owner
        } else if lists.mutate_uids.contains(&peer.uid)
            || lists.read_uids.contains(&peer.uid)
            || lists.mutate_gids.contains(&peer.gid)
            || lists.read_gids.contains(&peer.gid)
        {
            Standing::Listed
        } else {
            Standing::Stranger
        }
    }

    /// The decision, with no side effect. A refusal names the uid, the gid
    /// and the call, and which lists would have allowed it.
    pub fn decide(&self, peer: &Peer, call: Call) -> Result<(), SandboxError> {
        let lists = &self.lists;
        let owner = peer.uid == 0 || peer.uid == self.daemon_uid;
        let may_mutate =
            owner || lists.mutate_uids.contains(&peer.uid) || lists.mutate_gids.contains(&peer.gid);
        let may_read = may_mutate
            || lists.read_uids.contains(&peer.uid)
            || lists.read_gids.contains(&peer.gid);
        let (allowed, needed) = match call.class() {
            CallClass::Open => (true, ""),
            CallClass::Read => (
                may_read,
                "access.read_uids, access.read_gids or the mutate lists",
            ),
            CallClass::Mutate => (may_mutate, "access.mutate_uids or access.mutate_gids"),
        };
        if allowed {
            return Ok(());
        }
        Err(SandboxError::PermissionDenied(format!(
            "uid {} (gid {}) may not call {}: it is not root, not the daemon's uid, and not in {needed}",
            peer.uid,
            peer.gid,
            call.name()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAEMON_UID: u32 = 990;
    const ALL_CALLS: &[Call] = Call::ALL;

    fn policy() -> AccessPolicy {
        AccessPolicy::new(
            AccessConfig {
                mutate_uids: vec![1001],
                mutate_gids: vec![2001],
                read_uids: vec![1002],
                read_gids: vec![2002],
            },
            DAEMON_UID,
        )
    }

    fn peer(uid: u32, gid: u32) -> Peer {
        Peer {
            uid,
            gid,
            pid: Some(42),
        }
    }

    fn allowed(policy: &AccessPolicy, peer: Peer) -> Vec<&'static str> {
        ALL_CALLS
            .iter()
            .copied()
            .filter(|call| policy.decide(&peer, *call).is_ok())
            .map(Call::name)
            .collect()
    }

    const EVERYTHING: [&str; 32] = [
        "protocol_version",
        "ensure",
        "deprovision",
        "create_connect",
        "deprovision_connect",
        "probe",
        "describe",
        "list",
        "status",
        "logs",
        "workspaces",
        "ensure_fenced",
        "deprovision_fenced",
        "deprovision_connect_fenced",
        "events",
        "usage",
        "pause",
        "resume",
        "exec",
        "command_output",
        "command_wait",
        "command_input",
        "command_signal",
        "command_resize",
        "commands",
        "put_file",
        "get_file",
        "stat_file",
        "list_files",
        "remove_file",
        "put_tar",
        "get_tar",
    ];
    const READ_ONLY: [&str; 8] = [
        "protocol_version",
        "probe",
        "describe",
        "list",
        "status",
        "workspaces",
        "events",
        "usage",
    ];

    #[test]
    fn root_and_the_daemon_itself_may_do_everything() {
        let policy = AccessPolicy::new(AccessConfig::default(), DAEMON_UID);
        assert_eq!(allowed(&policy, peer(0, 5000)), EVERYTHING);
        assert_eq!(allowed(&policy, peer(DAEMON_UID, 5000)), EVERYTHING);
    }

    #[test]
    fn strangers_may_only_ask_the_protocol_version() {
        assert_eq!(allowed(&policy(), peer(1234, 1234)), ["protocol_version"]);
    }

    #[test]
    fn mutate_lists_imply_read() {
        assert_eq!(allowed(&policy(), peer(1001, 9999)), EVERYTHING);
        assert_eq!(allowed(&policy(), peer(9999, 2001)), EVERYTHING);
    }

    #[test]
    fn read_lists_may_only_read() {
        assert_eq!(allowed(&policy(), peer(1002, 9999)), READ_ONLY);
        assert_eq!(allowed(&policy(), peer(9999, 2002)), READ_ONLY);
    }

    #[test]
    fn standing_tells_owners_listed_peers_and_strangers_apart() {
        let policy = policy();
        assert_eq!(policy.standing(&peer(0, 1)), Standing::Owner);
        assert_eq!(policy.standing(&peer(DAEMON_UID, 1)), Standing::Owner);
        assert_eq!(policy.standing(&peer(1002, 1)), Standing::Listed);
        assert_eq!(policy.standing(&peer(5, 2001)), Standing::Listed);
        assert_eq!(policy.standing(&peer(1234, 1234)), Standing::Stranger);
    }

    #[test]
    fn a_refusal_names_the_uid_gid_and_call() {
        match policy().decide(&peer(1234, 1235), Call::Ensure) {
            Err(SandboxError::PermissionDenied(message)) => {
                assert!(
                    message.starts_with("uid 1234 (gid 1235) may not call ensure: "),
                    "{message}"
                );
                assert!(message.contains("access.mutate_uids"), "{message}");
            }
            other => panic!("expected permission denied, got {other:?}"),
        }
        match policy().decide(&peer(1234, 1235), Call::List) {
            Err(SandboxError::PermissionDenied(message)) => {
                assert!(message.contains("may not call list"), "{message}");
                assert!(message.contains("access.read_uids"), "{message}");
            }
            other => panic!("expected permission denied, got {other:?}"),
        }
    }
}
