//! How a kubernetes-tier command ended, from the `Status` its pods/exec
//! stream closed with (channel 3 of `channel.k8s.io`).
//!
//! The kubelet says `Success`, or `Failure` with reason `NonZeroExitCode`
//! and the code as an `ExitCode` cause; it never says a signal. A process
//! killed by signal N reads as code 128 + N, as a shell's `$?` does, and
//! so does one that exited with that code. So the end reports `signaled`
//! only when it can tell: the daemon sent signal N to it (`command_signal`,
//! or the store's kill at a timeout) and the code is 128 + N. A code of
//! 128 + N, another failure, or a stream that broke without a status,
//! while the command's pod is gone, being deleted, or its runner container
//! is not the one the command started in, is the sandbox's end
//! (`sandbox-ended`): the kernel kills every process of a container whose
//! init has died. A stream that ends while the daemon stops is
//! `daemon-stopped` (the command goes on in its pod, followed by no one);
//! one that broke otherwise is `lost`.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::AttachedProcess;
use sandboxd_protocol::{ExitReason, ProbeState};
use tokio_util::sync::CancellationToken;

use super::super::observe::{runner_status, state_of, Lookup};
use super::super::Inner;
use crate::sandbox_key::SandboxKey;
use crate::started_command::CommandEnd;

/// What the stream's last word says, before the pod is asked.
#[derive(Debug, PartialEq, Eq)]
pub enum Said {
    /// An exit code: 0 for `Success`, else the `ExitCode` cause.
    Code(i32),
    /// A failure that is not an exit code, or no status at all.
    Broken(String),
}

/// Reads the status the exec stream ended with (`None`: it ended without).
pub fn read_status(status: Option<&Status>) -> Said {
    let Some(status) = status else {
        return Said::Broken("the exec stream closed without a status".to_string());
    };
    if status.status.as_deref() == Some("Success") {
        return Said::Code(0);
    }
    let reason = status.reason.as_deref().unwrap_or_default();
    let code = (reason == "NonZeroExitCode")
        .then_some(status.details.as_ref())
        .flatten()
        .and_then(|details| details.causes.as_deref())
        .and_then(|causes| {
            causes
                .iter()
                .find(|cause| cause.reason.as_deref() == Some("ExitCode"))
        })
        .and_then(|cause| cause.message.as_deref()?.parse().ok());
    match code {
        Some(code) => Said::Code(code),
        None => Said::Broken(format!(
            "the exec stream ended with a failure: {} ({reason})",
            status.message.as_deref().unwrap_or_default()
        )),
    }
}

/// The end a code tells of, given the signal the daemon last sent (0:
/// none) and whether the sandbox's runner is gone (see the module doc).
pub fn explain(said: Said, sent: i32, runner_gone: bool) -> CommandEnd {
    match said {
        Said::Code(code) if code > 128 && code - 128 == sent => {
            CommandEnd::from_status(None, Some(sent))
        }
        Said::Code(code) if code > 128 && runner_gone => {
            CommandEnd::from_status(None, Some(code - 128)).because(ExitReason::SandboxEnded)
        }
        Said::Code(code) => CommandEnd::from_status(Some(code), None),
        Said::Broken(_) if runner_gone => {
            CommandEnd::from_status(None, None).because(ExitReason::SandboxEnded)
        }
        Said::Broken(_) => CommandEnd::from_status(None, None).because(ExitReason::Lost),
    }
}

/// The runner container a command started in.
#[derive(Debug, Clone)]
pub struct Runner {
    pub pod: String,
    pub pod_uid: Option<String>,
    pub restarts: i32,
}

impl Runner {
    pub fn of(pod: &Pod) -> Runner {
        Runner {
            pod: pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: pod.metadata.uid.clone(),
            restarts: runner_status(pod).map_or(0, |status| status.restart_count),
        }
    }

    /// True when `now` (the pod by this name now) is not this runner any
    /// more, or is going.
    fn gone_in(&self, now: Option<&Pod>) -> bool {
        let Some(pod) = now else {
            return true;
        };
        let running = runner_status(pod)
            .and_then(|status| status.state.as_ref())
            .is_some_and(|state| state.running.is_some());
        pod.metadata.uid != self.pod_uid
            || pod.metadata.deletion_timestamp.is_some()
            || runner_status(pod).map_or(0, |status| status.restart_count) != self.restarts
            || !running
    }
}

pub struct EndWatch {
    pub inner: Weak<Inner>,
    pub key: SandboxKey,
    pub runner: Runner,
    /// The last signal the daemon sent (see `ExecControl`).
    pub sent: Arc<AtomicI32>,
    /// Set once the command has ended: its pid may name another process.
    pub exited: Arc<AtomicBool>,
    /// Cancelled once the driver is shutting down.
    pub stop: CancellationToken,
}

