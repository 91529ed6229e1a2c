//! Clean-up that need not happen on a caller's time, done in batches.
//!
//! Deleting a deprovisioned workspace, emptying an output file for reuse:
//! handing each to the blocking pool as it comes wakes a thread per call,
//! and on a small machine that thread competes for a CPU with the very
//! reply the caller waits for. Instead the jobs queue up; the first one
//! wakes a task that waits [`BATCH_DELAY`] for more, then runs the whole
//! batch in one trip through the blocking pool. An idle daemon has no timer
//! running for this.
//!
//! Jobs still queued when the driver is dropped are not run; what they
//! would have cleaned (trash entries, spare files) is cleaned at the next
//! start.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

/// How long the first job of a batch waits for others.
pub const BATCH_DELAY: Duration = Duration::from_millis(200);

type Job = Box<dyn FnOnce() + Send>;

struct Queue {
    jobs: Mutex<Vec<Job>>,
    arrived: Notify,
}

pub struct Deferred {
    queue: Arc<Queue>,
}

impl Deferred {
    /// Starts the batching task; call within the runtime. It ends when
    /// this is dropped.
    pub fn start() -> Deferred {
        let queue = Arc::new(Queue {
            jobs: Mutex::new(Vec::new()),
            arrived: Notify::new(),
        });
        tokio::spawn(run_batches(queue.clone()));
        Deferred { queue }
    }

    /// Queues `job` to run on the blocking pool within about [`BATCH_DELAY`].
    pub fn push(&self, job: impl FnOnce() + Send + 'static) {
        let mut jobs = self.queue.jobs();
        jobs.push(Box::new(job));
        if jobs.len() == 1 {
            self.queue.arrived.notify_one();
        }
    }
}

impl Queue {
    fn jobs(&self) -> std::sync::MutexGuard<'_, Vec<Job>> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The batching task. It holds the only other reference to the queue, so
/// once the [`Deferred`] is dropped (which wakes it) it is alone and ends.
async fn run_batches(queue: Arc<Queue>) {
    loop {
        if queue.jobs().is_empty() {
            // A push racing this check left a permit: nothing is missed.
            queue.arrived.notified().await;
        }
        if Arc::strong_count(&queue) == 1 {
            return;
        }
        tokio::time::sleep(BATCH_DELAY).await;
        let batch = std::mem::take(&mut *queue.jobs());
        if !batch.is_empty() {
            let _ =
                tokio::task::spawn_blocking(move || batch.into_iter().for_each(|job| job())).await;
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        self.queue.arrived.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Waits (up to 10 s, for a loaded machine) until `count` jobs ran.
    async fn until_ran(ran: &AtomicUsize, count: usize) {
        for _ in 0..1000 {
            if ran.load(Ordering::SeqCst) >= count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("only {} of {count} jobs ran", ran.load(Ordering::SeqCst));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_run_in_one_batch_off_the_runtime() {
        let deferred = Deferred::start();
        let ran = Arc::new(AtomicUsize::new(0));
        let threads = Arc::new(Mutex::new(std::collections::HashSet::new()));
        for _ in 0..5 {
            let (ran, threads) = (ran.clone(), threads.clone());
            deferred.push(move || {
                threads.lock().unwrap().insert(std::thread::current().id());
                ran.fetch_add(1, Ordering::SeqCst);
            });
        }
        until_ran(&ran, 5).await;
        let threads = threads.lock().unwrap().clone();
        assert_eq!(threads.len(), 1, "one batch, one thread");
        assert!(
            !threads.contains(&std::thread::current().id()),
            "a job ran on the caller's thread"
        );

        // A later job starts a batch of its own.
        let again = ran.clone();
        deferred.push(move || {
            again.fetch_add(1, Ordering::SeqCst);
        });
        until_ran(&ran, 6).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_task_ends_with_the_queue() {
        let deferred = Deferred::start();
        let weak = Arc::downgrade(&deferred.queue);
        drop(deferred);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(weak.strong_count(), 0);
    }
}
