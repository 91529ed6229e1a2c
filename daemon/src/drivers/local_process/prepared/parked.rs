//! One view prepared ahead of its sandbox: made on the pool's background
//! thread ([`ViewMaker::park`]), held by its holder process
//! (`sandboxd_init::view_holder`), and taken by one sandbox on a spawner thread
//! ([`ParkedView::enter`]), which joins its namespaces, mounts the
//! sandbox's workspace into it, and starts the runner there.
//!
//! Why the runner joins from the daemon rather than being started by the
//! holder: the runner's start (privileges, user switch, keyring, Landlock,
//! clean start, seccomp) stays the one clone child every runner of the
//! daemon has, with the filters prepared once; the holder never needs the
//! sandbox's uid, environment or token; and the runner is the daemon's own
//! child, so its exit status is read directly, as under `uid-cgroup`.
//!
//! The spawner thread's round trip: `unshare(CLONE_FS)` once per thread (a
//! thread sharing its file-system context may not change mount
//! namespace), then `setns` into the holder's mount, PID and IPC
//! namespaces by its pidfd (which needs `CAP_SYS_ADMIN`, `CAP_SYS_CHROOT`,
//! and `CAP_SYS_PTRACE` to reach a non-dumpable holder), and back into the
//! daemon's own by the descriptors it opened first. A thread that cannot
//! get back would start the next sandbox in the wrong view: the daemon
//! aborts instead.

use std::ffi::CString;
use std::fs::{DirBuilder, File};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::super::isolation::init_binary::InitBinary;
use super::super::isolation::mount_program::{
    MountAttr, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, MOVE_MOUNT_F_EMPTY_PATH,
    OPEN_TREE_CLONE,
};
use super::super::isolation::mounts::{cover_in, Cover, ViewSettings, READ_ONLY_COVER};
use super::super::isolation::namespaces::NAMESPACES;
use super::super::isolation::passwd_entry::{self, IdentityFiles, GROUP, PASSWD};
use super::super::isolation::private_network::PrivateNetwork;
use super::super::launch::child_exits::{ChildExits, RunnerProcess};
use super::super::launch::clone_exec::{ExecPlan, Privileges};
use super::super::launch::holder::Holder;
use super::super::pidfd;
use sandboxd_init::init::{DROP_BOUNDING_SET, KEEP_BOUNDING_SET};
use sandboxd_init::view_holder;

/// What every view of the pool is made from.
pub struct ViewMaker {
    pub settings: ViewSettings,
    /// `sandboxd-init` (or the daemon's own binary), exec'd as each
    /// holder.
    pub exe: Arc<InitBinary>,
    /// The runner program bound into every view.
    pub program: PathBuf,
    /// Whether holders empty their bounding set (the daemon has CAP_SETPCAP).
    pub drop_bounding_set: bool,
    /// Each holder's standard input: it ends when the daemon does.
    pub lifeline: Lifeline,
    /// `Some`: each view gets its own network namespace, set up ahead with
    /// its relay.
    pub network: Option<Arc<PrivateNetwork>>,
    /// Where the views' `/etc/passwd` and `/etc/group` copies are written
    /// (see `passwd_entry`).
    pub identities_dir: PathBuf,
}

impl ViewMaker {
    /// Writes the passwd and group copies of a prepared view for `user`
    /// ahead, where every view mounts its workspace at one path (their
    /// home): its take then reads them back as they should be and writes
    /// nothing (a new uid's two files cost a start about 0.1 ms). What
    /// cannot be written now is written by the take.
    pub fn write_identity_ahead(&self, user: Option<(u32, u32)>) {
        let (Some((uid, gid)), Ok(home)) = (user, self.settings.workspace_at()) else {
            return;
        };
        if let Err(error) = passwd_entry::write_for(&self.identities_dir, uid, gid, home) {
            tracing::debug!(uid, %error, "cannot write a prepared view's /etc/passwd ahead: its take will");
        }
    }
}

/// A pipe whose write end only the daemon holds (close-on-exec, so no
/// child keeps it past its exec): every holder reads its end as standard
/// input and exits when it reads end-of-file, that is when the daemon is
/// gone however it went. (The parent-death signal is not enough: it did
/// not reach a holder, PID 1 of its namespace, when the daemon was
/// SIGKILLed, on Linux 6.18.)
pub struct Lifeline {
    read: OwnedFd,
    _write: OwnedFd,
}

