//! What one look at a running sandbox's disk use decides: nothing, or
//! the reason its runner is stopped for.

use sandboxd_protocol::{show_bytes, ExitReason};

use super::super::workspaces::walk::{Measured, MAX_DEPTH};

/// What a sandbox takes: its workspace's tree and the files it holds open
/// with no name left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub tree: Measured,
    pub unlinked_bytes: u64,
}

impl Usage {
    pub fn bytes(&self) -> u64 {
        self.tree.bytes + self.unlinked_bytes
    }

    /// How it reads in a message.
    pub fn shown(&self) -> String {
        let mut text = format!(
            "{} in {} files and directories",
            show_bytes(self.bytes()),
            self.tree.inodes
        );
        if !self.tree.complete {
            text = format!(
                "at least {text} (the walk stopped: too many entries, or deeper than {MAX_DEPTH})"
            );
        }
        if self.unlinked_bytes > 0 {
            text.push_str(&format!(
                ", {} of it in deleted files still held open",
                show_bytes(self.unlinked_bytes)
            ));
        }
        text
    }
}

/// The limits one look holds a sandbox to (`None`: not by the watcher).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub bytes: Option<u64>,
    pub inodes: Option<u64>,
}

/// The reason to stop a sandbox using `usage`, if any. A walk that could
/// not finish is over the inode limit when it stopped past it, else over
/// the byte limit: what it did not see cannot be told to be small.
pub fn over(usage: Usage, limits: Limits) -> Option<ExitReason> {
    if let Some(limit) = limits.inodes.filter(|&limit| usage.tree.inodes > limit) {
        return Some(ExitReason::DiskInodeLimit {
            limit_inodes: limit,
        });
    }
    let limit = limits.bytes?;
    (!usage.tree.complete || usage.bytes() > limit)
        .then_some(ExitReason::DiskLimit { limit_bytes: limit })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(bytes: u64, inodes: u64, complete: bool, unlinked_bytes: u64) -> Usage {
        Usage {
            tree: Measured {
                bytes,
                inodes,
                complete,
            },
            unlinked_bytes,
        }
    }

    #[test]
    fn bytes_held_open_count_and_an_unfinished_walk_is_over() {
        let both = Limits {
            bytes: Some(100),
            inodes: Some(10),
        };
        assert_eq!(over(usage(100, 10, true, 0), both), None);
        assert_eq!(
            over(usage(50, 3, true, 51), both),
            Some(ExitReason::DiskLimit { limit_bytes: 100 })
        );
        assert_eq!(
            over(usage(0, 11, false, 0), both),
            Some(ExitReason::DiskInodeLimit { limit_inodes: 10 })
        );
        assert_eq!(
            over(usage(0, 5, false, 0), both),
            Some(ExitReason::DiskLimit { limit_bytes: 100 })
        );
        let inodes_only = Limits {
            bytes: None,
            ..both
        };
        assert_eq!(over(usage(1 << 40, 5, false, 0), inodes_only), None);
        assert!(usage(0, 5, false, 7).shown().contains("held open"));
    }
}
