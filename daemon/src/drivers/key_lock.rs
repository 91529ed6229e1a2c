//! Per-sandbox serialization: one slow-path operation per key at a time.
//!
//! Concurrent ensures of one id must spawn exactly once, and an ensure
//! racing a deprovision of the same id must end in a consistent state. A
//! lock per key gives that without making calls for other ids wait behind a
//! spawn. Locks exist only while someone holds or awaits them.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

pub struct KeyLocks<K> {
    locks: Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>,
}

/// Held while one operation on a key runs; dropping it releases the key.
pub struct KeyGuard<'a, K: Eq + Hash> {
    owner: &'a KeyLocks<K>,
    key: K,
    guard: Option<OwnedMutexGuard<()>>,
}

impl<K: Eq + Hash + Clone> KeyLocks<K> {
    pub fn new() -> Self {
        KeyLocks {
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for the key. Cancellation-safe: dropping the future gives up the place in line.
    pub async fn lock(&self, key: &K) -> KeyGuard<'_, K> {
        let lock = {
            let mut locks = self
                .locks
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            locks.entry(key.clone()).or_default().clone()
        };
        let guard = lock.lock_owned().await;
        KeyGuard {
            owner: self,
            key: key.clone(),
            guard: Some(guard),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks.lock().unwrap().len()
    }
}

impl<K: Eq + Hash> Drop for KeyGuard<'_, K> {
    fn drop(&mut self) {
        let mut locks = self
            .owner
            .locks
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        // Clones are only made under this map lock, so the count is exact:
        // one in the map, one in our guard, and one per waiter.
        if locks
            .get(&self.key)
            .is_some_and(|lock| Arc::strong_count(lock) == 2)
        {
            locks.remove(&self.key);
        }
        self.guard.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serializes_one_key_and_cleans_up() {
        let locks = Arc::new(KeyLocks::new());
        let inside = Arc::new(AtomicUsize::new(0));
        let max_inside = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let (locks, inside, max_inside) =
                    (locks.clone(), inside.clone(), max_inside.clone());
                tokio::spawn(async move {
                    let _guard = locks.lock(&"a".to_string()).await;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(max_inside.load(Ordering::SeqCst), 1);
        assert_eq!(locks.len(), 0, "no lock outlives its users");
    }

    #[tokio::test]
    async fn other_keys_do_not_wait() {
        let locks = KeyLocks::new();
        let _a = locks.lock(&"a".to_string()).await;
        let b = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            locks.lock(&"b".to_string()),
        )
        .await;
        assert!(b.is_ok());
    }
}
