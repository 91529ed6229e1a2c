//! Runner output, read through the API server from the newest pod's runner
//! container (`pods/log`), so it needs no access to any node.
//!
//! The cursor's epoch names one incarnation of the container (the pod's
//! uid and its restart count) and its offset counts bytes into that
//! container's log. The log API reads from the start or from the tail, not
//! from an offset, so a follower's read asks for `offset + max_bytes` bytes
//! and keeps those past the offset; a new incarnation restarts at its
//! beginning and says output may have been missed between the two.
//!
//! A follower that caught up reads `LogStart::Generation`: its answer says
//! the generation ended (`LogChunk::ended`, one line on how) once the
//! container it follows has terminated and it has read all of it, once
//! that container restarted or its pod was replaced (its rest is not read:
//! the log API reads the current container), or once the sandbox or its
//! pod is gone.

use futures::AsyncReadExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;
use sandboxd_protocol::{LogChunk, LogCursor, LogStart, SandboxError};
use sha2::{Digest, Sha256};

use super::errors::{Action, CallError};
use super::observe::{runner_status, Lookup};
use super::shapes::CONTAINER;
use super::Inner;
use crate::sandbox_key::SandboxKey;

const GET_LOG: Action = Action::new("get", "pods/log");

/// The epoch of one incarnation of the runner container.
fn epoch_of(pod: &Pod) -> u64 {
    epoch_for(
        pod,
        runner_status(pod).map_or(0, |status| status.restart_count),
    )
}

/// The epoch of the pod's runner after `restarts` restarts.
fn epoch_for(pod: &Pod, restarts: i32) -> u64 {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let digest = Sha256::digest(format!("{uid}/{restarts}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    // Never 0, so no cursor made before any pod existed can match.
    u64::from_be_bytes(bytes).max(1)
}

/// The last `lines` lines of `data`, at most `max_bytes` of them.
fn tail(data: &[u8], lines: u32, max_bytes: usize) -> &[u8] {
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let mut start = data.len();
    if lines > 0 {
        start = body
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, byte)| **byte == b'\n')
            .nth(lines as usize - 1)
            .map_or(0, |(at, _)| at + 1);
    }
    let start = start.max(data.len().saturating_sub(max_bytes));
    &data[start..]
}

