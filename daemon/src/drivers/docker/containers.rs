//! The engine calls the driver makes, one function each, with the bounds
//! and the not-found handling every caller wants.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, ContainerSummary};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, RemoveVolumeOptionsBuilder,
};
use sandboxd_protocol::naming::{LABEL_MANAGED_BY, LABEL_SCOPE, MANAGED_BY_VALUE};
use sandboxd_protocol::Scope;

use super::engine::{CallError, Engine, READ_TIMEOUT, WRITE_TIMEOUT};
use super::observed::Lookup;
use crate::provisioner::SandboxKey;

/// The container that has this sandbox's name, if any, in our terms.
pub async fn inspect(engine: &Engine, key: &SandboxKey) -> Result<Lookup, CallError> {
    let name = key.base_name.clone();
    let result = engine
        .call(READ_TIMEOUT, |docker| async move {
            docker
                .inspect_container(&name, None::<InspectContainerOptions>)
                .await
        })
        .await;
    match result {
        Ok(inspect) => Ok(Lookup::from_inspect(key, inspect)),
        Err(error) if error.is_not_found() => Ok(Lookup::Absent),
        Err(error) => Err(error),
    }
}

/// Creates the container under the sandbox's name; returns its id. A 409
/// means the name is taken (a racing creator): the caller re-inspects.
pub async fn create(
    engine: &Engine,
    key: &SandboxKey,
    body: ContainerCreateBody,
) -> Result<String, CallError> {
    let options = CreateContainerOptionsBuilder::new()
        .name(&key.base_name)
        .build();
    let created = engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.create_container(Some(options), body).await
        })
        .await?;
    for warning in &created.warnings {
        tracing::warn!(scope = %key.scope, id = %key.id, container = %created.id, %warning, "engine warning on create");
    }
    Ok(created.id)
}

/// Starts a created or exited container (already running is fine).
pub async fn start(engine: &Engine, container: &str) -> Result<(), CallError> {
    let container = container.to_string();
    engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.start_container(&container, None).await
        })
        .await
}

pub async fn unpause(engine: &Engine, container: &str) -> Result<(), CallError> {
    let container = container.to_string();
    engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.unpause_container(&container).await
        })
        .await
}

/// Sends `signal` to the container's init, which passes it on to the runner.
pub async fn kill(engine: &Engine, container: &str, signal: &str) -> Result<(), CallError> {
    let (container, options) = (
        container.to_string(),
        KillContainerOptionsBuilder::new().signal(signal).build(),
    );
    engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.kill_container(&container, Some(options)).await
        })
        .await
}

/// Removes the container and its anonymous (scratch) volumes, whatever its
/// state. Gone already is success.
pub async fn remove(engine: &Engine, container: &str) -> Result<(), CallError> {
    let (container, options) = (
        container.to_string(),
        RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build(),
    );
    match engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.remove_container(&container, Some(options)).await
        })
        .await
    {
        Err(error) if error.is_not_found() => Ok(()),
        other => other,
    }
}

/// Removes a named volume; `false` when there was none.
pub async fn remove_volume(engine: &Engine, volume: &str) -> Result<bool, CallError> {
    let (volume, options) = (
        volume.to_string(),
        RemoveVolumeOptionsBuilder::new().force(false).build(),
    );
    match engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.remove_volume(&volume, Some(options)).await
        })
        .await
    {
        Ok(()) => Ok(true),
        Err(error) if error.is_not_found() => Ok(false),
        Err(error) => Err(error),
    }
}

/// Every container with our managed-by label (optionally of one scope), in any state.
pub async fn list(
    engine: &Engine,
    scope: Option<Scope>,
) -> Result<Vec<ContainerSummary>, CallError> {
    let mut labels = vec![format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")];
    if let Some(scope) = scope {
        labels.push(format!("{LABEL_SCOPE}={scope}"));
    }
    let filters = HashMap::from([("label", labels)]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    engine
        .call(READ_TIMEOUT, |docker| async move {
            docker.list_containers(Some(options)).await
        })
        .await
}
