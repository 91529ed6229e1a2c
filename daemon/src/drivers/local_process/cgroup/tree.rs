//! The daemon's cgroup tree: where sandboxes' cgroups go, set up once at
//! start, and each sandbox's cgroup in it.
//!
//! ```text
//! <root>/daemon/            the daemon (and its reaper), when <root> is its own cgroup
//! <root>/sandboxes/<base>/  one per sandbox, in v2 and in every v1 hierarchy used
//! ```
//!
//! `<root>` is, in this order: the config's `cgroup_root`; the daemon's own
//! cgroup when it is delegated to it (systemd's `Delegate=yes` marks it with
//! the `trusted.delegate` extended attribute); else `sandboxd` under the v2
//! mount (`sandboxd-<hash of state_dir>` for a non-default state dir, so
//! two daemons never share one). cgroup v2 forbids processes in a cgroup
//! whose children have controllers enabled, so a daemon that lives in
//! `<root>` moves itself into the leaf `<root>/daemon` first.
//!
//! Controllers v2 holds are enabled in `cgroup.subtree_control` down to
//! `sandboxes/`. A controller that lives in a v1 hierarchy gets the same
//! tree there, below the daemon's own cgroup of that hierarchy (so runners
//! stay inside any v1 limit the daemon itself runs under).

use std::fs::DirBuilder;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::kill::{self, Dirs};
use super::layout::{Controller, Layout};
use super::limits::{show_bytes, LimitFile, Limits};
use crate::drivers::local_process::launch::clone_exec::CgroupPlacement;

/// The daemon's leaf when it lives in the root it manages.
const DAEMON_LEAF: &str = "daemon";
const SANDBOXES: &str = "sandboxes";
/// How long a leftover cgroup found at create time may take to empty.
const LEFTOVER_WAIT: Duration = Duration::from_secs(2);

/// What the tree is built from.
pub struct TreeSettings<'a> {
    /// `cgroup_root` from the config.
    pub root: Option<&'a Path>,
    pub limits: Limits,
    /// The state directory: names the default root.
    pub state_dir: &'a Path,
    /// True when `state_dir` is the default one (the root is then `sandboxd`).
    pub default_state_dir: bool,
}

/// Which hierarchy a sandbox file is in: v2, or the v1 directory at this
/// index of [`Dirs::v1`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    V2,
    V1(usize),
}

/// The set-up tree.
#[derive(Debug)]
pub struct CgroupTree {
    sandboxes: Dirs,
    /// Sandboxes whose cgroup was made ahead under another name (a
    /// prepared sandbox's, see `prepared::host_parts`): base name → the
    /// cgroup's name under `sandboxes/`. A cgroup v2 directory cannot be
    /// renamed (`rename` is refused with EPERM), so the sandbox keeps the
    /// name it was made with, and every lookup by base name goes through
    /// [`CgroupTree::dirs`]. An entry lives from the take to the cgroup's
    /// removal.
    adopted: std::sync::Mutex<std::collections::HashMap<String, String>>,
    limits: Limits,
    limit_files: Vec<(Where, LimitFile)>,
    memory: Option<Where>,
    pids: Option<Where>,
    cpu: Option<Where>,
    summary: String,
}

/// What a sandbox's cgroup says of its run, read once it has ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExitFacts {
    /// Processes the OOM killer ended (`oom_kill`).
    pub oom_kills: u64,
    /// Forks refused at the pids limit (`pids.events` `max`).
    pub pids_refused: u64,
}

