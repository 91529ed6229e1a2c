//! The kubernetes row: ensure of a new sandbox through sandboxd (under the
//! default egress posture, `relaxed`) against the same four writes (apply
//! the Secret, create the claim, apply the NetworkPolicy, apply the
//! Deployment) made straight to the API server with the same client
//! library (`kube`), the same identity and objects of the same shape;
//! then the fast path (one GET) and probe against a bare GET of the
//! Deployment. One of each per round, taking turns at going first.
//!
//! Against the in-process STAND-IN API server unless
//! `SANDBOXD_TEST_KUBECONFIG` names a real cluster: the stand-in's figures
//! say only that the row runs (it answers from memory, with no etcd, no
//! admission and no controllers), and the table says which was used.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use sandboxd_client::{ProbeState, SandboxdClient, Scope};
use sandboxd_tests::k8s::REAL_CLUSTER_ENV;
use sandboxd_tests::k8s_standin::StandIn;
use serde_json::json;

use crate::report::{Goal, Row};
use crate::rows::sandbox_env;
use crate::setup::{Binaries, Daemon};
use crate::stats::Samples;

const IMAGE: &str = "sandboxd-bench-runner:k8s";

pub struct KubernetesFigures {
    /// "the stand-in …" or "the real cluster of …".
    pub cluster: String,
    pub sandboxd_new: Samples,
    pub direct_new: Samples,
    pub fast: Samples,
    pub probe: Samples,
    pub direct_get: Samples,
}

async fn client_from(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(path)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Measures `count` new sandboxes each way and `calls` fast paths, probes and GETs.
pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    count: usize,
    calls: usize,
) -> anyhow::Result<KubernetesFigures> {
    let (standin, kubeconfig, cluster) = match std::env::var(REAL_CLUSTER_ENV)
        .ok()
        .filter(|value| !value.is_empty())
    {
        Some(path) => {
            let description = format!("the real cluster of {path}");
            (None, path.into(), description)
        }
        None => {
            let standin = StandIn::start();
            // The bench's own client and the daemon use one identity.
            let (daemon_kubeconfig, _) = standin.write_kubeconfigs(dir);
            let description = format!(
                "the in-process STAND-IN API server at {} (figures meaningless; set {REAL_CLUSTER_ENV} for a real cluster)",
                standin.url()
            );
            (Some(standin), daemon_kubeconfig, description)
        }
    };
    let client = client_from(&kubeconfig).await?;
    let namespace = format!("sbxbench-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let object: Namespace =
        serde_json::from_value(json!({"metadata": {"name": namespace}})).expect("a namespace");
    namespaces
        .create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("create namespace {namespace} on {cluster}"))?;
    let mut daemon = Daemon::start_with(
        dir,
        "kubernetes-",
        binaries,
        &format!(
            "driver = \"kubernetes\"\nrunner_image = \"{IMAGE}\"\n\
             kubernetes = {{ kubeconfig = \"{}\", namespace = \"{namespace}\" }}\n",
            kubeconfig.display()
        ),
    )?;
    let daemon_client = SandboxdClient::connect(&daemon.socket)
        .await
        .context("connect to the kubernetes-tier daemon")?
        .with_deadline(Duration::from_secs(60));
    let result = rounds(&daemon_client, &client, &namespace, count, calls).await;
    drop(daemon_client);
    let _ = daemon.stop();
    let _ = namespaces
        .delete(&namespace, &DeleteParams::default())
        .await;
    drop(standin);
    result.map(
        |(sandboxd_new, direct_new, fast, probe, direct_get)| KubernetesFigures {
            cluster,
            sandboxd_new,
            direct_new,
            fast,
            probe,
            direct_get,
        },
    )
}

type Figures = (Samples, Samples, Samples, Samples, Samples);

async fn rounds(
    daemon: &SandboxdClient,
    client: &kube::Client,
    namespace: &str,
    count: usize,
    calls: usize,
) -> anyhow::Result<Figures> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    let apply = PatchParams::apply("sandboxd-bench").force();
    let create = PostParams {
        field_manager: Some("sandboxd-bench".to_string()),
        ..PostParams::default()
    };
    let (mut sandboxd_new, mut direct_new) = (Samples::default(), Samples::default());
    for i in 0..=count {
        let record = i > 0;
        for way in (0..2).map(|k| (k + i) % 2) {
            let id = format!("bench-k8s-{i}");
            let started = Instant::now();
            if way == 0 {
                let report = daemon
                    .ensure_session_sandbox(&id, &sandbox_env(&id))
                    .await
                    .with_context(|| format!("ensure {id} through the kubernetes tier"))?;
                if !report.created {
                    bail!("ensure of new sandbox {id} took the fast path");
                }
            } else {
                let name = format!("sbxbench-{i}");
                let (secret, claim, deployment) = objects(&name, &id);
                secrets
                    .patch(&format!("{name}-env"), &apply, &Patch::Apply(&secret))
                    .await?;
                claims.create(&create, &claim).await?;
                policies
                    .patch(
                        &format!("{name}-egress"),
                        &apply,
                        &Patch::Apply(&policy(&name, &id)),
                    )
                    .await?;
                deployments
                    .patch(&name, &apply, &Patch::Apply(&deployment))
                    .await?;
            }
            if record {
                [&mut sandboxd_new, &mut direct_new][way].push(started.elapsed());
            }
        }
    }
    let hot = "bench-k8s-1";
    let hot_name = sandboxd_protocol::naming::base_name(Scope::Session, hot);
    let (mut fast, mut probe, mut get) =
        (Samples::default(), Samples::default(), Samples::default());
    for i in 0..calls {
        for way in (0..3).map(|k| (k + i) % 3) {
            let started = Instant::now();
            match way {
                0 => {
                    let report = daemon
                        .ensure_session_sandbox(hot, &sandbox_env(hot))
                        .await?;
                    if report.created {
                        bail!("the fast path of {hot} made something");
                    }
                }
                1 => {
                    if daemon.probe(Scope::Session, hot).await? != ProbeState::Running {
                        bail!("{hot} is not running");
                    }
                }
                _ => {
                    deployments.get(&hot_name).await?;
                }
            }
            [&mut fast, &mut probe, &mut get][way].push(started.elapsed());
        }
    }
    Ok((sandboxd_new, direct_new, fast, probe, get))
}

