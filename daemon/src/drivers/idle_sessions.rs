//! A table of per-key sessions that end when left idle: what a download
//! read chunk by chunk keeps between its calls (a stream being made, or a
//! copy of one on the host), so the next call reads on instead of starting
//! over. Each session's state sits behind an async lock (one call at a
//! time reads it); a session without a call for the table's idle time has
//! its state reset to `T::default()` (dropping what it held) and leaves the
//! table. At most `max` sessions are kept: a new one past it ends the one
//! unused longest. A session forgotten while a call holds it ends when
//! that call lets go of it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

type Table<K, T> = Arc<Mutex<HashMap<K, Arc<Session<T>>>>>;

/// The sessions of one kind of download.
pub struct IdleSessions<K, T> {
    table: Table<K, T>,
    idle: Duration,
    max: usize,
}

/// One key's session: its state, and when a call last used it.
pub struct Session<T> {
    pub state: tokio::sync::Mutex<T>,
    last_used: Mutex<Instant>,
}

impl<K, T> IdleSessions<K, T>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
    T: Default + Send + 'static,
{
    pub fn new(idle: Duration, max: usize) -> Self {
        IdleSessions {
            table: Arc::default(),
            idle,
            max,
        }
    }

    /// The session of `key`, made (with its idle watch) if there is none.
    /// Must be called inside a tokio runtime.
    pub fn session(&self, key: &K) -> Arc<Session<T>> {
        let mut table = lock(&self.table);
        if let Some(session) = table.get(key) {
            session.touch();
            return session.clone();
        }
        if table.len() >= self.max {
            let oldest = table
                .iter()
                .max_by_key(|(_, session)| session.idle_for())
                .map(|(key, _)| key.clone());
            oldest.map(|oldest| table.remove(&oldest));
        }
        let session = Arc::new(Session {
            state: tokio::sync::Mutex::new(T::default()),
            last_used: Mutex::new(Instant::now()),
        });
        table.insert(key.clone(), session.clone());
        tokio::spawn(watch_idle(
            Arc::downgrade(&self.table),
            key.clone(),
            Arc::downgrade(&session),
            self.idle,
        ));
        session
    }

    /// Removes `session` from the table, if it is still the one under `key`.
    pub fn forget(&self, key: &K, session: &Arc<Session<T>>) {
        forget(&self.table, key, session);
    }

    /// Removes every session whose key `ends` says must end (those of a
    /// sandbox being removed, say).
    pub fn forget_where(&self, ends: impl Fn(&K) -> bool) {
        lock(&self.table).retain(|key, _| !ends(key));
    }
}

impl<T> Session<T> {
    pub fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }
}

fn lock<K, T>(table: &Table<K, T>) -> std::sync::MutexGuard<'_, HashMap<K, Arc<Session<T>>>> {
    table.lock().unwrap_or_else(|e| e.into_inner())
}

fn forget<K: Eq + Hash, T>(table: &Table<K, T>, key: &K, session: &Arc<Session<T>>) {
    let mut table = lock(table);
    if table
        .get(key)
        .is_some_and(|held| Arc::ptr_eq(held, session))
    {
        table.remove(key);
    }
}

/// Ends a session left without a call for `idle`; ends itself once the
/// session is gone.
async fn watch_idle<K: Eq + Hash, T: Default>(
    table: Weak<Mutex<HashMap<K, Arc<Session<T>>>>>,
    key: K,
    session: Weak<Session<T>>,
    idle: Duration,
) {
    loop {
        tokio::time::sleep(idle / 4).await;
        let (Some(table), Some(session)) = (table.upgrade(), session.upgrade()) else {
            return;
        };
        if session.idle_for() < idle {
            continue;
        }
        // A call under way holds the state: not idle after all.
        let ended = match session.state.try_lock() {
            Ok(mut state) => {
                *state = T::default();
                true
            }
            Err(_) => false,
        };
        if ended {
            forget(&table, &key, &session);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the states dropped that held something.
    #[derive(Default)]
    struct Held(Option<Arc<()>>);

    #[tokio::test]
    async fn an_idle_session_drops_its_state_and_the_oldest_gives_way() {
        let sessions: IdleSessions<u32, Held> = IdleSessions::new(Duration::from_millis(200), 2);
        let token = Arc::new(());
        let first = sessions.session(&1);
        first.state.lock().await.0 = Some(token.clone());
        assert!(Arc::ptr_eq(&first, &sessions.session(&1)), "one per key");
        drop(first);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&token) > 1 {
            assert!(Instant::now() < deadline, "an idle session kept its state");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(lock(&sessions.table).is_empty(), "an idle session left");
        let kept = sessions.session(&1);
        kept.state.lock().await.0 = Some(token.clone());
        std::thread::sleep(Duration::from_millis(5));
        sessions.session(&2);
        sessions.session(&3);
        let mut left: Vec<u32> = lock(&sessions.table).keys().copied().collect();
        left.sort();
        assert_eq!(left, [2, 3], "the one unused longest gave way");
        assert_eq!(Arc::strong_count(&token), 2, "held by a caller still");
        drop(kept);
        assert_eq!(Arc::strong_count(&token), 1, "dropped with its last holder");
        sessions.forget_where(|key| *key == 2);
        assert_eq!(lock(&sessions.table).len(), 1);
    }
}