impl Lifeline {
    pub fn new() -> io::Result<Lifeline> {
        let (read, write) = pipe()?;
        Ok(Lifeline {
            read,
            _write: write,
        })
    }
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptors pipe2 just made, owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// How long a holder may take to report itself ready (its exec and its
/// set-up: a few milliseconds on an idle host, much more on a loaded one).
const HOLDER_READY_TIMEOUT_MS: libc::c_int = 60_000;

/// A view built and held, not yet taken: dropped untaken, its holder is
/// killed (and reaped by its thread).
pub struct ParkedView {
    pid: libc::pid_t,
    holder: Holder,
    program: PathBuf,
    /// The covers it was built with (see [`ParkedView::cover_of`]).
    covers: Vec<Cover>,
    /// Where the holder's exit is reaped; nobody waits for it.
    _exit: RunnerProcess,
}

/// A step of taking a view that failed.
#[derive(Debug)]
pub struct TakeError {
    pub step: String,
    pub error: io::Error,
}

impl TakeError {
    fn at(step: impl Into<String>) -> impl FnOnce(io::Error) -> TakeError {
        let step = step.into();
        move |error| TakeError { step, error }
    }
}

impl ViewMaker {
    /// Builds one view in new namespaces and parks its holder (in a
    /// network namespace of its own, with its relay, under `[network]
    /// mode = "private"`). Call on the
    /// pool's background thread (a spawner-like thread that lives as long as
    /// the daemon: the holder dies with it), whose children `exits` reaps.
    pub fn park(&self, exits: &ChildExits) -> Result<ParkedView, String> {
        let network = self.network.as_ref().map(|private| private.start());
        // Looked up as the plan is made, from the same host tree.
        let covers = self.settings.covers();
        let mounts = self
            .settings
            .plan_prepared(&self.program)
            .prepare()
            .map_err(|error| format!("{error}"))?;
        let bounding_set = if self.drop_bounding_set {
            DROP_BOUNDING_SET
        } else {
            KEEP_BOUNDING_SET
        };
        // The holder's standard output: it writes one byte there once it is
        // non-dumpable and without privileges, and only then is the view
        // offered (a sandbox that joined it earlier would meet a holder
        // that any process of the same uid could still trace).
        let (ready_read, ready_write) =
            pipe().map_err(|error| format!("pipe for the holder's ready byte: {error}"))?;
        let plan = ExecPlan::new(
            "sandboxd-view".as_ref(),
            [view_holder::ARG, bounding_set],
            [] as [(&str, &str); 0],
            "/".as_ref(),
            [
                self.lifeline
                    .read
                    .try_clone()
                    .map_err(|error| format!("dup of the lifeline: {error}"))?,
                ready_write,
                dev_null()?,
            ],
            Privileges::default(),
        )?
        .into_prepared_view(self.exe.fd(), NAMESPACES, mounts);
        let network = network
            .map(|starting| starting.ready())
            .transpose()
            .map_err(|error| format!("the view's network: {error}"))?;
        // The holder is cloned into the namespace this thread is in.
        let inside = network
            .as_ref()
            .map(|network| network.enter())
            .transpose()
            .map_err(|error| format!("the view's network: {error}"))?;
        let spawned = plan.spawn();
        drop(inside);
        let relay = network.map(|network| network.into_relay());
        let cloned = spawned.map_err(|error| error.to_string())?;
        // The plan holds the ready pipe's write end: without it, the holder
        // is the only writer, so its death reads as end-of-file.
        drop(plan);
        let exit = exits.watch(cloned.pid, cloned.start_time);
        let view = match pidfd::open(cloned.pid) {
            Ok(pidfd) => ParkedView {
                pid: cloned.pid,
                holder: Holder::of_view(pidfd, relay),
                program: self.program.clone(),
                covers,
                _exit: exit,
            },
            Err(error) => {
                // SAFETY: our own child, not reaped (its watcher reaps it).
                unsafe { libc::kill(cloned.pid, libc::SIGKILL) };
                return Err(format!("pidfd_open of the view's holder: {error}"));
            }
        };
        // On an error, dropping `view` kills the holder.
        wait_for_ready_byte(&ready_read)?;
        Ok(view)
    }
}

impl ParkedView {
    /// The runner program this view was built for.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The mount that covers `path` in this view: what it was built with,
    /// not what the host has now, and no `stat` on a take's time.
    pub fn cover_of(&self, path: &Path) -> Option<Cover> {
        cover_in(&self.covers, path)
    }

    /// The holder's host pid.
    pub fn holder(&self) -> libc::pid_t {
        self.pid
    }

