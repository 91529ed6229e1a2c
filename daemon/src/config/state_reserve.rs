//! `[limits] state_reserve`: free space the state directory's file system
//! keeps for the daemon and for every sandbox but a writing one.
//!
//! Written as bytes (`1073741824`, `"2g"`) or as a percent of the file
//! system's size (`"5%"`, `"0.5%"`); `0` turns the reserve off. Unwritten,
//! it is the smaller of 5 % and 1 GiB: on a small disk a gigabyte would be
//! most of it, on a large one 5 % would idle many gigabytes.

use anyhow::{bail, Context};
use serde::Deserialize;

use super::parse_memory;

/// The reserve as configured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StateReserve {
    Bytes(u64),
    /// Of the file system's size, in (0, 100).
    Percent(f64),
    /// The smaller of the two: the default.
    SmallerOf {
        percent: f64,
        bytes: u64,
    },
}

impl Default for StateReserve {
    fn default() -> Self {
        StateReserve::SmallerOf {
            percent: 5.0,
            bytes: 1 << 30,
        }
    }
}

impl StateReserve {
    /// The reserve in bytes on a file system of `size` bytes.
    pub fn bytes_of(&self, size: u64) -> u64 {
        let share = |percent: f64| (size as f64 * percent / 100.0) as u64;
        match *self {
            StateReserve::Bytes(bytes) => bytes,
            StateReserve::Percent(percent) => share(percent),
            StateReserve::SmallerOf { percent, bytes } => share(percent).min(bytes),
        }
    }

    /// True when it is `0`: no reserve is kept.
    pub fn is_off(&self) -> bool {
        *self == StateReserve::Bytes(0)
    }

    /// How the configuration wrote it, for `status`.
    pub fn shown(&self) -> String {
        match *self {
            StateReserve::Bytes(bytes) => sandboxd_protocol::show_bytes(bytes),
            StateReserve::Percent(percent) => format!("{percent}%"),
            StateReserve::SmallerOf { percent, bytes } => format!(
                "the smaller of {percent}% and {}",
                sandboxd_protocol::show_bytes(bytes)
            ),
        }
    }

    /// Reads `"5%"` or a size (`"1g"`, `"1073741824"`).
    pub fn parse(text: &str) -> anyhow::Result<StateReserve> {
        let text = text.trim();
        let Some(number) = text.strip_suffix('%') else {
            return parse_memory(text)
                .map(StateReserve::Bytes)
                .with_context(|| format!("[limits] state_reserve '{text}' is neither a size (like 1g) nor a percent (like 5%)"));
        };
        let percent: f64 = number.trim().parse().with_context(|| {
            format!("[limits] state_reserve '{text}' is not a percent like 5% or 0.5%")
        })?;
        if !(percent.is_finite() && (0.0..100.0).contains(&percent)) {
            bail!("[limits] state_reserve '{text}' must be at least 0% and below 100%");
        }
        if percent == 0.0 {
            return Ok(StateReserve::Bytes(0));
        }
        Ok(StateReserve::Percent(percent))
    }
}

impl<'de> Deserialize<'de> for StateReserve {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Bytes(u64),
            Text(String),
        }
        match Written::deserialize(deserializer)? {
            Written::Bytes(bytes) => Ok(StateReserve::Bytes(bytes)),
            Written::Text(text) => StateReserve::parse(&text)
                .map_err(|error| serde::de::Error::custom(format!("{error:#}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_percents_and_the_default_are_read_and_applied() {
        assert_eq!(
            StateReserve::parse("2g").unwrap(),
            StateReserve::Bytes(2 << 30)
        );
        assert_eq!(
            StateReserve::parse("0.5%").unwrap(),
            StateReserve::Percent(0.5)
        );
        assert!(StateReserve::parse("0%").unwrap().is_off());
        assert_eq!(StateReserve::Percent(10.0).bytes_of(1000), 100);
        let default = StateReserve::default();
        assert_eq!(default.bytes_of(10 << 30), 512 << 20);
        assert_eq!(default.bytes_of(1 << 40), 1 << 30);
    }

    #[test]
    fn bad_reserves_are_refused_naming_the_key() {
        for bad in ["100%", "-1%", "abc%", "lots", "5x"] {
            let error = format!("{:#}", StateReserve::parse(bad).unwrap_err());
            assert!(error.contains("state_reserve"), "{bad}: {error}");
        }
    }
}
