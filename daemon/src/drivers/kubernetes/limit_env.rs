//! The runner container's limits in its environment, as the process tier
//! tells its sandboxes theirs (`free` in a pod shows the node's memory):
//! the memory limit by the downward API (the kubelet writes the bytes, so
//! no quantity is parsed here), the cpu limit as CPUs. No pids or disk
//! figure: a pod spec sets neither.

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ResourceFieldSelector};

use crate::config::LIMIT_VARIABLES;

/// The variables for a runner container whose cpu limit is `cpu_limit`
/// (a quantity: `2`, `1.5`, `500m`); one the daemon cannot read as a
/// number of CPUs is left out rather than guessed.
pub fn limit_vars(cpu_limit: &str) -> Vec<EnvVar> {
    let [memory, cpu, _, _] = LIMIT_VARIABLES;
    let mut vars = vec![EnvVar {
        name: memory.to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            resource_field_ref: Some(ResourceFieldSelector {
                resource: "limits.memory".to_string(),
                ..ResourceFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
    }];
    if let Some(cpus) = cpus_of(cpu_limit) {
        vars.push(EnvVar {
            name: cpu.to_string(),
            value: Some(cpus.to_string()),
            value_from: None,
        });
    }
    vars
}

/// CPUs of a cpu quantity in its plain forms (`2`, `1.5`, `500m`).
fn cpus_of(quantity: &str) -> Option<f64> {
    let cpus = match quantity.strip_suffix('m') {
        Some(millis) => millis.parse::<u64>().ok()? as f64 / 1000.0,
        None => quantity.parse::<f64>().ok()?,
    };
    (cpus.is_finite() && cpus > 0.0).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_quantities_read_as_cpus_and_odd_ones_are_left_out() {
        assert_eq!(cpus_of("2"), Some(2.0));
        assert_eq!(cpus_of("1.5"), Some(1.5));
        assert_eq!(cpus_of("500m"), Some(0.5));
        assert_eq!(cpus_of("1k"), None);
        assert_eq!(cpus_of("0"), None);
        let vars = limit_vars("1500m");
        assert_eq!(vars[0].name, "SANDBOXD_MEMORY_LIMIT_BYTES");
        assert_eq!(
            vars[0]
                .value_from
                .as_ref()
                .unwrap()
                .resource_field_ref
                .as_ref()
                .unwrap()
                .resource,
            "limits.memory"
        );
        assert_eq!(vars[1].name, "SANDBOXD_CPU_QUOTA");
        assert_eq!(vars[1].value.as_deref(), Some("1.5"));
        assert_eq!(limit_vars("1k").len(), 1);
    }
}
