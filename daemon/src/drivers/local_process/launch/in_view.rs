//! Starting a sandbox in its private view: in new mount, PID and IPC
//! namespaces ([`View::spawn`]), its first process building the view,
//! starting the runner and exec'ing the sandbox's init (see
//! `clone_exec`'s `view_child`), or in a view prepared ahead. The plan it
//! follows is `isolation::namespaces`'.
//!
//! The pids: the daemon signals, reaps and records in its ledger the
//! init's (host) pid — the sandbox's group leader, as the runner is under
//! `uid-cgroup` — and reports the runner's host pid (`ensure`, `describe`),
//! read from `/proc/<init>/task/<init>/children` once init says the runner
//! has started.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use super::super::isolation::kernel_filters::KernelFilters;
use super::super::isolation::namespaces::{View, NAMESPACES};
use super::super::isolation::passwd_entry::{self, IdentityFiles};
use super::super::isolation::private_network::NetworkError;
use super::super::prepared::parked::{Lifeline, ParkedView, ViewMaker};
use super::clone_exec::{CgroupPlacement, Cloned, ExecPlan, Privileges, RUNNER_PID_ARG};
use super::holder::Holder;
use super::runner_plan::RunnerLaunch;
use sandboxd_init::init::{ARG, DROP_BOUNDING_SET, KEEP_BOUNDING_SET};

/// A sandbox started in its view, not yet reaped.
pub struct ViewSpawn {
    /// The init: the sandbox's group leader.
    pub init: Cloned,
    /// The runner's host pid, as reported.
    pub runner_pid: libc::pid_t,
    /// Holds the runner's wait status once init has exited; `None` when
    /// the runner joined a prepared view (it is the daemon's own child).
    pub status_file: Option<PathBuf>,
    /// The prepared view's holder, kept until the runner's exit is known.
    pub holder: Option<Holder>,
}

/// What failed when a sandbox could not start in its view.
#[derive(Debug)]
pub struct StartError {
    pub step: String,
    pub error: io::Error,
}

impl StartError {
    fn at(step: &str) -> impl FnOnce(io::Error) -> StartError + '_ {
        move |error| StartError {
            step: step.to_string(),
            error,
        }
    }
}

impl View {
    /// The view's own `/etc/passwd` and `/etc/group` for `runner`'s user,
    /// written now; `None` when the host's know it (see [`passwd_entry`]),
    /// or when they cannot be written (a full state directory): the
    /// sandbox still starts, its uid unnamed, and the log says why.
    fn identity_of(&self, runner: &RunnerLaunch) -> Option<IdentityFiles> {
        let (uid, gid) = runner.privileges.user?;
        passwd_entry::write_for(&self.identities_dir, uid, gid, &runner.cwd)
            .inspect_err(|error| {
                tracing::warn!(uid, %error, "cannot write the view's /etc/passwd: the sandbox's uid has no entry in its view");
            })
            .ok()
            .flatten()
    }

    /// What the pool's views (see `prepared`) are made from: views for
    /// runners of `program`.
    pub fn view_maker(&self, program: PathBuf, drop_bounding_set: bool) -> io::Result<ViewMaker> {
        Ok(ViewMaker {
            settings: self.settings.clone(),
            exe: self.exe.clone(),
            program,
            drop_bounding_set,
            lifeline: Lifeline::new()?,
            network: self.network.as_ref().ok().cloned(),
            identities_dir: self.identities_dir.clone(),
        })
    }

    /// Mounts `runner`'s workspace and identity into a taken `view` (for
    /// its parked runner, see `prepared::parked_runner`), under the cover a
    /// cold view would give it.
    pub fn mount_workspace(
        &self,
        view: &mut ParkedView,
        runner: &RunnerLaunch,
    ) -> Result<(), StartError> {
        let identity = self.identity_of(runner);
        let cover = view.cover_of(&runner.cwd);
        view.enter(
            &runner.workspace,
            &runner.cwd,
            cover.as_ref(),
            identity.as_ref(),
        )
        .map(drop)
        .map_err(|error| StartError {
            step: error.step,
            error: error.error,
        })
    }

