//! `sandboxctl list`: the sandboxes the daemon owns, by scope and then id,
//! as a table that fits the terminal (`-o wide`: every column), their ids
//! alone (`-q`), or JSON.

use clap::Args;
use sandboxd_client::{SandboxInfo, Scope};

use super::{Context, Run};
use crate::args::any_scope;
use crate::failure::Failure;
use crate::render::{
    emit, fit_id_column, or_missing, shown, state_word, table, ListStyle, MISSING,
};
use crate::time::{ago, now_unix_ms};

/// List the sandboxes the daemon owns, by scope and then id.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only sandboxes of this scope.
    #[arg(long, value_name = "SCOPE", value_parser = any_scope())]
    pub scope: Option<Scope>,
    /// Leave the header line out.
    #[arg(long)]
    pub no_headers: bool,
    /// Print only the ids, one a line.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// `wide`: every column, and ids in full [default: the columns that
    /// fit the terminal ($COLUMNS, else 80), long ids cut with …].
    #[arg(long, short = 'o', value_name = "FORMAT", value_parser = ["wide"])]
    pub output: Option<String>,
}

impl Run for ListArgs {
    async fn run(self, context: &Context) -> Result<String, Failure> {
        let sandboxes = sorted(&context.connect().await?.list(self.scope).await?);
        let style = ListStyle::new(self.output.is_some(), !self.no_headers);
        emit(context.json, &sandboxes, |sandboxes| {
            if self.quiet {
                ids(sandboxes)
            } else {
                render(sandboxes, now_unix_ms(), style)
            }
        })
    }
}

/// The sandboxes sorted by scope, then id: the order `list` prints.
fn sorted(sandboxes: &[SandboxInfo]) -> Vec<SandboxInfo> {
    let mut sorted = sandboxes.to_vec();
    sorted.sort_by(|a, b| a.scope.cmp(&b.scope).then_with(|| a.id.cmp(&b.id)));
    sorted
}

/// `-q`: the ids alone, one a line (escaped as everywhere a person reads them).
fn ids(sandboxes: &[SandboxInfo]) -> String {
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
fn render(sandboxes: &[SandboxInfo], now_unix_ms: u64, style: ListStyle) -> String {
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

/// The pid on the process tier, a short container id on container tiers.
fn runner(info: &SandboxInfo) -> String {
    match (info.pid, &info.container_id) {
        (Some(pid), _) => pid.to_string(),
        (None, Some(container)) => shown(&container.chars().take(12).collect::<String>()),
        (None, None) => MISSING.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::samples::{info, NOW};
    use sandboxd_client::ProbeState;
    use unicode_width::UnicodeWidthStr as _;

    /// The wide table with headers, in the order given.
    fn list(sandboxes: &[SandboxInfo], now_unix_ms: u64) -> String {
        render(sandboxes, now_unix_ms, ListStyle::WIDE)
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
        let text = render(std::slice::from_ref(&container), NOW, style);
        assert!(text.lines().next().unwrap().contains("CONTAINER"), "{text}");
        assert!(
            text.contains("0123456789ab") && text.contains('…'),
            "{text}"
        );
        assert!(
            text.lines().all(|line| line.chars().count() <= 80),
            "{text}"
        );
        let process = render(&[info()], NOW, style);
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
    fn the_table_measures_display_width_and_fits_80_columns() {
        // A CJK id takes two columns a character: padded and cut by columns.
        let mut cjk = info();
        cjk.id = "会话".repeat(30);
        let narrow = render(
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
    }

    #[test]
    fn control_characters_are_escaped() {
        let hostile = SandboxInfo {
            id: "a\u{1b}[2Jb".into(),
            ..info()
        };
        assert!(!list(&[hostile], NOW).contains('\u{1b}'));
        let lookalike = SandboxInfo {
            id: "\u{feff}ab\u{202e}c\u{200b}".into(),
            ..info()
        };
        let text = list(std::slice::from_ref(&lookalike), NOW);
        assert!(text.contains("\\u{feff}ab\\u{202e}c\\u{200b}"), "{text}");
    }
}
