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
//! Each thread has the runtime entered, so a runner's output pump and
//! watcher can be spawned from it. Each thread also reaps the runners it
//! started (see [`super::child_exits`]): a child's exit is only ever
//! collected by its own thread, so runners go to one thread or another,
//! the least busy, rather than to one shared queue.
//!
//! Commands are cloned from threads of their own, as many as the spawner
//! threads: each gives up, once, what every command it clones would give
//! up at its start (see [`super::command_threads`]), which no runner's
//! spawn may inherit.

use std::cell::RefCell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Weak};

use tokio::signal::unix::{signal, SignalKind};

use super::child_exits::ChildExits;

type Job = Box<dyn FnOnce() + Send>;

/// Work a job leaves for after its answer, run on the job's own thread.
type Later = Box<dyn FnOnce()>;

thread_local! {
    /// On a spawner thread: the work its current job left for after its
    /// caller's answer (see [`after_the_answer`]). `None` elsewhere.
    static AFTER_THE_ANSWER: RefCell<Option<Vec<Later>>> = const { RefCell::new(None) };
}

/// Runs `work` once the current job has ended, on the same thread and
/// before its next job; at once when not called from a job.
///
/// Every job answers its caller through a channel before it ends, so this
/// is how a start leaves bookkeeping that nobody waits for (the claim of
/// an adopted uid) out of its caller's time, while keeping it ordered: it
/// is done before anything later on this thread, and before the daemon's
/// stop is over ([`Spawner::settle`]).
pub fn after_the_answer(work: impl FnOnce() + 'static) {
    let work: Later = Box::new(work);
    let left = AFTER_THE_ANSWER.with(|after| match after.borrow_mut().as_mut() {
        Some(queue) => {
            queue.push(work);
            None
        }
        None => Some(work),
    });
    if let Some(work) = left {
        work();
    }
}

/// Runs `job`, then what it left for after its answer; a panic in either
/// is caught and logged, so it cannot end the thread.
fn run_job(job: Job) {
    if std::panic::catch_unwind(AssertUnwindSafe(job)).is_err() {
        tracing::error!("a runner spawn panicked");
    }
    let left = AFTER_THE_ANSWER.with(|after| after.borrow_mut().as_mut().map(std::mem::take));
    for work in left.into_iter().flatten() {
        if std::panic::catch_unwind(AssertUnwindSafe(work)).is_err() {
            tracing::error!("the work a runner spawn left for after its answer panicked");
        }
    }
}

/// One spawner thread: its queue, and how many jobs wait in it.
struct Thread {
    jobs: Sender<Job>,
    queued: Arc<AtomicUsize>,
}

pub struct Spawner {
    /// The spawner threads, then as many command threads, then the parking
    /// thread, then the background thread (the last one).
    threads: Arc<Vec<Thread>>,
    /// How many spawner threads (and command threads) there are.
    count: usize,
    exits: Arc<ChildExits>,
}

/// The background thread: where work that no caller waits for runs (the
/// prepared views of `prepared`), at a lower priority than the spawner
/// threads, and whose children are reaped like theirs. Like them it lives
/// as long as the daemon, so what it starts may die with it.
///
/// Beside it, the parking thread, at the spawner threads' priority: the
/// runners parked ahead (see `prepared::parked_runner`) are its children,
/// and a child inherits its thread's `nice`, which an unprivileged runner
/// could never lower again (a daemon without `CAP_SYS_NICE` could not
/// either). It only clones them: its clone child's work is mostly the wait
/// for the v1 cgroup moves (an RCU grace period, asleep), not CPU.
#[derive(Clone)]
pub struct Background {
    threads: Arc<Vec<Thread>>,
    exits: Arc<ChildExits>,
}

/// The background thread's `nice` value: its work never takes a CPU from
/// a spawn that a caller waits for.
const BACKGROUND_NICE: libc::c_int = 10;

