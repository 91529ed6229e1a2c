//! Removing a deprovisioned sandbox's files without making the caller wait
//! for the file system.
//!
//! A workspace can be a large tree (a checkout, `node_modules`), and even
//! an empty one costs a trip through the blocking pool and a directory
//! removal on the caller's time. So deprovision *moves* the workspace and
//! output files into `<sandboxes>/.trash/` — one `rename` each, inline —
//! and answers; a background task deletes them. This is what containerd
//! does with snapshots it removes. The paths are gone when deprovision
//! answers, so a new ensure of the same sandbox starts clean, and nothing a
//! later deletion does can touch its new files.
//!
//! The trash sits inside the sandboxes directory so that a rename never
//! crosses a file system (a `sandboxes` mount point included). Its entries
//! are named `<base>.<instance>.<n>.<what>`, unique across restarts; what an
//! interrupted deletion leaves is deleted at the next start. When a rename
//! fails (an output file on another file system), the caller falls back to
//! deleting in place.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use super::deferred::Deferred;

pub struct Trash {
    dir: PathBuf,
    /// Tells this instance's entries apart from an earlier one's.
    instance: u128,
    next: AtomicU64,
    deferred: Arc<Deferred>,
}

impl Trash {
    /// The trash in `dir` (`StateDirs::trash`, which exists).
    pub fn new(dir: PathBuf, deferred: Arc<Deferred>) -> Trash {
        let instance = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        Trash {
            dir,
            instance,
            next: AtomicU64::new(0),
            deferred,
        }
    }

    /// Moves `path` into the trash. `Ok(None)` when there was nothing there.
    pub fn take(&self, path: &Path, base: &str, what: &str) -> io::Result<Option<PathBuf>> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let target = self
            .dir
            .join(format!("{base}.{:x}.{n}.{what}", self.instance));
        match std::fs::rename(path, &target) {
            Ok(()) => Ok(Some(target)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Deletes `entries` with the next batch of [deferred] work; failures
    /// are logged.
    ///
    /// [deferred]: super::deferred
    pub fn empty_later(&self, entries: Vec<PathBuf>) {
        if !entries.is_empty() {
            self.deferred
                .push(move || entries.iter().for_each(|entry| delete(entry)));
        }
    }

    /// Deletes, on the blocking pool, whatever an earlier instance left.
    pub fn empty_leftovers(&self) {
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || empty(&dir));
    }
}

/// Deletes everything in `dir`, whoever put it there. Blocking.
pub fn empty(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    entries.flatten().for_each(|entry| delete(&entry.path()));
}

/// Removes a file or a whole tree; one already gone is fine. std's
/// `remove_dir_all` works from directory descriptors (`openat`,
/// `unlinkat`) without following links, so a tree a runner made deeper
/// than `PATH_MAX` goes too (tested in `workspaces::walk`).
pub fn remove(path: &Path) -> io::Result<()> {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(error) => Err(error),
    };
    match removed {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// [`remove`], logging a failure: for clean-up nobody waits on.
pub fn delete(path: &Path) {
    if let Err(error) = remove(path) {
        tracing::warn!(path = %path.display(), %error, "cannot delete a removed sandbox's files");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch queue whose task never runs: these tests empty the trash
    /// themselves.
    fn deferred() -> Arc<Deferred> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        Arc::new(Deferred::start())
    }

    /// `<sandboxes>/.trash`, made as `StateDirs::prepare` makes it.
    fn trash_dir(sandboxes: &Path) -> PathBuf {
        let dir = sandboxes.join(".trash");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sandboxd-trash-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn take_moves_the_path_out_and_empty_now_deletes_trees_and_files() {
        let sandboxes = scratch("take");
        let workspace = sandboxes.join("sbx-ses-000000000001");
        std::fs::create_dir_all(workspace.join("deep/tree")).unwrap();
        std::fs::write(workspace.join("deep/tree/file"), "x").unwrap();
        let log = sandboxes.join("output.log");
        std::fs::write(&log, "output").unwrap();

        let trash = Trash::new(trash_dir(&sandboxes), deferred());
        let moved = trash
            .take(&workspace, "sbx-ses-000000000001", "workspace")
            .unwrap();
        let moved_log = trash.take(&log, "sbx-ses-000000000001", "log").unwrap();
        assert!(!workspace.exists() && !log.exists());
        let (moved, moved_log) = (moved.unwrap(), moved_log.unwrap());
        assert!(moved.join("deep/tree/file").exists() && moved_log.exists());
        assert_ne!(moved, moved_log);
        assert_eq!(
            trash
                .take(&workspace, "sbx-ses-000000000001", "workspace")
                .unwrap(),
            None
        );

        empty(&sandboxes.join(".trash"));
        assert_eq!(
            std::fs::read_dir(sandboxes.join(".trash")).unwrap().count(),
            0
        );
        std::fs::remove_dir_all(&sandboxes).unwrap();
    }

    #[test]
    fn a_second_instance_finds_the_first_ones_entries_and_names_never_collide() {
        let sandboxes = scratch("instances");
        let first = Trash::new(trash_dir(&sandboxes), deferred());
        let second = Trash::new(trash_dir(&sandboxes), deferred());
        let mut names = std::collections::HashSet::new();
        for trash in [&first, &second, &first] {
            let path = sandboxes.join("sbx-wfe-000000000002");
            std::fs::create_dir(&path).unwrap();
            names.insert(
                trash
                    .take(&path, "sbx-wfe-000000000002", "workspace")
                    .unwrap()
                    .unwrap(),
            );
        }
        assert_eq!(names.len(), 3);
        empty(&sandboxes.join(".trash"));
        assert_eq!(
            std::fs::read_dir(sandboxes.join(".trash")).unwrap().count(),
            0
        );
        std::fs::remove_dir_all(&sandboxes).unwrap();
    }
}