/// The sandbox's NetworkPolicy as the tier shapes it under `relaxed`
/// (the ranges from the protocol's one table), under the bench's labels.
fn policy(name: &str, id: &str) -> NetworkPolicy {
    let labels = json!({"bench.sandboxd/managed-by": "bench", "bench.sandboxd/scope": "session", "bench.sandboxd/sandbox-id": id});
    let refused = |v4: bool| -> Vec<String> {
        sandboxd_protocol::egress::Posture::Relaxed
            .refused_ranges()
            .filter(|range| range.network.is_ipv4() == v4)
            .map(|range| range.to_string())
            .collect()
    };
    let policy = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": format!("{name}-egress"), "labels": labels},
        "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Egress"],
            "egress": [
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": refused(true)}},
                        {"ipBlock": {"cidr": "::/0", "except": refused(false)}}]},
                {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                         "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                 "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]}});
    serde_json::from_value(policy).expect("a NetworkPolicy")
}

/// A sandbox's three objects as the tier shapes them, under the bench's
/// own label keys so the daemon never counts them as its own.
fn objects(name: &str, id: &str) -> (Secret, PersistentVolumeClaim, Deployment) {
    let labels = json!({"bench.sandboxd/managed-by": "bench", "bench.sandboxd/scope": "session", "bench.sandboxd/sandbox-id": id});
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{name}-env"), "labels": labels},
        "type": "Opaque", "data": {"STIGMER_TOKEN": "dG9rLWJlbmNo"}});
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": format!("{name}-workspace"), "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}});
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"bench.sandboxd/token-sha256": "0".repeat(64), "bench.sandboxd/task-queue": format!("session:{id}"),
                                     "bench.sandboxd/caller-class": "user", "bench.sandboxd/generation": "1"}},
        "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "automountServiceAccountToken": false, "terminationGracePeriodSeconds": 10,
                "containers": [{"name": "runner", "image": IMAGE, "imagePullPolicy": "IfNotPresent", "workingDir": "/workspace",
                    "env": [{"name": "MODE", "value": "local"}, {"name": "STIGMER_TASK_QUEUE", "value": format!("session:{id}")},
                            {"name": "WORKSPACE_ROOT_DIR", "value": "/workspace"}, {"name": "HOME", "value": "/workspace"},
                            {"name": "STIGMER_TOKEN", "valueFrom": {"secretKeyRef": {"name": format!("{name}-env"), "key": "STIGMER_TOKEN", "optional": false}}}],
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "2Gi"}},
                    "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "workspace", "mountPath": "/workspace"}]}],
                "volumes": [{"name": "workspace", "persistentVolumeClaim": {"claimName": format!("{name}-workspace")}}]}}}});
    (
        serde_json::from_value(secret).expect("a Secret"),
        serde_json::from_value(claim).expect("a claim"),
        serde_json::from_value(deployment).expect("a Deployment"),
    )
}

/// The kubernetes row's figures as table rows, and a note on where they came from.
pub fn rows(figures: &KubernetesFigures) -> (Vec<Row>, String) {
    let ms = |samples: &Samples, p: f64| samples.percentile_us(p) / 1e3;
    let rows = vec![
        Row {
            row: "k8s",
            what: "ensure new sandbox p50".into(),
            unit: "ms",
            value: ms(&figures.sandboxd_new, 50.0),
            baseline_what: "the 4 writes with kube p50".into(),
            baseline: Some(ms(&figures.direct_new, 50.0)),
            goal: Goal::RatioAtMost(1.1),
        },
        Row {
            row: "k8s",
            what: "ensure fast path p50".into(),
            unit: "ms",
            value: ms(&figures.fast, 50.0),
            baseline_what: "GET deployment with kube p50".into(),
            baseline: Some(ms(&figures.direct_get, 50.0)),
            goal: Goal::Info,
        },
        Row {
            row: "k8s",
            what: "probe p50".into(),
            unit: "ms",
            value: ms(&figures.probe, 50.0),
            baseline_what: "GET deployment with kube p50".into(),
            baseline: Some(ms(&figures.direct_get, 50.0)),
            goal: Goal::Info,
        },
    ];
    let note = format!(
        "measured against {}: {} new sandboxes each way, {} fast paths, probes and GETs",
        figures.cluster,
        figures.sandboxd_new.len(),
        figures.fast.len()
    );
    (rows, note)
}
