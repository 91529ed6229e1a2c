//! What a sandbox's three objects look like: the Secret `<base>-env`, the
//! claim `<base>-workspace` (session and workflow only) and the Deployment
//! `<base>` — all from the daemon's configuration and the request.
//!
//! The token reaches the pod only through the Secret (`secretKeyRef`); the
//! Deployment carries its SHA-256 in an annotation, never the token, so a
//! stopped sandbox whose token changed is updated before it is scaled up.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, LocalObjectReference,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSpec,
    PodTemplateSpec, ResourceRequirements, Secret, SecretKeySelector, SecurityContext, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::ByteString;
use sandboxd_protocol::{naming, SandboxEnv, Scope};

use crate::drivers::differs::token_digest;

use crate::config::Config;
use crate::instance::Instance;
use crate::sandbox_key::SandboxKey;

/// The field manager of every write: a human's `kubectl scale` or label is
/// another manager's field, and sandboxd's own fields are restored by its
/// next apply.
pub const FIELD_MANAGER: &str = "sandboxd";

/// A merge patch's parameters (the scale subresource's too), written in
/// the daemon's name.
pub fn merge_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..kube::api::PatchParams::default()
    }
}
/// The Secret's one key, named after the variable it becomes.
pub const TOKEN_KEY: &str = "STIGMER_TOKEN";
/// Where the workspace is mounted in the runner container.
pub const WORKSPACE: &str = "/workspace";
/// The runner container's name.
pub const CONTAINER: &str = "runner";
/// The pod's volume that holds the workspace.
const WORKSPACE_VOLUME: &str = "workspace";

/// SHA-256 of the token the Deployment's pods read — never the token.
pub const ANNOTATION_TOKEN_SHA256: &str = "stigmer.ai/token-sha256";
/// The task queue in the pod template's environment.
pub const ANNOTATION_TASK_QUEUE: &str = "stigmer.ai/task-queue";
/// The class of caller that provisioned it (recorded, not acted on).
pub const ANNOTATION_CALLER_CLASS: &str = "stigmer.ai/caller-class";
/// How many runners the sandbox has had: 1 at creation, +1 per scale-up.
pub const ANNOTATION_GENERATION: &str = "stigmer.ai/generation";
/// Why the daemon stopped a generation (scaled it to 0) by itself:
/// `lifetime <generation> <unix ms>` (see `lifetime`). Written with the
/// scale-down, never removed: it names the generation it is about, so the
/// next scale-up's generation is not taken for stopped.
pub const ANNOTATION_STOPPED_FOR: &str = "stigmer.ai/stopped-for";

/// The runner-shaping part of the configuration, resolved once.
#[derive(Debug, Clone)]
pub struct RunnerShape {
    pub image: String,
    pub namespace: String,
    pub command: Option<Vec<String>>,
    pub cpu_request: String,
    pub memory_request: String,
    pub cpu_limit: String,
    pub memory_limit: String,
    pub workspace_size: String,
    pub storage_class: Option<String>,
    pub image_pull_policy: String,
    pub image_pull_secrets: Vec<String>,
    /// `[kubernetes] runtime_class`: the pod's `runtimeClassName`.
    pub runtime_class: Option<String>,
    /// The pod's termination grace, in whole seconds (the daemon's stop_grace).
    pub stop_grace_secs: i64,
    pub backend_endpoint: String,
    pub temporal_address: String,
    /// `[runner] env`: after the contract's and the limits'.
    pub extra_env: Vec<(String, String)>,
}

/// The Deployment's name: the base name, prefixed by a named instance's
/// name (see [`Instance`]), so two daemons' objects never collide. Every
/// other object's name is this with a suffix.
pub fn object_name(key: &SandboxKey) -> String {
    Instance::current().object_name(&key.base_name)
}

pub fn secret_name(key: &SandboxKey) -> String {
    format!("{}-env", object_name(key))
}

pub fn claim_name(key: &SandboxKey) -> String {
    format!("{}-workspace", object_name(key))
}

