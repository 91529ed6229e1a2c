//! The values keys are written in beyond TOML's own: durations, TTLs and
//! memory sizes, and their serde adapters for the tables' keys.

use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::duration::{parse_duration, split_number};

/// A `workspace_ttl`: `off` or `0` (never expire), else a duration as for
/// [`parse_duration`] or a number of days (`7d`). At least a second.
pub fn parse_ttl(text: &str) -> anyhow::Result<Option<Duration>> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("off") || trimmed == "0" {
        return Ok(None);
    }
    let ttl = match trimmed.strip_suffix('d') {
        Some(days) => {
            let days: u64 = days
                .trim()
                .parse()
                .with_context(|| format!("'{text}' is not a number of days like 7d"))?;
            Duration::from_secs(days.saturating_mul(86_400))
        }
        None => parse_duration(trimmed)?,
    };
    if ttl < Duration::from_secs(1) {
        bail!("'{text}' is shorter than a second: write 'off' to keep workspaces forever");
    }
    Ok(Some(ttl))
}

/// `2g`, `512m`, `1024k`, `1gb`, `2GiB` (binary multiples) or a bare number
/// of bytes, as the docker CLI writes memory sizes.
pub fn parse_memory(text: &str) -> anyhow::Result<u64> {
    let (text, number, unit) = split_number(text);
    let value: u64 = number
        .parse()
        .with_context(|| format!("'{text}' is not a memory size like 2g, 512m or 1073741824"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(&unit);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => bail!("unknown memory unit in '{text}': use k, m, g or t"),
    };
    value
        .checked_mul(1 << shift)
        .with_context(|| format!("memory size '{text}' is too large"))
}

/// A duration key: a string for [`parse_duration`].
pub(super) fn deserialize_duration<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(|error| serde::de::Error::custom(format!("{error:#}")))
}

/// An optional duration key, written as for [`deserialize_duration`].
pub(super) fn deserialize_optional_duration<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    deserialize_duration(deserializer).map(Some)
}

/// An optional size key (`runner_log_max_size`), written as for [`deserialize_memory`].
pub(super) fn deserialize_optional_memory<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    deserialize_memory(deserializer).map(Some)
}

/// A memory key: a number of bytes, or a string for [`parse_memory`].
pub(super) fn deserialize_memory<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Memory {
        Bytes(u64),
        Text(String),
    }
    match Memory::deserialize(deserializer)? {
        Memory::Bytes(bytes) => Ok(bytes),
        Memory::Text(text) => {
            parse_memory(&text).map_err(|error| serde::de::Error::custom(format!("{error:#}")))
        }
    }
}
