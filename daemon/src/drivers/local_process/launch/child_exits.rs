//! Runners' exits, learned without a descriptor per runner.
//!
//! Every runner is a child of the spawner thread that cloned it (see
//! [`super::spawner`]). On SIGCHLD each spawner thread reaps its own exited
//! children with `waitpid(-1, WNOHANG | __WNOTHREAD)` and hands each status
//! to the runner's watcher. `__WNOTHREAD` limits the wait to children of
//! the calling thread, so no other child of the daemon — the group reaper,
//! an `nft` run, whatever a library starts on another thread — is ever
//! reaped here behind its owner's back; and a spawner thread starts nothing
//! but runners.
//!
//! Why not a pidfd per runner, as an earlier version had: with its output
//! pipe that was two descriptors per running sandbox, and a daemon whose
//! hard open-file limit it cannot raise (no `CAP_SYS_RESOURCE`; 20,000 on
//! the benchmark's machine) could then never hold 10,000 sandboxes. The
//! pid stays ours either way: an exited child stays a zombie, its number
//! reserved, until its thread reaps it here.
//!
//! A command, short-lived and awaited by a caller, is watched promptly
//! instead ([`ChildExits::watch_promptly`]): by a pidfd as well, so its
//! awaiting task reaps it the moment it exits rather than after SIGCHLD
//! has gone round the signal task and every spawner thread (on a loaded
//! host each of those wake-ups waits for a CPU). Either way exactly one
//! reap happens: both take the lock of the awaited exits around theirs.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

use super::holder::Holder;

