//! Host-wide claims on sandbox uids, so that two daemons on one host never
//! hand a sandbox the same uid, whatever their `runner_uid_range` says.
//!
//! A uid's range and ledger are a daemon's own; two daemons with the same
//! (default) range would otherwise give a sandbox of each the same uid,
//! and either runner could read, ptrace and kill the other. So each uid a
//! daemon holds is also claimed in a directory every daemon on the host
//! shares (`uid_claims_dir`, default `/run/stigmer/uids`): a file named
//! after the uid, naming the claiming daemon's instance, state directory
//! and sandbox. It is made whole in a temporary file and `link`ed into
//! place, which fails if the name exists (the `O_EXCL` of a finished file:
//! no reader ever sees half a claim).
//!
//! A claim of another daemon *holds* while either
//! - that daemon is alive: its state directory's lock
//!   (`<state_dir>/sandboxd.lock`, see `state_dir.rs`) is held — by the
//!   daemon or, after a crash, by its group reaper until its runners are
//!   dead; or
//! - the sandbox's workspace still exists in that state directory: a
//!   stopped daemon keeps its sandboxes' uids across a restart, and the
//!   files in that workspace belong to the uid, so a sandbox given it
//!   would own them.
//!
//! Otherwise the claim is stale (its daemon and its workspace are gone, or
//! its state directory was deleted) and may be taken over. Creating and
//! taking over happen under an exclusive `flock` of `<dir>/.lock`, so two
//! daemons never both decide a uid is theirs; reading one's own claim (the
//! common case: every runner start) takes no lock.
//!
//! `/run` is emptied at boot: each daemon claims its ledger's uids again
//! at start, and one that finds a uid of its ledger claimed by another
//! (a clash) refuses that sandbox, with the other's name, until one of
//! the two is removed.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fmt;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The first line of every claim file (a later format gets another).
const HEADER: &str = "sandboxd uid claim v1";
/// The lock file taken while a claim is created or taken over.
const LOCK: &str = ".lock";
/// How long a claim waits for that lock. Its holders only read and link a
/// few small files, so a wait this long means the holder is stopped or
/// hung (a SIGSTOPped daemon): the sandbox fails with that said, rather
/// than every new sandbox of this daemon blocking a thread for ever.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Who claims a uid: a daemon (its instance and state directory) for one
/// of its sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    pub instance: String,
    pub state_dir: PathBuf,
    /// The sandbox's base name (its workspace is `<state_dir>/sandboxes/<it>`).
    pub sandbox: String,
}

impl Claimant {
    fn workspace(&self) -> PathBuf {
        self.state_dir.join("sandboxes").join(&self.sandbox)
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut text = format!("{HEADER}\ninstance {}\nstate_dir ", self.instance).into_bytes();
        text.extend_from_slice(self.state_dir.as_os_str().as_bytes());
        text.extend_from_slice(format!("\nsandbox {}\n", self.sandbox).as_bytes());
        text
    }

    fn parse(bytes: &[u8]) -> Option<Claimant> {
        let mut lines = bytes.split(|&byte| byte == b'\n');
        if lines.next()? != HEADER.as_bytes() {
            return None;
        }
        let mut value = |key: &str| {
            let line = lines.next()?;
            let rest = line.strip_prefix(key.as_bytes())?.strip_prefix(b" ")?;
            (!rest.is_empty()).then_some(rest)
        };
        let instance = String::from_utf8(value("instance")?.to_vec()).ok()?;
        let state_dir = PathBuf::from(OsStr::from_bytes(value("state_dir")?));
        let sandbox = String::from_utf8(value("sandbox")?.to_vec()).ok()?;
        Some(Claimant {
            instance,
            state_dir,
            sandbox,
        })
    }
}

