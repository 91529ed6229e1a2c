//! Commands in a kubernetes-tier sandbox, through the API server's
//! `pods/exec` (a WebSocket of the `channel.k8s.io` protocol): in the
//! runner container of the sandbox's running pod, so with exactly its
//! isolation, limits, mounts and network policy, and no access to any node.
//!
//! The command is started through a small `sh` wrapper ([`wrapper`]) that
//! says its pid in the pod, and sets its directory and environment; its
//! streams are the exec's channels 1 and 2 (one, with a terminal), its
//! stdin channel 0, closed by the v5 protocol's close message; its end is
//! the status on channel 3 ([`end`]); signals are a second exec of `kill`
//! and resizing a message on channel 4 ([`control`]); a stopping daemon
//! stops following them ([`follow`]). An exec no kubelet took is said as
//! such ([`refused`]). A command's own
//! limits are refused: an exec runs in its container's cgroup, with the
//! pod's limits, and the API has no way to give it lower ones.

mod control;
pub(super) mod end;
mod follow;
pub(super) mod refused;
mod wrapper;

use std::sync::atomic::{AtomicBool, AtomicI32};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, AttachedProcess};
use sandboxd_protocol::{ProbeState, SandboxError};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::errors::Action;
use super::observe::{generation_of, runner_status, state_of, uid_of, Lookup};
use super::shapes::CONTAINER;
use super::Inner;
use crate::sandbox_key::SandboxKey;
use crate::started_command::{CommandSpec, OutputReader, StartedCommand};
pub use follow::Follows;
use follow::UntilStopped;
use refused::Place;
use wrapper::Said;

const EXEC: Action = Action::new("create", "pods/exec");
/// The exec stream's buffer per output stream (the client's default is
/// 1 KiB: a flood would cross it in a frame at a time).
const STREAM_BUFFER: usize = 64 * 1024;

/// The sandbox as a command may join it.
struct Target {
    uid: String,
    generation: u64,
    pod: Pod,
}

/// Starts `spec` in `key`'s running sandbox (see the module doc).
pub async fn start(
    inner: &Arc<Inner>,
    key: &SandboxKey,
    spec: &CommandSpec,
    follows: &Follows,
) -> Result<StartedCommand, SandboxError> {
    if !spec.limits.is_empty() {
        return Err(SandboxError::FailedPrecondition(format!(
            "cannot give a command in {} limits of its own: on the kubernetes tier a command runs \
             through pods/exec in its runner's container, under the pod's limits, and the API has \
             no way to give one exec lower ones",
            key.what()
        )));
    }
    let target = target(inner, key, spec).await?;
    let place = Place::of(&target.pod);
    let pod_name = place.pod.clone();
    let context = format!("cannot run a command in {} (pod {pod_name})", key.what());
    let Attached {
        mut attached,
        resizer,
        line,
        stdout,
    } = attach(inner, &place, spec, &context).await?;
    let pid = match wrapper::parse(&line) {
        Some(Said::Pid(pid)) => pid,
        Some(refused) => return Err(wrapper::refusal(key, spec, &refused)),
        None => return Err(not_started(&context, &place, &line, attached).await),
    };
    tracing::debug!(scope = %key.scope, id = %key.shown_id(), pod = %pod_name, pid, "command started through pods/exec");
    let exited = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicI32::new(0));
    // Its streams end when the daemon stops (see `follow`).
    let followed = follows.follow();
    let stdout = UntilStopped::wrap(stdout, follows, followed.clone());
    let stderr = attached
        .stderr()
        .map(|reader| UntilStopped::wrap(Box::pin(reader), follows, followed));
    let stdin = attached
        .stdin()
        .map(|writer| Box::pin(writer) as crate::started_command::InputWriter);
    let watch = end::EndWatch {
        inner: Arc::downgrade(inner),
        key: key.clone(),
        runner: end::Runner::of(&target.pod),
        sent: sent.clone(),
        exited: exited.clone(),
        stop: follows.stop_token(),
    };
    Ok(StartedCommand {
        pid,
        uid: target.uid,
        generation: target.generation,
        stdout,
        stderr,
        stdin,
        control: Box::new(control::ExecControl {
            inner: Arc::downgrade(inner),
            pod: pod_name,
            pid,
            resizer,
            exited,
            sent,
        }),
        end: Box::pin(watch.wait(attached)),
    })
}

