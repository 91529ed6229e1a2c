//! `[runner] env`: variables every runner and command gets (every tier),
//! after the contract's own (an operator's `GOFLAGS`, `EMAIL`, a proxy).
//!
//! The contract's names are refused rather than silently overridden or
//! ignored: `HOME`, `WORKSPACE_ROOT_DIR`, `MODE`, `TEMPORAL_SERVICE_ADDRESS`
//! and every `STIGMER_*` are the daemon's to set, as are the sandbox's
//! limits ([`LIMIT_VARIABLES`]: a runner must be able to trust them), and
//! `PATH` is `runner_path` (the kernel filters' own lookups follow it).

use std::collections::BTreeMap;

use anyhow::bail;
use serde::Deserialize;

/// The file's `[runner]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunnerFile {
    pub env: BTreeMap<String, String>,
}

/// The sandbox's own limits, as every process-tier runner and command is
/// told them (each only where that limit is in force): what `free` and
/// `/proc/meminfo` cannot say, since they show the host's.
pub const LIMIT_VARIABLES: [&str; 4] = [
    "SANDBOXD_MEMORY_LIMIT_BYTES",
    "SANDBOXD_CPU_QUOTA",
    "SANDBOXD_PIDS_LIMIT",
    "SANDBOXD_DISK_LIMIT_BYTES",
];

/// Names only the daemon sets.
const RESERVED: [&str; 5] = [
    "HOME",
    "WORKSPACE_ROOT_DIR",
    "MODE",
    "TEMPORAL_SERVICE_ADDRESS",
    "PATH",
];

impl RunnerFile {
    /// The variables, checked: POSIX names (letters, digits and `_`, not
    /// starting with a digit), no NUL in a value, none of the contract's.
    pub fn checked(self) -> anyhow::Result<Vec<(String, String)>> {
        for (name, value) in &self.env {
            let portable = name
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_');
            if name.is_empty() || !portable || name.as_bytes()[0].is_ascii_digit() {
                bail!("[runner] env: {name:?} is not a variable name (letters, digits and _, not starting with a digit)");
            }
            if value.contains('\0') {
                bail!("[runner] env: the value of {name} contains a NUL byte");
            }
            if RESERVED.contains(&name.as_str())
                || LIMIT_VARIABLES.contains(&name.as_str())
                || name.starts_with("STIGMER_")
            {
                let instead = match name.as_str() {
                    "PATH" => " (set runner_path instead)",
                    _ => "",
                };
                bail!("[runner] env: {name} is set by the daemon for every runner and cannot be configured{instead}");
            }
        }
        Ok(self.env.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(pairs: &[(&str, &str)]) -> anyhow::Result<Vec<(String, String)>> {
        RunnerFile {
            env: pairs
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
        }
        .checked()
    }

    #[test]
    fn names_values_and_the_contracts_own_are_checked() {
        assert_eq!(
            checked(&[("EMAIL", "dev@example.com"), ("_X1", "")]).unwrap(),
            [
                ("EMAIL".to_string(), "dev@example.com".to_string()),
                ("_X1".to_string(), String::new())
            ]
        );
        for (bad, says) in [
            ("1X", "not a variable name"),
            ("A-B", "not a variable name"),
            ("", "not a variable name"),
            ("HOME", "set by the daemon"),
            ("STIGMER_TOKEN", "set by the daemon"),
            ("SANDBOXD_CPU_QUOTA", "set by the daemon"),
            ("SANDBOXD_MEMORY_LIMIT_BYTES", "set by the daemon"),
            ("PATH", "runner_path"),
        ] {
            let error = checked(&[(bad, "v")]).unwrap_err().to_string();
            assert!(error.contains(says), "{bad}: {error}");
        }
        let error = checked(&[("OK", "a\0b")]).unwrap_err().to_string();
        assert!(error.contains("NUL"), "{error}");
    }

    #[test]
    fn the_config_file_carries_the_table_and_refuses_a_contract_name() {
        let resolve = |text: &str| {
            let file: super::super::FileConfig = toml::from_str(text).unwrap();
            let flags = super::super::Flags {
                socket: Some("/tmp/s.sock".into()),
                ..super::super::Flags::default()
            };
            super::super::Config::resolve(file, None, |_| None, &flags)
        };
        let config = resolve("[runner]\nenv = { EMAIL = \"a@b.c\" }\n").unwrap();
        assert_eq!(config.runner_env, [("EMAIL".into(), "a@b.c".into())]);
        assert!(resolve("").unwrap().runner_env.is_empty());
        let error = format!(
            "{:#}",
            resolve("runner = { env = { HOME = \"/x\" } }").unwrap_err()
        );
        assert!(error.contains("[runner] env: HOME"), "{error}");
    }
}
