//! Human-readable times and durations, without a date-time crate.
//!
//! The daemon sends Unix milliseconds; operators read RFC 3339 UTC (exact,
//! sortable, copy-pasteable into a log search) and "5m ago" (what they
//! actually want to know). Days-to-date is Howard Hinnant's
//! `civil_from_days`, exact for the proleptic Gregorian calendar.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// `2024-05-01T12:34:56Z` (seconds precision, UTC).
pub fn rfc3339_utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, secs_of_day) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs_of_day / 3600,
        secs_of_day / 60 % 60,
        secs_of_day % 60
    )
}

/// "5m ago", "2h 3m ago", "just now"; "in 4s" when the daemon's clock is ahead.
pub fn ago(unix_ms: u64, now_unix_ms: u64) -> String {
    if unix_ms > now_unix_ms {
        return format!("in {}", duration((unix_ms - now_unix_ms) / 1000));
    }
    let secs = (now_unix_ms - unix_ms) / 1000;
    if secs == 0 {
        "just now".to_string()
    } else {
        format!("{} ago", duration(secs))
    }
}

/// A compact duration with its two largest units: "3d 4h", "2h 5m", "7m 3s", "9s".
pub fn duration(secs: u64) -> String {
    let (days, hours, minutes, seconds) =
        (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if days > 0 {
        format!("{days}d {hours}h")
    } else if hours > 0 {
        format!("{hours}h {minutes}m")
    } else if minutes > 0 {
        format!("{minutes}m {seconds}s")
    } else {
        format!("{seconds}s")
    }
}

/// A duration as typed on the command line: `300ms`, `30s`, `5m`, `1h30m`,
/// `1.5s`, or a bare number of seconds (`--timeout 10`), as `timeout(1)`
/// and `docker --time` take them.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("'{text}' is not a duration (like 300ms, 30s, 5m, 1h30m, or seconds: 10)");
    if let Ok(seconds) = text.parse::<f64>() {
        return seconds_duration(seconds, text);
    }
    let mut total = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, after) = rest.split_at(number_end);
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let value: f64 = number.parse().map_err(|_| bad())?;
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = after;
    }
    if text.is_empty() {
        return Err(bad());
    }
    seconds_duration(total, text)
}

/// At least a millisecond and at most a year: a zero timeout would be
/// refused by the daemon, and a longer one is a typo.
fn seconds_duration(seconds: f64, text: &str) -> Result<Duration, String> {
    if !(0.001..=365.0 * 86_400.0).contains(&seconds) {
        return Err(format!("'{text}' is out of range (1ms to 365d)"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// (year, month 1–12, day 1–31) of the day `days` after 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        // `date -u -d @951782400` = Tue Feb 29 00:00:00 UTC 2000 (a leap day).
        assert_eq!(rfc3339_utc(951_782_400_000), "2000-02-29T00:00:00Z");
        // `date -u -d @1714566896` = Wed May  1 12:34:56 UTC 2024.
        assert_eq!(rfc3339_utc(1_714_566_896_789), "2024-05-01T12:34:56Z");
        // The last second of a year.
        assert_eq!(rfc3339_utc(1_704_067_199_000), "2023-12-31T23:59:59Z");
    }

    #[test]
    fn relative_times() {
        let now = 1_714_566_896_000;
        assert_eq!(ago(now, now), "just now");
        assert_eq!(ago(now - 5_000, now), "5s ago");
        assert_eq!(ago(now - 300_000, now), "5m 0s ago");
        assert_eq!(ago(now - 7_380_000, now), "2h 3m ago");
        assert_eq!(ago(now - 3 * 86_400_000 - 3_600_000, now), "3d 1h ago");
        assert_eq!(ago(now + 4_000, now), "in 4s");
    }

    #[test]
    fn durations_parse_as_typed() {
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        for bad in ["", "5x", "m", "-1s", "0", "1.2.3s", "400d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("5x").unwrap_err().contains("'5x'"));
    }

    #[test]
    fn durations() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(59), "59s");
        assert_eq!(duration(61), "1m 1s");
        assert_eq!(duration(3600), "1h 0m");
        assert_eq!(duration(90_061), "1d 1h");
    }
}
