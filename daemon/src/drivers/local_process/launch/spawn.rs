//! Starting one runner: its workspace, its log file, its environment, its
//! user, its process group and its cgroup.

use std::ffi::{OsStr, OsString};
use std::fs::{DirBuilder, File};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandboxd_protocol::{SandboxEnv, SandboxError};

use super::super::cgroup::CgroupTree;
use super::super::gvisor::prepared::ParkedGvisor;
use super::super::isolation::init_binary::InitBinary;
use super::super::isolation::kernel_filters::KernelFilters;
use super::super::isolation::namespaces::View;
use super::super::launcher::Launcher;
use super::super::logs::RunnerLogs;
use super::super::prepared::parked::ParkedView;
use super::super::prepared::parked_runner::{self, ParkedRunner};
use super::super::prepared::parking::Parked;
use super::super::prepared::PreparedSandboxes;
use super::super::users::identity::RunnerIdentity;
use super::child_exits::{ChildExits, RunnerProcess};
use super::clone_exec::CgroupPlacement;
use super::holder::Holder;
use super::runner_plan::RunnerLaunch;
use crate::fd_limit;
use crate::sandbox_key::SandboxKey;

/// Everything about runners that comes from the daemon's configuration.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// As configured: a path, or a name looked up in `PATH`.
    pub command: String,
    pub args: Vec<String>,
    pub identity: RunnerIdentity,
    pub backend_endpoint: String,
    pub temporal_address: String,
    /// The only variables a runner inherits from the daemon: LANG, TZ (and
    /// PATH, which is only where the command is looked up).
    pub inherited_env: Vec<(&'static str, OsString)>,
    /// The `PATH` a runner gets (`runner_path`), not the daemon's.
    pub runner_path: OsString,
    /// `[runner] env`: after the contract's, for every runner and command.
    pub extra_env: Vec<(String, String)>,
    /// The sandbox's limits in force (see `limit_env`), for every runner
    /// and command.
    pub limit_env: Vec<(String, String)>,
    /// Keyring, Landlock, clean start and seccomp, prepared once.
    pub filters: Arc<KernelFilters>,
    pub sandboxes_dir: PathBuf,
    pub logs_dir: PathBuf,
    /// Written to each runner's `oom_score_adj`: a daemon shielded from the
    /// OOM killer (systemd's `OOMScoreAdjust=-500`) must not pass the shield
    /// on, or under memory pressure the kernel would kill the daemon first.
    pub oom_score_adj: i32,
    /// The sandboxes' cgroups; `None` in the process-group fallback.
    pub cgroups: Option<std::sync::Arc<CgroupTree>>,
    /// `[limits] disk` in bytes, when project quotas hold it: each
    /// workspace is made the sandbox's uid's project before the runner
    /// starts (see `disk_limit/project_quota.rs`).
    pub disk_quota: Option<u64>,
    /// `Some` under `isolation = "full"` where namespaces can be made:
    /// each runner starts under its own init, in its own view.
    pub view: Option<Arc<View>>,
    /// What runs as each sandbox's init, view holder and parked runner.
    pub init_binary: Arc<InitBinary>,
    /// How runners start: natively, or under runsc (see `launcher`).
    pub launcher: Launcher,
}

/// What a sandbox took from a prepared one (see `prepared`).
pub struct Taken<'a> {
    /// Its cgroups, made with their limits.
    pub placement: CgroupPlacement,
    /// True when its workspace is in place and owned already.
    pub workspace_made: bool,
    /// Its view, under `isolation = "full"`.
    pub view: Option<ParkedView>,
    /// Its runner, parked as its own uid (see `prepared::parking`).
    pub parked: Option<Parked>,
    /// Told when the view could not be joined.
    pub pool: &'a PreparedSandboxes,
}

