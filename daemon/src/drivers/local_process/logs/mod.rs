//! Runner output files: one per sandbox, size-capped, read back by `logs`.
//!
//! A runner's stdout and stderr are the write end of a pipe; the daemon
//! moves what arrives into `<state>/logs/<base>.log` with `splice(2)` —
//! one thread for every runner's pipe, no copy through its memory (see
//! [`pumps`] and [`pump`]). Because the daemon is the only writer, it keeps the cap
//! exactly: the live file and one rotated file, `<base>.log.1`, hold at
//! most half of `runner_log_max_size` each, so a runner's output never
//! takes more than the cap on disk, however fast it writes. Rotation is a
//! rename over the rotated file and a fresh live file (see [`rotate`]):
//! nothing is copied and nothing is lost, and it works on a full file
//! system. A runner that writes faster than the disk takes it is slowed by
//! its full pipe; output that cannot be written at all (a file system full
//! of something else) is dropped and a marker line says how much.
//!
//! Why a pipe rather than handing the runner the file itself (as an
//! earlier version did): a file the runner holds can only be bounded by
//! copy-and-truncate from outside, which lets a fast writer overshoot the
//! cap without limit between checks, loses what lands between the copy and
//! the truncation, and needs room for the copy — on a full disk the file
//! never shrank. The price is the daemon on the output path: a runner
//! blocks on a full pipe while the daemon does not read (output of a
//! runner is lost with its pipe when the daemon dies, but so is the
//! runner: the reaper kills it).
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

mod ends;
mod pipe;
mod pump;
mod pumps;
mod read;
mod rotate;
mod spare;

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::SystemTime;

use sandboxd_protocol::{LogChunk, LogCursor, LogStart};

