//! Signals → orderly stop.
//!
//! The first SIGTERM or SIGINT asks for an orderly stop: stop accepting,
//! let the driver tear down what must not outlive the daemon (that can take
//! the runners' whole stop grace), remove the socket, exit 0. An operator
//! who sends a second signal during that wait means "now": the daemon exits
//! at once with 128 + the signal's number, the shell's convention (130 for
//! SIGINT, 143 for SIGTERM). The process tier's runners still die then — the
//! reaper sees the daemon go — so skipping the orderly path loses nothing
//! but the wait.
//!
//! The handlers are installed before anything slow happens, so a signal
//! that arrives during start-up is queued for the orderly path instead of
//! killing the daemon half-started with the default action.

use std::io;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// Which stop signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Terminate,
    Interrupt,
}

impl StopSignal {
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Terminate => "SIGTERM",
            StopSignal::Interrupt => "SIGINT",
        }
    }

    /// 128 + the signal's number, as a shell reports a death by that signal.
    pub fn exit_code(self) -> i32 {
        128 + match self {
            StopSignal::Terminate => libc::SIGTERM,
            StopSignal::Interrupt => libc::SIGINT,
        }
    }
}

/// The installed SIGTERM and SIGINT handlers.
pub struct StopSignals {
    terminate: Signal,
    interrupt: Signal,
}

impl StopSignals {
    /// Installs both handlers. Must run inside the tokio runtime.
    pub fn install() -> io::Result<Self> {
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGTERM or SIGINT. Cancellation-safe: a signal
    /// that arrives while nobody waits is kept for the next call.
    pub async fn next(&mut self) -> StopSignal {
        tokio::select! {
            Some(()) = self.terminate.recv() => StopSignal::Terminate,
            Some(()) = self.interrupt.recv() => StopSignal::Interrupt,
            // Both streams end only when the runtime shuts down.
            else => std::future::pending().await,
        }
    }

    /// From now on, the next SIGTERM or SIGINT ends the process at once.
    pub fn exit_on_next(mut self) {
        tokio::spawn(async move {
            let signal = self.next().await;
            tracing::error!(
                signal = signal.name(),
                "second stop signal: exiting now, without waiting for the orderly stop"
            );
            std::process::exit(signal.exit_code());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(StopSignal::Interrupt.exit_code(), 130);
        assert_eq!(StopSignal::Terminate.exit_code(), 143);
    }

    #[tokio::test]
    async fn a_raised_signal_is_reported_by_name() {
        let mut signals = StopSignals::install().unwrap();
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGINT).unwrap();
        let signal = tokio::time::timeout(std::time::Duration::from_secs(5), signals.next())
            .await
            .expect("the raised SIGINT arrives");
        assert_eq!(signal, StopSignal::Interrupt);
        assert_eq!(signal.name(), "SIGINT");
    }
}
