//! `[commands]`: the bounds of the store that keeps every command's output
//! and proof (see `crate::commands`).

use serde::Deserialize;

/// The most bytes one output stream of one command may keep.
pub const MAX_OUTPUT_BYTES: u64 = 1024 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CommandsConfig {
    /// Bytes kept per output stream of each command (`"8m"` or a number):
    /// past it the oldest go, counted.
    #[serde(deserialize_with = "super::values::deserialize_memory")]
    pub output_bytes: u64,
    /// Ended commands kept per sandbox, with their proofs and output,
    /// until it is deprovisioned; past it the oldest go.
    pub kept_ended: usize,
}

impl Default for CommandsConfig {
    fn default() -> Self {
        CommandsConfig {
            output_bytes: 8 * 1024 * 1024,
            kept_ended: 64,
        }
    }
}

impl CommandsConfig {
    /// The bounds, checked.
    pub fn checked(self) -> anyhow::Result<CommandsConfig> {
        if !(1024..=MAX_OUTPUT_BYTES).contains(&self.output_bytes) {
            anyhow::bail!(
                "[commands] output_bytes = {} must be between 1k and 1g",
                self.output_bytes
            );
        }
        if !(1..=100_000).contains(&self.kept_ended) {
            anyhow::bail!(
                "[commands] kept_ended = {} must be between 1 and 100000",
                self.kept_ended
            );
        }
        Ok(self)
    }
}
