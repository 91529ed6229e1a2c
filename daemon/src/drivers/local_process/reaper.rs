//! The group reaper: a tiny process that kills every runner group if the
//! daemon dies without doing it itself (SIGKILL, abort, OOM kill).
//!
//! `PR_SET_PDEATHSIG` only reaches a runner's leader, and only when the
//! *thread* that spawned it exits; a grandchild in the runner's group would
//! survive. So the daemon re-executes itself as this reaper with a pipe on
//! its stdin, and tells it `+<pgid>` when a runner group starts and
//! `-<pgid>` when it is gone. When the daemon dies for any reason the
//! kernel closes the pipe; the reaper reads EOF, SIGKILLs every group still
//! listed, then every process still working inside the sandboxes dir (a
//! runner forked in the instant before it was listed), and exits. It
//! ignores SIGINT/SIGTERM/SIGHUP so a terminal's Ctrl-C, which also reaches
//! it, cannot make it leave before the daemon.
//!
//! The reaper holds the state directory's lock (the daemon hands it the
//! same open file as its stdout), so a restarted daemon cannot take over the
//! state directory while the old instance's reaper is still killing.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::Mutex;

use anyhow::Context;
use nix::sys::signal::{killpg, signal, SigHandler, Signal};
use nix::unistd::Pid;

/// The hidden first argument that makes `sandboxd` run as the reaper.
pub const ARG: &str = "__group-reaper";

/// The daemon's end of the pipe.
pub struct GroupReaper {
    stdin: Mutex<ChildStdin>,
    child: Mutex<Child>,
}

impl GroupReaper {
    /// Starts the reaper process (this same binary), sharing `state_lock`.
    pub fn start(state_lock: &File, sandboxes: &Path) -> anyhow::Result<GroupReaper> {
        let exe = std::env::current_exe()
            .context("cannot find this executable to start the group reaper")?;
        let lock = state_lock
            .try_clone()
            .context("cannot share the state directory lock")?;
        let mut child = Command::new(exe)
            .arg(ARG)
            .arg(sandboxes)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(lock))
            .env_clear()
            .spawn()
            .context("cannot start the group reaper")?;
        let stdin = child.stdin.take().context("group reaper has no stdin")?;
        Ok(GroupReaper {
            stdin: Mutex::new(stdin),
            child: Mutex::new(child),
        })
    }

    /// A runner group now exists.
    pub fn track(&self, pgid: i32) {
        self.send('+', pgid);
    }

    /// A runner group is gone.
    pub fn untrack(&self, pgid: i32) {
        self.send('-', pgid);
    }

    fn send(&self, op: char, pgid: i32) {
        // One short line per write: atomic on a pipe, and the reaper reads
        // continuously, so this does not block in practice.
        let line = format!("{op}{pgid}\n");
        let mut stdin = self
            .stdin
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Err(error) = stdin.write_all(line.as_bytes()) {
            tracing::error!(%error, pgid, "group reaper is gone: runners may outlive a crash of this daemon");
        }
    }

    /// True while the reaper process runs.
    pub fn is_alive(&self) -> bool {
        let mut child = self
            .child
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        matches!(child.try_wait(), Ok(None))
    }
}

/// The reaper process's main.
pub fn run_reaper_process() -> ExitCode {
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGPIPE,
    ] {
        // SAFETY: SIG_IGN installs no handler code; this process is single-threaded.
        let _ = unsafe { signal(sig, SigHandler::SigIgn) };
    }
    let sandboxes = std::env::args_os().nth(2).map(PathBuf::from);
    let mut groups = HashSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let (op, pgid) = line.split_at(line.len().min(1));
        match (op, pgid.parse::<i32>()) {
            ("+", Ok(pgid)) if pgid > 1 => {
                groups.insert(pgid);
            }
            ("-", Ok(pgid)) => {
                groups.remove(&pgid);
            }
            _ => {}
        }
    }
    // EOF: the daemon is gone. Nothing could ever re-adopt these runners.
    for pgid in groups {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    if let Some(sandboxes) = sandboxes.filter(|dir| dir.is_absolute()) {
        super::workspace_scan::kill_processes_in(&sandboxes);
    }
    ExitCode::SUCCESS
}
