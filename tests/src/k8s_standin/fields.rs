//! Stand-in API server: the field ownership of server-side apply, in the
//! subset the kubernetes tier relies on.
//!
//! A field is a path of map keys to a leaf: a scalar, an array, or an
//! empty map. Arrays are atomic here (the real server merges some lists by
//! key, such as `containers` by `name`; the tier always applies whole
//! lists, so atomic lists give it the same answers). Tracked fields are
//! everything but `apiVersion`, `kind`, `status`, and `metadata` other than
//! `labels`, `annotations` and `finalizers` — as the real server tracks them.
//!
//! - An apply by manager M sets M's applied set to the fields of its
//!   configuration. A field another manager owns with a different value is
//!   a conflict (409) unless `force`, which moves the field to M. A field M
//!   applied before and no longer applies is removed from the object,
//!   unless another manager also owns it.
//! - Any other write (create, update, merge patch, the scale subresource)
//!   by manager U gives U every field whose value it changed, taking them
//!   from whoever owned them: so after `kubectl scale`, `spec.replicas`
//!   belongs to kubectl, and sandboxd's next apply (which leaves replicas
//!   out) neither conflicts with it nor resets it.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

pub type Path = Vec<String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Apply,
    Update,
}

/// One manager's fields, as `metadata.managedFields` lists them.
#[derive(Debug, Clone)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub subresource: Option<String>,
    pub api_version: String,
    pub time: String,
    pub fields: BTreeSet<Path>,
}

/// The part of an object whose fields are tracked.
pub fn tracked(object: &Value) -> Value {
    let mut tracked = object.as_object().cloned().unwrap_or_default();
    for key in ["apiVersion", "kind", "status"] {
        tracked.remove(key);
    }
    if let Some(Value::Object(metadata)) = tracked.get_mut("metadata") {
        metadata.retain(|key, _| ["labels", "annotations", "finalizers"].contains(&key.as_str()));
        if metadata.is_empty() {
            tracked.remove("metadata");
        }
    }
    Value::Object(tracked)
}