impl CgroupTree {
    /// Builds the tree. An error means no writable cgroup v2 here.
    pub fn set_up(layout: &Layout, settings: &TreeSettings) -> io::Result<CgroupTree> {
        let v2 = layout
            .v2
            .as_ref()
            .ok_or_else(|| io::Error::other("no cgroup v2 hierarchy is mounted"))?;
        let own = v2.own_dir();
        let root = match settings.root {
            Some(root) if !root.starts_with(&v2.mount) => {
                return Err(io::Error::other(format!(
                    "cgroup_root {} is not inside the cgroup v2 hierarchy at {}",
                    root.display(),
                    v2.mount.display()
                )))
            }
            Some(root) => root.to_path_buf(),
            None if is_delegated(&own) => own.clone(),
            None => v2.mount.join(default_root_name(settings)),
        };
        DirBuilder::new()
            .recursive(true)
            .create(&root)
            .map_err(|error| named(&root, error))?;
        // Not the hierarchy's root cgroup, which every process of the host
        // may be in and which the no-internal-process rule exempts.
        if root == own && root != v2.mount {
            move_into_leaf(&root)?;
        }
        let sandboxes_v2 = root.join(SANDBOXES);
        make_dir(&sandboxes_v2)?;

        let needed = settings.limits.needed();
        let mut unenforced = Vec::new();
        let mut v2_enabled = Vec::new();
        for &controller in &needed {
            if !layout.v2_controllers.contains(&controller) {
                continue;
            }
            match enable_down_to(&v2.mount, &sandboxes_v2, controller) {
                Ok(()) => v2_enabled.push(controller),
                Err(error) => {
                    tracing::warn!(controller = controller.name(), %error, "cannot enable a cgroup v2 controller for sandboxes");
                    unenforced.push(controller);
                }
            }
        }
        let kill_method = if sandboxes_v2.join("cgroup.kill").exists() {
            "cgroup.kill"
        } else if sandboxes_v2.join("cgroup.freeze").exists() {
            "freeze, kill, thaw (v2 freezer)"
        } else {
            "freeze, kill, thaw (v1 freezer)"
        };
        let mut v1_wanted: Vec<Controller> = needed
            .iter()
            .copied()
            .filter(|controller| !layout.v2_controllers.contains(controller))
            .collect();
        if kill_method.ends_with("(v1 freezer)") {
            v1_wanted.push(Controller::Freezer);
        }
        // The root's place relative to the daemon's own cgroup (or to the
        // mount), mirrored under the daemon's own cgroup of each v1 hierarchy.
        let relative = root
            .strip_prefix(&own)
            .or_else(|_| root.strip_prefix(&v2.mount))
            .unwrap_or(Path::new(""))
            .to_path_buf();
        let mut v1_dirs = Vec::new();
        let mut v1_controllers = Vec::new();
        for controller in v1_wanted {
            let Some(hierarchy) = layout.v1_of(controller) else {
                unenforced.push(controller);
                continue;
            };
            let dir = hierarchy.own_dir().join(&relative).join(SANDBOXES);
            match DirBuilder::new().recursive(true).create(&dir) {
                Ok(()) => {
                    v1_dirs.push(dir);
                    v1_controllers.push(controller);
                }
                Err(error) => {
                    tracing::warn!(controller = controller.name(), dir = %dir.display(), %error, "cannot use a cgroup v1 hierarchy for sandboxes");
                    unenforced.push(controller);
                }
            }
        }
        let at = |controller: Controller| -> Option<Where> {
            if v2_enabled.contains(&controller) {
                return Some(Where::V2);
            }
            v1_controllers
                .iter()
                .position(|&candidate| candidate == controller)
                .map(Where::V1)
        };
        let mut limit_files = Vec::new();
        for controller in [Controller::Memory, Controller::Pids, Controller::Cpu] {
            if let Some(place) = at(controller) {
                for file in settings.limits.files(controller, place == Where::V2) {
                    limit_files.push((place, file));
                }
            }
        }
        let summary = summary(
            &sandboxes_v2,
            kill_method,
            &settings.limits,
            &v2_enabled,
            &v1_controllers,
            &unenforced,
        );
        Ok(CgroupTree {
            sandboxes: Dirs {
                v2: sandboxes_v2,
                v1: v1_dirs,
            },
            adopted: Default::default(),
            limits: settings.limits,
            limit_files,
            memory: at(Controller::Memory),
            pids: at(Controller::Pids),
            cpu: at(Controller::Cpu),
            summary,
        })
    }

    /// One line for `status`: where, how a cgroup is killed, what limits.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// `sandboxes/` in every hierarchy.
    pub fn sandboxes(&self) -> &Dirs {
        &self.sandboxes
    }

    /// The sandbox's cgroup in every hierarchy: `sandboxes/<base_name>`,
    /// or the prepared cgroup it adopted.
    pub fn dirs(&self, base_name: &str) -> Dirs {
        match self.adopted().get(base_name) {
            Some(name) => self.sandboxes.child(name),
            None => self.sandboxes.child(base_name),
        }
    }

