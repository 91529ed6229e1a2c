//! Sandboxes prepared ahead of demand (a warm pool): per scope, a
//! few sandboxes whose host parts are made ([`host_parts`]: cgroups with
//! their limits, a uid claimed host-wide, a workspace directory owned by
//! it) and, under `isolation = "full"`, whose view is built: new mount,
//! PID and IPC namespaces with the host-wide part of the view (system
//! read-only, homes and the daemon's directories hidden, private tmpfs,
//! the runner program and `[view]` paths bound, `/proc` mounted), held by
//! a holder process ([`parked`]). A new sandbox takes one: it renames the
//! workspace into place, mounts it into the view and starts its runner
//! inside, cloned straight into the cgroups — a few system calls instead
//! of the cgroups' creation and limit writes, the uid claim, the
//! workspace's `mkdir` and `chown`, the namespaces' creation and the
//! view's twenty-odd mounts. The pool refills on its own low-priority
//! thread a few milliseconds after the start is over ([`quiet`]).
//!
//! A prepared sandbox is nobody's until taken, is used once (its cgroups
//! and uid become the sandbox's; its holder ends with the sandbox's
//! runner, see [`parked::Holder`]), and never weakens what a cold sandbox
//! gets: the same limits, the same view, the same runner start.
//! A burst larger than the pool, a view that died, or a view built for
//! another runner program falls back to the cold start. Under
//! `isolation = "gvisor"` the runner parked is a `runsc run` with its
//! sentry booted (see `gvisor::prepared`). Nothing prepared
//! survives a stop: the daemon's stop undoes them, a holder exits when its
//! lifeline from the daemon ends (see [`parked::Lifeline`]) if the daemon
//! dies, and the next start removes the rest (see [`host_parts`]).

pub mod host_parts;
pub mod parked;
pub mod parked_runner;
pub mod parking;
pub mod quiet;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sandboxd_protocol::{IsolationFeature, PoolStatus, Scope};

use super::gvisor::prepared::{GvisorParker, ParkedGvisor};
use super::launch::child_exits::ChildExits;
use super::launch::spawner::Background;
use crate::config::PoolConfig;
use host_parts::{HostMaker, PreparedHost};
use parked::{ParkedView, ViewMaker};
use parked_runner::{ParkedRunner, RunnerParker};
use parking::{Parked, Parker};
use quiet::Quiet;

/// One sandbox prepared ahead: its runner parked in it (unless parking is
/// off), its view under `isolation = "full"`, and its host parts. Dropped
/// in that order: the runner is gone before its uid is given back, and
/// the view (and its relay) before the cgroup is removed.
pub struct Prepared {
    pub parked: Option<Parked>,
    pub view: Option<ParkedView>,
    pub host: PreparedHost,
}

/// What every prepared sandbox is made from.
pub struct SandboxMaker {
    pub host: Arc<HostMaker>,
    pub view: Option<ViewMaker>,
    /// How runners are parked, as the launcher parks them; `None`: no
    /// runner is parked ahead (`[pool] park_runners = false`).
    pub parker: Option<Parker>,
    /// Set once parking a runner failed: the sandboxes are prepared
    /// without.
    pub parking_failed: AtomicBool,
    /// Why, for `status`.
    pub parking_problem: Mutex<Option<String>>,
}

