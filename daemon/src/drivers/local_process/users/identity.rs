//! Which user the runners run as.
//!
//! A runner must never be able to call the daemon or touch another
//! runner's processes or files, so under a root daemon each sandbox gets a
//! uid of its own, with the gid of the same number and no supplementary
//! groups, from `runner_uid_range` (see [`UidRange`] for the default and
//! why): a runner then cannot read another's `/proc/<pid>/environ`, signal
//! or ptrace it, or open its workspace (0700, its own). `run_as` opts out:
//! every runner is that one user, and runners are isolated from the host
//! but not from each other. A daemon that is not root cannot switch users:
//! its runners keep its own uid, and nothing but the daemon's own
//! permissions separates them.

use anyhow::{bail, Context};
use nix::unistd::{Gid, Group, Uid, User};

use super::uid_range::UidRange;

/// Who the runner becomes, and what it gives up for good, before exec.
///
/// Always: `no_new_privs` (no setuid binary or file capability can raise
/// it again), an empty ambient set, and empty permitted, effective and
/// inheritable sets after the user switch. With `bounding_set_up_to`
/// (which needs CAP_SETPCAP in the daemon) also an empty bounding set and
/// locked securebits: no root uid grants capabilities (`NOROOT`), a uid
/// change never restores any (`NO_SETUID_FIXUP`), keep-caps and ambient
/// raises are off — each locked, so the runner cannot undo them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Privileges {
    /// `Some((uid, gid))` to switch to that user (supplementary groups
    /// cleared) before the `chdir`, as std's `Command::uid`/`gid` do.
    pub user: Option<(u32, u32)>,
    /// `Some(last)`: drop capabilities 0..=last (the kernel's
    /// `/proc/sys/kernel/cap_last_cap`) from the bounding set and lock the
    /// securebits.
    pub bounding_set_up_to: Option<u32>,
}

/// Who runners run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerUsers {
    /// Each sandbox its own uid (= gid) of the range.
    PerSandbox(UidRange),
    /// Every runner this one user (`run_as`).
    Shared { uid: u32, gid: u32 },
    /// Runners keep the daemon's own uid and gid (a daemon that is not root).
    DaemonsOwn,
}

/// The users runners get, and what they give up before exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerIdentity {
    pub users: RunnerUsers,
    /// For logs, error messages and `status`.
    pub display: String,
    /// `Some(last capability)` when the daemon holds CAP_SETPCAP, so its
    /// runners' bounding sets can be emptied and their securebits locked.
    pub bounding_set_up_to: Option<u32>,
}

impl RunnerIdentity {
    /// Resolves `run_as` ("user[:group]", names or numbers) and
    /// `runner_uid_range` against this host; with per-sandbox users, checks
    /// that no user or group of the host owns an id of the range.
    pub fn resolve(
        run_as: Option<&str>,
        uid_range: Option<&str>,
        allow_root_runners: bool,
    ) -> anyhow::Result<Self> {
        let daemon_uid = Uid::effective();
        let range = uid_range
            .map(|text| {
                UidRange::parse(text)
                    .map_err(|problem| anyhow::anyhow!("runner_uid_range: {problem}"))
            })
            .transpose()?;
        let bounding_set_up_to = has_cap_setpcap().then(sandboxd_init::privileges::last_capability);
        let (users, display) = match (run_as, range) {
            (Some(_), Some(_)) => bail!(
                "run_as and runner_uid_range are both set: run_as makes every runner one user, runner_uid_range gives each sandbox its own — set one"
            ),
            (Some(spec), None) => {
                let (user, group) = match spec.split_once(':') {
                    Some((user, group)) => (user, Some(group)),
                    None => (spec, None),
                };
                let (uid, gid, display) =
                    named(user, group).with_context(|| format!("run_as '{spec}'"))?;
                if uid == 0 && !allow_root_runners {
                    bail!(
                        "refusing to run runners as root ({display}): set allow_root_runners = true to allow it"
                    );
                }
                if !daemon_uid.is_root() {
                    if uid != daemon_uid.as_raw() || gid != Gid::effective().as_raw() {
                        bail!(
                            "runners cannot run as {display}: the daemon runs as uid {daemon_uid} and only root can switch users"
                        );
                    }
                    (RunnerUsers::DaemonsOwn, display)
                } else {
                    let display = format!("{display}, shared by every runner (run_as)");
                    (RunnerUsers::Shared { uid, gid }, display)
                }
            }
            (None, range) if daemon_uid.is_root() => {
                let range = range.unwrap_or(UidRange::DEFAULT);
                range.check_mapped().map_err(anyhow::Error::msg)?;
                range.check_system_databases().map_err(anyhow::Error::msg)?;
                let display = format!("a uid of its own per sandbox ({range})");
                (RunnerUsers::PerSandbox(range), display)
            }
            (None, Some(range)) => bail!(
                "runner_uid_range {range} needs a root daemon: this one runs as uid {daemon_uid}, which cannot switch users (unset runner_uid_range; runners then keep the daemon's uid)"
            ),
            (None, None) => (
                RunnerUsers::DaemonsOwn,
                format!("{daemon_uid} (the daemon's own user)"),
            ),
        };
        Ok(RunnerIdentity {
            users,
            display,
            bounding_set_up_to,
        })
    }

