//! Which cgroup the rules match: the sandboxes' parent, as nft names it.
//!
//! nft's `socket cgroupv2 level N "PATH"` resolves PATH under
//! `/sys/fs/cgroup` (a fixed prefix in nft) to the cgroup's id when the rule
//! is loaded, and at run time compares the id of the packet's socket's
//! cgroup ancestor at depth N with it. Matching the *parent* `sandboxes`
//! cgroup at its own depth covers every sandbox cgroup created under it
//! later, which a per-sandbox rule could not (the id must exist at load).

use std::path::{Component, Path, PathBuf};

/// Where nft looks cgroup v2 paths up.
const NFT_CGROUP_PREFIX: &str = "/sys/fs/cgroup";

/// The sandboxes' parent cgroup, located for nft.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupTarget {
    /// The directory, e.g. `/sys/fs/cgroup/unified/sandboxd/sandboxes`.
    pub dir: PathBuf,
    /// The path nft is given, relative to `/sys/fs/cgroup`.
    pub nft_path: String,
    /// Its depth below the v2 root (the root is 0).
    pub level: usize,
}

impl CgroupTarget {
    /// `relative` is the cgroup's path below the v2 root (`a/b/sandboxes`),
    /// `v2_mount` where the v2 hierarchy is mounted: `/sys/fs/cgroup` on a
    /// pure v2 host, `/sys/fs/cgroup/unified` on a hybrid one.
    pub fn new(v2_mount: &Path, relative: &Path) -> Result<CgroupTarget, String> {
        let components: Vec<&str> = relative
            .components()
            .filter(|component| *component != Component::RootDir)
            .map(|component| match component {
                Component::Normal(name) => name.to_str().ok_or(()),
                _ => Err(()),
            })
            .collect::<Result<_, ()>>()
            .map_err(|()| {
                format!(
                    "the sandboxes cgroup '{}' must be a plain path below the cgroup v2 root",
                    relative.display()
                )
            })?;
        if components.is_empty() {
            return Err("the sandboxes cgroup cannot be the cgroup v2 root itself".to_string());
        }
        if components.iter().any(|name| name.contains('"')) {
            return Err(format!(
                "the sandboxes cgroup '{}' has a '\"' in its path, which nft cannot quote",
                relative.display()
            ));
        }
        let mount_below_prefix = v2_mount
            .strip_prefix(NFT_CGROUP_PREFIX)
            .map_err(|_| {
                format!(
                    "cgroup v2 is mounted at {}, but nft resolves cgroup paths under {NFT_CGROUP_PREFIX} only",
                    v2_mount.display()
                )
            })?;
        let dir = v2_mount.join(components.join("/"));
        let nft_path = mount_below_prefix
            .join(components.join("/"))
            .to_string_lossy()
            .into_owned();
        Ok(CgroupTarget {
            dir,
            nft_path,
            level: components.len(),
        })
    }
}

/// Where cgroup v2 is mounted, from this process's mount table.
pub fn find_v2_mount() -> Result<PathBuf, String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|error| format!("cannot read /proc/self/mountinfo: {error}"))?;
    v2_mount_in(&table).ok_or_else(|| "no cgroup v2 hierarchy is mounted".to_string())
}

/// The mount point of the first `cgroup2` file system in a mountinfo text.
fn v2_mount_in(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        // `id parent major:minor root mount-point options... - fstype source ...`
        let (before, after) = line.split_once(" - ")?;
        let fstype = after.split_whitespace().next()?;
        let mount_point = before.split_whitespace().nth(4)?;
        (fstype == "cgroup2").then(|| PathBuf::from(mount_point.replace("\\040", " ")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hybrid_and_pure_v2_paths() {
        let hybrid = CgroupTarget::new(
            Path::new("/sys/fs/cgroup/unified"),
            Path::new("system.slice/sandboxd.service/sandboxes"),
        )
        .unwrap();
        assert_eq!(
            hybrid.nft_path,
            "unified/system.slice/sandboxd.service/sandboxes"
        );
        assert_eq!(hybrid.level, 3);
        assert_eq!(
            hybrid.dir,
            Path::new("/sys/fs/cgroup/unified/system.slice/sandboxd.service/sandboxes")
        );

        let pure =
            CgroupTarget::new(Path::new("/sys/fs/cgroup"), Path::new("/x/sandboxes")).unwrap();
        assert_eq!((pure.nft_path.as_str(), pure.level), ("x/sandboxes", 2));
    }

    #[test]
    fn paths_nft_cannot_use_are_refused_with_the_reason() {
        let root = Path::new("/sys/fs/cgroup");
        assert!(CgroupTarget::new(root, Path::new("")).is_err());
        assert!(CgroupTarget::new(root, Path::new("a/../b")).is_err());
        assert!(CgroupTarget::new(root, Path::new("a\"b")).is_err());
        let elsewhere = CgroupTarget::new(Path::new("/mnt/cg2"), Path::new("s")).unwrap_err();
        assert!(elsewhere.contains("/mnt/cg2"), "{elsewhere}");
    }

    #[test]
    fn the_v2_mount_is_found_in_mountinfo() {
        let hybrid = "25 1 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n\
                      27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(
            v2_mount_in(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let pure =
            "30 1 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(v2_mount_in(pure), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(v2_mount_in("1 0 0:1 / / rw - ext4 /dev/sda rw\n"), None);
    }
}
