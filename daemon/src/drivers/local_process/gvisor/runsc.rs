//! gVisor's `runsc`, as the daemon calls it: found and tried at start,
//! then `run` for each sandbox's runner, `kill` to ask it to drain, and
//! its state files removed once the sandbox's cgroup is empty.
//!
//! Every call gets the same global flags:
//! - `--root <state>/gvisor/runsc`: the daemon's containers only, wiped at
//!   its start (whatever a killed daemon left is dead by then: the sweep
//!   killed every cgroup under `sandboxes/` first);
//! - `--network=host`: this runsc refuses to start with its own netstack
//!   on kernels that show `/proc/sys/net/core/rmem_default` in every
//!   network namespace (6.18 does: "cannot run with network enabled in
//!   root network namespace"); with the host's network the sentry's
//!   sockets are the host kernel's, made by a process in the sandbox's
//!   cgroup, so the egress table and the separation between sandboxes
//!   (`socket cgroupv2` rules) hold them as they hold a runner's;
//! - `--ignore-cgroups`: runsc would otherwise move its sentry and gofer
//!   into v1 cgroups of its own named after the container (it does on a
//!   hybrid host even without a `cgroupsPath`), out of the sandbox's
//!   limits and its teardown's reach.
//!
//! The platform is runsc's default (`ptrace` in Debian's 20221219,
//! `systrap` in later releases): `kvm` spins without starting on a host
//! that is itself a VM without nested virtualisation.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::super::launch::clone_exec::CgroupPlacement;

/// How long the start-up trial of runsc may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where runsc is looked for beyond the daemon's `PATH`.
const SYSTEM_DIRS: [&str; 3] = ["/usr/local/bin", "/usr/bin", "/usr/sbin"];

/// The runsc this daemon runs, and its state directory.
#[derive(Debug)]
pub struct Runsc {
    pub path: PathBuf,
    /// Its `--version`'s first line.
    pub version: String,
    root: PathBuf,
}

impl Runsc {
    /// Finds runsc in `path_var` or the system directories and tries it
    /// for real (a sandbox of `/bin/true`, run as the daemon will run runners), or says
    /// what is missing.
    pub fn find_and_try(
        path_var: Option<&OsString>,
        root: &Path,
        probe_id: &str,
    ) -> Result<Runsc, String> {
        let path = find(path_var).ok_or_else(|| {
            "isolation = \"gvisor\" needs gVisor's runsc, found neither in PATH nor in /usr/local/bin, /usr/bin, /usr/sbin (Debian: apt-get install runsc; or .ci/install-runsc.sh)".to_string()
        })?;
        let output = Command::new(&path)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|error| format!("{} --version cannot run: {error}", path.display()))?;
        let version = String::from_utf8_lossy(&output.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        if !output.status.success() || version.is_empty() {
            return Err(format!(
                "{} --version failed ({}): {}",
                path.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let runsc = Runsc {
            path,
            version,
            root: root.to_path_buf(),
        };
        runsc.try_a_sandbox(probe_id)?;
        Ok(runsc)
    }

    /// The flags of every call (see the module's docs).
    pub(super) fn command(&self) -> Command {
        let mut command = Command::new(&self.path);
        command
            .arg("--root")
            .arg(&self.root)
            .args(["--network=host", "--ignore-cgroups"])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::null());
        command
    }

    /// `runsc run` of a bundle whose process is `/bin/true` (as nobody),
    /// within [`PROBE_TIMEOUT`]: a runsc that cannot start a sandbox here
    /// (no ptrace, a platform it cannot use, a kernel it refuses) fails the
    /// daemon's start, never a sandbox's.
    fn try_a_sandbox(&self, id: &str) -> Result<(), String> {
        let bundle = self.root.with_file_name("probe");
        let spec = serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": "/", "readonly": true},
            "process": {"user": {"uid": 65534, "gid": 65534}, "args": ["/bin/true"], "cwd": "/",
                        "env": ["PATH=/usr/bin:/bin"], "noNewPrivileges": true},
            "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]},
        });
        super::bundle::write(&bundle, &spec).map_err(|error| {
            format!(
                "cannot write a trial bundle in {}: {error}",
                bundle.display()
            )
        })?;
        let tried = self.run_to_the_end(&bundle, id);
        let _ = std::fs::remove_dir_all(&bundle);
        self.forget(id);
        tried
    }

