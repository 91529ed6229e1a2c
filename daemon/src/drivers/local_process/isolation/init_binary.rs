//! The binary every sandbox's own processes run before their runner: its
//! init, a prepared view's holder and a parked runner (the `sandboxd-init`
//! crate). That is `sandboxd-init` from the daemon's own directory when it
//! is trusted and of the daemon's build, else the daemon's own binary,
//! which plays the same roles at about twice the CPU per exec.
//!
//! Opened once, at start, and exec'd by descriptor from then on: whatever
//! happens to the file afterwards (an upgrade, a replacement), the daemon
//! runs what it checked. Trusted means: a regular file, executable, owned
//! by root or by the daemon's user, and writable by no one else, the same
//! bar as the daemon's own binary in that directory. Of the daemon's build
//! means: `sandboxd-init --stamp` prints the daemon's
//! [`sandboxd_init::STAMP`], so both ends of every role (its arguments, a
//! parked runner's messages) come from the same sources.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sandboxd_protocol::IsolationFeature;

use crate::child_output::{output_within, WaitError};

/// Its file name, next to the daemon's.
pub const FILE_NAME: &str = "sandboxd-init";

/// How long `sandboxd-init --stamp` may take before it is not used: a
/// bound for a binary that does not answer, far above its ~1 ms.
const STAMP_TIMEOUT: Duration = Duration::from_secs(5);

/// The binary open for exec, and which one it is.
#[derive(Debug)]
pub struct InitBinary {
    file: OwnedFd,
    /// What is exec'd, as `status` names it.
    path: PathBuf,
    /// Why the daemon's own binary is used, when it is.
    not_used: Option<String>,
}

impl InitBinary {
    /// `sandboxd-init` next to this daemon's binary, when it may be used;
    /// else this daemon's own binary (and why, logged). Blocking: it runs
    /// `sandboxd-init --stamp` once.
    pub fn find() -> std::io::Result<InitBinary> {
        let daemon = std::env::current_exe()?;
        let candidate = daemon.with_file_name(FILE_NAME);
        match open_if_usable(&candidate, sandboxd_init::STAMP) {
            Ok(file) => Ok(InitBinary {
                file,
                path: candidate,
                not_used: None,
            }),
            Err(why) => {
                tracing::warn!(
                    %why,
                    "sandboxes' init, view holders and parked runners run this daemon's own binary: each costs about twice the CPU of sandboxd-init's exec"
                );
                Ok(InitBinary {
                    file: File::open("/proc/self/exe")?.into(),
                    path: daemon,
                    not_used: Some(why),
                })
            }
        }
    }

    /// The open binary, close-on-exec, to `execveat`.
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Its path, for `argv[0]` and messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What `status` lists: which binary plays the roles.
    pub fn feature(&self) -> IsolationFeature {
        match &self.not_used {
            None => IsolationFeature::in_force(
                "init-binary",
                format!(
                    "{} runs as each sandbox's init, view holder and parked runner",
                    self.path.display()
                ),
            ),
            Some(why) => IsolationFeature::not_in_force(
                "init-binary",
                format!(
                    "{why}: the daemon's own binary ({}) runs as each sandbox's init, view holder and parked runner instead, with the same isolation at about twice the CPU per exec",
                    self.path.display()
                ),
            ),
        }
    }
}

