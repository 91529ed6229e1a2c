//! The listening socket: where it lives, who may reach it, and never
//! stealing it from a daemon that is still serving.
//!
//! Under systemd the socket unit binds it and passes it in (see
//! `crate::systemd::activation`): then it is served as given, and nothing
//! here touches the path. Otherwise the daemon binds it itself, as below.
//!
//! The socket is the trust boundary (mode 0660, a dedicated group), so it
//! is bound before anything else happens: a second daemon pointed at the
//! same socket refuses here, before its driver can touch the state of the
//! first. A socket file left by a daemon that died is stale — nothing
//! answers a connect on it — and is replaced; one that answers is never
//! removed. Anything else at the path is the operator's, and is refused by
//! name rather than deleted.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
use nix::unistd::{Gid, Group};

use crate::config::Config;
use crate::systemd::Inherited;

/// The mode of a socket directory we create: the group may traverse it.
const DIR_MODE: u32 = 0o750;
/// The socket's mode: owner and group may connect, nobody else.
const SOCKET_MODE: u32 = 0o660;

/// Why the daemon cannot listen.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("another sandboxd is already serving on {}; refusing to start a second one", .0.display())]
    AlreadyServing(PathBuf),
    #[error("{} exists and is not a socket; refusing to replace it", .0.display())]
    NotASocket(PathBuf),
    #[error("cannot tell whether the socket {} is still in use (connecting failed: {source}); refusing to replace it", .path.display())]
    Unverifiable { path: PathBuf, source: Errno },
    #[error("socket_group '{0}' is not a known group")]
    UnknownGroup(String),
    #[error("cannot look up socket_group '{group}': {source}")]
    GroupLookup { group: String, source: Errno },
    #[error("cannot give {} to group {gid}: {source}", .path.display())]
    Chown {
        path: PathBuf,
        gid: Gid,
        source: Errno,
    },
    #[error("socket path {} has no parent directory", .0.display())]
    NoParent(PathBuf),
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SocketError {
    let path = path.to_path_buf();
    move |source| SocketError::Io {
        action,
        path,
        source,
    }
}

/// A listener ready to be handed to tokio, and the socket file to remove
/// at exit when this daemon created it.
#[derive(Debug)]
pub struct ObtainedListener {
    /// Already non-blocking, as `tokio::net::UnixListener::from_std` requires.
    pub listener: UnixListener,
    /// `None` when the socket is not ours to remove (an inherited one).
    pub socket_file: Option<SocketFile>,
    /// Where callers reach it, for logs and `status`.
    pub path: PathBuf,
}

/// Obtains the listening socket: the one systemd passed, when it passed
/// one, else one bound at the configured path.
///
/// This is the one place that decides where the listener comes from.
pub fn obtain_listener(
    config: &Config,
    inherited: Option<Inherited>,
) -> Result<ObtainedListener, SocketError> {
    match inherited {
        Some(inherited) => Ok(adopt(config, inherited)),
        None => bind(&config.socket, config.socket_group.as_deref()),
    }
}

/// Serves a socket systemd passed. Its path, mode and group are the socket
/// unit's business; where they differ from the configuration, the
/// configuration is the one that is not in force, and a warning says so.
fn adopt(config: &Config, inherited: Inherited) -> ObtainedListener {
    let path = inherited.path.unwrap_or_else(|| config.socket.clone());
    tracing::info!(
        socket = %path.display(),
        name = inherited.name.as_deref().unwrap_or("-"),
        "serving the socket systemd passed (socket activation)"
    );
    if path != config.socket {
        tracing::warn!(
            socket = %path.display(),
            configured = %config.socket.display(),
            "the socket systemd passed is not the configured one; serving the one passed"
        );
    }
    if let Some(group) = config.socket_group.as_deref() {
        let actual = fs::metadata(&path).map(|metadata| metadata.gid()).ok();
        let wanted = resolve_group(group).ok().map(Gid::as_raw);
        if actual.is_some() && wanted.is_some() && actual != wanted {
            tracing::warn!(
                socket = %path.display(),
                socket_group = group,
                actual_gid = actual,
                "the passed socket's group is not socket_group: set SocketGroup= in sandboxd.socket"
            );
        }
    }
    ObtainedListener {
        listener: inherited.listener,
        socket_file: None,
        path,
    }
}