impl Background {
    /// Queues `work` (given the exits its children are reaped into); false
    /// when the thread is gone.
    pub fn run(&self, work: impl FnOnce(&ChildExits) + Send + 'static) -> bool {
        let exits = self.exits.clone();
        let Some(thread) = self.threads.last() else {
            return false;
        };
        send(thread, Box::new(move || work(&exits))).is_ok()
    }

    /// Runs `work` on the parking thread (given the exits its children are
    /// reaped into) and waits for its result; `None` when the thread is
    /// gone. For the background thread's jobs: a spawner thread's would
    /// wait behind the parking.
    pub fn on_parking_thread<T: Send + 'static>(
        &self,
        work: impl FnOnce(&ChildExits) -> T + Send + 'static,
    ) -> Option<T> {
        let exits = self.exits.clone();
        let thread = &self.threads[self.threads.len() - 2];
        let (done, result) = channel();
        send(
            thread,
            Box::new(move || {
                let _ = done.send(work(&exits));
            }),
        )
        .ok()?;
        result.recv().ok()
    }
}

/// The threads besides the spawner and command threads: parking, then
/// background.
const OTHER_THREADS: usize = 2;

/// What a thread of the spawner is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Spawn,
    /// Clones commands only (see [`super::command_threads`]): what it gives
    /// up at its first command is given up for good.
    Command,
    Park,
    Background,
}

impl Role {
    fn of(index: usize, count: usize) -> Role {
        match index {
            _ if index < count => Role::Spawn,
            _ if index < 2 * count => Role::Command,
            _ if index == 2 * count => Role::Park,
            _ => Role::Background,
        }
    }

    fn name(self, index: usize, count: usize) -> String {
        match self {
            Role::Spawn => format!("runner-spawn-{index}"),
            Role::Command => format!("command-spawn-{}", index - count),
            Role::Park => "runner-park".to_string(),
            Role::Background => "runner-prepare".to_string(),
        }
    }
}

impl Spawner {
    /// Starts the threads, and the task that has them reap their exited
    /// runners on every SIGCHLD (see [`super::child_exits`]). Call from
    /// within the runtime.
    pub fn start() -> std::io::Result<Spawner> {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let count = cpus.saturating_sub(1).clamp(1, 8);
        let exits = Arc::new(ChildExits::default());
        let runtime = tokio::runtime::Handle::current();
        let mut threads = Vec::with_capacity(2 * count + OTHER_THREADS);
        for index in 0..2 * count + OTHER_THREADS {
            let role = Role::of(index, count);
            let (jobs, queue) = channel::<Job>();
            let queued = Arc::new(AtomicUsize::new(0));
            let (runtime, left) = (runtime.clone(), queued.clone());
            let name = role.name(index, count);
            std::thread::Builder::new().name(name).spawn(move || {
                if role == Role::Command {
                    super::command_threads::mark_this_thread();
                }
                if role == Role::Background {
                    // SAFETY: setpriority on this thread's own id.
                    unsafe {
                        libc::setpriority(
                            libc::PRIO_PROCESS,
                            libc::gettid() as libc::id_t,
                            BACKGROUND_NICE,
                        )
                    };
                }
                let _runtime = runtime.enter();
                ChildExits::reap_children_of_this_thread();
                super::fd_band::claim_for_this_thread();
                AFTER_THE_ANSWER.with(|after| *after.borrow_mut() = Some(Vec::new()));
                while let Ok(job) = queue.recv() {
                    run_job(job);
                    left.fetch_sub(1, Ordering::Relaxed);
                }
            })?;
            threads.push(Thread { jobs, queued });
        }
        let threads = Arc::new(threads);
        // Registered before any runner exists, so no SIGCHLD is missed.
        let sigchld = signal(SignalKind::child())?;
        tokio::spawn(reap_on_sigchld(
            sigchld,
            Arc::downgrade(&threads),
            exits.clone(),
        ));
        Ok(Spawner {
            threads,
            count,
            exits,
        })
    }

