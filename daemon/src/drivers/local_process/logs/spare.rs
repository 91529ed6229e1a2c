//! Recycled output files: a removed sandbox's output file, emptied, becomes
//! a later new sandbox's, so starting a sandbox renames a file instead of
//! allocating an inode.
//!
//! Why bother: an inode allocation is the one file-system cost of a new
//! sandbox that grows with churn. On ext4 without a journal (common on VM
//! root disks) the allocator skips every inode deleted in the last 5–35 s,
//! reading its inode-table block each time; with sandboxes coming and
//! going, that scan was most of the daemon's CPU per new sandbox (see
//! BENCHMARKS.md). A recycled file was allocated long ago and is not freed.
//!
//! What makes reuse safe is that nobody else can still write into the file:
//! a process that escaped its runner's group (a `setsid` grandchild that
//! outlived the group kill) could still hold the old descriptor, and its
//! output would land in another sandbox's log. So a file is only recycled
//! after a *write lease* was granted on it (`F_SETLEASE`, `F_WRLCK`): the
//! kernel grants one only when no other open file description of the file
//! exists anywhere. Otherwise it is deleted. The spares live in
//! `<logs>/.spare/` (0700, root's), where no runner can open them, and are
//! root-owned 0640 like every output file; what an earlier instance left
//! there is deleted at start.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::super::deferred::Deferred;

/// At most this many files are kept (clean ones plus those being emptied).
const MAX_SPARES: usize = 256;

pub struct SpareFiles {
    dir: PathBuf,
    /// Emptied and checked: ready to be placed.
    clean: Mutex<Vec<PathBuf>>,
    /// Clean ones plus those still being emptied.
    held: AtomicUsize,
    next: AtomicU64,
    deferred: Arc<Deferred>,
}

impl SpareFiles {
    /// The spares in `dir` (`StateDirs::spares`, which exists), emptied of
    /// an earlier instance's files. Blocking; call at start.
    pub fn open(dir: PathBuf, deferred: Arc<Deferred>) -> SpareFiles {
        super::super::trash::empty(&dir);
        SpareFiles {
            dir,
            clean: Mutex::new(Vec::new()),
            held: AtomicUsize::new(0),
            next: AtomicU64::new(0),
            deferred,
        }
    }

