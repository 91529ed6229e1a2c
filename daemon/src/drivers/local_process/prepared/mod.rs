//! Views prepared ahead of demand (issue 20's warm pool, for the private
//! view of issue 16): per scope, a few sets of new mount, PID and IPC
//! namespaces with the host-wide part of the view already built (system
//! read-only, homes and the daemon's directories hidden, private tmpfs,
//! the runner program and `[view]` paths bound, `/proc` mounted), each held
//! by a holder process ([`parked`]). A new sandbox takes one: it mounts its
//! workspace in and starts its runner inside, which costs a few system
//! calls instead of the namespaces' creation and the view's twenty-odd
//! mounts; the pool refills on its own low-priority thread.
//!
//! What is *not* prepared: the uid, the cgroups and the workspace, which
//! are the sandbox's own and made on its ensure as before — so a view is
//! nobody's until taken, is used once (its holder ends with the sandbox's
//! runner, see [`parked::Holder`]), and never weakens what a cold sandbox
//! gets.
//! A burst larger than the pool, a view that died, or a view built for
//! another runner program falls back to the cold start. Nothing prepared
//! survives a stop: the daemon's stop ends them, and a holder exits when its
//! lifeline from the daemon ends (see [`parked::Lifeline`]) if the daemon
//! dies.

pub mod parked;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sandboxd_protocol::{IsolationFeature, Scope};

use super::launch::spawner::Background;
use crate::config::PoolConfig;
use parked::{ParkedView, ViewMaker};

const SCOPES: [Scope; 3] = [Scope::Session, Scope::Workflow, Scope::Connect];

fn slot(scope: Scope) -> usize {
    match scope {
        Scope::Session => 0,
        Scope::Workflow => 1,
        Scope::Connect => 2,
    }
}

/// The pool: per scope, the views ready, and what the pool has done.
pub struct PreparedViews {
    maker: ViewMaker,
    background: Background,
    targets: [usize; 3],
    ready: [Mutex<VecDeque<ParkedView>>; 3],
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
}

impl PreparedViews {
    /// A pool of `sizes` views from `maker`, made on `background`; starts
    /// filling at once.
    pub fn start(maker: ViewMaker, background: Background, sizes: &PoolConfig) -> Arc<Self> {
        let pool = Arc::new(PreparedViews {
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
        });
        pool.refill();
        pool
    }

    /// A ready view of `scope` built for `program`, if there is one (a
    /// hit); else `None`, and the sandbox starts cold (a miss). Either way
    /// the caller calls [`PreparedViews::refill`] once its runner's start
    /// is over: a view made meanwhile would contend with that start for
    /// the kernel's mount lock (a new mount namespace copies the mount
    /// table under it; `setns`, `move_mount` and the remounts take it too)
    /// and, on a small host, for its CPUs.
    pub fn take(self: &Arc<Self>, scope: Scope, program: &Path) -> Option<ParkedView> {
        let index = slot(scope);
        if self.targets[index] == 0 || self.disabled.load(Ordering::Acquire) {
            return None;
        }
        let taken = {
            let mut ready = self.ready(index);
            // Built for another program (the runner command resolved
            // elsewhere since): no use to anyone now.
            ready.retain(|view| view.program() == program);
            ready.pop_front()
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

    /// Ends every view not taken, and makes no more.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.drain();
    }

    fn drain(&self) {
        for index in 0..SCOPES.len() {
            self.ready(index).clear();
        }
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
                let made = pool.maker.park(exits);
                pool.making[index].fetch_sub(1, Ordering::AcqRel);
                match made {
                    Ok(view) if !pool.stopping.load(Ordering::Acquire) => {
                        pool.ready(index).push_back(view);
                        // The next one, if the scope still lacks any.
                        pool.refill();
                    }
                    Ok(_) => {}
                    Err(problem) => {
                        // Not retried until the next take: a view that
                        // cannot be made now will not be in a loop.
                        tracing::warn!(%problem, "cannot prepare a view: sandboxes start cold");
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

    fn ready(&self, index: usize) -> MutexGuard<'_, VecDeque<ParkedView>> {
        self.ready[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `prepared-views` for `status`: the sizes, what is ready, hits and
    /// misses per scope, and the last problem.
    pub fn feature(&self) -> IsolationFeature {
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
        let text = match &problem {
            Some(problem) => format!("{}; last problem: {problem}", scopes.join("; ")),
            None => scopes.join("; "),
        };
        if self.disabled.load(Ordering::Acquire) {
            IsolationFeature::not_in_force("prepared-views", format!("off: {text}"))
        } else {
            IsolationFeature::in_force("prepared-views", text)
        }
    }
}

impl std::fmt::Debug for PreparedViews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedViews")
            .field("targets", &self.targets)
            .finish_non_exhaustive()
    }
}
