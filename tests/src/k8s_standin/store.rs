//! Stand-in API server: the objects, their metadata (`uid`,
//! `resourceVersion` from one counter as etcd's revision, `generation`,
//! `creationTimestamp`, `managedFields`), and the validation the tier can
//! run into. Nothing here knows HTTP.
//!
//! Controllers are not simulated, with two exceptions stated where they
//! happen: deleting a Deployment deletes the pods its selector matches at
//! once (the garbage collector, without the wait), and a Deployment's
//! `spec.replicas` is defaulted to 1. Pods exist only when a test inserts
//! them ([`Store::insert_pod`]), standing in for the ReplicaSet controller
//! and the kubelet.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::fields::{self, Entry};
use super::rbac::Rule;
use super::selector::Selector;
use super::status::{self, Failure};
use super::watch::{Change, History};

/// One kind of object the stand-in serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub resource: &'static str,
    pub group: &'static str,
    pub api_version: &'static str,
    pub kind: &'static str,
}

pub const SECRETS: Kind = Kind {
    resource: "secrets",
    group: "",
    api_version: "v1",
    kind: "Secret",
};
pub const CLAIMS: Kind = Kind {
    resource: "persistentvolumeclaims",
    group: "",
    api_version: "v1",
    kind: "PersistentVolumeClaim",
};
pub const PODS: Kind = Kind {
    resource: "pods",
    group: "",
    api_version: "v1",
    kind: "Pod",
};
pub const DEPLOYMENTS: Kind = Kind {
    resource: "deployments",
    group: "apps",
    api_version: "apps/v1",
    kind: "Deployment",
};

pub const NETWORK_POLICIES: Kind = Kind {
    resource: "networkpolicies",
    group: "networking.k8s.io",
    api_version: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
};

/// Core events: stored and listed as they are written (a test writes the
/// warnings the scheduler or kubelet would).
pub const EVENTS: Kind = Kind {
    resource: "events",
    group: "",
    api_version: "v1",
    kind: "Event",
};

pub fn kind_of(group: &str, resource: &str) -> Option<Kind> {
    [SECRETS, CLAIMS, PODS, DEPLOYMENTS, NETWORK_POLICIES, EVENTS]
        .into_iter()
        .find(|kind| kind.group == group && kind.resource == resource)
}

struct Stored {
    value: Value,
    entries: Vec<Entry>,
}

/// One request as the stand-in saw it, for tests of order and of the fast path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub user: String,
    pub verb: String,
    /// `deployments`, `deployments/scale`, `pods/log`, …
    pub resource: String,
    pub name: String,
}

