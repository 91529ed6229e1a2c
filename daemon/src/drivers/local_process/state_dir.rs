//! The state directory's layout, permissions and single-owner lock.
//!
//! ```text
//! <state dir>/            0711  traversable by runners, not listable
//!   sandboxd.lock               flock: one daemon per state dir
//!   sandboxes/<base>/     0711 / 0700 owned by its sandbox's uid (uid_pool.rs)
//!   sandboxes/.trash/     0700        deprovisioned files being deleted (trash.rs)
//!   sandboxes/.prepared/  0700        workspaces prepared ahead (prepared/host_parts.rs)
//!   logs/<base>.log       0700 / 0640 runner stdout+stderr, written by the daemon
//!   logs/.spare/          0700        emptied output files for reuse (logs/spare.rs)
//!   ledger/journal        0700 / 0600 what this daemon spawned (see ledger.rs)
//!   ledger/workspaces           0600 whose each workspace is (workspaces/catalog.rs)
//!   exits/<base>          0700 / 0644 a runner's wait status, by its init (sandbox-init/src/init.rs)
//!   identities/<uid>.*    0700 / 0644 a view's /etc/passwd and /etc/group (isolation/passwd_entry.rs)
//! ```

use std::fs::{DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::fcntl::{Flock, FlockArg};

pub struct StateDirs {
    pub sandboxes: PathBuf,
    /// Inside `sandboxes`, so moving a workspace there never crosses a
    /// file system (base names never start with a dot).
    pub trash: PathBuf,
    /// Inside `sandboxes` too: prepared workspaces, renamed into place at
    /// their take (see `prepared::host_parts`).
    pub prepared: PathBuf,
    pub logs: PathBuf,
    /// Inside `logs`, for the same reason.
    pub spares: PathBuf,
    pub ledger: PathBuf,
    /// Where each sandbox's init records its runner's wait status.
    pub exits: PathBuf,
}

impl StateDirs {
    pub fn prepare(root: &Path) -> anyhow::Result<StateDirs> {
        make_dir(root, 0o711)?;
        let dirs = StateDirs {
            sandboxes: root.join("sandboxes"),
            trash: root.join("sandboxes").join(".trash"),
            prepared: root
                .join("sandboxes")
                .join(super::prepared::host_parts::STAGING),
            logs: root.join("logs"),
            spares: root.join("logs").join(".spare"),
            ledger: root.join("ledger"),
            exits: root.join("exits"),
        };
        make_dir(&dirs.sandboxes, 0o711)?;
        make_dir(&dirs.trash, 0o700)?;
        make_dir(&dirs.prepared, 0o700)?;
        make_dir(&dirs.logs, 0o700)?;
        make_dir(&dirs.spares, 0o700)?;
        make_dir(&dirs.ledger, 0o700)?;
        make_dir(&dirs.exits, 0o700)?;
        Ok(dirs)
    }
}

/// Fails, naming the directory, when the runner user could not reach its
/// workspaces under `sandboxes` (every ancestor needs search permission for
/// it). Caught at start, it is one clear line instead of a cryptic
/// "permission denied" on every ensure.
pub fn check_reachable(sandboxes: &Path, uid: u32, gid: u32, who: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    for dir in sandboxes.ancestors() {
        let metadata =
            std::fs::metadata(dir).with_context(|| format!("cannot stat {}", dir.display()))?;
        let mode = metadata.mode();
        let searchable = if metadata.uid() == uid {
            mode & 0o100 != 0
        } else if metadata.gid() == gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !searchable {
            bail!(
                "runners (user {who}) cannot reach their workspaces in {}: {} has mode {:o} and owner {}:{} — choose a state_dir whose parents are searchable by that user",
                sandboxes.display(),
                dir.display(),
                mode & 0o7777,
                metadata.uid(),
                metadata.gid()
            );
        }
    }
    Ok(())
}

/// Creates the directory (and parents) and sets its mode, even if it existed.
fn make_dir(path: &Path, mode: u32) -> anyhow::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .with_context(|| format!("cannot create state directory {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set mode {mode:o} on {}", path.display()))
}

/// Takes the state directory for this daemon. A second daemon on the same
/// state directory would sweep the first one's runners as leftovers. The
/// lock lasts as long as the returned value.
pub fn lock(root: &Path) -> anyhow::Result<Flock<File>> {
    let path = root.join("sandboxd.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    // An earlier instance's group reaper keeps the lock for the moment it
    // takes to finish killing; a restart waits that out.
    let deadline = Instant::now() + LOCK_WAIT;
    let mut file = file;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => return Ok(locked),
            Err((returned, nix::errno::Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                file = returned;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                bail!(
                    "state directory {} is in use by another sandboxd (waited {LOCK_WAIT:?})",
                    root.display()
                )
            }
            Err((_, errno)) => {
                return Err(errno).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
    }
}

/// How long start-up waits for the state directory's lock.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Each runner holds a descriptor or two in the daemon; 1,000 runners need
/// about the common soft limit of 1,024 (see [`crate::fd_limit`]).
pub fn raise_open_file_limit() {
    crate::fd_limit::raise();
}
