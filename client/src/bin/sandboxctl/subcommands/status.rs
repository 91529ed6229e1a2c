//! `sandboxctl status`: the daemon's version, driver, health, uptime and
//! sandbox counts; with `--check`, the health verdict alone and an exit
//! code a script can test, as `systemctl is-active` tells by its code.

use std::fmt::Write as _;

use clap::Args;
use sandboxd_client::{ClientError, DaemonStatus, Health, HealthVerdict, IsolationFeature};

use super::{Context, Run};
use crate::failure::Failure;
use crate::render::{egress, emit, key_values, shown};
use crate::time::duration;

/// Show the daemon's version, driver, health, uptime and sandbox counts.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print only the health verdict, and exit 0 when healthy, 3 when
    /// degraded, 4 when unhealthy (1 when the daemon cannot be asked).
    #[arg(long)]
    pub check: bool,
}

impl Run for StatusArgs {
    async fn run(self, context: &Context) -> Result<String, Failure> {
        let json = context.json;
        let status = match context.connect().await {
            Ok(client) => client.status().await,
            Err(error) => Err(error),
        };
        let status = match status {
            Ok(status) => status,
            // A script asking for a verdict gets one: the daemon is down.
            Err(error) if self.check && unreachable(&error) => {
                let text = emit(
                    json,
                    &serde_json::json!({ "verdict": "unreachable", "reasons": [error.to_string()] }),
                    |_| format!("unreachable: {error}\n"),
                )?;
                return Err(Failure::NotHealthy { text, code: 4 });
            }
            Err(error) => return Err(error.into()),
        };
        if !self.check {
            return emit(json, &status, render);
        }
        let text = emit(json, &status.health, verdict)?;
        match status.health.verdict {
            HealthVerdict::Healthy => Ok(text),
            HealthVerdict::Degraded => Err(Failure::NotHealthy { text, code: 3 }),
            HealthVerdict::Unhealthy => Err(Failure::NotHealthy { text, code: 4 }),
        }
    }
}

/// True when the daemon could not be reached at all (as opposed to
/// answering with an error).
fn unreachable(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::NotRunning { .. }
            | ClientError::SocketPermissionDenied { .. }
            | ClientError::ConnectFailed { .. }
            | ClientError::Transport(_)
            | ClientError::DeadlineExceeded
    )
}

/// `key: value` lines about the daemon.
fn render(status: &DaemonStatus) -> String {
    let counts = &status.counts;
    key_values(&[
        ("version", status.version.clone()),
        ("protocol", status.protocol_version.to_string()),
        (
            "driver",
            format!("{} ({})", status.driver, status.driver_health),
        ),
        ("health", health(&status.health)),
        ("uptime", duration(status.uptime_secs)),
        ("grace", stop_grace(status.stop_grace_ms)),
        ("socket", status.socket_path.clone()),
        ("state dir", status.state_dir.clone()),
        ("isolation", shown(&status.containment)),
        (
            "sandboxes",
            format!(
                "{} session, {} workflow, {} connect ({} running, {} stopped)",
                counts.session, counts.workflow, counts.connect, counts.running, counts.stopped
            ),
        ),
        ("egress", egress(&status.egress)),
        (
            "metrics",
            status.metrics.as_deref().map_or_else(
                || "not served (metrics_listen is not set)".to_string(),
                shown,
            ),
        ),
    ]) + &isolation_lines(&status.isolation_mode, &status.isolation)
        + &crate::view::lines(&status.view)
}

/// How long a runner has between SIGTERM and SIGKILL.
fn stop_grace(ms: u64) -> String {
    let shown = if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    };
    format!("{shown} from SIGTERM to SIGKILL (a deprovision may take that long)")
}

/// `  in force   mount-namespace  private /tmp, …` lines under an
/// `isolation mode:` line; nothing when the daemon listed none (an older one).
fn isolation_lines(mode: &str, features: &[IsolationFeature]) -> String {
    if features.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    if !mode.is_empty() {
        let _ = writeln!(out, "isolation mode: {}", shown(mode));
    }
    let width = features
        .iter()
        .map(|f| f.name.chars().count())
        .max()
        .unwrap_or(0);
    for feature in features {
        let verdict = if feature.in_force {
            "in force"
        } else {
            "NOT in force"
        };
        let _ = writeln!(
            out,
            "  {verdict:<12} {:<width$}  {}",
            shown(&feature.name),
            shown(&feature.detail)
        );
    }
    out
}

/// `healthy`, or `unhealthy: reason; reason`.
fn health(health: &Health) -> String {
    if health.reasons.is_empty() {
        health.verdict.to_string()
    } else {
        format!("{}: {}", health.verdict, health.reasons.join("; "))
    }
}

/// `status --check`: the verdict on its own line, then one line per reason.
fn verdict(health: &Health) -> String {
    let mut out = format!(
        "{}
",
        health.verdict
    );
    for reason in &health.reasons {
        let _ = writeln!(out, "  {reason}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_client::{EgressStatus, SandboxCounts};

    #[test]
    fn status_lists_counts() {
        let daemon = DaemonStatus {
            version: "0.1.0".into(),
            protocol_version: 1,
            driver: "local-process".into(),
            driver_health: "ok".into(),
            uptime_secs: 3723,
            counts: SandboxCounts {
                session: 2,
                workflow: 1,
                connect: 0,
                running: 2,
                stopped: 1,
            },
            socket_path: "/run/stigmer/sandboxd.sock".into(),
            state_dir: "/var/lib/stigmer".into(),
            containment: "process groups".into(),
            health: Health {
                verdict: sandboxd_client::HealthVerdict::Unhealthy,
                reasons: vec!["runner 'x' not found".into()],
            },
            egress: EgressStatus {
                posture: "none".into(),
                enforced: false,
                mechanism: "unrestricted: egress = \"none\" in the configuration".into(),
            },
            isolation_mode: "full".into(),
            runner_endpoints: Default::default(),
            metrics: None,
            pools: Vec::new(),
            stop_grace_ms: 10_000,
            view: Vec::new(),
            isolation: vec![
                IsolationFeature::in_force("pid-namespace", "its own"),
                IsolationFeature::not_in_force(
                    "abstract-sockets",
                    "Landlock ABI 6 needs Linux 6.12",
                ),
            ],
        };
        let text = render(&daemon);
        assert!(
            text.contains("health:    unhealthy: runner 'x' not found\n"),
            "{text}"
        );
        assert_eq!(
            verdict(&daemon.health),
            "unhealthy\n  runner 'x' not found\n"
        );
        assert!(text.contains("driver:    local-process (ok)\n"), "{text}");
        assert!(text.contains("uptime:    1h 2m\n"), "{text}");
        assert!(
            text.contains("grace:     10 s from SIGTERM to SIGKILL"),
            "{text}"
        );
        assert!(text.contains("isolation: process groups\n"), "{text}");
        assert!(text.contains("isolation mode: full\n"), "{text}");
        assert!(
            text.contains("  in force     pid-namespace     its own\n"),
            "{text}"
        );
        assert!(
            text.contains("  NOT in force abstract-sockets  Landlock ABI 6 needs Linux 6.12\n"),
            "{text}"
        );
        assert!(text.contains("2 session, 1 workflow, 0 connect (2 running, 1 stopped)"));
        assert!(
            text.contains(
                "egress:    none (unrestricted: egress = \"none\" in the configuration)\n"
            ),
            "{text}"
        );
    }
}
