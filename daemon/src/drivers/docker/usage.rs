//! The docker tier's live figures: the Engine's one-shot stats of the
//! sandbox's container (`GET /containers/{id}/stats?stream=false&one-shot=true`,
//! what `docker stats --no-stream` reads without its one-second wait for a
//! second sample), in the protocol's terms.
//!
//! The engine reports no OOM kills or refused forks in its stats: those
//! stay `None` (an OOM kill shows in the exit, from inspect), as does the
//! workspace size (a volume, measured by the engine only on `system df`).

use bollard::models::ContainerStatsResponse;
use bollard::query_parameters::StatsOptionsBuilder;
use futures::StreamExt;
use sandboxd_protocol::Usage;

use super::engine::{CallError, Engine, READ_TIMEOUT};
use crate::unix_time::now_unix_ms;

/// The container's figures now; `None` when the engine gave no sample.
pub async fn read(
    engine: &Engine,
    container: &str,
    memory_limit: i64,
    pids_limit: i64,
) -> Result<Option<Usage>, CallError> {
    let container = container.to_string();
    let options = StatsOptionsBuilder::new()
        .stream(false)
        .one_shot(true)
        .build();
    let sample = engine
        .call(READ_TIMEOUT, |docker| async move {
            let mut stream = std::pin::pin!(docker.stats(&container, Some(options)));
            stream.next().await.transpose()
        })
        .await?;
    Ok(sample.map(|stats| {
        let mut usage = from_stats(&stats, now_unix_ms());
        // The limits the container was created with (what the engine
        // reports as a limit when none is set is the host's memory).
        usage.memory_limit_bytes = u64::try_from(memory_limit).ok().filter(|&limit| limit > 0);
        usage.tasks_limit = u64::try_from(pids_limit).ok().filter(|&limit| limit > 0);
        usage.cgroup = stats.id.clone().map(|id| format!("container {id}"));
        usage
    }))
}

/// The figures one stats sample holds.
fn from_stats(stats: &ContainerStatsResponse, now_unix_ms: u64) -> Usage {
    let memory = stats.memory_stats.as_ref();
    let pids = stats.pids_stats.as_ref();
    Usage {
        sampled_at_unix_ms: now_unix_ms,
        memory_bytes: memory.and_then(|memory| memory.usage),
        // cgroup v1 engines only; v2 has no per-container peak here.
        memory_peak_bytes: memory
            .and_then(|memory| memory.max_usage)
            .filter(|&peak| peak > 0),
        tasks: pids.and_then(|pids| pids.current),
        // Nanoseconds on the wire.
        cpu_usec: stats
            .cpu_stats
            .as_ref()
            .and_then(|cpu| cpu.cpu_usage.as_ref())
            .and_then(|usage| usage.total_usage)
            .map(|nanos| nanos / 1000),
        ..Usage::default()
    }
}

#[cfg(test)]
mod tests {
    use bollard::models::{
        ContainerCpuStats, ContainerCpuUsage, ContainerMemoryStats, ContainerPidsStats,
    };

    use super::*;

    #[test]
    fn a_sample_becomes_memory_tasks_and_cpu_time() {
        let stats = ContainerStatsResponse {
            memory_stats: Some(ContainerMemoryStats {
                usage: Some(12 << 20),
                max_usage: Some(0),
                ..Default::default()
            }),
            pids_stats: Some(ContainerPidsStats {
                current: Some(3),
                limit: Some(512),
            }),
            cpu_stats: Some(ContainerCpuStats {
                cpu_usage: Some(ContainerCpuUsage {
                    total_usage: Some(1_234_567_000),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let usage = from_stats(&stats, 42);
        assert_eq!(usage.sampled_at_unix_ms, 42);
        assert_eq!(usage.memory_bytes, Some(12 << 20));
        assert_eq!(usage.memory_peak_bytes, None, "0 means not reported");
        assert_eq!(usage.tasks, Some(3));
        assert_eq!(usage.cpu_usec, Some(1_234_567));
        assert_eq!(usage.oom_kills, None, "the engine does not count them");
    }
}
