//! Taking a sandbox down: SIGTERM so the runner drains, SIGKILL when the
//! grace runs out, then the container, then (unless kept) the workspace.
//!
//! The signals go through the engine's kill call rather than `stop`, so we
//! know whether the grace ran out and can report the stop as forced.

use std::time::Duration;

use bollard::query_parameters::WaitContainerOptionsBuilder;
use futures::StreamExt;
use sandboxd_protocol::{DeprovisionReport, EventKind, Expectation, SandboxError};

use super::containers;
use super::engine::{CallError, Engine};
use super::events::short;
use super::observed::{labels_match, Lookup, Observed, Phase};
use super::spec::workspace_volume;
use super::Inner;
use crate::sandbox_key::SandboxKey;

/// How long a SIGKILLed container may take to be reaped before we report it.
const KILL_WAIT: Duration = Duration::from_secs(30);

/// Tears the sandbox down: container, then workspace volume unless kept.
/// Missing is success. The caller holds the key's lock.
pub async fn deprovision(
    inner: &Inner,
    key: &SandboxKey,
    keep_workspace: bool,
    expect: Option<&Expectation>,
) -> Result<DeprovisionReport, SandboxError> {
    let engine = &inner.engine;
    let what = |verb: &str| {
        format!(
            "cannot {verb} the container of {} '{}' ({})",
            key.scope, key.id, key.base_name
        )
    };
    let lookup = containers::inspect(engine, key)
        .await
        .map_err(|error| error.into_sandbox_error(&what("inspect")))?;
    // Checked under the key lock, on what the engine shows now. A sandbox
    // with no container is absent: success whatever was expected.
    if let (Some(expect), Lookup::Ours(observed)) = (expect, &lookup) {
        let generation = inner.generation(key, Some(observed));
        expect.check(&key.what(), Some((observed.uid(), generation)))?;
    }
    let incarnation = match &lookup {
        Lookup::Ours(observed) => Some((
            observed.uid().to_string(),
            inner.generation(key, Some(observed)),
        )),
        _ => None,
    };
    let (had_container, forced) = match lookup {
        Lookup::Ours(observed) => (
            true,
            remove_container(inner, key, &observed, "sandbox deprovisioned").await?,
        ),
        Lookup::Foreign { id } => {
            tracing::warn!(scope = %key.scope, id = %key.shown_id(), container = %short(&id), "a container with this sandbox's name is not ours; leaving it");
            (false, false)
        }
        Lookup::Absent => (false, false),
    };
    let had_volume = match workspace_volume(key) {
        Some(volume) if !keep_workspace => remove_workspace(engine, key, &volume).await?,
        _ => false,
    };
    inner.generations.forget(key);
    inner.exits.forget(key);
    let was_present = had_container || had_volume;
    if let Some((uid, generation)) = incarnation {
        inner
            .events
            .emit(EventKind::Deprovisioned, key, &uid, generation, None);
    }
    if was_present {
        tracing::info!(scope = %key.scope, id = %key.shown_id(), forced, keep_workspace, "sandbox deprovisioned");
    }
    Ok(DeprovisionReport {
        was_present,
        forced,
    })
}

/// Stops (see [`stop`]) and removes one container of ours, anonymous
/// scratch volume included. True when the stop was forced. `why` says
/// why, to the followers of its generation (its last output is kept for
/// them, see [`super::departed`]).
pub async fn remove_container(
    inner: &Inner,
    key: &SandboxKey,
    observed: &Observed,
    why: &str,
) -> Result<bool, SandboxError> {
    // Its `die` event is the daemon's own doing: reported as such.
    inner.exits.stopping(&observed.id);
    let forced = stop(&inner.engine, key, observed, inner.stop_grace).await?;
    if inner.departed.is_followed(&key.base_name) {
        let generation = inner.generation(key, Some(observed));
        let how = format!("generation {generation}: the runner was stopped ({why})");
        super::logs::keep_departed(inner, key, &observed.id, how).await;
    }
    inner.files.forget_container(&observed.id);
    containers::remove(&inner.engine, &observed.id)
        .await
        .map_err(|error| {
            error.into_sandbox_error(&format!(
                "cannot remove container {} of {} '{}'",
                short(&observed.id),
                key.scope,
                key.id
            ))
        })?;
    Ok(forced)
}