    /// Writes `sandbox` (`<scope>/<id>`) on the sandbox's cgroup, for
    /// `systemd-cgls` (see [`label`](super::label)).
    pub fn label(&self, base_name: &str, sandbox: &str) -> io::Result<()> {
        super::label::write(&self.dirs(base_name), sandbox)
    }

    /// The name of the sandbox's cgroup under `sandboxes/` (what
    /// `/proc/<pid>/cgroup` shows of its processes).
    pub fn cgroup_name(&self, base_name: &str) -> String {
        self.adopted()
            .get(base_name)
            .cloned()
            .unwrap_or_else(|| base_name.to_string())
    }

    /// The sandbox whose cgroup is the prepared `name`, when one adopted
    /// it: a runner may call the daemon before its start is recorded, and
    /// its refusal is logged with the sandbox's name, not `prepared-<n>`.
    pub fn adopter_of(&self, name: &str) -> Option<String> {
        self.adopted()
            .iter()
            .find(|(_, adopted)| adopted.as_str() == name)
            .map(|(base_name, _)| base_name.clone())
    }

    /// `base_name`'s cgroup is from now on the prepared `name` (made by
    /// [`CgroupTree::create`] under that name, with the same limits).
    pub fn adopt(&self, base_name: &str, name: &str) {
        self.adopted()
            .insert(base_name.to_string(), name.to_string());
    }

    /// Removes the sandbox's cgroup (see [`kill::remove`]) and forgets
    /// which one it was: its next run gets its own again.
    pub fn remove_sandbox(&self, base_name: &str) -> io::Result<()> {
        let removed = kill::remove(&self.dirs(base_name));
        self.adopted().remove(base_name);
        removed
    }

