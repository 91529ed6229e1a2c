//! The live figures, as `describe` shows them: one `key: value` line per
//! figure in the manner of `systemctl status` (`memory: 12.3M (peak
//! 20.1M, limit 512M)`, `tasks: 3 (limit 256)`, `cpu: 1.234s`), a figure
//! the tier cannot tell left out rather than shown as zero.

use sandboxd_client::{SandboxInfo, Usage};

/// `12.3M`, `512M`, `900B`: sizes in powers of 1024, as systemd writes them.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let text = format!("{value:.1}");
    let text = text.strip_suffix(".0").unwrap_or(&text);
    format!("{text}{}", UNITS[unit])
}

/// `1.234s`, `2min 3.456s`: CPU time, from microseconds.
pub fn cpu_time(usec: u64) -> String {
    let millis = usec / 1000;
    let (minutes, millis) = (millis / 60_000, millis % 60_000);
    let seconds = format!("{}.{:03}s", millis / 1000, millis % 1000);
    if minutes == 0 {
        seconds
    } else {
        format!("{minutes}min {seconds}")
    }
}

/// `12.3M (peak 20.1M, limit 512M)`: a figure with what qualifies it.
fn qualified(now: String, qualifiers: &[(&str, Option<String>)]) -> String {
    let said: Vec<String> = qualifiers
        .iter()
        .filter_map(|(name, value)| value.as_ref().map(|value| format!("{name} {value}")))
        .collect();
    if said.is_empty() {
        now
    } else {
        format!("{now} ({})", said.join(", "))
    }
}

/// The lines `describe` adds for a sandbox's figures, in order.
pub fn lines(info: &SandboxInfo) -> Vec<(&'static str, String)> {
    let Some(usage) = &info.usage else {
        return match (info.state, &info.cluster) {
            (sandboxd_client::ProbeState::Running, Some(_)) => {
                vec![("figures", "not available on this tier".to_string())]
            }
            (sandboxd_client::ProbeState::Running, None) => {
                vec![("figures", "none could be read".to_string())]
            }
            _ => Vec::new(),
        };
    };
    usage_lines(usage)
}

fn usage_lines(usage: &Usage) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if let Some(memory) = usage.memory_bytes {
        lines.push((
            "memory",
            qualified(
                size(memory),
                &[
                    ("peak", usage.memory_peak_bytes.map(size)),
                    ("limit", usage.memory_limit_bytes.map(size)),
                ],
            ),
        ));
    }
    if let Some(tasks) = usage.tasks {
        lines.push((
            "tasks",
            qualified(
                tasks.to_string(),
                &[("limit", usage.tasks_limit.map(|limit| limit.to_string()))],
            ),
        ));
    }
    if let Some(usec) = usage.cpu_usec {
        lines.push(("cpu", cpu_time(usec)));
    }
    if let Some(refused) = usage.forks_refused {
        lines.push(("forks refused", refused.to_string()));
    }
    if let Some(kills) = usage.oom_kills {
        lines.push(("oom kills", kills.to_string()));
    }
    if let Some(disk) = usage.workspace_bytes {
        lines.push((
            "disk",
            qualified(size(disk), &[("limit", usage.disk_limit_bytes.map(size))]),
        ));
    }
    if let Some(uid) = usage.unix_uid {
        lines.push(("unix uid", uid.to_string()));
    }
    if let Some(cgroup) = &usage.cgroup {
        lines.push(("cgroup", sandboxd_client::Shown(cgroup).to_string()));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_cpu_times_read_as_systemd_writes_them() {
        assert_eq!(size(900), "900B");
        assert_eq!(size(512 << 20), "512M");
        assert_eq!(size(12_897_484), "12.3M");
        assert_eq!(size(3 << 30), "3G");
        assert_eq!(cpu_time(1_234_567), "1.234s");
        assert_eq!(cpu_time(123_456_789), "2min 3.456s");
    }

    #[test]
    fn figures_are_lines_with_their_limits_and_unknown_ones_are_left_out() {
        let usage = Usage {
            memory_bytes: Some(12_897_484),
            memory_peak_bytes: Some(20 << 20),
            memory_limit_bytes: Some(512 << 20),
            tasks: Some(3),
            tasks_limit: Some(256),
            cpu_usec: Some(1_234_567),
            forks_refused: Some(0),
            oom_kills: None,
            workspace_bytes: Some(4096),
            disk_limit_bytes: None,
            unix_uid: Some(61_000),
            cgroup: Some("/sys/fs/cgroup/sandboxd/sandboxes/sbx-ses-1".to_string()),
            ..Usage::default()
        };
        assert_eq!(
            usage_lines(&usage),
            [
                ("memory", "12.3M (peak 20M, limit 512M)".to_string()),
                ("tasks", "3 (limit 256)".to_string()),
                ("cpu", "1.234s".to_string()),
                ("forks refused", "0".to_string()),
                ("disk", "4K".to_string()),
                ("unix uid", "61000".to_string()),
                (
                    "cgroup",
                    "/sys/fs/cgroup/sandboxd/sandboxes/sbx-ses-1".to_string()
                ),
            ]
        );
    }
}
