//! A STAND-IN for a Kubernetes API server, for tests only: not Kubernetes.
//!
//! No package registry reachable here ships a kube-apiserver, so the
//! kubernetes tier is tested against this in-process server on a loopback
//! port, reached through a generated kubeconfig exactly as a real cluster
//! would be. It implements what the tier touches, as the real server
//! behaves, and nothing more:
//!
//! - secrets, persistentvolumeclaims, pods, apps/v1 deployments and
//!   networking.k8s.io/v1 networkpolicies in namespaces; `resourceVersion` from one counter (etcd's revision),
//!   `uid`, `generation`, `creationTimestamp`;
//! - failures as `Status` objects: 404 NotFound (of the object, or of the
//!   namespace), 409 AlreadyExists / Conflict (stale resourceVersion, apply
//!   conflicts), 422 Invalid (names, label values, a Deployment's selector
//!   and its immutability, a claim's immutable spec, a NetworkPolicy's
//!   policy types, ports and `ipBlock`s), 401, 403;
//! - server-side apply with field managers ([fields]): ownership,
//!   conflicts and `force`, removal of fields a manager stops applying;
//!   merge patches and updates take ownership of what they change;
//! - the `scale` subresource, label selectors on list, deletes (a
//!   Deployment's pods go with it at once);
//! - `pods/log`, from output a test gives with [`StandIn::insert_pod`];
//! - `pods/exec` as a WebSocket ([exec]): NOT run in any container — the
//!   stand-in has no kubelet, so the argv runs as a local process of the
//!   test, to exercise the client's side of the streaming protocol, fenced
//!   ([kubelet]) so that it sees the pod's workspace (a directory of the
//!   test) at `/workspace` and can write nowhere else;
//! - the `status` subresource (a merge patch of `status`: what the kubelet
//!   writes, a test writes here);
//! - watches ([watch]): `?watch=1` from a `resourceVersion`, 410 `Expired`
//!   when it is older than the history kept;
//! - RBAC for the daemon's identity ([rbac]) and SelfSubjectAccessReview;
//! - node.k8s.io/v1 RuntimeClasses, cluster-wide ([runtime_class]): get,
//!   list, create, delete.
//!
//! Not simulated: controllers (no ReplicaSets; pods appear only when a test
//! inserts them), watch bookmarks, strategic merge (taken as a merge patch),
//! JSON patch, set-based selectors, admission, quotas, defaulting beyond
//! `spec.replicas`.

mod exec;
mod fields;
mod http;
mod kubelet;
mod network_policy;
mod rbac;
mod runtime_class;
mod selector;
mod status;
mod store;
mod terminal;
mod watch;
mod websocket;

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;

pub use rbac::Rule;
pub use store::Seen;
use store::Store;

/// A running stand-in API server, stopped when dropped.
pub struct StandIn {
    address: SocketAddr,
    store: Arc<Mutex<Store>>,
    frozen: Arc<std::sync::atomic::AtomicBool>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StandIn {
    /// Starts serving on a free loopback port, in a thread of its own.
    pub fn start() -> StandIn {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let address = listener.local_addr().expect("the listener's address");
        let store = Arc::new(Mutex::new(Store::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = store.clone();
        let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let frozen_flag = frozen.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the stand-in's runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                let accept = async {
                    loop {
                        let Ok((stream, _)) = listener.accept().await else {
                            continue;
                        };
                        let store = shared.clone();
                        let frozen = frozen_flag.clone();
                        tokio::spawn(async move {
                            let service = service_fn(move |request| {
                                http::serve(store.clone(), frozen.clone(), request)
                            });
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .with_upgrades()
                                .await;
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime closes every connection: the server is down.
        });
        StandIn {
            address,
            store,
            frozen,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Stops serving: new connections are refused and open ones closed,
    /// and the commands still running for `pods/exec` are killed.
    pub fn stop(&mut self) {
        exec::end_all(&std::mem::take(&mut self.store().execs));
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    fn kubeconfig(&self, token: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: {}\n\
             users:\n- name: {user}\n  user:\n    token: {token}\n\
             contexts:\n- name: stand-in\n  context:\n    cluster: stand-in\n    user: {user}\n\
             current-context: stand-in\n",
            self.url()
        )
    }

    /// Writes the daemon's kubeconfig (held to the Role of [`StandIn::set_role`])
    /// and the test's own (allowed everything) into `dir`: (daemon, admin).
    pub fn write_kubeconfigs(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let daemon = dir.join("kubeconfig-sandboxd");
        let admin = dir.join("kubeconfig-admin");
        write_secret(&daemon, &self.kubeconfig(rbac::DAEMON_TOKEN, "sandboxd"));
        write_secret(&admin, &self.kubeconfig(rbac::ADMIN_TOKEN, "admin"));
        (daemon, admin)
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Holds the daemon's identity to these rules from now on.
    pub fn set_role(&self, rules: Vec<Rule>) {
        self.store().role = Some(rules);
    }

    /// Lets the daemon's identity do everything again.
    pub fn allow_everything(&self) {
        self.store().role = None;
    }

    /// Keeps accepting connections but answers nothing from now on, as an
    /// API server behind a black-holed route or stuck on etcd would.
    pub fn freeze(&self) {
        self.frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Inserts a pod as the cluster's controllers and kubelet would make it,
    /// with `log` as its runner container's output so far.
    pub fn insert_pod(&self, namespace: &str, pod: Value, log: &[u8]) {
        self.store()
            .insert_pod(namespace, pod, log)
            .unwrap_or_else(|failure| panic!("insert pod: {:?}", failure.body));
    }

    /// Runs the commands of `pods/exec` from now on (as local processes
    /// of the test, fenced: see [kubelet]) with `dir/<pod>` as each pod's
    /// workspace; until then an exec is refused.
    pub fn run_execs_in(&self, dir: &Path) {
        self.store().exec_dir = Some(dir.to_path_buf());
    }

    /// The directory of the test that is `pod`'s `/workspace` in its execs.
    pub fn workspace_of(&self, pod: &str) -> Option<PathBuf> {
        let dir = self.store().exec_dir.clone()?;
        Some(kubelet::workspace_of(&dir, pod))
    }

    /// Ends every open watch with 410 `Expired` and drops the change
    /// history (etcd's compaction): every watcher must relist.
    pub fn expire_watches(&self) {
        let mut store = self.store();
        let revision = store.revision();
        store.history.expire_watches(revision);
    }

    /// Every request so far, oldest first.
    pub fn seen(&self) -> Vec<Seen> {
        self.store().seen.clone()
    }

    /// Forgets the requests seen so far.
    pub fn clear_seen(&self) {
        self.store().seen.clear();
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes a credential (a kubeconfig with a token) readable by its owner only.
pub fn write_secret(path: &Path, text: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
    file.write_all(text.as_bytes())
        .unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
}