impl SandboxMaker {
    /// Makes one on the background thread, whose children `exits` reaps
    /// (a parked runner's are the parking thread's, see `background`).
    fn make(&self, exits: &ChildExits, background: &Background) -> Result<Prepared, String> {
        let host = self.host.make()?;
        let mut view = match &self.view {
            Some(maker) => {
                maker.write_identity_ahead(host.privileges().user);
                Some(maker.park(exits)?)
            }
            None => None,
        };
        let parked = match &self.parker {
            Some(parker) if !self.parking_failed.load(Ordering::Acquire) => {
                let (parked, view_back) = Self::park(parker, &host, view, background)?;
                view = view_back;
                match parked {
                    Ok(parked) => Some(parked),
                    Err(problem) => {
                        // Not tried again: what failed once (a kernel
                        // refusing a step) fails every time.
                        tracing::warn!(%problem, "cannot park a runner ahead: prepared sandboxes start their runners themselves");
                        self.parking_failed.store(true, Ordering::Release);
                        *self
                            .parking_problem
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) = Some(problem);
                        None
                    }
                }
            }
            _ => None,
        };
        Ok(Prepared { parked, host, view })
    }

    /// Parks a runner in `host` (and `view`) on the parking thread, as
    /// `parker` parks them; gives the view back. A runner that fails to
    /// park is the inner `Err` (the sandbox is prepared without); a gVisor
    /// sandbox that fails to is the outer one (the sandbox is not
    /// prepared).
    #[allow(clippy::type_complexity)]
    fn park(
        parker: &Parker,
        host: &PreparedHost,
        view: Option<ParkedView>,
        background: &Background,
    ) -> Result<(Result<Parked, String>, Option<ParkedView>), String> {
        match parker {
            Parker::Runner(parker) => {
                let (parked, view) = Self::park_runner(parker, host, view, background)?;
                Ok((parked.map(Parked::Runner), view))
            }
            Parker::Gvisor(parker) => {
                let parked = Self::park_gvisor(parker, host, background)?;
                Ok((Ok(Parked::Gvisor(parked)), view))
            }
        }
    }

    /// Parks a gVisor sandbox in `host` on the parking thread.
    fn park_gvisor(
        parker: &Arc<GvisorParker>,
        host: &PreparedHost,
        background: &Background,
    ) -> Result<ParkedGvisor, String> {
        let workspace = host
            .workspace()
            .ok_or("a prepared gVisor sandbox needs its workspace made ahead")?
            .to_path_buf();
        let placement = host
            .placement_copy()
            .map_err(|error| format!("dup of a prepared sandbox's cgroups: {error}"))?;
        let (name, privileges) = (host.name().to_string(), host.privileges());
        let parker = parker.clone();
        background
            .on_parking_thread(move |exits| {
                parker.park(exits, &name, &workspace, placement, privileges)
            })
            .ok_or_else(|| "the parking thread is gone".to_string())?
    }

    /// Parks a runner in `host` (and `view`) on the parking thread; gives
    /// the view back.
    #[allow(clippy::type_complexity)]
    fn park_runner(
        parker: &Arc<RunnerParker>,
        host: &PreparedHost,
        mut view: Option<ParkedView>,
        background: &Background,
    ) -> Result<(Result<ParkedRunner, String>, Option<ParkedView>), String> {
        let placement = host
            .placement_copy()
            .map_err(|error| format!("dup of a prepared sandbox's cgroups: {error}"))?;
        let privileges = host.privileges();
        let parker = parker.clone();
        background
            .on_parking_thread(move |exits| {
                let parked = parker.park(exits, placement, privileges, view.as_mut());
                (parked, view)
            })
            .ok_or_else(|| "the parking thread is gone".to_string())
    }
}

const SCOPES: [Scope; 3] = [Scope::Session, Scope::Workflow, Scope::Connect];

fn slot(scope: Scope) -> usize {
    match scope {
        Scope::Session => 0,
        Scope::Workflow => 1,
        Scope::Connect => 2,
    }
}

/// The pool: per scope, the sandboxes ready, and what the pool has done.
pub struct PreparedSandboxes {
    maker: SandboxMaker,
    background: Background,
    targets: [usize; 3],
    ready: [Mutex<VecDeque<Prepared>>; 3],
    /// Views being made now, per scope (so a refill never overshoots).
    making: [AtomicUsize; 3],
    hits: [AtomicU64; 3],
    misses: [AtomicU64; 3],
    /// The last failure to make or take a view, for `status`.
    problem: Mutex<Option<String>>,
    /// Set when taking views cannot work here (a capability missing):
    /// no more are made.
    disabled: AtomicBool,
    stopping: AtomicBool,
    /// When a refill may work (see [`quiet`]).
    quiet: Quiet,
}