    /// The background thread's handle.
    pub fn background(&self) -> Background {
        Background {
            threads: self.threads.clone(),
            exits: self.exits.clone(),
        }
    }

    /// Where the exits of runners started by [`run`](Self::run) arrive.
    pub fn exits(&self) -> &ChildExits {
        &self.exits
    }

    /// Runs `work` on the least busy spawner thread and waits for its
    /// result. Once queued, the work runs to the end whether or not anyone
    /// still waits. `None` only when the threads are gone.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        run_on_least_busy(&self.threads[..self.count], work).await
    }

    /// As [`run`](Self::run), on a command thread: for the clone of a
    /// command, and nothing else (see [`super::command_threads`]).
    pub async fn run_command<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        run_on_least_busy(&self.threads[self.count..2 * self.count], work).await
    }

    /// Returns once every job queued so far on the spawner and command
    /// threads has ended, with what it left for after its answer.
    pub async fn settle(&self) {
        let spawners = &self.threads[..2 * self.count];
        let waits: Vec<_> = spawners
            .iter()
            .filter_map(|thread| {
                let (done, ended) = tokio::sync::oneshot::channel::<()>();
                let job: Job = Box::new(move || {
                    let _ = done.send(());
                });
                send(thread, job).ok().map(|()| ended)
            })
            .collect();
        futures::future::join_all(waits).await;
    }
}

/// Runs `work` on the least busy of `threads` and waits for its result;
/// `None` when the threads are gone.
async fn run_on_least_busy<T: Send + 'static>(
    threads: &[Thread],
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (done, result) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = done.send(work());
    });
    let thread = threads
        .iter()
        .min_by_key(|thread| thread.queued.load(Ordering::Relaxed))?;
    send(thread, job).ok()?;
    result.await.ok()
}

fn send(thread: &Thread, job: Job) -> Result<(), ()> {
    thread.queued.fetch_add(1, Ordering::Relaxed);
    thread.jobs.send(job).map_err(|_| {
        thread.queued.fetch_sub(1, Ordering::Relaxed);
    })
}

