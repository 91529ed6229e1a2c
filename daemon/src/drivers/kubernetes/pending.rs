//! Why a pod has not started: what `logs` says instead of printing nothing
//! for a Pending pod (it has no output yet). The runner container's
//! waiting reason (an image that cannot be pulled), a condition that is
//! not met (`PodScheduled: False, Unschedulable: …`), and the pod's newest
//! `Warning` event (`FailedScheduling`, `FailedMount`, …), as `kubectl
//! describe pod` would show them. Events are advice: when they cannot be
//! read, the rest stands.

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::ListParams;
use kube::Api;

use super::shapes::CONTAINER;
use super::Inner;

/// True for a pod none of whose containers has started yet.
pub fn is_pending(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
        .is_none_or(|phase| phase == "Pending")
}

/// What the pod itself says: its runner's waiting reason, then each
/// condition that is not true.
fn from_the_pod(pod: &Pod) -> Vec<String> {
    let mut said = Vec::new();
    let Some(status) = pod.status.as_ref() else {
        return said;
    };
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .find(|status| status.name == CONTAINER)
        .and_then(|status| status.state.as_ref())
        .and_then(|state| state.waiting.as_ref());
    if let Some(waiting) = waiting {
        let reason = waiting.reason.as_deref().unwrap_or("waiting");
        said.push(match waiting.message.as_deref() {
            Some(message) => format!("container {CONTAINER} {reason}: {message}"),
            None => format!("container {CONTAINER} {reason}"),
        });
    }
    for condition in status.conditions.iter().flatten() {
        if condition.status == "True" {
            continue;
        }
        let mut text = format!("{} is {}", condition.type_, condition.status);
        if let Some(reason) = &condition.reason {
            text.push_str(&format!(" ({reason})"));
        }
        if let Some(message) = &condition.message {
            text.push_str(&format!(": {message}"));
        }
        said.push(text);
    }
    said
}

/// The newest `Warning` event about the pod, as `reason: message`.
async fn newest_warning(inner: &Inner, pod: &str) -> Option<String> {
    let events: Api<Event> =
        Api::namespaced(inner.cluster.client.clone(), &inner.cluster.namespace);
    let params = ListParams::default().fields(&format!("involvedObject.name={pod}"));
    let listed = inner.cluster.call(events.list(&params)).await;
    let mut warnings: Vec<Event> = match listed {
        Ok(list) => list.items,
        Err(error) => {
            tracing::debug!(pod, ?error, "cannot read the pod's events");
            return None;
        }
    }
    .into_iter()
    .filter(|event| {
        event.type_.as_deref() == Some("Warning")
            && event.involved_object.name.as_deref() == Some(pod)
    })
    .collect();
    let when = |event: &Event| {
        event
            .last_timestamp
            .as_ref()
            .map(|time| time.0)
            .or_else(|| event.event_time.as_ref().map(|time| time.0))
            .or_else(|| {
                event
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|time| time.0)
            })
    };
    warnings.sort_by_key(when);
    let newest = warnings.pop()?;
    Some(format!(
        "{}: {}",
        newest.reason.unwrap_or_else(|| "Warning".into()),
        newest.message.unwrap_or_default()
    ))
}

/// Why the pending pod has not started, in one line.
pub async fn why(inner: &Inner, pod: &Pod) -> String {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut said = from_the_pod(pod);
    if let Some(warning) = newest_warning(inner, &name).await {
        said.push(format!("newest warning: {warning}"));
    }
    if said.is_empty() {
        return "no condition or event says why yet (no scheduler has placed it, or the \
                cluster has not got to it)"
            .to_string();
    }
    said.join("; ")
}
