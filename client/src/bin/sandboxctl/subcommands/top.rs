//! `sandboxctl top`: running sandboxes by CPU or memory, as
//! `systemd-cgtop` and `docker stats` show containers.
//!
//! Each refresh is one `usage` call for every running sandbox; the CPU
//! share is the CPU time used between two samples over the wall time
//! between them (100 % is one core), so even `--once` samples twice,
//! `--delay` apart. The table fits the terminal: the ids are cut to what
//! the other columns leave, measured in display columns.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::time::Duration;

use clap::Args;
use sandboxd_client::{SandboxUsage, Scope, Shown, Usage};
use serde::Serialize;

use super::{Context, Run};
use crate::args::any_scope;
use crate::failure::Failure;
use crate::figures::{cpu_time, size};
use crate::render::{emit, fit_id_column, table, terminal_width};

/// Show the running sandboxes' CPU, memory and tasks, refreshed every
/// --delay (like systemd-cgtop and docker stats), largest first.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Only sandboxes of this scope.
    #[arg(long, value_name = "SCOPE", value_parser = any_scope())]
    pub scope: Option<Scope>,
    /// Order by CPU share (between two samples) or by memory.
    #[arg(long, value_enum, default_value = "cpu")]
    pub sort: SortBy,
    /// Print one table (two samples --delay apart, for the CPU share)
    /// and exit; with --json, one JSON array.
    #[arg(long)]
    pub once: bool,
    /// Seconds between samples.
    #[arg(long, short = 'd', value_name = "SECONDS", default_value = "1", value_parser = delay)]
    pub delay: Duration,
}

impl Run for TopArgs {
    async fn run(self, context: &Context) -> Result<String, Failure> {
        let client = context.connect().await?;
        let mut earlier = client.usage(self.scope).await?;
        loop {
            tokio::time::sleep(self.delay).await;
            let later = client.usage(self.scope).await?;
            let rows = rows(&earlier, later.clone(), self.sort);
            earlier = later;
            let text = emit(context.json, &rows, |rows| {
                render(rows, terminal_width(), self.sort)
            })?;
            if self.once {
                return Ok(text);
            }
            if !refresh(&text, context.json)? {
                return Ok(String::new());
            }
        }
    }
}

/// Prints one refresh: a screen of its own on a terminal, as top does; a
/// pipe gets the tables one after another. False when stdout is closed.
fn refresh(text: &str, json: bool) -> Result<bool, Failure> {
    let clear = if !json && io::IsTerminal::is_terminal(&io::stdout()) {
        "\x1b[H\x1b[2J"
    } else {
        ""
    };
    let mut stdout = io::stdout().lock();
    match write!(stdout, "{clear}{text}").and_then(|()| stdout.flush()) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(error) => Err(Failure::Output(format!("cannot write the output: {error}"))),
    }
}