    /// Joins the view's namespaces on this (spawner) thread and mounts
    /// `workspace` (a directory of the daemon's) at `inside` (`/workspace`,
    /// or the same path), under `cover` (the mount that hides its parent in
    /// the view, see [`ParkedView::cover_of`]), and `identity` read-only
    /// over the view's `/etc/passwd` and `/etc/group`, as a cold view
    /// would. The thread is back in the daemon's own namespaces when the
    /// returned value is dropped; on an error it is back already.
    pub fn enter(
        &mut self,
        workspace: &Path,
        inside: &Path,
        cover: Option<&Cover>,
        identity: Option<&IdentityFiles>,
    ) -> Result<InsideView, TakeError> {
        let tree = detached_copy(workspace, false).map_err(TakeError::at(format!(
            "open_tree of the workspace {}",
            workspace.display()
        )))?;
        let mut files = Vec::new();
        for (path, target) in identity
            .iter()
            .flat_map(|files| [(&files.passwd, PASSWD), (&files.group, GROUP)])
        {
            let copy = detached_copy(path, true)
                .map_err(TakeError::at(format!("open_tree of {}", path.display())))?;
            files.push((copy, target));
        }
        let entered = self.enter_bare()?;
        if let Some(cover) = cover {
            make_mount_point(cover, inside)?;
        }
        move_into(&tree, inside).map_err(TakeError::at(format!(
            "move_mount of the workspace onto {}",
            inside.display()
        )))?;
        for (copy, target) in &files {
            move_into(copy, Path::new(target))
                .map_err(TakeError::at(format!("move_mount onto {target}")))?;
        }
        Ok(entered)
    }

    /// Joins the view's namespaces on this thread, mounting nothing (to
    /// park a runner inside, see `parked_runner`); back in the daemon's own
    /// when the returned value is dropped.
    pub fn enter_bare(&mut self) -> Result<InsideView, TakeError> {
        let Some(pidfd) = self.holder.pidfd() else {
            return Err(TakeError::at("a view without its holder")(
                io::Error::from_raw_os_error(libc::ESRCH),
            ));
        };
        enter_namespaces_of(pidfd, "setns into the prepared view")
    }

    /// The view, taken: from here on the holder lives exactly as long as
    /// the returned guard, which the sandbox's runner keeps (see
    /// `RunnerProcess`) until its exit is known.
    pub fn into_holder(self) -> Holder {
        self.holder
    }
}

/// Joins the mount, PID and IPC namespaces of the process of `pidfd` on
/// this thread (a spawner thread: a view's runner, or a command beside a
/// running sandbox's runner); back in the daemon's own when the returned
/// value is dropped. `step` names the join in an error.
pub fn enter_namespaces_of(pidfd: &OwnedFd, step: &str) -> Result<InsideView, TakeError> {
    // The network namespace too: a sandbox's own under `[network] mode =
    // "private"`, else the host's, which this thread is in already.
    HOST.with(|host| -> Result<InsideView, TakeError> {
        let host = host
            .as_ref()
            .map_err(|error| TakeError::at("unshare(CLONE_FS)")(clone_error(error)))?;
        setns(pidfd.as_raw_fd(), NAMESPACES | libc::CLONE_NEWNET).map_err(TakeError::at(step))?;
        Ok(InsideView {
            host: host.clone_fds(),
        })
    })
}

/// This spawner thread inside a prepared view's namespaces, until dropped.
pub struct InsideView {
    host: [RawFd; 4],
}

impl Drop for InsideView {
    fn drop(&mut self) {
        for (fd, namespace) in self.host.into_iter().zip(HOST_NAMESPACES) {
            if let Err(error) = setns(fd, namespace) {
                tracing::error!(%error, namespace, "a spawner thread cannot return from a prepared view to the daemon's namespaces: aborting rather than starting sandboxes in the wrong view");
                std::process::abort();
            }
        }
    }
}

/// The daemon's own namespaces, each reached back by its own descriptor.
const HOST_NAMESPACES: [libc::c_int; 4] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWNET,
];

/// This thread's way back: its own file-system context (so it may change
/// mount namespace) and descriptors of the daemon's namespaces.
struct HostNamespaces {
    fds: Vec<OwnedFd>,
}

