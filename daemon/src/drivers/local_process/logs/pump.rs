//! One runner's output on its way to disk: what the runner writes into its
//! pipe is moved into its output file a step at a time (by the one pump
//! thread, see [`super::pumps`]), keeping the file within its share of the
//! cap.
//!
//! Each step moves at most what fits: when the next chunk would take the
//! live file past its share (half of `runner_log_max_size`, so the live and
//! the rotated file together stay within the cap), the file is rotated
//! first. A runner writing faster than the disk takes it simply waits on
//! its full pipe: the daemon reads only what it can write.
//!
//! When a write fails for want of room (a full file system, a quota), the
//! pump makes room from its own files — a rotation, which frees the old
//! rotated file; then emptying both — and when even that is not enough it
//! drops the chunk, and later writes a marker line saying how much was
//! dropped. A runner is never blocked by a full disk, and never fills it.
//!
//! `splice` into the page cache does not wait for the disk, short of the
//! kernel's dirty-page throttling of a very fast writer (which is the
//! back-pressure wanted).
//!
//! The output file is open only while output flows: it is closed once its
//! runner has written nothing for [`FILE_IDLE`], and opened again with the
//! next chunk. A quiet runner — most of them, most of the time — thus costs
//! the daemon one descriptor (its pipe), which is what lets one daemon hold
//! 10,000 of them under a 20,000 open-file limit. When no descriptor is
//! left to open the file with, the chunk waits in the pipe (the runner, on
//! a full pipe, waits with it) and the open is retried.

use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::pipe::{self, CHUNK};
use super::rotate::Rotated;
use super::RunnerLogs;

/// After the runner is gone, at most this much more is moved: what its
/// pipe held, plus what its last processes wrote while dying. A process
/// that escaped the runner and keeps writing cannot keep the pump alive.
const FINISH_BUDGET: u64 = 4 * CHUNK as u64;

/// How long an output file stays open after its runner last wrote.
pub(super) const FILE_IDLE: Duration = Duration::from_secs(2);
/// How long a chunk waits before the file is opened again, when the
/// open-file limit is reached.
pub(super) const OPEN_RETRY: Duration = Duration::from_millis(100);

