//! How the tier launches runners and commands, chosen once at the start:
//! natively (the daemon's own clone and exec, in the sandbox's view under
//! `isolation = "full"`), or under gVisor's runsc (`isolation =
//! "gvisor"`, see `gvisor`). The shared mechanisms (the start, the
//! pool, the watcher, the stop, `exec`, `status`) ask this one choice
//! rather than each testing for gVisor.
//!
//! An enum rather than a trait object: there are two launchers, each
//! call is a plain `match` that reads whole in one place, and the native
//! arm of the hot calls (a runner's exit, its end, a stop's SIGTERM) is
//! nothing but what the shared code did before, with no indirection and
//! nothing boxed. The two calls whose arms differ most, a runner's start
//! and a command's, match on it where they start (`launch::spawn`,
//! `exec`), each arm handing over to its own module.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::sys::signal::Signal;
use sandboxd_protocol::IsolationFeature;

use super::gvisor::prepared::GvisorParker;
use super::gvisor::Gvisor;
use super::isolation::init_binary::InitBinary;
use super::isolation::kernel_filters::KernelFilters;
use super::prepared::parked_runner::RunnerParker;
use super::prepared::parking::Parker;
use super::stop;
use crate::config::{Config, IsolationMode};

/// How runners and commands are launched.
#[derive(Debug, Clone)]
pub enum Launcher {
    /// The daemon's own clone and exec.
    Native,
    /// `isolation = "gvisor"`: runners under `runsc run`, commands under
    /// `runsc exec`.
    Gvisor(Arc<Gvisor>),
}

impl Launcher {
    /// The launcher `config` asks for. Under `isolation = "gvisor"`,
    /// runsc found and tried, or the start fails naming what is missing:
    /// never a silent fall back to another mode.
    pub async fn set_up(
        config: &Config,
        inherited_env: &[(&'static str, std::ffi::OsString)],
    ) -> anyhow::Result<Launcher> {
        if config.isolation != IsolationMode::Gvisor {
            return Ok(Launcher::Native);
        }
        let path_var = inherited_env
            .iter()
            .find(|(name, _)| *name == "PATH")
            .map(|(_, value)| value.clone());
        let config = config.clone();
        let gvisor =
            tokio::task::spawn_blocking(move || Gvisor::set_up(&config, path_var.as_ref()))
                .await??;
        Ok(Launcher::Gvisor(Arc::new(gvisor)))
    }

    /// Why sandboxes cannot be prepared ahead with this launcher, if they
    /// cannot: a gVisor sandbox is prepared with its workspace made ahead
    /// (`disk_quota`: a project quota is set on each workspace at its start).
    pub fn check_pool(&self, disk_quota: bool) -> Result<(), String> {
        match self {
            Launcher::Gvisor(_) if disk_quota => Err("isolation = \"gvisor\" prepares sandboxes with their workspaces made ahead, which the [limits] disk project quota (set on each workspace at its start) rules out".into()),
            _ => Ok(()),
        }
    }

    /// How prepared sandboxes get their runner (of `program`) parked:
    /// `init_binary` waits in its place, with every runner's `filters` and
    /// `oom_score_adj`.
    pub fn parker(
        &self,
        program: PathBuf,
        init_binary: &Arc<InitBinary>,
        filters: &Arc<KernelFilters>,
        oom_score_adj: i32,
    ) -> Parker {
        match self {
            Launcher::Native => Parker::Runner(Arc::new(RunnerParker {
                filters: filters.clone(),
                oom_score_adj,
                init_binary: init_binary.clone(),
            })),
            Launcher::Gvisor(gvisor) => Parker::Gvisor(Arc::new(GvisorParker {
                gvisor: gvisor.clone(),
                stub: init_binary.path().to_path_buf(),
                program,
                oom_score_adj,
            })),
        }
    }

    /// Whether a sandbox new to the daemon may take a prepared sandbox
    /// with its runner parked: under gVisor only while it has no
    /// workspace on disk (`workspace`, looked up only then) yet, since a
    /// parked gVisor sandbox has the prepared one bound.
    pub fn may_take_parked(&self, workspace: impl FnOnce() -> PathBuf) -> bool {
        match self {
            Launcher::Native => true,
            Launcher::Gvisor(_) => !workspace().exists(),
        }
    }

    /// The runner's exit, from its leader's (`code` or `signal`).
    pub fn runner_exit(
        &self,
        code: Option<i32>,
        signal: Option<i32>,
    ) -> (Option<i32>, Option<i32>) {
        match self {
            Launcher::Native => (code, signal),
            Launcher::Gvisor(_) => Gvisor::runner_exit(code, signal),
        }
    }

    /// Sandbox `base`, whose leader was `pid`, has ended and its cgroup is
    /// empty (or killed): what the launcher kept of it goes.
    pub fn ended(&self, base: &str, pid: u32) {
        if let Launcher::Gvisor(gvisor) = self {
            gvisor.ended(base, pid);
        }
    }

    /// Asks the sandbox whose leader is `pgid` to stop: SIGTERM to its
    /// group. A gVisor sandbox's leader is `runsc run`, which would die of
    /// a SIGTERM rather than pass it on: it goes through `runsc kill`.
    pub fn terminate(&self, pgid: i32) {
        if let Launcher::Gvisor(gvisor) = self {
            if gvisor.terminate(pgid) {
                return;
            }
        }
        stop::kill_group(pgid, Signal::SIGTERM);
    }

    /// The features `status` and `describe` list, as this launcher changes
    /// them.
    pub fn adjust(&self, features: &mut Vec<IsolationFeature>) {
        if let Launcher::Gvisor(gvisor) = self {
            gvisor.adjust(features);
        }
    }

    /// Where a runner whose workspace is `host` sees it, when this
    /// launcher decides it (gVisor: `/workspace`); `None`: as its view has it.
    pub fn workspace_inside(&self, host: &Path) -> Option<PathBuf> {
        match self {
            Launcher::Native => None,
            Launcher::Gvisor(gvisor) => Some(gvisor.workspace_inside(host)),
        }
    }
}
