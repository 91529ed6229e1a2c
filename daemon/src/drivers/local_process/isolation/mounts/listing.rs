//! The view as `status` and `describe` list it: each path a view built
//! now adds over the host's tree, its kind, and the setting that put it
//! there, read from the same [`ViewSettings`] (and the same
//! [`ViewSettings::covers`] and constants) the mount plan is made from, in
//! the order [`MountPlan::prepare`](super::MountPlan::prepare) mounts them
//! — so the list cannot drift from what a sandbox sees.

use std::path::Path;

use sandboxd_protocol::{show_bytes, ViewEntry, ViewKind};

use super::{cover_in, Cover, TmpfsLayout, ViewSettings, GROUP, PASSWD, PRIVATE_TMP};

/// The source of what every view has whatever the config says.
pub const BUILT_IN: &str = "built-in";

/// One entry, its path shown as the sandbox sees it.
fn entry(path: &Path, kind: ViewKind, source: &str, detail: impl Into<String>) -> ViewEntry {
    ViewEntry {
        path: path.display().to_string(),
        kind,
        source: source.to_string(),
        detail: detail.into(),
        host_path: None,
    }
}

impl ViewSettings {
    /// Each path a view built now adds, with where it comes from.
    /// `program`: the runner bound back (`None` when it cannot be found,
    /// so no sandbox starts); `workspace`: the sandbox's workspace on the
    /// host (in `status`, the sandboxes directory with a placeholder name).
    pub fn entries(&self, program: Option<&Path>, workspace: &Path) -> Vec<ViewEntry> {
        let covers = self.covers();
        let mut entries = vec![
            entry(
                Path::new("/"),
                ViewKind::ReadOnly,
                BUILT_IN,
                "the host's whole tree, read-only, but for the paths listed here",
            ),
            entry(
                Path::new("/dev"),
                ViewKind::ReadWrite,
                BUILT_IN,
                "the host's device nodes, writable again (permissions still apply)",
            ),
        ];
        entries.extend(self.tmpfs_entries(&covers));
        entries.extend(self.own_instances(Path::new("/dev/mqueue").is_dir()));
        for (path, source) in &self.hidden {
            let detail = hidden_detail(&covers, path);
            entries.push(entry(path, ViewKind::Hidden, source, detail));
        }
        let binds = program
            .map(|program| (program, ViewKind::ReadOnly, "runner_command"))
            .into_iter()
            .chain(
                self.read_only
                    .iter()
                    .map(|path| (path.as_path(), ViewKind::ReadOnly, "[view] read_only")),
            )
            .chain(
                self.read_write
                    .iter()
                    .map(|path| (path.as_path(), ViewKind::ReadWrite, "[view] read_write")),
            );
        for (path, kind, source) in binds {
            let detail = bind_detail(&covers, path, kind);
            entries.push(entry(path, kind, source, detail));
        }
        entries.push(self.workspace_entry(workspace));
        for path in [PASSWD, GROUP] {
            entries.push(entry(
                Path::new(path),
                ViewKind::ReadOnly,
                BUILT_IN,
                "the view's own copy of the host's, with an entry for the sandbox's uid",
            ));
        }
        entries.push(entry(
            Path::new("/proc"),
            ViewKind::OwnInstance,
            BUILT_IN,
            "a proc of the sandbox's PID namespace: only its own processes",
        ));
        entries
    }

    /// `/tmp`, `/var/tmp`, `/dev/shm`, those the host has.
    fn tmpfs_entries(&self, covers: &[Cover]) -> Vec<ViewEntry> {
        let size = show_bytes(self.tmp_size);
        let how = match self.tmpfs {
            TmpfsLayout::Shared => format!("{size} shared by the private tmpfs paths"),
            TmpfsLayout::PerPath => format!("{size} of its own"),
        };
        let detail =
            format!("empty at start, {how} ([view] tmp_size), charged to the sandbox's memory");
        PRIVATE_TMP
            .iter()
            .map(Path::new)
            .filter(|tmp| {
                covers
                    .iter()
                    .any(|cover| cover.writable && cover.path == *tmp)
            })
            .map(|tmp| entry(tmp, ViewKind::PrivateTmpfs, BUILT_IN, detail.clone()))
            .collect()
    }

    /// A fresh mqueue, when the host has the path, and a devpts of its own,
    /// when this daemon can mount one.
    fn own_instances(&self, has_mqueue: bool) -> Vec<ViewEntry> {
        let mut entries = Vec::new();
        if has_mqueue {
            entries.push(entry(
                Path::new("/dev/mqueue"),
                ViewKind::OwnInstance,
                BUILT_IN,
                "a fresh mqueue: POSIX message queues of its own",
            ));
        }
        if let Ok(devpts) = &self.devpts {
            let max = match devpts.max {
                0 => "no limit of its own".to_string(),
                max => format!("at most {max} ptys"),
            };
            entries.push(entry(
                Path::new("/dev/pts"),
                ViewKind::OwnInstance,
                "[limits] ptys",
                format!("a devpts of its own, {max}; /dev/ptmx is its ptmx"),
            ));
        }
        entries
    }

    /// At [`super::WORKSPACE`] or at its host path, writable.
    fn workspace_entry(&self, workspace: &Path) -> ViewEntry {
        let inside = self.workspace_inside(workspace);
        let detail = match &self.workspace_inside {
            Ok(_) => "the sandbox's own, writable; HOME and WORKSPACE_ROOT_DIR".to_string(),
            Err(problem) => format!("the sandbox's own, writable, at its host path ({problem})"),
        };
        ViewEntry {
            host_path: Some(workspace.display().to_string()),
            ..entry(&inside, ViewKind::Workspace, BUILT_IN, detail)
        }
    }
}

