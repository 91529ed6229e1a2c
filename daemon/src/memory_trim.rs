//! Gives the allocator's free memory back to the kernel once the daemon's
//! calls pause.
//!
//! A burst of starts or stops, a large copy or a `list` of thousands leaves
//! glibc's arenas full of freed chunks between ones still in use. glibc
//! only returns what is free at an arena's top (past the trim threshold,
//! see [`crate::malloc_arenas`]); the rest stays resident for the daemon's
//! life. At 10,000 running sandboxes that was 8 MB in 14,000 free chunks,
//! a quarter of the daemon's anonymous memory. `malloc_trim` hands every
//! whole free page of every arena back (`MADV_DONTNEED`); it took 2.9 ms
//! there, each arena locked in turn.
//!
//! So the daemon trims once its calls have paused for [`QUIET`], or
//! [`AT_MOST`] after the first call since its last trim when calls never
//! pause. Nothing runs while the daemon is idle: the first call after a
//! trim wakes the trimmer, and a call costs two relaxed loads while the
//! trimmer is awake. This is what systemd's `sd_event_trim_memory` does
//! at memory pressure, here at the end of each burst.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How long the calls must pause before a trim.
const QUIET: Duration = Duration::from_secs(1);
/// The longest a trim waits after the call that woke the trimmer.
const AT_MOST: Duration = Duration::from_secs(30);

/// The daemon's trimmer, told of every call by the server.
pub static DAEMON: Trimmer = Trimmer::new();

/// When to trim: whether calls came, and how to wake the trimmer.
pub struct Trimmer {
    /// A call came since the trimmer last looked.
    called: AtomicBool,
    /// The trimmer waits for a call to wake it.
    armed: AtomicBool,
    wake: Notify,
}

impl Trimmer {
    const fn new() -> Trimmer {
        Trimmer {
            called: AtomicBool::new(false),
            armed: AtomicBool::new(true),
            wake: Notify::const_new(),
        }
    }

    /// Notes a call: wakes the trimmer if it sleeps.
    pub fn note_call(&self) {
        if !self.called.load(Ordering::Relaxed) {
            self.called.store(true, Ordering::Relaxed);
        }
        if self.armed.load(Ordering::Relaxed) && self.armed.swap(false, Ordering::AcqRel) {
            self.wake.notify_one();
        }
    }

    /// Trims with `trim`, on a blocking thread, after each burst of calls;
    /// runs as long as the daemon.
    pub async fn run(&self, quiet: Duration, at_most: Duration, trim: Arc<dyn Fn() + Send + Sync>) {
        loop {
            self.wake.notified().await;
            let woken = Instant::now();
            loop {
                self.called.store(false, Ordering::Relaxed);
                tokio::time::sleep(quiet).await;
                if !self.called.load(Ordering::Relaxed) || woken.elapsed() >= at_most {
                    break;
                }
            }
            // Armed first: a call during the trim wakes the next round.
            self.armed.store(true, Ordering::Release);
            let trim = trim.clone();
            if tokio::task::spawn_blocking(move || trim()).await.is_err() {
                tracing::warn!("the memory trim panicked");
            }
        }
    }
}

/// Starts the daemon's trimmer on the runtime.
pub fn start() {
    tokio::spawn(DAEMON.run(QUIET, AT_MOST, Arc::new(trim_arenas)));
}

/// Returns the free pages of every malloc arena to the kernel.
fn trim_arenas() {
    #[cfg(target_env = "gnu")]
    {
        let began = Instant::now();
        // SAFETY: malloc_trim only walks glibc's own arenas, each under its
        // lock; it has no preconditions.
        let gave_back = unsafe { libc::malloc_trim(0) } == 1;
        tracing::debug!(gave_back, took = ?began.elapsed(), "trimmed the malloc arenas");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A trimmer of the test's own, running, and the count of its trims.
    fn test_trimmer(quiet: Duration, at_most: Duration) -> (Arc<Trimmer>, Arc<AtomicUsize>) {
        let trimmer = Arc::new(Trimmer::new());
        let count = Arc::new(AtomicUsize::new(0));
        let (running, counted) = (trimmer.clone(), count.clone());
        let trim = Arc::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        tokio::spawn(async move { running.run(quiet, at_most, trim).await });
        (trimmer, count)
    }

    async fn until_trimmed(count: &AtomicUsize, trims: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while count.load(Ordering::SeqCst) < trims {
            assert!(Instant::now() < deadline, "no trim {trims} in 30 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_is_followed_by_one_trim_once_the_calls_pause() {
        let quiet = Duration::from_millis(20);
        let (trimmer, count) = test_trimmer(quiet, Duration::from_secs(60));
        trimmer.note_call();
        trimmer.note_call();
        until_trimmed(&count, 1).await;
        // Idle: no call, so no second trim however long it waits.
        tokio::time::sleep(quiet * 10).await;
        assert_eq!(count.load(Ordering::SeqCst), 1);
        trimmer.note_call();
        until_trimmed(&count, 2).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_that_never_pause_still_get_a_trim_within_the_bound() {
        let quiet = Duration::from_millis(200);
        let (trimmer, count) = test_trimmer(quiet, Duration::from_millis(400));
        let calling = Instant::now();
        // Calls far closer together than the pause a trim waits for.
        while count.load(Ordering::SeqCst) == 0 {
            assert!(
                calling.elapsed() < Duration::from_secs(30),
                "no trim in 30 s"
            );
            trimmer.note_call();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