    fn adopted(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, String>> {
        self.adopted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The memory limit in force, in bytes (`None`: unlimited or unenforced).
    pub fn memory_limit(&self) -> Option<u64> {
        self.memory
            .and((self.limits.memory > 0).then_some(self.limits.memory))
    }

    /// The pids limit in force.
    pub fn pids_limit(&self) -> Option<u64> {
        self.pids
            .and((self.limits.pids > 0).then_some(self.limits.pids))
    }

    /// Creates the sandbox's cgroup with its limits, and opens what the
    /// clone needs to start a runner in it. A leftover of the same name (a
    /// crash between a runner's end and its removal) is emptied and reused.
    pub fn create(&self, base_name: &str) -> io::Result<CgroupPlacement> {
        self.adopted().remove(base_name);
        let dirs = self.sandboxes.child(base_name);
        let created = self.make(&dirs);
        let placement = created
            .and_then(|()| self.limit_and_open(&dirs))
            .map(|placement| self.on_cpus(placement, base_name));
        if placement.is_err() {
            let _ = kill::remove(&dirs);
        }
        placement
    }

    fn make(&self, dirs: &Dirs) -> io::Result<()> {
        match std::fs::create_dir(&dirs.v2) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                tracing::warn!(cgroup = %dirs.v2.display(), "reusing a leftover sandbox cgroup; killing what is in it");
                kill::kill(dirs)?;
                kill::wait_empty(&dirs.v2, LEFTOVER_WAIT)?;
            }
            Err(error) => return Err(named(&dirs.v2, error)),
        }
        for dir in &dirs.v1 {
            match std::fs::create_dir(dir) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(named(dir, error)),
            }
        }
        Ok(())
    }

    fn limit_and_open(&self, dirs: &Dirs) -> io::Result<CgroupPlacement> {
        for (place, file) in &self.limit_files {
            let path = dir_of(dirs, *place).join(file.name);
            match kill::write_file(&path, &file.value) {
                Ok(()) => {}
                Err(error) if file.optional && error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => {
                    return Err(io::Error::new(
                        error.kind(),
                        format!("{} = {}: {error}", path.display(), file.value),
                    ))
                }
            }
        }
        open_placement(dirs)
    }

    /// Opens what the clone needs to start a process in `base_name`'s
    /// cgroup as it is (a command beside its running runner).
    pub fn open_existing(&self, base_name: &str) -> io::Result<CgroupPlacement> {
        let placement = open_placement(&self.dirs(base_name))?;
        Ok(self.on_cpus(placement, &self.cgroup_name(base_name)))
    }

    /// The cpu limit in force, in CPUs (`None`: unlimited or unenforced).
    pub fn cpu_limit(&self) -> Option<f64> {
        self.cpu
            .and((self.limits.cpu > 0.0).then_some(self.limits.cpu))
    }

    /// `placement`, with the CPUs the processes of the cgroup `name`
    /// start on (see [`super::cpus`]).
    pub(super) fn on_cpus(&self, mut placement: CgroupPlacement, name: &str) -> CgroupPlacement {
        placement.cpus = self
            .cpu_limit()
            .and_then(|quota| super::cpus::mask_for(quota, name))
            .map(Box::new);
        placement
    }

    /// What the sandbox's cgroup counted; read before it is removed.
    pub fn exit_facts(&self, base_name: &str) -> ExitFacts {
        ExitFacts {
            oom_kills: self.oom_kills(base_name),
            pids_refused: self
                .event_count(base_name, self.pids, ["pids.events", "pids.events"], "max")
                .unwrap_or(0),
        }
    }

    /// The OOM kills the sandbox's cgroup counted so far (0 without a
    /// memory controller): one file read, as a command's start takes it.
    pub fn oom_kills(&self, base_name: &str) -> u64 {
        let files = ["memory.events", "memory.oom_control"];
        self.event_count(base_name, self.memory, files, "oom_kill")
            .unwrap_or(0)
    }

    /// `key`'s count in the sandbox's events file at `place` (the v2 or
    /// the v1 name of `files`).
    fn event_count(
        &self,
        base_name: &str,
        place: Option<Where>,
        [v2_file, v1_file]: [&str; 2],
        key: &str,
    ) -> Option<u64> {
        let place = place?;
        let dirs = self.dirs(base_name);
        let file = if place == Where::V2 { v2_file } else { v1_file };
        let text = std::fs::read_to_string(dir_of(&dirs, place).join(file)).ok()?;
        kill::event_value(&text, key)
    }

    /// The index among the sandbox's v1 directories of the memory
    /// hierarchy, when `wanted` (see `command`); why not, when it is not
    /// one.
    pub(super) fn v1_index_of_memory(
        &self,
        what: &str,
        wanted: bool,
    ) -> Result<Option<usize>, String> {
        v1_index(self.memory, what, wanted)
    }

    /// As [`Self::v1_index_of_memory`], for the cpu controller.
    pub(super) fn v1_index_of_cpu(
        &self,
        what: &str,
        wanted: bool,
    ) -> Result<Option<usize>, String> {
        v1_index(self.cpu, what, wanted)
    }

    /// The processes and threads `base_name`'s cgroup holds now, where a
    /// pids limit is in force: a process moved into a v1 pids cgroup (as a
    /// command is, on a hybrid host) is not held to the limit, so a
    /// command's start checks this first.
    pub fn pids_current(&self, base_name: &str) -> Option<u64> {
        self.pids_limit()?;
        let dirs = self.dirs(base_name);
        let text = std::fs::read_to_string(dir_of(&dirs, self.pids?).join("pids.current")).ok()?;
        text.trim().parse().ok()
    }

    /// Where the sandbox's figures are read (see [`super::usage`]): its
    /// v2 directory, and its memory and pids directories with whether
    /// each is v2 (the file names differ).
    pub fn figure_dirs(&self, base_name: &str) -> super::usage::FigureDirs {
        let dirs = self.dirs(base_name);
        let place = |at: Option<Where>| {
            at.map(|place| (dir_of(&dirs, place).to_path_buf(), place == Where::V2))
        };
        super::usage::FigureDirs {
            memory: place(self.memory),
            pids: place(self.pids),
            cpu: super::usage::cpu_usage_of(&dirs),
            v2: dirs.v2,
        }
    }

    /// After a clean stop: removes `sandboxes/`, and the root when it is
    /// empty (not when the daemon lives in it), in every hierarchy.
    pub fn remove_empty(&self) {
        kill::remove_with_parents(&self.sandboxes);
    }
}

fn dir_of(dirs: &Dirs, place: Where) -> &Path {
    match place {
        Where::V2 => &dirs.v2,
        Where::V1(index) => &dirs.v1[index],
    }
}