/// How `path` is hidden, as `MountPlan::prepare` hides it: skipped when
/// it is absent or already under a mount that covers it.
fn hidden_detail(covers: &[Cover], path: &Path) -> String {
    if covers.iter().any(|cover| cover.path == path) {
        return "an empty read-only directory over it".to_string();
    }
    if let Some(cover) = cover_in(covers, path) {
        return format!("out of sight already, under {}", covered_by(&cover));
    }
    match std::fs::symlink_metadata(path) {
        Err(_) => "absent on this host: nothing to hide".to_string(),
        // The cover's mount is `nodev`: the device cannot be opened.
        Ok(_) => "/dev/null over the file on a nodev mount: opening it says Permission denied"
            .to_string(),
    }
}

/// A path bound back: over what would hide it, or where it already is.
fn bind_detail(covers: &[Cover], path: &Path, kind: ViewKind) -> String {
    let how = if kind == ViewKind::ReadWrite {
        "writable"
    } else {
        "read-only"
    };
    match cover_in(covers, path) {
        Some(cover) => format!("the host's, bound back {how} under {}", covered_by(&cover)),
        None => format!("the host's, bound back {how}"),
    }
}

fn covered_by(cover: &Cover) -> String {
    let what = if cover.writable {
        "the private tmpfs"
    } else {
        "the hidden"
    };
    format!("{what} {}", cover.path.display())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::ViewConfig;

    fn find<'a>(entries: &'a [ViewEntry], path: &str) -> &'a ViewEntry {
        entries
            .iter()
            .find(|entry| entry.path == path)
            .unwrap_or_else(|| panic!("{path} not listed: {entries:#?}"))
    }

    #[test]
    fn each_path_is_listed_with_the_setting_that_put_it_there() {
        let view = ViewConfig {
            read_only: vec![PathBuf::from("/root")],
            read_write: vec![PathBuf::from("/var/tmp")],
            hidden: vec![PathBuf::from("/etc/hostname"), PathBuf::from("/home")],
            tmp_size: Some(64 << 20),
        };
        let state = Path::new("/var/lib/sandboxd-listing-test");
        let settings = ViewSettings::new(&view, 0, state, Path::new("/run/sandboxd.sock"))
            .with_workspace_at(Ok(PathBuf::from("/workspace")));
        let host = Path::new("/var/lib/sandboxd/sandboxes/sbx-ses-x");
        let entries = settings.entries(Some(Path::new("/usr/bin/true")), host);
        let check = |path: &str, kind: ViewKind, source: &str| {
            let found = find(&entries, path);
            assert_eq!(
                (found.kind, found.source.as_str()),
                (kind, source),
                "{found:?}"
            );
        };
        check("/", ViewKind::ReadOnly, BUILT_IN);
        check("/tmp", ViewKind::PrivateTmpfs, BUILT_IN);
        check("/root", ViewKind::Hidden, BUILT_IN);
        // Named by the config too, it keeps the first (built-in) source.
        check("/home", ViewKind::Hidden, BUILT_IN);
        check("/etc/hostname", ViewKind::Hidden, "[view] hidden");
        check(state.to_str().unwrap(), ViewKind::Hidden, "state_dir");
        check("/run/sandboxd.sock", ViewKind::Hidden, "socket");
        check("/usr/bin/true", ViewKind::ReadOnly, "runner_command");
        check("/proc", ViewKind::OwnInstance, BUILT_IN);
        check("/etc/passwd", ViewKind::ReadOnly, BUILT_IN);
        let workspace = find(&entries, "/workspace");
        assert_eq!(workspace.kind, ViewKind::Workspace);
        assert_eq!(workspace.host_path.as_deref(), host.to_str());
        assert!(find(&entries, "/tmp").detail.contains("64 MiB"));
        assert!(find(&entries, "/etc/hostname").detail.contains("/dev/null"));
        // Absent here, so nothing is mounted for it, and the list says so.
        assert!(find(&entries, state.to_str().unwrap())
            .detail
            .contains("absent"));
        // Both bound back: the list says over which cover.
        let root = entries
            .iter()
            .find(|entry| entry.path == "/root" && entry.source == "[view] read_only")
            .unwrap();
        assert_eq!(root.kind, ViewKind::ReadOnly);
        assert!(root.detail.contains("under the hidden /root"), "{root:?}");
        let var_tmp = entries
            .iter()
            .find(|entry| entry.path == "/var/tmp" && entry.source == "[view] read_write")
            .unwrap();
        assert_eq!(var_tmp.kind, ViewKind::ReadWrite);
        assert!(
            var_tmp.detail.contains("private tmpfs /var/tmp"),
            "{var_tmp:?}"
        );
    }

    #[test]
    fn a_workspace_that_cannot_be_at_workspace_is_listed_at_its_host_path() {
        let settings = ViewSettings::new(
            &ViewConfig::default(),
            0,
            Path::new("/var/lib/sandboxd-listing-test"),
            Path::new("/run/sandboxd.sock"),
        )
        .with_workspace_at(Err("no /workspace on this host".to_string()));
        let host = Path::new("/srv/sandboxes/sbx-ses-y");
        let entries = settings.entries(None, host);
        let workspace = find(&entries, "/srv/sandboxes/sbx-ses-y");
        assert_eq!(workspace.kind, ViewKind::Workspace);
        assert!(workspace.detail.contains("no /workspace on this host"));
        assert!(!entries.iter().any(|entry| entry.source == "runner_command"));
    }
}
