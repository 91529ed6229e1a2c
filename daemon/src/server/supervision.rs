//! What the daemon tells systemd, and when.
//!
//! - `READY=1` once the accept loop runs and the driver is up: it is sent
//!   from the first poll of the main loop, which [`super::accept::serve_until`]
//!   polls next to `accept`, after the driver was built. A caller that
//!   systemd lets through on READY is answered, not queued behind a start.
//! - `STATUS=` a short line (driver, sandbox counts), refreshed every
//!   [`STATUS_INTERVAL`] for `systemctl status`.
//! - `WATCHDOG=1` at the interval systemd asked for, from that same main
//!   loop: if the loop stops being polled, the pings stop, and systemd
//!   restarts a daemon that is wedged rather than merely alive.
//! - `STOPPING=1` when the orderly stop begins.
//!
//! Without `NOTIFY_SOCKET` (not under systemd) all of it is a no-op.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sandboxd_protocol::ProbeState;

use super::service::DaemonState;
use crate::census::Census;
use crate::systemd::Notifier;

/// How often `STATUS=` is refreshed.
pub const STATUS_INTERVAL: Duration = Duration::from_secs(10);

/// The notify channel and the watchdog interval, when systemd gave them.
pub struct Supervision {
    notifier: Option<Notifier>,
    watchdog: Option<Duration>,
}

impl Supervision {
    pub fn new(notifier: Option<Notifier>, watchdog: Option<Duration>) -> Self {
        if let Some(interval) = watchdog {
            tracing::info!(every = ?interval, "pinging the systemd watchdog");
        }
        Supervision { notifier, watchdog }
    }

    /// The daemon's main loop, to be polled by the accept loop: says READY
    /// on its first poll, then pings the watchdog and refreshes the status
    /// until `stop` resolves, and returns what it resolved to.
    pub async fn main_loop<S>(&self, daemon: Arc<DaemonState>, stop: impl Future<Output = S>) -> S {
        // Until the stop, keep a timer near (see `timer_floor`).
        let stop = async {
            tokio::select! {
                stopped = stop => stopped,
                never = super::timer_floor::run() => match never {},
            }
        };
        let Some(notifier) = &self.notifier else {
            return stop.await;
        };
        notifier.ready(&format!(
            "serving on {} with driver {}",
            daemon.socket_path.display(),
            daemon.driver.name()
        ));
        tracing::debug!("told systemd READY=1");
        let status = refresh_status(notifier, &daemon);
        let watchdog = ping_watchdog(notifier, self.watchdog);
        tokio::pin!(stop, status, watchdog);
        tokio::select! {
            stopped = &mut stop => stopped,
            () = &mut status => unreachable!("the status loop never ends"),
            () = &mut watchdog => unreachable!("the watchdog loop never ends"),
        }
    }

    /// The orderly stop has begun.
    pub fn stopping(&self, signal: &str) {
        if let Some(notifier) = &self.notifier {
            notifier.stopping(&format!("stopping on {signal}"));
        }
    }
}

/// `STATUS=` now and every [`STATUS_INTERVAL`]. A failed list keeps the
/// last line, with the failure: the status is a view, not a health check.
async fn refresh_status(notifier: &Notifier, daemon: &DaemonState) {
    let mut ticks = tokio::time::interval(STATUS_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let line = match daemon.driver.census().await {
            Ok(census) => status_line(daemon.driver.name(), &census),
            Err(error) => format!(
                "driver {}; cannot count sandboxes: {error}",
                daemon.driver.name()
            ),
        };
        notifier.status(&line);
    }
}

/// `WATCHDOG=1` every `interval`; forever pending when there is no watchdog.
async fn ping_watchdog(notifier: &Notifier, interval: Option<Duration>) {
    let Some(interval) = interval else {
        return std::future::pending().await;
    };
    let mut ticks = tokio::time::interval(interval);
    // After a stall, one ping now is the truth; a burst of catch-up pings
    // would not be.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        notifier.watchdog();
    }
}

/// `driver local-process; 3 sandboxes (2 running, 0 stopped)`.
fn status_line(driver: &str, census: &Census) -> String {
    let total = census.total();
    format!(
        "driver {driver}; {total} sandbox{} ({} running, {} stopped)",
        if total == 1 { "" } else { "es" },
        census.in_state(ProbeState::Running),
        census.in_state(ProbeState::Stopped)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_protocol::{SandboxInfo, Scope};

    fn info(state: ProbeState) -> SandboxInfo {
        SandboxInfo {
            state,
            ..SandboxInfo::absent(Scope::Session, "x", 1, None)
        }
    }

    #[test]
    fn status_lines_count_by_state() {
        assert_eq!(
            status_line(
                "docker",
                &Census::of(&[info(ProbeState::Running), info(ProbeState::Stopped)])
            ),
            "driver docker; 2 sandboxes (1 running, 1 stopped)"
        );
        assert_eq!(
            status_line("local-process", &Census::of(&[info(ProbeState::Running)])),
            "driver local-process; 1 sandbox (1 running, 0 stopped)"
        );
    }
}
