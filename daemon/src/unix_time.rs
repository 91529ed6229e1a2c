//! The wall clock as the protocol carries it: milliseconds since the Unix
//! epoch (a clock before 1970 reads 0).

use std::time::SystemTime;

/// Now, in milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}
