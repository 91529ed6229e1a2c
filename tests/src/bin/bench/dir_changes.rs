//! Wake-ups on a directory's changes (inotify), so a reader waiting for a
//! line in a file there is woken by the write rather than by a timer: the
//! sandboxd peers read the program's line from the sandbox's kept output
//! file, where the other peers read a pipe.
//!
//! One instance serves every read of a peer, made once: closing an inotify
//! descriptor that holds a watch waits for an SRCU grace period (7.5 ms
//! p50, up to 19 ms, measured here), which a watch per start spent on the
//! runtime's worker threads, making each burst 2-3× slower. A task reads
//! its events and counts them; each reader subscribes before it looks, so
//! no change after its look can pass it by.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use anyhow::Context;
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

/// A directory watched for files written, created, or renamed into it.
pub struct DirChanges {
    count: watch::Receiver<u64>,
    reader: tokio::task::JoinHandle<()>,
}

impl DirChanges {
    /// Starts watching `dir`. Call within the runtime.
    pub fn watch(dir: &Path) -> anyhow::Result<DirChanges> {
        let fd = watched_fd(dir)?;
        let (count_tx, count) = watch::channel(0u64);
        let reader = tokio::spawn(async move {
            let mut events = [0u8; 4096];
            while let Ok(mut ready) = fd.readable().await {
                // SAFETY: reads into a buffer of the length given.
                let read = unsafe {
                    libc::read(
                        fd.get_ref().as_raw_fd(),
                        events.as_mut_ptr().cast(),
                        events.len(),
                    )
                };
                if read > 0 {
                    count_tx.send_modify(|count| *count += 1);
                } else {
                    // Drained (EAGAIN): wait for the next readiness.
                    ready.clear_ready();
                }
            }
        });
        Ok(DirChanges { count, reader })
    }

    /// A subscription that [`watch::Receiver::changed`] wakes at the first
    /// change after this call.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        let mut subscription = self.count.clone();
        subscription.mark_unchanged();
        subscription
    }
}

impl Drop for DirChanges {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// A non-blocking inotify descriptor watching `dir`, registered with the
/// runtime.
fn watched_fd(dir: &Path) -> anyhow::Result<AsyncFd<OwnedFd>> {
    // SAFETY: inotify_init1 takes only flags; the result is checked.
    let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error()).context("inotify_init1");
    }
    // SAFETY: `raw` is a descriptor just returned to us and owned by no one else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    let mask = libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_CREATE | libc::IN_MOVED_TO;
    // SAFETY: `fd` is an inotify descriptor and `path` a NUL-terminated string.
    if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), mask) } < 0 {
        let error = std::io::Error::last_os_error();
        return Err(error).with_context(|| format!("watch {}", dir.display()));
    }
    // SAFETY: an OwnedFd is a valid open descriptor, and it stays open and
    // the same for the AsyncFd's whole life (it owns it).
    let fd = unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
    Ok(fd.map_err(std::io::Error::from)?)
}