/// Session and workflow sandboxes keep their workspace across runners;
/// connect sandboxes get a scratch one.
pub fn has_claim(scope: Scope) -> bool {
    scope != Scope::Connect
}

/// The three labels, and a named instance's label, as every object and
/// the selector carry them.
pub fn labels(key: &SandboxKey) -> BTreeMap<String, String> {
    naming::labels(key.scope, &key.id)
        .into_iter()
        .chain(Instance::current().label())
        .map(|(name, value)| (name.to_string(), value))
        .collect()
}

impl RunnerShape {
    /// Fails with a clear message when no runner image is configured.
    pub fn from_config(config: &Config) -> Result<RunnerShape, String> {
        let image = config.required_runner_image("kubernetes")?;
        let k8s = &config.kubernetes;
        Ok(RunnerShape {
            image,
            namespace: k8s.namespace.clone(),
            command: k8s.command.clone(),
            cpu_request: k8s.cpu_request.clone(),
            memory_request: k8s.memory_request.clone(),
            cpu_limit: k8s.cpu_limit.clone(),
            memory_limit: k8s.memory_limit.clone(),
            workspace_size: k8s.workspace_size.clone(),
            storage_class: k8s.storage_class.clone(),
            image_pull_policy: k8s.image_pull_policy.clone(),
            image_pull_secrets: k8s.image_pull_secrets.clone(),
            runtime_class: k8s.runtime_class.clone(),
            stop_grace_secs: config.stop_grace.as_secs_f64().ceil() as i64,
            backend_endpoint: config.backend_endpoint.clone(),
            temporal_address: config.temporal_address.clone(),
            extra_env: config.runner_env.clone(),
        })
    }

