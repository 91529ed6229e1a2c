//! The daemon's side of a sandbox's private view, as a plan: whether this
//! daemon can make namespaces at all ([`probe`]), and what every view is
//! made of ([`View`]). Starting a sandbox in one is the launch's
//! (`launch::in_view`), which reads this plan and never the other way.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::init_binary::InitBinary;
use super::mounts::ViewSettings;
use super::private_network::PrivateNetwork;

/// The namespaces every sandbox's init is cloned into.
pub const NAMESPACES: libc::c_int = libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;

/// Whether this daemon can make the namespaces, tried for real: a child
/// that `unshare`s them and execs `sandboxd --version`. `Err` says why not
/// (not root, a seccomp filter such as systemd's `RestrictNamespaces=`, a
/// kernel without them).
pub fn probe() -> Result<(), String> {
    let exe =
        std::env::current_exe().map_err(|error| format!("cannot find this binary: {error}"))?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: unshare is async-signal-safe and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(NAMESPACES) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    match command.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("the namespace probe exited with {status}")),
        Err(error) => Err(format!(
            "unshare(CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWIPC) is refused: {error}"
        )),
    }
}

/// What the process tier needs to start sandboxes with a private view.
#[derive(Debug)]
pub struct View {
    pub settings: ViewSettings,
    /// The binary every init runs, opened and checked at the daemon's
    /// start (see `init_binary`), whatever is on disk by now.
    pub(in crate::drivers::local_process) exe: Arc<InitBinary>,
    /// Where each sandbox's init writes its runner's wait status.
    pub(in crate::drivers::local_process) exits_dir: PathBuf,
    /// Where the views' `/etc/passwd` and `/etc/group` are written (see
    /// [`passwd_entry`]).
    pub(in crate::drivers::local_process) identities_dir: PathBuf,
    /// `Ok`: each sandbox gets a network namespace of its own; `Err`: it
    /// shares the host's, and why (`[network] mode = "host"`, or private
    /// networking cannot be had here).
    pub network: Result<Arc<PrivateNetwork>, String>,
}

impl View {
    /// A view whose sandboxes' init is `exe`; `exits_dir` must exist.
    pub fn new(
        settings: ViewSettings,
        exits_dir: PathBuf,
        identities_dir: PathBuf,
        exe: Arc<InitBinary>,
        network: Result<Arc<PrivateNetwork>, String>,
    ) -> View {
        View {
            settings,
            exe,
            exits_dir,
            identities_dir,
            network,
        }
    }
}