impl EndWatch {
    /// Waits for the exec stream's status (holding the stream open: the
    /// attached process's task ends when it is dropped), then explains it.
    pub async fn wait(self, mut attached: AttachedProcess) -> CommandEnd {
        let status = attached.take_status();
        let stopping = self.stop.cancelled();
        let status = tokio::select! {
            status = async { match status { Some(status) => status.await, None => None } } => status,
            () = stopping => {
                return CommandEnd::from_status(None, None).because(ExitReason::DaemonStopped);
            }
        };
        // The stream's task flushes and closes stdout and stderr after the
        // status: the output is whole before the end is given.
        if let Err(error) = attached.join().await {
            tracing::debug!(scope = %self.key.scope, id = %self.key.shown_id(), %error, "the exec stream ended with an error");
        }
        self.exited.store(true, Ordering::Release);
        let said = read_status(status.as_ref());
        if let Said::Broken(why) = &said {
            tracing::warn!(scope = %self.key.scope, id = %self.key.shown_id(), pod = %self.runner.pod, %why, "a command's exec stream ended without its exit code");
        }
        let needs_pod = match &said {
            Said::Code(code) => *code > 128,
            Said::Broken(_) => true,
        };
        let Some(inner) = self.inner.upgrade() else {
            return CommandEnd::from_status(None, None).because(ExitReason::DaemonStopped);
        };
        if self.stop.is_cancelled() && matches!(said, Said::Broken(_)) {
            return CommandEnd::from_status(None, None).because(ExitReason::DaemonStopped);
        }
        let gone = needs_pod && self.runner_gone(&inner).await;
        explain(said, self.sent.load(Ordering::Acquire), gone)
    }

    /// True when the command's runner is no more: its Deployment gone or
    /// stopped, its pod gone, going or replaced, its container restarted.
    /// A cluster that does not answer tells nothing: false.
    async fn runner_gone(&self, inner: &Inner) -> bool {
        match inner.lookup(&self.key).await {
            Ok(Lookup::Ours(deployment)) if state_of(&deployment) == ProbeState::Running => {}
            Ok(_) => return true,
            Err(_) => return false,
        }
        match inner
            .cluster
            .call(inner.pods_api().get_opt(&self.runner.pod))
            .await
        {
            Ok(now) => self.runner.gone_in(now.as_ref()),
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(json: serde_json::Value) -> Status {
        serde_json::from_value(json).expect("a Status")
    }

    #[test]
    fn the_kubelets_statuses_read_as_codes() {
        let success = status(serde_json::json!({"metadata": {}, "status": "Success"}));
        assert_eq!(read_status(Some(&success)), Said::Code(0));
        let three = status(serde_json::json!({
            "metadata": {}, "status": "Failure",
            "message": "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}
        }));
        assert_eq!(read_status(Some(&three)), Said::Code(3));
        let internal = status(serde_json::json!({
            "metadata": {}, "status": "Failure", "message": "container not found (\"runner\")",
            "reason": "InternalError"
        }));
        assert!(
            matches!(read_status(Some(&internal)), Said::Broken(why) if why.contains("container not found"))
        );
        let no_cause = status(serde_json::json!({
            "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode", "message": "?"
        }));
        assert!(matches!(read_status(Some(&no_cause)), Said::Broken(_)));
        assert!(matches!(read_status(None), Said::Broken(_)));
    }

    #[test]
    fn a_code_is_a_signal_only_when_the_daemon_sent_it_or_the_runner_is_gone() {
        let reason = |said, sent, gone| explain(said, sent, gone).reason;
        assert_eq!(
            reason(Said::Code(3), 0, false),
            ExitReason::Exited { code: 3 }
        );
        assert_eq!(
            reason(Said::Code(0), 9, true),
            ExitReason::Exited { code: 0 }
        );
        assert_eq!(
            reason(Said::Code(137), 9, false),
            ExitReason::Signaled { signal: 9 }
        );
        assert_eq!(
            explain(Said::Code(137), 9, false).signal,
            Some(9),
            "the store turns a signal at the timeout into timed-out"
        );
        assert_eq!(
            reason(Said::Code(137), 15, false),
            ExitReason::Exited { code: 137 },
            "another signal than the one sent"
        );
        assert_eq!(reason(Said::Code(137), 0, true), ExitReason::SandboxEnded);
        assert_eq!(
            reason(Said::Code(1), 0, true),
            ExitReason::Exited { code: 1 }
        );
        assert_eq!(
            reason(Said::Broken("reset".into()), 0, true),
            ExitReason::SandboxEnded
        );
        assert_eq!(
            reason(Said::Broken("reset".into()), 0, false),
            ExitReason::Lost
        );
    }
}
