//! Where this host's cgroup hierarchies are: read once at start from
//! `/proc/self/mountinfo`, `/proc/self/cgroup` and the v2 root's
//! `cgroup.controllers`.
//!
//! A pure cgroup v2 host mounts one `cgroup2` file system (usually at
//! `/sys/fs/cgroup`) that holds every controller. A hybrid host (systemd's
//! "hybrid" mode, and this project's CI machine) mounts `cgroup2` at
//! `/sys/fs/cgroup/unified` with few or no controllers, and binds memory,
//! pids, cpu and freezer to v1 hierarchies under `/sys/fs/cgroup/<name>`.
//! A controller is bound to one hierarchy at a time, so "in v2's
//! `cgroup.controllers`" and "mounted as v1" never both hold: each
//! controller is used where it is, and nothing here needs to know which
//! kind of host it is.

use std::path::{Path, PathBuf};

/// The controllers the process tier uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
    Freezer,
}

impl Controller {
    pub const ALL: [Controller; 4] = [
        Controller::Memory,
        Controller::Pids,
        Controller::Cpu,
        Controller::Freezer,
    ];

    /// The name in `cgroup.controllers` and in a v1 mount's options.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
            Controller::Freezer => "freezer",
        }
    }
}

/// One mounted hierarchy: where it is mounted, and the daemon's own
/// cgroup in it as a path below that mount point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub mount: PathBuf,
    /// The daemon's own cgroup, relative to `mount` (empty for the root).
    pub own: PathBuf,
}

impl Hierarchy {
    /// The daemon's own cgroup directory.
    pub fn own_dir(&self) -> PathBuf {
        self.mount.join(&self.own)
    }
}

/// What was found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layout {
    /// The cgroup v2 hierarchy, when one is mounted.
    pub v2: Option<Hierarchy>,
    /// The controllers of [`Controller::ALL`] that v2 holds (its root's
    /// `cgroup.controllers`; freezer is built into v2 and never listed).
    pub v2_controllers: Vec<Controller>,
    /// The v1 hierarchies of the controllers v2 does not hold.
    pub v1: Vec<(Controller, Hierarchy)>,
}

impl Layout {
    /// Reads this host's layout. Missing files give an empty layout (no
    /// cgroups at all), never an error: the caller falls back.
    pub fn detect() -> Layout {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mounts = parse_mountinfo(&mountinfo);
        let controllers = mounts
            .iter()
            .find(|mount| mount.v2)
            .and_then(|mount| std::fs::read_to_string(mount.point.join("cgroup.controllers")).ok())
            .unwrap_or_default();
        Layout::from_parts(&mounts, &own, &controllers)
    }

    /// The layout from the three texts, parsed (any host's, for tests).
    #[cfg(test)]
    pub fn parse(mountinfo: &str, proc_self_cgroup: &str, v2_controllers: &str) -> Layout {
        Layout::from_parts(
            &parse_mountinfo(mountinfo),
            proc_self_cgroup,
            v2_controllers,
        )
    }

    fn from_parts(mounts: &[Mount], proc_self_cgroup: &str, v2_controllers: &str) -> Layout {
        let memberships = parse_proc_self_cgroup(proc_self_cgroup);
        let own_in = |mount: &Mount, wanted: &dyn Fn(&Membership) -> bool| {
            let path = memberships
                .iter()
                .find(|membership| wanted(membership))
                .map_or("/", |membership| membership.path.as_str());
            Hierarchy {
                mount: mount.point.clone(),
                own: relative_to_root(path, &mount.root),
            }
        };
        let v2 = mounts
            .iter()
            .find(|mount| mount.v2)
            .map(|mount| own_in(mount, &|membership| membership.v2));
        let listed: Vec<&str> = v2_controllers.split_ascii_whitespace().collect();
        let v2_controllers: Vec<Controller> = if v2.is_some() {
            Controller::ALL
                .into_iter()
                .filter(|controller| listed.contains(&controller.name()))
                .collect()
        } else {
            Vec::new()
        };
        let mut v1 = Vec::new();
        for controller in Controller::ALL {
            if v2_controllers.contains(&controller) {
                continue;
            }
            let name = controller.name();
            let mount = mounts
                .iter()
                .find(|mount| !mount.v2 && mount.options.iter().any(|option| option == name));
            if let Some(mount) = mount {
                let hierarchy = own_in(mount, &|membership| {
                    membership.controllers.iter().any(|listed| listed == name)
                });
                v1.push((controller, hierarchy));
            }
        }
        Layout {
            v2,
            v2_controllers,
            v1,
        }
    }

    /// The v1 hierarchy of `controller`, when v2 does not hold it.
    pub fn v1_of(&self, controller: Controller) -> Option<&Hierarchy> {
        self.v1
            .iter()
            .find(|(candidate, _)| *candidate == controller)
            .map(|(_, hierarchy)| hierarchy)
    }
}

/// One cgroup file system mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    point: PathBuf,
    /// The cgroup this mount shows at its mount point (`/` unless a
    /// bind mount or a cgroup namespace shows a subtree).
    root: String,
    v2: bool,
    /// The super block options: a v1 mount lists its controllers there.
    options: Vec<String>,
}

