//! The service watchdog: how often the daemon must say it is alive.
//!
//! With `WatchdogSec=` in the unit, systemd sets `WATCHDOG_USEC` (and
//! `WATCHDOG_PID`) and restarts the service when no `WATCHDOG=1` arrives
//! within that time. The daemon pings at half the timeout, as
//! sd_watchdog_enabled(3) advises, so one late tick is not yet a restart.
//! The pings come from the daemon's main loop (see `server::supervision`),
//! not from a thread of their own: a wedged daemon must stop pinging.

use std::time::Duration;

/// Why the watchdog settings cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WatchdogError {
    #[error("WATCHDOG_USEC={0:?} is not a positive number of microseconds")]
    BadTimeout(String),
    #[error("WATCHDOG_PID={0:?} is not a process id")]
    BadPid(String),
}

/// The ping interval systemd asks of this process, if any: `None` when no
/// watchdog is set, or when it is meant for another process
/// (`WATCHDOG_PID` names someone else, as for a child that inherited it).
pub fn ping_interval(
    usec: Option<&str>,
    pid: Option<&str>,
    our_pid: u32,
) -> Result<Option<Duration>, WatchdogError> {
    let Some(usec) = usec.filter(|usec| !usec.is_empty()) else {
        return Ok(None);
    };
    if let Some(pid) = pid.filter(|pid| !pid.is_empty()) {
        let pid: u32 = pid
            .parse()
            .map_err(|_| WatchdogError::BadPid(pid.to_string()))?;
        if pid != our_pid {
            return Ok(None);
        }
    }
    let timeout: u64 = usec
        .parse()
        .ok()
        .filter(|&usec| usec > 0)
        .ok_or_else(|| WatchdogError::BadTimeout(usec.to_string()))?;
    Ok(Some(Duration::from_micros(timeout / 2)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_the_timeout_for_us() {
        assert_eq!(
            ping_interval(Some("30000000"), Some("42"), 42),
            Ok(Some(Duration::from_secs(15)))
        );
        assert_eq!(
            ping_interval(Some("200000"), None, 42),
            Ok(Some(Duration::from_millis(100)))
        );
    }

    #[test]
    fn none_when_unset_or_meant_for_another_process() {
        assert_eq!(ping_interval(None, None, 42), Ok(None));
        assert_eq!(ping_interval(Some(""), None, 42), Ok(None));
        assert_eq!(ping_interval(Some("30000000"), Some("1"), 42), Ok(None));
    }

    #[test]
    fn malformed_values_are_named() {
        assert_eq!(
            ping_interval(Some("30s"), None, 42),
            Err(WatchdogError::BadTimeout("30s".into()))
        );
        assert_eq!(
            ping_interval(Some("0"), None, 42),
            Err(WatchdogError::BadTimeout("0".into()))
        );
        let error = ping_interval(Some("1000"), Some("x"), 42).unwrap_err();
        assert_eq!(error.to_string(), "WATCHDOG_PID=\"x\" is not a process id");
    }
}
