//! Writing files that a test then executes, without `ETXTBSY`.
//!
//! A test binary runs its tests on several threads, and each of them
//! spawns processes. A file this process holds open for writing is held by
//! every child forked meanwhile too, until that child execs; an `execve` of
//! the file in that window fails with "Text file busy" (CI saw the runner
//! fixture's copy refused that way; rust-lang/rust#114554). So executables
//! are never written by this process: a `cp` child writes them, and only
//! it ever holds them open for writing.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// Copies the executable `from` to `to` (through a `cp` child) with `mode`.
pub fn copy_executable(from: &Path, to: &Path, mode: u32) {
    let status = Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .status()
        .unwrap_or_else(|error| panic!("run cp: {error}"));
    assert!(
        status.success(),
        "cp {} {} exited with {status}",
        from.display(),
        to.display()
    );
    fs::set_permissions(to, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|error| panic!("chmod {mode:o} {}: {error}", to.display()));
}

/// Writes `text` as the executable `to` with `mode`: written first to a
/// file beside it that is never executed, then copied by a `cp` child.
pub fn write_executable(to: &Path, text: &str, mode: u32) {
    let draft = to.with_extension("draft");
    fs::write(&draft, text).unwrap_or_else(|error| panic!("write {}: {error}", draft.display()));
    copy_executable(&draft, to, mode);
    let _ = fs::remove_file(&draft);
}