/// The variables a runner may inherit. Nothing else of the daemon's
/// environment (least of all NOTIFY_SOCKET, LISTEN_*, WATCHDOG_*) reaches it.
const INHERITED_VARIABLES: [&str; 3] = ["PATH", "LANG", "TZ"];
const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Captures PATH, LANG and TZ from the daemon's environment, once.
pub fn inherited_env() -> Vec<(&'static str, OsString)> {
    INHERITED_VARIABLES
        .into_iter()
        .filter_map(|name| match std::env::var_os(name) {
            Some(value) => Some((name, value)),
            None if name == "PATH" => Some((name, OsString::from(FALLBACK_PATH))),
            None => None,
        })
        .collect()
}

impl RunnerSettings {
    pub fn workspace(&self, key: &SandboxKey) -> PathBuf {
        self.sandboxes_dir.join(&key.base_name)
    }

    pub fn log_file(&self, key: &SandboxKey) -> PathBuf {
        super::super::logs::file_path(&self.logs_dir, &key.base_name)
    }

    /// The daemon's own `PATH`, where the command is looked up.
    fn path_var(&self) -> Option<&OsString> {
        self.inherited_env
            .iter()
            .find(|(name, _)| *name == "PATH")
            .map(|(_, value)| value)
    }

    /// The executable to run: the configured path, or the first match in PATH.
    pub fn resolve_command(&self) -> Result<PathBuf, String> {
        if self.command.contains('/') {
            return Ok(PathBuf::from(&self.command));
        }
        let path_var = self.path_var().cloned().unwrap_or_default();
        std::env::split_paths(&path_var)
            .map(|dir| dir.join(&self.command))
            .find(|candidate| super::super::executable::is_executable_file(candidate))
            .ok_or_else(|| {
                format!(
                    "runner command '{}' was not found in PATH ({})",
                    self.command,
                    path_var.to_string_lossy()
                )
            })
    }

    /// Creates the workspace (kept across respawns) and starts the runner in
    /// it, as `sandbox_uid` when each sandbox has its own (see
    /// [`RunnerIdentity::privileges`]), its exit watched by `exits` (call
    /// on a spawner thread, see [`super::child_exits`]). No `.await`: the
    /// caller records the child before anything can cancel it. With
    /// `taken`, what a prepared sandbox made is used instead of made here.
    pub fn spawn(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
        logs: &Arc<RunnerLogs>,
        exits: &ChildExits,
        sandbox_uid: Option<u32>,
        mut taken: Option<Taken<'_>>,
    ) -> Result<RunnerProcess, SandboxError> {
        let workspace_made = taken.as_ref().is_some_and(|taken| taken.workspace_made);
        let launch = self.prepare_launch(key, env, sandbox_uid, workspace_made)?;
        // What was taken decides how it starts: a parked gVisor sandbox
        // pumps its own output, a parked runner takes the log file's.
        let runner = match taken.as_mut().map(|taken| (taken.parked.take(), taken)) {
            Some((Some(Parked::Gvisor(parked)), taken)) => {
                let started = self.start_parked_gvisor(key, &launch, logs, parked, taken, exits);
                if let Some(started) = started {
                    return started;
                }
                None
            }
            Some((Some(Parked::Runner(runner)), _)) => Some(runner),
            Some((None, _)) | None => None,
        };
        let log = logs.open_output(&key.base_name).map_err(|error| {
            let log_path = self.log_file(key);
            unavailable(
                key,
                format!("log file {}: {}", log_path.display(), io(&error)),
            )
        })?;
        let log_for_stderr = duplicate(key, &log)?;
        let output = [log, log_for_stderr];
        let Some(mut taken) = taken else {
            return self.start_cold(key, &launch, output, None, exits);
        };
        let output = match runner {
            None => output,
            Some(runner) => match self.start_parked(runner, &launch, &output, &mut taken.view) {
                Ok(started) => return Ok(self.watched(started, exits)),
                Err(parked_runner::StartError::Failed { step, error }) => {
                    return Err(self.start_failed(key, &launch, step, error));
                }
                // Not used: the sandbox starts cold (its view may be gone
                // with it).
                Err(parked_runner::StartError::Unused { why, for_good }) => {
                    let why = format!("a parked runner could not be used: {why}");
                    taken.pool.failed(why, for_good);
                    taken.view = None;
                    let copies = [duplicate(key, &output[0])?, duplicate(key, &output[1])?];
                    drop(output);
                    copies
                }
            },
        };
        self.start_cold(key, &launch, output, Some(taken), exits)
    }

