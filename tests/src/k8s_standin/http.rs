//! Stand-in API server: the REST paths the kubernetes tier calls, their
//! verbs for RBAC, and the JSON (or log text) it answers with.
//!
//! Served: namespaces (get, create, delete); secrets,
//! persistentvolumeclaims, pods, apps/v1 deployments and
//! networking.k8s.io/v1 networkpolicies (get, list with
//! `labelSelector`, create, update, patch as server-side apply or merge
//! patch, delete; list with `watch=1`: see [super::watch]); `<kind>/status`
//! (get, merge patch); `deployments/scale` (get, patch, update); `pods/log`
//! (get, with `limitBytes` and `tailLines`); `pods/exec` (a WebSocket:
//! see [super::exec], a stand-in for the kubelet); `selfsubjectaccessreviews`
//! (create); node.k8s.io/v1 `runtimeclasses`, cluster-wide (get, list,
//! create, delete: see [super::runtime_class]). Anything else is a 404 `Status`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use super::rbac;
use super::selector::Selector;
use super::status::{self, Failure};
use super::store::{self, Kind, Seen, Store};

enum Route {
    Namespaces,
    Namespace(String),
    Collection(Kind, String),
    Object(Kind, String, String),
    Scale(String, String),
    Status(Kind, String, String),
    Log(String, String),
    Exec(String, String),
    AccessReview,
    RuntimeClasses,
    RuntimeClass(String),
}

fn route(path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] => {
            return Some(Route::AccessReview)
        }
        ["apis", group, "v1", rest @ ..] => (*group, rest),
        _ => return None,
    };
    let owned = |text: &&str| text.to_string();
    match rest {
        ["runtimeclasses"] if group == "node.k8s.io" => Some(Route::RuntimeClasses),
        ["runtimeclasses", name] if group == "node.k8s.io" => {
            Some(Route::RuntimeClass(owned(name)))
        }
        ["namespaces"] if group.is_empty() => Some(Route::Namespaces),
        ["namespaces", namespace] if group.is_empty() => Some(Route::Namespace(owned(namespace))),
        ["namespaces", namespace, resource] => Some(Route::Collection(
            store::kind_of(group, resource)?,
            owned(namespace),
        )),
        ["namespaces", namespace, resource, name] => Some(Route::Object(
            store::kind_of(group, resource)?,
            owned(namespace),
            owned(name),
        )),
        ["namespaces", namespace, "deployments", name, "scale"] if group == "apps" => {
            Some(Route::Scale(owned(namespace), owned(name)))
        }
        ["namespaces", namespace, resource, name, "status"] => Some(Route::Status(
            store::kind_of(group, resource)?,
            owned(namespace),
            owned(name),
        )),
        ["namespaces", namespace, "pods", name, "log"] if group.is_empty() => {
            Some(Route::Log(owned(namespace), owned(name)))
        }
        ["namespaces", namespace, "pods", name, "exec"] if group.is_empty() => {
            Some(Route::Exec(owned(namespace), owned(name)))
        }
        _ => None,
    }
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[i], escaped) {
            (_, Some(byte)) => {
                out.push(byte);
                i += 2;
            }
            (b'+', None) => out.push(b' '),
            (byte, None) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query(request: &Request<Incoming>, name: &str) -> Option<String> {
    queries(request, name).into_iter().next()
}

/// Every value of a repeated query parameter (`command=…&command=…`).
fn queries(request: &Request<Incoming>, name: &str) -> Vec<String> {
    let Some(query) = request.uri().query() else {
        return Vec::new();
    };
    query
        .split('&')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key) == name).then(|| decode(value))
        })
        .collect()
}

/// Every answer's body: whole (JSON, log text) or a watch's stream.
pub type Reply = UnsyncBoxBody<Bytes, Infallible>;

fn json_response(code: u16, body: &Value) -> Response<Reply> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed_unsync())
        .expect("a valid response")
}

fn failure(failure: Failure) -> Response<Reply> {
    json_response(failure.code, &failure.body)
}

