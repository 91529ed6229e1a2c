//! `[lifecycle.session]`, `[lifecycle.workflow]`, `[lifecycle.connect]`:
//! when the daemon ends or parks a sandbox by itself.
//!
//! Each scope may set `idle` (a runner that used no CPU to speak of and
//! wrote no output for that long is stopped or paused, as `on_idle`
//! says), `max_lifetime` (a runner is stopped once it has run that long,
//! time spent paused not counted) and `on_idle` (`stop`, the default, or
//! `pause`). Unset means never: today's behaviour stays the default.
//! `[lifecycle.connect]` also takes `ttl`, the connect TTL of the container
//! tiers (a connect sandbox older than it is a leak and is removed), which
//! was written `[docker] connect_ttl` / `[kubernetes] connect_ttl` before;
//! those keys are still read. When both are written they must agree:
//! two different values are refused, naming both keys, rather than one
//! silently beating the other.

use std::time::Duration;

use anyhow::{bail, Context};
use sandboxd_protocol::Scope;
use serde::Deserialize;

use super::parse_duration;

/// The connect TTL when no key sets it: an hour.
pub const DEFAULT_CONNECT_TTL: Duration = Duration::from_secs(3600);

/// The shortest `idle` or `max_lifetime` accepted: a second (the watcher
/// samples a few times per window; a shorter window is noise).
const MIN_LIMIT: Duration = Duration::from_secs(1);

/// What an idle runner gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnIdle {
    /// Stopped, its workspace kept (the next `ensure` starts it again).
    #[default]
    Stop,
    /// Paused (frozen): the next `ensure` resumes it.
    Pause,
}

/// One scope's limits, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScopeLimits {
    pub idle: Option<Duration>,
    pub max_lifetime: Option<Duration>,
    pub on_idle: OnIdle,
}

impl ScopeLimits {
    /// True when the daemon has anything to watch for this scope.
    pub fn any(&self) -> bool {
        self.idle.is_some() || self.max_lifetime.is_some()
    }
}

/// The `[lifecycle]` table, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LifecycleConfig {
    pub session: ScopeLimits,
    pub workflow: ScopeLimits,
    pub connect: ScopeLimits,
}

impl LifecycleConfig {
    pub fn of(&self, scope: Scope) -> ScopeLimits {
        match scope {
            Scope::Session => self.session,
            Scope::Workflow => self.workflow,
            Scope::Connect => self.connect,
        }
    }

    /// True when any scope has a limit.
    pub fn any(&self) -> bool {
        Scope::ALL.into_iter().any(|scope| self.of(scope).any())
    }

    /// True when any scope has an `idle` window.
    pub fn any_idle(&self) -> bool {
        Scope::ALL
            .into_iter()
            .any(|scope| self.of(scope).idle.is_some())
    }

    /// True when any scope has a `max_lifetime`.
    pub fn any_max_lifetime(&self) -> bool {
        Scope::ALL
            .into_iter()
            .any(|scope| self.of(scope).max_lifetime.is_some())
    }
}

/// One scope's table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeFile {
    idle: Option<String>,
    max_lifetime: Option<String>,
    on_idle: Option<OnIdle>,
}

/// `[lifecycle.connect]` as written: a scope's keys, and the connect TTL.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConnectFile {
    idle: Option<String>,
    max_lifetime: Option<String>,
    on_idle: Option<OnIdle>,
    ttl: Option<String>,
}

/// The `[lifecycle]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleFile {
    session: Option<ScopeFile>,
    workflow: Option<ScopeFile>,
    connect: Option<ConnectFile>,
}

/// One limit key: unset, or a duration of at least [`MIN_LIMIT`]; an
/// error names the key.
fn limit(table: &str, key: &str, text: Option<&str>) -> anyhow::Result<Option<Duration>> {
    let Some(text) = text else {
        return Ok(None);
    };
    let value = parse_duration(text).with_context(|| format!("[{table}] {key} '{text}'"))?;
    if value < MIN_LIMIT {
        bail!("[{table}] {key} '{text}' is shorter than a second (leave the key out for no limit)");
    }
    Ok(Some(value))
}

fn scope_limits(
    table: &str,
    idle: Option<&str>,
    max_lifetime: Option<&str>,
    on_idle: Option<OnIdle>,
) -> anyhow::Result<ScopeLimits> {
    let limits = ScopeLimits {
        idle: limit(table, "idle", idle)?,
        max_lifetime: limit(table, "max_lifetime", max_lifetime)?,
        on_idle: on_idle.unwrap_or_default(),
    };
    if on_idle.is_some() && limits.idle.is_none() {
        bail!(
            "[{table}] on_idle is set but idle is not: set idle (e.g. \"30m\") or remove on_idle"
        );
    }
    Ok(limits)
}

