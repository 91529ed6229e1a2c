//! The kernel-side confinement every process-tier runner gets between
//! clone and exec, detected and prepared once when the driver starts: a
//! session keyring of the sandbox's ([`super::keyring`]), Landlock scoping
//! ([`super::landlock`]), a clean start ([`super::clean_start`]) and the
//! seccomp filter ([`super::seccomp`]). [`ChildFilters`] is what the clone
//! child reads; [`KernelFilters::features`] is what `status` says of them.

use std::os::fd::RawFd;

use sandboxd_protocol::IsolationFeature;

use super::clean_start::{ChildCleanStart, CleanStart};
use super::keyring::{SessionNames, SESSION_NAME_CAPACITY};
use super::landlock::LandlockScoping;
use super::seccomp::SeccompPlan;

/// Each mechanism, or why this host cannot have it.
#[derive(Debug)]
pub struct KernelFilters {
    keyring: Result<(), String>,
    /// `Some` where each sandbox has a uid of its own: its processes share
    /// one session keyring, joined by name (see [`super::keyring`]).
    session_names: Option<SessionNames>,
    landlock: Result<LandlockScoping, String>,
    seccomp: Result<SeccompPlan, String>,
    clean_start: CleanStart,
    runner_path: String,
}

impl KernelFilters {
    /// Detects what this kernel offers and prepares it. Never fails: what
    /// the host lacks is listed as not in force.
    pub fn for_this_host(runner_path: &str) -> KernelFilters {
        let filters = KernelFilters {
            keyring: super::keyring::kernel_has_keyrings().map_err(|error| {
                format!("not in force: the kernel has no keyrings ({error}): none to share")
            }),
            session_names: None,
            landlock: LandlockScoping::for_this_host().map_err(|error| error.to_string()),
            seccomp: SeccompPlan::for_this_host().map_err(|error| error.to_string()),
            clean_start: CleanStart::for_this_daemon(),
            runner_path: runner_path.to_string(),
        };
        for feature in filters.features() {
            if !feature.in_force {
                tracing::warn!(feature = %feature.name, "{}", feature.detail);
            }
        }
        filters
    }

    /// Gives each sandbox one session keyring for its runner and all its
    /// commands, when `per_sandbox_uids` (each sandbox has a uid of its
    /// own); else each process keeps joining a new one of its own.
    pub fn with_session_keyring_per_uid(mut self, per_sandbox_uids: bool) -> KernelFilters {
        self.session_names = per_sandbox_uids.then(SessionNames::new);
        self
    }

    /// The name of the session keyring that processes of `uid` join, if
    /// they join one by name.
    pub fn session_name_of(&self, uid: u32) -> Option<[u8; SESSION_NAME_CAPACITY]> {
        let names = self
            .session_names
            .as_ref()
            .filter(|_| self.keyring.is_ok())?;
        Some(names.of_uid(uid))
    }

    /// What `status` and `describe` list.
    pub fn features(&self) -> Vec<IsolationFeature> {
        let feature = |name: &str, state: Result<String, &String>| match state {
            Ok(how) => IsolationFeature::in_force(name, how),
            Err(why) => IsolationFeature::not_in_force(name, why.clone()),
        };
        let landlock = self.landlock.as_ref().map(LandlockScoping::describe);
        vec![
            feature(
                "keyring",
                self.keyring.as_ref().map(|()| {
                    if self.session_names.is_some() {
                        "a session keyring per sandbox, owned by its uid, shared by its runner and commands; a uid's user and persistent keyrings cleared before it is handed out again".to_string()
                    } else {
                        "a fresh session keyring per runner and per command, owned by its uid".to_string()
                    }
                }),
            ),
            feature("seccomp", self.seccomp.as_ref().map(SeccompPlan::describe)),
            feature(
                "no-new-namespaces",
                self.seccomp.as_ref().map(|_| {
                    "seccomp: unshare, setns and clone with CLONE_NEW* refused with EPERM, clone3 with ENOSYS".to_string()
                }),
            ),
            feature("abstract-sockets", landlock.clone()),
            feature("signals", landlock),
            IsolationFeature::in_force("clean-start", self.clean_start.describe(&self.runner_path)),
        ]
    }

    /// The open-file limit runners start with.
    #[cfg(test)]
    pub fn clean_start_nofile(&self) -> super::clean_start::Limit {
        self.clean_start.runner_nofile()
    }

    /// The plain values the clone child reads; the pointers in it point
    /// into `self`, which must outlive the clone. `thread_confined`: the
    /// cloning thread holds the seccomp filter's thread part (see
    /// [`Self::confine_cloning_thread`]), so the child attaches the rest.
    pub fn child_plan(&self, thread_confined: bool) -> ChildFilters {
        let seccomp = self
            .seccomp
            .as_ref()
            .ok()
            .map(|plan| match thread_confined {
                true => plan.after_cloning_thread_program(),
                false => plan.program(),
            });
        ChildFilters {
            join_session_keyring: self.keyring.is_ok(),
            landlock_ruleset: self
                .landlock
                .as_ref()
                .map_or(-1, |scoping| scoping.ruleset_fd()),
            clean_start: self.clean_start.child_plan(),
            seccomp,
        }
    }

    /// Attaches the seccomp filter's thread part to the calling thread
    /// (see [`SeccompPlan::cloning_thread_program`]); false where this host
    /// has no filter. For a thread that only ever clones commands: the
    /// part refuses it mounts, new namespaces of its own and the rest.
    pub fn confine_cloning_thread(&self) -> std::io::Result<bool> {
        let Ok(plan) = &self.seccomp else {
            return Ok(false);
        };
        // SAFETY: the plan's live program; the kernel copies it. Allowed by
        // the daemon's CAP_SYS_ADMIN (no `no_new_privs` needed or set).
        if !unsafe { super::seccomp::apply(&plan.cloning_thread_program()) } {
            return Err(std::io::Error::last_os_error());
        }
        Ok(true)
    }
}

/// The child's copy: flags, a descriptor, limits and filter pointers.
#[derive(Clone, Copy)]
pub struct ChildFilters {
    pub join_session_keyring: bool,
    /// `-1`: no Landlock scoping on this host.
    pub landlock_ruleset: RawFd,
    pub clean_start: ChildCleanStart,
    /// `None`: no seccomp filter on this host.
    pub seccomp: Option<libc::sock_fprog>,
}
