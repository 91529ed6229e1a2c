//! The group reaper: a tiny process that kills every runner if the daemon
//! dies without doing it itself (SIGKILL, abort, OOM kill).
//!
//! With a cgroup per sandbox it needs no bookkeeping: told the `sandboxes/`
//! cgroup tree when it starts, at the daemon's death it kills that whole
//! tree (one `cgroup.kill` write reaches every sandbox and everything each
//! forked, whatever sessions or directories they moved to), waits for it
//! to empty and removes the sandboxes' cgroups. The daemon then sends it
//! nothing per runner. What follows is the process-group fallback, used
//! where no writable cgroup v2 exists.
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
//! The reaper does not wake for every line: it waits for the pipe to close
//! (POLLHUP) and takes in what was written once a second, so a burst of
//! spawns costs the machine no reaper context switches. The pipe is
//! enlarged to 1 MiB (over 100,000 lines) so a second's worth never fills
//! it; at EOF it reads whatever is left before killing, and since a pipe
//! keeps the daemon's order, the set it kills is exact.
//!
//! The reaper holds the state directory's lock (the daemon hands it the
//! same open file as its stdout), so a restarted daemon cannot take over the
//! state directory while the old instance's reaper is still killing.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::Mutex;

use anyhow::Context;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::cgroup::kill::{self, Dirs};

/// The hidden first argument that makes `sandboxd` run as the reaper.
pub const ARG: &str = "__group-reaper";

/// The argument after which the reaper is given the `sandboxes/` cgroup
/// directories (v2 first, then each v1 one).
const CGROUP_ARG: &str = "--cgroup";

/// The daemon's end of the pipe.
pub struct GroupReaper {
    stdin: Mutex<ChildStdin>,
    child: Mutex<Child>,
    /// False when the reaper kills a cgroup tree: nothing to track then.
    tracks_groups: bool,
}

