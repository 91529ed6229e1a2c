//! Deprovisions still tearing down after their answer went.
//!
//! A deprovision answers once its runner has exited or been killed (see
//! [`super::deprovision`]); emptying and removing its cgroup, moving its
//! workspace to the trash and releasing its uid go on in its task. A clean
//! stop must not end with that half done, so each such task is counted
//! here and the stop waits until none is left.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Default)]
pub struct Teardowns {
    count: Arc<Counter>,
}

#[derive(Default)]
struct Counter {
    running: AtomicUsize,
    idle: Notify,
}

/// Held by one deprovision's task until its teardown is done.
pub struct Pending {
    count: Arc<Counter>,
}

impl Teardowns {
    /// Counts one more deprovision under way.
    pub fn begin(&self) -> Pending {
        self.count.running.fetch_add(1, Ordering::AcqRel);
        Pending {
            count: self.count.clone(),
        }
    }

    /// Waits until no deprovision is under way.
    pub async fn idle(&self) {
        loop {
            let notified = self.count.idle.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check: a last drop between the two
            // still wakes this.
            notified.as_mut().enable();
            if self.count.running.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// How many are under way.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.count.running.load(Ordering::Acquire)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.count.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.count.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_waits_for_every_pending_teardown() {
        let teardowns = Arc::new(Teardowns::default());
        teardowns.idle().await;
        let (first, second) = (teardowns.begin(), teardowns.begin());
        assert_eq!(teardowns.len(), 2);
        let waiter = tokio::spawn({
            let teardowns = teardowns.clone();
            async move { teardowns.idle().await }
        });
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one is still under way");
        drop(second);
        waiter.await.unwrap();
        assert_eq!(teardowns.len(), 0);
    }
}
