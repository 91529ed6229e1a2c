//! What systemd hands the daemon, and the channel to answer it.
//!
//! systemd talks to a service through a few environment variables and file
//! descriptors: `LISTEN_PID`/`LISTEN_FDS`/`LISTEN_FDNAMES` and fd 3 for
//! socket activation, `NOTIFY_SOCKET` for readiness and status, and
//! `WATCHDOG_USEC`/`WATCHDOG_PID` for the keep-alive. [`Handoff::take`]
//! reads them once, first thing in `main` while the process still has a
//! single thread, and removes them from the environment as
//! `sd_listen_fds(unset_environment = 1)` would: nothing the daemon starts
//! later (the group reaper, a runner, any helper) can inherit them and take
//! the daemon's socket or notify channel for its own. Runners are also
//! started from an empty environment; this is the second lock on that door.
//!
//! Rooms: `activation` (the inherited listening socket), `notify` (the
//! datagram protocol), `watchdog` (how often to ping).
//!
//! No crate for this. The notify protocol is one datagram to a Unix socket,
//! about twenty lines with std's `UnixDatagram` (abstract addresses
//! included), and the `sd-notify` crate clears the variables with
//! `std::env::remove_var` whenever it is called — from inside a
//! multi-threaded runtime, where that is unsound. Owning the code also lets
//! activation check what fd 3 really is before serving it.

pub mod activation;
pub mod notify;
pub mod watchdog;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use activation::{ActivationError, Inherited};
pub use notify::Notifier;
pub use watchdog::WatchdogError;

/// Every variable systemd's service protocols set that [`Handoff::take`]
/// consumes and removes.
pub const VARIABLES: [&str; 6] = [
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
];

/// Why what systemd handed over cannot be used. Each is a start-up failure:
/// a unit that passes two sockets or a malformed watchdog is misconfigured,
/// and guessing would hide it.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    #[error(transparent)]
    Activation(#[from] ActivationError),
    #[error(transparent)]
    Watchdog(#[from] WatchdogError),
}

/// What systemd handed this process, if anything.
#[derive(Debug, Default)]
pub struct Handoff {
    /// The listening socket, when the daemon was socket-activated.
    pub listener: Option<Inherited>,
    /// The notify channel, when systemd wants to hear from the daemon.
    pub notifier: Option<Notifier>,
    /// How often to ping the watchdog, when systemd runs one for us.
    pub watchdog: Option<Duration>,
}

/// Set once the variables have been taken: fd 3 may be adopted only once.
static TAKEN: AtomicBool = AtomicBool::new(false);

impl Handoff {
    /// Reads and removes the variables, and adopts fd 3 when it is ours.
    ///
    /// Must run before any thread is started (first thing in `main`): it
    /// changes the process environment. A second call finds nothing.
    pub fn take() -> Result<Handoff, HandoffError> {
        if TAKEN.swap(true, Ordering::SeqCst) {
            return Ok(Handoff::default());
        }
        let read = |name: &str| std::env::var(name).ok();
        let (listen_pid, listen_fds, listen_names) = (
            read("LISTEN_PID"),
            read("LISTEN_FDS"),
            read("LISTEN_FDNAMES"),
        );
        let notify_socket = read("NOTIFY_SOCKET");
        let (watchdog_usec, watchdog_pid) = (read("WATCHDOG_USEC"), read("WATCHDOG_PID"));
        for name in VARIABLES {
            // Sound here, though not in general: changing the environment
            // races with any thread reading it, and this runs before the
            // first thread (and the async runtime) exists.
            std::env::remove_var(name);
        }

        let our_pid = std::process::id();
        let count =
            activation::passed_count(listen_pid.as_deref(), listen_fds.as_deref(), our_pid)?;
        let listener = match count {
            0 => None,
            _ => Some(activation::adopt(listen_names.as_deref())?),
        };
        let notifier = notify_socket
            .as_deref()
            .filter(|value| !value.is_empty())
            .and_then(|value| match Notifier::new(value) {
                Ok(notifier) => Some(notifier),
                Err(error) => {
                    // Not fatal: outside systemd a stray NOTIFY_SOCKET
                    // is harmless, and under it the start timeout will say
                    // loudly that no READY=1 came.
                    eprintln!("sandboxd: ignoring NOTIFY_SOCKET: {error}");
                    None
                }
            });
        let watchdog =
            watchdog::ping_interval(watchdog_usec.as_deref(), watchdog_pid.as_deref(), our_pid)?;
        Ok(Handoff {
            listener,
            notifier,
            watchdog,
        })
    }
}
