//! Why a `pods/exec` reached no command, in words a user can act on. The
//! API server sends an exec on to the kubelet of the pod's node; with no
//! node (a pod nothing placed, yet reported running) it refuses with 400
//! `pod … does not have a host assigned`, which is no bad argument of the
//! caller's; with a node whose kubelet does not answer it fails with 500
//! before the stream opens, or opens the stream and closes it with an
//! `InternalError` status (`error sending request: … connection refused`,
//! `error dialing backend: …`). Commands and file calls say these alike:
//! `failed precondition` for a pod on no node, `unavailable` naming the
//! pod and its node when no kubelet answered.

use k8s_openapi::api::core::v1::Pod;
use sandboxd_protocol::SandboxError;

use super::super::errors::{Action, CallError};
use super::super::Inner;

const EXEC: Action = Action::new("create", "pods/exec");

/// Words of the API server's that say it could not reach a kubelet.
const UNREACHED: [&str; 4] = [
    "error sending request",
    "error dialing backend",
    "dial tcp",
    "no route to host",
];

/// Where an exec goes: the pod, and its node if it has one.
#[derive(Debug, Clone, Default)]
pub struct Place {
    pub pod: String,
    pub node: Option<String>,
}

impl Place {
    pub fn of(pod: &Pod) -> Place {
        Place {
            pod: pod.metadata.name.clone().unwrap_or_default(),
            node: pod
                .spec
                .as_ref()
                .and_then(|spec| spec.node_name.clone())
                .filter(|node| !node.is_empty()),
        }
    }

    /// `pod P on node N` (or `… on no node`).
    fn words(&self) -> String {
        match &self.node {
            Some(node) => format!("pod {} on node {node}", self.pod),
            None => format!("pod {} on no node", self.pod),
        }
    }
}

/// True when `said` (a status's or an error's message) is the API server
/// saying it could not reach the kubelet.
pub fn kubelet_unreached(said: &str) -> bool {
    UNREACHED.iter().any(|words| said.contains(words))
}

/// `unavailable`: the API server reached no kubelet for `place`.
pub fn no_kubelet_answered(context: &str, place: &Place, said: &str) -> SandboxError {
    SandboxError::Unavailable(format!(
        "{context}: no kubelet answered for its {} (commands and file calls run through the \
         kubelet of the pod's node, and the API server could not reach it): {}",
        place.words(),
        without_paths(said)
    ))
}

/// `said` with each quoted URL cut to its scheme and host: the API
/// server quotes the kubelet's whole exec URL, whose query holds the
/// command's argv and environment (never to be shown in an error).
fn without_paths(said: &str) -> String {
    let mut out = String::with_capacity(said.len());
    let mut rest = said;
    while let Some(start) = rest.find("\"http") {
        let (before, quoted) = rest.split_at(start + 1);
        out.push_str(before);
        let end = quoted.find('"').unwrap_or(quoted.len());
        let url = &quoted[..end];
        let host_end = url
            .find("://")
            .and_then(|scheme| url[scheme + 3..].find('/').map(|at| scheme + 3 + at))
            .unwrap_or(url.len());
        out.push_str(&url[..host_end]);
        if host_end < url.len() {
            out.push_str("/…");
        }
        rest = &quoted[end..];
    }
    out.push_str(rest);
    out
}

/// The caller's error for the API server's refusal of an exec in `place`
/// before its stream opened.
pub fn exec_refused(inner: &Inner, context: &str, place: &Place, error: CallError) -> SandboxError {
    if let CallError::Api(status) = &error {
        let message = status.message.as_str();
        if status.code == 400 && message.contains("does not have a host assigned") {
            return SandboxError::FailedPrecondition(format!(
                "{context}: its pod {} is on no node, so no kubelet can run anything in it \
                 (commands and file calls need the pod placed on a node and its runner container \
                 running; the API server said: {message})",
                place.pod
            ));
        }
        let node_unknown = status.code == 404
            && status
                .details
                .as_ref()
                .is_some_and(|details| details.kind == "nodes");
        if node_unknown || (status.code >= 500 && kubelet_unreached(message)) {
            return no_kubelet_answered(context, place, message);
        }
    }
    inner.cluster.error(context, EXEC, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_servers_words_for_an_unreachable_kubelet_are_known() {
        assert!(kubelet_unreached(
            "Internal error occurred: error sending request: Post \"https://127.0.0.1:1/exec/n/p/c\": \
             dial tcp 127.0.0.1:1: connect: connection refused"
        ));
        assert!(kubelet_unreached("error dialing backend: EOF"));
        assert!(!kubelet_unreached(
            "Internal error occurred: container not found (\"runner\")"
        ));
        let place = Place {
            pod: "p".into(),
            node: Some("n1".into()),
        };
        let said = "error sending request: Post \"https://127.0.0.1:1/exec/n/p/c?command=env&command=K%3Dsecret\": \
                    dial tcp 127.0.0.1:1: connect: connection refused";
        let error = no_kubelet_answered("cannot run a command in session 's'", &place, said);
        let SandboxError::Unavailable(message) = &error else {
            panic!("{error}");
        };
        assert!(
            message.contains("no kubelet answered for its pod p on node n1"),
            "{message}"
        );
        assert!(
            message.ends_with(
                "error sending request: Post \"https://127.0.0.1:1/…\": dial tcp 127.0.0.1:1: \
                 connect: connection refused"
            ),
            "{message}"
        );
        assert!(!message.contains("secret"), "{message}");
    }
}
