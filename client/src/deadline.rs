//! How long one call may take.
//!
//! Every call carries a deadline so a wedged daemon costs the caller a
//! bounded wait, never a hang. It is enforced on both ends: the client's
//! connection fails the call (`crate::multiplex`), the daemon drops the
//! work. The ceiling keeps a typo (an hour instead of a second) from
//! parking a caller indefinitely.

use std::time::{Duration, Instant};

use tarpc::context::{self, Context};

/// The deadline a call gets unless the caller chooses another.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// The longest deadline a caller may choose; longer requests are clamped.
pub const MAX_DEADLINE: Duration = Duration::from_secs(10 * 60);

/// `requested`, clamped to at most [`MAX_DEADLINE`].
pub fn clamp(requested: Duration) -> Duration {
    requested.min(MAX_DEADLINE)
}

/// A tarpc context expiring at `deadline`.
pub(crate) fn context_until(deadline: Instant) -> Context {
    let mut ctx = context::current();
    ctx.deadline = deadline;
    ctx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_are_clamped_to_ten_minutes() {
        assert_eq!(clamp(Duration::from_secs(3)), Duration::from_secs(3));
        assert_eq!(clamp(MAX_DEADLINE), MAX_DEADLINE);
        assert_eq!(clamp(Duration::from_secs(3600)), MAX_DEADLINE);
    }

    #[test]
    fn contexts_carry_the_deadline() {
        let deadline = Instant::now() + Duration::from_secs(7);
        assert_eq!(context_until(deadline).deadline, deadline);
    }
}
