//! Runner output files: one per sandbox, size-capped, read back by `logs`.
//!
//! A runner writes its stdout and stderr straight into
//! `<state>/logs/<base>.log`, through an `O_APPEND` descriptor the daemon
//! opened at spawn. Nothing of the daemon sits in that path: a runner's
//! output costs no daemon task and no copy, and a slow or stopped daemon
//! never blocks a runner's writes.
//!
//! The price is how the size cap is kept. The daemon cannot move the
//! runner's descriptor to a new file, so it rotates by copy-and-truncate
//! (as logrotate's `copytruncate`): the newest `runner_log_max_size` bytes
//! are copied to `<base>.log.1` (replacing the one before) and the file is
//! truncated to zero, where the runner's next `O_APPEND` write lands. The
//! trade-offs, accepted for that simplicity:
//! - bytes a runner writes between the end of the copy and the truncate
//!   are lost (the window is one `ftruncate` call after the last read);
//! - the cap is checked every [`CHECK_INTERVAL`] for running sandboxes and
//!   on every `logs` call, so a file can overshoot it by what a runner
//!   writes in between, and that overshoot's oldest part is dropped at
//!   rotation (the rotated file keeps at most the cap, from a line start).
//!
//! The alternative — a pipe per runner, copied by the daemon into files it
//! can rename — loses nothing, but puts a daemon task on every runner's
//! output path and makes runners block when the daemon does.
//!
//! Reading uses a [`LogCursor`] whose `epoch` counts rotations: the low 32
//! bits are the current file's incarnation (rotations so far + 1; the
//! rotated file holds the one before), the high 32 bits identify this
//! daemon instance. A follower whose cursor is one rotation behind is
//! served the rest of the rotated file before the new one; one further
//! behind gets what is kept, flagged as a gap. Rotation counts live in
//! memory: a cursor from an earlier daemon instance continues at its offset
//! when the file is still that long (the usual case — a restart does not
//! rotate), else from the start, flagged as a gap.

mod read;
mod rotate;
mod spare;

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use sandboxd_protocol::{LogChunk, LogCursor, LogStart};

/// How often the files of running sandboxes are checked against the cap.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// `<dir>/<base>.log`: the file a runner writes.
pub fn file_path(dir: &Path, base: &str) -> PathBuf {
    dir.join(format!("{base}.log"))
}

/// `<dir>/<base>.log.1`: the one rotated file kept.
fn rotated_path(dir: &Path, base: &str) -> PathBuf {
    dir.join(format!("{base}.log.1"))
}

/// Why output cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Neither file exists: the sandbox never ran here, or its logs were
    /// removed with its workspace.
    #[error("no output file {}", .0.display())]
    NoOutput(PathBuf),
    #[error("cannot read {}: {source}", .path.display())]
    Io { path: PathBuf, source: io::Error },
}

/// What this daemon instance knows of one sandbox's files.
#[derive(Debug, Default, Clone, Copy)]
struct Lineage {
    /// Rotations done by this instance.
    rotations: u32,
    /// The offset, in the previous incarnation, that the rotated file's
    /// first byte had (0 for a rotated file an earlier instance left).
    rotated_from: u64,
}

/// The output files of every runner of one daemon.
pub struct RunnerLogs {
    dir: PathBuf,
    max_size: u64,
    /// Distinguishes this instance's epochs from an earlier daemon's.
    instance: u32,
    /// Rotation counts by base name. Held across each rotation and read,
    /// so a reader never sees a file half-rotated; the work under it is a
    /// stat, or at most a copy of `max_size` bytes.
    lineages: Mutex<HashMap<String, Lineage>>,
    /// Output files of removed sandboxes, emptied for reuse.
    spares: Arc<spare::SpareFiles>,
}

