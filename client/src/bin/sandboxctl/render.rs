//! Human-readable output.
//!
//! Every function returns the text rather than printing it, so the output
//! is testable and the caller decides how a failed write to stdout ends.
//! Strings that came from callers (ids, queues) are shown with control
//! characters escaped: the daemon validates them, but an admin tool should
//! not trust that a terminal escape sequence can never reach it.

use std::fmt::Write as _;

use unicode_width::{UnicodeWidthChar as _, UnicodeWidthStr as _};

use sandboxd_client::{
    DaemonStatus, DeprovisionReport, EgressStatus, EnsureReport, ExitInfo, Health,
    IsolationFeature, PauseReport, SandboxInfo, Scope, Shown, WorkspaceInfo,
};

use crate::egress::EgressCheck;
use crate::time::{ago, duration, rfc3339_utc};

const MISSING: &str = "-";

/// `key: value` lines about the daemon.
pub fn status(status: &DaemonStatus) -> String {
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
pub fn verdict(health: &Health) -> String {
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

/// How `list` lays its table out.
#[derive(Debug, Clone, Copy)]
pub struct ListStyle {
    /// Every column, ids in full (`-o wide`).
    pub wide: bool,
    /// The header line (off with `--no-headers`).
    pub headers: bool,
    /// The terminal width the narrow table must fit.
    pub width: usize,
}

/// The narrowest an id column is squeezed to.
const MIN_ID_WIDTH: usize = 8;

/// `strict (nftables table …)`: the posture, then how it is held.
fn egress(egress: &EgressStatus) -> String {
    format!("{} ({})", shown(&egress.posture), shown(&egress.mechanism))
}

/// The wide table with headers, in the order given.
#[cfg(test)]
pub fn list(sandboxes: &[SandboxInfo], now_unix_ms: u64) -> String {
    list_styled(
        sandboxes,
        now_unix_ms,
        ListStyle {
            wide: true,
            headers: true,
            width: usize::MAX,
        },
    )
}

/// The sandboxes sorted by scope, then id: the order `list` prints.
pub fn sorted(sandboxes: &[SandboxInfo]) -> Vec<SandboxInfo> {
    let mut sorted = sandboxes.to_vec();
    sorted.sort_by(|a, b| a.scope.cmp(&b.scope).then_with(|| a.id.cmp(&b.id)));
    sorted
}

/// `-q`: the ids alone, one a line (escaped as everywhere a person reads them).
pub fn ids(sandboxes: &[SandboxInfo]) -> String {
    sandboxes
        .iter()
        .map(|info| format!("{}\n", shown(&info.id)))
        .collect()
}

/// What the runner column holds on this tier: a pid on the process tier,
/// a container id on the container tiers.
fn runner_header(sandboxes: &[SandboxInfo]) -> &'static str {
    if sandboxes.iter().any(|info| info.container_id.is_some()) {
        "CONTAINER"
    } else {
        "PID"
    }
}

/// The table `list` prints: by default the columns that fit `width`, long
/// ids cut with an ellipsis; with `wide`, every column and every id in full.
pub fn list_styled(sandboxes: &[SandboxInfo], now_unix_ms: u64, style: ListStyle) -> String {
    if !style.wide {
        return narrow_list(sandboxes, now_unix_ms, style);
    }
    let header = [
        "NAME",
        "SCOPE",
        "ID",
        "STATE",
        runner_header(sandboxes),
        "GEN",
        "RESTARTS",
        "STARTED",
        "LAST-EXIT",
        "QUEUE",
    ]
    .map(str::to_string);
    let rows = sandboxes.iter().map(|info| {
        [
            shown(&info.name),
            info.scope.to_string(),
            shown(&info.id),
            state_word(info),
            runner(info),
            info.generation.to_string(),
            info.restarts.to_string(),
            info.started_at_unix_ms
                .map_or_else(|| MISSING.to_string(), |at| ago(at, now_unix_ms)),
            info.last_exit
                .map_or_else(|| MISSING.to_string(), |exit| exit.to_string()),
            or_missing(&info.task_queue),
        ]
    });
    let header = style.headers.then_some(header);
    table(header.into_iter().chain(rows).collect())
}

/// SCOPE, ID, STATE, the runner, RESTARTS and STARTED, the ids cut to
/// whatever the other columns leave of `style.width`.
fn narrow_list(sandboxes: &[SandboxInfo], now_unix_ms: u64, style: ListStyle) -> String {
    let header = [
        "SCOPE",
        "ID",
        "STATE",
        runner_header(sandboxes),
        "RESTARTS",
        "STARTED",
    ]
    .map(str::to_string);
    let mut rows: Vec<[String; 6]> = sandboxes
        .iter()
        .map(|info| {
            [
                info.scope.to_string(),
                shown(&info.id),
                state_word(info),
                runner(info),
                info.restarts.to_string(),
                info.started_at_unix_ms
                    .map_or_else(|| MISSING.to_string(), |at| ago(at, now_unix_ms)),
            ]
        })
        .collect();
    fit_id_column(&header, &mut rows, style.width);
    let header = style.headers.then_some(header);
    table(header.into_iter().chain(rows).collect())
}

/// Cuts the id column (the second) of a six-column table so the whole
/// fits `width` terminal columns (two spaces between columns), never to
/// less than [`MIN_ID_WIDTH`]: the other columns are short and fixed.
pub fn fit_id_column(header: &[String; 6], rows: &mut [[String; 6]], width: usize) {
    let width_of = |column: usize, rows: &[[String; 6]]| {
        rows.iter()
            .map(|row| row[column].width())
            .chain(std::iter::once(header[column].width()))
            .max()
            .unwrap_or(0)
    };
    let others: usize = (0..6)
        .filter(|&column| column != 1)
        .map(|column| width_of(column, rows))
        .sum();
    let id_width = width.saturating_sub(others + 2 * 5).max(MIN_ID_WIDTH);
    for row in rows.iter_mut() {
        row[1] = ellipsized(&row[1], id_width);
    }
}

/// `text` cut to `width` terminal columns, its last one an ellipsis, when
/// wider. Columns, not characters: a CJK character takes two.
pub fn ellipsized(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_string();
    }
    let room = width.saturating_sub(1);
    let mut cut = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > room {
            break;
        }
        used += w;
        cut.push(c);
    }
    cut.push('…');
    cut
}

