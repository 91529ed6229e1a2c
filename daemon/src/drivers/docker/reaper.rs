//! Removes leaked connect sandboxes on the node itself.
//!
//! A connect sandbox is request-scoped: its caller deprovisions it in a
//! `finally`. When that caller dies first, the container would run forever,
//! and a TTL kept only in the control plane leaks exactly when the control
//! plane is down (e2b-dev/infra#3193). So the daemon removes every connect
//! container older than `connect_ttl`, and one that was created but never
//! started once it is older than `connect_creation_grace` (a create whose
//! start never came: the creator died between the two).
//!
//! Nothing younger than the creation grace is ever touched, whoever made
//! it, and only containers with our labels are considered (Nomad's rule for
//! its dangling-container reconciler). Each removal takes the sandbox's
//! lock and re-inspects first, so it cannot race an ensure or a deprovision
//! of the same id, and it logs a line naming the sandbox.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bollard::models::{ContainerSummary, ContainerSummaryStateEnum};
use sandboxd_protocol::Scope;

use super::containers;
use super::events::short;
use super::observed::{key_of, Lookup, Phase};
use super::teardown;
use super::Inner;

/// When connect sandboxes count as leaked.
#[derive(Debug, Clone, Copy)]
pub struct ReaperSettings {
    pub ttl: Duration,
    pub creation_grace: Duration,
}

impl ReaperSettings {
    /// How often to look: a quarter of the shorter limit, within 500 ms .. 30 s.
    fn interval(&self) -> Duration {
        (self
            .ttl
            .min(self.creation_grace.max(Duration::from_secs(1)))
            / 4)
        .clamp(Duration::from_millis(500), Duration::from_secs(30))
    }

    /// True when a connect container of this age and state is a leak.
    fn is_leaked(&self, age: Duration, never_started: bool) -> bool {
        if age < self.creation_grace {
            return false;
        }
        age >= self.ttl || never_started
    }
}

/// Looks for leaks every [`ReaperSettings::interval`] for as long as the daemon runs.
pub async fn run(inner: Arc<Inner>, settings: ReaperSettings) {
    let mut ticks = tokio::time::interval(settings.interval());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // An unreachable engine is the events watcher's to report.
        let Ok(listed) = containers::list(&inner.engine, Some(Scope::Connect)).await else {
            continue;
        };
        for summary in listed {
            reap_if_leaked(&inner, &settings, &summary).await;
        }
    }
}

/// How long ago a container was created. The listing gives whole seconds
/// (rounded down, so an age from it is an upper bound); an inspect gives
/// nanoseconds.
fn age_since(created_unix_ms: u64) -> Duration {
    let created = SystemTime::UNIX_EPOCH + Duration::from_millis(created_unix_ms);
    SystemTime::now()
        .duration_since(created)
        .unwrap_or_default()
}

async fn reap_if_leaked(inner: &Inner, settings: &ReaperSettings, summary: &ContainerSummary) {
    let Some(key) = key_of(
        &summary.labels.clone().unwrap_or_default(),
        summary.names.as_deref().unwrap_or_default(),
    ) else {
        return;
    };
    let (Some(container), Some(created)) = (summary.id.as_deref(), summary.created) else {
        return;
    };
    // A cheap first sift on the listing; the listed age can only be too old.
    let listed_age = age_since(u64::try_from(created).unwrap_or_default() * 1000);
    let never_started = summary.state == Some(ContainerSummaryStateEnum::CREATED);
    if key.scope != Scope::Connect || !settings.is_leaked(listed_age, never_started) {
        return;
    }
    let _guard = inner.key_locks.lock(&key).await;
    // It may have been deprovisioned, or replaced by a new one, since the
    // listing: decide again on a fresh inspect, with its exact creation time.
    let observed = match containers::inspect(&inner.engine, &key).await {
        Ok(Lookup::Ours(observed)) if observed.id == container => observed,
        _ => return,
    };
    let Some(created_at) = observed.created_at_unix_ms else {
        return;
    };
    let age = age_since(created_at);
    let never_started = observed.phase == Phase::Stopped && observed.started_at_unix_ms.is_none();
    if !settings.is_leaked(age, never_started) {
        return;
    }
    match teardown::remove_container(
        inner,
        &key,
        &observed,
        "reaped: connect sandbox past its ttl",
    )
    .await
    {
        Ok(forced) => {
            inner.generations.forget(&key);
            inner.exits.forget(&key);
            tracing::warn!(
                scope = %key.scope,
                id = %key.shown_id(),
                container = %short(container),
                age_ms = age.as_millis() as u64,
                never_started,
                forced,
                "removed a leaked connect sandbox"
            );
        }
        Err(error) => tracing::warn!(
            scope = %key.scope,
            id = %key.shown_id(),
            container = %short(container),
            %error,
            "cannot remove a leaked connect sandbox"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaks_are_old_or_never_started_and_never_younger_than_the_grace() {
        let settings = ReaperSettings {
            ttl: Duration::from_secs(3600),
            creation_grace: Duration::from_secs(120),
        };
        let minutes = |m: u64| Duration::from_secs(m * 60);
        assert!(
            !settings.is_leaked(minutes(1), true),
            "inside the creation grace"
        );
        assert!(
            settings.is_leaked(minutes(3), true),
            "created, never started, past the grace"
        );
        assert!(
            !settings.is_leaked(minutes(3), false),
            "running, younger than the TTL"
        );
        assert!(settings.is_leaked(minutes(61), false), "older than the TTL");
        let short_ttl = ReaperSettings {
            ttl: Duration::from_secs(2),
            creation_grace: Duration::from_secs(120),
        };
        assert!(
            !short_ttl.is_leaked(minutes(1), false),
            "the grace is a floor even under a short TTL"
        );
        assert_eq!(settings.interval(), Duration::from_secs(30));
        assert_eq!(short_ttl.interval(), Duration::from_millis(500));
    }
}
