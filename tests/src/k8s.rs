//! The cluster a kubernetes test runs against: the in-process stand-in API
//! server ([`crate::k8s_standin`]), or a real cluster when
//! `SANDBOXD_TEST_KUBECONFIG` names its kubeconfig. Each test gets a
//! namespace of its own, deleted when it ends, and prints which cluster it
//! ran against. Tests of what only the stand-in can do (stop the API
//! server, insert a pod, hold the daemon to a Role) say so and skip on a
//! real cluster.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::daemon::Options;
use crate::k8s_standin::{Rule, StandIn};
use crate::make_test_dir;

/// The variable that points the tests at a real cluster.
pub const REAL_CLUSTER_ENV: &str = "SANDBOXD_TEST_KUBECONFIG";

/// The image named in every test Deployment (no pod runs it on the stand-in).
pub const TEST_IMAGE: &str = "sandboxd-test-runner:k8s";

pub struct TestCluster {
    standin: Option<StandIn>,
    /// The kubeconfig the daemon is given.
    pub daemon_kubeconfig: PathBuf,
    /// The test's own client (allowed everything).
    pub admin: kube::Client,
    pub namespace: String,
    /// "the stand-in API server at …" or "the real cluster of …".
    pub description: String,
    /// Removed with the cluster (it holds the stand-in's kubeconfigs,
    /// credentials: 0600).
    dir: crate::ScratchDir,
    /// The admin's kubeconfig (its cluster is copied into a restricted one).
    admin_kubeconfig: PathBuf,
}

/// The ServiceAccount a restricted daemon runs as on a real cluster.
const RESTRICTED: &str = "sandboxd-restricted";

async fn client_from(path: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(path)
        .unwrap_or_else(|error| panic!("read kubeconfig {}: {error}", path.display()));
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|error| panic!("kubeconfig {}: {error}", path.display()));
    kube::Client::try_from(config).expect("a client")
}

/// A namespace name no other test (or earlier run) uses.
fn unique_namespace(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let test: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(30)
        .collect();
    format!(
        "sbxt-{}-{}-{nanos:x}",
        test.trim_matches('-'),
        std::process::id()
    )
}

/// Says once per test binary, past the test harness's output capture (it
/// takes only `print!`/`eprint!`), which kind of API server the kubernetes
/// tests ran against, so a CI log shows it for passing tests too.
fn announce(description: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use std::io::Write as _;
        let kind = if description.contains("STAND-IN") {
            "the in-process STAND-IN API server (no real cluster: SANDBOXD_TEST_KUBECONFIG is unset)"
        } else {
            description
        };
        let _ = writeln!(std::io::stderr(), "kubernetes tests run against {kind}");
    });
}

/// Says that (part of) a test was skipped and why, past the test
/// harness's output capture, so a passing run's log shows it too.
pub fn skipped(why: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED {why}");
}