    fn metadata(&self, name: String, key: &SandboxKey) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(labels(key)),
            ..ObjectMeta::default()
        }
    }

    /// The Secret: the token under [`TOKEN_KEY`], or no data when tokenless.
    pub fn secret(&self, key: &SandboxKey, env: &SandboxEnv) -> Secret {
        let data = (!env.stigmer_token.is_empty()).then(|| {
            BTreeMap::from([(
                TOKEN_KEY.to_string(),
                ByteString(env.stigmer_token.expose().as_bytes().to_vec()),
            )])
        });
        Secret {
            metadata: self.metadata(secret_name(key), key),
            type_: Some("Opaque".to_string()),
            data,
            ..Secret::default()
        }
    }

    /// The workspace claim: ReadWriteOnce, `workspace_size`.
    pub fn claim(&self, key: &SandboxKey) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: self.metadata(claim_name(key), key),
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".to_string()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        Quantity(self.workspace_size.clone()),
                    )])),
                    ..VolumeResourceRequirements::default()
                }),
                storage_class_name: self.storage_class.clone(),
                ..PersistentVolumeClaimSpec::default()
            }),
            ..PersistentVolumeClaim::default()
        }
    }

    /// The Deployment at `generation`. `replicas` is set only when it is
    /// created: afterwards the count is changed through the scale
    /// subresource alone, so an apply never fights whoever scaled it.
    pub fn deployment(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
        generation: u64,
        replicas: Option<i32>,
    ) -> Deployment {
        let mut metadata = self.metadata(object_name(key), key);
        metadata.annotations = Some(BTreeMap::from([
            (
                ANNOTATION_TOKEN_SHA256.to_string(),
                token_digest(&env.stigmer_token),
            ),
            (ANNOTATION_TASK_QUEUE.to_string(), env.task_queue.clone()),
            (
                ANNOTATION_CALLER_CLASS.to_string(),
                env.caller_class.clone(),
            ),
            (ANNOTATION_GENERATION.to_string(), generation.to_string()),
        ]));
        Deployment {
            metadata,
            spec: DeploymentSpec {
                replicas,
                strategy: Some(DeploymentStrategy {
                    type_: Some("Recreate".to_string()),
                    rolling_update: None,
                }),
                selector: LabelSelector {
                    match_labels: Some(labels(key)),
                    match_expressions: None,
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels(key)),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(self.pod(key, env)),
                },
                ..DeploymentSpec::default()
            },
            ..Deployment::default()
        }
    }

    fn pod(&self, key: &SandboxKey, env: &SandboxEnv) -> PodSpec {
        let workspace = if has_claim(key.scope) {
            Volume {
                name: WORKSPACE_VOLUME.to_string(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim_name(key),
                    read_only: None,
                }),
                ..Volume::default()
            }
        } else {
            Volume {
                name: WORKSPACE_VOLUME.to_string(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            }
        };
        let quantities = |cpu: &str, memory: &str| {
            Some(BTreeMap::from([
                ("cpu".to_string(), Quantity(cpu.to_string())),
                ("memory".to_string(), Quantity(memory.to_string())),
            ]))
        };
        let pull_secrets = (!self.image_pull_secrets.is_empty()).then(|| {
            self.image_pull_secrets
                .iter()
                .map(|name| LocalObjectReference { name: name.clone() })
                .collect()
        });
        PodSpec {
            automount_service_account_token: Some(false),
            termination_grace_period_seconds: Some(self.stop_grace_secs),
            image_pull_secrets: pull_secrets,
            runtime_class_name: self.runtime_class.clone(),
            containers: vec![Container {
                name: CONTAINER.to_string(),
                image: Some(self.image.clone()),
                image_pull_policy: Some(self.image_pull_policy.clone()),
                command: self.command.clone(),
                working_dir: Some(WORKSPACE.to_string()),
                env: Some(self.runner_env(key, env)),
                resources: Some(ResourceRequirements {
                    requests: quantities(&self.cpu_request, &self.memory_request),
                    limits: quantities(&self.cpu_limit, &self.memory_limit),
                    ..ResourceRequirements::default()
                }),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    capabilities: Some(Capabilities {
                        add: None,
                        drop: Some(vec!["ALL".to_string()]),
                    }),
                    ..SecurityContext::default()
                }),
                volume_mounts: Some(vec![VolumeMount {
                    name: WORKSPACE_VOLUME.to_string(),
                    mount_path: WORKSPACE.to_string(),
                    ..VolumeMount::default()
                }]),
                ..Container::default()
            }],
            volumes: Some(vec![workspace]),
            ..PodSpec::default()
        }
    }

    /// The runner's environment contract (SPEC §5), the token by reference.
    fn runner_env(&self, key: &SandboxKey, env: &SandboxEnv) -> Vec<EnvVar> {
        let value = |name: &str, value: &str| EnvVar {
            name: name.to_string(),
            value: Some(value.to_string()),
            value_from: None,
        };
        let mut vars = vec![
            value("MODE", "local"),
            value("STIGMER_TASK_QUEUE", &env.task_queue),
            value("WORKSPACE_ROOT_DIR", WORKSPACE),
            value("HOME", WORKSPACE),
        ];
        if !self.backend_endpoint.is_empty() {
            vars.push(value("STIGMER_BACKEND_ENDPOINT", &self.backend_endpoint));
        }
        if !self.temporal_address.is_empty() {
            vars.push(value("TEMPORAL_SERVICE_ADDRESS", &self.temporal_address));
        }
        if !env.stigmer_token.is_empty() {
            vars.push(EnvVar {
                name: TOKEN_KEY.to_string(),
                value: None,
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret_name(key),
                        key: TOKEN_KEY.to_string(),
                        optional: Some(false),
                    }),
                    ..EnvVarSource::default()
                }),
            });
        }
        vars.extend(super::limit_env::limit_vars(&self.cpu_limit));
        vars.extend(self.extra_env.iter().map(|(name, text)| value(name, text)));
        vars
    }
}

#[cfg(test)]
mod tests {
    use sandboxd_protocol::Token;

    use super::*;

