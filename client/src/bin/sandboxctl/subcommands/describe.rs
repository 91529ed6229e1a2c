//! `sandboxctl describe`: one sandbox's facts as `key: value` lines: its
//! state, runner, incarnation, last exit, queue, figures, egress,
//! isolation, what its cluster says, and the view it runs in.

use clap::Args;
use sandboxd_client::{ClusterState, ExitInfo, SandboxError, SandboxInfo};

use super::{Context, Run};
use crate::args::SandboxArgs;
use crate::failure::Failure;
use crate::render::{egress, emit, instant, key_values, or_missing, shown, state_word, MISSING};
use crate::time::now_unix_ms;

/// Print one sandbox's facts.
#[derive(Debug, Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

impl Run for DescribeArgs {
    fn check(&self) -> Result<(), SandboxError> {
        self.sandbox.check()
    }

    async fn run(self, context: &Context) -> Result<String, Failure> {
        let SandboxArgs { scope, id } = self.sandbox;
        let info = context.connect().await?.describe(scope, &id).await?;
        emit(context.json, &info, |info| render(info, now_unix_ms()))
    }
}

/// `key: value` lines about one sandbox.
fn render(info: &SandboxInfo, now_unix_ms: u64) -> String {
    let mut lines = vec![
        ("name", shown(&info.name)),
        ("scope", info.scope.to_string()),
        ("id", shown(&info.id)),
        ("state", state_word(info)),
    ];
    if let Some(at) = info.paused_since_unix_ms {
        lines.push(("paused since", instant(at, now_unix_ms)));
    }
    if let Some(pid) = info.pid {
        lines.push(("pid", pid.to_string()));
    }
    if let Some(container) = &info.container_id {
        lines.push(("container id", shown(container)));
    }
    if let Some(image) = &info.image {
        lines.push(("image", shown(image)));
    }
    lines.extend([
        ("incarnation", or_missing(&info.uid)),
        ("generation", info.generation.to_string()),
        (
            "started",
            info.started_at_unix_ms
                .map_or_else(|| MISSING.to_string(), |at| instant(at, now_unix_ms)),
        ),
        ("restarts", info.restarts.to_string()),
        (
            "last exit",
            info.last_exit
                .map_or_else(|| MISSING.to_string(), |exit| last_exit(&exit, now_unix_ms)),
        ),
        (
            "exit reason",
            info.last_exit
                .map_or_else(|| MISSING.to_string(), |exit| exit.reason.to_string()),
        ),
        ("task queue", or_missing(&info.task_queue)),
        ("caller class", or_missing(&info.caller_class)),
    ]);
    lines.extend(crate::figures::lines(info));
    if let Some(posture) = &info.egress {
        lines.push(("egress", egress(posture)));
    }
    lines.extend(isolation(info));
    if let Some(cluster) = &info.cluster {
        lines.extend(cluster_lines(cluster));
    }
    key_values(&lines) + &crate::view::lines(&info.view)
}

/// One `isolation` line per feature the daemon listed for the sandbox.
fn isolation(info: &SandboxInfo) -> Vec<(&'static str, String)> {
    info.isolation
        .iter()
        .map(|feature| {
            let verdict = if feature.in_force {
                ""
            } else {
                "NOT in force: "
            };
            (
                "isolation",
                format!(
                    "{}: {verdict}{}",
                    shown(&feature.name),
                    shown(&feature.detail)
                ),
            )
        })
        .collect()
}

/// `replicas`, `pod` and `pending`: what the cluster says (kubernetes tier).
fn cluster_lines(cluster: &ClusterState) -> Vec<(&'static str, String)> {
    let mut lines = vec![
        (
            "replicas",
            format!(
                "{} desired, {} ready",
                cluster.desired_replicas, cluster.ready_replicas
            ),
        ),
        (
            "pod",
            match (&cluster.pod_phase, &cluster.last_termination_reason) {
                (None, _) => "none".to_string(),
                (Some(phase), None) => shown(phase),
                (Some(phase), Some(reason)) => {
                    format!("{}, last terminated: {}", shown(phase), shown(reason))
                }
            },
        ),
    ];
    if let Some(why) = &cluster.pending_reason {
        lines.push(("pending", shown(why)));
    }
    lines
}

fn last_exit(exit: &ExitInfo, now_unix_ms: u64) -> String {
    format!("{exit} at {}", instant(exit.at_unix_ms, now_unix_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::samples::{info, NOW};

    #[test]
    fn describe_shows_every_fact_readably() {
        let text = render(&info(), NOW);
        assert!(
            text.contains("name:         sbx-ses-ba7816bf8f01\n"),
            "{text}"
        );
        assert!(text.contains("pid:          4242\n"), "{text}");
        assert!(
            text.contains("started:      2024-05-01T12:29:56Z (5m 0s ago)\n"),
            "{text}"
        );
        assert!(text.contains("last exit:    signal 9 at 2024-05-01T12:29:55Z (5m 1s ago)\n"));
        assert!(text.contains("caller class: user\n"), "{text}");
        assert!(
            text.contains("egress:       relaxed (nftables table inet sandboxd_0123456789ab)\n"),
            "{text}"
        );
        assert!(!text.contains("container id"));
        assert!(
            !text.contains("replicas"),
            "only the kubernetes tier has them"
        );
    }

    #[test]
    fn describe_shows_what_the_cluster_says() {
        let mut pod = info();
        pod.cluster = Some(sandboxd_client::ClusterState {
            desired_replicas: 1,
            ready_replicas: 0,
            pod_phase: Some("Running".into()),
            last_termination_reason: Some("OOMKilled".into()),
            pending_reason: None,
        });
        let text = render(&pod, NOW);
        assert!(
            text.contains("replicas:     1 desired, 0 ready\n"),
            "{text}"
        );
        assert!(
            text.contains("pod:          Running, last terminated: OOMKilled\n"),
            "{text}"
        );
        pod.cluster = Some(sandboxd_client::ClusterState {
            desired_replicas: 0,
            ready_replicas: 0,
            pod_phase: None,
            last_termination_reason: None,
            pending_reason: None,
        });
        assert!(render(&pod, NOW).contains("pod:          none\n"));
        pod.cluster = Some(sandboxd_client::ClusterState {
            desired_replicas: 1,
            ready_replicas: 0,
            pod_phase: Some("Pending".into()),
            last_termination_reason: None,
            pending_reason: Some("PodScheduled False: Unschedulable".into()),
        });
        assert!(
            render(&pod, NOW).contains("pending:      PodScheduled False: Unschedulable\n"),
            "{}",
            render(&pod, NOW)
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        let hostile = SandboxInfo {
            id: "a\u{1b}[2Jb".into(),
            ..info()
        };
        assert!(!render(&hostile, NOW).contains('\u{1b}'));
        let lookalike = SandboxInfo {
            id: "\u{feff}ab\u{202e}c\u{200b}".into(),
            ..info()
        };
        assert!(render(&lookalike, NOW).contains("\\u{202e}"));
    }
}
