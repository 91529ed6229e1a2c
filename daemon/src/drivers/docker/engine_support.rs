//! What the engine can hold a container to, from its `info`: whether it
//! applies seccomp profiles, and whether its storage driver honours a size
//! limit on a container's root file system (`storage_opt size`).
//!
//! A size is honoured by `overlay2` on xfs mounted with project quotas
//! (`pquota`), `devicemapper`, `btrfs`, `zfs` and `windowsfilter`; every
//! other driver (`fuse-overlayfs`, `vfs`, `overlay2` on ext4, …) refuses a
//! create that asks for one, so the daemon asks only where it is honoured
//! and `status` says why not elsewhere. Learned once, at first contact or
//! before the first create: an engine does not change its storage driver
//! without a restart that takes its containers with it.

use std::sync::OnceLock;

use bollard::models::SystemInfo;
use sandboxd_protocol::IsolationFeature;

use super::engine::{CallError, Engine, READ_TIMEOUT};

/// What the engine supports, as learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// The engine applies seccomp profiles (`name=seccomp` among its
    /// security options): without, it refuses a container that has one.
    pub seccomp: bool,
    /// `Ok(how)`: the root file system's size can be limited; `Err(why)`:
    /// it cannot.
    pub root_size: Result<String, String>,
    /// The runtimes registered with the engine (see [`super::runtime`]).
    pub runtimes: super::runtime::Runtimes,
}

/// Learned once, then kept.
#[derive(Debug, Default)]
pub struct Learned(OnceLock<Support>);

impl Learned {
    /// What is known so far, without asking.
    pub fn known(&self) -> Option<&Support> {
        self.0.get()
    }

    /// What the engine supports, asking it the first time.
    pub async fn learn(&self, engine: &Engine) -> Result<&Support, CallError> {
        if let Some(known) = self.0.get() {
            return Ok(known);
        }
        let info = engine
            .call(READ_TIMEOUT, |docker| async move { docker.info().await })
            .await?;
        let support = Support::of(&info, local_engine(engine.address()));
        Ok(self.0.get_or_init(|| support))
    }
}

/// Logs what is not in force, once learned at first contact.
pub fn announce(support: &Support, disk: u64) {
    if !support.seccomp {
        tracing::error!("the engine applies no seccomp profiles (no name=seccomp among its security options): it refuses every runner container, which all carry the daemon's profile");
    }
    if let (Err(why), true) = (&support.root_size, disk != 0) {
        tracing::warn!(%why, "[limits] disk is not in force on the docker tier: containers' root file systems are not limited");
    }
}

/// The `seccomp` feature for `status`.
pub fn seccomp_feature(known: Option<&Support>) -> IsolationFeature {
    match known {
        Some(support) if !support.seccomp => IsolationFeature::not_in_force(
            "seccomp",
            "the engine applies no seccomp profiles (no name=seccomp among its security options), and refuses a container that has one: no runner container starts",
        ),
        // Given with every container: one the engine would not hold to it
        // is not made.
        _ => IsolationFeature::in_force("seccomp", super::seccomp_profile::describe()),
    }
}

/// The `disk-limit` feature for `status`: `[limits] disk` is `disk`.
pub fn disk_feature(known: Option<&Support>, disk: u64) -> IsolationFeature {
    const VOLUME: &str = "the workspace volume is not limited (the engine's local volume driver has no size option but for tmpfs volumes, which would hold the workspace in memory)";
    if disk == 0 {
        return IsolationFeature::not_in_force("disk-limit", "[limits] disk is 0: unlimited");
    }
    match known.map(|support| &support.root_size) {
        None => IsolationFeature::not_in_force(
            "disk-limit",
            "not known yet: the engine's storage driver is asked at first contact and before the first create, and has not answered",
        ),
        Some(Ok(how)) => IsolationFeature::in_force(
            "disk-limit",
            format!("{how}: each container's root file system holds at most [limits] disk ({disk} bytes); {VOLUME}"),
        ),
        Some(Err(why)) => IsolationFeature::not_in_force(
            "disk-limit",
            format!("{why}: [limits] disk ({disk} bytes) is not applied to the container's root file system; {VOLUME}"),
        ),
    }
}

/// Whether the engine's mounts are this host's (a Unix socket).
fn local_engine(address: &str) -> bool {
    address.starts_with("unix://") || address.starts_with('/')
}