/// Where `at` puts a controller, for a command's own cgroup (see `command`).
fn v1_index(at: Option<Where>, what: &str, wanted: bool) -> Result<Option<usize>, String> {
    match (wanted, at) {
        (false, _) => Ok(None),
        (true, Some(Where::V1(index))) => Ok(Some(index)),
        (true, Some(Where::V2)) => Err(format!(
            "a command's own {what} limit needs the {what} controller in a cgroup v1 hierarchy; here it is cgroup v2's, where the sandbox's cgroup holds its runner and may not give controllers to a child (leave it out: the sandbox's own limit bounds the command)"
        )),
        (true, None) => Err(format!(
            "a command's own {what} limit needs the sandboxes' {what} controller, and none is in use ([limits] sets no {what} limit, or the controller is missing)"
        )),
    }
}

/// The cgroup v2 directory and each v1 `tasks` file of `dirs`, opened.
fn open_placement(dirs: &Dirs) -> io::Result<CgroupPlacement> {
    let tasks: Vec<PathBuf> = dirs.v1.iter().map(|dir| dir.join(V1_JOIN)).collect();
    open_placement_at(&dirs.v2, &tasks)
}

/// The file of a v1 cgroup a process joins it through: `tasks`, not
/// `cgroup.procs`. Every joiner is a single-threaded child writing `0`
/// (itself), so both move the same one thread; but a `cgroup.procs`
/// write takes the kernel's global `cgroup_threadgroup_rwsem` for
/// writing, which waits for an RCU grace period (7-25 ms on a loaded
/// 2-CPU host, the most of a cold start), while a write of `0` to `tasks`
/// moves only the calling thread and skips that lock (measured on 6.18:
/// 0.03 ms against 7-25 ms; a kernel without that shortcut takes the same
/// lock for both).
pub(super) const V1_JOIN: &str = "tasks";

/// `v2` and each of `v1_procs` (v1 `tasks` files), opened.
pub(super) fn open_placement_at(v2: &Path, v1_procs: &[PathBuf]) -> io::Result<CgroupPlacement> {
    let v2_dir = open(v2, libc::O_RDONLY | libc::O_DIRECTORY)?;
    let v1_procs = v1_procs
        .iter()
        .map(|procs| open(procs, libc::O_WRONLY))
        .collect::<io::Result<_>>()?;
    Ok(CgroupPlacement {
        v2_dir,
        v1_procs,
        cpus: None,
    })
}

/// `sandboxd` for the default state directory, else `sandboxd-<hash>`.
pub fn default_root_name(settings: &TreeSettings) -> String {
    if settings.default_state_dir {
        return "sandboxd".to_string();
    }
    let hex = crate::digest::sha256_hex(settings.state_dir.as_os_str().as_bytes(), 6);
    format!("sandboxd-{hex}")
}

/// True when systemd delegated this cgroup (`Delegate=yes` sets the
/// `trusted.delegate` attribute, or `user.delegate` for a user manager).
fn is_delegated(dir: &Path) -> bool {
    ["trusted.delegate", "user.delegate"].iter().any(|name| {
        let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return false;
        };
        let name = std::ffi::CString::new(*name).expect("no NUL in a constant");
        let mut value = [0u8; 8];
        // SAFETY: C strings and a buffer of the length given.
        let n = unsafe {
            libc::getxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        n > 0 && value[..n as usize].starts_with(b"1")
    })
}

/// Moves every process of `root` (the daemon, and anything started with
/// it) into `root/daemon`, so `root` may have controllers for its children.
fn move_into_leaf(root: &Path) -> io::Result<()> {
    let leaf = root.join(DAEMON_LEAF);
    make_dir(&leaf)?;
    let procs = std::fs::read_to_string(root.join("cgroup.procs"))?;
    for pid in procs.lines().map(str::trim).filter(|pid| !pid.is_empty()) {
        match kill::write_file(&leaf.join("cgroup.procs"), pid) {
            Ok(()) => {}
            // Exited meanwhile.
            Err(error) if error.raw_os_error() == Some(libc::ESRCH) => {}
            Err(error) => return Err(named(&leaf, error)),
        }
    }
    tracing::info!(leaf = %leaf.display(), "moved the daemon into a leaf cgroup of its own");
    Ok(())
}

