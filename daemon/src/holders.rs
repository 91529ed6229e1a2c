//! Host-wide holder locks: how one daemon tells that another, whose
//! egress table or docker network it finds, is gone.
//!
//! Every daemon takes `/run/stigmer/holders/<name>` *shared* for each
//! host-wide object it uses (its `inet sandboxd_*` table, the docker
//! instance's network) and keeps it for its whole life; the kernel drops
//! the lock when the process ends, however it ends. Another daemon's
//! sweep tries the file *exclusively without blocking*: when that
//! succeeds, no live daemon holds the object, which is the proof the sweep
//! needs before it removes anything. Several daemons of one docker
//! instance share a network and its table: each holds the same file
//! shared, and the one that can take it exclusively at a clean stop is
//! the last, which alone removes them.
//!
//! Nothing here ever blocks on a lock: every `flock` is `LOCK_NB`, and the
//! only retry (a holder arriving while a sweep removes the same name) is
//! bounded. A file is unlinked only by whoever holds it exclusively; a
//! holder that locked a file which was unlinked meanwhile (its inode is no
//! longer the path's) opens the path again.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// Where the holder files live: host-wide, so every daemon of the host
/// sees every other's, and on a tmpfs, so a reboot (which clears tables
/// and bridges too) clears them.
pub const DIR: &str = "/run/stigmer/holders";

/// How long a holder retries while a sweep or a stopping daemon has its
/// name exclusively (only for as long as one bounded removal takes).
const HOLD_WAIT: Duration = Duration::from_secs(10);

/// How this daemon describes itself in the files it holds.
static ABOUT: OnceLock<String> = OnceLock::new();

/// Sets what this daemon writes of itself in every holder file (its
/// socket, state directory, instance): once, at start.
pub fn describe_this_daemon(about: String) {
    let _ = ABOUT.set(about);
}

/// One name this daemon holds shared for its life.
#[derive(Debug)]
pub struct Held {
    path: PathBuf,
    lock: Flock<File>,
    /// Set once [`Held::claim_last`] took the lock exclusively.
    exclusive: AtomicBool,
}

impl Held {
    /// Holds `name` under [`DIR`], describing this daemon in the file as
    /// [`describe_this_daemon`] said (what a sweep logs of it when it is
    /// gone).
    pub fn take(name: &str) -> Result<Held, String> {
        let about = ABOUT.get().map_or("", String::as_str);
        Held::take_in(Path::new(DIR), name, about)
    }