impl GroupReaper {
    /// Starts the reaper process (this same binary), sharing `state_lock`.
    /// With `cgroup` (the `sandboxes/` tree) it kills that tree at the
    /// daemon's death; without, the groups it is told of.
    pub fn start(
        state_lock: &File,
        sandboxes: &Path,
        cgroup: Option<&Dirs>,
    ) -> anyhow::Result<GroupReaper> {
        let exe = std::env::current_exe()
            .context("cannot find this executable to start the group reaper")?;
        let lock = state_lock
            .try_clone()
            .context("cannot share the state directory lock")?;
        let mut command = Command::new(exe);
        command.arg(ARG).arg(sandboxes);
        if let Some(dirs) = cgroup {
            command.arg(CGROUP_ARG).arg(&dirs.v2).args(&dirs.v1);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::from(lock))
            .env_clear()
            .spawn()
            .context("cannot start the group reaper")?;
        let stdin = child.stdin.take().context("group reaper has no stdin")?;
        // SAFETY: fcntl on the pipe's write end, which `stdin` owns.
        if unsafe { libc::fcntl(stdin.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) } < 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "cannot enlarge the group reaper's pipe");
        }
        Ok(GroupReaper {
            stdin: Mutex::new(stdin),
            child: Mutex::new(child),
            tracks_groups: cgroup.is_none(),
        })
    }

    /// A runner group now exists.
    pub fn track(&self, pgid: i32) {
        if self.tracks_groups {
            self.send('+', pgid);
        }
    }

    /// A runner group is gone.
    pub fn untrack(&self, pgid: i32) {
        if self.tracks_groups {
            self.send('-', pgid);
        }
    }

    fn send(&self, op: char, pgid: i32) {
        // One short line per write: atomic on a pipe. The reaper takes the
        // lines in every second, so this blocks only if a second's worth
        // outgrew the pipe.
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
    crate::helper_signals::ignore_terminal_signals();
    let sandboxes = std::env::args_os().nth(2).map(PathBuf::from);
    let cgroup = cgroup_from_args(std::env::args_os().skip(3).map(PathBuf::from));
    let mut tracked = Tracked::default();
    let stdin = std::io::stdin();
    let fd = stdin.as_raw_fd();
    // Reads below must return what is there, not wait for more.
    let _ = nix::fcntl::fcntl(
        &stdin,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    loop {
        let mut hangup = libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        };
        // SAFETY: one valid pollfd; with no events asked for, it returns on
        // POLLHUP/POLLERR (the daemon is gone) or after the interval.
        unsafe { libc::poll(&mut hangup, 1, DRAIN_INTERVAL_MS) };
        match tracked.drain(&mut stdin.lock()) {
            Ok(false) => {}
            Ok(true) | Err(_) => break,
        }
    }
    // EOF: the daemon is gone. Nothing could ever re-adopt these runners.
    if let Some(dirs) = &cgroup {
        // The sandboxes' cgroups, then `sandboxes/` and an empty root: a
        // restarted daemon makes them again (and cannot start before this
        // exits: the state directory's lock is held here).
        if kill::kill_children_and_remove(dirs, CGROUP_EMPTY_WAIT).is_ok() {
            kill::remove_with_parents(dirs);
        }
    }
    for pgid in tracked.groups {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    if let Some(sandboxes) = sandboxes.filter(|dir| dir.is_absolute()) {
        super::workspaces::scan::kill_processes_in(&sandboxes);
    }
    ExitCode::SUCCESS
}

/// How long the killed `sandboxes/` tree may take to empty.
const CGROUP_EMPTY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// `--cgroup <v2> [<v1>…]` from the arguments after the workspaces' dir.
fn cgroup_from_args(mut args: impl Iterator<Item = PathBuf>) -> Option<Dirs> {
    if args.next()?.as_os_str() != CGROUP_ARG {
        return None;
    }
    let v2 = args.next().filter(|dir| dir.is_absolute())?;
    Some(Dirs {
        v2,
        v1: args.filter(|dir| dir.is_absolute()).collect(),
    })
}

/// How often the reaper takes in what the daemon wrote.
const DRAIN_INTERVAL_MS: libc::c_int = 1000;
/// The pipe's size: lines written between two drains must fit.
const PIPE_SIZE: libc::c_int = 1 << 20;

/// The groups the daemon has said exist, from its `+`/`-` lines.
#[derive(Default)]
struct Tracked {
    groups: HashSet<i32>,
    /// The start of a line whose end has not been read yet.
    partial: Vec<u8>,
}

impl Tracked {
    /// Reads what is available from `input` (non-blocking) and applies it.
    /// True at end of file: the daemon is gone.
    fn drain(&mut self, input: &mut impl Read) -> std::io::Result<bool> {
        let mut buf = [0u8; 8192];
        loop {
            let n = match input.read(&mut buf) {
                Ok(0) => return Ok(true),
                Ok(n) => n,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            self.partial.extend_from_slice(&buf[..n]);
            let complete = self
                .partial
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let lines: Vec<u8> = self.partial.drain(..complete).collect();
            for line in lines.split(|&b| b == b'\n') {
                self.apply(line);
            }
        }
    }

    fn apply(&mut self, line: &[u8]) {
        let Ok(line) = std::str::from_utf8(line) else {
            return;
        };
        let (op, pgid) = line.split_at(line.len().min(1));
        match (op, pgid.parse::<i32>()) {
            ("+", Ok(pgid)) if pgid > 1 => {
                self.groups.insert(pgid);
            }
            ("-", Ok(pgid)) => {
                self.groups.remove(&pgid);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out `chunks` one read at a time, then "would block", then EOF.
    struct Chunks(Vec<&'static [u8]>, bool);

    impl Read for Chunks {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if let Some(chunk) = (!self.0.is_empty()).then(|| self.0.remove(0)) {
                buf[..chunk.len()].copy_from_slice(chunk);
                return Ok(chunk.len());
            }
            if std::mem::take(&mut self.1) {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            Ok(0)
        }
    }

    #[test]
    fn lines_split_across_reads_are_applied_in_order() {
        let mut tracked = Tracked::default();
        let mut input = Chunks(vec![b"+10\n+2", b"0\n-10\n+3", b"0\n+1\nbogus\n-"], true);
        assert!(!tracked.drain(&mut input).unwrap(), "not at EOF yet");
        assert_eq!(
            tracked.groups,
            HashSet::from([20, 30]),
            "pid 1 is never tracked"
        );
        // The half line "-" waits for its end.
        assert_eq!(tracked.partial, b"-");
        let mut rest = Chunks(vec![b"20\n"], false);
        assert!(tracked.drain(&mut rest).unwrap(), "EOF");
        assert_eq!(tracked.groups, HashSet::from([30]));
    }
}