impl TestCluster {
    /// The stand-in (or the real cluster), with a fresh namespace for `test`.
    pub async fn start(test: &str) -> TestCluster {
        let dir = make_test_dir();
        let (standin, daemon_kubeconfig, admin_kubeconfig, description): (_, PathBuf, PathBuf, _) =
            match std::env::var(REAL_CLUSTER_ENV)
                .ok()
                .filter(|value| !value.is_empty())
            {
                Some(path) => {
                    let path = PathBuf::from(path);
                    let description = format!("the real cluster of {}", path.display());
                    (None, path.clone(), path, description)
                }
                None => {
                    let standin = StandIn::start();
                    let (daemon, admin) = standin.write_kubeconfigs(&dir);
                    let description = format!(
                        "the in-process STAND-IN API server at {} (set {REAL_CLUSTER_ENV} for a real cluster)",
                        standin.url()
                    );
                    (Some(standin), daemon, admin, description)
                }
            };
        let admin = client_from(&admin_kubeconfig).await;
        let namespace = unique_namespace(test);
        let namespaces: Api<Namespace> = Api::all(admin.clone());
        let object: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}
        }))
        .expect("a namespace");
        namespaces
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|error| panic!("create namespace {namespace}: {error}"));
        eprintln!("kubernetes test '{test}' runs against {description}, in namespace {namespace}");
        announce(&description);
        TestCluster {
            standin,
            daemon_kubeconfig,
            admin,
            namespace,
            description,
            dir,
            admin_kubeconfig,
        }
    }

    /// Holds the daemon's identity to `rules` in this namespace from now on
    /// (`None`: everything). On the stand-in, its Role; on a real cluster,
    /// a ServiceAccount bound to a Role of these rules, whose token (from a
    /// TokenRequest) goes into a kubeconfig the daemon is then given: call
    /// it before [`TestCluster::daemon_options`], and again to change the rules.
    pub async fn restrict(&mut self, rules: Option<Vec<Rule>>) {
        if let Some(standin) = &self.standin {
            match rules {
                Some(rules) => standin.set_role(rules),
                None => standin.allow_everything(),
            }
            return;
        }
        let rules = rules.unwrap_or_else(|| vec![Rule::new(&["*"], &["*"])]);
        let rules: Vec<serde_json::Value> = rules
            .iter()
            .map(|rule| {
                let group = if rule.resources.iter().any(|r| r.starts_with("deployments")) {
                    "apps"
                } else if rule.resources.iter().any(|r| r == "networkpolicies") {
                    "networking.k8s.io"
                } else if rule.resources.iter().any(|r| r == "*") {
                    "*"
                } else {
                    ""
                };
                serde_json::json!({"apiGroups": [group], "resources": rule.resources, "verbs": rule.verbs})
            })
            .collect();
        let apply = kube::api::PatchParams::apply("sandboxd-tests").force();
        let namespace = self.namespace.clone();
        let dynamic = |api_version: &str, kind: &str, plural: &str| {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let resource = kube::api::ApiResource {
                group: group.to_string(),
                version: version.to_string(),
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                plural: plural.to_string(),
            };
            Api::<kube::api::DynamicObject>::namespaced_with(
                self.admin.clone(),
                &namespace,
                &resource,
            )
        };
        let objects = [
            (
                "v1",
                "ServiceAccount",
                "serviceaccounts",
                serde_json::json!({}),
            ),
            (
                "rbac.authorization.k8s.io/v1",
                "Role",
                "roles",
                serde_json::json!({"rules": rules}),
            ),
            (
                "rbac.authorization.k8s.io/v1",
                "RoleBinding",
                "rolebindings",
                serde_json::json!({
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RESTRICTED},
                    "subjects": [{"kind": "ServiceAccount", "name": RESTRICTED, "namespace": namespace}],
                }),
            ),
        ];
        for (api_version, kind, plural, body) in objects {
            let mut object = serde_json::json!({
                "apiVersion": api_version, "kind": kind,
                "metadata": {"name": RESTRICTED, "namespace": namespace},
            });
            crate::k8s::merge_into(&mut object, body);
            let object: kube::api::DynamicObject =
                serde_json::from_value(object).expect("an object");
            dynamic(api_version, kind, plural)
                .patch(RESTRICTED, &apply, &kube::api::Patch::Apply(&object))
                .await
                .unwrap_or_else(|error| panic!("apply {kind} {RESTRICTED}: {error}"));
        }
        let restricted = self.dir.join("kubeconfig-restricted");
        if self.daemon_kubeconfig == restricted {
            return;
        }
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.admin.clone(), &self.namespace);
        let request: k8s_openapi::api::authentication::v1::TokenRequest = serde_json::from_value(
            serde_json::json!({"spec": {"audiences": [], "expirationSeconds": 3600}}),
        )
        .expect("a token request");
        let token = accounts
            .create_token_request(RESTRICTED, &PostParams::default(), &request)
            .await
            .expect("a token for the restricted ServiceAccount")
            .status
            .expect("the token")
            .token;
        let admin = Kubeconfig::read_from(&self.admin_kubeconfig).expect("the admin kubeconfig");
        let context = admin
            .current_context
            .as_ref()
            .and_then(|name| admin.contexts.iter().find(|context| &context.name == name))
            .and_then(|context| context.context.as_ref())
            .map(|context| context.cluster.clone())
            .unwrap_or_default();
        let cluster = admin
            .clusters
            .iter()
            .find(|cluster| cluster.name == context)
            .or(admin.clusters.first())
            .expect("a cluster in the admin kubeconfig");
        // JSON is YAML: the kubeconfig of the restricted account.
        let kubeconfig = serde_json::json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": RESTRICTED, "user": {"token": token}}],
            "contexts": [{"name": RESTRICTED, "context": {"cluster": cluster.name, "user": RESTRICTED}}],
            "current-context": RESTRICTED,
        });
        crate::k8s_standin::write_secret(&restricted, &kubeconfig.to_string());
        self.daemon_kubeconfig = restricted;
    }

    /// The stand-in, when the test runs against it; `None` (with a line
    /// saying what is skipped) on a real cluster.
    pub fn standin(&self, what: &str) -> Option<&StandIn> {
        if self.standin.is_none() {
            eprintln!("SKIPPED on {}: {what} needs the stand-in", self.description);
        }
        self.standin.as_ref()
    }

    /// Waits until `daemon`'s watches on its Deployments and pods have made
    /// their first list (the event stream's source is up), so what a test
    /// does next is announced as new, never taken in as already there. On
    /// the stand-in, by its requests (a watch follows the list), so a
    /// request count taken now also holds none of their start-up requests;
    /// on a real cluster, whose requests cannot be seen, by the line the
    /// daemon logs after each first list.
    pub async fn wait_for_watches(&self, daemon: &crate::TestDaemon) {
        let open = crate::eventually(std::time::Duration::from_secs(60), || {
            let done = match &self.standin {
                Some(standin) => {
                    let seen = standin.seen();
                    let watching = |resource: &str| {
                        seen.iter().any(|seen| {
                            seen.user.contains("sandboxd")
                                && seen.verb == "watch"
                                && seen.resource == resource
                        })
                    };
                    watching("deployments") && watching("pods")
                }
                None => {
                    let log = daemon.log_since_launch();
                    ["deployments", "pods"].iter().all(|what| {
                        log.contains(&format!("listed the cluster's {what}; following them"))
                    })
                }
            };
            async move { done }
        })
        .await;
        let seen = self.standin.as_ref().map(|standin| standin.seen());
        assert!(
            open,
            "the daemon's watches on deployments and pods did not start: {seen:?}\n{}",
            daemon.log_since_launch()
        );
    }

    /// Why no kubelet can run this cluster's pods, or `None` when one can.
    /// The stand-in's pods/exec stands in for a kubelet; a real cluster
    /// needs a node that is `Ready` (a control plane alone, as in CI, has
    /// none: its pods stay Pending, and commands and file calls, which go
    /// through a kubelet's exec, cannot run).
    pub async fn no_kubelet(&self) -> Option<String> {
        use k8s_openapi::api::core::v1::Node;
        if self.standin.is_some() {
            return None;
        }
        let nodes: Api<Node> = Api::all(self.admin.clone());
        let nodes = nodes
            .list(&kube::api::ListParams::default())
            .await
            .unwrap_or_else(|error| panic!("list the nodes of {}: {error}", self.description))
            .items;
        let ready = nodes.iter().any(|node| {
            let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
            conditions
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
        (!ready).then(|| {
            format!(
                "{} has {} node(s) and none is Ready: no kubelet runs its pods",
                self.description,
                nodes.len()
            )
        })
    }

    /// The stand-in, when the test runs against it (no SKIPPED line: the
    /// caller does the same on a real cluster another way).
    pub fn standin_quietly(&self) -> Option<&StandIn> {
        self.standin.as_ref()
    }

    pub fn standin_mut(&mut self) -> Option<&mut StandIn> {
        self.standin.as_mut()
    }

    /// This test's own directory (kubeconfigs of the stand-in live there).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.admin.clone(), &self.namespace)
    }

    /// A daemon on the kubernetes driver, pointed at this cluster and namespace.
    pub fn daemon_options(&self, kubernetes_toml: &str) -> Options {
        // The stand-in answers at once; a real API server on this loaded
        // machine (etcd's fsyncs, other builds) has taken over 3 s for a delete.
        let timeout = if self.standin.is_some() { "3s" } else { "20s" };
        Options {
            args: vec!["--driver".to_string(), "kubernetes".to_string()],
            extra_toml: format!(
                "runner_image = \"{TEST_IMAGE}\"\nbackend_endpoint = \"http://backend.test:7080\"\n\
                 [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"{}\"\nrequest_timeout = \"{timeout}\"\n{kubernetes_toml}\n",
                self.daemon_kubeconfig.display(),
                self.namespace
            ),
            // The daemon's default posture, `relaxed`: every sandbox gets
            // its NetworkPolicy, as in production.
            ..Options::default()
        }
    }
}

/// Merges the keys of `extra` (a map) into `object` (a map).
fn merge_into(object: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(object), serde_json::Value::Object(extra)) = (object.as_object_mut(), extra) {
        object.extend(extra);
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if self.standin.is_some() {
            return;
        }
        // A real cluster: delete the namespace and everything in it.
        let (client, namespace) = (self.admin.clone(), self.namespace.clone());
        clean_up_from_drop(async move {
            let namespaces: Api<Namespace> = Api::all(client);
            let _ = namespaces
                .delete(&namespace, &DeleteParams::default())
                .await;
        });
    }
}

/// Runs `cleanup` to its end from a `Drop`, which may run inside a tokio
/// runtime (where blocking on one is refused): on a thread of its own,
/// with a runtime of its own, waited for.
pub fn clean_up_from_drop(cleanup: impl std::future::Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(cleanup);
    })
    .join();
}
