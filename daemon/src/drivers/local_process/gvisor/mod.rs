//! `isolation = "gvisor"`: each runner under gVisor's `runsc`, so its
//! system calls are served by gVisor's sentry (a kernel in user space)
//! rather than the host's, in the view `full` builds (see [`bundle`]).
//!
//! What stays the host's: the sandbox's uid (the runner's, inside), its
//! cgroups (`runsc run` is cloned into them, so its sentry and gofer are
//! born there: limits, OOM, pause, teardown and the egress rules hold them),
//! its workspace on disk (the files calls work on it from the host side;
//! the gofer serves bind mounts `shared`, so a file put from the host is
//! seen inside at once). What changes meaning: the kernel filters
//! (keyring, Landlock, seccomp, clean start) are not put on runsc, which
//! needs its privileges to build the sandbox; the runner's calls never
//! reach the host kernel, and runsc puts its own seccomp filter on the
//! sentry and the gofer.
//!
//! The calls: [`Gvisor::start`] writes the bundle and runs `runsc run`;
//! a stop's SIGTERM goes through `runsc kill` ([`Gvisor::terminate`]); once the
//! cgroup is empty, [`Gvisor::ended`] removes the container's state and
//! bundle. Sandboxes prepared ahead park a `runsc run` with its sentry
//! booted (see [`prepared`]). Commands run as `runsc exec` into the
//! sandbox's container (see [`exec`]); the sandbox's uid has a passwd and
//! group entry inside, as in `full`'s view (see [`identity`]).

pub mod bundle;
mod exec;
mod identity;
pub mod prepared;
pub mod runsc;

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::Context as _;
use sandboxd_protocol::IsolationFeature;

use super::isolation::mounts::{ViewSettings, WORKSPACE};
use super::launch::clone_exec::{CgroupPlacement, Cloned};
use super::launch::runner_plan::RunnerLaunch;
use crate::config::Config;
use runsc::Runsc;

/// The gVisor rung of the process tier.
#[derive(Debug)]
pub struct Gvisor {
    runsc: Arc<Runsc>,
    /// `<state>/gvisor/bundles`: a directory per running sandbox.
    bundles: PathBuf,
    /// What every container id of this daemon starts with: runsc names
    /// each sandbox's control socket after its id in the host's abstract
    /// socket namespace, so two daemons' sandboxes of the same base name
    /// would otherwise collide.
    prefix: String,
    view: ViewSettings,
    /// `<state>/identities`: the passwd and group copies binds name.
    identities: PathBuf,
    /// The container id of each sandbox running, by its `runsc run`'s
    /// pid: how a stop's SIGTERM reaches it (see [`Gvisor::terminate`]),
    /// and which container a command joins (a prepared sandbox's is named
    /// after the prepared one it took).
    running: Mutex<HashMap<i32, String>>,
}