impl PreparedSandboxes {
    /// A pool of `sizes` sandboxes from `maker`, made on `background`;
    /// starts filling at once.
    pub fn start(maker: SandboxMaker, background: Background, sizes: &PoolConfig) -> Arc<Self> {
        let quiet = maker
            .parker
            .as_ref()
            .map_or_else(Quiet::default, Parker::quiet);
        let pool = Arc::new(PreparedSandboxes {
            maker,
            background,
            targets: [sizes.session, sizes.workflow, sizes.connect],
            ready: Default::default(),
            making: Default::default(),
            hits: Default::default(),
            misses: Default::default(),
            problem: Mutex::new(None),
            disabled: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            quiet,
        });
        pool.refill();
        pool
    }

    /// A ready sandbox of `scope` (its view built for `program`), if there
    /// is one (a hit); else `None`, and the sandbox starts cold (a miss).
    /// Either way the caller calls
    /// [`PreparedSandboxes::refill_after_a_start`] once its runner's start
    /// is over: a view made meanwhile would contend with that start for
    /// the kernel's mount lock (a new mount namespace copies the mount
    /// table under it; `setns`, `move_mount` and the remounts take it too)
    /// and, on a small host, for its CPUs.
    ///
    /// A sandbox that is not `new` (a respawn: it has its own uid already;
    /// under gVisor, one whose workspace is on disk already) takes only one
    /// without a parked runner, which runs as another uid (and under gVisor
    /// has another workspace bound).
    pub fn take(self: &Arc<Self>, scope: Scope, program: &Path, new: bool) -> Option<Prepared> {
        let index = slot(scope);
        if self.targets[index] == 0 || self.disabled.load(Ordering::Acquire) {
            return None;
        }
        let taken = {
            let mut ready = self.ready(index);
            // Built for another program (the runner command resolved
            // elsewhere since): no use to anyone now.
            ready.retain(|prepared| {
                let view = prepared.view.as_ref().map(ParkedView::program);
                let parked = prepared.parked.as_ref().and_then(Parked::program);
                view.into_iter().chain(parked).all(|made| made == program)
            });
            match ready
                .iter()
                .position(|prepared| new || prepared.parked.is_none())
            {
                Some(position) => ready.remove(position),
                None => None,
            }
        };
        match &taken {
            Some(_) => self.hits[index].fetch_add(1, Ordering::Relaxed),
            None => self.misses[index].fetch_add(1, Ordering::Relaxed),
        };
        taken
    }

    /// Notes that a taken view could not be used (`why`); with
    /// `for_good` (the daemon lacks what joining needs) the pool stops.
    pub fn failed(&self, why: String, for_good: bool) {
        tracing::warn!(problem = %why, for_good, "a prepared view could not be used: the sandbox starts cold");
        if for_good {
            self.disabled.store(true, Ordering::Release);
            self.drain();
        }
        *self.problem.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
    }

