//! Builds the one tier the configuration names: the only place that knows
//! every tier, above them all, so the seam they implement
//! ([`crate::provisioner::Driver`]) never imports one.

use std::sync::Arc;

use crate::config::{Config, UnknownDriver};
use crate::events::EventHub;
use crate::provisioner::Driver;

/// Why no driver could be built.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error(transparent)]
    Unknown(#[from] UnknownDriver),
    #[error("{0}")]
    Setup(String),
}

/// Builds the driver the configuration names. Never falls back to another
/// tier: a typo must not silently run unisolated.
pub async fn select(
    config: &Config,
    events: Arc<EventHub>,
) -> Result<Arc<dyn Driver>, SelectError> {
    if config.lifecycle.any_idle() && config.driver == "kubernetes" {
        tracing::warn!(driver = %config.driver, "[lifecycle] idle is applied by the local-process and docker tiers only: without a metrics API the kubernetes tier has no per-pod CPU figure, so it ignores idle (max_lifetime is applied; pause, a scale to 0, still works on request)");
    }
    match config.driver.as_str() {
        "local-process" => {
            let driver = super::local_process::LocalProcessDriver::start(config, events)
                .await
                .map_err(|error| SelectError::Setup(format!("{error:#}")))?;
            Ok(Arc::new(driver))
        }
        "docker" => {
            let driver = super::docker::DockerDriver::start(config, events)
                .await
                .map_err(|error| SelectError::Setup(format!("{error:#}")))?;
            Ok(Arc::new(driver))
        }
        "kubernetes" => {
            let driver = super::kubernetes::KubernetesDriver::start(config, events)
                .await
                .map_err(|error| SelectError::Setup(format!("{error:#}")))?;
            Ok(Arc::new(driver))
        }
        other => Err(UnknownDriver(other.to_string()).into()),
    }
}