impl Gvisor {
    /// Under `isolation = "gvisor"`: runsc found and tried (or the start
    /// fails, naming what is missing), what an earlier daemon left in
    /// `<state>/gvisor` removed (its runners are dead by now: the sweep ran).
    /// Blocking.
    pub fn set_up(
        config: &Config,
        path_var: Option<&std::ffi::OsString>,
    ) -> anyhow::Result<Gvisor> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            anyhow::bail!("isolation = \"gvisor\" needs a daemon running as root: runsc builds each sandbox with root's privileges");
        }
        let dir = config.state_dir.join("gvisor");
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| {
                format!(
                    "cannot remove what an earlier sandboxd left in {}",
                    dir.display()
                )
            })?;
        }
        let (root, bundles) = (dir.join("runsc"), dir.join("bundles"));
        for made in [&dir, &root, &bundles] {
            std::fs::create_dir_all(made)
                .with_context(|| format!("cannot make {}", made.display()))?;
            std::fs::set_permissions(made, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        }
        let prefix = format!(
            "sbxd-{}",
            crate::digest::sha256_hex(config.state_dir.as_os_str().as_encoded_bytes(), 4)
        );
        let runsc = Runsc::find_and_try(path_var, &root, &format!("{prefix}-probe"))
            .map_err(anyhow::Error::msg)?;
        tracing::info!(runsc = %runsc.path.display(), version = %runsc.version, "isolation = \"gvisor\": runners run under gVisor");
        let view = ViewSettings::new(
            &config.view,
            config.limits.memory,
            &config.state_dir,
            &config.socket,
        )
        .with_workspace_at(Ok(PathBuf::from(WORKSPACE)));
        Ok(Gvisor {
            runsc: Arc::new(runsc),
            bundles,
            prefix,
            view,
            identities: config.state_dir.join("identities"),
            running: Mutex::default(),
        })
    }

    /// Where a sandbox sees its workspace: `/workspace`, as under `full`
    /// (gVisor makes the mount point in its own tree).
    pub fn workspace_inside(&self, host: &Path) -> PathBuf {
        self.view.workspace_inside(host)
    }

    /// Writes `base`'s bundle and starts `runsc run` of it in `placement`,
    /// its output on `output`. `Err` names the step.
    pub fn start(
        &self,
        base: &str,
        launch: &RunnerLaunch,
        output: [OwnedFd; 2],
        placement: Option<&CgroupPlacement>,
        oom_score_adj: i32,
    ) -> Result<Cloned, (String, std::io::Error)> {
        let invalid = |what: String| (what, std::io::Error::from_raw_os_error(libc::EINVAL));
        let plan = self.view.plan(&launch.workspace, &launch.program);
        let plan = self.with_identity(plan, &launch.privileges, &launch.cwd);
        let spec = bundle::spec(base, &plan, launch).map_err(invalid)?;
        let dir = self.bundles.join(base);
        let id = self.container(base);
        bundle::write(&dir, &spec)
            .map_err(|error| (format!("OCI bundle {}", dir.display()), error))?;
        let pid = self
            .runsc
            .run(&dir, &id, output, placement, oom_score_adj)
            .map_err(|error| {
                let _ = std::fs::remove_dir_all(&dir);
                (format!("{} run", self.runsc.path.display()), error)
            })?;
        self.note_running(pid as i32, id);
        Ok(Cloned {
            pid: pid as i32,
            start_time: super::launch::proc_stat::read(pid as i32).map(|stat| stat.start_time),
        })
    }

    /// `base`'s sandbox has ended and its cgroup is empty (or killed):
    /// its `runsc run` (`pid`) forgotten, its runsc state and bundle removed
    /// (a prepared one's are named after the prepared sandbox it took).
    pub fn ended(&self, base: &str, pid: u32) {
        let id = self
            .running()
            .remove(&(pid as i32))
            .unwrap_or_else(|| self.container(base));
        self.runsc.forget(&id);
        let name = id
            .strip_prefix(&format!("{}-", self.prefix))
            .unwrap_or(base);
        let dir = self.bundles.join(name);
        if let Err(error) = std::fs::remove_dir_all(&dir) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(bundle = %dir.display(), %error, "cannot remove a gVisor sandbox's bundle");
            }
        }
    }

    /// Sends SIGTERM to the sandbox whose `runsc run` is `pid`, through
    /// `runsc kill`; false when `pid` runs no sandbox of this daemon's.
    pub fn terminate(&self, pid: i32) -> bool {
        let found = self.running().get(&pid).cloned();
        match found {
            Some(id) => {
                self.runsc.terminate(&id);
                true
            }
            None => false,
        }
    }

    /// Notes that container `id` runs, its `runsc run` being `pid`.
    fn note_running(&self, pid: i32, id: String) {
        self.running().insert(pid, id);
    }

    fn running(&self) -> MutexGuard<'_, HashMap<i32, String>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The runsc container id of sandbox `base`.
    fn container(&self, base: &str) -> String {
        format!("{}-{base}", self.prefix)
    }

    /// The exit of a runner whose `runsc run` ended with `code` or
    /// `signal`: runsc exits with 128 + N when the runner died of signal
    /// N (an OOM kill's SIGKILL, say), which is the runner's end to report.
    pub fn runner_exit(code: Option<i32>, signal: Option<i32>) -> (Option<i32>, Option<i32>) {
        match (code, signal) {
            (Some(code), None) if (129..=128 + 64).contains(&code) => (None, Some(code - 128)),
            other => other,
        }
    }

    /// The end of a command whose `runsc exec` ended with `code` or
    /// `signal`: as [`Gvisor::runner_exit`], except that 128 is runsc's own
    /// failure (it exits 128 when it cannot go on, as when the sandbox it
    /// waits in is torn down under it), so the command's end is unknown.
    pub fn command_exit(code: Option<i32>, signal: Option<i32>) -> (Option<i32>, Option<i32>) {
        match (code, signal) {
            (Some(128), None) => (None, None),
            other => Self::runner_exit(other.0, other.1),
        }
    }

    /// The features `status` and `describe` list, changed for gVisor: what
    /// it adds, and what changes meaning under it.
    pub fn adjust(&self, features: &mut Vec<IsolationFeature>) {
        let replace = |features: &mut Vec<IsolationFeature>, feature: IsolationFeature| {
            features.retain(|kept| kept.name != feature.name);
            features.push(feature);
        };
        for feature in self.features() {
            replace(features, feature);
        }
        features.sort_by(|a, b| a.name.cmp(&b.name));
    }

    fn features(&self) -> Vec<IsolationFeature> {
        let not_on_runsc = "not put on runsc, which needs its privileges to build the sandbox: the runner's system calls are served by gVisor's sentry and never reach the host kernel; runsc puts its own seccomp filter on the sentry and the gofer";
        let hidden: Vec<String> = self
            .view
            .hidden()
            .map(|path| path.display().to_string())
            .collect();
        vec![
            IsolationFeature::in_force(
                "gvisor",
                format!(
                    "{} ({}), runsc's default platform, --network=host (the sentry's sockets are the host kernel's, in the sandbox's cgroup), --ignore-cgroups (sentry and gofer stay in the sandbox's cgroups); prepared sandboxes park a runsc run with its sentry booted and a stub that execs the runner at the take; commands run as `runsc exec` into the sandbox (its uid, view and cgroups; signals through `runsc kill --pid` to the command's process; no limits of a command's own: it runs in the sandbox's sentry)",
                    self.runsc.path.display(),
                    self.runsc.version
                ),
            ),
            IsolationFeature::in_force(
                "mount-namespace",
                format!(
                    "gVisor's own file system tree: the host's read-only; private /tmp, /var/tmp, /dev/shm (gVisor tmpfs of {} MiB, in the sentry's memory, charged to the sandbox); hidden: {}; own workspace writable",
                    self.view.tmp_size() >> 20,
                    hidden.join(", ")
                ),
            ),
            IsolationFeature::in_force("pid-namespace", "gVisor's own: only the sandbox's processes; the pid reported is runsc's on the host"),
            IsolationFeature::in_force("ipc-namespace", "gVisor's own System V and POSIX IPC, gone with the sandbox"),
            IsolationFeature::in_force("at-home", "workspace at /workspace (HOME, WORKSPACE_ROOT_DIR); the sandbox's uid has a passwd and group entry (read-only copies bound over /etc/passwd and /etc/group)"),
            IsolationFeature::in_force("abstract-sockets", "gVisor's own Unix sockets: another sandbox's abstract sockets are not reachable"),
            IsolationFeature::in_force("private-ptys", "gVisor's own /dev and /dev/pts: no pty of the host's in reach"),
            IsolationFeature::in_force("no-new-namespaces", "namespaces made inside are gVisor's, not the host kernel's"),
            IsolationFeature::not_in_force("network-namespace", "the sentry uses the host's network (--network=host): the sandbox binds the host's ports; the egress rules hold its sockets"),
            IsolationFeature::not_in_force("seccomp", format!("the daemon's filter is {not_on_runsc}")),
            IsolationFeature::not_in_force("landlock", format!("Landlock is {not_on_runsc}")),
            IsolationFeature::not_in_force("signals", format!("Landlock's signal scope is {not_on_runsc}; gVisor's processes cannot signal the host's")),
            IsolationFeature::not_in_force("keyring", "gVisor has keyrings of its own: the host's are out of reach"),
            IsolationFeature::not_in_force("clean-start", "runsc starts the runner with the spec's environment and no descriptor beyond its stdio"),
            IsolationFeature::not_in_force("init-binary", "no sandboxd init: gVisor's sentry is the sandbox's kernel and runsc its leader (a prepared sandbox's stub, until it execs the runner, is the init binary's parked runner, inside gVisor)"),
        ]
    }
}