    /// What the runner of a sandbox with `sandbox_uid` (its uid of the
    /// range, with [`RunnerUsers::PerSandbox`]) becomes.
    pub fn privileges(&self, sandbox_uid: Option<u32>) -> Privileges {
        let user = match self.users {
            RunnerUsers::PerSandbox(_) => sandbox_uid.map(|uid| (uid, uid)),
            RunnerUsers::Shared { uid, gid } => Some((uid, gid)),
            RunnerUsers::DaemonsOwn => None,
        };
        Privileges {
            user,
            bounding_set_up_to: self.bounding_set_up_to,
        }
    }

    /// The range sandboxes take their uids from, if they each get one.
    pub fn uid_range(&self) -> Option<UidRange> {
        match self.users {
            RunnerUsers::PerSandbox(range) => Some(range),
            _ => None,
        }
    }
}

/// True when this thread's effective set has CAP_SETPCAP (bit 8 of
/// `CapEff` in `/proc/self/status`), which dropping from a child's
/// bounding set and setting its securebits need.
fn has_cap_setpcap() -> bool {
    const CAP_SETPCAP: u32 = 8;
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|status| {
            let mask = status
                .lines()
                .find_map(|line| line.strip_prefix("CapEff:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|effective| effective & (1 << CAP_SETPCAP) != 0)
}

/// `(uid, gid, display)` of a `run_as` user and group.
fn named(user: &str, group: Option<&str>) -> anyhow::Result<(u32, u32, String)> {
    let found = match user.parse::<u32>() {
        Ok(uid) => User::from_uid(Uid::from_raw(uid))?,
        Err(_) => User::from_name(user)?,
    };
    let (uid, primary_gid) = match (found, user.parse::<u32>()) {
        (Some(found), _) => (found.uid, found.gid),
        // A bare number with no passwd entry is allowed, as with `chown`.
        (None, Ok(uid)) => (Uid::from_raw(uid), Gid::from_raw(uid)),
        (None, Err(_)) => bail!("no such user '{user}'"),
    };
    let gid = match group {
        None => primary_gid,
        Some(group) => match group.parse::<u32>() {
            Ok(gid) => Gid::from_raw(gid),
            Err(_) => {
                Group::from_name(group)?
                    .with_context(|| format!("no such group '{group}'"))?
                    .gid
            }
        },
    };
    let display = format!(
        "{user}:{} (uid {uid}, gid {gid})",
        group.unwrap_or("<primary>")
    );
    Ok((uid.as_raw(), gid.as_raw(), display))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_root() -> bool {
        Uid::effective().is_root()
    }

    #[test]
    fn a_root_daemon_gives_each_sandbox_its_own_uid_from_the_default_range() {
        if !is_root() {
            return;
        }
        let identity = RunnerIdentity::resolve(None, None, false).unwrap();
        assert_eq!(identity.uid_range(), Some(UidRange::DEFAULT));
        let privileges = identity.privileges(Some(2_000_000_007));
        assert_eq!(privileges.user, Some((2_000_000_007, 2_000_000_007)));
        assert!(
            privileges.bounding_set_up_to.is_some(),
            "root has CAP_SETPCAP"
        );
    }

    #[test]
    fn run_as_is_one_user_for_all_and_excludes_a_range() {
        if !is_root() {
            return;
        }
        let identity = RunnerIdentity::resolve(Some("65534:65534"), None, false).unwrap();
        assert_eq!(
            identity.users,
            RunnerUsers::Shared {
                uid: 65534,
                gid: 65534
            }
        );
        assert_eq!(identity.privileges(Some(5)).user, Some((65534, 65534)));
        let error = RunnerIdentity::resolve(Some("nobody"), Some("100-200"), false).unwrap_err();
        assert!(error.to_string().contains("set one"), "{error}");
        let error = RunnerIdentity::resolve(Some("0"), None, false).unwrap_err();
        assert!(error.to_string().contains("allow_root_runners"), "{error}");
    }

    #[test]
    fn a_range_with_a_host_user_in_it_is_refused_naming_the_user() {
        if !is_root() {
            return;
        }
        // Every host has a user "nobody" at 65534 (nss-systemd makes one up
        // if /etc/passwd has none).
        let error = RunnerIdentity::resolve(None, Some("65000-65534"), false).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("runner_uid_range 65000-65534 contains"),
            "{text}"
        );
        assert!(text.contains("65534"), "{text}");
        let error = RunnerIdentity::resolve(None, Some("9-x"), false).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("runner_uid_range: the last uid 'x'"),
            "{error}"
        );
    }
}
