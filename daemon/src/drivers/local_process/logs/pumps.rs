//! The pump thread: one thread that moves every running runner's output
//! from its pipe into its file (see [`super::pump`] for one runner's step).
//!
//! Why one thread with its own `epoll` set rather than a task and an
//! `AsyncFd` per runner (as an earlier version had): a daemon holding
//! 10,000 quiet runners paid about 1 KiB of memory for each one's task and
//! registration, a third of all it held per sandbox. Here a runner's pump
//! is an entry in a table and a registration in the kernel's `epoll` set.
//! It also keeps the file writes off the runtime's worker threads: a disk
//! that is slow to take a `splice` slows the output of runners, never the
//! daemon's answers.
//!
//! The set is level-triggered and each ready pipe moves one chunk per
//! round, so a runner that writes without pause cannot starve the others.
//! Every [`TICK`] the thread closes the files of runners quiet for
//! [`FILE_IDLE`]; a pump that found no descriptor left to open its file
//! with leaves the set and comes back after [`OPEN_RETRY`].

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use tokio::sync::oneshot;

use super::pump::{self, OutputFile, FILE_IDLE, OPEN_RETRY};
use super::RunnerLogs;

/// How often idle files are closed and waiting pumps retried, at most.
const TICK: Duration = Duration::from_millis(500);
/// The `epoll` token of the wake-up eventfd; pumps count from 1.
const WAKE: u64 = 0;
/// Ready events taken per wait.
const EVENTS: usize = 256;

enum Command {
    /// Start pumping `pipe` into `output` (`output.base` names it).
    Add { pipe: OwnedFd, output: OutputFile },
    /// Move what is left, end, and say so.
    Finish {
        base: String,
        done: oneshot::Sender<()>,
    },
    /// End now, dropping what the pipe holds.
    Remove { base: String },
}

/// The handle the logs hold: where commands go.
pub struct Pumps {
    commands: Sender<Command>,
    wake: Arc<EventFd>,
}

impl Pumps {
    /// Starts the thread. It ends once `logs` is gone.
    pub fn start(logs: Weak<RunnerLogs>) -> std::io::Result<Pumps> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        let wake = Arc::new(EventFd::from_flags(
            EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
        )?);
        epoll.add(wake.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, WAKE))?;
        let (commands, queue) = channel();
        let thread_wake = wake.clone();
        std::thread::Builder::new()
            .name("output-pump".into())
            .spawn(move || PumpThread::new(epoll, thread_wake, queue, logs).run())?;
        Ok(Pumps { commands, wake })
    }

    /// Starts moving `pipe` into `output`.
    pub fn add(&self, pipe: OwnedFd, output: OutputFile) {
        self.send(Command::Add { pipe, output });
    }

    /// Moves what `base`'s pipe still holds (bounded: a process that
    /// escaped the runner cannot keep it going) and waits until it is in
    /// the file.
    pub async fn finish(&self, base: &str) {
        let (done, finished) = oneshot::channel();
        self.send(Command::Finish {
            base: base.to_string(),
            done,
        });
        let _ = finished.await;
    }

    /// Ends `base`'s pump now.
    pub fn remove(&self, base: &str) {
        self.send(Command::Remove {
            base: base.to_string(),
        });
    }

    fn send(&self, command: Command) {
        if self.commands.send(command).is_ok() {
            // Only fails when the counter is saturated: already awake.
            let _ = self.wake.write(1);
        }
    }
}

/// One runner's pump.
struct Entry {
    pipe: OwnedFd,
    output: OutputFile,
    last_moved: Instant,
    /// Out of the set until then, for want of a descriptor.
    retry_at: Option<Instant>,
    /// Whether the want of a descriptor has been logged (once per episode).
    warned: bool,
}

struct PumpThread {
    epoll: Epoll,
    wake: Arc<EventFd>,
    commands: Receiver<Command>,
    logs: Weak<RunnerLogs>,
    /// Boxed: a table sized for 10,000 entries keeps a third of its
    /// slots empty, and an empty slot costs only a pointer.
    entries: HashMap<u64, Box<Entry>>,
    tokens: HashMap<String, u64>,
    next_token: u64,
    next_tick: Instant,
}

impl PumpThread {
    fn new(
        epoll: Epoll,
        wake: Arc<EventFd>,
        commands: Receiver<Command>,
        logs: Weak<RunnerLogs>,
    ) -> PumpThread {
        PumpThread {
            epoll,
            wake,
            commands,
            logs,
            entries: HashMap::new(),
            tokens: HashMap::new(),
            next_token: WAKE + 1,
            next_tick: Instant::now() + TICK,
        }
    }

