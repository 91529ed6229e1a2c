//! The ensure state machine, driven by the container's real state.
//!
//! | engine says            | ensure does                                   |
//! |------------------------|-----------------------------------------------|
//! | running                | nothing (fast path, no write call)            |
//! | paused                 | unpause                                       |
//! | created, exited        | start — or recreate, when the token changed   |
//! | dead, half-removed     | remove, then create (the volume is kept)      |
//! | no such container      | create, then start                            |
//!
//! Every write is followed by a fresh look rather than an assumption: a
//! 409 name conflict on create means another creator won the race (it
//! exists — go on with it, once the engine shows it: the name is reserved
//! a moment before the container can be inspected), and a failed create is
//! re-inspected because the engine may have made the container anyway
//! (Nomad PR #6762).

use std::time::{Duration, Instant};

use sandboxd_protocol::{EnsureReport, EventKind, ProbeState, SandboxEnv, SandboxError, Scope};

use super::containers;
use super::engine::CallError;
use super::events::short;
use super::observed::{Lookup, Observed, Phase};
use super::spec::RunnerSpec;
use super::teardown;
use super::Inner;
use crate::drivers::differs::{differing_fields, token_digest, RunsWith, TokenDigest};
use crate::sandbox_key::SandboxKey;

/// How many looks at the container one ensure takes before giving up on a
/// container that keeps changing under it.
const MAX_STEPS: usize = 8;
/// How long to wait for another creator's container to appear after its
/// name blocked our create, and how often to look meanwhile.
const NAME_TAKEN_WAIT: Duration = Duration::from_secs(10);
const NAME_TAKEN_POLL: Duration = Duration::from_millis(50);

/// Brings the sandbox to running. The caller holds the key's lock.
///
/// `seen`: what the caller's look, taken before the lock, found. When it
/// found no container, that is where this starts, without a second look:
/// the create settles any race (a 409 if another creator was first, and
/// then a look). Anything else is looked at again under the lock.
pub async fn ensure(
    inner: &Inner,
    key: &SandboxKey,
    env: &SandboxEnv,
    seen: Lookup,
) -> Result<EnsureReport, SandboxError> {
    let mut seen = matches!(seen, Lookup::Absent).then_some(seen);
    let mut failed_create: Option<SandboxError> = None;
    let mut name_taken_since: Option<Instant> = None;
    let mut steps = 0;
    // The uid of the container this ensure saw, carried over when it is
    // recreated: the same incarnation.
    let mut uid: Option<String> = None;
    // Why a stopped container of this incarnation was replaced, when it
    // was: a new token or queue is announced as `changed`.
    let mut replaced: Option<&'static str> = None;
    while steps < MAX_STEPS {
        steps += 1;
        let lookup = match seen.take() {
            Some(absent) => absent,
            None => containers::inspect(&inner.engine, key)
                .await
                .map_err(|error| failure(key, "inspect", error))?,
        };
        let observed = match lookup {
            Lookup::Absent => {
                if let Some(error) = failed_create {
                    return Err(error);
                }
                let uid = uid.get_or_insert_with(crate::incarnation::new_uid).clone();
                match create_and_start(inner, key, env, &uid, replaced).await {
                    Ok(report) => return Ok(report),
                    // Someone else is creating it: look at what they made,
                    // as soon as the engine shows it. Waiting on them is
                    // not a change of state, so it takes no step.
                    Err(CreateError::NameTaken) => {
                        let since = *name_taken_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= NAME_TAKEN_WAIT {
                            return Err(SandboxError::Unavailable(format!(
                                "the name {} of {} '{}' has been taken for {NAME_TAKEN_WAIT:?} \
                                 by a container the engine does not show",
                                key.base_name, key.scope, key.id
                            )));
                        }
                        steps -= 1;
                        tokio::time::sleep(NAME_TAKEN_POLL).await;
                        continue;
                    }
                    Err(CreateError::Uncertain(error)) => {
                        failed_create = Some(error);
                        continue;
                    }
                    Err(CreateError::Final(error)) => return Err(error),
                }
            }
            Lookup::Foreign { id } => {
                return Err(SandboxError::FailedPrecondition(format!(
                    "a container named {} ({}) exists without sandboxd's labels for {} '{}': \
                     sandboxd will not touch it; remove or rename it",
                    key.base_name,
                    short(&id),
                    key.scope,
                    key.id
                )))
            }
            Lookup::Ours(observed) => observed,
        };
        if !observed.uid().is_empty() {
            uid = Some(observed.uid().to_string());
        }
        if let Some(report) = step(inner, key, env, &observed, &mut replaced).await? {
            return Ok(report);
        }
    }
    Err(SandboxError::Unavailable(format!(
        "the container of {} '{}' ({}) kept changing state while ensuring it; try again",
        key.scope, key.id, key.base_name
    )))
}

