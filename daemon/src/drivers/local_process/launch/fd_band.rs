//! A few low descriptor numbers per cloning thread, so that a runner's
//! clone child never copies the daemon's whole descriptor table.
//!
//! Why: a clone child without `CLONE_FILES` gets a copy of the daemon's
//! table — one reference taken per open descriptor — and closes them all
//! again (the clean start's `close_range`, exec's close-on-exec), and a
//! sandbox's init copies its table once more for its runner. The daemon
//! holds a descriptor per running sandbox, so with 10,000 running every new
//! sandbox cost some 40,000 descriptor operations: a fill to 10,000 slowed
//! until its calls passed their deadline (`perf`: `dup_fd`, `filp_flush`,
//! `dnotify_flush` were a third of the daemon's CPU at 8,000).
//!
//! How: at start, while the daemon has few descriptors, [`reserve`] takes a
//! band of low numbers (placeholders on `/dev/null`), [`SLOTS`] per thread
//! that clones. Before a clone, the thread duplicates every descriptor the
//! child will use onto its own slots ([`ThreadBand::place`]); the child is
//! cloned with `CLONE_FILES` (no copy) and its first act is
//! `close_range(top, ~0, CLOSE_RANGE_UNSHARE)`, which gives it a table of
//! its own holding only the numbers below `top` — the band — and then
//! closes every number there but its slots. After the spawn the thread puts
//! the placeholders back ([`ThreadBand::reset`]), so the daemon keeps no
//! copy of a runner's pipe or file.
//!
//! Where `CLOSE_RANGE_UNSHARE` is missing (Linux before 5.9), or a thread
//! has no band (a unit test's), the clone copies the table as before.

use std::cell::RefCell;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The descriptors one clone may use: its stdio (3), the `cgroup.procs`
/// of the v1 hierarchies (up to 5), the Landlock ruleset, the daemon's
/// binary for an init, and its runner's stdio (3).
pub const SLOTS: usize = 16;

/// The threads that may clone: the spawner threads (at most 8), as many
/// command threads, the parking thread, the background thread, and two to
/// spare.
const THREADS: usize = 20;

/// `close_range`'s flag (Linux 5.9).
pub const CLOSE_RANGE_UNSHARE: libc::c_uint = 1 << 1;

struct Reserved {
    slots: Vec<RawFd>,
    placeholder: RawFd,
    next_thread: AtomicUsize,
}

static RESERVED: OnceLock<Result<Reserved, String>> = OnceLock::new();

thread_local! {
    static BAND: RefCell<Option<ThreadBand>> = const { RefCell::new(None) };
}

/// Reserves the band. Call once, early, while the daemon is one thread
/// (it forks a probe). `Err` says why clones copy the table here.
pub fn reserve() -> Result<(), String> {
    RESERVED
        .get_or_init(reserve_now)
        .as_ref()
        .map(drop)
        .map_err(Clone::clone)
}

fn reserve_now() -> Result<Reserved, String> {
    probe_close_range_unshare()?;
    // SAFETY: open with a constant C string.
    let placeholder =
        unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if placeholder < 0 {
        return Err(format!(
            "cannot open /dev/null: {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut slots = Vec::with_capacity(THREADS * SLOTS);
    for _ in 0..THREADS * SLOTS {
        // SAFETY: F_DUPFD_CLOEXEC of a descriptor we hold: the lowest free
        // number from 3 on.
        let slot = unsafe { libc::fcntl(placeholder, libc::F_DUPFD_CLOEXEC, 3) };
        if slot < 0 {
            return Err(format!(
                "cannot reserve descriptors: {}",
                std::io::Error::last_os_error()
            ));
        }
        slots.push(slot);
    }
    Ok(Reserved {
        slots,
        placeholder,
        next_thread: AtomicUsize::new(0),
    })
}

/// Whether `close_range(…, CLOSE_RANGE_UNSHARE)` works here, tried in a
/// forked child (in the daemon itself it would split the calling thread's
/// table from the others').
fn probe_close_range_unshare() -> Result<(), String> {
    // SAFETY: fork while the process is one thread; the child makes one
    // system call and _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!(
            "cannot fork the close_range probe: {}",
            std::io::Error::last_os_error()
        ));
    }
    if pid == 0 {
        // SAFETY: close_range of every descriptor above 2 in this child's
        // own table, then _exit.
        unsafe {
            let closed = libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_UNSHARE);
            libc::_exit(if closed == 0 { 0 } else { 1 })
        }
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err("close_range(CLOSE_RANGE_UNSHARE) is refused (Linux before 5.9)".to_string())
    }
}

