//! A few namespaces made ahead ([`STOCK`]), so a cold start (or a
//! prepared view being made) takes one ready instead of waiting for nft
//! to load its table (4 of the 7 ms a cold private start took, measured
//! with the bench's `full-cold-private-net` row). Each take starts a
//! refill on a thread of its own. Nothing of a sandbox is in a stocked
//! namespace until it is taken: no process, no relay served, only the
//! loopback, the table and the relay's sockets bound.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::apart::spawn_apart;
use super::{make_on_own_thread, Made};
use crate::egress::namespace_rules::NamespaceRules;

/// How many namespaces are kept ready.
pub const STOCK: usize = 2;

/// How long a refill waits after the take that started it: the start that
/// took the namespace is still cloning its sandbox, and on a small host a
/// refill at once (an nft process) takes the CPU it needs (as the pool's
/// refill waits after a start, see `prepared::quiet`).
const AFTER_A_TAKE: Duration = Duration::from_millis(3);

/// The namespaces kept ready, and whether a refill is under way.
pub struct NamespaceStock {
    rules: Arc<NamespaceRules>,
    made: Mutex<Vec<Made>>,
    refilling: AtomicBool,
}

impl NamespaceStock {
    /// An empty stock; [`NamespaceStock::refill`] fills it.
    pub fn new(rules: Arc<NamespaceRules>) -> Arc<NamespaceStock> {
        Arc::new(NamespaceStock {
            rules,
            made: Mutex::new(Vec::new()),
            refilling: AtomicBool::new(false),
        })
    }

    /// A ready namespace if there is one; a refill starts either way.
    pub fn take(self: &Arc<Self>) -> Option<Made> {
        let made = self.stocked().pop();
        self.refill();
        made
    }

    /// How many are ready now.
    pub fn ready(&self) -> usize {
        self.stocked().len()
    }

    /// Makes namespaces on a thread of its own until [`STOCK`] are ready
    /// (unless a refill is already under way). One that fails ends the
    /// refill, logged; the next take tries again.
    pub fn refill(self: &Arc<Self>) {
        if self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let stock = self.clone();
        // Apart: a take comes from a spawner thread (see `apart`).
        let spawned = spawn_apart("netns-stock", move || {
            std::thread::sleep(AFTER_A_TAKE);
            stock.fill();
        });
        if spawned.is_err() {
            self.refilling.store(false, Ordering::Release);
        }
    }

    /// Fills the stock on the calling thread: at the daemon's start, so
    /// it serves with the stock full (and its descriptors counted).
    pub fn fill_here(&self) {
        if !self.refilling.swap(true, Ordering::AcqRel) {
            self.fill();
        }
    }

    fn fill(&self) {
        loop {
            while self.stocked().len() < STOCK {
                match make_on_own_thread(&self.rules) {
                    Ok(made) => self.stocked().push(made),
                    Err(error) => {
                        tracing::warn!(%error, "cannot make a network namespace ahead: cold starts make their own");
                        self.refilling.store(false, Ordering::Release);
                        return;
                    }
                }
            }
            self.refilling.store(false, Ordering::Release);
            // A take between the last check and the store above found the
            // refill still running: look once more.
            if self.stocked().len() >= STOCK || self.refilling.swap(true, Ordering::AcqRel) {
                return;
            }
        }
    }

    fn stocked(&self) -> std::sync::MutexGuard<'_, Vec<Made>> {
        self.made
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