/// One transition from an existing container; `None` means look again.
/// A stopped container removed to be made anew sets `replaced` to why.
async fn step(
    inner: &Inner,
    key: &SandboxKey,
    env: &SandboxEnv,
    observed: &Observed,
    replaced: &mut Option<&'static str>,
) -> Result<Option<EnsureReport>, SandboxError> {
    let generation = inner.generation(key, Some(observed));
    // The container is kept as it is: say what it runs with that differs.
    let runs_with = RunsWith {
        task_queue: observed.task_queue(),
        caller_class: observed.caller_class(),
        token_sha256: observed.token_digest().map(TokenDigest::Hex),
    };
    let unchanged = |state| EnsureReport {
        state,
        created: false,
        generation,
        pid: None,
        differs: differing_fields(env, &runs_with),
        uid: observed.uid().to_string(),
    };
    let log = |action: &str| tracing::info!(scope = %key.scope, id = %key.shown_id(), container = %short(&observed.id), phase = observed.phase.as_str(), action, "ensuring");
    // A connect sandbox is request-scoped: one that exists in any usable
    // state is reported as it is, and create_connect refuses it.
    if key.scope == Scope::Connect && !matches!(observed.phase, Phase::Dead | Phase::Removing) {
        return Ok(Some(unchanged(observed.phase.probe_state())));
    }
    match observed.phase {
        Phase::Running | Phase::Restarting => Ok(Some(unchanged(ProbeState::Running))),
        Phase::Paused => {
            log("unpause");
            match containers::unpause(&inner.engine, &observed.id).await {
                Ok(()) => {
                    inner.resumed(key, observed, generation);
                    Ok(Some(unchanged(ProbeState::Running)))
                }
                // No longer paused: look again.
                Err(error) if error.is_conflict() => Ok(None),
                Err(error) => Err(failure(key, "unpause", error)),
            }
        }
        Phase::Stopped => {
            if let Some(reason) = stale(observed, env, &inner.spec) {
                tracing::info!(scope = %key.scope, id = %key.shown_id(), container = %short(&observed.id), reason, "recreating the stopped container; the workspace is kept");
                teardown::remove_container(inner, key, observed, "its container was replaced")
                    .await?;
                *replaced = Some(reason);
                return Ok(None);
            }
            log("start");
            let generation = inner.next_generation(key, observed);
            match start(inner, key, &observed.id, observed.uid(), generation).await {
                Ok(report) => Ok(Some(report)),
                Err(error) if error.is_not_found() => {
                    start_not_found(inner, key, observed, error).await?;
                    Ok(None)
                }
                Err(error) => Err(failure(key, "start", error)),
            }
        }
        Phase::Dead => {
            log("remove and recreate");
            containers::remove(&inner.engine, &observed.id)
                .await
                .map_err(|error| failure(key, "remove", error))?;
            Ok(None)
        }
        Phase::Removing => {
            log("wait for the removal under way");
            match containers::wait_removed(&inner.engine, &observed.id).await {
                Ok(true) => Ok(None),
                Ok(false) => Err(SandboxError::Unavailable(format!(
                    "container {} of {} '{}' is still being removed; try again",
                    short(&observed.id),
                    key.scope,
                    key.id
                ))),
                Err(error) => Err(failure(key, "wait for the removal of", error)),
            }
        }
    }
}

/// A start of a stopped container answered 404. Either the container went
/// meanwhile (the next look sees that), or it is still there and what is
/// gone is the network it was made on: removed, and perhaps made again
/// under the same name with a new id, which a container made on the old
/// one cannot join (the engine starts it by network id). Started again it
/// would fail the same way every time, so it is recreated on the network
/// as it is now, made again first when it is the daemon's own; the
/// workspace volume is kept, as for any recreate. The generation handed
/// out for the failed start stays unused.
async fn start_not_found(
    inner: &Inner,
    key: &SandboxKey,
    observed: &Observed,
    error: CallError,
) -> Result<(), SandboxError> {
    let still_there = matches!(
        inner.inspect(key).await?,
        Lookup::Ours(now) if now.id == observed.id && now.phase == Phase::Stopped
    );
    if !still_there {
        return Ok(());
    }
    tracing::warn!(scope = %key.scope, id = %key.shown_id(), container = %short(&observed.id), network = %inner.spec.network, %error, "the stopped container's network is gone: recreating the container on the network as it is now; the workspace is kept");
    if inner.spec.network == super::egress_network::network() {
        super::egress_network::ensure(&inner.engine).await?;
    }
    teardown::remove_container(inner, key, observed, "its network was gone")
        .await
        .map(drop)
}