    /// Undoes every sandbox not taken, and makes no more.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.drain();
    }

    fn drain(&self) {
        for index in 0..SCOPES.len() {
            self.ready(index).clear();
        }
    }

    /// [`refill`](Self::refill), once a runner's start is over: the
    /// refill works only [`quiet::AFTER_A_START`] from now.
    pub fn refill_after_a_start(self: &Arc<Self>) {
        self.quiet.after_a_start();
        self.refill();
    }

    /// Queues the making of as many views as each scope lacks, one job
    /// each, on the background thread.
    pub fn refill(self: &Arc<Self>) {
        for index in 0..SCOPES.len() {
            if self.stopping.load(Ordering::Acquire) || self.disabled.load(Ordering::Acquire) {
                return;
            }
            // One view in the making per scope at a time (each made chains
            // the next): a burst takes the ready ones and starts the rest
            // cold, and the background thread never holds a backlog.
            if self.ready(index).len() >= self.targets[index]
                || self.making[index]
                    .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                continue;
            }
            let pool = self.clone();
            let queued = self.background.run(move |exits| {
                pool.quiet.wait(&pool.stopping);
                let made = pool.maker.make(exits, &pool.background);
                pool.making[index].fetch_sub(1, Ordering::AcqRel);
                match made {
                    Ok(prepared) if !pool.stopping.load(Ordering::Acquire) => {
                        pool.ready(index).push_back(prepared);
                        // The next one, if the scope still lacks any.
                        pool.refill();
                    }
                    Ok(_) => {}
                    Err(problem) => {
                        // Not retried until the next take: a view that
                        // cannot be made now will not be in a loop.
                        tracing::warn!(%problem, "cannot prepare a sandbox: sandboxes start cold");
                        *pool.problem.lock().unwrap_or_else(PoisonError::into_inner) =
                            Some(problem);
                    }
                }
            });
            if !queued {
                self.making[index].fetch_sub(1, Ordering::AcqRel);
                return;
            }
        }
    }

    fn ready(&self, index: usize) -> MutexGuard<'_, VecDeque<Prepared>> {
        self.ready[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Each scope's pool for `status`: its size, what is ready, hits and
    /// misses.
    pub fn pools(&self) -> Vec<PoolStatus> {
        SCOPES
            .iter()
            .enumerate()
            .map(|(index, scope)| PoolStatus {
                scope: *scope,
                size: self.targets[index] as u32,
                ready: self.ready(index).len() as u32,
                hits: self.hits[index].load(Ordering::Relaxed),
                misses: self.misses[index].load(Ordering::Relaxed),
            })
            .collect()
    }

    /// `prepared-views` (under `isolation = "full"`) or
    /// `prepared-sandboxes` for `status`: the sizes, what is ready, hits
    /// and misses per scope, and the last problem.
    pub fn feature(&self) -> IsolationFeature {
        let name = feature_name(self.maker.view.is_some());
        let scopes: Vec<String> = SCOPES
            .iter()
            .enumerate()
            .map(|(index, scope)| match self.targets[index] {
                0 => format!("{scope}: off"),
                target => format!(
                    "{scope}: {} of {target} ready, {} taken, {} started cold",
                    self.ready(index).len(),
                    self.hits[index].load(Ordering::Relaxed),
                    self.misses[index].load(Ordering::Relaxed)
                ),
            })
            .collect();
        let problem = self
            .problem
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let parking = match &self.maker.parker {
            Some(parker) => parker.describe(self.maker.parking_failed.load(Ordering::Acquire)),
            None => "runners started at the take (park_runners = false)",
        };
        let problem = problem.or_else(|| {
            self.maker
                .parking_problem
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        });
        let mut text = scopes.join("; ");
        if self.targets.iter().any(|target| *target > 0) {
            text = format!("{text}; {parking}");
        }
        if let Some(problem) = &problem {
            text = format!("{text}; last problem: {problem}");
        }
        if self.disabled.load(Ordering::Acquire) {
            IsolationFeature::not_in_force(name, format!("off: {text}"))
        } else {
            IsolationFeature::in_force(name, text)
        }
    }
}

/// The pool's feature in `status`: `prepared-views` when sandboxes get a
/// private view, else `prepared-sandboxes`.
fn feature_name(views: bool) -> &'static str {
    if views {
        "prepared-views"
    } else {
        "prepared-sandboxes"
    }
}

/// The feature of a pool that could not start, and why: `status` says so,
/// rather than leaving the pool out.
pub fn not_started(views: bool, why: &str) -> IsolationFeature {
    IsolationFeature::not_in_force(
        feature_name(views),
        format!("off: {why}; every sandbox starts cold"),
    )
}

impl std::fmt::Debug for PreparedSandboxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedSandboxes")
            .field("targets", &self.targets)
            .finish_non_exhaustive()
    }
}