impl HostNamespaces {
    fn open() -> io::Result<HostNamespaces> {
        // SAFETY: unshare with a plain flag; it affects this thread only.
        if unsafe { libc::unshare(libc::CLONE_FS) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let fds = ["mnt", "pid", "ipc", "net"]
            .into_iter()
            .map(|name| File::open(format!("/proc/thread-self/ns/{name}")).map(OwnedFd::from))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(HostNamespaces { fds })
    }

    fn clone_fds(&self) -> [RawFd; 4] {
        [
            self.fds[0].as_raw_fd(),
            self.fds[1].as_raw_fd(),
            self.fds[2].as_raw_fd(),
            self.fds[3].as_raw_fd(),
        ]
    }
}

thread_local! {
    static HOST: io::Result<HostNamespaces> = HostNamespaces::open();
}

fn clone_error(error: &io::Error) -> io::Error {
    match error.raw_os_error() {
        Some(errno) => io::Error::from_raw_os_error(errno),
        None => io::Error::other(error.to_string()),
    }
}

fn setns(fd: RawFd, namespaces: libc::c_int) -> io::Result<()> {
    // SAFETY: setns with a descriptor the caller holds open.
    if unsafe { libc::setns(fd, namespaces) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits for the holder's one byte on `ready` (see [`ViewMaker::park`]).
fn wait_for_ready_byte(ready: &OwnedFd) -> Result<(), String> {
    let mut poll = libc::pollfd {
        fd: ready.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let polled = loop {
        // SAFETY: one valid pollfd and a timeout.
        let polled = unsafe { libc::poll(&mut poll, 1, HOLDER_READY_TIMEOUT_MS) };
        if polled < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        break polled;
    };
    if polled < 0 {
        return Err(format!(
            "poll of the holder's ready pipe: {}",
            io::Error::last_os_error()
        ));
    }
    if polled == 0 {
        return Err(format!(
            "the view's holder did not report ready within {} s",
            HOLDER_READY_TIMEOUT_MS / 1000
        ));
    }
    let mut byte = 0u8;
    // SAFETY: a one-byte read into a live buffer from a descriptor we hold.
    let read = unsafe { libc::read(ready.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) };
    match read {
        1 => Ok(()),
        0 => Err("the view's holder exited during its set-up".into()),
        _ => Err(format!(
            "read of the holder's ready byte: {}",
            io::Error::last_os_error()
        )),
    }
}

/// `/dev/null`, read and write: a standard descriptor of a process the
/// pool starts.
pub(super) fn dev_null() -> Result<OwnedFd, String> {
    File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map(OwnedFd::from)
        .map_err(|error| format!("open /dev/null: {error}"))
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// A detached bind of `dir` (in the daemon's mount namespace), writable
/// (or `read_only`), `nosuid,nodev`, as the cold view binds it.
fn detached_copy(dir: &Path, read_only: bool) -> io::Result<OwnedFd> {
    let path = c_path(dir)?;
    // SAFETY: open_tree with a C string; the result is a new descriptor.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    let tree = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let (attr_set, attr_clr) = match read_only {
        true => (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_RDONLY, 0),
        false => (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, MOUNT_ATTR_RDONLY),
    };
    let attr = MountAttr {
        attr_set,
        attr_clr,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr on the detached tree's descriptor, with a
    // struct of the size given.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(tree)
}

/// Attaches the detached `tree` at `target` in this thread's mount namespace.
fn move_into(tree: &OwnedFd, target: &Path) -> io::Result<()> {
    let target = c_path(target)?;
    // SAFETY: move_mount of a detached tree's descriptor onto a C string path.
    let result = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The directories from `cover` down to `workspace`, made inside the
/// view's cover (writable for the moment when it is a read-only hiding
/// mount, as the cold view makes its mount points before the remount).
fn make_mount_point(cover: &Cover, workspace: &Path) -> Result<(), TakeError> {
    let remount = |read_only: bool| -> Result<(), TakeError> {
        let target = c_path(&cover.path).map_err(TakeError::at("remount of the cover"))?;
        // The mount, not its file system (see `mounts::READ_ONLY_COVER`).
        let flags = match read_only {
            true => READ_ONLY_COVER,
            false => READ_ONLY_COVER & !libc::MS_RDONLY,
        };
        // SAFETY: mount(2) with a C string that lives across the call.
        let result = unsafe {
            libc::mount(
                std::ptr::null(),
                target.as_ptr(),
                std::ptr::null(),
                flags,
                std::ptr::null(),
            )
        };
        if result < 0 {
            let what = if read_only { "read-only" } else { "writable" };
            return Err(TakeError::at(format!(
                "make {} {what} again",
                cover.path.display()
            ))(io::Error::last_os_error()));
        }
        Ok(())
    };
    if !cover.writable {
        remount(false)?;
    }
    let made = DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(workspace)
        .map_err(TakeError::at(format!(
            "make a mount point at {}",
            workspace.display()
        )));
    if !cover.writable {
        remount(true)?;
    }
    made
}