thread_local! {
    /// True on the spawner threads, whose children are reaped here.
    static REAPED_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The exits awaited, by pid.
type Waiting = Mutex<HashMap<libc::pid_t, oneshot::Sender<ExitStatus>>>;

/// The exits awaited.
#[derive(Default)]
pub struct ChildExits {
    waiting: Arc<Waiting>,
    prompted: Arc<Prompted>,
}

/// The children watched by a pidfd, whose own tasks reap them: a SIGCHLD
/// that finds only one of those exited wakes no spawner thread (see
/// [`ChildExits::unprompted_exit`]).
#[derive(Default)]
struct Prompted {
    pids: Mutex<std::collections::HashSet<libc::pid_t>>,
    /// Told when a prompt watch ends while another exited child waits for
    /// its reap (one a SIGCHLD passed over, seeing a prompted one first).
    passed_over: tokio::sync::Notify,
}

/// A pidfd of a watched child, and where its exit is awaited.
struct Prompt {
    pid: libc::pid_t,
    pidfd: AsyncFd<OwnedFd>,
    waiting: Arc<Waiting>,
    prompted: Arc<Prompted>,
}

/// A started runner, until its exit is known.
pub struct RunnerProcess {
    /// The sandbox's group leader: the runner, or its init (see
    /// `isolation::namespaces`).
    pid: libc::pid_t,
    /// The runner's own host pid, the one reported.
    runner_pid: libc::pid_t,
    /// Under an init: where it records the runner's wait status.
    status_file: Option<std::path::PathBuf>,
    /// In a prepared view: its holder, ended once the exit is known (with
    /// it the view and whatever the runner left running in it).
    holder: Option<Holder>,
    /// Field 22 of its `/proc/<pid>/stat`, as the child read it before exec.
    start_time: Option<u64>,
    exit: oneshot::Receiver<ExitStatus>,
    /// Watched promptly: reaped by [`RunnerProcess::wait`] itself. Boxed:
    /// only a command has one, and a runner's watcher (10,000 of them wait
    /// at once) keeps its future small.
    prompt: Option<Box<Prompt>>,
}

impl RunnerProcess {
    /// The group leader's pid: the one signalled, reaped and in the ledger.
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// The runner's host pid (the leader's, without an init).
    pub fn runner_pid(&self) -> u32 {
        self.runner_pid as u32
    }

    /// Notes that the leader is a sandbox's init whose runner is
    /// `runner_pid`, and whose exit status is the one in `status_file`;
    /// or a runner in a prepared view whose `holder` ends with it.
    pub fn running(
        mut self,
        runner_pid: libc::pid_t,
        status_file: Option<std::path::PathBuf>,
        holder: Option<Holder>,
    ) -> RunnerProcess {
        self.runner_pid = runner_pid;
        self.status_file = status_file;
        self.holder = holder;
        self
    }

    /// Its start time in clock ticks since boot, when the child could read it.
    pub fn start_time(&self) -> Option<u64> {
        self.start_time
    }

    /// Its exit status, once it has exited and been reaped: under an init,
    /// the runner's own, as init recorded it (the init's when it could
    /// not: killed with the rest of its cgroup). `None` only if its reaper
    /// is gone (the spawner threads ended). Call it once: the exit is
    /// handed over once. By reference, so a watcher's future holds a
    /// pointer (see `watch_runner`); a holder ends when the process is
    /// dropped.
    pub async fn wait(&mut self) -> Option<ExitStatus> {
        let leader = match self.prompt.take() {
            // Boxed, as the prompt is: only a command's wait holds its future.
            Some(prompt) => Box::pin(prompt.exit(&mut self.exit)).await,
            None => (&mut self.exit).await.ok(),
        };
        match &self.status_file {
            Some(file) => recorded_status(file).or(leader),
            None => leader,
        }
    }
}

impl ChildExits {
    /// Marks the calling thread as one whose children [`reap_own_children`]
    /// reaps. For the spawner threads only.
    ///
    /// [`reap_own_children`]: ChildExits::reap_own_children
    pub fn reap_children_of_this_thread() {
        REAPED_HERE.with(|here| here.set(true));
    }

    /// Watches `pid`, a child the calling thread has just cloned and not
    /// reaped. On a spawner thread its exit is registered before any reap
    /// can run there (the thread is busy with this very call). Elsewhere
    /// (a unit test) a thread of its own waits for it.
    pub fn watch(&self, pid: libc::pid_t, start_time: Option<u64>) -> RunnerProcess {
        let (sender, exit) = oneshot::channel();
        if REAPED_HERE.with(std::cell::Cell::get) {
            self.waiting().insert(pid, sender);
        } else {
            std::thread::spawn(move || {
                if let Some(status) = wait_for(pid) {
                    let _ = sender.send(status);
                }
            });
        }
        RunnerProcess {
            pid,
            runner_pid: pid,
            status_file: None,
            holder: None,
            start_time,
            exit,
            prompt: None,
        }
    }

    /// As [`watch`](Self::watch), and by a pidfd too (see the module doc),
    /// when the calling thread is a spawner thread and a pidfd can be had.
    /// Call within the runtime.
    pub fn watch_promptly(&self, pid: libc::pid_t, start_time: Option<u64>) -> RunnerProcess {
        let mut process = self.watch(pid, start_time);
        if REAPED_HERE.with(std::cell::Cell::get) {
            // Without one (out of descriptors), SIGCHLD's reap still comes.
            process.prompt = super::super::pidfd::open_watched(pid).ok().map(|pidfd| {
                lock(&self.prompted.pids).insert(pid);
                Box::new(Prompt {
                    pid,
                    pidfd,
                    waiting: self.waiting.clone(),
                    prompted: self.prompted.clone(),
                })
            });
        }
        process
    }

    /// Whether a child of the daemon has exited, is not reaped yet, and is
    /// not watched by a pidfd (whose task reaps it): what a SIGCHLD wakes
    /// the spawner threads for. Most SIGCHLDs come from commands, and a
    /// command's SIGCHLD reached the signal task before its own task had
    /// reaped it: each woke every spawner and command thread for a reap
    /// that found nothing (on a 2-CPU host those wake-ups took the CPUs
    /// from the command's answer). `waitid` with `WNOWAIT` names one
    /// exited child and reaps nothing; when it names a prompted one, any
    /// other waiting behind it is found when that one's watch ends
    /// ([`Self::passed_over`]). A child that exits after this look sends a
    /// SIGCHLD of its own.
    pub fn unprompted_exit(&self) -> bool {
        self.unprompted(exited_child())
    }

    /// Whether `exited` calls for the spawner threads' reap.
    fn unprompted(&self, exited: ExitedChild) -> bool {
        match exited {
            ExitedChild::None => false,
            ExitedChild::Pid(pid) => !lock(&self.prompted.pids).contains(&pid),
            ExitedChild::Unknown => true,
        }
    }

    /// Resolves when a prompt watch has ended with an exited child still
    /// waiting for its reap: look again (see [`Self::unprompted_exit`]).
    pub async fn passed_over(&self) {
        self.prompted.passed_over.notified().await;
    }

    /// Reaps every exited child of the calling thread and hands each status
    /// to its watcher.
    pub fn reap_own_children(&self) {
        loop {
            let mut status = 0;
            // Held across the reap: see `Prompt::reap`.
            let mut waiting = self.waiting();
            // SAFETY: status is a valid out-pointer; WNOHANG returns at once
            // and __WNOTHREAD limits the wait to this thread's children.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WNOTHREAD) };
            if pid <= 0 {
                // 0: none exited yet; ECHILD: no children; EINTR: the next
                // SIGCHLD brings us back.
                return;
            }
            match waiting.remove(&pid) {
                Some(watcher) => {
                    let _ = watcher.send(ExitStatus::from_raw(status));
                }
                None => tracing::warn!(pid, "reaped a child no runner watcher waited for"),
            }
        }
    }

    fn waiting(&self) -> MutexGuard<'_, HashMap<libc::pid_t, oneshot::Sender<ExitStatus>>> {
        lock(&self.waiting)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What `waitid` with `WNOWAIT` says of the daemon's exited children.
enum ExitedChild {
    None,
    /// This one (and maybe others) has exited and is not reaped.
    Pid(libc::pid_t),
    /// The call failed other than with ECHILD: look anyway.
    Unknown,
}

fn exited_child() -> ExitedChild {
    // SAFETY: an all-zero siginfo_t is a valid out-value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL;
    // SAFETY: waitid into a live siginfo_t; WNOWAIT leaves the child as it is.
    let done = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, flags) };
    if done < 0 {
        // ECHILD: no children at all.
        return match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ECHILD) => ExitedChild::None,
            _ => ExitedChild::Unknown,
        };
    }
    // SAFETY: filled by waitid (si_pid 0 when no child has exited).
    match unsafe { info.si_pid() } {
        0 => ExitedChild::None,
        pid => ExitedChild::Pid(pid),
    }
}

