//! What is on disk: the workspace directories under `<state>/sandboxes`,
//! how much each takes, and when each was last written to.

use std::path::Path;
use std::time::UNIX_EPOCH;

use sandboxd_protocol::Scope;

pub use super::walk::Measured;

/// At most this many entries of one workspace are visited to size it: a
/// runner cannot make a listing take forever with a tree of millions of
/// files (the size is then a lower bound).
pub const MAX_ENTRIES_SIZED: u64 = 1_000_000;

/// One workspace directory found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnDisk {
    pub base: String,
    /// From the base name's scope code.
    pub scope: Scope,
    /// The directory's own modification time, in Unix milliseconds.
    pub modified_ms: u64,
}

/// The scope whose code a base name (`sbx-<code>-<hex12>`) carries.
pub fn scope_of(base: &str) -> Option<Scope> {
    let rest = base.strip_prefix("sbx-")?;
    let (code, digest) = rest.split_once('-')?;
    let well_formed = digest.len() == 12 && digest.bytes().all(|byte| byte.is_ascii_hexdigit());
    Scope::ALL
        .into_iter()
        .find(|scope| scope.code() == code)
        .filter(|_| well_formed)
}

/// Every workspace directory in `sandboxes` (the daemon's own dot-entries,
/// and anything not named like a workspace, are not). Blocking.
pub fn workspaces_in(sandboxes: &Path) -> Vec<OnDisk> {
    let Ok(entries) = std::fs::read_dir(sandboxes) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let base = entry.file_name().into_string().ok()?;
            let scope = scope_of(&base)?;
            let metadata = entry.path().symlink_metadata().ok()?;
            metadata.is_dir().then(|| OnDisk {
                base,
                scope,
                modified_ms: modified_ms(&metadata).unwrap_or(0),
            })
        })
        .collect()
}

/// A file's modification time, in Unix milliseconds.
pub fn modified_ms(metadata: &std::fs::Metadata) -> Option<u64> {
    let since = metadata.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some(since.as_millis() as u64)
}

/// The modification time of the file at `path`, if it exists.
pub fn file_modified_ms(path: &Path) -> Option<u64> {
    modified_ms(&std::fs::symlink_metadata(path).ok()?)
}

/// Bytes `path` takes on disk (allocated blocks), the whole tree for a
/// directory; symbolic links are not followed. 0 when it is gone. Blocking.
pub fn bytes_on_disk(path: &Path) -> u64 {
    measure(path).bytes
}

/// [`bytes_on_disk`] with the tree's inodes, saying whether the whole tree
/// was visited (see [`walk`](super::walk)). Blocking.
pub fn measure(path: &Path) -> Measured {
    super::walk::measure(path, MAX_ENTRIES_SIZED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_protocol::naming;

    #[test]
    fn only_directories_named_like_workspaces_are_found_with_their_scope() {
        let dir = std::env::temp_dir().join(format!("sandboxd-disk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let session = naming::base_name(Scope::Session, "s-1");
        let connect = naming::base_name(Scope::Connect, "c-1");
        for name in [
            &session,
            &connect,
            &".trash".to_string(),
            &"stray".to_string(),
        ] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
        }
        std::fs::write(dir.join(naming::base_name(Scope::Workflow, "f")), "a file").unwrap();
        std::fs::write(dir.join(&session).join("data"), vec![1u8; 64 * 1024]).unwrap();

        let mut found = workspaces_in(&dir);
        found.sort_by(|a, b| a.base.cmp(&b.base));
        let names: Vec<(&str, Scope)> = found.iter().map(|w| (w.base.as_str(), w.scope)).collect();
        let mut expected = vec![
            (session.as_str(), Scope::Session),
            (connect.as_str(), Scope::Connect),
        ];
        expected.sort();
        assert_eq!(names, expected);
        assert!(found.iter().all(|w| w.modified_ms > 0));
        assert!(bytes_on_disk(&dir.join(&session)) >= 64 * 1024);
        assert_eq!(bytes_on_disk(&dir.join("missing")), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn scope_codes_are_read_from_base_names() {
        assert_eq!(scope_of("sbx-wfx-0123456789ab"), Some(Scope::Workflow));
        assert_eq!(scope_of("sbx-mcp-0123456789ab"), Some(Scope::Connect));
        assert_eq!(scope_of("sbx-xyz-0123456789ab"), None);
        assert_eq!(scope_of("sbx-ses-0123"), None);
        assert_eq!(scope_of(".trash"), None);
    }
}
