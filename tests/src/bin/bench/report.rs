//! The figures: one row per goal, printed as a table and as one JSON line.

use serde_json::{json, Value};

/// What a figure is held to.
#[derive(Debug, Clone, Copy)]
pub enum Goal {
    /// figure ÷ baseline must be at most this.
    RatioAtMost(f64),
    /// figure ÷ baseline must be at least this.
    RatioAtLeast(f64),
    /// The figure itself must be at most this (in its own unit).
    AtMost(f64, &'static str),
    /// Reported for context; no goal.
    Info,
}

/// One figure of the table.
#[derive(Debug, Clone)]
pub struct Row {
    /// The row letter.
    pub row: &'static str,
    pub what: String,
    pub unit: &'static str,
    pub value: f64,
    pub baseline_what: String,
    pub baseline: Option<f64>,
    pub goal: Goal,
}

impl Row {
    pub fn ratio(&self) -> Option<f64> {
        self.baseline
            .filter(|baseline| *baseline > 0.0 && baseline.is_finite())
            .map(|baseline| self.value / baseline)
    }

    /// `Some(true)` pass, `Some(false)` miss, `None` when no goal applies.
    pub fn pass(&self) -> Option<bool> {
        match self.goal {
            Goal::RatioAtMost(limit) => self.ratio().map(|ratio| ratio <= limit),
            Goal::RatioAtLeast(limit) => self.ratio().map(|ratio| ratio >= limit),
            Goal::AtMost(limit, _) => Some(self.value <= limit),
            Goal::Info => None,
        }
    }

    pub fn goal_text(&self) -> String {
        match self.goal {
            Goal::RatioAtMost(limit) => format!("≤ {limit}×"),
            Goal::RatioAtLeast(limit) => format!("≥ {limit}×"),
            Goal::AtMost(_, text) => text.to_string(),
            Goal::Info => "—".to_string(),
        }
    }

    fn verdict(&self) -> &'static str {
        match self.pass() {
            Some(true) => "pass",
            Some(false) => "MISS",
            None => "—",
        }
    }

    pub fn json(&self) -> Value {
        json!({
            "row": self.row,
            "figure": self.what,
            "unit": self.unit,
            "value": round(self.value),
            "baseline_figure": self.baseline_what,
            "baseline": self.baseline.map(round),
            "ratio": self.ratio().map(round),
            "goal": self.goal_text(),
            "pass": self.pass(),
        })
    }
}

fn round(value: f64) -> f64 {
    if value.abs() >= 100.0 {
        (value * 10.0).round() / 10.0
    } else {
        (value * 1000.0).round() / 1000.0
    }
}

fn number(value: f64) -> String {
    if !value.is_finite() {
        "n/a".to_string()
    } else if value.abs() >= 1000.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// The rows as an aligned text table.
pub fn table(rows: &[Row]) -> String {
    let header = [
        "#",
        "figure",
        "value",
        "baseline",
        "baseline value",
        "ratio",
        "goal",
        "",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|row| {
            [
                row.row.to_string(),
                row.what.clone(),
                format!("{} {}", number(row.value), row.unit),
                row.baseline_what.clone(),
                row.baseline.map_or_else(
                    || "—".to_string(),
                    |b| format!("{} {}", number(b), row.unit),
                ),
                row.ratio()
                    .map_or_else(|| "—".to_string(), |r| format!("{r:.2}×")),
                row.goal_text(),
                row.verdict().to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(|cell| cell.chars().count());
    for line in &cells {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let render = |line: &[String]| {
        let mut text = String::new();
        for (i, (cell, width)) in line.iter().zip(widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            if i + 1 < line.len() {
                text.extend(std::iter::repeat_n(' ', width - cell.chars().count()));
            }
        }
        text.trim_end().to_string()
    };
    let mut out = render(&header.map(str::to_string));
    out.push('\n');
    out.push_str(&render(&widths.map(|width| "-".repeat(width))));
    out.push('\n');
    for line in &cells {
        out.push_str(&render(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let row = |value, baseline, goal| Row {
            row: "a",
            what: "x".into(),
            unit: "µs",
            value,
            baseline_what: "y".into(),
            baseline,
            goal,
        };
        assert_eq!(
            row(2.0, Some(1.0), Goal::RatioAtMost(2.5)).pass(),
            Some(true)
        );
        assert_eq!(
            row(3.0, Some(1.0), Goal::RatioAtMost(2.5)).pass(),
            Some(false)
        );
        assert_eq!(
            row(0.5, Some(1.0), Goal::RatioAtLeast(0.7)).pass(),
            Some(false)
        );
        assert_eq!(
            row(9.0, None, Goal::AtMost(10.0, "≤ 10")).pass(),
            Some(true)
        );
        assert_eq!(row(9.0, None, Goal::Info).pass(), None);
        assert!(table(&[row(1.0, Some(2.0), Goal::Info)]).contains("0.50×"));
    }
}