/// Why a uid cannot be this daemon's.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Another daemon holds it (see the module doc).
    #[error("uid {uid} is claimed by sandboxd instance '{}' (state dir {}) for its sandbox {}, {why} — {path}: remove one of the two sandboxes, or give the daemons runner_uid_ranges that do not overlap", .by.instance, .by.state_dir.display(), .by.sandbox, path = .path.display())]
    Held {
        uid: u32,
        by: Claimant,
        why: &'static str,
        path: PathBuf,
    },
    /// A claim file that is not one: held, since whose it is is unknown.
    #[error("uid {uid} is claimed by {}, which is not a claim this sandboxd can read: remove it if no daemon uses that uid", .path.display())]
    Unreadable { uid: u32, path: PathBuf },
    /// The claims directory could not be used.
    #[error("cannot claim uid {uid} in {}: {source}", .path.display())]
    Io {
        uid: u32,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ClaimError {
    /// True when another daemon has the uid (a new sandbox skips it);
    /// false when the claims directory failed (nothing can be claimed).
    pub fn is_held(&self) -> bool {
        !matches!(self, ClaimError::Io { .. })
    }
}

/// This daemon's view of the host's claims directory.
pub struct UidClaims {
    dir: PathBuf,
    instance: String,
    /// Canonical: a claim is this daemon's when it names this directory.
    state_dir: PathBuf,
    /// [`LOCK_WAIT`], shorter in tests.
    lock_wait: Duration,
}

impl fmt::Debug for UidClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UidClaims")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl UidClaims {
    /// Makes the claims directory (0700, root's) if needed, for a daemon of
    /// `instance` on `state_dir` (which exists by now).
    pub fn open(dir: &Path, instance: &str, state_dir: &Path) -> anyhow::Result<UidClaims> {
        let state_dir = state_dir
            .canonicalize()
            .with_context(|| format!("cannot resolve state_dir {}", state_dir.display()))?;
        if state_dir.as_os_str().as_bytes().contains(&b'\n') {
            bail!(
                "state_dir {:?} contains a newline: it cannot be named in a uid claim",
                state_dir
            );
        }
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("cannot create the uid claims directory {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot set mode 700 on {}", dir.display()))?;
        let claims = UidClaims {
            dir: dir.to_path_buf(),
            instance: instance.to_string(),
            state_dir,
            lock_wait: LOCK_WAIT,
        };
        claims
            .open_lock()
            .with_context(|| format!("cannot open {}", dir.join(LOCK).display()))?;
        Ok(claims)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, uid: u32) -> PathBuf {
        self.dir.join(uid.to_string())
    }

    fn me(&self, sandbox: &str) -> Claimant {
        Claimant {
            instance: self.instance.clone(),
            state_dir: self.state_dir.clone(),
            sandbox: sandbox.to_string(),
        }
    }

    /// Renames this daemon's own claim on `uid` (made for a sandbox
    /// prepared ahead) to `sandbox`: a write and a rename under the lock,
    /// without reading it first — no other daemon replaces the claim of a
    /// daemon that runs (see [`UidClaims::hold`]). Blocking.
    pub fn rename_own(&self, uid: u32, sandbox: &str) -> Result<(), ClaimError> {
        let me = self.me(sandbox);
        let _locked = self.lock_dir(uid)?;
        self.replace(uid, &me)
    }

    /// Makes sure `uid` is claimed by this daemon for `sandbox`: already
    /// so (one read, no lock), or claimed now, or taken over from a stale
    /// claim. Refused when another daemon's claim holds. Blocking.
    pub fn hold(&self, uid: u32, sandbox: &str) -> Result<(), ClaimError> {
        let me = self.me(sandbox);
        if self.read(uid)? == Found::Claim(me.clone()) {
            return Ok(());
        }
        let _locked = self.lock_dir(uid)?;
        match self.read(uid)? {
            Found::Nothing => self.create(uid, &me),
            Found::Claim(claim) if claim == me => Ok(()),
            Found::Claim(claim) if claim.state_dir == me.state_dir => self.replace(uid, &me),
            Found::Claim(other) => match holds(&other) {
                Some(why) => Err(ClaimError::Held {
                    uid,
                    by: other,
                    why,
                    path: self.path(uid),
                }),
                None => {
                    tracing::info!(uid, instance = %other.instance, state_dir = %other.state_dir.display(), sandbox = %other.sandbox, "taking over a stale uid claim: its daemon is not running and its workspace is gone");
                    self.replace(uid, &me)
                }
            },
            Found::Unreadable => Err(ClaimError::Unreadable {
                uid,
                path: self.path(uid),
            }),
        }
    }

    /// Removes this daemon's claim on `uid` (its workspace is gone). Another
    /// daemon's claim is left alone.
    pub fn release(&self, uid: u32) {
        let path = self.path(uid);
        match self.read(uid) {
            Ok(Found::Claim(claim)) if claim.state_dir == self.state_dir => {
                if let Err(error) = std::fs::remove_file(&path) {
                    tracing::warn!(uid, path = %path.display(), %error, "cannot remove the uid's claim");
                }
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cannot release the uid's claim"),
        }
    }

    /// This daemon's claims on uids not in `held`: left by a crash between
    /// a workspace's removal and its claim's, or by a state directory
    /// emptied while its daemon was stopped. Blocking: reads the whole
    /// directory; called at start.
    pub fn stale_own(&self, held: &HashSet<u32>) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .filter(|uid| !held.contains(uid))
            .filter(|&uid| {
                matches!(self.read(uid), Ok(Found::Claim(claim)) if claim.state_dir == self.state_dir)
            })
            .collect()
    }

    fn read(&self, uid: u32) -> Result<Found, ClaimError> {
        let path = self.path(uid);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Claimant::parse(&bytes).map_or(Found::Unreadable, Found::Claim)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Found::Nothing),
            Err(source) => Err(ClaimError::Io { uid, path, source }),
        }
    }

    /// A descriptor of its own each time: `flock` excludes open files, so
    /// two threads sharing one would not exclude each other. A directory
    /// removed meanwhile (by hand) is made again.
    fn open_lock(&self) -> std::io::Result<File> {
        let open = || {
            OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC)
                .open(self.dir.join(LOCK))
        };
        match open() {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&self.dir)?;
                open()
            }
            opened => opened,
        }
    }

    fn lock_dir(&self, uid: u32) -> Result<Flock<File>, ClaimError> {
        let io = |source: std::io::Error| ClaimError::Io {
            uid,
            path: self.dir.join(LOCK),
            source,
        };
        let deadline = Instant::now() + self.lock_wait;
        let mut file = self.open_lock().map_err(io)?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => return Ok(locked),
                Err((back, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                    file = back;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((_, Errno::EWOULDBLOCK)) => {
                    return Err(io(std::io::Error::other(format!(
                        "another process held the claims lock for more than {:?} (a stopped or hung sandboxd? `fuser -v {}` names it)",
                        self.lock_wait,
                        self.dir.join(LOCK).display()
                    ))))
                }
                Err((_, errno)) => return Err(io(errno.into())),
            }
        }
    }

    /// A finished claim file beside the final one, for `link` or `rename`.
    fn write_temporary(&self, uid: u32, me: &Claimant) -> Result<PathBuf, ClaimError> {
        // Unique: written only under the directory's lock.
        let temporary = self.dir.join(format!(".{uid}.tmp"));
        let written = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|mut file| file.write_all(&me.to_bytes()));
        written.map_err(|source| ClaimError::Io {
            uid,
            path: temporary.clone(),
            source,
        })?;
        Ok(temporary)
    }

    fn create(&self, uid: u32, me: &Claimant) -> Result<(), ClaimError> {
        let temporary = self.write_temporary(uid, me)?;
        let linked = std::fs::hard_link(&temporary, self.path(uid));
        let _ = std::fs::remove_file(&temporary);
        linked.map_err(|source| ClaimError::Io {
            uid,
            path: self.path(uid),
            source,
        })
    }

    fn replace(&self, uid: u32, me: &Claimant) -> Result<(), ClaimError> {
        let temporary = self.write_temporary(uid, me)?;
        std::fs::rename(&temporary, self.path(uid)).map_err(|source| {
            let _ = std::fs::remove_file(&temporary);
            ClaimError::Io {
                uid,
                path: self.path(uid),
                source,
            }
        })
    }
}