/// What came of [`reserve`], for the log: `Ok` with the band's size, or
/// why clones copy the table.
pub fn state() -> Result<usize, String> {
    match RESERVED.get() {
        Some(Ok(reserved)) => Ok(reserved.slots.len()),
        Some(Err(why)) => Err(why.clone()),
        None => Err("no band was reserved at start".to_string()),
    }
}

/// Gives the calling thread its slots, if any are left. For the threads
/// that clone runners (see `spawner`).
pub fn claim_for_this_thread() {
    let Some(Ok(reserved)) = RESERVED.get() else {
        return;
    };
    let index = reserved.next_thread.fetch_add(1, Ordering::Relaxed);
    let Some(slots) = reserved.slots.get(index * SLOTS..(index + 1) * SLOTS) else {
        return;
    };
    let mut band = ThreadBand {
        slots: [0; SLOTS],
        used: 0,
        sources: [-1; SLOTS],
        placeholder: reserved.placeholder,
    };
    band.slots.copy_from_slice(slots);
    band.slots.sort_unstable();
    BAND.with(|cell| *cell.borrow_mut() = Some(band));
}

/// Runs `work` with the calling thread's band (`None`: it has none).
pub fn with_band<T>(work: impl FnOnce(Option<&mut ThreadBand>) -> T) -> T {
    BAND.with(|cell| match cell.try_borrow_mut() {
        Ok(mut band) => work(band.as_mut()),
        // A clone inside a clone's preparation on this thread: none.
        Err(_) => work(None),
    })
}

/// One thread's slots.
pub struct ThreadBand {
    /// Ascending.
    slots: [RawFd; SLOTS],
    used: usize,
    /// What each used slot duplicates.
    sources: [RawFd; SLOTS],
    placeholder: RawFd,
}

impl ThreadBand {
    /// `fd` again at one of this thread's slots (close-on-exec, so no
    /// other child keeps it past its exec); the same slot for the same
    /// `fd`. `None` when the slots are all used (or `fd` is negative,
    /// "none", which stays as it is).
    pub fn place(&mut self, fd: RawFd) -> Option<RawFd> {
        if fd < 0 {
            return Some(fd);
        }
        if let Some(index) = self.sources[..self.used]
            .iter()
            .position(|&source| source == fd)
        {
            return Some(self.slots[index]);
        }
        if self.used == SLOTS {
            return None;
        }
        let slot = self.slots[self.used];
        // SAFETY: dup3 of a descriptor the caller holds onto a slot of
        // this thread's (replacing its placeholder).
        if unsafe { libc::dup3(fd, slot, libc::O_CLOEXEC) } < 0 {
            return None;
        }
        self.sources[self.used] = fd;
        self.used += 1;
        Some(slot)
    }

    /// The slots in use, ascending: what the child keeps.
    pub fn used(&self) -> &[RawFd] {
        &self.slots[..self.used]
    }

    /// The lowest number above every slot of this thread.
    pub fn top(&self) -> RawFd {
        self.slots[SLOTS - 1] + 1
    }

    /// Puts the placeholders back: the daemon keeps no copy of what a
    /// clone used.
    pub fn reset(&mut self) {
        for &slot in &self.slots[..self.used] {
            // SAFETY: dup3 of the placeholder onto our own slot.
            unsafe { libc::dup3(self.placeholder, slot, libc::O_CLOEXEC) };
        }
        self.sources = [-1; SLOTS];
        self.used = 0;
    }
}