/// A table, one workspace per row. A workspace no record names shows `-`
/// for its id: only `workspace_ttl` removes it.
#[cfg(test)]
pub fn workspaces(workspaces: &[WorkspaceInfo], now_unix_ms: u64) -> String {
    workspaces_styled(
        workspaces,
        now_unix_ms,
        ListStyle {
            wide: true,
            headers: true,
            width: usize::MAX,
        },
    )
}

/// The workspaces' table: by default SCOPE, ID, SIZE, LAST-RUN, STATE and
/// EXPIRES, the ids cut to what the others leave of `style.width`; with
/// `wide`, the base NAME and the host PATH too and every id in full.
pub fn workspaces_styled(
    workspaces: &[WorkspaceInfo],
    now_unix_ms: u64,
    style: ListStyle,
) -> String {
    if workspaces.is_empty() {
        return "no workspaces are kept on this host\n".to_string();
    }
    let header = [
        "NAME", "SCOPE", "ID", "SIZE", "LAST-RUN", "STATE", "EXPIRES", "PATH",
    ]
    .map(str::to_string);
    let rows: Vec<[String; 8]> = workspaces
        .iter()
        .map(|info| {
            [
                shown(&info.name),
                info.scope.to_string(),
                info.id
                    .as_deref()
                    .map_or_else(|| MISSING.to_string(), shown),
                bytes(info.size_bytes),
                info.last_run_unix_ms
                    .map_or_else(|| MISSING.to_string(), |at| ago(at, now_unix_ms)),
                if info.running { "running" } else { "stopped" }.to_string(),
                info.expires_at_unix_ms
                    .map_or_else(|| MISSING.to_string(), |at| ago(at, now_unix_ms)),
                or_missing(&info.host_path),
            ]
        })
        .collect();
    if style.wide {
        let header = style.headers.then_some(header);
        return table(header.into_iter().chain(rows).collect());
    }
    let others: usize = [1, 3, 4, 5, 6]
        .iter()
        .map(|&column| {
            rows.iter()
                .map(|row| row[column].width())
                .chain(std::iter::once(header[column].len()))
                .max()
                .unwrap_or(0)
        })
        .sum();
    let id_width = style.width.saturating_sub(others + 2 * 5).max(MIN_ID_WIDTH);
    let narrow = |row: [String; 8]| {
        let [_, scope, id, size, last_run, state, expires, _] = row;
        [
            scope,
            ellipsized(&id, id_width),
            size,
            last_run,
            state,
            expires,
        ]
    };
    let header = style.headers.then(|| narrow(header));
    table(
        header
            .into_iter()
            .chain(rows.into_iter().map(narrow))
            .collect(),
    )
}

