//! The docker tier's health verdict: the engine answers, and the runner
//! image is on it (sandboxd never pulls, so an absent image fails every
//! ensure until an operator loads it).

use sandboxd_protocol::{Health, HealthVerdict};

use super::engine::{CallError, READ_TIMEOUT};
use super::Inner;

pub async fn check(inner: &Inner) -> Health {
    let mut health = Health::healthy();
    let image = inner.spec.image.clone();
    let inspected = inner
        .engine
        .call(READ_TIMEOUT, |docker| async move {
            docker.inspect_image(&image).await
        })
        .await;
    match inspected {
        Ok(_) => {}
        Err(error) if error.is_not_found() => health.add(
            HealthVerdict::Unhealthy,
            format!(
                "the runner image {} is not on the engine (sandboxd never pulls: load it there)",
                inner.spec.image
            ),
        ),
        Err(error @ CallError::Unreachable(_)) => health.add(
            HealthVerdict::Unhealthy,
            format!(
                "the engine at {} does not answer: {error}",
                inner.engine.address()
            ),
        ),
        Err(error) => health.add(
            HealthVerdict::Degraded,
            format!(
                "cannot inspect the runner image {}: {error}",
                inner.spec.image
            ),
        ),
    }
    health
}