    /// Starts `runner` (under `filters`, as the daemon starts any runner)
    /// as the child of a new init in its own namespaces (and `cgroup`), its
    /// output on `output`, and returns once it runs: inside `prepared`, a
    /// view made ahead, when one is given and can be joined (else cold;
    /// `unusable` is told why, and whether for good). Call on a spawner
    /// thread (see `launch::spawner`); the caller watches `init` when this
    /// succeeds, and nothing is left when it fails.
    #[allow(clippy::too_many_arguments)]
    pub fn spawn(
        &self,
        base_name: &str,
        runner: &RunnerLaunch,
        filters: &Arc<KernelFilters>,
        output: [OwnedFd; 2],
        cgroup: Option<CgroupPlacement>,
        prepared: Option<ParkedView>,
        unusable: &dyn Fn(String, bool),
    ) -> Result<ViewSpawn, StartError> {
        // Warm where a view was taken and the sandbox has its cgroups (as
        // a cold start would, the runner is cloned into them).
        let (output, cgroup) = match (prepared, cgroup.is_some()) {
            (Some(view), true) => {
                match self.spawn_prepared(unusable, view, runner, filters, output, cgroup) {
                    Ok(spawned) => return spawned,
                    Err(back) => back,
                }
            }
            _ => (output, cgroup),
        };
        self.spawn_cold(base_name, runner, filters, output, cgroup)
    }

    /// Starts `runner` inside a prepared `view`. `Ok` is the sandbox's
    /// outcome (started, or the runner's own failure); `Err` gives the
    /// output and cgroup back for a cold start, when the view could not be
    /// joined (its holder gone, a capability missing).
    #[allow(clippy::type_complexity)]
    fn spawn_prepared(
        &self,
        unusable: &dyn Fn(String, bool),
        mut view: ParkedView,
        runner: &RunnerLaunch,
        filters: &Arc<KernelFilters>,
        output: [OwnedFd; 2],
        cgroup: Option<CgroupPlacement>,
    ) -> Result<Result<ViewSpawn, StartError>, ([OwnedFd; 2], Option<CgroupPlacement>)> {
        let cover = view.cover_of(&runner.cwd);
        // Opened here: inside the view, /proc is the view's own.
        let null = match File::open("/dev/null") {
            Ok(null) => null,
            Err(error) => return Ok(Err(StartError::at("open /dev/null")(error))),
        };
        let identity = self.identity_of(runner);
        let entered = view.enter(
            &runner.workspace,
            &runner.cwd,
            cover.as_ref(),
            identity.as_ref(),
        );
        let inside = match entered {
            Ok(inside) => inside,
            Err(error) => {
                let for_good = error.error.raw_os_error() == Some(libc::EPERM);
                unusable(
                    format!(
                        "{}: {}{}",
                        error.step,
                        error.error,
                        if for_good {
                            " (joining a prepared view needs CAP_SYS_ADMIN, CAP_SYS_CHROOT and CAP_SYS_PTRACE)"
                        } else {
                            ""
                        }
                    ),
                    for_good,
                );
                return Err((output, cgroup));
            }
        };
        Ok(Self::start_inside(
            inside, view, runner, filters, null, output, cgroup,
        ))
    }

    /// The runner's start inside a joined view: the ordinary runner clone
    /// (it inherits this thread's namespaces, and is cloned into the
    /// sandbox's cgroups), then back to the daemon's. The holder stays in
    /// the daemon's cgroup (see [`Holder`]) and ends with the runner.
    fn start_inside(
        inside: super::super::prepared::parked::InsideView,
        view: ParkedView,
        runner: &RunnerLaunch,
        filters: &Arc<KernelFilters>,
        null: File,
        output: [OwnedFd; 2],
        cgroup: Option<CgroupPlacement>,
    ) -> Result<ViewSpawn, StartError> {
        let [stdout, stderr] = output;
        let plan = runner
            .exec_plan([OwnedFd::from(null), stdout, stderr], filters.clone())
            .map_err(invalid)?
            .joining_pid_namespace();
        let plan = match cgroup {
            Some(placement) => plan.in_cgroup(placement),
            None => plan,
        };
        let spawned = plan.spawn();
        drop(plan);
        drop(inside);
        // On a failed start, `view` drops here: nothing of the sandbox may
        // outlive it.
        let cloned = spawned.map_err(|error| StartError {
            step: error.step,
            error: error.error,
        })?;
        tracing::debug!(
            holder = view.holder(),
            runner = cloned.pid,
            "a runner joined a prepared view"
        );
        Ok(ViewSpawn {
            init: cloned,
            runner_pid: cloned.pid,
            status_file: None,
            holder: Some(view.into_holder()),
        })
    }

