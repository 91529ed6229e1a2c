//! The steps of a runner's clone child, in order: what the child reports
//! when one fails (its number, through shared memory, since the child may
//! not allocate), and the words the daemon's error uses for it.

/// One step of the clone child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildStep {
    Cgroup,
    Dup2,
    NoNewPrivs,
    Ambient,
    BoundingSet,
    Securebits,
    Setgroups,
    Setresgid,
    Setresuid,
    Capset,
    Chdir,
    Setsid,
    Pdeathsig,
    Execve,
    Keyring,
    Landlock,
    Limits,
    Seccomp,
    View,
    RunnerClone,
    Runner,
    UnshareFiles,
    ControllingTerminal,
    Affinity,
}

impl ChildStep {
    /// Every step, by the number the child reports.
    const ALL: [ChildStep; 24] = [
        ChildStep::Cgroup,
        ChildStep::Dup2,
        ChildStep::NoNewPrivs,
        ChildStep::Ambient,
        ChildStep::BoundingSet,
        ChildStep::Securebits,
        ChildStep::Setgroups,
        ChildStep::Setresgid,
        ChildStep::Setresuid,
        ChildStep::Capset,
        ChildStep::Chdir,
        ChildStep::Setsid,
        ChildStep::Pdeathsig,
        ChildStep::Execve,
        ChildStep::Keyring,
        ChildStep::Landlock,
        ChildStep::Limits,
        ChildStep::Seccomp,
        ChildStep::View,
        ChildStep::RunnerClone,
        ChildStep::Runner,
        ChildStep::UnshareFiles,
        ChildStep::ControllingTerminal,
        ChildStep::Affinity,
    ];

    /// The number the child reports for this step.
    pub fn number(self) -> usize {
        self as usize
    }

    /// The step the child reported, if the number is one.
    pub fn from_number(number: usize) -> Option<ChildStep> {
        Self::ALL.get(number).copied()
    }

    /// What the step does, as the daemon's error names it.
    pub fn name(self) -> &'static str {
        match self {
            ChildStep::Cgroup => "join of the sandbox's cgroups (a write to cgroup.procs or tasks)",
            ChildStep::Dup2 => "dup2 of stdio",
            ChildStep::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)",
            ChildStep::Ambient => "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
            ChildStep::BoundingSet => "prctl(PR_CAPBSET_DROP)",
            ChildStep::Securebits => "prctl(PR_SET_SECUREBITS)",
            ChildStep::Setgroups => "setgroups",
            ChildStep::Setresgid => "setresgid",
            ChildStep::Setresuid => "setresuid",
            ChildStep::Capset => "capset (all sets empty)",
            ChildStep::Chdir => "chdir",
            ChildStep::Setsid => "setsid",
            ChildStep::Pdeathsig => "prctl(PR_SET_PDEATHSIG)",
            ChildStep::Execve => "execve",
            ChildStep::Keyring => "keyctl(KEYCTL_JOIN_SESSION_KEYRING)",
            ChildStep::Landlock => "landlock_restrict_self",
            ChildStep::Limits => "prlimit64 (clean start)",
            ChildStep::Seccomp => "seccomp(SECCOMP_SET_MODE_FILTER)",
            ChildStep::View => "build the view",
            ChildStep::RunnerClone => "clone of the runner",
            ChildStep::Runner => "start the runner",
            ChildStep::UnshareFiles => "close_range(CLOSE_RANGE_UNSHARE)",
            ChildStep::ControllingTerminal => "ioctl(TIOCSCTTY)",
            ChildStep::Affinity => "sched_setaffinity",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_step_is_found_by_its_number() {
        for (number, step) in ChildStep::ALL.iter().enumerate() {
            assert_eq!(step.number(), number);
            assert_eq!(ChildStep::from_number(number), Some(*step));
        }
        assert_eq!(ChildStep::from_number(usize::MAX), None);
    }
}