/// `path`, opened, when it is a trusted binary whose `--stamp` is `stamp`;
/// else why not.
fn open_if_usable(path: &Path, stamp: &str) -> Result<OwnedFd, String> {
    let shown = path.display();
    let file = File::open(path).map_err(|error| format!("cannot open {shown}: {error}"))?;
    // Of the file opened, not of the path: nothing can be swapped between.
    let metadata = file
        .metadata()
        .map_err(|error| format!("cannot stat {shown}: {error}"))?;
    let mode = metadata.permissions().mode();
    // SAFETY: geteuid takes no arguments and cannot fail.
    let daemon_user = unsafe { libc::geteuid() };
    if !metadata.is_file() || mode & 0o111 == 0 {
        return Err(format!("{shown} is not an executable file"));
    }
    if metadata.uid() != 0 && metadata.uid() != daemon_user {
        return Err(format!(
            "{shown} is owned by uid {}, neither root nor this daemon's user",
            metadata.uid()
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "{shown} is writable by its group or others (mode {:o})",
            mode & 0o7777
        ));
    }
    let said = run_stamp(&file).map_err(|error| format!("{shown} {error}"))?;
    if said != stamp {
        return Err(format!(
            "{shown} is of another build (stamp {said:?}, this daemon's {stamp:?})"
        ));
    }
    Ok(file.into())
}

/// What the open binary prints for `--stamp`, run through its descriptor.
fn run_stamp(file: &File) -> Result<String, String> {
    // The magic link of the descriptor: the file checked, whatever path it
    // has by now (close-on-exec is fine: exec opens it first).
    let child = Command::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .arg(sandboxd_init::STAMP_ARG)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|error| format!("cannot be run: {error}"))?;
    let output = output_within(child, STAMP_TIMEOUT).map_err(|error| match error {
        WaitError::TimedOut => format!(
            "did not answer {} within {STAMP_TIMEOUT:?}",
            sandboxd_init::STAMP_ARG
        ),
        WaitError::Wait(error) => format!("cannot be waited for: {error}"),
    })?;
    if !output.status.success() {
        return Err(format!(
            "{} failed: {}",
            sandboxd_init::STAMP_ARG,
            output.status
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .trim_end()
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TestDir;

    /// A copy of `echo` as `sandboxd-init`, with `mode`: an ELF binary (as
    /// `sandboxd-init` is; a script cannot be run through a close-on-exec
    /// descriptor) whose stamp is `--stamp`, the argument it echoes.
    fn echo(dir: &Path, mode: u32) -> PathBuf {
        let path = dir.join(FILE_NAME);
        std::fs::copy("/bin/echo", &path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        until_no_writer_holds(&path);
        path
    }

    /// Waits until `path` can be exec'd: a child another test thread
    /// forked while the copy was open for writing holds that descriptor
    /// until its own exec, and meanwhile an exec of the copy fails with
    /// ETXTBSY. No new child can take it once the copy is closed.
    fn until_no_writer_holds(path: &Path) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match Command::new(path).arg("-n").output() {
                Err(error) if error.raw_os_error() == Some(libc::ETXTBSY) => {
                    assert!(std::time::Instant::now() < deadline, "{error}");
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => return,
            }
        }
    }

    #[test]
    fn a_binary_of_this_build_is_used() {
        let dir = TestDir::new("init-binary-ok");
        let path = echo(&dir.0, 0o755);
        assert!(open_if_usable(&path, "--stamp").is_ok());
    }

    #[test]
    fn a_binary_of_another_build_is_not() {
        let dir = TestDir::new("init-binary-other");
        let path = echo(&dir.0, 0o755);
        let why = open_if_usable(&path, "1.0+abc").unwrap_err();
        assert!(
            why.contains("another build") && why.contains("--stamp"),
            "{why}"
        );
    }

    #[test]
    fn a_binary_others_may_write_is_not() {
        let dir = TestDir::new("init-binary-writable");
        let path = echo(&dir.0, 0o757);
        let why = open_if_usable(&path, "--stamp").unwrap_err();
        assert!(why.contains("writable by its group or others"), "{why}");
    }

    #[test]
    fn a_missing_or_non_executable_file_is_not() {
        let dir = TestDir::new("init-binary-missing");
        let why = open_if_usable(&dir.0.join(FILE_NAME), "1.0+abc").unwrap_err();
        assert!(why.contains("cannot open"), "{why}");
        let path = echo(&dir.0, 0o644);
        let why = open_if_usable(&path, "--stamp").unwrap_err();
        assert!(why.contains("not an executable file"), "{why}");
    }
}