/// The RBAC verb and resource of a request, and the namespace.
fn attributes(
    method: &Method,
    route: &Route,
    watch: bool,
) -> (&'static str, String, String, String) {
    let verb = |collection: bool| match *method {
        Method::GET if collection && watch => "watch",
        Method::GET if collection => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "unknown",
    };
    match route {
        Route::Namespaces => (
            verb(true),
            "namespaces".into(),
            String::new(),
            String::new(),
        ),
        Route::Namespace(name) => (
            verb(false),
            "namespaces".into(),
            String::new(),
            name.clone(),
        ),
        Route::Collection(kind, namespace) => (
            verb(true),
            kind.resource.into(),
            kind.group.into(),
            namespace.clone(),
        ),
        Route::Object(kind, namespace, _) => (
            verb(false),
            kind.resource.into(),
            kind.group.into(),
            namespace.clone(),
        ),
        Route::Scale(namespace, _) => (
            verb(false),
            "deployments/scale".into(),
            "apps".into(),
            namespace.clone(),
        ),
        Route::Status(kind, namespace, _) => (
            verb(false),
            format!("{}/status", kind.resource),
            kind.group.into(),
            namespace.clone(),
        ),
        Route::Log(namespace, _) => (
            verb(false),
            "pods/log".into(),
            String::new(),
            namespace.clone(),
        ),
        // A WebSocket's GET is authorized as `create` (API servers since 1.30).
        Route::Exec(namespace, _) => (
            "create",
            "pods/exec".into(),
            String::new(),
            namespace.clone(),
        ),
        Route::AccessReview => (
            "create",
            "selfsubjectaccessreviews".into(),
            "authorization.k8s.io".into(),
            String::new(),
        ),
        Route::RuntimeClasses => (
            verb(true),
            "runtimeclasses".into(),
            "node.k8s.io".into(),
            String::new(),
        ),
        Route::RuntimeClass(_) => (
            verb(false),
            "runtimeclasses".into(),
            "node.k8s.io".into(),
            String::new(),
        ),
    }
}

fn object_name(route: &Route) -> String {
    match route {
        Route::Namespace(name)
        | Route::Object(_, _, name)
        | Route::Scale(_, name)
        | Route::Status(_, _, name)
        | Route::Log(_, name)
        | Route::Exec(_, name)
        | Route::RuntimeClass(name) => name.clone(),
        _ => String::new(),
    }
}

/// Answers one request.
pub async fn serve(
    store: Arc<Mutex<Store>>,
    frozen: Arc<AtomicBool>,
    request: Request<Incoming>,
) -> Result<Response<Reply>, Infallible> {
    if frozen.load(Ordering::SeqCst) {
        // Frozen: the request is read by no one and answered never.
        std::future::pending::<()>().await;
    }
    Ok(answer(store, request).await.unwrap_or_else(failure))
}

/// `pods/{name}/exec`: see [super::exec].
fn exec(
    shared: Arc<Mutex<Store>>,
    user: &str,
    namespace: &str,
    name: &str,
    mut request: Request<Incoming>,
) -> Result<Response<Reply>, Failure> {
    let mut store = shared.lock().unwrap_or_else(|poison| poison.into_inner());
    store.seen.push(Seen {
        user: user.to_string(),
        verb: "create".to_string(),
        resource: "pods/exec".to_string(),
        name: name.to_string(),
    });
    if !rbac::allowed(store.role.as_deref(), user, "create", "pods/exec") {
        return Err(status::forbidden(
            user,
            "create",
            "pods/exec",
            "",
            namespace,
        ));
    }
    let flag = |name: &str| matches!(query(&request, name).as_deref(), Some("true" | "1"));
    let asked = super::exec::Asked {
        command: queries(&request, "command"),
        container: query(&request, "container"),
        stdin: flag("stdin"),
        stdout: flag("stdout"),
        stderr: flag("stderr"),
        tty: flag("tty"),
    };
    super::exec::serve(shared.clone(), &store, namespace, name, asked, &mut request)
}