/// "512 B", "3.2 KiB", "1.5 GiB".
fn bytes(count: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = count as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{count} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The state `list` and `describe` show: `paused` for a paused sandbox
/// (which `probe` calls `stopped`), else the state.
fn state_word(info: &SandboxInfo) -> String {
    if info.paused_since_unix_ms.is_some() {
        "paused".to_string()
    } else {
        info.state.to_string()
    }
}

/// `session abc: paused (generation 2, pid 123)`, or that nothing changed.
pub fn paused(scope: Scope, id: &str, report: &PauseReport, pausing: bool) -> String {
    let state = if pausing { "paused" } else { "running" };
    let mut line = format!("{scope} {}: {state}", shown(id));
    if !report.changed {
        line.push_str(" already");
    }
    line.push_str(&format!(" (generation {}", report.generation));
    if let Some(pid) = report.pid {
        line.push_str(&format!(", pid {pid}"));
    }
    line.push_str(")\n");
    line
}

/// `key: value` lines about one sandbox.
pub fn describe(info: &SandboxInfo, now_unix_ms: u64) -> String {
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
    for feature in &info.isolation {
        let verdict = if feature.in_force {
            ""
        } else {
            "NOT in force: "
        };
        lines.push((
            "isolation",
            format!(
                "{}: {verdict}{}",
                shown(&feature.name),
                shown(&feature.detail)
            ),
        ));
    }
    if let Some(cluster) = &info.cluster {
        lines.push((
            "replicas",
            format!(
                "{} desired, {} ready",
                cluster.desired_replicas, cluster.ready_replicas
            ),
        ));
        lines.push((
            "pod",
            match (&cluster.pod_phase, &cluster.last_termination_reason) {
                (None, _) => "none".to_string(),
                (Some(phase), None) => shown(phase),
                (Some(phase), Some(reason)) => {
                    format!("{}, last terminated: {}", shown(phase), shown(reason))
                }
            },
        ));
        if let Some(why) = &cluster.pending_reason {
            lines.push(("pending", shown(why)));
        }
    }
    key_values(&lines) + &crate::view::lines(&info.view)
}

/// `session abc: running (created, generation 1, pid 123)`.
pub fn ensure(scope: Scope, id: &str, report: &EnsureReport) -> String {
    let what = match (report.created, report.generation) {
        (false, _) => "already running",
        (true, 0 | 1) => "created",
        (true, _) => "restarted",
    };
    let mut details = format!("{what}, generation {}", report.generation);
    if let Some(pid) = report.pid {
        let _ = write!(details, ", pid {pid}");
    }
    let mut line = format!("{scope} {}: {} ({details})\n", shown(id), report.state);
    if !report.differs.is_empty() {
        let _ = writeln!(
            line,
            "note: it keeps running with its own {}: the request's differ (deprovision it to start one with the new ones)",
            report.differs.join(", ")
        );
    }
    line
}

/// `session abc: deprovisioned` and its variants.
pub fn deprovision(
    scope: Scope,
    id: &str,
    report: &DeprovisionReport,
    keep_workspace: bool,
) -> String {
    let mut line = format!("{scope} {}: ", shown(id));
    if !report.was_present {
        line.push_str("not present, nothing to do");
    } else {
        line.push_str("deprovisioned");
        if report.forced {
            line.push_str(" (killed: the runner ignored SIGTERM for the whole grace period)");
        }
        if keep_workspace {
            line.push_str("; workspace kept");
        }
    }
    line.push('\n');
    line
}

/// One row per address: `ADDRESS  VERDICT  REASON`, under the posture's name.
pub fn egress_check(check: &EgressCheck) -> String {
    let header = ["ADDRESS", "VERDICT", "REASON"].map(str::to_string);
    let rows = check.verdicts.iter().map(|verdict| {
        [
            shown(&verdict.address),
            if verdict.allowed {
                "allowed"
            } else {
                "refused"
            }
            .to_string(),
            verdict.reason.unwrap_or(MISSING).to_string(),
        ]
    });
    let mut out = format!("posture: {}\n", check.posture);
    out.push_str(&table(std::iter::once(header).chain(rows).collect()));
    out
}

/// The pid on the process tier, a short container id on container tiers.
fn runner(info: &SandboxInfo) -> String {
    match (info.pid, &info.container_id) {
        (Some(pid), _) => pid.to_string(),
        (None, Some(container)) => shown(&container.chars().take(12).collect::<String>()),
        (None, None) => MISSING.to_string(),
    }
}

fn instant(unix_ms: u64, now_unix_ms: u64) -> String {
    format!("{} ({})", rfc3339_utc(unix_ms), ago(unix_ms, now_unix_ms))
}

fn last_exit(exit: &ExitInfo, now_unix_ms: u64) -> String {
    format!("{exit} at {}", instant(exit.at_unix_ms, now_unix_ms))
}

fn or_missing(value: &str) -> String {
    if value.is_empty() {
        MISSING.to_string()
    } else {
        shown(value)
    }
}

/// `value` with control characters, bidi controls and invisible
/// characters escaped (see [`Shown`]), so it can neither drive the terminal
/// nor pass for another.
fn shown(value: &str) -> String {
    Shown(value).to_string()
}

fn key_values(lines: &[(&str, String)]) -> String {
    let width = lines.iter().map(|(key, _)| key.len()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (key, value) in lines {
        let _ = writeln!(out, "{:width$} {value}", format!("{key}:"));
    }
    out
}

pub fn table<const N: usize>(rows: Vec<[String; N]>) -> String {
    let mut widths = [0; N];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.width());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (column, (cell, width)) in row.iter().zip(widths).enumerate() {
            if column + 1 == N {
                line.push_str(cell);
            } else {
                let pad = width - cell.width() + 2;
                let _ = write!(line, "{cell}{:pad$}", "");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_client::{ProbeState, SandboxCounts};

    const NOW: u64 = 1_714_566_896_000;

    fn info() -> SandboxInfo {
        SandboxInfo {
            name: "sbx-ses-ba7816bf8f01".into(),
            scope: Scope::Session,
            id: "abc".into(),
            state: ProbeState::Running,
            pid: Some(4242),
            container_id: None,
            image: None,
            generation: 3,
            started_at_unix_ms: Some(NOW - 300_000),
            restarts: 2,
            last_exit: Some(ExitInfo {
                code: None,
                signal: Some(9),
                at_unix_ms: NOW - 301_000,
                oom_killed: false,
                oom_limit_bytes: None,
                pids_refused: 0,
                pids_limit: None,
                disk_limit_bytes: None,
                reason: sandboxd_client::ExitReason::Signaled { signal: 9 },
            }),
            task_queue: "session:abc".into(),
            caller_class: "user".into(),
            egress: Some(EgressStatus {
                posture: "relaxed".into(),
                enforced: true,
                mechanism: "nftables table inet sandboxd_0123456789ab".into(),
            }),
            cluster: None,
            isolation: Vec::new(),
            uid: String::new(),
            usage: None,
            paused_since_unix_ms: None,
            view: Vec::new(),
        }
    }

    #[test]
    fn no_workspaces_is_said_in_words_not_as_a_bare_header() {
        let text = workspaces(&[], NOW);
        assert_eq!(text, "no workspaces are kept on this host\n");
    }

    #[test]
    fn workspaces_show_ids_sizes_and_times_and_a_dash_for_a_nameless_one() {
        let known = WorkspaceInfo {
            name: "sbx-ses-ba7816bf8f01".into(),
            scope: Scope::Session,
            id: Some("abc".into()),
            size_bytes: 3 * 1024 * 1024 / 2,
            last_run_unix_ms: Some(NOW - 120_000),
            running: false,
            expires_at_unix_ms: Some(NOW + 3_600_000),
            host_path: "/var/lib/sandboxd/sandboxes/sbx-ses-ba7816bf8f01".into(),
        };
        let nameless = WorkspaceInfo {
            name: "sbx-wfx-2cf24dba5fb0".into(),
            scope: Scope::Workflow,
            id: None,
            size_bytes: 512,
            last_run_unix_ms: None,
            running: false,
            expires_at_unix_ms: None,
            host_path: String::new(),
        };
        let text = workspaces(&[known, nameless], NOW);
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|line| line.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines[0],
            ["NAME", "SCOPE", "ID", "SIZE", "LAST-RUN", "STATE", "EXPIRES", "PATH"]
        );
        assert_eq!(
            lines[1],
            [
                "sbx-ses-ba7816bf8f01",
                "session",
                "abc",
                "1.5",
                "MiB",
                "2m",
                "0s",
                "ago",
                "stopped",
                "in",
                "1h",
                "0m",
                "/var/lib/sandboxd/sandboxes/sbx-ses-ba7816bf8f01"
            ]
        );
        assert_eq!(
            lines[2],
            [
                "sbx-wfx-2cf24dba5fb0",
                "workflow",
                "-",
                "512",
                "B",
                "-",
                "stopped",
                "-",
                "-"
            ]
        );
    }

    #[test]
    fn list_is_an_aligned_table() {
        let absent = SandboxInfo {
            name: "sbx-wfx-2cf24dba5fb0".into(),
            scope: Scope::Workflow,
            id: "a-much-longer-execution-id".into(),
            state: ProbeState::Absent,
            pid: None,
            generation: 0,
            started_at_unix_ms: None,
            restarts: 0,
            last_exit: None,
            task_queue: String::new(),
            ..info()
        };
        let text = list(&[info(), absent], NOW);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("NAME "));
        assert!(lines[0].ends_with("QUEUE"));
        for header in [
            "SCOPE",
            "ID",
            "STATE",
            "PID",
            "GEN",
            "RESTARTS",
            "STARTED",
            "LAST-EXIT",
        ] {
            let column = lines[0].find(header).unwrap();
            assert_ne!(
                &lines[1][column..column + 1],
                " ",
                "{header} misaligned in row 1"
            );
            assert_ne!(
                &lines[2][column..column + 1],
                " ",
                "{header} misaligned in row 2"
            );
        }
        assert!(lines[1].contains("4242") && lines[1].contains("5m 0s ago"));
        assert!(lines[1].contains("signal 9") && lines[1].ends_with("session:abc"));
        assert!(lines[2].ends_with(" -"));
    }

    #[test]
    fn the_runner_column_is_named_for_the_tier_and_long_ids_are_cut() {
        let container = SandboxInfo {
            pid: None,
            container_id: Some("0123456789abcdef0123".into()),
            id: "i".repeat(100),
            ..info()
        };
        let style = ListStyle {
            wide: false,
            headers: true,
            width: 80,
        };
        let text = list_styled(std::slice::from_ref(&container), NOW, style);
        assert!(text.lines().next().unwrap().contains("CONTAINER"), "{text}");
        assert!(
            text.contains("0123456789ab") && text.contains('…'),
            "{text}"
        );
        assert!(
            text.lines().all(|line| line.chars().count() <= 80),
            "{text}"
        );
        let process = list_styled(&[info()], NOW, style);
        assert!(
            process.lines().next().unwrap().contains(" PID "),
            "{process}"
        );
    }

    #[test]
    fn an_empty_list_is_just_the_header() {
        assert_eq!(list(&[], NOW).lines().count(), 1);
    }

    #[test]
    fn describe_shows_every_fact_readably() {
        let text = describe(&info(), NOW);
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
        let text = describe(&pod, NOW);
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
        assert!(describe(&pod, NOW).contains("pod:          none\n"));
        pod.cluster = Some(sandboxd_client::ClusterState {
            desired_replicas: 1,
            ready_replicas: 0,
            pod_phase: Some("Pending".into()),
            last_termination_reason: None,
            pending_reason: Some("PodScheduled False: Unschedulable".into()),
        });
        assert!(
            describe(&pod, NOW).contains("pending:      PodScheduled False: Unschedulable\n"),
            "{}",
            describe(&pod, NOW)
        );
    }

    #[test]
    fn ensure_is_one_line() {
        let report = EnsureReport {
            state: ProbeState::Running,
            created: true,
            generation: 1,
            pid: Some(123),
            differs: Vec::new(),
            uid: String::new(),
        };
        assert_eq!(
            ensure(Scope::Session, "abc", &report),
            "session abc: running (created, generation 1, pid 123)\n"
        );
        let fast = EnsureReport {
            created: false,
            pid: None,
            ..report
        };
        assert_eq!(
            ensure(Scope::Workflow, "wf", &fast),
            "workflow wf: running (already running, generation 1)\n"
        );
        let other_queue = EnsureReport {
            differs: vec!["task_queue".into(), "token".into()],
            ..fast
        };
        assert!(
            ensure(Scope::Workflow, "wf", &other_queue)
                .contains("\nnote: it keeps running with its own task_queue, token: "),
            "{}",
            ensure(Scope::Workflow, "wf", &other_queue)
        );
    }

    #[test]
    fn deprovision_says_what_happened() {
        let gone = DeprovisionReport {
            was_present: true,
            forced: true,
        };
        assert_eq!(
            deprovision(Scope::Connect, "x", &gone, true),
            "connect x: deprovisioned (killed: the runner ignored SIGTERM for the whole grace \
             period); workspace kept\n"
        );
        let missing = DeprovisionReport {
            was_present: false,
            forced: false,
        };
        assert_eq!(
            deprovision(Scope::Session, "y", &missing, false),
            "session y: not present, nothing to do\n"
        );
    }

    #[test]
    fn tables_measure_display_width_and_fit_80_columns() {
        // A CJK id takes two columns a character: padded and cut by columns.
        let mut cjk = info();
        cjk.id = "会话".repeat(30);
        let narrow = list_styled(
            &[cjk.clone(), info()],
            NOW,
            ListStyle {
                wide: false,
                headers: true,
                width: 80,
            },
        );
        for line in narrow.lines() {
            assert!(line.width() <= 80, "{} columns: {line}", line.width());
        }
        let lines: Vec<&str> = narrow.lines().collect();
        let state_at = |line: &str| line.find("running").map(|at| line[..at].width());
        assert_eq!(state_at(lines[1]), state_at(lines[2]), "{narrow}");

        let mut long = WorkspaceInfo {
            name: "sbx-ses-5d2c0a9f3e1b".into(),
            scope: Scope::Session,
            id: Some("x".repeat(120)),
            size_bytes: 1_234_567,
            last_run_unix_ms: Some(NOW - 11_100_000),
            running: false,
            expires_at_unix_ms: Some(NOW + 590_000_000),
            host_path: String::new(),
        };
        let style = ListStyle {
            wide: false,
            headers: true,
            width: 80,
        };
        let text = workspaces_styled(std::slice::from_ref(&long), NOW, style);
        for line in text.lines() {
            assert!(line.width() <= 80, "{} columns: {line}", line.width());
        }
        assert!(text.starts_with("SCOPE "), "{text}");
        long.id = Some("会".repeat(60));
        let wide = workspaces(std::slice::from_ref(&long), NOW);
        assert!(wide.starts_with("NAME "), "{wide}");
        assert!(wide.contains(&"会".repeat(60)), "{wide}");
    }

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
        let text = status(&daemon);
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

    #[test]
    fn egress_check_is_a_table_of_verdicts() {
        let addresses = ["10.0.0.1", "169.254.169.254", "\u{1b}[2J"].map(String::from);
        let check = EgressCheck::judge(sandboxd_client::egress::Posture::Relaxed, &addresses);
        let text = egress_check(&check);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "posture: relaxed");
        assert_eq!(lines[1], "ADDRESS          VERDICT  REASON");
        assert_eq!(lines[2], "10.0.0.1         allowed  -");
        assert_eq!(
            lines[3],
            "169.254.169.254  refused  link-local (cloud metadata)"
        );
        assert!(lines[4].ends_with("refused  unrecognized"), "{text}");
        assert!(!text.contains('\u{1b}'));
    }

    #[test]
    fn control_characters_are_escaped() {
        let hostile = SandboxInfo {
            id: "a\u{1b}[2Jb".into(),
            ..info()
        };
        assert!(!describe(&hostile, NOW).contains('\u{1b}'));
        assert!(!list(&[hostile], NOW).contains('\u{1b}'));
        let lookalike = SandboxInfo {
            id: "\u{feff}ab\u{202e}c\u{200b}".into(),
            ..info()
        };
        let text = list(std::slice::from_ref(&lookalike), NOW);
        assert!(text.contains("\\u{feff}ab\\u{202e}c\\u{200b}"), "{text}");
        assert!(describe(&lookalike, NOW).contains("\\u{202e}"));
    }
}
