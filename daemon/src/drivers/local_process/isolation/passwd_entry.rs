//! A passwd and group entry for a sandbox's uid inside its view.
//!
//! Why: a sandbox's uid comes from the daemon's pool and has no entry in
//! the host's databases, so `whoami`, `ssh-keygen`, Python's
//! `getpass.getuser()`, node's `os.userInfo()` and git's committer name
//! all fail. The view gets its own copies of `/etc/passwd` and
//! `/etc/group`: the host's content (system users still resolve) plus one
//! line for the sandbox's uid (and one for its gid), home the workspace as
//! seen inside. The daemon writes them (root's, `0644`) in its state
//! directory, which every view hides, and each view binds them read-only
//! over `/etc/passwd` and `/etc/group`: the sandbox cannot change them
//! (a writable copy would let it name itself root to a set-uid program),
//! and the host's files are not touched.
//!
//! Files are named by uid: a uid belongs to one sandbox at a time, each
//! start checks them (the host's databases may have changed), and their
//! number is bounded by the uid pool. A view keeps the inode it bound,
//! so the rename of a rewrite never changes a running sandbox's view.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The user and group name a sandbox's uid gets, unless the host has it.
pub const USER_NAME: &str = "sandbox";
/// The login shell of the entry: there on every host with a view.
const SHELL: &str = "/bin/sh";

/// The copies one sandbox's view binds over `/etc/passwd` and `/etc/group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityFiles {
    pub passwd: PathBuf,
    pub group: PathBuf,
}

/// Where the view's copies are bound.
pub const PASSWD: &str = "/etc/passwd";
pub const GROUP: &str = "/etc/group";

/// Writes the copies for `uid`:`gid` with `home` in `dir` (made `0700`
/// when missing). `None` when the host's `/etc/passwd` knows the uid
/// already (the configured `user`, root): the host's files serve.
pub fn write_for(dir: &Path, uid: u32, gid: u32, home: &Path) -> io::Result<Option<IdentityFiles>> {
    let host_passwd = std::fs::read_to_string(PASSWD)?;
    if has_id(&host_passwd, uid) {
        return Ok(None);
    }
    let host_group = std::fs::read_to_string(GROUP).unwrap_or_default();
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let user = free_name(&host_passwd, uid);
    let passwd_line = format!("{user}:x:{uid}:{gid}:{user}:{}:{SHELL}\n", home.display());
    let group_line = match has_id(&host_group, gid) {
        true => String::new(),
        false => format!("{}:x:{gid}:\n", free_name(&host_group, gid)),
    };
    let files = IdentityFiles {
        passwd: dir.join(format!("{uid}.passwd")),
        group: dir.join(format!("{uid}.group")),
    };
    replace(&files.passwd, &joined(&host_passwd, &passwd_line))?;
    replace(&files.group, &joined(&host_group, &group_line))?;
    Ok(Some(files))
}

/// `database` with `line` appended, on a line of its own.
fn joined(database: &str, line: &str) -> String {
    let mut text = database.to_string();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    text
}

/// Whether an entry of `database` (passwd or group: the id is field 3)
/// has the id `id`.
fn has_id(database: &str, id: u32) -> bool {
    let id = id.to_string();
    database
        .lines()
        .any(|line| line.split(':').nth(2) == Some(id.as_str()))
}

/// [`USER_NAME`], or `sandbox-<id>` when the host's `database` has that
/// name already (two entries of one name would confuse every lookup).
fn free_name(database: &str, id: u32) -> String {
    let taken = database
        .lines()
        .any(|line| line.split(':').next() == Some(USER_NAME));
    match taken {
        true => format!("{USER_NAME}-{id}"),
        false => USER_NAME.to_string(),
    }
}

/// `path` holding `text`, `0644`, written beside it and renamed over it;
/// left as it is when it holds `text` already (the usual case: the host's
/// databases rarely change, and a new inode per start costs the start
/// more than reading the file back). The temporary name is this write's
/// own: sandboxes that share a uid (`run_as` a number the host does not
/// name) may start at once.
fn replace(path: &Path, text: &str) -> io::Result<()> {
    if std::fs::read(path).is_ok_and(|held| held == text.as_bytes()) {
        return Ok(());
    }
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{n}.new"));
    let temporary = PathBuf::from(temporary);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&temporary)?;
    file.write_all(text.as_bytes())?;
    drop(file);
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_added_after_the_hosts_and_names_are_not_doubled() {
        let host = "root:x:0:0:root:/root:/bin/bash\nsandbox:x:900:900::/:/bin/sh";
        assert!(has_id(host, 0));
        assert!(!has_id(host, 60001));
        assert_eq!(free_name(host, 60001), "sandbox-60001");
        assert_eq!(free_name("root:x:0:0::/:/bin/sh\n", 7), "sandbox");
        assert_eq!(
            joined(host, "x\n"),
            format!("{host}\nx\n"),
            "a host file without its last newline"
        );
    }

    #[test]
    fn a_copy_that_holds_the_text_already_is_not_written_again() {
        let dir = crate::test_dir::TestDir::new("passwd-unchanged");
        let path = dir.0.join("1.passwd");
        replace(&path, "a\n").unwrap();
        let first = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        replace(&path, "a\n").unwrap();
        let same = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        assert_eq!(first, same, "rewritten though unchanged");
        replace(&path, "b\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "b\n");
    }

    #[test]
    fn the_copies_hold_the_hosts_entries_and_the_sandboxs() {
        let dir = crate::test_dir::TestDir::new("passwd-entry");
        let home = Path::new("/workspace");
        let files = write_for(&dir.0.join("ids"), 4_000_123, 4_000_123, home)
            .unwrap()
            .unwrap();
        let passwd = std::fs::read_to_string(&files.passwd).unwrap();
        let host = std::fs::read_to_string(PASSWD).unwrap();
        assert!(passwd.starts_with(&host));
        let line = passwd.lines().last().unwrap();
        assert!(
            line.ends_with(":x:4000123:4000123:sandbox:/workspace:/bin/sh")
                || line.contains("sandbox-")
        );
        let group = std::fs::read_to_string(&files.group).unwrap();
        assert!(group.lines().last().unwrap().contains(":x:4000123:"));
        assert_eq!(write_for(&dir.0.join("ids"), 0, 0, home).unwrap(), None);
    }
}