    /// `runsc run` of `bundle` as container `id`, to its end.
    fn run_to_the_end(&self, bundle: &Path, id: &str) -> Result<(), String> {
        let mut child = self
            .command()
            .arg("run")
            .arg("--bundle")
            .arg(bundle)
            .arg(id)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| format!("{} cannot run: {error}", self.path.display()))?;
        let deadline = Instant::now() + PROBE_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) | Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "`{} run` of /bin/true did not end within {PROBE_TIMEOUT:?}: gVisor cannot start a sandbox here",
                        self.path.display()
                    ));
                }
            }
        };
        if status.success() {
            return Ok(());
        }
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        let last = stderr.lines().rev().find(|line| !line.trim().is_empty());
        Err(format!(
            "`{} --network=host run` of /bin/true failed ({status}): {}",
            self.path.display(),
            last.unwrap_or("no message")
        ))
    }

    /// Starts `runsc run` of the bundle in `bundle` as container `id`,
    /// cloned into `placement` (its very first step, before exec: the
    /// sentry and gofer it starts are born there), leading its own session,
    /// killed with the thread that started it, with `oom_score_adj`, its
    /// output on `output`. Returns its pid, unreaped: the caller's spawner
    /// thread reaps it.
    pub fn run(
        &self,
        bundle: &Path,
        id: &str,
        output: [OwnedFd; 2],
        placement: Option<&CgroupPlacement>,
        oom_score_adj: i32,
    ) -> io::Result<u32> {
        self.run_with_input(bundle, id, None, output, placement, oom_score_adj)
    }

    /// [`Runsc::run`] with `input` (else `/dev/null`) as the container's
    /// standard input: a prepared sandbox's parked runner reads its launch
    /// there (see `super::prepared`).
    pub fn run_with_input(
        &self,
        bundle: &Path,
        id: &str,
        input: Option<OwnedFd>,
        output: [OwnedFd; 2],
        placement: Option<&CgroupPlacement>,
        oom_score_adj: i32,
    ) -> io::Result<u32> {
        let procs = match placement {
            Some(placement) => procs_files(placement)?,
            None => Vec::new(),
        };
        let cpus = placement.and_then(|placement| placement.cpus.clone());
        let adj = format!("{oom_score_adj}\n");
        let [stdout, stderr] = output;
        let mut command = self.command();
        command
            .arg("run")
            .arg("--bundle")
            .arg(bundle)
            .arg(id)
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr));
        if let Some(input) = input {
            command.stdin(Stdio::from(input));
        }
        let raw: Vec<i32> = procs.iter().map(AsRawFd::as_raw_fd).collect();
        // SAFETY: the hook makes only async-signal-safe system calls on
        // descriptors and buffers prepared before the fork.
        unsafe {
            command.pre_exec(move || join_and_detach(&raw, cpus.as_deref(), adj.as_bytes()));
        }
        let child = command.spawn()?;
        Ok(child.id())
    }

    /// Asks container `id`'s processes to end (`runsc kill --all <id>
    /// TERM`), on a thread of its own: `runsc run` itself does not pass a
    /// SIGTERM on, it dies of it.
    pub fn terminate(&self, id: &str) {
        let mut command = self.command();
        command
            .args(["kill", "--all", id, "TERM"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let id = id.to_string();
        let spawned = std::thread::Builder::new()
            .name("sandboxd-runsc-kill".into())
            .spawn(move || {
                if let Err(error) = command.status() {
                    tracing::warn!(id, %error, "cannot ask a gVisor sandbox to stop (runsc kill)");
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start a thread for runsc kill");
        }
    }

    /// Removes what runsc keeps of container `id` (`<id>_sandbox:<id>.state`
    /// and `.lock`, what `runsc delete` removes), once its processes are
    /// gone: `delete` itself would first look for them, for a second.
    pub fn forget(&self, id: &str) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        let prefix = format!("{id}_");
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// The `cgroup.procs` files of `placement`'s cgroups, opened for writing.
pub(super) fn procs_files(placement: &CgroupPlacement) -> io::Result<Vec<OwnedFd>> {
    let v2 = nix::fcntl::openat(
        &placement.v2_dir,
        "cgroup.procs",
        nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(io::Error::from)?;
    let mut files = vec![v2];
    for procs in &placement.v1_procs {
        files.push(procs.try_clone()?);
    }
    Ok(files)
}

/// The child's steps before exec: into the sandbox's cgroups, on its CPUs,
/// its own session, killed with its parent thread, its OOM score.
pub(super) fn join_and_detach(
    procs: &[i32],
    cpus: Option<&libc::cpu_set_t>,
    oom_score_adj: &[u8],
) -> io::Result<()> {
    let check = |result: libc::c_long| {
        if result < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: writes of buffers that outlive the calls, to descriptors
    // that were opened before the fork; prctl, setsid and
    // sched_setaffinity on the calling process only.
    unsafe {
        for &fd in procs {
            check(libc::write(fd, b"0".as_ptr().cast(), 1) as libc::c_long)?;
        }
        if let Some(cpus) = cpus {
            check(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), cpus) as _)?;
        }
        check(libc::setsid() as libc::c_long)?;
        check(libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) as _)?;
        let adj = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if adj >= 0 {
            libc::write(adj, oom_score_adj.as_ptr().cast(), oom_score_adj.len());
            libc::close(adj);
        }
    }
    Ok(())
}

/// The first `runsc` in `path_var`, else in the system directories.
fn find(path_var: Option<&OsString>) -> Option<PathBuf> {
    let from_path = path_var
        .map(|path| std::env::split_paths(path).collect::<Vec<_>>())
        .unwrap_or_default();
    from_path
        .into_iter()
        .chain(SYSTEM_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join("runsc"))
        .find(|candidate| super::super::executable::is_executable_file(candidate))
}