/// The live output file of one sandbox, as its pump sees it.
pub struct OutputFile {
    pub(super) base: String,
    /// `None` while closed for idleness (see [`FILE_IDLE`]).
    file: Option<File>,
    /// Its length, which is where the next byte goes: the pump is the only
    /// writer, and `splice` refuses files opened for appending.
    len: u64,
    /// The logs directory, shared by every pump: the paths are made from
    /// it when needed rather than kept, two per runner.
    dir: Arc<Path>,
    /// The most one file holds: half the cap.
    share: u64,
    /// Output thrown away since the last marker line.
    dropped: u64,
    /// Why it was thrown away, for the marker.
    reason: Option<String>,
    /// Bytes taken from the pipe (written or dropped), shared with the
    /// idle watcher (see `RunnerLogs::output_counter`).
    pub(super) counter: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl OutputFile {
    /// Opens `base`'s output file in `dir` to write at its end: a respawned
    /// runner's output follows its predecessor's.
    pub fn open(base: &str, dir: Arc<Path>, share: u64) -> io::Result<OutputFile> {
        let (file, len) = open_at_end(&super::file_path(&dir, base))?;
        Ok(OutputFile {
            base: base.to_string(),
            file: Some(file),
            len,
            dir,
            share: share.max(1),
            dropped: 0,
            reason: None,
            counter: std::sync::Arc::default(),
        })
    }

    /// `<dir>/<base>.log`.
    pub(super) fn current(&self) -> PathBuf {
        super::file_path(&self.dir, &self.base)
    }

    /// `<dir>/<base>.log.1`.
    pub(super) fn rotated_path(&self) -> PathBuf {
        super::rotated_path(&self.dir, &self.base)
    }

    /// Applies a rotation's outcome.
    pub(super) fn rotated(&mut self, outcome: Rotated) {
        match outcome {
            Rotated::Renamed(fresh) => self.file = Some(fresh),
            Rotated::Truncated => self.dropped += self.len,
        }
        self.len = 0;
    }

    /// The live file, when open.
    pub(super) fn live(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Opens the live file again after it was closed for idleness, at its
    /// end as it is now (the daemon is its only writer, but an operator may
    /// have truncated it meanwhile).
    fn reopen(&mut self) -> io::Result<()> {
        if self.file.is_none() {
            let (file, len) = open_at_end(&self.current())?;
            self.file = Some(file);
            self.len = len;
        }
        Ok(())
    }

    /// Closes the live file (see [`FILE_IDLE`]).
    pub(super) fn close(&mut self) {
        self.file = None;
    }

    /// The output is over: the marker for what was dropped, if anything was.
    pub(super) fn end(&mut self, logs: &RunnerLogs) {
        if self.dropped > 0 {
            self.write_marker(logs);
        }
    }

    /// Empties both files in place (see `RunnerLogs::restart_output`).
    pub(super) fn restarted(&mut self) {
        self.dropped += self.len;
        self.len = 0;
    }

    /// Moves one chunk from `pipe` to the file. `Ok(0)` is end of file;
    /// `WouldBlock` an empty pipe. Errors are the pipe's own: the file's
    /// are handled here.
    pub(super) fn step(&mut self, pipe: BorrowedFd<'_>, logs: &RunnerLogs) -> io::Result<usize> {
        let buffered = pipe::buffered(pipe)?;
        if buffered == 0 {
            return pipe::empty_state(pipe);
        }
        let want = buffered.min(CHUNK).min(self.share as usize);
        if let Err(error) = self.reopen() {
            if crate::fd_limit::is_exhaustion(&error) {
                // Not the file's fault: the chunk waits for a descriptor.
                return Err(error);
            }
            self.reason = Some(error.to_string());
            return self.discard(pipe, want);
        }
        if self.dropped > 0 && !self.write_marker(logs) {
            return self.discard(pipe, want);
        }
        self.make_way(logs, want as u64);
        for attempt in 0.. {
            let Some(file) = &self.file else {
                // Not reached: opened above, and neither a rotation nor
                // making room closes it. Were it ever, the chunk is
                // dropped rather than the pump thread panicking.
                return self.discard(pipe, want);
            };
            match pipe::splice_to_file(pipe, file, &mut self.len, want) {
                Err(error) if pipe::is_out_of_room(&error) && attempt < 2 => {
                    self.reason = Some(error.to_string());
                    self.make_room(logs, attempt);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Err(error),
                Err(error) if error.kind() == io::ErrorKind::InvalidInput => {
                    // Not the file's fault: splice does not apply (never
                    // expected for a pipe and a regular file).
                    return Err(error);
                }
                Err(error) => {
                    self.reason = Some(error.to_string());
                    return self.discard(pipe, want);
                }
                Ok(moved) => return Ok(moved),
            }
        }
        unreachable!("the loop returns")
    }

    /// Rotates first when `incoming` bytes would take the file past its share.
    fn make_way(&mut self, logs: &RunnerLogs, incoming: u64) {
        if self.len > 0 && self.len + incoming > self.share {
            logs.rotate_output(self);
        }
    }

    /// Frees room after a failed write: first by rotating (the old rotated
    /// file's blocks go), then by emptying both files.
    fn make_room(&mut self, logs: &RunnerLogs, attempt: usize) {
        tracing::debug!(log = %self.current().display(), reason = self.reason.as_deref(), attempt, "no room for a runner's output; making room from its own files");
        if attempt == 0 && self.len > 0 {
            logs.rotate_output(self);
        } else {
            logs.restart_output(self);
        }
    }

    fn discard(&mut self, pipe: BorrowedFd<'_>, want: usize) -> io::Result<usize> {
        let discarded = pipe::discard(pipe, want)?;
        self.dropped += discarded as u64;
        Ok(discarded)
    }

    /// Writes the marker line for what was dropped. False when it cannot
    /// be written (yet).
    fn write_marker(&mut self, logs: &RunnerLogs) -> bool {
        let reason = self.reason.clone().unwrap_or_else(|| "no room".to_string());
        let marker = format!(
            "--- sandboxd: {} bytes of output dropped ({reason}) ---\n",
            self.dropped
        );
        if self.reopen().is_err() {
            return false;
        }
        self.make_way(logs, marker.len() as u64);
        let Some(file) = &self.file else {
            return false;
        };
        match file.write_at(marker.as_bytes(), self.len) {
            Ok(written) => {
                self.len += written as u64;
                if written == marker.len() {
                    tracing::warn!(log = %self.current().display(), bytes = self.dropped, %reason, "dropped runner output");
                    self.dropped = 0;
                    return true;
                }
                false
            }
            Err(_) => false,
        }
    }
}

/// Moves what the pipe holds until it is empty, closed, or the budget
/// ([`FINISH_BUDGET`]) is spent, then writes the marker for what was
/// dropped: the end of a runner's output.
pub(super) fn finish(logs: &RunnerLogs, pipe: BorrowedFd<'_>, output: &mut OutputFile) {
    let mut left = FINISH_BUDGET;
    while left > 0 {
        match output.step(pipe, logs) {
            Ok(moved @ 1..) => left = left.saturating_sub(moved as u64),
            _ => break,
        }
    }
    output.end(logs);
}

/// Opens the output file at `path` (made 0640 if missing) and returns it
/// with its length, which is where the next byte goes.
fn open_at_end(path: &std::path::Path) -> io::Result<(File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = File::options()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o640)
        .open(path)?;
    let len = file.metadata()?.len();
    Ok((file, len))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::Path;

    use super::super::{file_path, rotated_path, RunnerLogs};
    use super::*;
    use crate::test_dir::TestDir;

    fn logs(name: &str, cap: u64) -> (TestDir, Arc<RunnerLogs>) {
        let scratch = TestDir::new(&format!("pump-{name}"));
        let dir = scratch.0.clone();
        std::fs::create_dir_all(dir.join(".spare")).unwrap();
        let deferred = Arc::new(super::super::super::deferred::Deferred::start());
        let logs = RunnerLogs::new(dir.clone(), dir.join(".spare"), cap, deferred);
        (scratch, Arc::new(logs))
    }

    fn size(path: &Path) -> u64 {
        std::fs::metadata(path).map_or(0, |metadata| metadata.len())
    }

    fn lines(from: u32, to: u32) -> String {
        (from..to).map(|n| format!("line {n:07}\n")).collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fast_writer_never_takes_the_files_past_the_cap_and_nothing_is_lost() {
        let cap = 64 * 1024;
        let (dir, logs) = logs("fast", cap);
        let base = "sbx-ses-000000000001";
        let mut writer = File::from(logs.open_output(base).unwrap());
        let (current, rotated) = (file_path(&dir.0, base), rotated_path(&dir.0, base));
        // 2.5 MB in lines of 13 bytes, about 40 times the cap.
        let text = lines(0, 200_000);
        let sampler = {
            let (current, rotated) = (current.clone(), rotated.clone());
            std::thread::spawn(move || {
                let mut largest = 0;
                for _ in 0..2000 {
                    largest = largest.max(size(&current) + size(&rotated));
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                largest
            })
        };
        let written = tokio::task::spawn_blocking(move || {
            writer.write_all(text.as_bytes()).unwrap();
            text
        })
        .await
        .unwrap();
        logs.finish(base).await;
        let largest = sampler.join().unwrap();
        assert!(
            largest <= cap,
            "{largest} bytes on disk against a cap of {cap}"
        );

        // What is kept is the end of what was written, whole.
        let kept = std::fs::read_to_string(&rotated).unwrap()
            + &std::fs::read_to_string(&current).unwrap();
        assert!(kept.len() as u64 >= cap / 2, "{} bytes kept", kept.len());
        assert!(
            written.ends_with(&kept),
            "the kept output is not the end of the written one"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn finish_moves_what_is_buffered_although_a_writer_lingers() {
        let (dir, logs) = logs("finish", 1 << 20);
        let base = "sbx-ses-000000000002";
        let write = logs.open_output(base).unwrap();
        // An escaped process holding a copy: no end of file will come.
        let lingering = write.try_clone().unwrap();
        let mut writer = File::from(write);
        writer.write_all(b"the last words\n").unwrap();
        drop(writer);
        logs.finish(base).await;
        assert_eq!(
            std::fs::read_to_string(file_path(&dir.0, base)).unwrap(),
            "the last words\n"
        );
        drop(lingering);
    }

    fn open_here(path: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|entry| std::fs::read_link(entry.path()).is_ok_and(|target| target == path))
            .count()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_quiet_runners_file_is_closed_and_opened_again_when_it_writes() {
        let (dir, logs) = logs("idle", 1 << 20);
        let base = "sbx-ses-000000000004";
        let path = file_path(&dir.0, base);
        let mut writer = File::from(logs.open_output(base).unwrap());
        writer.write_all(b"before\n").unwrap();
        tokio::time::sleep(FILE_IDLE + std::time::Duration::from_millis(1_200)).await;
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "before\n");
        assert_eq!(open_here(&path), 0, "the quiet runner's file is still open");
        writer.write_all(b"after\n").unwrap();
        drop(writer);
        logs.finish(base).await;
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "before\nafter\n");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_respawned_runner_appends_to_its_predecessors_output() {
        let (dir, logs) = logs("respawn", 1 << 20);
        let base = "sbx-wfe-000000000003";
        for words in ["first\n", "second\n"] {
            let mut writer = File::from(logs.open_output(base).unwrap());
            writer.write_all(words.as_bytes()).unwrap();
            drop(writer);
            logs.finish(base).await;
        }
        assert_eq!(
            std::fs::read_to_string(file_path(&dir.0, base)).unwrap(),
            "first\nsecond\n"
        );
    }
}