/// On each SIGCHLD (signals coalesce: each pass reaps all that exited),
/// queues a reap on every spawner thread, since only a child's own thread
/// reaps it; unless the only exited child it sees is a command that its
/// own task reaps (see [`ChildExits::unprompted_exit`]). Ends with the
/// spawner.
async fn reap_on_sigchld(
    mut sigchld: tokio::signal::unix::Signal,
    threads: Weak<Vec<Thread>>,
    exits: Arc<ChildExits>,
) {
    loop {
        tokio::select! {
            signalled = sigchld.recv() => if signalled.is_none() {
                return;
            },
            () = exits.passed_over() => {}
        }
        let Some(threads) = threads.upgrade() else {
            return;
        };
        if !exits.unprompted_exit() {
            continue;
        }
        for thread in threads.iter() {
            let exits = exits.clone();
            let _ = send(thread, Box::new(move || exits.reap_own_children()));
        }
    }
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
    async fn a_command_runs_on_a_command_thread_and_a_runner_never_does() {
        let spawner = Spawner::start().unwrap();
        let name = || std::thread::current().name().map(str::to_string);
        for _ in 0..4 {
            let command = spawner.run_command(name).await.flatten().unwrap();
            assert!(command.starts_with("command-spawn-"), "{command}");
            let runner = spawner.run(name).await.flatten().unwrap();
            assert!(runner.starts_with("runner-spawn-"), "{runner}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_runner_is_reaped_by_its_spawner_thread_and_no_other_child_is() {
        let spawner = std::sync::Arc::new(Spawner::start().unwrap());
        // A child of another thread, exited before the runner: only its own
        // wait may collect it.
        let mut other = std::process::Command::new("/bin/sh")
            .args(["-c", "exit 7"])
            .spawn()
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let started = spawner.clone();
        let mut runner = spawner
            .run(move || {
                // Reaped by the spawner thread, not by this handle.
                #[allow(clippy::zombie_processes)]
                let child = std::process::Command::new("/bin/sh")
                    .args(["-c", "sleep 0.2; exit 3"])
                    .spawn()
                    .unwrap();
                started.exits().watch(child.id() as libc::pid_t, None)
            })
            .await
            .unwrap();
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), runner.wait())
            .await
            .expect("the runner's exit arrives")
            .expect("a status");
        assert_eq!(status.code(), Some(3));
        assert_eq!(
            other.wait().unwrap().code(),
            Some(7),
            "reaped by someone else"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_promptly_watched_child_is_reaped_once_by_whichever_reap_comes_first() {
        use std::os::unix::process::ExitStatusExt;
        // Every fourth ends by a signal, the others exit with their code.
        let script = |code: i32| match code % 4 {
            3 => "kill -TERM $$".to_string(),
            _ => format!("exit {code}"),
        };
        let spawner = std::sync::Arc::new(Spawner::start().unwrap());
        // Many at once, so SIGCHLD's reap on the spawner thread and the
        // pidfd's on the runtime race: each status arrives exactly once.
        let mut children = Vec::new();
        for code in 0..40 {
            let started = spawner.clone();
            let runner = spawner
                .run(move || {
                    // Reaped by one of the two reaps, not by this handle.
                    #[allow(clippy::zombie_processes)]
                    let child = std::process::Command::new("/bin/sh")
                        .args(["-c", &script(code)])
                        .spawn()
                        .unwrap();
                    started
                        .exits()
                        .watch_promptly(child.id() as libc::pid_t, None)
                })
                .await
                .unwrap();
            children.push((code, runner));
        }
        for (code, mut runner) in children {
            let status = tokio::time::timeout(std::time::Duration::from_secs(10), runner.wait())
                .await
                .expect("the exit arrives")
                .expect("a status");
            match code % 4 {
                3 => assert_eq!(status.signal(), Some(libc::SIGTERM), "{status}"),
                _ => assert_eq!(status.code(), Some(code), "{status}"),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn work_left_for_after_the_answer_runs_after_it_and_before_settle_returns() {
        use std::sync::atomic::AtomicBool;
        let spawner = Spawner::start().unwrap();
        let (open, gate) = std::sync::mpsc::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        // The answer arrives while the work it left still waits at the gate.
        let answer = spawner
            .run(move || {
                after_the_answer(move || {
                    gate.recv().unwrap();
                    flag.store(true, Ordering::SeqCst);
                });
                7
            })
            .await;
        assert_eq!(answer, Some(7));
        assert!(!done.load(Ordering::SeqCst));
        open.send(()).unwrap();
        spawner.settle().await;
        assert!(done.load(Ordering::SeqCst));

        // Off a spawner thread, at once.
        let ran = std::rc::Rc::new(std::cell::Cell::new(false));
        let seen = ran.clone();
        after_the_answer(move || seen.set(true));
        assert!(ran.get());
    }

    #[test]
    fn an_exited_child_is_seen_awaiting_its_reap_and_left_unreaped() {
        // Reaped by the waitpid below, not by this handle.
        #[allow(clippy::zombie_processes)]
        let child = std::process::Command::new("/bin/sh")
            .args(["-c", "exit 4"])
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        let pidfd = crate::drivers::local_process::pidfd::open(pid).unwrap();
        let ten_seconds = std::time::Duration::from_secs(10);
        assert!(crate::drivers::local_process::pidfd::wait_readable(
            std::os::fd::AsRawFd::as_raw_fd(&pidfd),
            ten_seconds
        ));
        assert!(ChildExits::default().unprompted_exit());
        // Still there for its own reap, with its status.
        let mut status = 0;
        // SAFETY: status is a valid out-pointer; pid is our exited child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(libc::WEXITSTATUS(status), 4);
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
