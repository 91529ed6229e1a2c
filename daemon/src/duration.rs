//! Durations as the configuration and the environment write them
//! (`10s`, `500ms`, `2m`, `1h`): a leaf every module that reads one uses.

use std::time::Duration;

use anyhow::bail;

/// The trimmed text, its leading digits, and the unit after them.
pub fn split_number(text: &str) -> (&str, &str, &str) {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    (text, number, unit)
}

/// `10s`, `500ms`, `2m`, `1h`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let (text, number, unit) = split_number(text);
    let value: u64 = number
        .parse()
        .map_err(|_| anyhow::anyhow!("'{text}' is not a duration like 10s, 500ms or 2m"))?;
    Ok(match unit {
        "" | "s" => Duration::from_secs(value),
        "ms" => Duration::from_millis(value),
        "m" => Duration::from_secs(value.saturating_mul(60)),
        "h" => Duration::from_secs(value.saturating_mul(3600)),
        other => bail!("unknown duration unit '{other}' in '{text}': use ms, s, m or h"),
    })
}
