//! The daemon's instance name: what keeps two daemons on one runtime (one
//! Docker engine, one cluster) from touching each other's objects.
//!
//! The default instance keeps today's names and labels exactly, so a
//! single daemon, and every object an earlier version made, is unchanged.
//! A named instance `blue` names its objects `blue-<base name>` (base names
//! always start `sbx-`, so no name of one instance can be another's) and
//! labels them `stigmer.ai/instance=blue`. A daemon owns an object only
//! when that label is its name — or, for the default instance, when the
//! label is absent — and never lists, adopts, reaps or removes another.

use std::collections::HashMap;
use std::sync::OnceLock;

use anyhow::bail;

/// The label naming the instance that created an object.
pub const LABEL_INSTANCE: &str = "stigmer.ai/instance";
/// The configured name that means the default instance.
pub const DEFAULT_INSTANCE: &str = "default";
/// The longest instance name: a Kubernetes object name (63) must still fit
/// `<instance>-<base name>-workspace`.
const MAX_LEN: usize = 24;

/// This daemon's instance.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Instance {
    /// `None` for the default instance.
    name: Option<String>,
}

/// The instance this process serves as: one per daemon, set once at start
/// from the configuration, before any driver names an object.
static CURRENT: OnceLock<Instance> = OnceLock::new();

impl Instance {
    /// Checks a configured name; `default` (or none) is the default instance.
    pub fn from_config(name: Option<&str>) -> anyhow::Result<Instance> {
        let Some(name) = name.filter(|name| *name != DEFAULT_INSTANCE) else {
            return Ok(Instance::default());
        };
        let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if name.is_empty() || name.len() > MAX_LEN || !name.chars().all(allowed) {
            bail!("instance '{name}' must be 1 to {MAX_LEN} characters of a-z, 0-9 and '-'");
        }
        if name.starts_with('-') || name.ends_with('-') {
            bail!("instance '{name}' must not start or end with '-'");
        }
        if name.contains("sbx") {
            bail!("instance '{name}' must not contain 'sbx' (object names would become ambiguous)");
        }
        Ok(Instance {
            name: Some(name.to_string()),
        })
    }

    /// Makes `self` the process's instance. Called once, at start.
    pub fn install(self) {
        if CURRENT.set(self.clone()).is_err() && CURRENT.get() != Some(&self) {
            tracing::error!("the instance was already set to another name; keeping the first");
        }
    }

    /// The process's instance (the default one until [`install`](Self::install)).
    pub fn current() -> &'static Instance {
        CURRENT.get_or_init(Instance::default)
    }

    /// The name for logs and `status`: `default` for the default instance.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(DEFAULT_INSTANCE)
    }

    /// The runtime object name for a sandbox's base name.
    pub fn object_name(&self, base_name: &str) -> String {
        match &self.name {
            None => base_name.to_string(),
            Some(name) => format!("{name}-{base_name}"),
        }
    }

    /// The instance label to put on new objects (none for the default
    /// instance, whose labels stay as they always were).
    pub fn label(&self) -> Option<(&'static str, String)> {
        self.name.clone().map(|name| (LABEL_INSTANCE, name))
    }

    /// True when an object with these labels is this instance's.
    pub fn owns(&self, labels: &HashMap<String, String>) -> bool {
        labels.get(LABEL_INSTANCE).map(String::as_str) == self.name.as_deref()
    }

    /// True when an object whose instance label is `value` (`None`: no
    /// such label) is this instance's.
    pub fn owns_label(&self, value: Option<&str>) -> bool {
        value == self.name.as_deref()
    }

    /// The label-selector term that selects exactly this instance's
    /// objects: `stigmer.ai/instance=<name>`, or for the default instance
    /// `!stigmer.ai/instance` (objects without the label).
    pub fn selector_term(&self) -> String {
        match &self.name {
            Some(name) => format!("{LABEL_INSTANCE}={name}"),
            None => format!("!{LABEL_INSTANCE}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_keeps_names_and_labels_and_a_named_one_is_apart() {
        let default = Instance::from_config(None).unwrap();
        assert_eq!(default, Instance::from_config(Some("default")).unwrap());
        assert_eq!(
            default.object_name("sbx-ses-0123456789ab"),
            "sbx-ses-0123456789ab"
        );
        assert_eq!(default.label(), None);
        let blue = Instance::from_config(Some("blue")).unwrap();
        assert_eq!(
            blue.object_name("sbx-ses-0123456789ab"),
            "blue-sbx-ses-0123456789ab"
        );
        assert_eq!(blue.label(), Some((LABEL_INSTANCE, "blue".to_string())));

        let unlabelled = HashMap::new();
        let labelled_blue = HashMap::from([(LABEL_INSTANCE.to_string(), "blue".to_string())]);
        assert!(default.owns(&unlabelled) && !default.owns(&labelled_blue));
        assert!(blue.owns(&labelled_blue) && !blue.owns(&unlabelled));
        assert_eq!(default.selector_term(), "!stigmer.ai/instance");
        assert_eq!(blue.selector_term(), "stigmer.ai/instance=blue");
        assert!(default.owns_label(None) && !default.owns_label(Some("blue")));
        assert!(blue.owns_label(Some("blue")) && !blue.owns_label(None));
    }

    #[test]
    fn bad_names_are_refused_by_name() {
        for bad in ["", "Blue", "a_b", "-a", "a-", "my-sbx", &"x".repeat(25)] {
            let error = Instance::from_config(Some(bad)).unwrap_err().to_string();
            assert!(error.contains("instance"), "{bad:?}: {error}");
        }
    }
}