    /// The same under `dir`.
    pub fn take_in(dir: &Path, name: &str, about: &str) -> Result<Held, String> {
        let path = holder_path(dir, name)?;
        std::fs::create_dir_all(dir)
            .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        let deadline = Instant::now() + HOLD_WAIT;
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
                .map_err(|error| format!("cannot open {}: {error}", path.display()))?;
            match Flock::lock(file, FlockArg::LockSharedNonblock) {
                Ok(lock) if is_current(&lock, &path) => {
                    let mut held = Held {
                        path,
                        lock,
                        exclusive: AtomicBool::new(false),
                    };
                    held.describe(about);
                    return Ok(held);
                }
                // Unlinked by a sweep after our open: open the path anew.
                Ok(_stale) => {}
                Err((_, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err((_, Errno::EWOULDBLOCK)) => {
                    return Err(format!(
                        "{} stayed locked exclusively by another sandboxd for {HOLD_WAIT:?}",
                        path.display()
                    ))
                }
                Err((_, errno)) => return Err(format!("cannot lock {}: {errno}", path.display())),
            }
        }
    }

    /// At a clean stop: true when no other daemon holds the name, and this
    /// one now holds it exclusively (so none can take it until
    /// [`Held::release`]); the caller then removes the object. False when
    /// another holds it too: the object is still in use.
    pub fn claim_last(&self) -> bool {
        // Linux converts a flock by dropping the shared lock and trying the
        // exclusive one; on failure the shared one is taken back, best
        // effort (this daemon is stopping either way).
        match self.lock.relock(FlockArg::LockExclusiveNonblock) {
            Ok(()) => {
                self.exclusive.store(true, Ordering::SeqCst);
                true
            }
            Err(_) => {
                let _ = self.lock.relock(FlockArg::LockSharedNonblock);
                false
            }
        }
    }

    /// Lets go; after [`Held::claim_last`] the file goes too, since the
    /// object it stood for was removed.
    pub fn release(self) {
        if self.exclusive.load(Ordering::SeqCst) && is_current(&self.lock, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes who holds it (several holders of one name overwrite each
    /// other: the last to start is named). Best effort.
    fn describe(&mut self, about: &str) {
        let file: &mut File = &mut self.lock;
        let _ = file.set_len(0);
        let _ = file.write_all(format!("pid {} {about}\n", std::process::id()).as_bytes());
    }
}

/// What a sweep found for one name.
#[derive(Debug)]
pub enum Probe {
    /// No holder file: the object was made by a sandboxd from before
    /// holder locks, or by hand; nothing proves its daemon gone.
    NoFile,
    /// A live daemon holds it (what its file says of it).
    Held(String),
    /// Held exclusively: another daemon's sweep is removing the object, or
    /// the last daemon of a docker instance is removing it at its stop
    /// (what the file says of the daemon that held it). Nothing to do here.
    BeingRemoved(String),
    /// No daemon holds it: the one that did is gone. Held exclusively
    /// until dropped, so no daemon can take it up meanwhile.
    Free(Gone),
}

/// A name whose holders are all gone, held exclusively by the sweep.
#[derive(Debug)]
pub struct Gone {
    path: PathBuf,
    lock: Flock<File>,
    about: String,
}

impl Gone {
    /// What the file said of its last holder.
    pub fn about(&self) -> &str {
        &self.about
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The object was removed: the file goes with it.
    pub fn forget(self) {
        if is_current(&self.lock, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Tries `name` under [`DIR`] exclusively, without blocking.
pub fn probe(name: &str) -> Probe {
    probe_in(Path::new(DIR), name)
}

/// The same under `dir`.
pub fn probe_in(dir: &Path, name: &str) -> Probe {
    let Ok(path) = holder_path(dir, name) else {
        return Probe::NoFile;
    };
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Probe::NoFile,
        Err(error) => {
            return Probe::Held(format!(
                "unknown ({} cannot be opened: {error})",
                path.display()
            ))
        }
    };
    let about = read_about(&file);
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) if is_current(&lock, &path) => {
            // Read again under the lock: the last holder's own words.
            let about = read_about(&lock);
            Probe::Free(Gone { path, lock, about })
        }
        // Replaced meanwhile: a new holder may be taking it; leave it be.
        Ok(_stale) => Probe::Held(about),
        // Someone holds it. Live daemons hold it shared, so a shared lock
        // is granted beside them; only an exclusive holder (a removal under
        // way) refuses that too.
        Err((file, _)) => match Flock::lock(file, FlockArg::LockSharedNonblock) {
            Ok(_shared) => Probe::Held(about),
            Err(_) => Probe::BeingRemoved(about),
        },
    }
}

/// `<dir>/<name>`, for a name that is a plain file name.
fn holder_path(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
    if !plain {
        return Err(format!("'{name}' cannot name a holder file"));
    }
    Ok(dir.join(name))
}

/// True when the locked descriptor is still the file at `path` (not one a
/// sweep unlinked after it was opened).
fn is_current(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

fn read_about(file: &File) -> String {
    use std::os::unix::fs::FileExt as _;
    // From the start each time, whatever the descriptor's offset.
    let mut bytes = vec![0; 1024];
    let len = file.read_at(&mut bytes, 0).unwrap_or(0);
    let text = String::from_utf8_lossy(&bytes[..len]);
    let text = text.trim();
    if text.is_empty() {
        "a daemon that wrote nothing of itself".to_string()
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> crate::test_dir::TestDir {
        crate::test_dir::TestDir::new(&format!("holders-{name}"))
    }

    #[test]
    fn a_held_name_is_not_free_and_a_released_one_is() {
        let dir = dir("held");
        let held = Held::take_in(dir.0.as_path(), "sandboxd_0123", "socket /x").unwrap();
        match probe_in(dir.0.as_path(), "sandboxd_0123") {
            Probe::Held(about) => assert!(about.contains("socket /x"), "{about}"),
            other => panic!("a held name probed as {other:?}"),
        }
        // A crash: the lock goes with the process, the file stays.
        drop(held);
        match probe_in(dir.0.as_path(), "sandboxd_0123") {
            Probe::Free(gone) => {
                assert!(gone.about().contains("socket /x"), "{}", gone.about());
                gone.forget();
            }
            other => panic!("a released name probed as {other:?}"),
        }
        assert!(matches!(
            probe_in(dir.0.as_path(), "sandboxd_0123"),
            Probe::NoFile
        ));
    }

    #[test]
    fn only_the_last_of_several_holders_claims_the_name() {
        let dir = dir("last");
        let first = Held::take_in(dir.0.as_path(), "x-sandboxd-egress", "one").unwrap();
        let second = Held::take_in(dir.0.as_path(), "x-sandboxd-egress", "two").unwrap();
        assert!(!first.claim_last(), "another daemon still holds it");
        // The failed claim kept the first's shared lock.
        assert!(matches!(
            probe_in(dir.0.as_path(), "x-sandboxd-egress"),
            Probe::Held(_)
        ));
        second.release();
        assert!(first.claim_last());
        let path = first.path().to_path_buf();
        first.release();
        assert!(!path.exists(), "the last holder's release removes the file");
    }

    #[test]
    fn a_name_another_sweep_is_removing_is_told_from_a_live_holder() {
        let dir = dir("removing");
        drop(Held::take_in(dir.0.as_path(), "sandboxd_cd", "gone one").unwrap());
        let Probe::Free(first_sweep) = probe_in(dir.0.as_path(), "sandboxd_cd") else {
            panic!("not free")
        };
        match probe_in(dir.0.as_path(), "sandboxd_cd") {
            Probe::BeingRemoved(about) => assert!(about.contains("gone one"), "{about}"),
            other => panic!("a name under removal probed as {other:?}"),
        }
        first_sweep.forget();
    }

    #[test]
    fn a_holder_arriving_after_a_sweep_unlinked_the_file_holds_a_new_one() {
        let dir = dir("relink");
        drop(Held::take_in(dir.0.as_path(), "sandboxd_ab", "old").unwrap());
        let Probe::Free(gone) = probe_in(dir.0.as_path(), "sandboxd_ab") else {
            panic!("not free")
        };
        gone.forget();
        let held = Held::take_in(dir.0.as_path(), "sandboxd_ab", "new").unwrap();
        assert!(held.path().exists());
        assert!(matches!(
            probe_in(dir.0.as_path(), "sandboxd_ab"),
            Probe::Held(_)
        ));
    }

    #[test]
    fn a_name_with_a_slash_is_refused() {
        let dir = dir("names");
        assert!(Held::take_in(dir.0.as_path(), "../etc", "x").is_err());
        assert!(matches!(probe_in(dir.0.as_path(), "a/b"), Probe::NoFile));
    }
}