#[derive(Default)]
pub struct Store {
    revision: u64,
    namespaces: BTreeMap<String, Value>,
    objects: BTreeMap<(&'static str, String, String), Stored>,
    logs: HashMap<(String, String), Vec<u8>>,
    /// The Role `sandboxd` is held to; `None` allows everything.
    pub role: Option<Vec<Rule>>,
    pub seen: Vec<Seen>,
    /// Every change, for watches ([`super::watch`]).
    pub history: History,
    /// The commands run for `pods/exec` ([`super::exec`]), until they end.
    pub execs: Vec<super::exec::Running>,
    /// Where those commands run (a test's directory): the stand-in's
    /// "container working directory", which a test gives.
    pub exec_dir: Option<std::path::PathBuf>,
    /// The cluster-wide RuntimeClasses ([`super::runtime_class`]).
    pub runtime_classes: super::runtime_class::RuntimeClasses,
}

type Outcome = Result<Value, Failure>;

pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn dns_label_ok(text: &str, max: usize) -> bool {
    !text.is_empty()
        && text.len() <= max
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A label value (or a key's name part): at most 63 of `[A-Za-z0-9._-]`,
/// alphanumeric at both ends; empty is allowed for values.
fn label_text_ok(text: &str) -> bool {
    text.is_empty()
        || (text.len() <= 63
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            && text.starts_with(|c: char| c.is_ascii_alphanumeric())
            && text.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

fn validate(kind: Kind, name: &str, old: Option<&Value>, new: &Value) -> Result<(), Failure> {
    let invalid = |field: &str, message: &str| {
        Err(status::invalid(kind.kind, kind.group, name, field, message))
    };
    if !dns_label_ok(name, 253) {
        return invalid("metadata.name", &format!("Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"));
    }
    if let Some(labels) = new["metadata"]["labels"].as_object() {
        for (key, value) in labels {
            let key_name = key.rsplit('/').next().unwrap_or(key);
            let value = value.as_str().unwrap_or("\u{0}");
            if key_name.is_empty() || !label_text_ok(key_name) {
                return invalid("metadata.labels", &format!("Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.'"));
            }
            if !label_text_ok(value) {
                return invalid("metadata.labels", &format!("Invalid value: \"{value}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (63 characters at most)"));
            }
        }
    }
    if kind == DEPLOYMENTS {
        let selector = new["spec"]["selector"]["matchLabels"].as_object();
        let Some(selector) = selector.filter(|selector| !selector.is_empty()) else {
            return invalid("spec.selector", "Required value");
        };
        let template = &new["spec"]["template"]["metadata"]["labels"];
        if selector
            .iter()
            .any(|(key, value)| template.get(key) != Some(value))
        {
            return invalid(
                "spec.template.metadata.labels",
                "Invalid value: `selector` does not match template `labels`",
            );
        }
        if new["spec"]["template"]["spec"]["containers"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            return invalid("spec.template.spec.containers", "Required value");
        }
        if let Some(old) = old {
            if old["spec"]["selector"] != new["spec"]["selector"] {
                return invalid("spec.selector", "field is immutable");
            }
        }
    }
    if kind == NETWORK_POLICIES {
        super::network_policy::validate(&new["spec"]).map_err(|(field, message)| {
            status::invalid(kind.kind, kind.group, name, &field, &message)
        })?;
    }
    if kind == CLAIMS {
        if let Some(old) = old {
            let without_requests = |value: &Value| {
                let mut spec = value["spec"].clone();
                if let Some(resources) = spec.get_mut("resources").and_then(Value::as_object_mut) {
                    resources.remove("requests");
                }
                spec
            };
            if without_requests(old) != without_requests(new) {
                return invalid(
                    "spec",
                    "Forbidden: spec is immutable after creation except resources.requests",
                );
            }
        }
    }
    Ok(())
}

impl Store {
    pub(super) fn stamp(&mut self) -> String {
        self.revision += 1;
        self.revision.to_string()
    }

    /// The newest revision (what a list's `resourceVersion` says).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Logs a change for the watches; a deletion gets a revision of its
    /// own, as etcd gives it.
    fn record(&mut self, kind: Kind, namespace: &str, change: &'static str, mut object: Value) {
        if change == "DELETED" {
            object["metadata"]["resourceVersion"] = json!(self.stamp());
        }
        let revision = object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(self.revision);
        self.history.record(Change {
            revision,
            resource: kind.resource,
            namespace: namespace.to_string(),
            kind: change,
            object,
        });
    }

    fn render(kind: Kind, stored: &Stored) -> Value {
        let mut value = stored.value.clone();
        value["apiVersion"] = json!(kind.api_version);
        value["kind"] = json!(kind.kind);
        value["metadata"]["managedFields"] = fields::managed_fields(&stored.entries);
        value
    }

    pub fn create_namespace(&mut self, name: &str) -> Outcome {
        if self.namespaces.contains_key(name) {
            return Err(status::already_exists("namespaces", "", name));
        }
        if !dns_label_ok(name, 63) {
            return Err(status::invalid(
                "Namespace",
                "",
                name,
                "metadata.name",
                "Invalid value",
            ));
        }
        let rv = self.stamp();
        let value = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": uuid(&rv), "resourceVersion": rv, "creationTimestamp": now()},
            "status": {"phase": "Active"}});
        self.namespaces.insert(name.to_string(), value.clone());
        Ok(value)
    }

    pub fn get_namespace(&self, name: &str) -> Outcome {
        self.namespaces
            .get(name)
            .cloned()
            .ok_or_else(|| status::namespace_not_found(name))
    }

    /// Deletes the namespace and, at once, everything in it.
    pub fn delete_namespace(&mut self, name: &str) -> Outcome {
        let value = self
            .namespaces
            .remove(name)
            .ok_or_else(|| status::namespace_not_found(name))?;
        self.objects
            .retain(|(_, namespace, _), _| namespace != name);
        self.logs.retain(|(namespace, _), _| namespace != name);
        Ok(value)
    }

    pub fn require_namespace(&self, namespace: &str) -> Result<(), Failure> {
        if self.namespaces.contains_key(namespace) {
            Ok(())
        } else {
            Err(status::namespace_not_found(namespace))
        }
    }

    pub fn exists(&self, kind: Kind, namespace: &str, name: &str) -> bool {
        self.objects
            .contains_key(&(kind.resource, namespace.to_string(), name.to_string()))
    }

    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Outcome {
        self.objects
            .get(&(kind.resource, namespace.to_string(), name.to_string()))
            .map(|stored| Self::render(kind, stored))
            .ok_or_else(|| status::not_found(kind.resource, kind.group, name))
    }

    pub fn list(&self, kind: Kind, namespace: &str, selector: &Selector) -> Outcome {
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|((resource, ns, _), stored)| {
                *resource == kind.resource && ns == namespace && selector.matches(&stored.value)
            })
            .map(|(_, stored)| Self::render(kind, stored))
            .collect();
        Ok(
            json!({"apiVersion": kind.api_version, "kind": format!("{}List", kind.kind),
                  "metadata": {"resourceVersion": self.revision.to_string()}, "items": items}),
        )
    }

    /// Stores `value` as the new state of the object, after validation:
    /// system metadata kept or made, `resourceVersion` bumped when anything
    /// changed, `generation` when the spec did.
    fn commit(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
        mut value: Value,
        entries: Vec<Entry>,
    ) -> Outcome {
        let key = (kind.resource, namespace.to_string(), name.to_string());
        let old = self.objects.get(&key).map(|stored| stored.value.clone());
        validate(kind, name, old.as_ref(), &value)?;
        if !value["metadata"].is_object() {
            value["metadata"] = json!({});
        }
        let metadata_keys = [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
        ];
        match &old {
            Some(old) => {
                for key in metadata_keys {
                    value["metadata"][key] = old["metadata"][key].clone();
                }
                let changed = fields::tracked(old) != fields::tracked(&value)
                    || old.get("status") != value.get("status");
                if changed {
                    value["metadata"]["resourceVersion"] = json!(self.stamp());
                }
                if kind == DEPLOYMENTS && old["spec"] != value["spec"] {
                    let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
                    value["metadata"]["generation"] = json!(generation + 1);
                }
            }
            None => {
                let rv = self.stamp();
                value["metadata"]["uid"] = json!(uuid(&rv));
                value["metadata"]["resourceVersion"] = json!(rv);
                value["metadata"]["creationTimestamp"] = json!(now());
                if kind == DEPLOYMENTS {
                    value["metadata"]["generation"] = json!(1);
                }
            }
        }
        value["metadata"]["name"] = json!(name);
        value["metadata"]["namespace"] = json!(namespace);
        if let Value::Object(metadata) = &mut value["metadata"] {
            metadata.remove("managedFields");
        }
        if value["metadata"]
            .get("deletionTimestamp")
            .is_some_and(|t| !t.is_null())
        {
            value["metadata"]["deletionTimestamp"] = old.as_ref().map_or(Value::Null, |old| {
                old["metadata"]["deletionTimestamp"].clone()
            });
        } else if let Value::Object(metadata) = &mut value["metadata"] {
            metadata.remove("deletionTimestamp");
        }
        let stored = Stored { value, entries };
        let rendered = Self::render(kind, &stored);
        let old_rv = old
            .as_ref()
            .map(|old| old["metadata"]["resourceVersion"].clone());
        if Self::finalized(&stored.value) {
            // Being deleted, and the last finalizer just went: gone.
            self.objects.remove(&key);
            self.record(kind, namespace, "DELETED", rendered.clone());
        } else {
            self.objects.insert(key, stored);
            match old_rv {
                None => self.record(kind, namespace, "ADDED", rendered.clone()),
                Some(rv) if rv != rendered["metadata"]["resourceVersion"] => {
                    self.record(kind, namespace, "MODIFIED", rendered.clone())
                }
                Some(_) => {}
            }
        }
        Ok(rendered)
    }

    fn defaults(kind: Kind, value: &mut Value) {
        if kind == DEPLOYMENTS && value["spec"].get("replicas").is_none() {
            // The API server's defaulting (not a field anyone owns).
            value["spec"]["replicas"] = json!(1);
        }
        if kind == CLAIMS && value.get("status").is_none() {
            value["status"] = json!({"phase": "Pending"});
        }
    }

    fn stored(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<(Value, Vec<Entry>), Failure> {
        self.objects
            .get(&(kind.resource, namespace.to_string(), name.to_string()))
            .map(|stored| (stored.value.clone(), stored.entries.clone()))
            .ok_or_else(|| status::not_found(kind.resource, kind.group, name))
    }

    pub fn create(&mut self, kind: Kind, namespace: &str, body: &Value, manager: &str) -> Outcome {
        self.require_namespace(namespace)?;
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if self.exists(kind, namespace, &name) {
            return Err(status::already_exists(kind.resource, kind.group, &name));
        }
        let mut value = body.clone();
        if kind != PODS {
            if let Value::Object(map) = &mut value {
                map.remove("status");
            }
        }
        Self::defaults(kind, &mut value);
        let mut entries = Vec::new();
        fields::update(
            None,
            &value,
            &mut entries,
            manager,
            None,
            kind.api_version,
            &now(),
        );
        self.commit(kind, namespace, &name, value, entries)
    }

    /// PUT: a whole new object, refused (409) when its `resourceVersion` is stale.
    pub fn replace(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
        body: &Value,
        manager: &str,
    ) -> Outcome {
        self.require_namespace(namespace)?;
        let (old, mut entries) = self.stored(kind, namespace, name)?;
        if let Some(rv) = body["metadata"]["resourceVersion"].as_str() {
            if Some(rv) != old["metadata"]["resourceVersion"].as_str() {
                return Err(status::conflict(kind.resource, kind.group, name));
            }
        }
        let mut value = body.clone();
        value["status"] = old.get("status").cloned().unwrap_or(Value::Null);
        if value["status"].is_null() {
            if let Value::Object(map) = &mut value {
                map.remove("status");
            }
        }
        Self::defaults(kind, &mut value);
        fields::update(
            Some(&old),
            &value,
            &mut entries,
            manager,
            None,
            kind.api_version,
            &now(),
        );
        self.commit(kind, namespace, name, value, entries)
    }

    /// Server-side apply; creates the object when it does not exist.
    pub fn apply(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
        config: &Value,
        manager: &str,
        force: bool,
    ) -> Outcome {
        self.require_namespace(namespace)?;
        if config["metadata"]["name"]
            .as_str()
            .is_some_and(|body_name| body_name != name)
        {
            return Err(status::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                config["metadata"]["name"]
            )));
        }
        let (mut value, mut entries) = self
            .stored(kind, namespace, name)
            .unwrap_or_else(|_| (json!({}), Vec::new()));
        let before = value.clone();
        fields::apply(
            &mut value,
            &mut entries,
            config,
            manager,
            kind.api_version,
            &now(),
            force,
        )
        .map_err(|conflicts| {
            let listed: Vec<(String, String)> = conflicts
                .iter()
                .map(|conflict| (conflict.manager.clone(), fields::dotted(&conflict.path)))
                .collect();
            status::apply_conflict(&listed, kind.api_version)
        })?;
        if let Some(status) = before.get("status") {
            value["status"] = status.clone();
        }
        Self::defaults(kind, &mut value);
        self.commit(kind, namespace, name, value, entries)
    }

    /// An RFC 7386 merge patch (strategic merge patches are taken as merge
    /// patches); a `resourceVersion` in the patch is a precondition, as
    /// the real server makes it (409 when stale).
    pub fn merge(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &Value,
        manager: &str,
    ) -> Outcome {
        self.require_namespace(namespace)?;
        let (old, mut entries) = self.stored(kind, namespace, name)?;
        if let Some(rv) = patch["metadata"]["resourceVersion"].as_str() {
            if Some(rv) != old["metadata"]["resourceVersion"].as_str() {
                return Err(status::conflict(kind.resource, kind.group, name));
            }
        }
        let mut value = old.clone();
        fields::merge_patch(&mut value, patch);
        fields::update(
            Some(&old),
            &value,
            &mut entries,
            manager,
            None,
            kind.api_version,
            &now(),
        );
        self.commit(kind, namespace, name, value, entries)
    }

    /// The `status` subresource: a merge patch of the patch's `status`
    /// only (the kubelet's writes; a test's stand-in for them).
    pub fn patch_status(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Outcome {
        self.require_namespace(namespace)?;
        let (old, entries) = self.stored(kind, namespace, name)?;
        let mut value = old.clone();
        let mut status = old.get("status").cloned().unwrap_or_else(|| json!({}));
        fields::merge_patch(&mut status, &patch["status"]);
        value["status"] = status;
        self.commit(kind, namespace, name, value, entries)
    }

    /// True when the object is being deleted and no finalizer holds it.
    fn finalized(value: &Value) -> bool {
        let deleting = value["metadata"]
            .get("deletionTimestamp")
            .is_some_and(|t| !t.is_null());
        let held = value["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|finalizers| !finalizers.is_empty());
        deleting && !held
    }

    /// Deletes the object, or — when finalizers hold it, as
    /// `kubernetes.io/pvc-protection` holds a claim in use — marks it with
    /// a `deletionTimestamp` until the last finalizer is removed.
    pub fn delete(&mut self, kind: Kind, namespace: &str, name: &str) -> Outcome {
        let key = (kind.resource, namespace.to_string(), name.to_string());
        let held = self.objects.get(&key).is_some_and(|stored| {
            stored.value["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|finalizers| !finalizers.is_empty())
        });
        if held {
            let rv = self.stamp();
            let stored = self.objects.get_mut(&key).expect("checked above");
            let marked = stored.value["metadata"].get("deletionTimestamp").is_none();
            if marked {
                stored.value["metadata"]["deletionTimestamp"] = json!(now());
                stored.value["metadata"]["resourceVersion"] = json!(rv);
            }
            let rendered = Self::render(kind, stored);
            if marked {
                self.record(kind, namespace, "MODIFIED", rendered.clone());
            }
            return Ok(rendered);
        }
        let stored = self
            .objects
            .remove(&key)
            .ok_or_else(|| status::not_found(kind.resource, kind.group, name))?;
        let rendered = Self::render(kind, &stored);
        self.record(kind, namespace, "DELETED", rendered.clone());
        if kind == DEPLOYMENTS {
            // The garbage collector, at once: the pods its selector matches go too.
            let selector = stored.value["spec"]["selector"]["matchLabels"].clone();
            let matches = |pod: &Value| {
                selector.as_object().is_some_and(|labels| {
                    labels
                        .iter()
                        .all(|(key, value)| pod["metadata"]["labels"].get(key) == Some(value))
                })
            };
            let doomed: Vec<_> = self
                .objects
                .iter()
                .filter(|((resource, ns, _), pod)| {
                    *resource == PODS.resource && ns == namespace && matches(&pod.value)
                })
                .map(|(key, _)| key.clone())
                .collect();
            for key in doomed {
                super::exec::end_pod(&self.execs, &key.1, &key.2);
                self.logs.remove(&(key.1.clone(), key.2.clone()));
                if let Some(pod) = self.objects.remove(&key) {
                    let rendered = Self::render(PODS, &pod);
                    self.record(PODS, namespace, "DELETED", rendered);
                }
            }
        }
        if kind == PODS {
            super::exec::end_pod(&self.execs, namespace, name);
            self.logs.remove(&(namespace.to_string(), name.to_string()));
        }
        Ok(rendered)
    }

    /// The Deployment's `autoscaling/v1` Scale.
    pub fn scale(&self, namespace: &str, name: &str) -> Outcome {
        let (value, _) = self.stored(DEPLOYMENTS, namespace, name)?;
        let selector: Vec<String> = value["spec"]["selector"]["matchLabels"]
            .as_object()
            .map(|labels| {
                labels
                    .iter()
                    .map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        Ok(json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": name, "namespace": namespace,
                         "uid": value["metadata"]["uid"], "resourceVersion": value["metadata"]["resourceVersion"],
                         "creationTimestamp": value["metadata"]["creationTimestamp"]},
            "spec": {"replicas": value["spec"]["replicas"]},
            "status": {"replicas": value["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector.join(",")}}))
    }

    /// Sets `spec.replicas` through the scale subresource (a merge patch or
    /// a whole Scale); the manager becomes the owner of `spec.replicas`.
    pub fn set_scale(
        &mut self,
        namespace: &str,
        name: &str,
        scale: &Value,
        manager: &str,
    ) -> Outcome {
        self.require_namespace(namespace)?;
        let (old, mut entries) = self.stored(DEPLOYMENTS, namespace, name)?;
        if let Some(rv) = scale["metadata"]["resourceVersion"].as_str() {
            if Some(rv) != old["metadata"]["resourceVersion"].as_str() {
                return Err(status::conflict("deployments", "apps", name));
            }
        }
        let Some(replicas) = scale["spec"]["replicas"].as_i64().filter(|r| *r >= 0) else {
            return Err(status::invalid(
                "Scale",
                "autoscaling",
                name,
                "spec.replicas",
                "Invalid value: must be a number of at least 0",
            ));
        };
        let mut value = old.clone();
        value["spec"]["replicas"] = json!(replicas);
        fields::update(
            Some(&old),
            &value,
            &mut entries,
            manager,
            Some("scale"),
            DEPLOYMENTS.api_version,
            &now(),
        );
        self.commit(DEPLOYMENTS, namespace, name, value, entries)?;
        self.scale(namespace, name)
    }

    /// Puts a pod in the store as a controller and the kubelet would,
    /// status included, with the output its runner container has written.
    pub fn insert_pod(&mut self, namespace: &str, pod: Value, log: &[u8]) -> Outcome {
        self.require_namespace(namespace)?;
        let name = pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut entries = Vec::new();
        fields::update(
            None,
            &pod,
            &mut entries,
            "kube-controller-manager",
            None,
            "v1",
            &now(),
        );
        let value = self.commit(PODS, namespace, &name, pod, entries)?;
        self.logs
            .insert((namespace.to_string(), name), log.to_vec());
        Ok(value)
    }

    pub fn log(&self, namespace: &str, name: &str) -> Result<Vec<u8>, Failure> {
        self.get(PODS, namespace, name)?;
        Ok(self
            .logs
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .unwrap_or_default())
    }
}

/// A uid unique in this stand-in, in the real one's shape.
fn uuid(revision: &str) -> String {
    let n: u64 = revision.parse().unwrap_or_default();
    let pid = std::process::id();
    format!("{pid:08x}-0000-4000-8000-{n:012x}")
}