    /// The cold start: the view built on the caller's time.
    fn spawn_cold(
        &self,
        base_name: &str,
        runner: &RunnerLaunch,
        filters: &Arc<KernelFilters>,
        output: [OwnedFd; 2],
        cgroup: Option<CgroupPlacement>,
    ) -> Result<ViewSpawn, StartError> {
        // The namespace is set up on its own thread while the view's plan
        // is made.
        let network = self.network.as_ref().ok().map(|private| private.start());
        let status_file = self.exits_dir.join(base_name);
        let init = self.init_plan(runner, filters, output, &status_file)?;
        let init = match cgroup {
            Some(placement) => init.in_cgroup(placement),
            None => init,
        };
        let network = network
            .map(|starting| starting.ready())
            .transpose()
            .map_err(from_network)?;
        // Init is cloned into the namespace this thread is in.
        let inside = network
            .as_ref()
            .map(|network| network.enter())
            .transpose()
            .map_err(from_network)?;
        let spawned = init.spawn();
        drop(inside);
        // Our copies of the descriptors: only init and the runner hold them now.
        drop(init);
        let cloned = spawned.map_err(|error| {
            let _ = std::fs::remove_file(&status_file);
            StartError {
                step: error.step,
                error: error.error,
            }
        })?;
        let runner_pid = first_child(cloned.pid).unwrap_or_else(|| {
            tracing::warn!(
                init = cloned.pid,
                "cannot read the runner's pid from /proc: reporting the init's"
            );
            cloned.pid
        });
        Ok(ViewSpawn {
            init: cloned,
            runner_pid,
            status_file: Some(status_file),
            holder: network.map(|network| Holder::of_network(network.into_relay())),
        })
    }

    /// The plan of a cold sandbox's first process: the view's mounts, the
    /// runner's plan (its output on `output`), and `sandboxd-init` with its
    /// wait status written to `status_file`.
    fn init_plan(
        &self,
        runner: &RunnerLaunch,
        filters: &Arc<KernelFilters>,
        output: [OwnedFd; 2],
        status_file: &std::path::Path,
    ) -> Result<ExecPlan, StartError> {
        let mut plan = self.settings.plan(&runner.workspace, &runner.program);
        if let Some(identity) = self.identity_of(runner) {
            plan = plan.with_identity(&identity);
        }
        let mounts = plan.prepare().map_err(|error| StartError {
            step: format!("{} {}", error.step, error.path.display()),
            error: error.error,
        })?;
        let [stdout, stderr] = output;
        let null = File::open("/dev/null").map_err(StartError::at("open /dev/null"))?;
        let duplicate = |fd: &OwnedFd| fd.try_clone().map_err(StartError::at("dup of stdio"));
        let runner_stdio = [
            OwnedFd::from(null),
            duplicate(&stdout)?,
            duplicate(&stderr)?,
        ];
        let runner_plan = runner
            .exec_plan(runner_stdio, filters.clone())
            .map_err(invalid)?;
        let status = File::create(status_file).map_err(StartError::at("create the status file"))?;
        let user = match runner.privileges.user {
            Some((uid, gid)) => format!("{uid}:{gid}"),
            None => "-".to_string(),
        };
        let bounding_set = match runner.privileges.bounding_set_up_to {
            Some(_) => DROP_BOUNDING_SET,
            None => KEEP_BOUNDING_SET,
        };
        Ok(ExecPlan::new(
            "sandboxd-init".as_ref(),
            [ARG, RUNNER_PID_ARG, &user, bounding_set],
            [] as [(&str, &str); 0],
            "/".as_ref(),
            [OwnedFd::from(status), stdout, stderr],
            Privileges::default(),
        )
        .map_err(invalid)?
        .into_sandbox_init(self.exe.fd(), NAMESPACES, mounts, runner_plan))
    }
}

fn from_network(error: NetworkError) -> StartError {
    StartError {
        step: format!("the sandbox's network: {}", error.step),
        error: error.error,
    }
}

/// A plan the clone child cannot take (a NUL byte in a path or variable).
fn invalid(problem: String) -> StartError {
    StartError {
        step: problem,
        error: io::Error::from_raw_os_error(libc::EINVAL),
    }
}

/// The first child of `pid` (its only one, at this point: the runner).
fn first_child(pid: libc::pid_t) -> Option<libc::pid_t> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}