    /// Starts `launch` in `parked`, the gVisor sandbox `taken` had parked,
    /// if it can be used; `None`: the sandbox starts otherwise.
    fn start_parked_gvisor(
        &self,
        key: &SandboxKey,
        launch: &RunnerLaunch,
        logs: &Arc<RunnerLogs>,
        parked: ParkedGvisor,
        taken: &mut Taken<'_>,
        exits: &ChildExits,
    ) -> Option<Result<RunnerProcess, SandboxError>> {
        match parked.start(launch, logs, &key.base_name) {
            Ok((leader, process)) => Some(Ok(self.watched(
                Started {
                    leader,
                    runner_pid: leader.pid,
                    status_file: None,
                    holder: None,
                    process: Some(process),
                },
                exits,
            ))),
            Err(parked_runner::StartError::Failed { step, error }) => {
                Some(Err(self.start_failed(key, launch, step, error)))
            }
            Err(parked_runner::StartError::Unused { why, for_good }) => {
                let why = format!("a parked gVisor sandbox could not be used: {why}");
                taken.pool.failed(why, for_good);
                None
            }
        }
    }

    /// What `key`'s runner starts with: its program found, its workspace
    /// made (unless a prepared sandbox made it) and under its quota, its
    /// environment.
    fn prepare_launch(
        &self,
        key: &SandboxKey,
        env: &SandboxEnv,
        sandbox_uid: Option<u32>,
        workspace_made: bool,
    ) -> Result<RunnerLaunch, SandboxError> {
        let program = self
            .resolve_command()
            .map_err(|what| unavailable(key, what))?;
        let workspace = self.workspace(key);
        let seen = self.workspace_seen(&workspace);
        let privileges = self.identity.privileges(sandbox_uid);
        if !workspace_made {
            self.prepare_workspace(&workspace, privileges.user)
                .map_err(|error| {
                    let what = format!("workspace {}: {}", workspace.display(), io(&error));
                    unavailable(key, what)
                })?;
        }
        if let (Some(limit), Some(project)) = (self.disk_quota, sandbox_uid) {
            super::super::disk_limit::project_quota::apply(&workspace, project, limit).map_err(
                |error| {
                    let what = format!(
                        "project quota on workspace {}: {}",
                        workspace.display(),
                        io(&error)
                    );
                    unavailable(key, what)
                },
            )?;
        }
        Ok(RunnerLaunch {
            program,
            args: self.args.clone(),
            env: self.runner_env(env, &seen),
            cwd: seen,
            workspace,
            privileges,
        })
    }

