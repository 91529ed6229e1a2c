//! Finding the API server, as every Kubernetes tool does, and the one
//! client every call goes through.
//!
//! `[kubernetes] kubeconfig` (and `context`) name a kubeconfig file; without
//! them the client infers what kubectl would use: `KUBECONFIG`, then
//! `~/.kube/config`, then the service account of the pod the daemon runs in.
//! Every call is bounded by `request_timeout`, so an API server that does
//! not answer costs a caller that long and no longer, and the client's own
//! retries are off: a retry is the caller's decision.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use sandboxd_protocol::SandboxError;

use super::errors::{Action, CallError};
use crate::config::KubernetesConfig;

/// Longer than any watch the tier asks for (see `watch`): a connection
/// silent past it is dead.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(300);

/// The API server, the namespace, and how long a call may take.
#[derive(Clone)]
pub struct Cluster {
    pub client: kube::Client,
    /// The same API server for watches: no read timeout of
    /// `request_timeout` (a watch is quiet while nothing changes); the
    /// server ends each watch at the timeout the watch asks for.
    pub watch_client: kube::Client,
    /// The API server's URL, for messages and `status`.
    pub server: String,
    pub namespace: String,
    pub timeout: Duration,
    /// Why the last call got no answer from the API server; `None` once
    /// one is answered (with anything). For the health verdict.
    unanswered: Arc<Mutex<Option<String>>>,
}

impl Cluster {
    /// Resolves the client configuration. Reads files only: the API server
    /// is not contacted, so the daemon starts whether or not it answers.
    pub async fn connect(settings: &KubernetesConfig) -> anyhow::Result<Cluster> {
        let options = KubeConfigOptions {
            context: settings.context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match &settings.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read kubeconfig '{}'", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("kubeconfig '{}'", path.display()))?
            }
            None if settings.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .context("the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
            None => kube::Config::infer().await.context(
                "no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a pod: set \
                 [kubernetes] kubeconfig",
            )?,
        };
        let timeout = settings.request_timeout;
        let mut watch_config = config.clone();
        watch_config.connect_timeout = Some(timeout);
        watch_config.read_timeout = Some(WATCH_READ_TIMEOUT);
        watch_config.default_retry = false;
        config.connect_timeout = Some(timeout);
        config.read_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
        config.default_retry = false;
        let server = config.cluster_url.to_string();
        let server = server.trim_end_matches('/').to_string();
        let client = kube::Client::try_from(config)
            .with_context(|| format!("cannot build a client for the API server at {server}"))?;
        let watch_client = kube::Client::try_from(watch_config)
            .with_context(|| format!("cannot build a client for the API server at {server}"))?;
        Ok(Cluster {
            client,
            watch_client,
            server,
            namespace: settings.namespace.clone(),
            timeout,
            unanswered: Arc::default(),
        })
    }

    /// Runs one API call within the request timeout.
    pub async fn call<T>(
        &self,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, CallError> {
        let result = match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result.map_err(|error| CallError::from_kube(error, self.timeout)),
            Err(_) => Err(CallError::timed_out(self.timeout)),
        };
        let unanswered = match &result {
            Err(CallError::Unreachable(why)) => Some(why.clone()),
            _ => None,
        };
        *self
            .unanswered
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = unanswered;
        result
    }

    /// Why the API server did not answer the last call, if it did not.
    pub fn unanswered(&self) -> Option<String> {
        self.unanswered
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }

    /// The caller's error for a failed `action`, naming where it failed.
    pub fn error(&self, context: &str, action: Action, error: CallError) -> SandboxError {
        error.into_sandbox_error(context, action, &self.server, &self.namespace)
    }
}