/// What a claim file says.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    Nothing,
    Claim(Claimant),
    Unreadable,
}

/// Why another daemon's claim still holds, or `None` when it is stale.
fn holds(claim: &Claimant) -> Option<&'static str> {
    if state_dir_locked(&claim.state_dir) {
        return Some("which is running");
    }
    std::fs::symlink_metadata(claim.workspace())
        .is_ok()
        .then_some("whose workspace still exists (that daemon is stopped)")
}

/// True while a daemon (or its group reaper) holds the lock of the state
/// directory: a probe with a lock of our own, released at once. A lock
/// file that is missing or cannot be opened means no daemon is there.
fn state_dir_locked(state_dir: &Path) -> bool {
    let Ok(file) = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(state_dir.join("sandboxd.lock"))
    else {
        return false;
    };
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_probe) => false,
        Err((_, errno)) => errno == Errno::EWOULDBLOCK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TestDir(PathBuf);

    impl TestDir {
        fn new(name: &str) -> TestDir {
            let dir = std::env::temp_dir().join(format!("sandboxd-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("a/sandboxes")).unwrap();
            std::fs::create_dir_all(dir.join("b/sandboxes")).unwrap();
            TestDir(dir)
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Holds `<state_dir>/sandboxd.lock` as a running daemon does.
    fn run_daemon_on(state_dir: &Path) -> Flock<File> {
        let file = File::create(state_dir.join("sandboxd.lock")).unwrap();
        Flock::lock(file, FlockArg::LockExclusiveNonblock).unwrap()
    }

    #[test]
    fn a_claim_reads_back_and_anything_else_is_unreadable() {
        let claim = Claimant {
            instance: "blue".into(),
            state_dir: "/var/lib/x y".into(),
            sandbox: "sbx-ses-0123456789ab".into(),
        };
        assert_eq!(Claimant::parse(&claim.to_bytes()), Some(claim));
        assert_eq!(Claimant::parse(b""), None);
        assert_eq!(Claimant::parse(b"sandboxd uid claim v1\ninstance \n"), None);
    }

    #[test]
    fn a_claim_waits_out_a_short_lock_and_names_one_held_too_long() {
        let dir = TestDir::new("claims-lock");
        let claims = dir.0.join("claims");
        let mut a = UidClaims::open(&claims, "default", &dir.0.join("a")).unwrap();
        a.lock_wait = Duration::from_millis(300);
        // Another daemon in its critical section, for ever (stopped).
        let other = a.lock_dir(0).unwrap();
        let error = a.hold(9, "sbx-ses-aaaaaaaaaaaa").unwrap_err();
        assert!(
            !error.is_held(),
            "a lock held too long is no claim: {error}"
        );
        let message = error.to_string();
        assert!(
            message.contains("held the claims lock for more than") && message.contains(".lock"),
            "{message}"
        );
        // Released a moment later: the claim goes through.
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(other);
        });
        a.lock_wait = LOCK_WAIT;
        a.hold(9, "sbx-ses-aaaaaaaaaaaa").unwrap();
        releaser.join().unwrap();
    }

    #[test]
    fn a_live_daemons_claim_holds_and_a_gone_ones_is_taken_over() {
        let dir = TestDir::new("claims-live");
        let claims = dir.0.join("claims");
        let a = UidClaims::open(&claims, "default", &dir.0.join("a")).unwrap();
        let b = UidClaims::open(&claims, "blue", &dir.0.join("b")).unwrap();
        let a_running = run_daemon_on(&dir.0.join("a"));
        a.hold(7, "sbx-ses-aaaaaaaaaaaa").unwrap();
        a.hold(7, "sbx-ses-aaaaaaaaaaaa").unwrap();
        let error = b.hold(7, "sbx-ses-bbbbbbbbbbbb").unwrap_err();
        assert!(error.is_held());
        let message = error.to_string();
        assert!(
            message.contains("instance 'default'")
                && message.contains(
                    &dir.0
                        .join("a")
                        .canonicalize()
                        .unwrap()
                        .display()
                        .to_string()
                )
                && message.contains("which is running"),
            "{message}"
        );
        // Its daemon stopped, its workspace gone: stale.
        drop(a_running);
        b.hold(7, "sbx-ses-bbbbbbbbbbbb").unwrap();
        assert!(matches!(a.read(7), Ok(Found::Claim(claim)) if claim.instance == "blue"));
        // a's release leaves b's claim alone; b's removes it.
        a.release(7);
        assert!(claims.join("7").exists());
        b.release(7);
        assert!(!claims.join("7").exists());
    }

    #[test]
    fn a_stopped_daemons_claim_holds_while_its_workspace_exists() {
        let dir = TestDir::new("claims-stopped");
        let claims = dir.0.join("claims");
        let a = UidClaims::open(&claims, "default", &dir.0.join("a")).unwrap();
        let b = UidClaims::open(&claims, "default", &dir.0.join("b")).unwrap();
        let workspace = dir.0.join("a/sandboxes/sbx-ses-aaaaaaaaaaaa");
        std::fs::create_dir(&workspace).unwrap();
        a.hold(9, "sbx-ses-aaaaaaaaaaaa").unwrap();
        let error = b.hold(9, "sbx-ses-bbbbbbbbbbbb").unwrap_err();
        assert!(
            error.to_string().contains("workspace still exists"),
            "{error}"
        );
        std::fs::remove_dir(&workspace).unwrap();
        b.hold(9, "sbx-ses-bbbbbbbbbbbb").unwrap();
    }

    #[test]
    fn a_daemon_forgets_its_own_stale_claims_and_refuses_unreadable_ones() {
        let dir = TestDir::new("claims-stale");
        let claims = dir.0.join("claims");
        let a = UidClaims::open(&claims, "default", &dir.0.join("a")).unwrap();
        let b = UidClaims::open(&claims, "default", &dir.0.join("b")).unwrap();
        for uid in [1, 2, 3] {
            a.hold(uid, "sbx-ses-aaaaaaaaaaaa").unwrap();
        }
        b.hold(4, "sbx-ses-bbbbbbbbbbbb").unwrap();
        let mut stale = a.stale_own(&HashSet::from([2]));
        stale.sort();
        assert_eq!(stale, [1, 3]);
        for uid in stale {
            a.release(uid);
        }
        let mut left: Vec<String> = std::fs::read_dir(&claims)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, [".lock", "2", "4"]);
        std::fs::write(claims.join("5"), "garbage").unwrap();
        let error = a.hold(5, "sbx-ses-aaaaaaaaaaaa").unwrap_err();
        assert!(
            matches!(error, ClaimError::Unreadable { uid: 5, .. }),
            "{error}"
        );
    }
}
