//! Following one kind of the tier's objects as Kubernetes clients do: a
//! list (its items and its `resourceVersion`), then a watch from that
//! version, resumed from the last version seen whenever it ends (the API
//! server ends every watch at its timeout), and a fresh list when the
//! server says the version is too old (410 `Expired`: etcd compacted it),
//! so a change is never silently missed. The semantics of kube-runtime's
//! `watcher`, in a plain loop: its `runtime` feature would add a crate tree
//! for these forty lines.
//!
//! The watch has a client of its own (see [`Cluster::watch_client`]): the
//! request timeout bounds every other call, and a watch is quiet for as
//! long as nothing changes.

use std::fmt::Debug;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::config::Cluster;

/// What the handler is told.
pub enum Update<K> {
    /// Every object there is now: after the first list (`first`), and after
    /// every relist (objects not in it are gone).
    Listed {
        items: Vec<K>,
        first: bool,
    },
    /// Added or modified.
    Applied(K),
    Deleted(K),
}

/// First and longest pause between tries while the API server fails.
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(10);
/// How long the API server keeps one watch open (it ends it then; we resume).
const WATCH_SECONDS: u32 = 240;

/// How one watch ended.
enum Ended {
    /// The server closed it (its timeout): resume from the version seen.
    Closed,
    /// 410: the version is gone; relist.
    Expired,
    Failed(String),
}

/// Lists then watches `K`s carrying `selector` in the cluster's namespace,
/// for as long as the daemon runs, telling `handle` of each change.
pub async fn follow<K>(
    cluster: Cluster,
    selector: String,
    what: &'static str,
    mut handle: impl FnMut(Update<K>) + Send,
) where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + 'static,
    <K as Resource>::DynamicType: Default,
{
    let list_api: Api<K> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let watch_api: Api<K> = Api::namespaced(cluster.watch_client.clone(), &cluster.namespace);
    let mut first = true;
    let mut retry = RETRY_FIRST;
    let mut failing = false;
    // The last watch ended by a 410 (a relist that expires again is paced).
    let mut expired_last = false;
    let fail = |why: String, failing: &mut bool| {
        if !std::mem::replace(failing, true) {
            tracing::warn!(what, error = %why, "cannot follow the cluster's {what}; retrying");
        } else {
            tracing::debug!(what, error = %why, "still cannot follow the cluster's {what}");
        }
    };
    loop {
        let listed = cluster
            .call(list_api.list(&ListParams::default().labels(&selector)))
            .await;
        let list = match listed {
            Ok(list) => list,
            Err(error) => {
                fail(describe(&error), &mut failing);
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
                continue;
            }
        };
        let mut version = list.metadata.resource_version.clone().unwrap_or_default();
        let was_first = std::mem::take(&mut first);
        handle(Update::Listed {
            items: list.items,
            first: was_first,
        });
        if was_first {
            // From here on no change is missed (the watch resumes from this
            // version): what happens now is announced, what was there is not.
            tracing::info!(what, version, "listed the cluster's {what}; following them");
        }
        loop {
            match watch_once(&watch_api, &selector, &mut version, &mut handle).await {
                Ended::Closed => {
                    expired_last = false;
                    if std::mem::take(&mut failing) {
                        tracing::info!(what, "following the cluster's {what} again");
                    }
                    retry = RETRY_FIRST;
                }
                Ended::Expired => {
                    tracing::info!(
                        what,
                        version,
                        "the {what} watch's version is too old; listing again"
                    );
                    // At once the first time; paced if the fresh list's version expires too.
                    if std::mem::replace(&mut expired_last, true) {
                        tokio::time::sleep(retry).await;
                        retry = (retry * 2).min(RETRY_MAX);
                    }
                    break;
                }
                Ended::Failed(why) => {
                    fail(why, &mut failing);
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
        }
    }
}

fn describe(error: &super::errors::CallError) -> String {
    use super::errors::CallError;
    match error {
        CallError::Unreachable(why) | CallError::Other(why) => why.clone(),
        CallError::Api(status) => format!("{} ({})", status.message, status.code),
    }
}

/// One watch from `version`, which it moves past every event it hands on.
async fn watch_once<K>(
    api: &Api<K>,
    selector: &str,
    version: &mut String,
    handle: &mut (impl FnMut(Update<K>) + Send),
) -> Ended
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let params = WatchParams::default()
        .labels(selector)
        .timeout(WATCH_SECONDS);
    let stream = match api.watch(&params, version).await {
        Ok(stream) => stream,
        Err(kube::Error::Api(status)) if status.code == 410 => return Ended::Expired,
        Err(error) => return Ended::Failed(error.to_string()),
    };
    let mut stream = std::pin::pin!(stream.into_stream());
    let mut took_one = false;
    loop {
        let event = match stream.next().await {
            None => return Ended::Closed,
            Some(Err(error)) if took_one => {
                // A broken connection after a good start: resume at once.
                tracing::debug!(error = %error, "a watch broke; resuming");
                return Ended::Closed;
            }
            Some(Err(error)) => return Ended::Failed(error.to_string()),
            Some(Ok(event)) => event,
        };
        took_one = true;
        let mut seen = |object: &K| {
            if let Some(rv) = object.meta().resource_version.clone() {
                *version = rv;
            }
        };
        match event {
            WatchEvent::Added(object) | WatchEvent::Modified(object) => {
                seen(&object);
                handle(Update::Applied(object));
            }
            WatchEvent::Deleted(object) => {
                seen(&object);
                handle(Update::Deleted(object));
            }
            WatchEvent::Bookmark(bookmark) => *version = bookmark.metadata.resource_version,
            WatchEvent::Error(status) if status.code == 410 => return Ended::Expired,
            WatchEvent::Error(status) => return Ended::Failed(status.to_string()),
        }
    }
}
