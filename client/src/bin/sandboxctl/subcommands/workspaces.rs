//! `sandboxctl workspaces`: every workspace kept on the daemon's disk
//! (process tier), running or not, with its sandbox id, size, last use and
//! when `workspace_ttl` removes it.

use clap::Args;
use sandboxd_client::{Scope, WorkspaceInfo};
use unicode_width::UnicodeWidthStr as _;

use super::{Context, Run};
use crate::args::any_scope;
use crate::failure::Failure;
use crate::render::{ellipsized, emit, id_width, or_missing, shown, table, ListStyle, MISSING};
use crate::time::{ago, now_unix_ms};

/// List every workspace kept on the daemon's disk (process tier),
/// running or not, with its sandbox id, size, last use and when
/// `workspace_ttl` removes it. Remove a stopped sandbox's workspace with
/// `sandboxctl deprovision SCOPE ID`.
#[derive(Debug, Args)]
pub struct WorkspacesArgs {
    /// Only workspaces of this scope.
    #[arg(long, value_name = "SCOPE", value_parser = any_scope())]
    pub scope: Option<Scope>,
    /// `wide`: every column (the base NAME too), and ids in full
    /// [default: the columns that fit the terminal ($COLUMNS, else 80)].
    #[arg(long, short = 'o', value_name = "FORMAT", value_parser = ["wide"])]
    pub output: Option<String>,
}

impl Run for WorkspacesArgs {
    async fn run(self, context: &Context) -> Result<String, Failure> {
        let workspaces = context.connect().await?.workspaces(self.scope).await?;
        let style = ListStyle::new(self.output.is_some(), true);
        emit(context.json, &workspaces, |workspaces| {
            render(workspaces, now_unix_ms(), style)
        })
    }
}

/// The workspaces' table: by default SCOPE, ID, SIZE, LAST-RUN, STATE and
/// EXPIRES, the ids cut to what the others leave of `style.width`; with
/// `wide`, the base NAME and the host PATH too and every id in full. A
/// workspace no record names shows `-` for its id: only `workspace_ttl`
/// removes it.
fn render(workspaces: &[WorkspaceInfo], now_unix_ms: u64, style: ListStyle) -> String {
    if workspaces.is_empty() {
        return "no workspaces are kept on this host\n".to_string();
    }
    let header = [
        "NAME", "SCOPE", "ID", "SIZE", "LAST-RUN", "STATE", "EXPIRES", "PATH",
    ]
    .map(str::to_string);
    let rows = rows(workspaces, now_unix_ms);
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
    let id_width = id_width(style.width, others);
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

/// Every column of every workspace, as the wide table shows them.
fn rows(workspaces: &[WorkspaceInfo], now_unix_ms: u64) -> Vec<[String; 8]> {
    workspaces
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
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::samples::NOW;

    /// Every column, every id in full.
    fn workspaces(workspaces: &[WorkspaceInfo], now_unix_ms: u64) -> String {
        render(workspaces, now_unix_ms, ListStyle::WIDE)
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
    fn the_table_measures_display_width_and_fits_80_columns() {
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
        let text = render(std::slice::from_ref(&long), NOW, style);
        for line in text.lines() {
            assert!(line.width() <= 80, "{} columns: {line}", line.width());
        }
        assert!(text.starts_with("SCOPE "), "{text}");
        long.id = Some("会".repeat(60));
        let wide = workspaces(std::slice::from_ref(&long), NOW);
        assert!(wide.starts_with("NAME "), "{wide}");
        assert!(wide.contains(&"会".repeat(60)), "{wide}");
    }
}
