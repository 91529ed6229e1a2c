//! Starting the real daemon the way systemd does, without systemd as PID 1:
//! its listening socket passed as fd 3 with `LISTEN_FDS=1` and `LISTEN_PID`
//! set to the daemon's own pid, and a `NOTIFY_SOCKET` the test listens on.
//!
//! `LISTEN_PID` must name the daemon, whose pid exists only after the fork;
//! setting it in `pre_exec` would be too late (the environment is fixed
//! before the fork) and not async-signal-safe anyway. So the daemon is
//! started through `sh -c 'LISTEN_PID=$$ exec sandboxd …'`: `exec` keeps
//! the shell's pid, which `$$` named. The listener is moved to fd 3 in
//! `pre_exec` with `dup2` (async-signal-safe), which also clears its
//! close-on-exec flag, as systemd passes it.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::daemon::TestDaemon;
use crate::{binaries, procs};

/// A datagram socket standing in for systemd's notify socket.
pub struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
    /// Every message received so far, in order.
    received: Vec<String>,
}

impl NotifySocket {
    /// Binds `notify.sock` in `dir`.
    pub fn bind(dir: &Path) -> NotifySocket {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path)
            .unwrap_or_else(|error| panic!("bind {}: {error}", path.display()));
        NotifySocket {
            socket,
            path,
            received: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next message, waiting at most `timeout`.
    pub fn next(&mut self, timeout: Duration) -> Option<String> {
        self.socket
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .expect("set a read timeout");
        let mut buffer = [0u8; 4096];
        let n = self.socket.recv(&mut buffer).ok()?;
        let message = String::from_utf8_lossy(&buffer[..n]).into_owned();
        self.received.push(message.clone());
        Some(message)
    }

    /// Waits up to `timeout` for a message with this `KEY=value` line.
    pub fn wait_for(&mut self, assignment: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let message = self.next(left)?;
            if message.lines().any(|line| line == assignment) {
                return Some(message);
            }
        }
    }

    /// Every message until `duration` has passed.
    pub fn collect_for(&mut self, duration: Duration) -> Vec<String> {
        let deadline = Instant::now() + duration;
        let mut messages = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.next(left) {
                Some(message) => messages.push(message),
                None => break,
            }
        }
        messages
    }

    /// Everything received so far.
    pub fn received(&self) -> &[String] {
        &self.received
    }
}

/// A bound, listening socket at the daemon's configured path, as
/// `sandboxd.socket` would make it.
pub fn bind_listener(daemon: &TestDaemon) -> UnixListener {
    let path = daemon.socket();
    let parent = path.parent().expect("the socket has a directory");
    std::fs::create_dir_all(parent).expect("create the socket directory");
    UnixListener::bind(path).unwrap_or_else(|error| panic!("bind {}: {error}", path.display()))
}

/// A `sandboxd` started with a passed socket, next to a [`TestDaemon`]
/// that owns its directory, config and clean-up.
pub struct ActivatedDaemon {
    child: Option<Child>,
    log: PathBuf,
}

impl ActivatedDaemon {
    /// Starts `sandboxd --config <daemon's config>` with `passed` as fd 3
    /// and `LISTEN_PID` its own pid, plus `env` (e.g. `LISTEN_FDS`,
    /// `NOTIFY_SOCKET`, `WATCHDOG_USEC`; a value `$$` means the daemon's pid).
    pub fn launch(daemon: &TestDaemon, passed: RawFd, env: &[(&str, &str)]) -> ActivatedDaemon {
        Self::launch_wrapped(daemon, passed, env, &[])
    }

    /// [`launch`](Self::launch) through `wrapper`, a command that execs its
    /// arguments in the same process (`setpriv …`, `env …`).
    pub fn launch_wrapped(
        daemon: &TestDaemon,
        passed: RawFd,
        env: &[(&str, &str)],
        wrapper: &[&str],
    ) -> ActivatedDaemon {
        let log = daemon.dir().join("activated.log");
        let output = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open the activated daemon's log");
        // Assignments written into the shell line, so `$$` expands there.
        let mut script = String::from("LISTEN_PID=$$");
        for (name, value) in env {
            assert!(
                name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                "{name}"
            );
            let value = if *value == "$$" {
                "$$".to_string()
            } else {
                format!("'{}'", value.replace('\'', r"'\''"))
            };
            script.push_str(&format!(" {name}={value}"));
        }
        script.push_str(" exec \"$0\" \"$@\"");
        let mut argv: Vec<std::ffi::OsString> = wrapper.iter().map(Into::into).collect();
        argv.push(binaries::sandboxd().into());
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(script)
            .args(argv)
            .arg("--config")
            .arg(daemon.config_path())
            .env_remove("RUST_LOG")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDS")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null())
            .stdout(output.try_clone().expect("clone the log handle"))
            .stderr(output);
        // SAFETY: the closure runs between fork and exec and calls only
        // dup2 and fcntl, which are async-signal-safe; it allocates nothing.
        unsafe {
            command.pre_exec(move || {
                if passed == 3 {
                    // dup2 onto itself keeps close-on-exec; clear it.
                    if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(passed, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("spawn sh -c 'exec sandboxd'");
        ActivatedDaemon {
            child: Some(child),
            log,
        }
    }

    /// [`launch`](Self::launch) with a listener the test keeps.
    pub fn launch_on(
        daemon: &TestDaemon,
        listener: &UnixListener,
        env: &[(&str, &str)],
    ) -> ActivatedDaemon {
        Self::launch(daemon, listener.as_raw_fd(), env)
    }

    /// The daemon's pid (the shell's, which `exec` kept).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon runs").id()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        procs::signal_pid(self.pid(), Signal::SIGTERM);
    }

    /// Waits up to `timeout` for the daemon to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let mut status = None;
        procs::wait_until(timeout, || {
            status = child.try_wait().expect("try_wait on sandboxd");
            status.is_some()
        });
        if status.is_some() {
            self.child = None;
        }
        status
    }

    /// Everything the daemon wrote to stdout and stderr so far.
    pub fn log_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }
}

impl Drop for ActivatedDaemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("activated daemon log:\n{}", self.log_text());
        }
    }
}

/// The pids whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    let after_name = &stat[stat.rfind(')')? + 1..];
                    after_name.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// The inode of the socket behind `/proc/<pid>/fd/<fd>`, if it is one.
pub fn socket_inode(pid: u32, fd: RawFd) -> Option<u64> {
    let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    let text = target.to_str()?;
    text.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The socket inodes among a process's open descriptors.
pub fn socket_inodes(pid: u32) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<RawFd>().ok())
        .filter_map(|fd| socket_inode(pid, fd))
        .collect()
}
