//! The signals a helper process of this daemon (the group reaper, the nft
//! helper: this binary, re-executed) ignores.

use nix::sys::signal::{signal, SigHandler, Signal};

/// Ignores SIGINT, SIGTERM, SIGHUP and SIGPIPE: a terminal's Ctrl-C or a
/// hang-up reaches the daemon's helpers too, and they must not leave
/// before the daemon (each ends when its pipe or socket to the daemon
/// closes); a write to a daemon that is gone fails instead of killing.
/// Call while the process has one thread.
pub fn ignore_terminal_signals() {
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGPIPE,
    ] {
        // SAFETY: SIG_IGN installs no handler code; the caller's process
        // is single-threaded.
        let _ = unsafe { signal(sig, SigHandler::SigIgn) };
    }
}