async fn answer(
    store: Arc<Mutex<Store>>,
    request: Request<Incoming>,
) -> Result<Response<Reply>, Failure> {
    let token = request
        .headers()
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string();
    let user = rbac::user_of(&token).ok_or_else(status::unauthorized)?;
    let path = request.uri().path().to_string();
    let route = route(&path)
        .ok_or_else(|| status::not_found("", "", &format!("the server could not find the requested resource ({path}) — the stand-in does not serve it")))?;
    let method = request.method().clone();
    if let Route::Exec(namespace, name) = &route {
        return exec(store, user, namespace, name, request);
    }
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let manager = query(&request, "fieldManager").unwrap_or_else(|| "unknown".to_string());
    let force = query(&request, "force").as_deref() == Some("true");
    let label_selector = query(&request, "labelSelector").unwrap_or_default();
    let limit_bytes: Option<usize> = query(&request, "limitBytes").and_then(|v| v.parse().ok());
    let tail_lines: Option<usize> = query(&request, "tailLines").and_then(|v| v.parse().ok());
    let watch = matches!(query(&request, "watch").as_deref(), Some("1" | "true"));
    let resource_version =
        query(&request, "resourceVersion").filter(|rv| !rv.is_empty() && rv != "0");
    let timeout_seconds: u64 = query(&request, "timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1800);
    let body = request
        .into_body()
        .collect()
        .await
        .map_err(|error| status::bad_request(format!("cannot read the body: {error}")))?
        .to_bytes();
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).map_err(|error| {
            status::bad_request(format!("the stand-in reads JSON bodies only: {error}"))
        })?
    };
    let (verb, resource, group, namespace) = attributes(&method, &route, watch);
    let shared = store.clone();
    let mut store = store.lock().unwrap_or_else(|poison| poison.into_inner());
    store.seen.push(Seen {
        user: user.to_string(),
        verb: verb.to_string(),
        resource: resource.clone(),
        name: object_name(&route),
    });
    let may = |store: &Store, verb: &str, resource: &str| {
        rbac::allowed(store.role.as_deref(), user, verb, resource)
    };
    if !matches!(route, Route::AccessReview) && !may(&store, verb, &resource) {
        return Err(status::forbidden(user, verb, &resource, &group, &namespace));
    }
    let ok = |value: Value| Ok(json_response(200, &value));
    let created = |value: Value| Ok(json_response(201, &value));
    match (route, method) {
        (Route::Namespaces, Method::POST) => {
            let name = body["metadata"]["name"].as_str().unwrap_or_default();
            created(store.create_namespace(name)?)
        }
        (Route::Namespace(name), Method::GET) => ok(store.get_namespace(&name)?),
        (Route::Namespace(name), Method::DELETE) => ok(store.delete_namespace(&name)?),
        (Route::RuntimeClasses, Method::GET) if !watch => {
            let revision = store.revision();
            ok(store.runtime_classes.list(revision)?)
        }
        (Route::RuntimeClasses, Method::POST) => {
            let revision = store.stamp();
            created(store.runtime_classes.create(&body, revision)?)
        }
        (Route::RuntimeClass(name), Method::GET) => ok(store.runtime_classes.get(&name)?),
        (Route::RuntimeClass(name), Method::DELETE) => ok(store.runtime_classes.delete(&name)?),
        (Route::Collection(kind, namespace), Method::GET) if watch => {
            store.require_namespace(&namespace)?;
            let after = match resource_version {
                Some(rv) => Some(rv.parse().map_err(|_| {
                    status::bad_request(format!("resourceVersion {rv:?} is not a number"))
                })?),
                None => None,
            };
            let request = super::watch::Request {
                kind,
                namespace,
                selector: Selector::parse(&label_selector)?,
                after,
                timeout: std::time::Duration::from_secs(timeout_seconds),
            };
            drop(store);
            let body = super::watch::serve(shared, request)?;
            Ok(Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(body.boxed_unsync())
                .expect("a valid response"))
        }
        (Route::Collection(kind, namespace), Method::GET) => {
            ok(store.list(kind, &namespace, &Selector::parse(&label_selector)?)?)
        }
        (Route::Collection(kind, namespace), Method::POST) => {
            created(store.create(kind, &namespace, &body, &manager)?)
        }
        (Route::Object(kind, namespace, name), Method::GET) => {
            ok(store.get(kind, &namespace, &name)?)
        }
        (Route::Object(kind, namespace, name), Method::PUT) => {
            ok(store.replace(kind, &namespace, &name, &body, &manager)?)
        }
        (Route::Object(kind, namespace, name), Method::DELETE) => {
            ok(store.delete(kind, &namespace, &name)?)
        }
        (Route::Object(kind, namespace, name), Method::PATCH) => match content_type.as_str() {
            "application/apply-patch+yaml" => {
                if manager == "unknown" {
                    return Err(status::bad_request(
                        "PATCH, application/apply-patch+yaml: fieldManager is required".into(),
                    ));
                }
                let creating = !store.exists(kind, &namespace, &name);
                if creating && !may(&store, "create", kind.resource) {
                    return Err(status::forbidden(
                        user,
                        "create",
                        kind.resource,
                        kind.group,
                        &namespace,
                    ));
                }
                let value = store.apply(kind, &namespace, &name, &body, &manager, force)?;
                if creating {
                    created(value)
                } else {
                    ok(value)
                }
            }
            "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                ok(store.merge(kind, &namespace, &name, &body, &manager)?)
            }
            other => Err(status::unsupported_media(other)),
        },
        (Route::Status(kind, namespace, name), Method::PATCH) => {
            if !content_type.contains("merge-patch") {
                return Err(status::unsupported_media(&content_type));
            }
            ok(store.patch_status(kind, &namespace, &name, &body)?)
        }
        (Route::Status(kind, namespace, name), Method::GET) => {
            ok(store.get(kind, &namespace, &name)?)
        }
        (Route::Scale(namespace, name), Method::GET) => ok(store.scale(&namespace, &name)?),
        (Route::Scale(namespace, name), Method::PUT) => {
            ok(store.set_scale(&namespace, &name, &body, &manager)?)
        }
        (Route::Scale(namespace, name), Method::PATCH) => {
            if !content_type.contains("merge-patch") {
                return Err(status::unsupported_media(&content_type));
            }
            let mut scale = store.scale(&namespace, &name)?;
            if let Value::Object(metadata) = &mut scale["metadata"] {
                metadata.remove("resourceVersion");
            }
            super::fields::merge_patch(&mut scale, &body);
            ok(store.set_scale(&namespace, &name, &scale, &manager)?)
        }
        (Route::Log(namespace, name), Method::GET) => {
            let log = store.log(&namespace, &name)?;
            let mut data: &[u8] = &log;
            if let Some(lines) = tail_lines {
                let body = data.strip_suffix(b"\n").unwrap_or(data);
                let start = body
                    .iter()
                    .enumerate()
                    .rev()
                    .filter(|(_, byte)| **byte == b'\n')
                    .nth(lines.saturating_sub(1))
                    .map_or(0, |(at, _)| at + 1);
                data = if lines == 0 {
                    &data[data.len()..]
                } else {
                    &data[start..]
                };
            }
            if let Some(limit) = limit_bytes {
                data = &data[..limit.min(data.len())];
            }
            Ok(Response::builder()
                .status(200)
                .header("content-type", "text/plain")
                .body(Full::new(Bytes::from(data.to_vec())).boxed_unsync())
                .expect("a valid response"))
        }
        (Route::AccessReview, Method::POST) => {
            let attributes = &body["spec"]["resourceAttributes"];
            let text = |key: &str| attributes[key].as_str().unwrap_or_default().to_string();
            let (resource, subresource) = (text("resource"), text("subresource"));
            let resource = if subresource.is_empty() {
                resource
            } else {
                format!("{resource}/{subresource}")
            };
            let allowed = may(&store, &text("verb"), &resource);
            let mut answer = body.clone();
            answer["apiVersion"] = json!("authorization.k8s.io/v1");
            answer["kind"] = json!("SelfSubjectAccessReview");
            answer["metadata"] = json!({});
            answer["status"] = json!({"allowed": allowed});
            created(answer)
        }
        (_, method) => Err(status::bad_request(format!(
            "the stand-in does not serve {method} on {path}"
        ))),
    }
}