impl RunnerLogs {
    /// Blocking: empties `spares` (`StateDirs::spares`) of an earlier
    /// instance's files. `deferred` runs the emptying of output files taken
    /// back for reuse.
    pub fn new(
        dir: PathBuf,
        spares: PathBuf,
        max_size: u64,
        deferred: Arc<super::deferred::Deferred>,
    ) -> RunnerLogs {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos());
        RunnerLogs {
            spares: Arc::new(spare::SpareFiles::open(spares, deferred)),
            dir,
            max_size,
            instance: nanos ^ std::process::id(),
            lineages: Mutex::new(HashMap::new()),
        }
    }

    /// Opens `base`'s output file for a runner to write: the file a
    /// respawned runner's predecessor wrote, else a recycled one, else a
    /// new one (0640, the daemon's; the runner only gets the descriptor).
    pub fn open_output(&self, base: &str) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = file_path(&self.dir, base);
        self.spares.place_at(&path);
        File::options()
            .create(true)
            .append(true)
            .mode(0o640)
            .open(path)
    }

    fn lineages(&self) -> MutexGuard<'_, HashMap<String, Lineage>> {
        self.lineages
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Rotates `base`'s file if it is over the cap. Blocking: call from a
    /// blocking context. True when it rotated.
    pub fn enforce_cap(&self, base: &str) -> io::Result<bool> {
        let mut lineages = self.lineages();
        self.enforce_cap_locked(&mut lineages, base)
    }

    fn enforce_cap_locked(
        &self,
        lineages: &mut HashMap<String, Lineage>,
        base: &str,
    ) -> io::Result<bool> {
        let current = file_path(&self.dir, base);
        let rotated = rotated_path(&self.dir, base);
        let Some(rotated_from) = rotate::copy_truncate(&current, &rotated, self.max_size)? else {
            return Ok(false);
        };
        let lineage = lineages.entry(base.to_string()).or_default();
        // Wrapping: four billion rotations later an epoch may repeat, which
        // only a follower asleep through all of them could notice.
        lineage.rotations = lineage.rotations.wrapping_add(1);
        lineage.rotated_from = rotated_from;
        tracing::debug!(log = %current.display(), rotations = lineage.rotations, "rotated a runner log");
        Ok(true)
    }

    /// Checks the cap of each of `bases`, logging (not returning) failures.
    pub fn enforce_caps(&self, bases: &[String]) {
        for base in bases {
            if let Err(error) = self.enforce_cap(base) {
                tracing::warn!(
                    log = %file_path(&self.dir, base).display(),
                    %error,
                    "cannot rotate a runner log"
                );
            }
        }
    }

    /// Forgets `base`'s rotations (the sandbox is gone) and hands each of
    /// its two files (`"log"`, `"log.1"`) to `dispose`, which removes it.
    /// The output file is recycled instead when it can be (see [`spare`]).
    /// Under the rotation lock: no rotation can recreate a file meanwhile.
    pub fn remove(&self, base: &str, mut dispose: impl FnMut(&Path, &'static str)) {
        let mut lineages = self.lineages();
        lineages.remove(base);
        let current = file_path(&self.dir, base);
        if !self.spares.take_back(&current) {
            dispose(&current, "log");
        }
        dispose(&rotated_path(&self.dir, base), "log.1");
    }

    /// At most `max_bytes` of `base`'s output from `start`, after checking
    /// the cap. Blocking: call from a blocking context.
    pub fn read(&self, base: &str, start: LogStart, max_bytes: u32) -> Result<LogChunk, LogError> {
        let mut lineages = self.lineages();
        if let Err(error) = self.enforce_cap_locked(&mut lineages, base) {
            tracing::warn!(log = %file_path(&self.dir, base).display(), %error, "cannot rotate a runner log");
        }
        let lineage = lineages.get(base).copied().unwrap_or_default();
        let files = Files::open(&self.dir, base)?;
        let budget = u64::from(max_bytes);
        let current_epoch = self.epoch(lineage.rotations.wrapping_add(1));
        let rotated_epoch = self.epoch(lineage.rotations);
        let at = |offset| LogCursor {
            epoch: current_epoch,
            offset,
        };
        let oldest = match &files.rotated {
            Some(_) => LogCursor {
                epoch: rotated_epoch,
                offset: lineage.rotated_from,
            },
            None => at(0),
        };
        let (cursor, gap) = match start {
            LogStart::Tail { lines } => return files.tail(lines, budget, at(files.current_len)),
            LogStart::Beginning => (oldest, false),
            LogStart::After(cursor) if cursor.epoch == current_epoch => {
                if cursor.offset > files.current_len {
                    // Shorter than what was read: truncated by someone else.
                    (at(0), true)
                } else {
                    (cursor, false)
                }
            }
            LogStart::After(cursor) if cursor.epoch == rotated_epoch && files.rotated.is_some() => {
                if cursor.offset < lineage.rotated_from {
                    (oldest, true)
                } else {
                    (cursor, false)
                }
            }
            LogStart::After(cursor) if cursor.epoch >> 32 == u64::from(self.instance) => {
                // Rotated away more than once since this cursor was handed out.
                (oldest, true)
            }
            LogStart::After(cursor) => {
                // An earlier daemon's cursor: its offset still holds if the
                // file is that long (a restart does not rotate).
                if cursor.offset <= files.current_len {
                    (at(cursor.offset), false)
                } else {
                    (at(0), true)
                }
            }
        };
        let mut chunk = if cursor.epoch == current_epoch {
            files.read_current(cursor.offset, budget, current_epoch)?
        } else {
            let position = cursor.offset - lineage.rotated_from;
            files.read_rotated(position, lineage.rotated_from, budget, rotated_epoch, at(0))?
        };
        chunk.gap |= gap;
        Ok(chunk)
    }

    fn epoch(&self, incarnation: u32) -> u64 {
        (u64::from(self.instance) << 32) | u64::from(incarnation)
    }
}

/// Both files of one sandbox, opened for one read.
struct Files {
    current: Option<File>,
    current_path: PathBuf,
    /// The current file's length when it was opened; reads stop there.
    current_len: u64,
    rotated: Option<File>,
    rotated_path: PathBuf,
}

impl Files {
    fn open(dir: &Path, base: &str) -> Result<Files, LogError> {
        let current_path = file_path(dir, base);
        let rotated_path = rotated_path(dir, base);
        let current = open_if_present(&current_path)?;
        let rotated = open_if_present(&rotated_path)?;
        if current.is_none() && rotated.is_none() {
            return Err(LogError::NoOutput(current_path));
        }
        let current_len = match &current {
            Some(file) => file
                .metadata()
                .map_err(|source| LogError::Io {
                    path: current_path.clone(),
                    source,
                })?
                .len(),
            None => 0,
        };
        Ok(Files {
            current,
            current_path,
            current_len,
            rotated,
            rotated_path,
        })
    }
}

fn open_if_present(path: &Path) -> Result<Option<File>, LogError> {
    match File::open(path) {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LogError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Every `CHECK_INTERVAL`, rotates the files of the sandboxes `running`
/// names. Ends when `running` returns `None` (the driver is gone).
pub async fn keep_capped(
    logs: Arc<RunnerLogs>,
    running: impl Fn() -> Option<Vec<String>> + Send + 'static,
) {
    let mut ticks = tokio::time::interval(CHECK_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(bases) = running() else { return };
        if bases.is_empty() {
            continue;
        }
        let logs = logs.clone();
        if tokio::task::spawn_blocking(move || logs.enforce_caps(&bases))
            .await
            .is_err()
        {
            return;
        }
    }
}