/// The `cgroup` and `cgroup2` mounts, in mountinfo order. A line is
/// `id parent major:minor root point options [optional…] - type source super-options`.
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let mut after = after.split(' ');
            let fs_type = after.next()?;
            let _source = after.next()?;
            let super_options = after.next().unwrap_or("");
            let v2 = match fs_type {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            Some(Mount {
                point: PathBuf::from(unescape(fields.get(4)?)),
                root: unescape(fields.get(3)?),
                v2,
                options: super_options.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` octal.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|digits| {
            let text = std::str::from_utf8(digits).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One line of `/proc/self/cgroup`: `id:controllers:path` (v2 is `0::path`).
struct Membership {
    v2: bool,
    controllers: Vec<String>,
    path: String,
}

fn parse_proc_self_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            Some(Membership {
                v2: id == "0" && controllers.is_empty(),
                controllers: controllers.split(',').map(str::to_string).collect(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// `path` (absolute in the hierarchy) below the mount's `root`, relative.
/// A path outside the root (only possible across namespaces) is taken as
/// the mount point itself.
fn relative_to_root(path: &str, root: &str) -> PathBuf {
    let path = Path::new(path);
    let relative = path.strip_prefix(root).unwrap_or(Path::new(""));
    relative.strip_prefix("/").unwrap_or(relative).to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This project's CI machine: v2 at /sys/fs/cgroup/unified with only
    /// hugetlb, the rest as v1; memory nested in a cgroup of the host's.
    const HYBRID_MOUNTINFO: &str = "\
22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str = "\
9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/process_api/1327
2:cpuacct:/
1:cpu:/
0::/
";

    #[test]
    fn a_hybrid_host_uses_v2_for_the_tree_and_v1_for_every_controller() {
        let layout = Layout::parse(HYBRID_MOUNTINFO, HYBRID_CGROUP, "hugetlb\n");
        let v2 = layout.v2.as_ref().unwrap();
        assert_eq!(v2.mount, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(v2.own_dir(), Path::new("/sys/fs/cgroup/unified"));
        assert!(layout.v2_controllers.is_empty());
        let memory = layout.v1_of(Controller::Memory).unwrap();
        assert_eq!(memory.mount, Path::new("/sys/fs/cgroup/memory"));
        assert_eq!(
            memory.own_dir(),
            Path::new("/sys/fs/cgroup/memory/process_api/1327")
        );
        for (controller, mount) in [
            (Controller::Pids, "/sys/fs/cgroup/pids"),
            (Controller::Cpu, "/sys/fs/cgroup/cpu"),
            (Controller::Freezer, "/sys/fs/cgroup/freezer"),
        ] {
            assert_eq!(layout.v1_of(controller).unwrap().mount, Path::new(mount));
        }
    }

    #[test]
    fn a_pure_v2_host_uses_v2_for_everything() {
        let mountinfo = "\
24 1 8:1 / / rw - ext4 /dev/sda1 rw
30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
        let own = "0::/system.slice/sandboxd.service\n";
        let layout = Layout::parse(
            mountinfo,
            own,
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        );
        let v2 = layout.v2.unwrap();
        assert_eq!(v2.mount, Path::new("/sys/fs/cgroup"));
        assert_eq!(
            v2.own_dir(),
            Path::new("/sys/fs/cgroup/system.slice/sandboxd.service")
        );
        assert_eq!(
            layout.v2_controllers,
            [Controller::Memory, Controller::Pids, Controller::Cpu]
        );
        assert!(layout.v1.is_empty(), "{:?}", layout.v1);
    }

    #[test]
    fn combined_v1_mounts_bind_mount_roots_and_escaped_paths() {
        // cpu and cpuacct co-mounted; a container's view where the mounts
        // show a subtree; a mount point with a space in it.
        let mountinfo = "\
40 31 0:40 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct
41 31 0:41 /docker/abc /sys/fs/cgroup/my\\040memory ro - cgroup cgroup rw,memory
";
        let own = "3:cpu,cpuacct:/docker/abc/inner\n2:memory:/docker/abc\n";
        let layout = Layout::parse(mountinfo, own, "");
        assert_eq!(layout.v2, None);
        let cpu = layout.v1_of(Controller::Cpu).unwrap();
        assert_eq!(cpu.own_dir(), Path::new("/sys/fs/cgroup/cpu,cpuacct/inner"));
        let memory = layout.v1_of(Controller::Memory).unwrap();
        assert_eq!(memory.own_dir(), Path::new("/sys/fs/cgroup/my memory"));
        assert!(layout.v1_of(Controller::Pids).is_none());
    }

    #[test]
    fn no_cgroup_mounts_give_an_empty_layout() {
        let layout = Layout::parse("22 1 254:0 / / rw - ext4 /dev/vda rw\n", "", "");
        assert_eq!(layout, Layout::default());
    }

    #[test]
    fn this_hosts_layout_is_readable() {
        // Whatever the host, detection does not fail; on Linux with cgroups
        // mounted it finds a v2 hierarchy or a v1 memory one.
        let layout = Layout::detect();
        if Path::new("/sys/fs/cgroup").exists() {
            assert!(
                layout.v2.is_some() || !layout.v1.is_empty(),
                "nothing found: {layout:?}"
            );
        }
    }
}