/// Every leaf path of `value`.
pub fn leaves(value: &Value) -> BTreeSet<Path> {
    fn walk(value: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (key, child) in map {
                    prefix.push(key.clone());
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            _ => {
                if !prefix.is_empty() {
                    out.insert(prefix.clone());
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(value, &mut Vec::new(), &mut out);
    out
}

pub fn value_at<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |value, key| value.get(key))
}

fn remove_at(value: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = value;
    for key in parents {
        match current.get_mut(key) {
            Some(next) => current = next,
            None => return,
        }
    }
    if let Value::Object(map) = current {
        map.remove(last);
    }
}

/// Maps merge key by key; anything else is replaced.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                match target.get_mut(key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge(existing, value)
                    }
                    _ => {
                        target.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// RFC 7386: maps merge, `null` removes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let map = target.as_object_mut().expect("made a map above");
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// True when owning `owned` means owning (part of) `path`, or the reverse.
fn overlaps(owned: &Path, path: &Path) -> bool {
    owned.starts_with(path) || path.starts_with(owned)
}

fn owns(entry: &Entry, path: &Path) -> bool {
    entry.fields.iter().any(|owned| overlaps(owned, path))
}

/// One conflicting field: who owns it, and where.
pub struct Conflict {
    pub manager: String,
    pub path: Path,
}

/// `.spec.replicas`, as the real server names a field in a conflict.
pub fn dotted(path: &Path) -> String {
    path.iter().map(|key| format!(".{key}")).collect()
}

/// Applies `config` by `manager` to `object` (updated in place) and its
/// `entries`. Returns the conflicts instead when there are some and not `force`.
pub fn apply(
    object: &mut Value,
    entries: &mut Vec<Entry>,
    config: &Value,
    manager: &str,
    api_version: &str,
    time: &str,
    force: bool,
) -> Result<(), Vec<Conflict>> {
    let config = tracked(config);
    let applied = leaves(&config);
    let is_ours = |entry: &Entry| entry.manager == manager && entry.operation == Operation::Apply;
    let mut conflicts = Vec::new();
    for path in &applied {
        for entry in entries.iter().filter(|entry| !is_ours(entry)) {
            if owns(entry, path) && value_at(object, path) != value_at(&config, path) {
                conflicts.push(Conflict {
                    manager: entry.manager.clone(),
                    path: path.clone(),
                });
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    let before: BTreeSet<Path> = entries
        .iter()
        .filter(|entry| is_ours(entry))
        .flat_map(|entry| entry.fields.iter().cloned())
        .collect();
    for dropped in before.difference(&applied) {
        let shared = entries
            .iter()
            .filter(|entry| !is_ours(entry))
            .any(|entry| owns(entry, dropped));
        if !shared {
            remove_at(object, dropped);
        }
    }
    merge(object, &config);
    for conflict in &conflicts {
        for entry in entries.iter_mut().filter(|entry| !is_ours(entry)) {
            entry
                .fields
                .retain(|owned| !overlaps(owned, &conflict.path));
        }
    }
    entries.retain(|entry| !is_ours(entry));
    entries.push(Entry {
        manager: manager.to_string(),
        operation: Operation::Apply,
        subresource: None,
        api_version: api_version.to_string(),
        time: time.to_string(),
        fields: applied,
    });
    entries.retain(|entry| !entry.fields.is_empty());
    Ok(())
}

/// Records a write other than an apply: `manager` now owns every tracked
/// field whose value differs between `before` and `after`.
pub fn update(
    before: Option<&Value>,
    after: &Value,
    entries: &mut Vec<Entry>,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    time: &str,
) {
    let old = before.map(tracked).unwrap_or(Value::Null);
    let new = tracked(after);
    let changed: BTreeSet<Path> = leaves(&old)
        .union(&leaves(&new))
        .filter(|path| value_at(&old, path) != value_at(&new, path))
        .cloned()
        .collect();
    if changed.is_empty() {
        return;
    }
    let is_ours = |entry: &Entry| {
        entry.manager == manager
            && entry.operation == Operation::Update
            && entry.subresource.as_deref() == subresource
    };
    for path in &changed {
        for entry in entries.iter_mut().filter(|entry| !is_ours(entry)) {
            entry.fields.retain(|owned| !overlaps(owned, path));
        }
    }
    let present: BTreeSet<Path> = changed
        .into_iter()
        .filter(|path| value_at(&new, path).is_some())
        .collect();
    match entries.iter_mut().find(|entry| is_ours(entry)) {
        Some(entry) => {
            entry.fields.extend(present);
            entry.time = time.to_string();
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: Operation::Update,
            subresource: subresource.map(str::to_string),
            api_version: api_version.to_string(),
            time: time.to_string(),
            fields: present,
        }),
    }
    entries.retain(|entry| !entry.fields.is_empty());
}

/// `metadata.managedFields`, in the real server's `FieldsV1` form (`f:` keys).
pub fn managed_fields(entries: &[Entry]) -> Value {
    let list = entries
        .iter()
        .map(|entry| {
            let mut tree = Map::new();
            for path in &entry.fields {
                let mut node = &mut tree;
                for key in path {
                    node = node
                        .entry(format!("f:{key}"))
                        .or_insert_with(|| Value::Object(Map::new()))
                        .as_object_mut()
                        .expect("nodes are maps");
                }
            }
            let mut value = serde_json::json!({
                "manager": entry.manager,
                "operation": match entry.operation { Operation::Apply => "Apply", Operation::Update => "Update" },
                "apiVersion": entry.api_version,
                "time": entry.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": Value::Object(tree),
            });
            if let Some(subresource) = &entry.subresource {
                value["subresource"] = Value::String(subresource.clone());
            }
            value
        })
        .collect();
    Value::Array(list)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_apply_leaves_another_managers_replicas_alone_and_restores_its_own_fields() {
        let mut object = json!({});
        let mut entries = Vec::new();
        let created =
            json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 1, "image": "x"}});
        apply(
            &mut object,
            &mut entries,
            &created,
            "sandboxd",
            "apps/v1",
            "t",
            false,
        )
        .ok()
        .unwrap();
        // kubectl scale --replicas=0, and a human's label.
        let mut scaled = object.clone();
        scaled["spec"]["replicas"] = json!(0);
        scaled["metadata"]["labels"]["human"] = json!("yes");
        update(
            Some(&object),
            &scaled,
            &mut entries,
            "kubectl",
            Some("scale"),
            "apps/v1",
            "t",
        );
        object = scaled;
        // A human changes the image; sandboxd's forced apply restores it.
        let mut edited = object.clone();
        edited["spec"]["image"] = json!("y");
        update(
            Some(&object),
            &edited,
            &mut entries,
            "kubectl-edit",
            None,
            "apps/v1",
            "t",
        );
        object = edited;
        let again = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"image": "x"}});
        let conflicts = apply(
            &mut object.clone(),
            &mut entries.clone(),
            &again,
            "sandboxd",
            "apps/v1",
            "t",
            false,
        )
        .map(|_| ())
        .expect_err("the image is kubectl-edit's now");
        assert_eq!(dotted(&conflicts[0].path), ".spec.image");
        apply(
            &mut object,
            &mut entries,
            &again,
            "sandboxd",
            "apps/v1",
            "t",
            true,
        )
        .ok()
        .unwrap();
        assert_eq!(
            object["spec"]["replicas"],
            json!(0),
            "kubectl's replicas stay"
        );
        assert_eq!(
            object["spec"]["image"],
            json!("x"),
            "sandboxd's image is restored"
        );
        assert_eq!(object["metadata"]["labels"]["human"], json!("yes"));
        // A field sandboxd stops applying, owned by no one else, goes.
        let fewer = json!({"spec": {"image": "x"}});
        apply(
            &mut object,
            &mut entries,
            &fewer,
            "sandboxd",
            "apps/v1",
            "t",
            false,
        )
        .ok()
        .unwrap();
        assert!(object["metadata"]["labels"].get("a").is_none(), "{object}");
        assert_eq!(object["metadata"]["labels"]["human"], json!("yes"));
    }
}
