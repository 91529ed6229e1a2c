//! The engine calls the driver makes, one function each, with the bounds
//! and the not-found handling every caller wants.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use bollard::models::{ContainerCreateBody, ContainerInspectResponse, ContainerSummary};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, LogsOptions, RemoveContainerOptionsBuilder,
    RemoveVolumeOptionsBuilder,
};
use futures::StreamExt;
use sandboxd_protocol::naming::{LABEL_MANAGED_BY, LABEL_SCOPE, MANAGED_BY_VALUE};
use sandboxd_protocol::Scope;

use super::engine::{CallError, Engine, READ_TIMEOUT, WRITE_TIMEOUT};
use super::observed::Lookup;
use crate::instance::Instance;
use crate::sandbox_key::SandboxKey;

/// How long a removal under way may take before we report it.
const REMOVAL_WAIT: Duration = Duration::from_secs(30);
/// How often to look while waiting for one.
const REMOVAL_POLL: Duration = Duration::from_millis(100);

/// The container that has this sandbox's name, if any, in our terms.
pub async fn inspect(engine: &Engine, key: &SandboxKey) -> Result<Lookup, CallError> {
    Ok(
        match inspect_raw(engine, &Instance::current().object_name(&key.base_name)).await? {
            Some(inspect) => Lookup::from_inspect(key, inspect),
            None => Lookup::Absent,
        },
    )
}

/// The engine's inspect of a container by name or id; `None` when there is none.
async fn inspect_raw(
    engine: &Engine,
    container: &str,
) -> Result<Option<ContainerInspectResponse>, CallError> {
    let container = container.to_string();
    let result = engine
        .call(READ_TIMEOUT, |docker| async move {
            docker
                .inspect_container(&container, None::<InspectContainerOptions>)
                .await
        })
        .await;
    match result {
        Ok(inspect) => Ok(Some(inspect)),
        Err(error) if error.is_not_found() => Ok(None),
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
        .name(&Instance::current().object_name(&key.base_name))
        .build();
    let created = engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.create_container(Some(options), body).await
        })
        .await?;
    for warning in &created.warnings {
        tracing::warn!(scope = %key.scope, id = %key.shown_id(), container = %created.id, %warning, "engine warning on create");
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

pub async fn pause(engine: &Engine, container: &str) -> Result<(), CallError> {
    let container = container.to_string();
    engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.pause_container(&container).await
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
/// state. Gone already is success; so is a removal already under way, once
/// it has finished.
pub async fn remove(engine: &Engine, container: &str) -> Result<(), CallError> {
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    let id = container.to_string();
    match engine
        .call(WRITE_TIMEOUT, |docker| async move {
            docker.remove_container(&id, Some(options)).await
        })
        .await
    {
        Err(error) if error.is_not_found() => Ok(()),
        // 409: "removal already in progress" — someone else's; wait it out.
        Err(error) if error.is_conflict() => {
            if wait_removed(engine, container).await? {
                Ok(())
            } else {
                Err(error)
            }
        }
        other => other,
    }
}

/// Waits until a container the engine is removing is gone; false when it
/// is still there after [`REMOVAL_WAIT`].
pub async fn wait_removed(engine: &Engine, container: &str) -> Result<bool, CallError> {
    let deadline = Instant::now() + REMOVAL_WAIT;
    while inspect_raw(engine, container).await?.is_some() {
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(REMOVAL_POLL).await;
    }
    Ok(true)
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

/// Reads the container's log as it is now (never following it): hands each
/// entry's bytes to `entry` until it says stop or the log ends. Dropping the
/// stream early closes the request, so stopping is cheap.
pub async fn logs(
    engine: &Engine,
    container: &str,
    options: LogsOptions,
    mut entry: impl FnMut(&[u8]) -> ControlFlow<()> + Send,
) -> Result<(), CallError> {
    let container = container.to_string();
    engine
        .call(READ_TIMEOUT, |docker| async move {
            let mut stream = std::pin::pin!(docker.logs(&container, Some(options)));
            while let Some(output) = stream.next().await {
                if entry(output?.as_ref()).is_break() {
                    break;
                }
            }
            Ok(())
        })
        .await
}

/// Every container with our managed-by label (optionally of one scope) of
/// this daemon's instance, in any state.
pub async fn list(
    engine: &Engine,
    scope: Option<Scope>,
) -> Result<Vec<ContainerSummary>, CallError> {
    let instance = Instance::current();
    let mut labels = vec![format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")];
    if let Some(scope) = scope {
        labels.push(format!("{LABEL_SCOPE}={scope}"));
    }
    if let Some((label, name)) = instance.label() {
        labels.push(format!("{label}={name}"));
    }
    let filters = HashMap::from([("label", labels)]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let listed = engine
        .call(READ_TIMEOUT, |docker| async move {
            docker.list_containers(Some(options)).await
        })
        .await?;
    // The default instance owns only unlabelled objects, which no engine
    // filter can select: the others' are dropped here.
    Ok(listed
        .into_iter()
        .filter(|summary| instance.owns(summary.labels.as_ref().unwrap_or(&HashMap::new())))
        .collect())
}