    fn shape() -> RunnerShape {
        RunnerShape {
            image: "runner:1".to_string(),
            namespace: "ns".to_string(),
            command: None,
            cpu_request: "500m".to_string(),
            memory_request: "512Mi".to_string(),
            cpu_limit: "2".to_string(),
            memory_limit: "2Gi".to_string(),
            workspace_size: "10Gi".to_string(),
            storage_class: None,
            image_pull_policy: "IfNotPresent".to_string(),
            image_pull_secrets: vec![],
            runtime_class: None,
            stop_grace_secs: 10,
            backend_endpoint: "http://backend:1".to_string(),
            temporal_address: String::new(),
            extra_env: vec![("EMAIL".to_string(), "dev@example.com".to_string())],
        }
    }

    fn env(token: &str) -> SandboxEnv {
        SandboxEnv {
            task_queue: "session:s".to_string(),
            stigmer_token: Token::new(token),
            caller_class: "user".to_string(),
        }
    }

    /// What a Deployment is made with is what an ensure of it compares to:
    /// the same env differs in nothing, another token is named (by the
    /// digest annotation, in hex).
    #[test]
    fn a_deployment_differs_from_an_env_only_where_the_env_changed() {
        let key = SandboxKey::new(Scope::Session, "s");
        let deployment = shape().deployment(&key, &env("tok-xyz"), 1, Some(1));
        assert!(super::super::observe::differs_from(&deployment, &env("tok-xyz")).is_empty());
        assert_eq!(
            super::super::observe::differs_from(&deployment, &env("tok-other")),
            ["token"]
        );
    }

    #[test]
    fn the_token_is_in_the_secret_and_only_referenced_by_the_deployment() {
        let key = SandboxKey::new(Scope::Session, "s");
        let shape = shape();
        let deployment =
            serde_json::to_string(&shape.deployment(&key, &env("tok-xyz"), 1, Some(1))).unwrap();
        assert!(!deployment.contains("tok-xyz"), "{deployment}");
        assert!(deployment.contains("secretKeyRef"), "{deployment}");
        let secret = shape.secret(&key, &env("tok-xyz"));
        assert_eq!(
            secret.data.unwrap()[TOKEN_KEY].0,
            b"tok-xyz".to_vec(),
            "the Secret holds it"
        );
        let tokenless = shape.deployment(&key, &env(""), 1, Some(1));
        let text = serde_json::to_string(&tokenless).unwrap();
        assert!(!text.contains("STIGMER_TOKEN"), "{text}");
        assert!(
            !text.contains("TEMPORAL_SERVICE_ADDRESS"),
            "empty is unset: {text}"
        );
        assert!(shape.secret(&key, &env("")).data.is_none());
    }

    #[test]
    fn the_runner_is_told_its_limits_and_gets_runner_env() {
        let key = SandboxKey::new(Scope::Session, "s");
        let deployment = shape().deployment(&key, &env(""), 1, Some(1));
        let text = serde_json::to_string(&deployment).unwrap();
        assert!(
            text.contains(r#"{"name":"SANDBOXD_CPU_QUOTA","value":"2"}"#),
            "{text}"
        );
        assert!(text.contains(r#""resource":"limits.memory""#), "{text}");
        assert!(
            text.contains(r#"{"name":"EMAIL","value":"dev@example.com"}"#),
            "{text}"
        );
    }

    #[test]
    fn the_runtime_class_is_named_only_when_configured() {
        let key = SandboxKey::new(Scope::Session, "s");
        let pod = |shape: RunnerShape| {
            shape
                .deployment(&key, &env(""), 1, Some(1))
                .spec
                .template
                .spec
                .unwrap()
        };
        assert_eq!(pod(shape()).runtime_class_name, None);
        let gvisor = RunnerShape {
            runtime_class: Some("gvisor".to_string()),
            ..shape()
        };
        assert_eq!(pod(gvisor).runtime_class_name.as_deref(), Some("gvisor"));
    }

    #[test]
    fn connect_sandboxes_get_an_empty_dir() {
        let key = SandboxKey::new(Scope::Connect, "c");
        let deployment = shape().deployment(&key, &env(""), 1, Some(1));
        let pod = deployment.spec.template.spec.unwrap();
        let volume = &pod.volumes.unwrap()[0];
        assert!(volume.empty_dir.is_some() && volume.persistent_volume_claim.is_none());
    }
}