pub async fn read(
    inner: &Inner,
    key: &SandboxKey,
    start: LogStart,
    max_bytes: u32,
) -> Result<LogChunk, SandboxError> {
    let context = format!(
        "cannot read the output of {} '{}' ({})",
        key.scope, key.id, key.base_name
    );
    let following = match start {
        LogStart::Generation(cursor) => Some(cursor),
        _ => None,
    };
    let deployment = match inner.lookup(key).await? {
        Lookup::Ours(deployment) => deployment,
        // A follower's sandbox went away: its generation ended with it.
        _ if following.is_some() => {
            return Ok(ended_chunk(following, "sandbox deprovisioned".to_string()))
        }
        _ => {
            return Err(SandboxError::FailedPrecondition(format!(
                "{context}: there is no such sandbox in namespace '{}'",
                inner.cluster.namespace
            )))
        }
    };
    let generation = super::observe::generation_of(&deployment);
    let pods = inner.sandbox_pods(key, &context).await?;
    let Some(pod) = pods.first() else {
        if following.is_some() {
            return Ok(ended_chunk(
                following,
                format!("generation {generation}: its pod is gone (scaled to 0)"),
            ));
        }
        return Err(SandboxError::FailedPrecondition(format!(
            "{context}: {} '{}' has no pod in namespace '{}' (scaled to 0, or not scheduled yet): \
             there is no output to read",
            key.scope, key.id, inner.cluster.namespace
        )));
    };
    let name = pod.metadata.name.clone().unwrap_or_default();
    if let Some(cursor) = following.filter(|cursor| cursor.epoch != epoch_of(pod)) {
        // The followed container is gone: restarted in its pod, or the pod replaced.
        let how = match runner_status(pod) {
            Some(status) if restarted_from(pod, &cursor) => status
                .last_state
                .as_ref()
                .and_then(|state| state.terminated.as_ref())
                .map_or_else(
                    || "the runner container restarted".to_string(),
                    |terminated| {
                        format!(
                            "the runner exited ({})",
                            super::observe::exit_of(terminated)
                        )
                    },
                ),
            _ => "its pod was replaced".to_string(),
        };
        return Ok(ended_chunk(
            Some(cursor),
            format!("generation {generation}: {how}"),
        ));
    }
    if super::pending::is_pending(pod) {
        // No output yet: say why rather than print nothing.
        return Err(SandboxError::FailedPrecondition(format!(
            "{context}: pod {name} is Pending: {}",
            super::pending::why(inner, pod).await
        )));
    }
    let epoch = epoch_of(pod);
    let max = u64::from(max_bytes);
    let (skip, limit, gap) = match start {
        LogStart::Beginning => (0, Some(max), false),
        // Pods are not told apart as generations here yet: as `After`.
        LogStart::After(cursor) | LogStart::Generation(cursor) if cursor.epoch == epoch => {
            (cursor.offset, Some(cursor.offset + max), false)
        }
        // Another incarnation: its output starts over; the old one's rest is lost.
        LogStart::After(_) | LogStart::Generation(_) => (0, Some(max), true),
        LogStart::Tail { .. } => (0, None, false),
    };
    let params = LogParams {
        container: Some(CONTAINER.to_string()),
        limit_bytes: limit.map(|limit| i64::try_from(limit).unwrap_or(i64::MAX)),
        ..LogParams::default()
    };
    let api = inner.pods_api();
    let data = inner
        .cluster
        .call(async {
            let mut stream = api.log_stream(&name, &params).await?;
            let mut data = Vec::new();
            stream
                .read_to_end(&mut data)
                .await
                .map_err(kube::Error::ReadEvents)?;
            Ok(data)
        })
        .await
        .map_err(|error| match error {
            // The container has no log to give (waiting to start, its image
            // not pulled): a state of the sandbox, not a bad request.
            CallError::Api(status) if status.code == 400 => SandboxError::FailedPrecondition(
                format!("{context}: pod {name}: {}", status.message),
            ),
            error => inner.cluster.error(&context, GET_LOG, error),
        })?;
    let total = data.len() as u64;
    let (chunk, at_end) = match start {
        LogStart::Tail { lines } => (tail(&data, lines, max_bytes as usize).to_vec(), true),
        _ => {
            let from = usize::try_from(skip.min(total)).unwrap_or(data.len());
            let at_end = limit.is_none_or(|limit| total < limit);
            (data[from..].to_vec(), at_end)
        }
    };
    // Caught up with a container that has terminated: its generation ended.
    let ended = following
        .filter(|_| at_end)
        .and_then(|_| runner_status(pod))
        .and_then(|status| status.state.as_ref())
        .and_then(|state| state.terminated.as_ref())
        .map(|terminated| {
            format!(
                "generation {generation}: the runner exited ({})",
                super::observe::exit_of(terminated)
            )
        });
    Ok(LogChunk {
        data: chunk,
        next: LogCursor {
            epoch,
            offset: total,
        },
        gap,
        at_end,
        ended,
    })
}

/// True when `cursor` was of an earlier restart of this very pod's runner.
fn restarted_from(pod: &Pod, cursor: &LogCursor) -> bool {
    let restarts = runner_status(pod).map_or(0, |status| status.restart_count);
    (0..restarts).any(|earlier| epoch_for(pod, earlier) == cursor.epoch)
}

/// The answer to a follower whose generation is over: no more data, and how it ended.
fn ended_chunk(cursor: Option<LogCursor>, how: String) -> LogChunk {
    LogChunk {
        data: Vec::new(),
        next: cursor.unwrap_or(LogCursor {
            epoch: 0,
            offset: 0,
        }),
        gap: false,
        at_end: true,
        ended: Some(how),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_takes_whole_lines_within_the_cap() {
        assert_eq!(tail(b"a\nb\nc\n", 2, 100), b"b\nc\n");
        assert_eq!(tail(b"a\nb\nc", 2, 100), b"b\nc");
        assert_eq!(tail(b"a\nb\nc\n", 10, 100), b"a\nb\nc\n");
        assert_eq!(tail(b"a\nb\nc\n", 0, 100), b"");
        assert_eq!(tail(b"aaaa\nbbbb\n", 1, 3), b"bb\n");
    }
}