    fn run(mut self) {
        let mut events = vec![EpollEvent::empty(); EVENTS];
        loop {
            let wait = self.next_tick.saturating_duration_since(Instant::now());
            let timeout = EpollTimeout::from(wait.as_millis().min(u128::from(u16::MAX)) as u16);
            let ready = match self.epoll.wait(&mut events, timeout) {
                Ok(ready) => ready,
                Err(Errno::EINTR) => 0,
                Err(error) => {
                    tracing::error!(%error, "the output pump cannot wait for runners' output; runners' output is no longer written");
                    return;
                }
            };
            let Some(logs) = self.logs.upgrade() else {
                return;
            };
            for event in &events[..ready] {
                match event.data() {
                    WAKE => {
                        let _ = self.wake.read();
                    }
                    token => self.step(token, &logs),
                }
            }
            if !self.take_commands(&logs) {
                return;
            }
            if Instant::now() >= self.next_tick {
                self.tick();
                self.next_tick = Instant::now() + TICK;
            }
        }
    }

    /// Handles the queued commands; false once the logs' handle is gone.
    fn take_commands(&mut self, logs: &RunnerLogs) -> bool {
        loop {
            match self.commands.try_recv() {
                Ok(Command::Add { pipe, output }) => self.add(pipe, output),
                Ok(Command::Finish { base, done }) => {
                    if let Some(token) = self.tokens.get(&base).copied() {
                        if let Some(mut entry) = self.end(token) {
                            pump::finish(logs, entry.pipe.as_fd(), &mut entry.output);
                        }
                    }
                    let _ = done.send(());
                }
                Ok(Command::Remove { base }) => {
                    if let Some(token) = self.tokens.get(&base).copied() {
                        self.end(token);
                    }
                }
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn add(&mut self, pipe: OwnedFd, output: OutputFile) {
        // Never two pumps on one file: a runner is only started once its
        // predecessor's pump is finished, so this is only a safeguard.
        if let Some(earlier) = self.tokens.get(&output.base).copied() {
            self.end(earlier);
        }
        let token = self.next_token;
        self.next_token += 1;
        if let Err(error) = self
            .epoll
            .add(pipe.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, token))
        {
            tracing::warn!(log = %output.current().display(), %error, "cannot watch a runner's output pipe; its output is lost");
            return;
        }
        self.tokens.insert(output.base.clone(), token);
        self.entries.insert(
            token,
            Box::new(Entry {
                pipe,
                output,
                last_moved: Instant::now(),
                retry_at: None,
                warned: false,
            }),
        );
    }

    /// Takes a pump out of the set and the tables, with its pipe still open.
    fn end(&mut self, token: u64) -> Option<Box<Entry>> {
        let entry = self.entries.remove(&token)?;
        self.tokens.remove(&entry.output.base);
        if entry.retry_at.is_none() {
            let _ = self.epoll.delete(entry.pipe.as_fd());
        }
        Some(entry)
    }

    /// One chunk of one ready pipe.
    fn step(&mut self, token: u64, logs: &RunnerLogs) {
        let Some(entry) = self.entries.get_mut(&token) else {
            return;
        };
        match entry.output.step(entry.pipe.as_fd(), logs) {
            Ok(0) => {
                // Every write end is closed: the runner and all it left are gone.
                if let Some(mut entry) = self.end(token) {
                    entry.output.end(logs);
                }
            }
            Ok(moved) => {
                entry
                    .output
                    .counter
                    .fetch_add(moved as u64, std::sync::atomic::Ordering::Relaxed);
                entry.last_moved = Instant::now();
                if entry.warned {
                    tracing::info!(log = %entry.output.current().display(), "a runner's output file is open again");
                    entry.warned = false;
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) if crate::fd_limit::is_exhaustion(&error) => {
                if !entry.warned {
                    tracing::warn!(log = %entry.output.current().display(), "cannot open a runner's output file: {}; its output waits in its pipe", crate::fd_limit::describe(&error));
                    entry.warned = true;
                }
                // Out of the level-triggered set, or it would be ready at
                // once again; back at the next tick after the retry time.
                let _ = self.epoll.delete(entry.pipe.as_fd());
                entry.retry_at = Some(Instant::now() + OPEN_RETRY);
                self.next_tick = self.next_tick.min(Instant::now() + OPEN_RETRY);
            }
            Err(error) => {
                tracing::warn!(log = %entry.output.current().display(), %error, "cannot read a runner's output pipe; closing it");
                if let Some(mut entry) = self.end(token) {
                    entry.output.end(logs);
                }
            }
        }
    }

    /// Closes the files of quiet runners; puts waiting pumps back.
    fn tick(&mut self) {
        let now = Instant::now();
        for (token, entry) in &mut self.entries {
            if entry.output.live().is_some() && now.duration_since(entry.last_moved) >= FILE_IDLE {
                entry.output.close();
            }
            if entry.retry_at.is_some_and(|at| at <= now) {
                let event = EpollEvent::new(EpollFlags::EPOLLIN, *token);
                if self.epoll.add(entry.pipe.as_fd(), event).is_ok() {
                    entry.retry_at = None;
                }
            }
        }
    }
}