    fn clean(&self) -> std::sync::MutexGuard<'_, Vec<PathBuf>> {
        self.clean.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes back the output file at `path`, whose sandbox is gone: moves it
    /// here now (one rename) and empties and checks it with the next batch
    /// of deferred work.
    /// False when it was not taken (the pool is full, or it cannot be
    /// moved); the caller removes it then.
    pub fn take_back(self: &Arc<Self>, path: &Path) -> bool {
        if self.held.fetch_add(1, Ordering::AcqRel) >= MAX_SPARES {
            self.held.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        let spare = self
            .dir
            .join(self.next.fetch_add(1, Ordering::Relaxed).to_string());
        if std::fs::rename(path, &spare).is_err() {
            self.held.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        let spares = self.clone();
        self.deferred.push(move || match empty_if_unshared(&spare) {
            Ok(()) => spares.clean().push(spare),
            Err(error) => {
                tracing::debug!(file = %spare.display(), %error, "not recycling an output file");
                let _ = std::fs::remove_file(&spare);
                spares.held.fetch_sub(1, Ordering::AcqRel);
            }
        });
        true
    }

    /// Puts a clean spare at `path` unless something is there already (a
    /// respawned runner keeps its sandbox's output file). False when no
    /// spare was placed.
    pub fn place_at(&self, path: &Path) -> bool {
        let Some(spare) = self.clean().pop() else {
            return false;
        };
        match nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            &spare,
            nix::fcntl::AT_FDCWD,
            path,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => {
                self.held.fetch_sub(1, Ordering::AcqRel);
                true
            }
            Err(nix::errno::Errno::EEXIST) => {
                self.clean().push(spare);
                false
            }
            Err(_) => {
                let _ = std::fs::remove_file(&spare);
                self.held.fetch_sub(1, Ordering::AcqRel);
                false
            }
        }
    }
}

/// Empties the file at `path` if, and only if, nothing else holds it open.
fn empty_if_unshared(path: &Path) -> io::Result<()> {
    let file = File::options().read(true).write(true).open(path)?;
    // A write lease is refused (EAGAIN) while any other open file
    // description of the file exists, in any process.
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function owns.
    if unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_WRLCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let emptied = file.set_len(0);
    // SAFETY: as above; drops the lease.
    unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
    emptied
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sandboxd-spare-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `<logs>/.spare`, made as `StateDirs::prepare` makes it.
    fn spare_dir(logs: &Path) -> PathBuf {
        let dir = logs.join(".spare");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    async fn until_clean(spares: &SpareFiles, count: usize) {
        // Up to 10 s: the batch runs 200 ms after the first job, later on a
        // loaded machine.
        for _ in 0..5000 {
            if spares.clean().len() == count && spares.held.load(Ordering::Acquire) == count {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        panic!("spares never settled at {count}");
    }

    fn inode(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().ino()
    }

    #[tokio::test]
    async fn a_file_nobody_holds_comes_back_empty_as_the_same_inode() {
        let logs = scratch("reuse");
        let spares = Arc::new(SpareFiles::open(
            spare_dir(&logs),
            Arc::new(Deferred::start()),
        ));
        let old = logs.join("sbx-ses-000000000001.log");
        std::fs::write(&old, "the old sandbox's output").unwrap();
        let old_inode = inode(&old);

        assert!(spares.take_back(&old));
        assert!(!old.exists());
        until_clean(&spares, 1).await;

        let new = logs.join("sbx-ses-000000000002.log");
        assert!(spares.place_at(&new));
        assert_eq!(inode(&new), old_inode, "recycled, not allocated");
        assert_eq!(std::fs::read(&new).unwrap(), b"", "emptied");
        assert!(!spares.place_at(&logs.join("another.log")), "none left");
        std::fs::remove_dir_all(&logs).unwrap();
    }

    #[tokio::test]
    async fn a_file_someone_still_writes_to_is_deleted_not_recycled() {
        let logs = scratch("held");
        let spares = Arc::new(SpareFiles::open(
            spare_dir(&logs),
            Arc::new(Deferred::start()),
        ));
        let old = logs.join("sbx-ses-000000000003.log");
        std::fs::write(&old, "output").unwrap();
        // An escaped process of the old sandbox, still holding its output.
        let mut escaped = File::options().append(true).open(&old).unwrap();

        assert!(spares.take_back(&old));
        until_clean(&spares, 0).await;
        assert!(!spares.place_at(&logs.join("sbx-ses-000000000004.log")));
        assert_eq!(std::fs::read_dir(logs.join(".spare")).unwrap().count(), 0);
        escaped.write_all(b"lands in a deleted file").unwrap();
        std::fs::remove_dir_all(&logs).unwrap();
    }

    #[tokio::test]
    async fn an_existing_file_is_never_replaced() {
        let logs = scratch("exists");
        let spares = Arc::new(SpareFiles::open(
            spare_dir(&logs),
            Arc::new(Deferred::start()),
        ));
        let old = logs.join("sbx-ses-000000000005.log");
        std::fs::write(&old, "gone").unwrap();
        assert!(spares.take_back(&old));
        until_clean(&spares, 1).await;

        let kept = logs.join("sbx-ses-000000000006.log");
        std::fs::write(&kept, "a respawned runner's earlier output").unwrap();
        assert!(!spares.place_at(&kept));
        assert_eq!(
            std::fs::read_to_string(&kept).unwrap(),
            "a respawned runner's earlier output"
        );
        until_clean(&spares, 1).await;
        std::fs::remove_dir_all(&logs).unwrap();
    }

    #[test]
    fn a_restart_deletes_what_an_earlier_instance_left() {
        let logs = scratch("restart");
        std::fs::create_dir_all(logs.join(".spare")).unwrap();
        std::fs::write(logs.join(".spare/7"), "left over").unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let spares = SpareFiles::open(spare_dir(&logs), Arc::new(Deferred::start()));
        assert_eq!(std::fs::read_dir(&spares.dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&logs).unwrap();
    }
}
