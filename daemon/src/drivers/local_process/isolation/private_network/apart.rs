//! Threads started from a spawner thread that keep none of its file
//! system context.
//!
//! A spawner thread has a file system context (`fs_struct`: root, cwd,
//! umask) of its own (`unshare(CLONE_FS)`), because it joins views'
//! mount namespaces and `setns` into a mount namespace is refused with
//! EINVAL while another task shares that context. Every thread it starts
//! shares it (threads are cloned with CLONE_FS), so a namespace's maker
//! or the stock's refill, started from a spawner thread and still
//! running, would make the spawner's next `setns` fail, and the daemon
//! aborts rather than start anything in the wrong view (seen in CI: an
//! exec right after a cold start). So each such thread leaves the shared
//! context first, and its starter waits until it has.

use std::io;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// A thread started by [`spawn_apart`].
pub struct Apart<T>(JoinHandle<Option<T>>);

impl<T> Apart<T> {
    /// Waits for its work's result (`None`: the work panicked).
    pub fn join(self) -> Option<T> {
        self.0.join().ok().flatten()
    }
}

/// Starts `work` on a thread named `name` that has left the caller's file
/// system context before this returns.
pub fn spawn_apart<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> io::Result<Apart<T>> {
    let (left, apart) = mpsc::sync_channel::<io::Result<()>>(1);
    let thread = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            // SAFETY: unshare with a plain flag; it affects this thread only.
            let unshared = match unsafe { libc::unshare(libc::CLONE_FS) } {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            };
            let failed = unshared.is_err();
            let _ = left.send(unshared);
            (!failed).then(work)
        })?;
    match apart.recv() {
        Ok(Ok(())) => Ok(Apart(thread)),
        Ok(Err(error)) => {
            // It still shares the context: wait until it is gone.
            let _ = thread.join();
            Err(error)
        }
        Err(_) => {
            let _ = thread.join();
            Err(io::Error::other(
                "a thread ended before leaving the shared file system context",
            ))
        }
    }
}