/// An exec started, up to the wrapper's first line.
struct Attached {
    attached: AttachedProcess,
    resizer: Option<control::Resizer>,
    line: Vec<u8>,
    stdout: OutputReader,
}

/// Opens the exec of `spec`'s wrapper in the runner container of
/// `place`'s pod, sizes its terminal, and reads the wrapper's first line,
/// all within the request timeout.
async fn attach(
    inner: &Inner,
    place: &Place,
    spec: &CommandSpec,
    context: &str,
) -> Result<Attached, SandboxError> {
    let params = AttachParams {
        container: Some(CONTAINER.to_string()),
        stdin: spec.stdin || spec.pty.is_some(),
        stdout: true,
        stderr: spec.pty.is_none(),
        tty: spec.pty.is_some(),
        max_stdin_buf_size: Some(STREAM_BUFFER),
        max_stdout_buf_size: Some(STREAM_BUFFER),
        max_stderr_buf_size: Some(STREAM_BUFFER),
    };
    let pods = inner.pods_api();
    let argv = wrapper::argv(spec);
    inner
        .cluster
        .call(async {
            let mut attached = pods.exec(&place.pod, argv, &params).await?;
            // Its size before anything runs in it (channel 4).
            let mut resizer = attached.terminal_size();
            if let (Some(resizer), Some(size)) = (resizer.as_mut(), spec.pty) {
                use futures::SinkExt;
                let _ = resizer.send(control::terminal_size(size)).await;
            }
            let (line, stdout) = first_line(&mut attached).await;
            Ok(Attached {
                attached,
                resizer,
                line,
                stdout,
            })
        })
        .await
        .map_err(|error| refused::exec_refused(inner, context, place, error))
}

/// The sandbox's Deployment and running pod, when it is running and is
/// the incarnation `spec.expect` names.
async fn target(
    inner: &Inner,
    key: &SandboxKey,
    spec: &CommandSpec,
) -> Result<Target, SandboxError> {
    let deployment = match inner.lookup(key).await? {
        Lookup::Ours(deployment) => Some(deployment),
        Lookup::Absent | Lookup::Foreign => None,
    };
    let actual = deployment
        .as_ref()
        .map(|deployment| (uid_of(deployment), generation_of(deployment)));
    spec.expect.check(
        &key.what(),
        actual
            .as_ref()
            .map(|(uid, generation)| (uid.as_str(), *generation)),
    )?;
    let Some(deployment) = deployment else {
        return Err(not_running(
            key,
            format!(
                "it does not exist in namespace '{}'",
                inner.cluster.namespace
            ),
        ));
    };
    if state_of(&deployment) != ProbeState::Running {
        return Err(not_running(
            key,
            "it is stopped (its Deployment is scaled to 0, or being deleted)".to_string(),
        ));
    }
    Ok(Target {
        uid: uid_of(&deployment),
        generation: generation_of(&deployment),
        pod: running_pod(inner, key, RUN_A_COMMAND).await?,
    })
}

fn not_running(key: &SandboxKey, why: String) -> SandboxError {
    not_running_for(key, RUN_A_COMMAND, why)
}

/// What a command is refused with in [`running_pod`]'s words.
const RUN_A_COMMAND: &str = "run a command in";

/// `doing` (`run a command in`) refused: the sandbox does not run.
fn not_running_for(key: &SandboxKey, doing: &str, why: String) -> SandboxError {
    SandboxError::FailedPrecondition(format!(
        "cannot {doing} {}: {why} (that never starts its sandbox: ensure it first)",
        key.what()
    ))
}