    /// The runner's environment: what it inherits, the contract's
    /// variables, the limits in force, then `[runner] env` over them.
    fn runner_env(&self, env: &SandboxEnv, seen: &Path) -> Vec<(OsString, OsString)> {
        let mut vars: Vec<(&OsStr, &OsStr)> = self
            .inherited_env
            .iter()
            .filter(|(name, _)| *name != "PATH")
            .map(|(name, value)| (OsStr::new(name), value.as_os_str()))
            .collect();
        vars.push((OsStr::new("PATH"), self.runner_path.as_os_str()));
        let optional = [
            ("STIGMER_BACKEND_ENDPOINT", self.backend_endpoint.as_str()),
            ("TEMPORAL_SERVICE_ADDRESS", self.temporal_address.as_str()),
            ("STIGMER_TOKEN", env.stigmer_token.expose()),
        ];
        vars.extend(
            [
                ("HOME", seen.as_os_str()),
                ("MODE", OsStr::new("local")),
                ("STIGMER_TASK_QUEUE", OsStr::new(&env.task_queue)),
                ("WORKSPACE_ROOT_DIR", seen.as_os_str()),
            ]
            .map(|(name, value)| (OsStr::new(name), value)),
        );
        vars.extend(
            optional
                .into_iter()
                .filter(|(_, value)| !value.is_empty())
                .map(|(name, value)| (OsStr::new(name), OsStr::new(value))),
        );
        vars.extend(
            self.limit_env
                .iter()
                .map(|(name, value)| (OsStr::new(name), OsStr::new(value))),
        );
        for (name, value) in &self.extra_env {
            vars.retain(|(kept, _)| *kept != OsStr::new(name));
            vars.push((OsStr::new(name), OsStr::new(value)));
        }
        vars.into_iter()
            .map(|(name, value)| (name.to_os_string(), value.to_os_string()))
            .collect()
    }

    /// The cold start, or the rest of a warm one (`taken`'s cgroups and
    /// view, its runner used or not): the runner cloned into its cgroups,
    /// in its view under `isolation = "full"`, else directly.
    fn start_cold(
        &self,
        key: &SandboxKey,
        launch: &RunnerLaunch,
        output: [OwnedFd; 2],
        taken: Option<Taken<'_>>,
        exits: &ChildExits,
    ) -> Result<RunnerProcess, SandboxError> {
        let (prepared_placement, prepared_view, pool) = match taken {
            Some(taken) => (Some(taken.placement), taken.view, Some(taken.pool)),
            None => (None, None, None),
        };
        let placement = match (prepared_placement, &self.cgroups) {
            (Some(placement), _) => Some(placement),
            (None, Some(tree)) => Some(
                tree.create(&key.base_name)
                    .map_err(|error| unavailable(key, format!("cgroup: {}", io(&error))))?,
            ),
            (None, None) => None,
        };
        let unusable = |why: String, for_good: bool| {
            if let Some(pool) = pool {
                pool.failed(why, for_good);
            }
        };
        let started = match &self.launcher {
            Launcher::Native => {
                self.start_natively(key, launch, output, placement, prepared_view, &unusable)
            }
            Launcher::Gvisor(gvisor) => gvisor
                .start(
                    &key.base_name,
                    launch,
                    output,
                    placement.as_ref(),
                    self.oom_score_adj,
                )
                .map(Started::leader_only),
        };
        let started =
            started.map_err(|(step, error)| self.start_failed(key, launch, step, error))?;
        Ok(self.watched(started, exits))
    }

    /// The native start: the runner cloned into `placement`, in its view
    /// under `isolation = "full"` (`prepared_view`'s when one was taken),
    /// else directly.
    fn start_natively(
        &self,
        key: &SandboxKey,
        launch: &RunnerLaunch,
        [log, log_for_stderr]: [OwnedFd; 2],
        placement: Option<CgroupPlacement>,
        prepared_view: Option<ParkedView>,
        unusable: &dyn Fn(String, bool),
    ) -> Result<Started, (String, std::io::Error)> {
        match &self.view {
            Some(view) => view
                .spawn(
                    &key.base_name,
                    launch,
                    &self.filters,
                    [log, log_for_stderr],
                    placement,
                    prepared_view,
                    unusable,
                )
                .map(|spawned| Started {
                    leader: spawned.init,
                    runner_pid: spawned.runner_pid,
                    status_file: spawned.status_file,
                    holder: spawned.holder,
                    process: None,
                })
                .map_err(|error| (error.step, error.error)),
            None => match File::open("/dev/null") {
                Ok(stdin) => start_directly(
                    launch,
                    [OwnedFd::from(stdin), log, log_for_stderr],
                    placement,
                    &self.filters,
                ),
                Err(error) => Err(("open /dev/null".to_string(), error)),
            },
        }
    }

