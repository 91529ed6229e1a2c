//! Stand-in API server: failures as the real one sends them, `Status`
//! objects with the code, reason, and details the clients read.

use serde_json::{json, Value};

/// One failed request: the HTTP code and its `Status` body.
#[derive(Debug)]
pub struct Failure {
    pub code: u16,
    pub body: Value,
}

fn status(code: u16, reason: &str, message: String, details: Value) -> Failure {
    Failure {
        code,
        body: json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": details, "code": code,
        }),
    }
}

/// `deployments.apps "x" not found` — `group` is empty for core kinds.
pub fn not_found(resource: &str, group: &str, name: &str) -> Failure {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    status(
        404,
        "NotFound",
        format!("{qualified} \"{name}\" not found"),
        json!({"name": name, "group": group, "kind": resource}),
    )
}

pub fn namespace_not_found(namespace: &str) -> Failure {
    not_found("namespaces", "", namespace)
}

pub fn already_exists(resource: &str, group: &str, name: &str) -> Failure {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    status(
        409,
        "AlreadyExists",
        format!("{qualified} \"{name}\" already exists"),
        json!({"name": name, "group": group, "kind": resource}),
    )
}

/// A stale `resourceVersion` on an update.
pub fn conflict(resource: &str, group: &str, name: &str) -> Failure {
    status(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; \
             please apply your changes to the latest version and try again"
        ),
        json!({"name": name, "group": group, "kind": resource}),
    )
}

/// Server-side apply's conflicts with other managers.
pub fn apply_conflict(conflicts: &[(String, String)], api_version: &str) -> Failure {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(manager, field)| {
            json!({"reason": "FieldManagerConflict",
                   "message": format!("conflict with \"{manager}\" using {api_version}"),
                   "field": field})
        })
        .collect();
    let listed: Vec<String> = conflicts
        .iter()
        .map(|(manager, field)| format!("conflict with \"{manager}\" using {api_version}: {field}"))
        .collect();
    status(
        409,
        "Conflict",
        format!(
            "Apply failed with {} conflict(s): {}",
            conflicts.len(),
            listed.join("; ")
        ),
        json!({"causes": causes}),
    )
}

/// 422: `kind "name" is invalid: field: message`.
pub fn invalid(kind: &str, group: &str, name: &str, field: &str, message: &str) -> Failure {
    status(
        422,
        "Invalid",
        format!("{kind} \"{name}\" is invalid: {field}: {message}"),
        json!({"name": name, "group": group, "kind": kind,
               "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}]}),
    )
}

pub fn bad_request(message: String) -> Failure {
    status(400, "BadRequest", message, json!({}))
}

pub fn unsupported_media(content_type: &str) -> Failure {
    status(
        415,
        "UnsupportedMediaType",
        format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (the stand-in takes the last two and strategic merge as merge): {content_type}"),
        json!({}),
    )
}

pub fn unauthorized() -> Failure {
    status(401, "Unauthorized", "Unauthorized".to_string(), json!({}))
}

/// RBAC's refusal, worded as the real server words it.
pub fn forbidden(user: &str, verb: &str, resource: &str, group: &str, namespace: &str) -> Failure {
    let (plain, sub) = resource.split_once('/').unwrap_or((resource, ""));
    let qualified = if group.is_empty() {
        plain.to_string()
    } else {
        format!("{plain}.{group}")
    };
    let scope = if namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{namespace}\"")
    };
    let sub_text = if sub.is_empty() {
        String::new()
    } else {
        format!("/{sub}")
    };
    status(
        403,
        "Forbidden",
        format!(
            "{qualified}{sub_text} is forbidden: User \"{user}\" cannot {verb} resource \"{plain}{sub_text}\" in API group \"{group}\" {scope}"
        ),
        json!({"kind": plain, "group": group}),
    )
}

/// `410 Gone`, reason `Expired`: a watch from a resourceVersion older than
/// the history kept (etcd's compaction); the client must relist.
pub fn expired(revision: u64, oldest: u64) -> Failure {
    status(
        410,
        "Expired",
        format!("too old resource version: {revision} ({oldest})"),
        json!({}),
    )
}