/// The sandbox's newest pod not being deleted, when its runner container
/// runs (a command runs beside the runner, never in its place); `doing`
/// words a refusal (`run a command in`). The file calls use it too.
pub(super) async fn running_pod(
    inner: &Inner,
    key: &SandboxKey,
    doing: &str,
) -> Result<Pod, SandboxError> {
    let context = format!("cannot {doing} {}", key.what());
    let pods = inner.sandbox_pods(key, &context).await?;
    let not_running = |why: String| not_running_for(key, doing, why);
    let pod = pods
        .into_iter()
        .find(|pod| pod.metadata.deletion_timestamp.is_none())
        .ok_or_else(|| {
            not_running("it has no pod yet (not scheduled, or being replaced)".into())
        })?;
    let running = runner_status(&pod)
        .and_then(|status| status.state.as_ref())
        .is_some_and(|state| state.running.is_some());
    if running {
        return Ok(pod);
    }
    let place = Place::of(&pod);
    let name = &place.pod;
    let why = match (&place.node, super::pending::is_pending(&pod)) {
        (None, true) => format!(
            "its pod {name} is Pending, on no node yet, so no kubelet runs it: {}",
            super::pending::why(inner, &pod).await
        ),
        (Some(node), true) => format!(
            "its pod {name} is Pending on node {node}, whose kubelet has not started its runner \
             container: {}",
            super::pending::why(inner, &pod).await
        ),
        (_, false) => format!("the runner container of its pod {name} is not running"),
    };
    Err(SandboxError::FailedPrecondition(format!(
        "cannot {doing} {}: {why} (a command or a file call runs in the runner container, \
         through the kubelet of the pod's node)",
        key.what()
    )))
}

/// The wrapper's first line from the exec's stdout (at most
/// [`wrapper::MAX_LINE`] bytes, without its `\n`), and the stdout the
/// command's output is read from: what came after that line, then the rest.
async fn first_line(attached: &mut AttachedProcess) -> (Vec<u8>, OutputReader) {
    let Some(mut stdout) = attached.stdout() else {
        return (Vec::new(), Box::pin(tokio::io::empty()));
    };
    let mut seen = Vec::new();
    let mut buffer = [0u8; wrapper::MAX_LINE];
    let newline = loop {
        if let Some(at) = seen.iter().position(|byte| *byte == b'\n') {
            break at;
        }
        if seen.len() >= wrapper::MAX_LINE {
            break seen.len();
        }
        match stdout.read(&mut buffer).await {
            Ok(count) if count > 0 => seen.extend_from_slice(&buffer[..count]),
            _ => break seen.len(),
        }
    };
    let rest = seen.split_off((newline + 1).min(seen.len()));
    seen.truncate(newline);
    let reader: Box<dyn AsyncRead + Send> = Box::new(std::io::Cursor::new(rest).chain(stdout));
    (seen, Box::into_pin(reader))
}

/// Why an exec whose wrapper never said its line did not start: its status
/// (no kubelet answered, the runtime could not run `sh`, the container is
/// gone).
async fn not_started(
    context: &str,
    place: &Place,
    line: &[u8],
    mut attached: AttachedProcess,
) -> SandboxError {
    let status = match attached.take_status() {
        Some(status) => status.await,
        None => None,
    };
    let said = match end::read_status(status.as_ref()) {
        end::Said::Code(code) => format!("it exited with code {code}"),
        end::Said::Broken(why) if refused::kubelet_unreached(&why) => {
            return refused::no_kubelet_answered(context, place, &why)
        }
        end::Said::Broken(why) => why,
    };
    SandboxError::FailedPrecondition(format!(
        "{context}: the command's wrapper (`sh -c`, which the runner image must have) did not start: {said}; it wrote {:?}",
        String::from_utf8_lossy(line)
    ))
}
