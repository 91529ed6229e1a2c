//! The spawner threads: where runners are started, off the async runtime.
//!
//! Starting a runner (workspace, output file, clone + exec, ledger) is
//! synchronous and takes most of a millisecond. Done inline in a call, it
//! held up the connection's task — every other call on that connection
//! waited, since a connection's calls are polled in its one task — and a
//! runtime worker, so a burst of ensures on one connection spawned one at a
//! time and stalled probes on other connections. Here the work runs on a
//! few dedicated threads instead: one fewer than there are CPUs (1 to 8),
//! so a burst of spawns always leaves a CPU to the runtime's readers.
//! (When spawns were forks, a first version with one thread per CPU made
//! probes during a burst slower without spawning faster: parallel forks of
//! one process contend on its memory map. With `clone_exec` the spawning
//! thread is only suspended until the child has exec'd, and the child's
//! work still needs a CPU, so the count stayed.)
//!
//! They are plain threads that live as long as the daemon, on purpose:
//! `PR_SET_PDEATHSIG` fires when the *thread* that started a runner exits,
//! so runners must not be started from threads that come and go (tokio's
//! blocking pool retires idle threads after ten seconds). A job that panics
//! is caught, so it cannot end the thread and take its runners with it.
//! Each thread has the runtime entered, so a runner's pidfd can be
//! registered and its watcher spawned from it.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};

type Job = Box<dyn FnOnce() + Send>;

pub struct Spawner {
    jobs: Sender<Job>,
}

impl Spawner {
    /// Starts the threads. Call from within the runtime.
    pub fn start() -> std::io::Result<Spawner> {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = cpus.saturating_sub(1).clamp(1, 8);
        let (jobs, queue) = channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let runtime = tokio::runtime::Handle::current();
        for index in 0..threads {
            let (queue, runtime) = (queue.clone(), runtime.clone());
            std::thread::Builder::new()
                .name(format!("runner-spawn-{index}"))
                .spawn(move || {
                    let _runtime = runtime.enter();
                    while let Some(job) = next_job(&queue) {
                        if std::panic::catch_unwind(AssertUnwindSafe(job)).is_err() {
                            tracing::error!("a runner spawn panicked");
                        }
                    }
                })?;
        }
        Ok(Spawner { jobs })
    }

    /// Runs `work` on a spawner thread and waits for its result. Once
    /// queued, the work runs to the end whether or not anyone still waits.
    /// `None` only when the threads are gone.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(work());
        });
        self.jobs.send(job).ok()?;
        result.await.ok()
    }
}

/// The next job; `None` once the driver (the only sender) is gone.
fn next_job(queue: &Mutex<Receiver<Job>>) -> Option<Job> {
    queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .recv()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_work_off_the_runtime_with_the_runtime_entered() {
        let spawner = Spawner::start().unwrap();
        let name = spawner
            .run(|| {
                // tokio::spawn needs the runtime entered.
                drop(tokio::spawn(async {}));
                std::thread::current().name().map(str::to_string)
            })
            .await
            .unwrap();
        assert!(name.unwrap().starts_with("runner-spawn-"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_does_not_end_the_thread() {
        let spawner = Spawner::start().unwrap();
        for _ in 0..20 {
            assert_eq!(spawner.run(|| -> u8 { panic!("boom") }).await, None);
        }
        assert_eq!(spawner.run(|| 7).await, Some(7));
    }
}
