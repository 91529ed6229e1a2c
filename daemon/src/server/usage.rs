//! The live figures the server adds to `describe` and answers `usage`
//! with, asked of the driver (see [`Driver::usage`]).
//!
//! Figures are a courtesy, not the call's point: one that cannot be read
//! (a runner gone in between, an engine slow to answer) leaves the
//! sandbox without figures, never fails `describe`. `usage` reads every
//! running sandbox's at once, a few at a time, so `sandboxctl top` makes
//! one call a refresh instead of one `describe` per sandbox.

use futures::StreamExt as _;
use sandboxd_protocol::{ProbeState, SandboxError, SandboxUsage, Scope, Usage};

use crate::provisioner::{Driver, SandboxKey};

/// How many sandboxes' figures are read at once (a docker stats call
/// each; a few sysfs reads on the process tier).
const CONCURRENCY: usize = 8;

/// `key`'s figures, or `None` (logged at debug) when they cannot be read.
pub async fn figures(driver: &dyn Driver, key: &SandboxKey, with_disk: bool) -> Option<Usage> {
    match driver.usage(key, with_disk).await {
        Ok(usage) => usage,
        Err(error) => {
            tracing::debug!(scope = %key.scope, id = %key.shown_id(), %error, "cannot read a sandbox's figures");
            None
        }
    }
}

/// Every running sandbox's figures (optionally of one scope), by scope
/// then id; a sandbox whose figures cannot be read is left out. The
/// workspace sizes are not measured: a walk of every workspace each
/// second is what `describe` can afford and `top` cannot.
pub async fn of_running(
    driver: &dyn Driver,
    scope: Option<Scope>,
) -> Result<Vec<SandboxUsage>, SandboxError> {
    let running: Vec<_> = driver
        .list(scope)
        .await?
        .into_iter()
        .filter(|info| info.state == ProbeState::Running)
        .collect();
    let mut found: Vec<SandboxUsage> = futures::stream::iter(running)
        .map(|info| async move {
            let key = SandboxKey::new(info.scope, info.id.clone());
            figures(driver, &key, false)
                .await
                .map(|usage| SandboxUsage {
                    name: info.name,
                    scope: info.scope,
                    id: info.id,
                    usage,
                })
        })
        .buffer_unordered(CONCURRENCY)
        .filter_map(|found| async move { found })
        .collect()
        .await;
    found.sort_by(|a, b| a.scope.cmp(&b.scope).then_with(|| a.id.cmp(&b.id)));
    Ok(found)
}