impl Drop for Prompt {
    /// However the watch ended (reaped here, by a spawner thread, or given
    /// up), a SIGCHLD now wakes the spawner threads for this child again;
    /// and if another exited child waits, perhaps passed over while this
    /// one stood in front of it, the signal task looks again.
    fn drop(&mut self) {
        lock(&self.prompted.pids).remove(&self.pid);
        if !matches!(exited_child(), ExitedChild::None) {
            self.prompted.passed_over.notify_one();
        }
    }
}

impl Prompt {
    /// Its child's exit: reaped here once its pidfd says it exited, unless
    /// its spawner thread's reap (`exit`) came first.
    async fn exit(self, exit: &mut oneshot::Receiver<ExitStatus>) -> Option<ExitStatus> {
        tokio::select! {
            status = &mut *exit => return status.ok(),
            _ = self.pidfd.readable() => {}
        }
        match self.reap() {
            Some(status) => Some(status),
            None => exit.await.ok(),
        }
    }

    /// Reaps its child when it is still awaited; `None` when its spawner
    /// thread reaped it first (its status is on the way to the watcher).
    /// Both reaps hold the lock around the wait and the watcher's removal,
    /// so a status is taken once and never lost between them.
    fn reap(&self) -> Option<ExitStatus> {
        let pid = self.pid;
        let mut waiting = lock(&self.waiting);
        if !waiting.contains_key(&pid) {
            return None;
        }
        // SAFETY: an all-zero siginfo_t is a valid out-value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid into `info`, on the pidfd we own: it reaps this
        // process and no other (not a later child given the same pid once
        // its spawner thread reaped it). Without __WNOTHREAD any thread of
        // the daemon may reap a child of the spawner thread that cloned it.
        let done = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                self.pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG,
            )
        };
        // SAFETY: filled by waitid (si_pid 0 when nothing was reaped).
        if done < 0 || unsafe { info.si_pid() } != pid {
            return None;
        }
        waiting.remove(&pid);
        Some(ExitStatus::from_raw(wait_status(&info)))
    }
}

