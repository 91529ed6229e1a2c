//! The daemon's side of the nft helper ([`super::nft_helper`]): starting
//! it, one request at a time, and giving it up when it keeps failing.
//!
//! Whatever the helper does, a namespace is never left without its table:
//! every answer other than "loaded" tells the caller to use the `nft` tool
//! instead ([`Load`]), and the caller does.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use nix::errno::Errno;
use nix::sys::socket::{
    recv, sendmsg, setsockopt, socketpair, sockopt, AddressFamily, ControlMessage, MsgFlags,
    SockFlag, SockType,
};
use nix::sys::time::TimeVal;

use super::nft::CALL_TIMEOUT;
use super::nft_helper::{ARG, DONE, MAX_REQUEST};

/// Helpers that fail one after the other before it is given up for the
/// daemon's life (one that failed is started again at the next namespace).
const FAILURES_TO_GIVE_UP: u32 = 3;

/// What became of one load through the helper.
#[derive(Debug, PartialEq, Eq)]
pub enum Load {
    /// The table is in the namespace.
    Loaded,
    /// Nothing reached the namespace (no helper, or it refused the load as
    /// a whole): load the table with the tool.
    NotLoaded(String),
    /// The helper failed during the load, so what it did is unknown: load
    /// the table with the tool, replacing whatever is there.
    Unknown(String),
}

/// The helper, when this daemon uses one.
#[derive(Debug)]
pub struct NftHelper {
    program: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    /// Started at the next [`NftHelper::prepare`].
    Stopped { failures: u32 },
    /// Running; `failures`: how many failed just before it.
    Running {
        socket: OwnedFd,
        child: Child,
        failures: u32,
    },
    /// Not used again, and why.
    GivenUp(String),
}

impl NftHelper {
    /// A helper run as `program` (this daemon's binary), or none.
    pub fn new(program: Option<PathBuf>) -> NftHelper {
        let state = match program {
            Some(_) => State::Stopped { failures: 0 },
            None => State::GivenUp("no helper program was given".to_string()),
        };
        NftHelper {
            program,
            state: Mutex::new(state),
        }
    }

    /// Starts the helper unless it runs or was given up. Called from a
    /// thread still in the daemon's network namespace: the helper starts
    /// in the namespace of the thread that starts it, and returns there.
    pub fn prepare(&self) {
        let mut state = self.state();
        let State::Stopped { failures } = *state else {
            return;
        };
        *state = match self.start() {
            Ok((socket, child)) => State::Running {
                socket,
                child,
                failures,
            },
            Err(why) => failed(failures, why),
        };
    }

    /// Loads `script` into `netns` through the helper, when it runs.
    pub fn load(&self, netns: BorrowedFd<'_>, script: &str) -> Load {
        let mut state = self.state();
        let State::Running {
            socket,
            child,
            failures,
        } = &mut *state
        else {
            return Load::NotLoaded("the helper is not running".to_string());
        };
        let sent = match request(socket, netns, script) {
            Ok(None) => {
                *failures = 0;
                return Load::Loaded;
            }
            Ok(Some(refusal)) => return Load::NotLoaded(refusal),
            Err(sent) => sent,
        };
        let _ = child.kill();
        let _ = child.wait();
        let (why, load) = match sent {
            Sent::No(why) => (why.clone(), Load::NotLoaded(why)),
            Sent::Yes(why) => (why.clone(), Load::Unknown(why)),
        };
        *state = failed(*failures, why);
        load
    }

    /// How the namespaces' tables are loaded, for `status`.
    pub fn describe(&self) -> String {
        match &*self.state() {
            State::Running { child, .. } => format!(
                "loaded by nftables' library in a helper process (pid {})",
                child.id()
            ),
            State::Stopped { .. } => {
                "loaded by nftables' library in a helper process (started again at the next namespace)".to_string()
            }
            State::GivenUp(why) => format!("loaded by an nft process each ({why})"),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// A helper started and greeted: its socket and its process.
    fn start(&self) -> Result<(OwnedFd, Child), String> {
        let program = self.program.as_ref().ok_or("no helper program")?;
        let (ours, its) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|error| format!("cannot make the helper's socket pair: {error}"))?;
        let timeout = TimeVal::new(CALL_TIMEOUT.as_secs() as _, 0);
        setsockopt(&ours, sockopt::ReceiveTimeout, &timeout)
            .map_err(|error| format!("cannot bound the helper's answers: {error}"))?;
        let mut child = Command::new(program)
            .arg(ARG)
            .stdin(Stdio::from(its))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .env_clear()
            .spawn()
            .map_err(|error| format!("cannot start {}: {error}", program.display()))?;
        match answer(&ours) {
            Ok(None) => Ok((ours, child)),
            Ok(Some(refusal)) | Err(refusal) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(refusal)
            }
        }
    }
}

impl Drop for NftHelper {
    fn drop(&mut self) {
        if let State::Running { child, .. } = &mut *self.state() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The state after a helper failed `failures` times before, and why.
fn failed(failures: u32, why: String) -> State {
    let failures = failures + 1;
    if failures >= FAILURES_TO_GIVE_UP {
        tracing::error!(%why, "the nft helper failed {failures} times in a row: each sandbox namespace's table is loaded by an nft process from now on");
        return State::GivenUp(format!("the helper failed {failures} times, last: {why}"));
    }
    tracing::warn!(%why, "the nft helper failed: this namespace's table is loaded by an nft process, and a new helper starts at the next");
    State::Stopped { failures }
}

/// Whether a request reached the helper before it failed.
pub(super) enum Sent {
    No(String),
    Yes(String),
}

/// One request: `None` when loaded, else the helper's refusal.
pub(super) fn request(
    socket: &OwnedFd,
    netns: BorrowedFd<'_>,
    script: &str,
) -> Result<Option<String>, Sent> {
    if script.len() > MAX_REQUEST {
        return Ok(Some(format!("the script is over {MAX_REQUEST} bytes")));
    }
    let fds = [netns.as_raw_fd()];
    let sent = sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(script.as_bytes())],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    );
    if let Err(error) = sent {
        return Err(Sent::No(format!("cannot send to the helper: {error}")));
    }
    answer(socket).map_err(Sent::Yes)
}

/// The helper's next answer: `None` for done, else its refusal.
pub(super) fn answer(socket: &OwnedFd) -> Result<Option<String>, String> {
    let mut buffer = [0u8; 4096];
    let length = loop {
        match recv(socket.as_raw_fd(), &mut buffer, MsgFlags::empty()) {
            Ok(length) => break length,
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => {
                return Err(format!("the helper did not answer within {CALL_TIMEOUT:?}"))
            }
            Err(error) => return Err(format!("cannot read the helper's answer: {error}")),
        }
    };
    match buffer[..length].split_first() {
        None => Err("the helper ended".to_string()),
        Some((&DONE, _)) => Ok(None),
        Some((_, why)) => Ok(Some(String::from_utf8_lossy(why).into_owned())),
    }
}
