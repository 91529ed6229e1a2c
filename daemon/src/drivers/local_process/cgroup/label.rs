//! The sandbox's name written on its cgroup, for the admin reading the
//! host's cgroup tree.
//!
//! A sandbox's cgroup directory does not say whose it is: a cold one is
//! named by a hash of the id (`sbx-ses-…`), and one started from a
//! prepared sandbox keeps `prepared-<n>` for its life (a cgroup v2
//! directory cannot be renamed, and moving the runner to a new one would
//! cost a kernel grace period on the caller's time). So each directory, in
//! every hierarchy, carries an extended attribute, [`ATTRIBUTE`] =
//! `<scope>/<id>`, which `systemd-cgls` prints under the cgroup's name and
//! `getfattr -n user.sandboxd.sandbox` reads. cgroupfs keeps `user.`
//! attributes since Linux 5.7; where it does not, the directory simply
//! stays unlabelled (and `describe`'s `cgroup:` line still names it).

use std::io;

use super::kill::Dirs;

/// The attribute's name; `systemd-cgls` shows every `user.` attribute.
pub const ATTRIBUTE: &str = "user.sandboxd.sandbox";

/// Writes `sandbox` (`<scope>/<id>`) on each of `dirs`. A directory gone
/// already (the sandbox deprovisioned before this ran) is no error.
pub fn write(dirs: &Dirs, sandbox: &str) -> io::Result<()> {
    for dir in std::iter::once(&dirs.v2).chain(&dirs.v1) {
        match rustix::fs::setxattr(
            dir,
            ATTRIBUTE,
            sandbox.as_bytes(),
            rustix::fs::XattrFlags::empty(),
        ) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The sandbox a cgroup directory names, if it is labelled.
    fn read(dir: &Path) -> Option<String> {
        let mut value = vec![0; 4096];
        let length = rustix::fs::getxattr(dir, ATTRIBUTE, &mut value).ok()?;
        value.truncate(length);
        String::from_utf8(value).ok()
    }

    /// A cgroup v2 directory of the test's own; `None` where this host
    /// has no writable cgroup v2.
    fn scratch_cgroup() -> Option<std::path::PathBuf> {
        let layout = super::super::layout::Layout::detect();
        let dir = layout
            .v2
            .as_ref()?
            .mount
            .join(format!("sandboxd-label-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some(dir)
    }

    #[test]
    fn a_labelled_cgroup_names_its_sandbox_and_a_gone_one_is_no_error() {
        let Some(dir) = scratch_cgroup() else {
            eprintln!("skipped: no writable cgroup v2 here");
            return;
        };
        let dirs = Dirs {
            v2: dir.clone(),
            v1: vec![dir.join("not-there")],
        };
        let written = write(&dirs, "session/ses_1");
        let read_back = read(&dir);
        std::fs::remove_dir(&dir).unwrap();
        written.unwrap();
        assert_eq!(read_back.as_deref(), Some("session/ses_1"));
        assert_eq!(read(&dir), None);
        write(&dirs, "session/ses_1").unwrap();
    }
}