/// Enables `controller` in `cgroup.subtree_control` of every cgroup from
/// the mount down to `dir`'s parent and of `dir`, so `dir`'s children get it.
fn enable_down_to(mount: &Path, dir: &Path, controller: Controller) -> io::Result<()> {
    let relative = dir.strip_prefix(mount).unwrap_or(Path::new(""));
    let mut level = mount.to_path_buf();
    let mut levels = vec![level.clone()];
    for part in relative.components() {
        level.push(part);
        levels.push(level.clone());
    }
    for level in levels {
        let control = level.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&control)?;
        if enabled
            .split_ascii_whitespace()
            .any(|name| name == controller.name())
        {
            continue;
        }
        kill::write_file(&control, &format!("+{}", controller.name()))
            .map_err(|error| named(&control, error))?;
    }
    Ok(())
}

fn summary(
    sandboxes: &Path,
    kill_method: &str,
    limits: &Limits,
    v2: &[Controller],
    v1: &[Controller],
    unenforced: &[Controller],
) -> String {
    let names = |controllers: &[Controller]| {
        controllers
            .iter()
            .map(|controller| controller.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let limit = |controller: Controller| match controller {
        Controller::Memory => format!("memory {}", show_bytes(limits.memory)),
        Controller::Pids => format!("pids {}", limits.pids),
        Controller::Cpu => format!("cpu {}", limits.cpu),
        Controller::Freezer => String::new(),
    };
    let enforced: Vec<String> = [Controller::Memory, Controller::Pids, Controller::Cpu]
        .into_iter()
        .filter(|controller| v2.contains(controller) || v1.contains(controller))
        .map(limit)
        .collect();
    let mut text = format!("cgroup v2 {} (kill: {kill_method}", sandboxes.display());
    if !v2.is_empty() {
        text.push_str(&format!("; v2: {}", names(v2)));
    }
    if !v1.is_empty() {
        text.push_str(&format!("; v1: {}", names(v1)));
    }
    text.push_str(&format!(
        "; limits: {})",
        if enforced.is_empty() {
            "none".to_string()
        } else {
            enforced.join(", ")
        }
    ));
    if !unenforced.is_empty() {
        text.push_str(&format!(
            " — NOT ENFORCED (controller unavailable): {}",
            names(unenforced)
        ));
    }
    text
}

fn make_dir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(named(dir, error)),
    }
}