    /// A start that failed: its cgroup goes, and the error names the
    /// program, the user, the workspace and the step.
    fn start_failed(
        &self,
        key: &SandboxKey,
        launch: &RunnerLaunch,
        step: String,
        error: std::io::Error,
    ) -> SandboxError {
        if let Some(tree) = &self.cgroups {
            let _ = tree.remove_sandbox(&key.base_name);
        }
        let who = match launch.privileges.user {
            Some((uid, gid)) => format!("uid {uid} gid {gid}"),
            None => self.identity.display.clone(),
        };
        unavailable(
            key,
            format!(
                "'{}' as {who} in {}: {step}: {}",
                launch.program.display(),
                launch.workspace.display(),
                io(&error)
            ),
        )
    }

    /// The started runner, its exit watched (by `exits`, this spawner
    /// thread's, unless it was parked and is watched already).
    fn watched(&self, started: Started, exits: &ChildExits) -> RunnerProcess {
        let parked = started.process.is_some();
        let child = started
            .process
            .unwrap_or_else(|| exits.watch(started.leader.pid, started.leader.start_time))
            .running(started.runner_pid, started.status_file, started.holder);
        // Set from outside: after setuid the runner could no longer write its
        // own. Raising the score needs no privilege. (Under an init both get
        // it: the runner started before this write. A parked runner got it
        // when it was parked.)
        if !parked {
            let adj = self.oom_score_adj.to_string();
            for pid in [child.id(), child.runner_pid()] {
                if let Err(error) = std::fs::write(format!("/proc/{pid}/oom_score_adj"), &adj) {
                    tracing::warn!(pid, %error, "cannot set the runner's oom_score_adj");
                }
            }
        }
        child
    }

    /// Starts `launch` in its parked `runner`: under `isolation = "full"`
    /// the workspace is mounted into the taken view first.
    fn start_parked(
        &self,
        runner: ParkedRunner,
        launch: &RunnerLaunch,
        output: &[OwnedFd; 2],
        view: &mut Option<ParkedView>,
    ) -> Result<Started, parked_runner::StartError> {
        if let (Some(settings), Some(parked_view)) = (&self.view, view.as_mut()) {
            settings
                .mount_workspace(parked_view, launch)
                .map_err(|error| parked_runner::StartError::Unused {
                    for_good: error.error.raw_os_error() == Some(libc::EPERM),
                    why: format!("{}: {}", error.step, error.error),
                })?;
        }
        let failed = |step: &str| {
            let step = step.to_string();
            move |error| parked_runner::StartError::Failed { step, error }
        };
        let stdin = File::open("/dev/null").map_err(failed("open /dev/null"))?;
        let duplicate = |fd: &OwnedFd| fd.try_clone().map_err(failed("dup of stdio"));
        let stdio = [
            OwnedFd::from(stdin),
            duplicate(&output[0])?,
            duplicate(&output[1])?,
        ];
        if runner.user() != launch.privileges.user {
            // Parked as another user than the sandbox's (cannot happen:
            // a sandbox with its own uid takes none, see `take`): unused.
            return Err(parked_runner::StartError::Unused {
                why: "it was parked as another user".to_string(),
                for_good: false,
            });
        }
        let pid = runner.pid();
        let process = runner.start(launch, &stdio)?;
        let holder = view.take().map(ParkedView::into_holder);
        if holder.is_some() {
            tracing::debug!(runner = pid, "a parked runner started in a prepared view");
        }
        Ok(Started {
            leader: super::clone_exec::Cloned {
                pid,
                start_time: process.start_time(),
            },
            runner_pid: pid,
            status_file: None,
            holder,
            process: Some(process),
        })
    }

