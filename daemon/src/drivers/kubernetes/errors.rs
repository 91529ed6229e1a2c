//! What a failed API call means for the caller, in the daemon's error kinds.
//!
//! | the API server said                 | the caller gets                               |
//! |-------------------------------------|-----------------------------------------------|
//! | nothing (refused, reset, timed out) | `unavailable`, naming the server              |
//! | 401 / 403                           | `permission denied`, naming verb and resource |
//! | 404 of the namespace                | `failed precondition`, naming the namespace   |
//! | 409                                 | re-read and retry (the caller's loop)         |
//! | 422                                 | `invalid argument`, naming the fields         |
//! | 429, 5xx                            | `unavailable`                                 |

use std::time::Duration;

use kube::core::Status;
use sandboxd_protocol::SandboxError;

/// One API call: what it did, to which kind of object, for the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    /// The RBAC verb (`get`, `list`, `create`, `patch`, `delete`).
    pub verb: &'static str,
    /// The RBAC resource, with its subresource (`deployments/scale`).
    pub resource: &'static str,
}

impl Action {
    pub const fn new(verb: &'static str, resource: &'static str) -> Action {
        Action { verb, resource }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)
    }
}

/// Why one call to the API server failed.
#[derive(Debug)]
pub enum CallError {
    /// No answer: connection refused or reset, TLS failure, or no reply
    /// within the request timeout.
    Unreachable(String),
    /// The server answered with a `Status` of failure.
    Api(Box<Status>),
    /// Anything else (a body the client could not read, a bad request it
    /// could not build).
    Other(String),
}

impl CallError {
    pub fn timed_out(timeout: Duration) -> CallError {
        CallError::Unreachable(format!(
            "no answer within the request timeout of {timeout:?}"
        ))
    }

    /// `timeout` is the request timeout the client was given: a read that
    /// ran into it surfaces as a transport error, reported as the timeout.
    pub fn from_kube(error: kube::Error, timeout: Duration) -> CallError {
        let transport = match &error {
            kube::Error::Api(_) => None,
            kube::Error::HyperError(_)
            | kube::Error::Service(_)
            | kube::Error::RustlsTls(_)
            | kube::Error::Auth(_) => Some(chain(&error)),
            _ => None,
        };
        match (error, transport) {
            (kube::Error::Api(status), _) => CallError::Api(status),
            (error, Some(why)) if timed_out(&error) => CallError::Unreachable(format!(
                "no answer within the request timeout of {timeout:?} ({why})"
            )),
            (_, Some(why)) => CallError::Unreachable(why),
            (other, None) => CallError::Other(chain(&other)),
        }
    }

    fn code(&self) -> Option<u16> {
        match self {
            CallError::Api(status) => Some(status.code),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// A 404 that is about the namespace, not the object asked for.
    fn missing_namespace(&self) -> Option<String> {
        let CallError::Api(status) = self else {
            return None;
        };
        let details = status.details.as_ref()?;
        (status.code == 404 && details.kind == "namespaces").then(|| details.name.clone())
    }

    /// The caller's error for this failure of `action`; `context` says what
    /// was being done, `server` and `namespace` where.
    pub fn into_sandbox_error(
        self,
        context: &str,
        action: Action,
        server: &str,
        namespace: &str,
    ) -> SandboxError {
        if let Some(missing) = self.missing_namespace() {
            return SandboxError::FailedPrecondition(format!(
                "{context}: namespace '{missing}' does not exist on the Kubernetes API server at \
                 {server}; create it (deploy/kubernetes/namespace.yaml) or set \
                 STIGMER_SANDBOX_K8S_NAMESPACE"
            ));
        }
        match self {
            CallError::Unreachable(why) => SandboxError::Unavailable(format!(
                "{context}: the Kubernetes API server at {server} is unreachable: {why}"
            )),
            CallError::Other(why) => SandboxError::Internal(format!(
                "{context}: {action} in namespace '{namespace}' at {server}: {why}"
            )),
            CallError::Api(status) => match status.code {
                401 => SandboxError::PermissionDenied(format!(
                    "{context}: the Kubernetes API server at {server} does not accept sandboxd's \
                     credentials (401) for {action}: {}",
                    status.message
                )),
                403 => SandboxError::PermissionDenied(format!(
                    "{context}: sandboxd may not {action} in namespace '{namespace}' (403 from \
                     {server}); grant it with deploy/kubernetes/rbac.yaml: {}",
                    status.message
                )),
                422 | 400 => {
                    let fields: Vec<String> = status
                        .details
                        .iter()
                        .flat_map(|details| details.causes.iter())
                        .filter(|cause| !cause.field.is_empty())
                        .map(|cause| cause.field.clone())
                        .collect();
                    let fields = if fields.is_empty() {
                        String::new()
                    } else {
                        format!(" (fields: {})", fields.join(", "))
                    };
                    SandboxError::InvalidArgument(format!(
                        "{context}: the Kubernetes API server refused the object{fields}: {}",
                        status.message
                    ))
                }
                409 => SandboxError::Unavailable(format!(
                    "{context}: the object kept changing under sandboxd ({action}): {}; try again",
                    status.message
                )),
                code => SandboxError::Unavailable(format!(
                    "{context}: {action} failed with {code} from the Kubernetes API server at \
                     {server}: {}",
                    status.message
                )),
            },
        }
    }
}

/// The error and its causes, outermost first: hyper's own message
/// ("client error (SendRequest)") says little without them.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// True when a cause of `error` is an I/O timeout (the client's read or
/// connect timeout).
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = cause.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure `Status` as the API server sends it.
    fn status(code: u16, kind: &str, name: &str, field: Option<&str>) -> CallError {
        let causes: Vec<serde_json::Value> = field
            .map(|field| serde_json::json!({"reason": "FieldValueInvalid", "field": field}))
            .into_iter()
            .collect();
        let body = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server said no", "reason": "Whatever", "code": code,
            "details": {"name": name, "kind": kind, "causes": causes},
        });
        CallError::Api(Box::new(serde_json::from_value(body).expect("a Status")))
    }

    fn map(error: CallError) -> SandboxError {
        error.into_sandbox_error(
            "cannot ensure session 's'",
            Action::new("patch", "deployments/scale"),
            "https://k8s:6443",
            "sbx",
        )
    }

    #[test]
    fn each_kind_of_failure_maps_to_its_error() {
        let error = map(status(403, "deployments", "sbx-ses-1", None));
        assert!(
            matches!(&error, SandboxError::PermissionDenied(m) if m.contains("patch deployments/scale") && m.contains("'sbx'")),
            "{error}"
        );
        let error = map(status(404, "namespaces", "gone", None));
        assert!(
            matches!(&error, SandboxError::FailedPrecondition(m) if m.contains("namespace 'gone'")),
            "{error}"
        );
        let error = map(status(404, "deployments", "x", None));
        assert!(matches!(error, SandboxError::Unavailable(_)), "{error}");
        let error = map(status(422, "secrets", "x", Some("metadata.labels")));
        assert!(
            matches!(&error, SandboxError::InvalidArgument(m) if m.contains("metadata.labels")),
            "{error}"
        );
        let error = map(CallError::timed_out(Duration::from_secs(3)));
        assert!(
            matches!(&error, SandboxError::Unavailable(m) if m.contains("https://k8s:6443") && m.contains("3s")),
            "{error}"
        );
    }
}