/// The wait status `waitpid` gives for the exit `waitid` told in `info`.
fn wait_status(info: &libc::siginfo_t) -> i32 {
    // SAFETY: `info` was filled by waitid for a child's exit.
    let status = unsafe { info.si_status() };
    match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_DUMPED => (status & 0x7f) | 0x80,
        _ => status & 0x7f,
    }
}

/// Blocks until `pid`, a child of this process, exits; reaps it.
pub fn wait_for(pid: libc::pid_t) -> Option<ExitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out-pointer; pid is our child.
        match unsafe { libc::waitpid(pid, &mut status, 0) } {
            reaped if reaped == pid => return Some(ExitStatus::from_raw(status)),
            _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
            _ => return None,
        }
    }
}

/// The runner's wait status as its init recorded it in `status_file`
/// (which is removed); `None` when init did not (it was killed first: the
/// cgroup kill, which the runner then got too).
fn recorded_status(status_file: &std::path::Path) -> Option<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    let text = std::fs::read_to_string(status_file).ok();
    let _ = std::fs::remove_file(status_file);
    let raw: i32 = text?.trim().parse().ok()?;
    Some(std::process::ExitStatus::from_raw(raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_child_watched_off_the_spawner_threads_is_still_reaped() {
        let exits = ChildExits::default();
        // Reaped by the waiting thread `watch` starts, not by this handle.
        #[allow(clippy::zombie_processes)]
        let child = std::process::Command::new("/bin/sh")
            .args(["-c", "exit 5"])
            .spawn()
            .unwrap();
        let mut runner = exits.watch(child.id() as libc::pid_t, None);
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), runner.wait())
            .await
            .expect("the exit arrives")
            .expect("a status");
        assert_eq!(status.code(), Some(5));
    }

    #[tokio::test]
    async fn an_exit_its_own_task_reaps_wakes_no_spawner_thread_and_hides_none() {
        // (Other tests of this process have children too: only this test's
        // own pids are looked at.)
        ChildExits::reap_children_of_this_thread();
        let exits = ChildExits::default();
        let exited = |code: u8| {
            // Reaped below, not by this handle.
            #[allow(clippy::zombie_processes)]
            let child = std::process::Command::new("/bin/sh")
                .args(["-c", &format!("exit {code}")])
                .spawn()
                .unwrap();
            child.id() as libc::pid_t
        };
        let prompted = exited(3);
        let mut command = exits.watch_promptly(prompted, None);
        assert!(command.prompt.is_some(), "a pidfd");
        let plain = exited(4);
        let mut runner = exits.watch(plain, None);
        let ten_seconds = std::time::Duration::from_secs(10);
        for pid in [prompted, plain] {
            let pidfd = crate::drivers::local_process::pidfd::open(pid).unwrap();
            assert!(crate::drivers::local_process::pidfd::wait_readable(
                pidfd.as_raw_fd(),
                ten_seconds
            ));
        }
        // The command's exit wakes no spawner thread; the runner's does.
        assert!(!exits.unprompted(ExitedChild::Pid(prompted)));
        assert!(exits.unprompted(ExitedChild::Pid(plain)));
        assert_eq!(command.wait().await.unwrap().code(), Some(3));
        // Its watch ended with the runner still waiting: looked at again,
        // and its pid is an ordinary one from now on.
        tokio::time::timeout(ten_seconds, exits.passed_over())
            .await
            .expect("the signal task is told to look again");
        assert!(exits.unprompted(ExitedChild::Pid(prompted)));
        exits.reap_own_children();
        assert_eq!(runner.wait().await.unwrap().code(), Some(4));
    }
}
