//! Latency for the daemon's serving threads under a spawn burst.
//!
//! On a small machine a new runner loading its libraries can hold a CPU
//! when a reply is ready to go out. Linux's EEVDF scheduler (6.12+) lets a
//! thread ask for a shorter time slice, which also lets it preempt sooner
//! when it wakes; the daemon's runtime threads, which do little per wake-up
//! and mostly wait, ask for one. Best effort: older kernels ignore or
//! refuse the request, and nothing depends on it. The request resets on
//! fork, so no child process inherits it.

/// `struct sched_attr` (SCHED_ATTR_SIZE_VER1).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;
/// The slice asked for: the kernel's floor (its default is 0.75 ms × log2(CPUs) + 1).
const SLICE_NS: u64 = 100_000;

/// Asks for a short slice for the calling thread, keeping its nice value.
pub fn request_short_slice() {
    // SAFETY: getpriority has no memory arguments. errno is not needed:
    // the nice value of a thread that never changed it is what it returns.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_flags: SCHED_FLAG_RESET_ON_FORK,
        sched_nice: nice,
        sched_runtime: SLICE_NS,
        ..SchedAttr::default()
    };
    // SAFETY: a valid sched_attr of the size it declares, for this thread (0).
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `se.slice` of a task, from `/proc/<pid>/task/<tid>/sched`; `None`
    /// where the kernel does not show one (before EEVDF).
    fn slice_of(path: &str) -> Option<u64> {
        let text = std::fs::read_to_string(path).ok()?;
        let line = text.lines().find(|line| line.starts_with("se.slice"))?;
        line.split(':').nth(1)?.trim().parse().ok()
    }

    #[test]
    fn the_thread_gets_the_short_slice_and_its_children_do_not() {
        std::thread::spawn(|| {
            let Some(before) = slice_of("/proc/thread-self/sched") else {
                eprintln!("skipped: this kernel shows no se.slice");
                return;
            };
            request_short_slice();
            let after = slice_of("/proc/thread-self/sched").unwrap();
            if after == before && before != SLICE_NS {
                eprintln!("skipped: this kernel ignores custom slices (before 6.12)");
                return;
            }
            assert_eq!(after, SLICE_NS);
            let mut child = std::process::Command::new("sleep")
                .arg("5")
                .spawn()
                .unwrap();
            let child_slice = slice_of(&format!("/proc/{}/sched", child.id()));
            child.kill().unwrap();
            child.wait().unwrap();
            assert_ne!(
                child_slice,
                Some(SLICE_NS),
                "a child inherited the short slice"
            );
        })
        .join()
        .unwrap();
    }
}