use pump::OutputFile;
use pumps::Pumps;

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
    /// Shared with every pump (see [`OutputFile`]).
    dir: Arc<Path>,
    max_size: u64,
    /// Distinguishes this instance's epochs from an earlier daemon's.
    instance: u32,
    /// Rotation counts by base name. Held across each rotation and while
    /// a read opens the files, so a reader never sees a file half-rotated;
    /// the work under it is two renames and an open, or two opens.
    lineages: Mutex<HashMap<String, Lineage>>,
    /// Output files of removed sandboxes, emptied for reuse.
    spares: Arc<spare::SpareFiles>,
    /// The thread that pumps every runner's output (see [`pumps`]),
    /// started with the first runner.
    pumps: OnceLock<Pumps>,
    /// Where each generation's output ends (see [`ends`]). Locked after
    /// `lineages` when both are held.
    ends: Mutex<ends::Ends>,
    /// Removed sandboxes' last output, for their followers (see [`ends`]).
    departed: Mutex<ends::DepartedLogs>,
    /// Bytes each sandbox's current runner wrote, counted by its pump: how
    /// the idle watcher knows output arrived (see [`RunnerLogs::output_counter`]).
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
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
            dir: Arc::from(dir),
            max_size,
            instance: nanos ^ std::process::id(),
            lineages: Mutex::new(HashMap::new()),
            pumps: OnceLock::new(),
            ends: Mutex::default(),
            departed: Mutex::default(),
            counters: Mutex::default(),
        }
    }

    /// Opens `base`'s output file — the file a respawned runner's
    /// predecessor wrote, else a recycled one, else a new one (0640, the
    /// daemon's) — and starts its pump. Returns the write end of the pipe
    /// the runner gets as stdout and stderr. Needs a runtime entered; the
    /// pump ends by itself once every copy of the write end is closed.
    pub fn open_output(self: &Arc<Self>, base: &str) -> io::Result<OwnedFd> {
        let (read, write) = pipe::runner_pipe()?;
        self.pump_into_output(base, read)?;
        Ok(write)
    }

    /// A pipe for a runner started ahead of its sandbox (see
    /// `gvisor::prepared`): `(read end, write end)`, as a runner's output
    /// pipe is made; the read end goes to [`RunnerLogs::pump_into_output`]
    /// once the sandbox is known.
    pub fn output_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
        pipe::runner_pipe()
    }

    /// Opens `base`'s output file as [`RunnerLogs::open_output`] does and
    /// pumps `read`, the read end of a pipe its runner writes, into it.
    pub fn pump_into_output(self: &Arc<Self>, base: &str, read: OwnedFd) -> io::Result<()> {
        let path = file_path(&self.dir, base);
        // A new sandbox of this name: the removed one's followers are done.
        lock(&self.departed).forget(base);
        self.spares.place_at(&path);
        let share = self.max_size / 2;
        let mut output = OutputFile::open(base, self.dir.clone(), share)?;
        let counter = Arc::new(AtomicU64::new(0));
        output.counter = counter.clone();
        lock(&self.counters).insert(base.to_string(), counter);
        self.pumps()?.add(read, output);
        Ok(())
    }

    /// The count of bytes `base`'s current runner has written so far,
    /// shared with its pump; `None` before its first runner.
    pub fn output_counter(&self, base: &str) -> Option<Arc<AtomicU64>> {
        lock(&self.counters).get(base).cloned()
    }

    /// The runner of `base` is gone: moves what its pipe still holds into
    /// its file and waits for its pump to end (bounded: a process that
    /// escaped the runner cannot keep it going).
    pub async fn finish(&self, base: &str) {
        if let Some(pumps) = self.pumps.get() {
            pumps.finish(base).await;
        }
    }

    /// A generation of `base` has ended and its pump is drained
    /// ([`RunnerLogs::finish`]): its output ends at the file's length now.
    /// `how` is the line its followers get. Blocking (one `stat`).
    pub fn end_generation(&self, base: &str, how: String) {
        let lineages = self.lineages();
        let lineage = lineages.get(base).copied().unwrap_or_default();
        let offset = std::fs::metadata(file_path(&self.dir, base)).map_or(0, |meta| meta.len());
        let at = LogCursor {
            epoch: self.epoch(lineage.rotations.wrapping_add(1)),
            offset,
        };
        lock(&self.ends).record(base, ends::End { at, how });
    }

    /// The pump thread, started on first use.
    fn pumps(self: &Arc<Self>) -> io::Result<&Pumps> {
        if let Some(pumps) = self.pumps.get() {
            return Ok(pumps);
        }
        // Two first runners at once may both start one: the loser's thread
        // ends when its handle is dropped here.
        let _ = self.pumps.set(Pumps::start(Arc::downgrade(self))?);
        Ok(self.pumps.get().expect("set above"))
    }

    fn lineages(&self) -> MutexGuard<'_, HashMap<String, Lineage>> {
        self.lineages
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Rotates `output`'s files (see [`rotate`]), under the rotation lock.
    fn rotate_output(&self, output: &mut OutputFile) {
        let Some(live) = output.live() else {
            return; // closed: only an open file is written, so none is due
        };
        let mut lineages = self.lineages();
        let (current, rotated) = (output.current(), output.rotated_path());
        let outcome = rotate::rotate(&current, &rotated, live);
        output.rotated(outcome);
        Self::count_rotation(&mut lineages, &output.base);
        tracing::debug!(log = %current.display(), "rotated a runner log");
    }

    /// Empties both of `output`'s files, to make room on a full file system.
    fn restart_output(&self, output: &mut OutputFile) {
        let Some(live) = output.live() else {
            return;
        };
        let mut lineages = self.lineages();
        rotate::remove_rotated(&output.rotated_path());
        rotate::truncate(live, &output.current());
        output.restarted();
        Self::count_rotation(&mut lineages, &output.base);
    }

    fn count_rotation(lineages: &mut HashMap<String, Lineage>, base: &str) {
        let lineage = lineages.entry(base.to_string()).or_default();
        // Wrapping: four billion rotations later an epoch may repeat, which
        // only a follower asleep through all of them could notice.
        lineage.rotations = lineage.rotations.wrapping_add(1);
        // The whole live file becomes the rotated one.
        lineage.rotated_from = 0;
    }

    /// Forgets `base`'s rotations (the sandbox is gone) and hands each of
    /// its two files (`"log"`, `"log.1"`) to `dispose`, which removes it.
    /// The output file is recycled instead when it can be (see [`spare`]).
    /// Under the rotation lock: no rotation can recreate a file meanwhile.
    pub fn remove(&self, base: &str, mut dispose: impl FnMut(&Path, &'static str)) {
        if let Some(pumps) = self.pumps.get() {
            pumps.remove(base);
        }
        lock(&self.counters).remove(base);
        let mut lineages = self.lineages();
        let lineage = lineages.remove(base).unwrap_or_default();
        let current = file_path(&self.dir, base);
        self.keep_for_followers(base, lineage, &current);
        if !self.spares.take_back(&current) {
            dispose(&current, "log");
        }
        dispose(&rotated_path(&self.dir, base), "log.1");
    }

    /// Keeps the end of a removed sandbox's output and its generations'
    /// ends for its followers (see [`ends`]); nothing when no generation
    /// ended under this daemon (no follower can be waiting on one).
    fn keep_for_followers(&self, base: &str, lineage: Lineage, current: &Path) {
        let ends = lock(&self.ends).take(base);
        if ends.is_empty() {
            return;
        }
        let tail = std::fs::File::open(current).and_then(|file| {
            let len = file.metadata()?.len();
            let from = len.saturating_sub(ends::DEPARTED_TAIL);
            let mut tail = vec![0; (len - from) as usize];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut tail, from)?;
            Ok((from, tail))
        });
        let (tail_from, tail) = match tail {
            Ok(tail) => tail,
            // Gone already: followers still learn how it ended.
            Err(_) => (ends.back().map_or(0, |end| end.at.offset), Vec::new()),
        };
        lock(&self.departed).insert(
            base,
            ends::Departed {
                epoch: self.epoch(lineage.rotations.wrapping_add(1)),
                tail_from,
                tail,
                ends,
                since: std::time::Instant::now(),
            },
        );
    }

    /// At most `max_bytes` of `base`'s output from `start`; a
    /// [`LogStart::Generation`] read stops at its generation's end (see
    /// [`ends`]). Blocking: call from a blocking context.
    pub fn read(&self, base: &str, start: LogStart, max_bytes: u32) -> Result<LogChunk, LogError> {
        let LogStart::Generation(from) = start else {
            return self.read_files(base, start, max_bytes);
        };
        if let Some(chunk) = lock(&self.departed).read(base, from, u64::from(max_bytes)) {
            return Ok(chunk);
        }
        let end = lock(&self.ends).next_end(base, from);
        let Some(end) = end else {
            return self.read_files(base, LogStart::After(from), max_bytes);
        };
        let left = end.at.offset - from.offset;
        if left == 0 {
            return Ok(LogChunk {
                data: Vec::new(),
                next: from,
                gap: false,
                at_end: true,
                ended: Some(end.how),
            });
        }
        let budget = u32::try_from(left).unwrap_or(u32::MAX).min(max_bytes);
        let mut chunk = self.read_files(base, LogStart::After(from), budget)?;
        if !chunk.gap && chunk.data.len() as u64 == left {
            chunk.at_end = true;
            chunk.ended = Some(end.how);
        }
        Ok(chunk)
    }

    /// At most `max_bytes` of `base`'s output from `start`, across
    /// generations.
    fn read_files(
        &self,
        base: &str,
        start: LogStart,
        max_bytes: u32,
    ) -> Result<LogChunk, LogError> {
        // Only the opening is under the lock: once open, the descriptors
        // keep reading the incarnations they were opened as, whatever a
        // rotation renames meanwhile.
        let (lineage, files) = {
            let lineages = self.lineages();
            let lineage = lineages.get(base).copied().unwrap_or_default();
            (lineage, Files::open(&self.dir, base)?)
        };
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
            LogStart::Generation(_) => unreachable!("read turns it into After"),
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

/// A poisoned lock's data is still consistent here (plain maps).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
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