/// Why a stopped container must not simply be started again, if it must not.
fn stale(observed: &Observed, env: &SandboxEnv, spec: &RunnerSpec) -> Option<&'static str> {
    if observed.token_digest() != Some(token_digest(&env.stigmer_token).as_str()) {
        Some(TOKEN_CHANGED)
    } else if observed.task_queue() != env.task_queue {
        Some(QUEUE_CHANGED)
    } else if observed.image != spec.image {
        Some("the runner image changed")
    } else if !observed.own_profile {
        // Made by an earlier daemon, with another profile or none.
        Some("its seccomp profile is not the daemon's")
    } else if spec
        .runtime
        .as_ref()
        .is_some_and(|wanted| observed.runtime.as_ref() != Some(wanted))
    {
        // Made under another runtime, before [docker] runtime named this one.
        Some("its runtime is not [docker] runtime")
    } else {
        None
    }
}

const TOKEN_CHANGED: &str = "the token changed";
const QUEUE_CHANGED: &str = "the task queue changed";

enum CreateError {
    /// 409: another creator holds the name.
    NameTaken,
    /// The create call failed, yet the engine may have made the container:
    /// look before reporting.
    Uncertain(SandboxError),
    /// Nothing to look for (no image), or it was made and would not start.
    Final(SandboxError),
}

/// Creates and starts the container of incarnation `uid`: a new sandbox
/// (`created`), or one whose stopped container was `replaced` (`changed`
/// when that was for a new token or queue).
async fn create_and_start(
    inner: &Inner,
    key: &SandboxKey,
    env: &SandboxEnv,
    uid: &str,
    replaced: Option<&'static str>,
) -> Result<EnsureReport, CreateError> {
    // Recorded only once the container exists: until then its label is
    // the record, and a create lost to another creator takes no number.
    let generation = inner.generation(key, None) + 1;
    let mut body = inner.spec.container(key, env, generation, uid);
    let support = inner.support.learn(&inner.engine).await;
    let honoured = support.is_ok_and(|support| support.root_size.is_ok());
    super::spec::limit_root_size(&mut body, inner.spec.disk, honoured);
    let container = match containers::create(&inner.engine, key, body).await {
        Ok(container) => container,
        Err(error) if error.is_conflict() => {
            tracing::info!(scope = %key.scope, id = %key.shown_id(), "another creator made this container first; using it");
            return Err(CreateError::NameTaken);
        }
        Err(CallError::Refused { status: 404, message }) if !message.contains("image") => {
            // Not the image: the network (removed under the daemon) or a
            // volume driver. The driver checks the network again next time.
            return Err(CreateError::Final(SandboxError::Unavailable(format!(
                "cannot create the container of {} '{}' on network {}: the engine answered 404: {message}",
                key.scope, key.id, inner.spec.network
            ))));
        }
        Err(error) if error.is_not_found() => {
            return Err(CreateError::Final(SandboxError::FailedPrecondition(format!(
                "cannot create the container of {} '{}': runner image '{}' is not on the engine at {} \
                 (sandboxd never pulls; load or pull it there): {error}",
                key.scope,
                key.id,
                inner.spec.image,
                inner.engine.address()
            ))))
        }
        Err(error) => return Err(CreateError::Uncertain(failure(key, "create", error))),
    };
    tracing::info!(scope = %key.scope, id = %key.shown_id(), container = %short(&container), generation, "container created");
    inner.record_generation(key, generation);
    if generation == 1 {
        inner
            .events
            .emit(EventKind::Created, key, uid, generation, None);
    } else if matches!(replaced, Some(TOKEN_CHANGED | QUEUE_CHANGED)) {
        inner
            .events
            .emit(EventKind::Changed, key, uid, generation, None);
    }
    start(inner, key, &container, uid, generation)
        .await
        .map_err(|error| CreateError::Final(failure(key, "start", error)))
}

/// Starts `container` (generation `generation` of incarnation `uid`),
/// announces it, and says so as an ensure's report.
async fn start(
    inner: &Inner,
    key: &SandboxKey,
    container: &str,
    uid: &str,
    generation: u64,
) -> Result<EnsureReport, CallError> {
    containers::start(&inner.engine, container).await?;
    // A new run: the idle and lifetime watcher takes it in from its start.
    inner.watch.forget(container);
    inner
        .events
        .emit(EventKind::Started, key, uid, generation, None);
    Ok(EnsureReport {
        state: ProbeState::Running,
        created: true,
        generation,
        pid: None,
        differs: Vec::new(),
        uid: uid.to_string(),
    })
}

fn failure(key: &SandboxKey, verb: &str, error: CallError) -> SandboxError {
    error.into_sandbox_error(&format!(
        "cannot {verb} the container of {} '{}' ({})",
        key.scope, key.id, key.base_name
    ))
}
