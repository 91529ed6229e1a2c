//! The nft helper: one long-lived process (this same binary, re-executed)
//! that loads each sandbox namespace's table with nftables' own library,
//! given the namespace by descriptor.
//!
//! Why: the `nft` tool costs a process per namespace, about 3.5 ms of CPU
//! each (12 % of a profile of 1,500 cold starts, more than the rest of a
//! start), where the library in a process that stays costs about 0.3 ms.
//! Why a process of its own: see [`super::nft_library`].
//!
//! The daemon talks to it over a `SOCK_SEQPACKET` pair, one request at a
//! time: the namespace's descriptor (`SCM_RIGHTS`) with the script, and one
//! answer back ([`DONE`], or [`REFUSED`] and why). Its first message is
//! its greeting: [`DONE`] once the library is loaded, else [`REFUSED`] and
//! why, and it exits. It returns to its own namespace after each load, so
//! it never keeps a sandbox's alive, and exits when the daemon's end
//! closes (whatever way the daemon ends).

use std::fs::File;
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitCode;

use nix::sched::{setns, CloneFlags};
use nix::sys::socket::{recvmsg, send, ControlMessageOwned, MsgFlags};

use super::nft_library::NftLibrary;

/// The hidden first argument that makes `sandboxd` run as the helper.
pub const ARG: &str = "__nft-helper";

/// The first byte of an answer: the greeting's "ready", a load's "loaded".
pub const DONE: u8 = 0;
/// The first byte of an answer: not done; the rest of it says why.
pub const REFUSED: u8 = 1;

/// The longest request: a script (the namespace's table is about 2 KiB).
pub const MAX_REQUEST: usize = 64 * 1024;

/// The helper process's main: its socket is its stdin.
pub fn run_helper_process() -> ExitCode {
    crate::helper_signals::ignore_terminal_signals();
    // SAFETY: descriptor 0 is the socket the daemon gave as stdin, and
    // nothing else in this process owns it.
    let socket = unsafe { OwnedFd::from_raw_fd(0) };
    serve(&socket);
    ExitCode::SUCCESS
}

/// Greets, then answers requests on `socket` until it closes. Moves the
/// calling thread between namespaces: only ever the helper's one thread
/// (or, in tests, a thread of its own).
pub fn serve(socket: &OwnedFd) {
    let library = match NftLibrary::open() {
        Ok(library) => library,
        Err(why) => {
            answer(socket, REFUSED, &why);
            return;
        }
    };
    let home = match File::open("/proc/thread-self/ns/net") {
        Ok(home) => home,
        Err(error) => {
            answer(
                socket,
                REFUSED,
                &format!("cannot open its own network namespace: {error}"),
            );
            return;
        }
    };
    answer(socket, DONE, "");
    let mut buffer = vec![0u8; MAX_REQUEST];
    while let Some(request) = receive(socket, &mut buffer) {
        let loaded = request.and_then(|(netns, script)| load_in(&library, &netns, script, &home));
        match loaded {
            Ok(()) => answer(socket, DONE, ""),
            Err(why) => answer(socket, REFUSED, &why),
        }
    }
}

/// Applies `script` inside `netns`, then returns to `home`.
fn load_in(library: &NftLibrary, netns: &OwnedFd, script: &str, home: &File) -> Result<(), String> {
    setns(netns, CloneFlags::CLONE_NEWNET)
        .map_err(|error| format!("cannot enter the namespace: {error}"))?;
    let applied = library.apply(script);
    if let Err(error) = setns(home, CloneFlags::CLONE_NEWNET) {
        // Never load another namespace from the wrong place: end, and the
        // daemon starts a new helper or uses the tool.
        eprintln!("sandboxd nft helper: cannot return to its own network namespace: {error}");
        std::process::exit(1);
    }
    applied
}

/// The next request: `None` once the daemon's end is closed; `Some(Err)`
/// for one that cannot be used (answered, and the helper goes on).
fn receive<'a>(
    socket: &OwnedFd,
    buffer: &'a mut [u8],
) -> Option<Result<(OwnedFd, &'a str), String>> {
    let mut space = nix::cmsg_space!(RawFd);
    let (bytes, netns, flags) = loop {
        let mut iov = [IoSliceMut::new(buffer)];
        match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(message) => break (message.bytes, passed_fd(&message), message.flags),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        }
    };
    if bytes == 0 && netns.is_none() {
        return None;
    }
    if flags.contains(MsgFlags::MSG_TRUNC) {
        return Some(Err(format!("the request is over {MAX_REQUEST} bytes")));
    }
    let Some(netns) = netns else {
        return Some(Err("the request carries no namespace".to_string()));
    };
    match std::str::from_utf8(&buffer[..bytes]) {
        Ok(script) => Some(Ok((netns, script))),
        Err(_) => Some(Err("the script is not UTF-8".to_string())),
    }
}

/// The one descriptor a request passed, owned.
fn passed_fd<S>(message: &nix::sys::socket::RecvMsg<'_, '_, S>) -> Option<OwnedFd> {
    let mut passed = message.cmsgs().ok()?.flat_map(|cmsg| match cmsg {
        ControlMessageOwned::ScmRights(fds) => fds,
        _ => Vec::new(),
    });
    // SAFETY: SCM_RIGHTS installed these descriptors in this process just
    // now, and nothing else holds them.
    let first = passed.next().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    for extra in passed {
        // SAFETY: as above; one namespace per request, the rest closed.
        drop(unsafe { OwnedFd::from_raw_fd(extra) });
    }
    first
}

/// One answer: its status byte, then its text.
fn answer(socket: &OwnedFd, status: u8, text: &str) {
    let mut message = Vec::with_capacity(1 + text.len());
    message.push(status);
    message.extend_from_slice(text.as_bytes());
    // A daemon that is gone reads nothing: the next receive ends the loop.
    let _ = send(socket.as_raw_fd(), &message, MsgFlags::MSG_NOSIGNAL);
}
