//! Stand-in API server (a STAND-IN of what the real API server does, not
//! Kubernetes): node.k8s.io/v1 RuntimeClasses, which are cluster-wide (no
//! namespace). Served: get, list, create and delete, as the real server
//! answers them: a missing class is a 404 `Status` naming
//! `runtimeclasses.node.k8s.io`, a second create of a name a 409, and a
//! create is refused (422) without a `handler` that is a DNS label, or with
//! a name that is not a DNS subdomain. Nothing acts on a class (no kubelet
//! here runs a pod under its handler): the tier only asks that it exists
//! and names it in its pods.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::status::{self, Failure};

const RESOURCE: &str = "runtimeclasses";
const GROUP: &str = "node.k8s.io";
const KIND: &str = "RuntimeClass.node.k8s.io";

/// The classes of the cluster, by name.
#[derive(Default)]
pub struct RuntimeClasses {
    classes: BTreeMap<String, Value>,
}

/// RFC 1123 label (`max` 63) or subdomain (`max` 253, dots allowed).
fn dns_name_ok(text: &str, max: usize, dots: bool) -> bool {
    !text.is_empty()
        && text.len() <= max
        && text.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dots && b == b'.')
        })
        && text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric())
}

impl RuntimeClasses {
    pub fn get(&self, name: &str) -> Result<Value, Failure> {
        self.classes
            .get(name)
            .cloned()
            .ok_or_else(|| status::not_found(RESOURCE, GROUP, name))
    }

    pub fn list(&self, revision: u64) -> Result<Value, Failure> {
        let items: Vec<Value> = self.classes.values().cloned().collect();
        Ok(
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClassList",
                  "metadata": {"resourceVersion": revision.to_string()}, "items": items}),
        )
    }

    /// Creates the class `body` describes at `revision` (the store's next).
    pub fn create(&mut self, body: &Value, revision: String) -> Result<Value, Failure> {
        let name = body["metadata"]["name"].as_str().unwrap_or_default();
        if !dns_name_ok(name, 253, true) {
            return Err(status::invalid(
                KIND,
                GROUP,
                name,
                "metadata.name",
                "Invalid value: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
            ));
        }
        let handler = body["handler"].as_str().unwrap_or_default();
        if handler.is_empty() {
            return Err(status::invalid(
                KIND,
                GROUP,
                name,
                "handler",
                "Required value",
            ));
        }
        if !dns_name_ok(handler, 63, false) {
            return Err(status::invalid(
                KIND,
                GROUP,
                name,
                "handler",
                "Invalid value: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'",
            ));
        }
        if self.classes.contains_key(name) {
            return Err(status::already_exists(RESOURCE, GROUP, name));
        }
        let mut value = body.clone();
        value["apiVersion"] = json!("node.k8s.io/v1");
        value["kind"] = json!("RuntimeClass");
        value["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{revision:0>12}"));
        value["metadata"]["resourceVersion"] = json!(revision);
        value["metadata"]["creationTimestamp"] = json!(super::store::now());
        self.classes.insert(name.to_string(), value.clone());
        Ok(value)
    }

    pub fn delete(&mut self, name: &str) -> Result<Value, Failure> {
        self.classes
            .remove(name)
            .ok_or_else(|| status::not_found(RESOURCE, GROUP, name))
    }
}
