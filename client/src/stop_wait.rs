//! How long a deprovision may take: the daemon gives a runner that
//! ignores SIGTERM its whole `stop_grace` before the SIGKILL, and answers
//! after it, so a deadline shorter than the grace would report a failure
//! that did not happen (the sandbox goes all the same). A deprovision's
//! deadline is therefore the client's own or the daemon's grace plus
//! [`STOP_MARGIN`], whichever is longer. The grace is asked once per
//! client (`status`) and kept.

use std::time::Duration;

use crate::deadline::clamp;
use crate::SandboxdClient;

/// What a deprovision may take beyond the grace: the kill, the reap and
/// the answer, on a loaded host.
pub const STOP_MARGIN: Duration = Duration::from_secs(5);

/// The daemon's default `stop_grace`: assumed when it cannot be asked
/// (a caller the daemon lets deprovision but not read its status).
const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);

impl SandboxdClient {
    /// The deadline of a deprovision (see the module doc).
    pub(crate) async fn deprovision_deadline(&self) -> Duration {
        let grace = self
            .shared()
            .stop_grace
            .get_or_init(|| async {
                match self.status().await {
                    Ok(status) if status.stop_grace_ms > 0 => {
                        Duration::from_millis(status.stop_grace_ms)
                    }
                    Ok(_) => Duration::ZERO,
                    Err(_) => DEFAULT_STOP_GRACE,
                }
            })
            .await;
        clamp(self.deadline().max(*grace + STOP_MARGIN))
    }
}
