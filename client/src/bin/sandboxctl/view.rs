//! The `view:` table of `status` and `describe`: each path a sandbox's
//! view adds over the host's tree, its kind, and the setting that put it
//! there, so "not found" or "read-only file system" inside a sandbox can
//! be traced to a config key (see docs/troubleshooting.md).

use sandboxd_client::{Shown, ViewEntry};

/// A `view:` line and an indented table, one row per entry; nothing when
/// the daemon listed none (another tier, no view, or an older daemon).
pub fn lines(view: &[ViewEntry]) -> String {
    if view.is_empty() {
        return String::new();
    }
    let mut rows = vec![["PATH", "KIND", "SOURCE", "DETAIL"].map(String::from)];
    rows.extend(view.iter().map(|entry| {
        let mut detail = shown(&entry.detail);
        if let Some(host) = &entry.host_path {
            if *host != entry.path {
                detail.push_str(&format!(" (host: {})", shown(host)));
            }
        }
        [
            shown(&entry.path),
            entry.kind.to_string(),
            shown(&entry.source),
            detail,
        ]
    }));
    let table = crate::render::table(rows);
    let mut out = String::from("view:\n");
    for line in table.lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn shown(text: &str) -> String {
    Shown(text).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_client::ViewKind;

    fn entry(path: &str, kind: ViewKind, source: &str, host: Option<&str>) -> ViewEntry {
        ViewEntry {
            path: path.into(),
            kind,
            source: source.into(),
            detail: "how".into(),
            host_path: host.map(String::from),
        }
    }

    #[test]
    fn each_entry_is_a_row_with_its_source_and_the_workspace_its_host_path() {
        let text = lines(&[
            entry("/opt/tools", ViewKind::ReadOnly, "[view] read_only", None),
            entry("/secret\x1b[2J", ViewKind::Hidden, "[view] hidden", None),
            entry(
                "/workspace",
                ViewKind::Workspace,
                "built-in",
                Some("/var/lib/sandboxd/sandboxes/sbx-ses-1"),
            ),
        ]);
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows[0], "view:");
        assert!(rows[1].starts_with("  PATH "), "{text}");
        assert!(rows[2].contains("read-only") && rows[2].ends_with("[view] read_only  how"));
        assert!(
            rows[3].contains("\\u{1b}[2J") && rows[3].contains("hidden"),
            "{text}"
        );
        assert!(
            rows[4].ends_with("how (host: /var/lib/sandboxd/sandboxes/sbx-ses-1)"),
            "{text}"
        );
        assert_eq!(lines(&[]), "");
    }
}