fn open(path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a NUL byte in a cgroup path"))?;
    // SAFETY: open with a C string; the result is checked.
    let fd = unsafe { libc::open(c_path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(named(path, io::Error::last_os_error()));
    }
    // SAFETY: a descriptor open just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The error with the path it was about. The original stays its source,
/// so its errno can still be told (see [`crate::fd_limit::errno_of`]).
fn named(path: &Path, error: io::Error) -> io::Error {
    io::Error::new(
        error.kind(),
        PathError {
            path: path.to_path_buf(),
            error,
        },
    )
}

/// An I/O error on a cgroup file, naming the file.
#[derive(Debug)]
struct PathError {
    path: PathBuf,
    error: io::Error,
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

impl std::error::Error for PathError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drivers::local_process::launch::clone_exec::{ExecPlan, Privileges};
    use std::ffi::OsStr;

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// A tree under a root of this test's own, removed at the end.
    struct TestTree {
        tree: CgroupTree,
    }

    impl TestTree {
        fn new(name: &str, limits: Limits) -> Option<TestTree> {
            let layout = Layout::detect();
            let v2 = layout.v2.clone()?;
            let root = v2
                .mount
                .join(format!("sandboxd-unit-{}-{name}", std::process::id()));
            let settings = TreeSettings {
                root: Some(&root),
                limits,
                state_dir: Path::new("/nonexistent"),
                default_state_dir: false,
            };
            Some(TestTree {
                tree: CgroupTree::set_up(&layout, &settings).expect("a writable cgroup v2 as root"),
            })
        }
    }

    impl Drop for TestTree {
        fn drop(&mut self) {
            let _ = kill::kill_children_and_remove(self.tree.sandboxes(), Duration::from_secs(5));
            self.tree.remove_empty();
        }
    }

    fn null_stdio() -> [OwnedFd; 3] {
        let open = || {
            OwnedFd::from(
                std::fs::File::options()
                    .write(true)
                    .open("/dev/null")
                    .unwrap(),
            )
        };
        [open(), open(), open()]
    }

    fn pids_in(dir: &Path) -> Vec<i32> {
        std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.parse().ok())
            .collect()
    }

    #[tokio::test]
    async fn where_clone3_is_refused_the_child_writes_itself_into_its_cgroups_first() {
        if !is_root() {
            eprintln!("skipped: needs root to make cgroups");
            return;
        }
        let limits = Limits {
            memory: 128 << 20,
            pids: 32,
            cpu: 0.0,
        };
        let Some(test) = TestTree::new("fallback", limits) else {
            eprintln!("skipped: no cgroup v2 here");
            return;
        };
        let base = "sbx-ses-000000000002";
        let plan = ExecPlan::new(
            OsStr::new("/bin/sleep"),
            ["300"],
            [("PATH", "/usr/bin:/bin")],
            OsStr::new("/"),
            null_stdio(),
            Privileges::default(),
        )
        .unwrap()
        .in_cgroup(test.tree.create(base).unwrap());
        let runner = plan.spawn_with_clone().unwrap();
        let dirs = test.tree.dirs(base);
        for dir in std::iter::once(&dirs.v2).chain(&dirs.v1) {
            assert_eq!(pids_in(dir), [runner.pid], "not in {}", dir.display());
        }
        kill::kill(&dirs).unwrap();
        assert!(kill::wait_empty(&dirs.v2, Duration::from_secs(10)).unwrap());
        runner.wait().await.unwrap();
        kill::remove(&dirs).unwrap();
    }

    #[tokio::test]
    async fn a_runner_is_cloned_into_its_cgroup_with_limits_and_nothing_of_it_survives_the_kill() {
        if !is_root() {
            eprintln!("skipped: needs root to make cgroups");
            return;
        }
        let limits = Limits {
            memory: 256 << 20,
            pids: 64,
            cpu: 0.5,
        };
        let Some(test) = TestTree::new("clone", limits) else {
            eprintln!("skipped: no cgroup v2 here");
            return;
        };
        let tree = &test.tree;
        let base = "sbx-ses-000000000001";
        let placement = tree.create(base).unwrap();
        // A child that leaves its session and process group, and one more
        // that double-forks away, then the runner itself sleeps.
        let script = "(setsid sleep 300 &); (cd / && setsid sh -c 'sleep 300 &' &); exec sleep 300";
        let plan = ExecPlan::new(
            OsStr::new("/bin/sh"),
            ["-c", script],
            [("PATH", "/usr/bin:/bin")],
            OsStr::new("/"),
            null_stdio(),
            Privileges::default(),
        )
        .unwrap()
        .in_cgroup(placement);
        let runner = plan.spawn().unwrap();
        let dirs = tree.dirs(base);
        let own = std::fs::read_to_string(format!("/proc/{}/cgroup", runner.pid)).unwrap();
        let v2_line = own.lines().find(|line| line.starts_with("0::")).unwrap();
        assert!(
            v2_line.ends_with(&format!("/sandboxes/{base}")),
            "not in its v2 cgroup: {own}"
        );
        for dir in &dirs.v1 {
            assert!(
                pids_in(dir).contains(&(runner.pid)),
                "not in {}: {own}",
                dir.display()
            );
        }
        // Every limit file it was given holds its value.
        for (place, file) in &tree.limit_files {
            let path = dir_of(&dirs, *place).join(file.name);
            match std::fs::read_to_string(&path) {
                Ok(text) => assert_eq!(text.trim(), file.value, "{}", path.display()),
                Err(error) => assert!(file.optional, "{}: {error}", path.display()),
            }
        }
        assert!(kill::populated(&dirs.v2).unwrap());
        // The runner, the setsid sleep, and the double-forked one.
        let mut seen = Vec::new();
        for _ in 0..100 {
            seen = pids_in(&dirs.v2);
            if seen.len() >= 3 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            seen.len() >= 3,
            "the escapees were not all started: {seen:?}"
        );
        kill::kill(&dirs).unwrap();
        assert!(kill::wait_empty(&dirs.v2, Duration::from_secs(10)).unwrap());
        let status = runner.wait().await.unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        for pid in seen {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            assert!(
                matches!(state, None | Some("Z") | Some("X")),
                "pid {pid} survived: {stat}"
            );
        }
        assert_eq!(tree.exit_facts(base), ExitFacts::default());
        kill::remove(&dirs).unwrap();
        assert!(!dirs.v2.exists() && dirs.v1.iter().all(|dir| !dir.exists()));
    }
}