/// Binds `path`: creates its directory if missing, replaces a stale socket,
/// refuses a live one or a non-socket, then sets mode 0660 and the group.
pub fn bind(path: &Path, group: Option<&str>) -> Result<ObtainedListener, SocketError> {
    // Resolved first, so a typo fails before anything is created.
    let gid = group.map(resolve_group).transpose()?;
    prepare_directory(path, gid)?;
    clear_stale(path)?;
    let listener = UnixListener::bind(path).map_err(io_error("bind the socket", path))?;
    // From here on the file is ours: an error below removes it again.
    let socket_file = SocketFile::adopt(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(io_error("set the mode of", path))?;
    if let Some(gid) = gid {
        chown_group(path, gid)?;
    }
    listener
        .set_nonblocking(true)
        .map_err(io_error("make non-blocking the socket", path))?;
    Ok(ObtainedListener {
        listener,
        socket_file: Some(socket_file),
        path: path.to_path_buf(),
    })
}

/// A group name, or a numeric gid.
fn resolve_group(group: &str) -> Result<Gid, SocketError> {
    if let Ok(number) = group.parse::<u32>() {
        return Ok(Gid::from_raw(number));
    }
    match Group::from_name(group) {
        Ok(Some(found)) => Ok(found.gid),
        Ok(None) => Err(SocketError::UnknownGroup(group.to_string())),
        Err(source) => Err(SocketError::GroupLookup {
            group: group.to_string(),
            source,
        }),
    }
}

fn chown_group(path: &Path, gid: Gid) -> Result<(), SocketError> {
    nix::unistd::chown(path, None, Some(gid)).map_err(|source| SocketError::Chown {
        path: path.to_path_buf(),
        gid,
        source,
    })
}

/// Creates the socket's directory when it is missing, mode 0750 and in the
/// socket's group. A directory that already exists (`/run/user/1000`,
/// `/tmp`, one made by systemd-tmpfiles) is left exactly as it is: it is
/// not ours to change. Missing ancestors get the ordinary mode: only the
/// socket's own directory is a gate, and a 0750 ancestor would also lock
/// out everything else below it (a state directory whose runners run as
/// another user, say).
fn prepare_directory(path: &Path, gid: Option<Gid>) -> Result<(), SocketError> {
    let parent = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .ok_or_else(|| SocketError::NoParent(path.to_path_buf()))?;
    if parent.is_dir() {
        return Ok(());
    }
    if let Some(ancestor) = parent.parent() {
        fs::create_dir_all(ancestor).map_err(io_error("create the directory", ancestor))?;
    }
    match fs::DirBuilder::new().mode(DIR_MODE).create(parent) {
        Ok(()) => {}
        // Another process made it meanwhile: then it is theirs, as above.
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(error) => return Err(io_error("create the socket directory", parent)(error)),
    }
    // The umask may have taken the group's bits away.
    fs::set_permissions(parent, fs::Permissions::from_mode(DIR_MODE))
        .map_err(io_error("set the mode of", parent))?;
    if let Some(gid) = gid {
        chown_group(parent, gid)?;
    }
    Ok(())
}

/// Makes `path` free to bind, or explains why it must not be.
fn clear_stale(path: &Path) -> Result<(), SocketError> {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(io_error("inspect", path)(error)),
    };
    if !metadata.file_type().is_socket() {
        return Err(SocketError::NotASocket(path.to_path_buf()));
    }
    match probe_while_live(path) {
        Ok(()) | Err(Errno::EAGAIN) => Err(SocketError::AlreadyServing(path.to_path_buf())),
        Err(Errno::ECONNREFUSED) => {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(io_error("remove the stale socket", path)(error)),
            }
            tracing::info!(socket = %path.display(), "removed a stale socket left by a daemon that is gone");
            Ok(())
        }
        // Removed between our look and our connect: the path is free.
        Err(Errno::ENOENT) => Ok(()),
        Err(source) => Err(SocketError::Unverifiable {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// How long a listener must keep answering before it counts as a live
/// daemon's. A daemon SIGKILLed while it was cloning a process leaves that
/// child holding every descriptor, its listener too, until the child execs
/// (its close-on-exec descriptors close then) or dies: for a moment the
/// dead daemon's socket still takes connections (seen under load: a
/// restart 20 ms after a SIGKILL refused to start). A live daemon's socket
/// answers throughout; only its second's start pays the wait.
const LIVE_FOR: Duration = Duration::from_secs(3);
const LIVE_POLL: Duration = Duration::from_millis(50);

/// [`probe_socket`], again until it is refused or [`LIVE_FOR`] has passed:
/// the last answer.
fn probe_while_live(path: &Path) -> Result<(), Errno> {
    let deadline = Instant::now() + LIVE_FOR;
    loop {
        let probed = probe_socket(path);
        if !matches!(probed, Ok(()) | Err(Errno::EAGAIN)) || Instant::now() >= deadline {
            return probed;
        }
        std::thread::sleep(LIVE_POLL);
    }
}

/// Connects to the socket without blocking. `Ok` or `EAGAIN` (a full
/// accept backlog) mean a live listener; `ECONNREFUSED` means none.
fn probe_socket(path: &Path) -> Result<(), Errno> {
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let address = UnixAddr::new(path)?;
    socket::connect(fd.as_raw_fd(), &address)
}

/// A socket file this daemon created. Dropping it removes the file — but
/// only while the path still names that same file, so a daemon that
/// outlived its socket never deletes a successor's.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    device: u64,
    inode: u64,
}

impl SocketFile {
    fn adopt(path: &Path) -> Result<SocketFile, SocketError> {
        let metadata = fs::symlink_metadata(path).map_err(io_error("inspect", path))?;
        Ok(SocketFile {
            path: path.to_path_buf(),
            device: metadata.dev(),
            inode: metadata.ino(),
        })
    }

    fn is_still_ours(&self) -> bool {
        fs::symlink_metadata(&self.path)
            .map(|metadata| metadata.dev() == self.device && metadata.ino() == self.inode)
            .unwrap_or(false)
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if !self.is_still_ours() {
            tracing::debug!(socket = %self.path.display(), "socket file is gone or replaced; leaving it");
            return;
        }
        match fs::remove_file(&self.path) {
            Ok(()) => tracing::debug!(socket = %self.path.display(), "removed the socket file"),
            Err(error) => {
                tracing::warn!(socket = %self.path.display(), %error, "cannot remove the socket file")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use crate::test_dir::TestDir;

    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn creates_the_directory_and_sets_the_modes() {
        let dir = TestDir::new("sock");
        let path = dir.0.join("run").join("s.sock");
        let obtained = bind(&path, None).unwrap();
        assert_eq!(mode(&dir.0.join("run")), DIR_MODE);
        assert_eq!(mode(&path), SOCKET_MODE);
        UnixStream::connect(&path).expect("the bound socket accepts connections");
        drop(obtained);
        assert!(!path.exists(), "dropping the socket file removes it");
    }

    #[test]
    fn only_the_socket_directory_is_locked_down() {
        let dir = TestDir::new("sock");
        let path = dir.0.join("a").join("run").join("s.sock");
        let _obtained = bind(&path, None).unwrap();
        assert_eq!(mode(&dir.0.join("a").join("run")), DIR_MODE);
        assert_ne!(
            mode(&dir.0.join("a")) & 0o005,
            0,
            "an ancestor stays traversable by others"
        );
    }

    #[test]
    fn leaves_an_existing_directory_alone() {
        let dir = TestDir::new("sock");
        fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o755)).unwrap();
        let _obtained = bind(&dir.0.join("s.sock"), None).unwrap();
        assert_eq!(mode(&dir.0), 0o755);
    }

    #[test]
    fn refuses_a_live_socket_and_keeps_it() {
        let dir = TestDir::new("sock");
        let path = dir.0.join("s.sock");
        let live = UnixListener::bind(&path).unwrap();
        let error = bind(&path, None).unwrap_err();
        assert!(matches!(error, SocketError::AlreadyServing(_)), "{error:?}");
        assert!(
            error
                .to_string()
                .contains("another sandboxd is already serving on"),
            "{error}"
        );
        assert!(
            error.to_string().contains(&path.display().to_string()),
            "{error}"
        );
        assert!(path.exists(), "a live socket is never removed");
        UnixStream::connect(&path).expect("the first listener still serves");
        drop(live);
    }

    #[test]
    fn replaces_a_stale_socket() {
        let dir = TestDir::new("sock");
        let path = dir.0.join("s.sock");
        // Dropping a listener closes it but leaves its file behind, as a killed daemon does.
        drop(UnixListener::bind(&path).unwrap());
        assert!(
            UnixStream::connect(&path).is_err(),
            "nothing answers on the stale file"
        );
        let obtained = bind(&path, None).unwrap();
        UnixStream::connect(&path).expect("the new listener answers");
        drop(obtained);
    }

    #[test]
    fn refuses_a_regular_file_and_keeps_it() {
        let dir = TestDir::new("sock");
        let path = dir.0.join("s.sock");
        fs::write(&path, "not a socket").unwrap();
        let error = bind(&path, None).unwrap_err();
        assert!(matches!(error, SocketError::NotASocket(_)), "{error:?}");
        assert!(
            error.to_string().contains(&path.display().to_string()),
            "{error}"
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "not a socket");
    }

    #[test]
    fn gives_the_socket_to_the_group() {
        let dir = TestDir::new("sock");
        let path = dir.0.join("run").join("s.sock");
        // Our own primary group: a chown any user may do.
        let gid = nix::unistd::getegid();
        let _obtained = bind(&path, Some(&gid.as_raw().to_string())).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().gid(), gid.as_raw());
        assert_eq!(fs::metadata(dir.0.join("run")).unwrap().gid(), gid.as_raw());
    }

    #[test]
    fn an_unknown_group_fails_before_anything_is_created() {
        let dir = TestDir::new("sock");
        let path = dir.0.join("run").join("s.sock");
        let error = bind(&path, Some("no-such-group-sandboxd-test")).unwrap_err();
        assert!(matches!(error, SocketError::UnknownGroup(_)), "{error:?}");
        assert!(!dir.0.join("run").exists());
    }

    #[test]
    fn never_removes_a_successors_socket() {
        let dir = TestDir::new("sock");
        let path = dir.0.join("s.sock");
        let first = bind(&path, None).unwrap();
        // Someone replaced our file (a successor daemon, an operator). Renamed
        // rather than removed, so its inode cannot be reused by the successor.
        fs::rename(&path, dir.0.join("old.sock")).unwrap();
        let _successor = UnixListener::bind(&path).unwrap();
        drop(first);
        assert!(path.exists(), "the successor's socket is kept");
    }
}
