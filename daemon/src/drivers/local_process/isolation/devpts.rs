//! A devpts of its own in every view: the sandbox's `/dev/pts` is a new
//! devpts instance (`mount -t devpts -o newinstance,max=N`) and its
//! `/dev/ptmx` that instance's `ptmx`, so the pseudo-terminals a sandbox
//! opens are counted against its own `max` (`[limits] ptys`), not taken
//! from the host's: a sandbox that opens ptys until refused leaves the
//! host's `openpty()` working. (Ptys of every non-initial devpts together
//! stay below the kernel's `pty.max` less `pty.reserve`, which is kept for
//! the host's own.)
//!
//! `exec` terminals are opened from the sandbox's devpts too (see
//! `exec::stdio`), so the command's terminal is a `/dev/pts/N` of its
//! view, counted against the same `max`.
//!
//! Whether the kernel lets this daemon mount one is tried once, at start
//! ([`probe`]); where it cannot, views keep the host's devpts and `status`
//! says so.

use std::ffi::CString;
use std::io;

use sandboxd_protocol::IsolationFeature;

/// The private devpts every view gets: its mount options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateDevpts {
    /// The most ptys open at once; 0: no limit of its own.
    pub max: u32,
    /// The group of each pty (the host's `tty`), as the host's have.
    pub tty_gid: Option<u32>,
}

impl PrivateDevpts {
    /// `[limits] ptys`, and the host's `tty` group when it has one.
    pub fn new(max: u32) -> PrivateDevpts {
        let tty_gid = nix::unistd::Group::from_name("tty")
            .ok()
            .flatten()
            .map(|group| group.gid.as_raw());
        PrivateDevpts { max, tty_gid }
    }

    /// The `mount(2)` data: a new instance whose `ptmx` anyone may open
    /// (it is the view's `/dev/ptmx`), ptys `0620` (as the host's
    /// `/dev/pts` under systemd), and the `max`.
    pub fn mount_options(&self) -> String {
        let mut options = String::from("newinstance,ptmxmode=0666,mode=0620");
        if let Some(gid) = self.tty_gid {
            options.push_str(&format!(",gid={gid}"));
        }
        if self.max > 0 {
            options.push_str(&format!(",max={}", self.max));
        }
        options
    }
}

/// The devpts every view gets, `[limits] ptys` at most, when this daemon
/// can mount one (tried once, see [`probe`]); else why not (logged).
pub async fn set_up(max: u32) -> Result<PrivateDevpts, String> {
    let devpts = PrivateDevpts::new(max);
    let tried = devpts.clone();
    let probed = tokio::task::spawn_blocking(move || probe(&tried))
        .await
        .unwrap_or_else(|error| Err(format!("the devpts probe failed: {error}")));
    match probed {
        Ok(()) => Ok(devpts),
        Err(problem) => {
            tracing::warn!(%problem, "sandboxes' views share the host's /dev/pts: one sandbox can take every pty of the host");
            Err(problem)
        }
    }
}

/// Whether this daemon can mount `devpts` with these options: tried for
/// real, in a forked child's own mount namespace (every mount private
/// first, so nothing reaches the host's). `Err` says why not.
pub fn probe(devpts: &PrivateDevpts) -> Result<(), String> {
    let options = CString::new(devpts.mount_options()).unwrap_or_default();
    // SAFETY: the child makes system calls only (every string was made
    // before the fork) and leaves by _exit.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    if child == 0 {
        // SAFETY: the forked child, alone in its new mount namespace.
        unsafe { libc::_exit(mount_in_own_namespace(&options)) }
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    if unsafe { libc::waitpid(child, &mut status, 0) } != child {
        return Err(format!("waitpid: {}", io::Error::last_os_error()));
    }
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ok(()),
        (true, errno) => Err(format!(
            "mount -t devpts -o {} is refused: {}",
            devpts.mount_options(),
            io::Error::from_raw_os_error(errno)
        )),
        _ => Err(format!("the devpts probe ended with status {status:#x}")),
    }
}

