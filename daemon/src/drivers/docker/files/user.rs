//! The container's user, in numbers, and what it may do to a file as the
//! tar headers the engine sends describe it.
//!
//! The engine reads and writes archives as root, whatever user the
//! container runs as, so the daemon emulates the kernel's permission
//! check itself: the owner's bits when the user owns the file, the group's
//! when its group does, the others' otherwise. It is stricter than the
//! kernel, never looser: supplementary groups are not known (their bits
//! grant nothing here), and root is held to the bits like anyone (the
//! container has no `CAP_DAC_OVERRIDE`: every capability is dropped).

/// Read, write and search, as the permission bits place them.
pub const READ: u32 = 0o4;
pub const WRITE: u32 = 0o2;
pub const SEARCH: u32 = 0o1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerUser {
    pub uid: u64,
    pub gid: u64,
}

impl ContainerUser {
    /// The container's `Config.User` as `uid:gid`, both numbers. A name
    /// (or a uid alone, whose group comes from the image's `/etc/passwd`)
    /// cannot be known from outside the container without reading its
    /// files as root, so it is refused by the caller with this message.
    pub fn parse(user: &str) -> Result<ContainerUser, String> {
        let numbers = user
            .split_once(':')
            .and_then(|(uid, gid)| Some((uid.parse().ok()?, gid.parse().ok()?)));
        match numbers {
            Some((uid, gid)) => Ok(ContainerUser { uid, gid }),
            None => Err(format!(
                "its container runs as '{user}', not as numbers uid:gid ([docker] user): the docker tier writes files as that uid and gid and checks what it may read by them"
            )),
        }
    }

    /// True when a file of `mode`, owned by `uid`:`gid`, grants this user
    /// every bit of `wanted` ([`READ`], [`WRITE`], [`SEARCH`], or'ed).
    pub fn may(&self, mode: u32, uid: u64, gid: u64, wanted: u32) -> bool {
        let bits = if uid == self.uid {
            mode >> 6
        } else if gid == self.gid {
            mode >> 3
        } else {
            mode
        };
        bits & wanted & 0o7 == wanted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_only_and_the_class_that_applies_decides() {
        let user = ContainerUser::parse("65534:65534").unwrap();
        assert_eq!(
            user,
            ContainerUser {
                uid: 65534,
                gid: 65534
            }
        );
        for bad in ["nobody", "65534", "1:x", ""] {
            let error = ContainerUser::parse(bad).unwrap_err();
            assert!(error.contains(&format!("'{bad}'")), "{error}");
        }
        // The owner's bits apply to the owner even when the others' grant more.
        assert!(!user.may(0o077, 65534, 0, READ));
        assert!(user.may(0o400, 65534, 0, READ));
        assert!(user.may(0o040, 0, 65534, READ));
        assert!(!user.may(0o700, 0, 0, READ));
        assert!(user.may(0o705, 0, 0, READ | SEARCH));
        assert!(!user.may(0o704, 0, 0, READ | SEARCH));
    }
}