impl LifecycleFile {
    /// The limits, and the connect TTL when `[lifecycle.connect] ttl` is
    /// written.
    pub fn resolve(&self) -> anyhow::Result<(LifecycleConfig, Option<Duration>)> {
        let of = |table: &str, file: &Option<ScopeFile>| match file {
            Some(file) => scope_limits(
                table,
                file.idle.as_deref(),
                file.max_lifetime.as_deref(),
                file.on_idle,
            ),
            None => Ok(ScopeLimits::default()),
        };
        let session = of("lifecycle.session", &self.session)?;
        let workflow = of("lifecycle.workflow", &self.workflow)?;
        let (connect, ttl) = match &self.connect {
            Some(file) => {
                let limits = scope_limits(
                    "lifecycle.connect",
                    file.idle.as_deref(),
                    file.max_lifetime.as_deref(),
                    file.on_idle,
                )?;
                let ttl = match file.ttl.as_deref() {
                    Some(text) => {
                        let ttl = parse_duration(text)
                            .with_context(|| format!("[lifecycle.connect] ttl '{text}'"))?;
                        if ttl.is_zero() {
                            bail!("[lifecycle.connect] ttl must be longer than 0");
                        }
                        Some(ttl)
                    }
                    None => None,
                };
                (limits, ttl)
            }
            None => (ScopeLimits::default(), None),
        };
        Ok((
            LifecycleConfig {
                session,
                workflow,
                connect,
            },
            ttl,
        ))
    }
}

/// The connect TTL a container tier uses: `[lifecycle.connect] ttl`, else
/// its old key (`old_key`, e.g. `[docker] connect_ttl`), else
/// [`DEFAULT_CONNECT_TTL`]. Both written with different values is refused.
pub fn connect_ttl(
    new: Option<Duration>,
    old: Option<Duration>,
    old_key: &str,
) -> anyhow::Result<Duration> {
    match (new, old) {
        (Some(new), Some(old)) if new != old => bail!(
            "[lifecycle.connect] ttl ({new:?}) and {old_key} ({old:?}) disagree: write the TTL once, as [lifecycle.connect] ttl ({old_key} is still read for older configs)"
        ),
        (Some(ttl), _) | (None, Some(ttl)) => Ok(ttl),
        (None, None) => Ok(DEFAULT_CONNECT_TTL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(text: &str) -> anyhow::Result<(LifecycleConfig, Option<Duration>)> {
        toml::from_str::<LifecycleFile>(text)?.resolve()
    }

    #[test]
    fn unset_means_never_and_keys_parse_as_durations() {
        let (none, ttl) = resolve("").unwrap();
        assert_eq!(none, LifecycleConfig::default());
        assert!(!none.any());
        assert_eq!(ttl, None);
        let (set, ttl) = resolve(
            "[session]\nidle = \"30m\"\nmax_lifetime = \"8h\"\non_idle = \"pause\"\n\
             [connect]\nttl = \"90s\"\nidle = \"2s\"",
        )
        .unwrap();
        assert_eq!(set.session.idle, Some(Duration::from_secs(1800)));
        assert_eq!(
            set.session.max_lifetime,
            Some(Duration::from_secs(8 * 3600))
        );
        assert_eq!(set.session.on_idle, OnIdle::Pause);
        assert_eq!(set.connect.on_idle, OnIdle::Stop);
        assert_eq!(set.of(Scope::Workflow), ScopeLimits::default());
        assert_eq!(ttl, Some(Duration::from_secs(90)));
    }

    #[test]
    fn bad_values_name_their_key() {
        for (text, words) in [
            (
                "[session]\nidle = \"soon\"",
                "[lifecycle.session] idle 'soon'",
            ),
            (
                "[workflow]\nmax_lifetime = \"500ms\"",
                "[lifecycle.workflow] max_lifetime '500ms' is shorter than a second",
            ),
            (
                "[connect]\nttl = \"0\"",
                "[lifecycle.connect] ttl must be longer than 0",
            ),
            (
                "[session]\non_idle = \"pause\"",
                "[lifecycle.session] on_idle is set but idle is not",
            ),
            (
                "[session]\non_idle = \"sleep\"\nidle = \"1m\"",
                "unknown variant",
            ),
            ("[session]\nttl = \"1m\"", "unknown field"),
        ] {
            let error = format!("{:#}", resolve(text).unwrap_err());
            assert!(error.contains(words), "{text}: {error}");
        }
    }

    #[test]
    fn the_old_ttl_key_is_read_and_a_disagreement_names_both_keys() {
        let hour = Duration::from_secs(3600);
        let minute = Duration::from_secs(60);
        assert_eq!(
            connect_ttl(None, None, "[docker] connect_ttl").unwrap(),
            hour
        );
        assert_eq!(
            connect_ttl(None, Some(minute), "[docker] connect_ttl").unwrap(),
            minute
        );
        assert_eq!(
            connect_ttl(Some(minute), None, "[docker] connect_ttl").unwrap(),
            minute
        );
        assert_eq!(
            connect_ttl(Some(minute), Some(minute), "[docker] connect_ttl").unwrap(),
            minute
        );
        let error = connect_ttl(Some(minute), Some(hour), "[kubernetes] connect_ttl")
            .unwrap_err()
            .to_string();
        assert!(error.contains("[lifecycle.connect] ttl"), "{error}");
        assert!(error.contains("[kubernetes] connect_ttl"), "{error}");
    }
}