/// The probe's child: 0, or the errno of the step that failed.
///
/// # Safety
/// Only in a forked child: it changes its mount namespace.
unsafe fn mount_in_own_namespace(options: &CString) -> i32 {
    let null = std::ptr::null();
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    if libc::unshare(libc::CLONE_NEWNS) < 0 {
        return errno();
    }
    let private = libc::MS_REC | libc::MS_PRIVATE;
    if libc::mount(null, c"/".as_ptr(), null, private, null.cast()) < 0 {
        return errno();
    }
    let flags = libc::MS_NOSUID | libc::MS_NOEXEC;
    let data = options.as_ptr().cast();
    if libc::mount(
        c"devpts".as_ptr(),
        c"/dev/pts".as_ptr(),
        c"devpts".as_ptr(),
        flags,
        data,
    ) < 0
    {
        return errno();
    }
    0
}

/// `private-ptys` for `status`: the devpts every view gets, or why the
/// host's is shared.
pub fn feature(devpts: Option<&Result<PrivateDevpts, String>>) -> IsolationFeature {
    const NAME: &str = "private-ptys";
    match devpts {
        Some(Ok(devpts)) => {
            let max = match devpts.max {
                0 => "no limit of its own ([limits] ptys = 0; the kernel's pty.max less pty.reserve, shared)".to_string(),
                max => format!("at most {max} ptys ([limits] ptys)"),
            };
            IsolationFeature::in_force(
                NAME,
                format!("a devpts of its own in each view, its ptmx the view's /dev/ptmx and exec terminals': {max}; the host's ptys are out of reach"),
            )
        }
        Some(Err(problem)) => IsolationFeature::not_in_force(
            NAME,
            format!("views share the host's /dev/pts ({problem}): a sandbox can take every pty of the host"),
        ),
        None => IsolationFeature::not_in_force(
            NAME,
            "no view of its own: runners share the host's /dev/pts and can take every pty of the host",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_make_a_new_instance_with_its_max() {
        let devpts = PrivateDevpts {
            max: 64,
            tty_gid: Some(5),
        };
        assert_eq!(
            devpts.mount_options(),
            "newinstance,ptmxmode=0666,mode=0620,gid=5,max=64"
        );
        let unlimited = PrivateDevpts {
            max: 0,
            tty_gid: None,
        };
        assert_eq!(
            unlimited.mount_options(),
            "newinstance,ptmxmode=0666,mode=0620"
        );
    }

    #[test]
    fn a_view_with_a_devpts_of_its_own_mounts_it_and_binds_its_ptmx() {
        use super::super::mounts::ViewSettings;
        use std::path::Path;
        let dir = crate::test_dir::TestDir::new("devpts-plan");
        let state = dir.0.join("state");
        let settings = ViewSettings::new(
            &crate::config::ViewConfig::default(),
            64 << 20,
            &state,
            &dir.0,
        );
        let without = settings.plan(&dir.0, Path::new("/bin/sh"));
        assert_eq!(without.devpts, None, "not probed: the host's");
        let devpts = PrivateDevpts {
            max: 8,
            tty_gid: None,
        };
        let plan = settings
            .with_devpts(Ok(devpts))
            .plan(&dir.0, Path::new("/bin/sh"));
        assert_eq!(
            plan.devpts.as_deref(),
            Some("newinstance,ptmxmode=0666,mode=0620,max=8")
        );
        if !Path::new("/dev/pts").is_dir() {
            return;
        }
        let program = plan.prepare().unwrap();
        let words: Vec<String> = program
            .steps()
            .iter()
            .map(|step| format!("{} {}", step.what, step.path.display()))
            .collect();
        let mounted = words
            .iter()
            .position(|words| words == "mount a devpts of its own on /dev/pts");
        assert!(mounted.is_some(), "{words:#?}");
        let ptmx_is_device = std::fs::symlink_metadata("/dev/ptmx")
            .is_ok_and(|meta| std::os::unix::fs::FileTypeExt::is_char_device(&meta.file_type()));
        let bound = words
            .iter()
            .position(|words| words == "bind its ptmx on /dev/ptmx");
        assert_eq!(bound.is_some(), ptmx_is_device, "{words:#?}");
        assert!(bound.is_none_or(|bound| Some(bound) > mounted));
    }

    #[test]
    fn a_root_daemon_can_mount_a_devpts_of_its_own() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        assert_eq!(probe(&PrivateDevpts::new(4)), Ok(()));
        let feature = feature(Some(&Ok(PrivateDevpts::new(4))));
        assert!(feature.in_force && feature.detail.contains("at most 4 ptys"));
    }
}