    /// Where a runner whose workspace is `host` sees it: `/workspace` in
    /// a view (see `isolation::workspace_mount`), else `host`.
    pub fn workspace_seen(&self, host: &Path) -> PathBuf {
        if let Some(inside) = self.launcher.workspace_inside(host) {
            return inside;
        }
        match &self.view {
            Some(view) => view.settings.workspace_inside(host),
            None => host.to_path_buf(),
        }
    }

    /// `<sandboxes>/<base>`, 0700, owned by the runner's user (`user`, when
    /// the runner switches to one).
    fn prepare_workspace(&self, workspace: &Path, user: Option<(u32, u32)>) -> std::io::Result<()> {
        let created = match DirBuilder::new().mode(0o700).create(workspace) {
            Ok(()) => true,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(error) => return Err(error),
        };
        match user {
            None => {}
            // Empty and ours: one chown.
            Some((uid, gid)) if created => {
                std::os::unix::fs::lchown(workspace, Some(uid), Some(gid))?
            }
            Some((uid, gid)) => {
                if let Some(previous) =
                    super::super::workspaces::owner::give_to(workspace, uid, gid)?
                {
                    tracing::info!(workspace = %workspace.display(), uid, previous, "handed a workspace over to its sandbox's uid");
                }
            }
        }
        Ok(())
    }
}

/// Why `key`'s runner cannot start: `what` could not be done.
fn unavailable(key: &SandboxKey, what: String) -> SandboxError {
    SandboxError::Unavailable(format!(
        "cannot start the runner of {} '{}' ({}): {what}",
        key.scope, key.id, key.base_name
    ))
}

/// Every I/O error names the open-file limit when it is the reason
/// (EMFILE): a daemon holding thousands of runners meets it.
fn io(error: &std::io::Error) -> String {
    fd_limit::describe(error)
}

/// A second descriptor of the runner's output.
fn duplicate(key: &SandboxKey, fd: &OwnedFd) -> Result<OwnedFd, SandboxError> {
    fd.try_clone()
        .map_err(|error| unavailable(key, format!("output pipe: {}", io(&error))))
}

/// A sandbox's leader (its runner, or its init), and what is reported.
struct Started {
    leader: super::clone_exec::Cloned,
    runner_pid: libc::pid_t,
    status_file: Option<PathBuf>,
    holder: Option<Holder>,
    /// A parked runner's exit, watched since it was parked.
    process: Option<RunnerProcess>,
}

impl Started {
    /// A leader that is the runner itself, to be watched.
    fn leader_only(leader: super::clone_exec::Cloned) -> Started {
        Started {
            leader,
            runner_pid: leader.pid,
            status_file: None,
            holder: None,
            process: None,
        }
    }
}

/// `isolation = "uid-cgroup"` (or no namespaces here): the daemon's clone
/// child execs the runner itself.
fn start_directly(
    launch: &RunnerLaunch,
    stdio: [OwnedFd; 3],
    placement: Option<super::clone_exec::CgroupPlacement>,
    filters: &Arc<KernelFilters>,
) -> Result<Started, (String, std::io::Error)> {
    let plan = launch
        .exec_plan(stdio, filters.clone())
        .map_err(|problem| (problem, std::io::Error::from_raw_os_error(libc::EINVAL)))?;
    let plan = match placement {
        Some(placement) => plan.in_cgroup(placement),
        None => plan,
    };
    let child = plan.spawn().map_err(|error| (error.step, error.error))?;
    Ok(Started {
        leader: child,
        runner_pid: child.pid,
        status_file: None,
        holder: None,
        process: None,
    })
}

/// The file name of the runner shipped with the daemon to try it with
/// (`src/bin/example_runner.rs`).
pub(in crate::drivers::local_process) const EXAMPLE_RUNNER: &str = "sandboxd-example-runner";

/// Whether the runner command is the example runner, so `status` can say
/// so: a daemon that serves real work with it is a mistake to make visible.
pub(in crate::drivers::local_process) fn is_example_runner(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|name| name == std::ffi::OsStr::new(EXAMPLE_RUNNER))
}