/// SIGTERM, then SIGKILL after `grace`; returns once the runner is gone.
/// True when SIGKILL was needed. A container that is not running is left as it is.
pub async fn stop(
    engine: &Engine,
    key: &SandboxKey,
    observed: &Observed,
    grace: Duration,
) -> Result<bool, SandboxError> {
    let container = observed.id.as_str();
    let failed = |verb: &str, error: CallError| {
        error.into_sandbox_error(&format!(
            "cannot {verb} container {} of {} '{}'",
            short(container),
            key.scope,
            key.id
        ))
    };
    match observed.phase {
        Phase::Running | Phase::Restarting => {}
        // Frozen processes cannot act on SIGTERM: thaw first, then ask.
        Phase::Paused => match containers::unpause(engine, container).await {
            Ok(()) => {}
            Err(error) if error.is_conflict() || error.is_not_found() => {}
            Err(error) => return Err(failed("unpause", error)),
        },
        Phase::Stopped | Phase::Dead | Phase::Removing => return Ok(false),
    }
    match signal_and_wait(engine, container, "SIGTERM", grace)
        .await
        .map_err(|error| failed("stop", error))?
    {
        Signalled::Stopped | Signalled::WasNotRunning => return Ok(false),
        Signalled::StillRunning => {}
    }
    tracing::warn!(scope = %key.scope, id = %key.shown_id(), container = %short(container), grace = ?grace, "runner ignored SIGTERM; killing it");
    match signal_and_wait(engine, container, "SIGKILL", KILL_WAIT)
        .await
        .map_err(|error| failed("kill", error))?
    {
        Signalled::Stopped => Ok(true),
        // It exited by itself just as the grace ran out.
        Signalled::WasNotRunning => Ok(false),
        Signalled::StillRunning => Err(SandboxError::Unavailable(format!(
            "container {} of {} '{}' did not stop within {KILL_WAIT:?} of SIGKILL",
            short(container),
            key.scope,
            key.id
        ))),
    }
}

/// What one signal did.
enum Signalled {
    /// It was running, and stopped within the time given.
    Stopped,
    /// It was not running (409) or not there (404) when signalled.
    WasNotRunning,
    /// It still runs.
    StillRunning,
}

/// Sends `signal` to the container's init and waits up to `within` for it to stop.
async fn signal_and_wait(
    engine: &Engine,
    container: &str,
    signal: &str,
    within: Duration,
) -> Result<Signalled, CallError> {
    match containers::kill(engine, container, signal).await {
        Ok(()) => {}
        Err(error) if error.is_conflict() || error.is_not_found() => {
            return Ok(Signalled::WasNotRunning)
        }
        Err(error) => return Err(error),
    }
    Ok(if wait_stopped(engine, container, within).await? {
        Signalled::Stopped
    } else {
        Signalled::StillRunning
    })
}

/// True once the container is not running (or gone); false if `timeout` passed first.
async fn wait_stopped(
    engine: &Engine,
    container: &str,
    timeout: Duration,
) -> Result<bool, CallError> {
    let docker = engine.docker().await?;
    let options = WaitContainerOptionsBuilder::new()
        .condition("not-running")
        .build();
    let mut waiting = docker.wait_container(container, Some(options));
    match tokio::time::timeout(timeout, waiting.next()).await {
        Err(_) => Ok(false),
        Ok(None | Some(Ok(_))) => Ok(true),
        // bollard reports a non-zero exit code as an error: it stopped all the same.
        Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { .. }))) => Ok(true),
        Ok(Some(Err(error))) => match engine.classify(error) {
            error if error.is_not_found() => Ok(true),
            error => Err(error),
        },
    }
}

/// Removes the workspace volume if it is ours; true when there was one.
async fn remove_workspace(
    engine: &Engine,
    key: &SandboxKey,
    volume: &str,
) -> Result<bool, SandboxError> {
    let failed = |error: CallError| {
        error.into_sandbox_error(&format!(
            "cannot remove workspace volume {volume} of {} '{}'",
            key.scope, key.id
        ))
    };
    let name = volume.to_string();
    let inspected = engine
        .call(super::engine::READ_TIMEOUT, |docker| async move {
            docker.inspect_volume(&name).await
        })
        .await;
    match inspected {
        Ok(found) if labels_match(key, &found.labels) => containers::remove_volume(engine, volume)
            .await
            .map_err(failed),
        Ok(_) => {
            tracing::warn!(scope = %key.scope, id = %key.shown_id(), volume, "a volume with this sandbox's workspace name is not ours; leaving it");
            Ok(false)
        }
        Err(error) if error.is_not_found() => Ok(false),
        Err(error) => Err(failed(error)),
    }
}
