//! Which user the runners run as.
//!
//! A runner must never be able to call the daemon or touch another runner's
//! files, so a root daemon never runs them as root unless the operator says
//! so: with `run_as` unset they run as `nobody:nogroup`.

use anyhow::{bail, Context};
use nix::unistd::{Gid, Group, Uid, User};

/// The uid/gid runners get, and whether the daemon must switch to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerIdentity {
    pub uid: Uid,
    pub gid: Gid,
    /// For logs and error messages.
    pub display: String,
    /// False when runners simply keep the daemon's own uid/gid.
    pub switch: bool,
}

impl RunnerIdentity {
    /// Resolves `run_as` ("user[:group]", names or numbers) against this host.
    pub fn resolve(run_as: Option<&str>, allow_root_runners: bool) -> anyhow::Result<Self> {
        let daemon_uid = Uid::effective();
        let identity = match run_as {
            None if daemon_uid.is_root() => {
                Self::named("nobody", Some(default_nobody_group()?.as_str()))?
            }
            None => RunnerIdentity {
                uid: daemon_uid,
                gid: Gid::effective(),
                display: format!("{} (the daemon's own user)", daemon_uid),
                switch: false,
            },
            Some(spec) => {
                let (user, group) = match spec.split_once(':') {
                    Some((user, group)) => (user, Some(group)),
                    None => (spec, None),
                };
                Self::named(user, group).with_context(|| format!("run_as '{spec}'"))?
            }
        };
        if identity.uid.is_root() && !allow_root_runners {
            bail!(
                "refusing to run runners as root ({}): set allow_root_runners = true to allow it",
                identity.display
            );
        }
        if !daemon_uid.is_root() {
            if identity.uid != daemon_uid || identity.gid != Gid::effective() {
                bail!(
                    "runners cannot run as {}: the daemon runs as uid {} and only root can switch users",
                    identity.display,
                    daemon_uid
                );
            }
            return Ok(RunnerIdentity {
                switch: false,
                ..identity
            });
        }
        Ok(identity)
    }

    fn named(user: &str, group: Option<&str>) -> anyhow::Result<Self> {
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
        Ok(RunnerIdentity {
            uid,
            gid,
            display: format!(
                "{user}:{} (uid {uid}, gid {gid})",
                group.unwrap_or("<primary>")
            ),
            switch: true,
        })
    }
}

/// Debian calls it `nogroup`, Fedora `nobody`.
fn default_nobody_group() -> anyhow::Result<String> {
    for name in ["nogroup", "nobody"] {
        if Group::from_name(name)?.is_some() {
            return Ok(name.to_string());
        }
    }
    bail!("neither group 'nogroup' nor 'nobody' exists: set run_as = \"user:group\"")
}
