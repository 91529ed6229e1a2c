//! Removes leaked connect sandboxes on the cluster, as the docker tier
//! does on its engine: a connect sandbox's caller deprovisions it in a
//! `finally`, and when that caller dies first, the Deployment would run
//! forever. Same keys (`connect_ttl`, `connect_creation_grace`): every
//! connect Deployment older than the TTL goes, and nothing younger than
//! the creation grace is ever touched. Only Deployments carrying our three
//! labels are considered; each removal takes the sandbox's lock and looks
//! again first (the same uid, still old enough), so it cannot race an
//! ensure or a deprovision of the same id.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::ListParams;
use sandboxd_protocol::naming::{LABEL_MANAGED_BY, LABEL_SCOPE, MANAGED_BY_VALUE};
use sandboxd_protocol::Scope;

use super::deprovision;
use super::observe::{key_of, selector, Lookup};
use super::Inner;

/// When connect sandboxes count as leaked.
#[derive(Debug, Clone, Copy)]
pub struct ReaperSettings {
    pub ttl: Duration,
    pub creation_grace: Duration,
}

impl ReaperSettings {
    /// How often to look: a quarter of the TTL, within 500 ms .. 30 s.
    fn interval(&self) -> Duration {
        (self.ttl / 4).clamp(Duration::from_millis(500), Duration::from_secs(30))
    }

    /// A Deployment has no "created but never started" state: it is a leak
    /// once older than the TTL, and never inside the creation grace.
    fn is_leaked(&self, age: Duration) -> bool {
        age >= self.creation_grace && age >= self.ttl
    }
}

fn age_of(deployment: &Deployment) -> Option<Duration> {
    let created = deployment.metadata.creation_timestamp.as_ref()?;
    let created_ms = u64::try_from(created.0.as_millisecond()).ok()?;
    let created = SystemTime::UNIX_EPOCH + Duration::from_millis(created_ms);
    Some(
        SystemTime::now()
            .duration_since(created)
            .unwrap_or_default(),
    )
}

/// Looks for leaks every [`ReaperSettings::interval`] for as long as the daemon runs.
pub async fn run(inner: Arc<Inner>, settings: ReaperSettings) {
    let mut ticks = tokio::time::interval(settings.interval());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let labels = selector(&[
        (LABEL_MANAGED_BY, MANAGED_BY_VALUE),
        (LABEL_SCOPE, Scope::Connect.as_str()),
    ]);
    loop {
        ticks.tick().await;
        let params = ListParams::default().labels(&labels);
        // An unreachable API server is reported by the calls that need it.
        let Ok(listed) = inner.cluster.call(inner.deployments().list(&params)).await else {
            continue;
        };
        for deployment in listed.items {
            reap_if_leaked(&inner, &settings, &deployment).await;
        }
    }
}

async fn reap_if_leaked(inner: &Inner, settings: &ReaperSettings, listed: &Deployment) {
    let Some(key) = key_of(listed) else {
        return;
    };
    if key.scope != Scope::Connect || !age_of(listed).is_some_and(|age| settings.is_leaked(age)) {
        return;
    }
    let _guard = inner.key_locks.lock(&key).await;
    // Deprovisioned or replaced since the listing? Decide on a fresh look.
    let Ok(Lookup::Ours(current)) = inner.lookup(&key).await else {
        return;
    };
    if current.metadata.uid != listed.metadata.uid {
        return;
    }
    let age = age_of(&current).unwrap_or_default();
    match deprovision::deprovision(inner, &key, false).await {
        Ok(_) => tracing::warn!(
            scope = %key.scope,
            id = %key.id,
            name = %key.base_name,
            age_ms = age.as_millis() as u64,
            "removed a leaked connect sandbox"
        ),
        Err(error) => tracing::warn!(
            scope = %key.scope,
            id = %key.id,
            %error,
            "cannot remove a leaked connect sandbox"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaks_are_older_than_the_ttl_and_never_inside_the_grace() {
        let settings = ReaperSettings {
            ttl: Duration::from_secs(3600),
            creation_grace: Duration::from_secs(120),
        };
        assert!(!settings.is_leaked(Duration::from_secs(600)));
        assert!(settings.is_leaked(Duration::from_secs(3601)));
        let short = ReaperSettings {
            ttl: Duration::from_secs(2),
            creation_grace: Duration::from_secs(120),
        };
        assert!(
            !short.is_leaked(Duration::from_secs(60)),
            "the grace is a floor"
        );
        assert!(short.is_leaked(Duration::from_secs(121)));
        assert_eq!(short.interval(), Duration::from_millis(500));
    }
}