/// `--delay`: seconds, at least 0.1 (a sample costs the daemon a read of
/// every running sandbox's counters).
fn delay(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !(0.1..=3600.0).contains(&seconds) {
        return Err(format!("{seconds} s is out of range (0.1 to 3600)"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// What the rows are ordered by, largest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SortBy {
    Cpu,
    Memory,
}

/// One running sandbox in the table (and in `--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub scope: Scope,
    pub id: String,
    pub name: String,
    /// Percent of one core between the two samples; `None` for a sandbox
    /// first seen in the later one (or without CPU time).
    pub cpu_percent: Option<f64>,
    pub usage: Usage,
}

/// The rows of the `later` sample, with CPU shares against `earlier`,
/// sorted by `sort` (largest first, then by scope and id).
fn rows(earlier: &[SandboxUsage], later: Vec<SandboxUsage>, sort: SortBy) -> Vec<Row> {
    let before: HashMap<&str, &Usage> = earlier
        .iter()
        .map(|sample| (sample.name.as_str(), &sample.usage))
        .collect();
    let mut rows: Vec<Row> = later
        .into_iter()
        .map(|sample| Row {
            cpu_percent: before
                .get(sample.name.as_str())
                .and_then(|before| sandboxd_client::cpu_percent(before, &sample.usage)),
            scope: sample.scope,
            id: sample.id,
            name: sample.name,
            usage: sample.usage,
        })
        .collect();
    let key = |row: &Row| match sort {
        SortBy::Cpu => row.cpu_percent.unwrap_or(-1.0),
        SortBy::Memory => row.usage.memory_bytes.map_or(-1.0, |bytes| bytes as f64),
    };
    rows.sort_by(|a, b| {
        key(b)
            .total_cmp(&key(a))
            .then_with(|| a.scope.cmp(&b.scope))
            .then_with(|| a.id.cmp(&b.id))
    });
    rows
}

/// A summary line, then SCOPE, ID, CPU%, MEMORY, TASKS and CPU TIME.
fn render(rows: &[Row], width: usize, sort: SortBy) -> String {
    const MISSING: &str = "-";
    let header = ["SCOPE", "ID", "CPU%", "MEMORY", "TASKS", "CPU TIME"].map(str::to_string);
    let mut cells: Vec<[String; 6]> = rows
        .iter()
        .map(|row| {
            let usage = &row.usage;
            let memory = match (usage.memory_bytes, usage.memory_limit_bytes) {
                (Some(now), Some(limit)) => format!("{}/{}", size(now), size(limit)),
                (Some(now), None) => size(now),
                (None, _) => MISSING.to_string(),
            };
            let tasks = match (usage.tasks, usage.tasks_limit) {
                (Some(now), Some(limit)) => format!("{now}/{limit}"),
                (Some(now), None) => now.to_string(),
                (None, _) => MISSING.to_string(),
            };
            [
                row.scope.to_string(),
                Shown(&row.id).to_string(),
                row.cpu_percent
                    .map_or_else(|| MISSING.to_string(), |share| format!("{share:.1}")),
                memory,
                tasks,
                usage.cpu_usec.map_or_else(|| MISSING.to_string(), cpu_time),
            ]
        })
        .collect();
    fit_id_column(&header, &mut cells, width);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} running, by {}",
        rows.len(),
        match sort {
            SortBy::Cpu => "CPU",
            SortBy::Memory => "memory",
        }
    );
    out.push_str(&table(std::iter::once(header).chain(cells).collect()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use unicode_width::UnicodeWidthStr as _;

    fn sample(id: &str, at: u64, cpu_usec: u64, memory: u64) -> SandboxUsage {
        SandboxUsage {
            name: format!("sbx-ses-{id}"),
            scope: Scope::Session,
            id: id.to_string(),
            usage: Usage {
                sampled_at_unix_ms: at,
                cpu_usec: Some(cpu_usec),
                memory_bytes: Some(memory),
                memory_limit_bytes: Some(512 << 20),
                tasks: Some(2),
                tasks_limit: Some(256),
                ..Usage::default()
            },
        }
    }

    #[test]
    fn rows_are_sorted_by_cpu_share_or_by_memory() {
        let earlier = [sample("a", 0, 0, 10), sample("b", 0, 0, 20)];
        let later = vec![
            sample("a", 1000, 900_000, 10),
            sample("b", 1000, 100_000, 20),
            sample("c", 1000, 5, 30),
        ];
        let by_cpu = rows(&earlier, later.clone(), SortBy::Cpu);
        let ids: Vec<&str> = by_cpu.iter().map(|row| row.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"], "c is new: no share yet");
        assert_eq!(by_cpu[0].cpu_percent, Some(90.0));
        assert_eq!(by_cpu[2].cpu_percent, None);
        let by_memory = rows(&earlier, later, SortBy::Memory);
        let ids: Vec<&str> = by_memory.iter().map(|row| row.id.as_str()).collect();
        assert_eq!(ids, ["c", "b", "a"]);
    }

    #[test]
    fn the_table_fits_80_columns_with_long_and_wide_ids() {
        let earlier = [sample(&"x".repeat(120), 0, 0, 1)];
        let later = vec![
            sample(&"x".repeat(120), 1000, 1_500_000, 300 << 20),
            sample("会話のセッション識別子がとても長い場合の例です", 1000, 1, 1),
        ];
        let text = render(&rows(&earlier, later, SortBy::Cpu), 80, SortBy::Cpu);
        for line in text.lines() {
            assert!(line.width() <= 80, "{} columns: {line}", line.width());
        }
        assert!(text.starts_with("2 running, by CPU\nSCOPE"), "{text}");
        assert!(text.contains("150.0"), "{text}");
        assert!(text.contains("300M/512M"), "{text}");
        assert!(text.contains("2/256"), "{text}");
    }
}