impl Support {
    fn of(info: &SystemInfo, local: bool) -> Support {
        let seccomp = info
            .security_options
            .iter()
            .flatten()
            .any(|option| option.split(',').any(|part| part == "name=seccomp"));
        let driver = info.driver.as_deref().unwrap_or("");
        let backing = info
            .driver_status
            .iter()
            .flatten()
            .find(|pair| pair.first().map(String::as_str) == Some("Backing Filesystem"))
            .and_then(|pair| pair.get(1))
            .map_or("", String::as_str);
        let root = info.docker_root_dir.as_deref().unwrap_or("/var/lib/docker");
        let pquota = || {
            if !local {
                return None;
            }
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            Some(project_quota(&mountinfo, root))
        };
        Support {
            seccomp,
            root_size: root_size(driver, backing, pquota),
            runtimes: super::runtime::Runtimes::of(info),
        }
    }
}

/// Whether a size limit on the root file system is honoured by `driver`
/// (with `backing`, its backing file system, for `overlay2`); `pquota`
/// says whether the engine's root is on a file system with project
/// quotas (`None`: cannot tell).
fn root_size(
    driver: &str,
    backing: &str,
    pquota: impl FnOnce() -> Option<bool>,
) -> Result<String, String> {
    match driver {
        "devicemapper" | "btrfs" | "zfs" | "windowsfilter" => {
            Ok(format!("the engine's storage driver {driver} limits each container's size"))
        }
        "overlay2" if backing == "xfs" => match pquota() {
            Some(true) => Ok("the engine's storage driver overlay2 on xfs with project quotas limits each container's size".to_string()),
            Some(false) => Err("the engine's storage driver is overlay2 on xfs mounted without project quotas (pquota), which cannot limit a container's size".to_string()),
            None => Err("the engine's storage driver is overlay2 on xfs, but whether that xfs has project quotas (pquota) cannot be seen from here (the engine is not local)".to_string()),
        },
        "overlay2" => Err(format!(
            "the engine's storage driver is overlay2 on {}, which cannot limit a container's size (it needs xfs with project quotas)",
            if backing.is_empty() { "an unnamed file system" } else { backing }
        )),
        "" => Err("the engine did not name its storage driver".to_string()),
        other => Err(format!(
            "the engine's storage driver {other} cannot limit a container's size (overlay2 on xfs with pquota, devicemapper, btrfs, zfs and windowsfilter can)"
        )),
    }
}

/// Whether the mount holding `path` (the longest mount point above it in
/// `mountinfo`) has project quotas enforced (xfs shows `prjquota`).
fn project_quota(mountinfo: &str, path: &str) -> bool {
    let holding = mountinfo
        .lines()
        .filter_map(|line| {
            let (mount, super_options) = line.split_once(" - ")?;
            let point = mount.split(' ').nth(4)?;
            let options = super_options.split(' ').nth(2).unwrap_or("");
            let above = path == point
                || point == "/"
                || path.starts_with(&format!("{}/", point.trim_end_matches('/')));
            above.then_some((point.len(), options))
        })
        .max_by_key(|(length, _)| *length);
    holding.is_some_and(|(_, options)| {
        options
            .split(',')
            .any(|option| matches!(option, "prjquota" | "pquota"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drivers_that_honour_a_size_and_those_that_do_not() {
        let never = || -> Option<bool> { panic!("only overlay2 on xfs asks") };
        assert!(root_size("btrfs", "", never).is_ok());
        assert!(root_size("zfs", "", never).is_ok());
        assert!(root_size("devicemapper", "", never).is_ok());
        let fuse = root_size("fuse-overlayfs", "", never).unwrap_err();
        assert!(fuse.contains("fuse-overlayfs"), "{fuse}");
        assert!(root_size("overlay2", "extfs", never)
            .unwrap_err()
            .contains("extfs"));
        assert!(root_size("overlay2", "xfs", || Some(true)).is_ok());
        assert!(root_size("overlay2", "xfs", || Some(false))
            .unwrap_err()
            .contains("pquota"));
        assert!(root_size("overlay2", "xfs", || None).is_err());
    }

    #[test]
    fn project_quotas_are_read_from_the_mount_holding_the_root() {
        let mountinfo = "\
22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
30 22 8:2 / /var/lib/docker rw,relatime - xfs /dev/sdb rw,attr2,inode64,prjquota
31 22 8:3 / /var/lib/dockerish rw,relatime - xfs /dev/sdc rw,attr2,inode64
";
        assert!(project_quota(mountinfo, "/var/lib/docker"));
        assert!(!project_quota(mountinfo, "/var/lib/dockerish"));
        assert!(!project_quota(mountinfo, "/srv/docker"));
    }

    #[test]
    fn seccomp_is_read_from_the_security_options() {
        let info = SystemInfo {
            security_options: Some(vec!["name=seccomp,profile=default".to_string()]),
            driver: Some("fuse-overlayfs".to_string()),
            ..Default::default()
        };
        let support = Support::of(&info, true);
        assert!(support.seccomp);
        assert!(support.root_size.is_err());
        assert!(!Support::of(&SystemInfo::default(), true).seccomp);
    }
}
