//! Who gets a connection slot, decided at accept from the peer's
//! credentials alone, before a byte is read.
//!
//! `max_connections` is split in two: a reserve only root and the daemon's
//! own uid ("owners") may use, and the rest, shared by everyone allowed to
//! call. Each uid other than an owner may hold at most
//! `[connections] per_uid` of the shared slots. So one authorized peer
//! cannot starve the others, and however many connections a peer floods
//! with, an owner always finds a slot.
//!
//! An owner that finds every slot it may take busy waits for one, for
//! [`OWNER_WAIT`] at most, instead of being closed at once: the slots an
//! owner's last call held are freed when the daemon has read that
//! connection's end, which on a loaded machine can come after the owner's
//! next connect. Closing then would turn a flood into a random
//! "connection reset" for the admin the reserve exists for.
//!
//! A peer on no allow-list ("stranger") never takes any of those slots. It
//! may only learn the protocol version and hear, in the daemon's own words,
//! that it is refused: so it is served in a small lane of its own, for a
//! few seconds at most. When that lane is full, its connection is closed at
//! once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::access::{Peer, Standing};

/// Strangers served at once, all uids together.
pub const STRANGER_LANE: usize = 4;
/// How long a stranger's connection may last: enough for the handshake and
/// the refusal of one command.
pub const STRANGER_LIFETIME: Duration = Duration::from_secs(5);
/// The longest an owner's new connection waits for a slot to free up.
pub const OWNER_WAIT: Duration = Duration::from_secs(5);

/// Why a connection got no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("every shared connection slot is taken (max_connections {max_connections}, of which {reserve} are reserved for root and the daemon's uid)")]
    Full {
        max_connections: usize,
        reserve: usize,
    },
    #[error("this uid already holds {per_uid} connections ([connections] per_uid)")]
    PerUid { per_uid: usize },
    #[error("the peer is on no access list, and the {STRANGER_LANE} connections kept for telling such peers so are taken")]
    StrangersFull,
}

#[derive(Debug, Default)]
struct Taken {
    shared: usize,
    reserve: usize,
    strangers: usize,
    by_uid: HashMap<u32, usize>,
}

/// The slot counts, shared by the accept loop and the connections' slots.
#[derive(Debug)]
pub struct Admission {
    shared: usize,
    reserve: usize,
    per_uid: usize,
    taken: Mutex<Taken>,
    /// Woken whenever a slot is given back (owners wait on it).
    released: Notify,
}

/// Which pool a slot came from, so dropping it gives it back there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    Shared,
    Reserve,
    Strangers,
}

/// One held connection slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    admission: Arc<Admission>,
    uid: u32,
    counted_for_uid: bool,
    pub pool: Pool,
}

impl Admission {
    pub fn new(max_connections: usize, reserve: usize, per_uid: usize) -> Arc<Admission> {
        let reserve = reserve.min(max_connections);
        Arc::new(Admission {
            shared: max_connections - reserve,
            reserve,
            per_uid,
            taken: Mutex::new(Taken::default()),
            released: Notify::new(),
        })
    }

    /// A slot for an owner, waiting up to `wait` for one to be given back
    /// while all it may take are busy; the last refusal when none was.
    pub async fn admit_owner_waiting(
        self: &Arc<Self>,
        peer: &Peer,
        wait: Duration,
    ) -> Result<Slot, Refusal> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the attempt, so a release in between wakes it.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            match self.admit(peer, Standing::Owner) {
                Err(Refusal::Full { .. }) => {}
                result => return result,
            }
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return self.admit(peer, Standing::Owner);
            }
        }
    }

    /// A slot for this peer, or why not.
    pub fn admit(self: &Arc<Self>, peer: &Peer, standing: Standing) -> Result<Slot, Refusal> {
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        let (pool, counted_for_uid) = match standing {
            Standing::Stranger => {
                if taken.strangers >= STRANGER_LANE {
                    return Err(Refusal::StrangersFull);
                }
                taken.strangers += 1;
                (Pool::Strangers, false)
            }
            Standing::Owner => {
                if taken.shared < self.shared {
                    taken.shared += 1;
                    (Pool::Shared, false)
                } else if taken.reserve < self.reserve {
                    taken.reserve += 1;
                    (Pool::Reserve, false)
                } else {
                    return Err(self.full());
                }
            }
            Standing::Listed => {
                let held = taken.by_uid.get(&peer.uid).copied().unwrap_or(0);
                if held >= self.per_uid {
                    return Err(Refusal::PerUid {
                        per_uid: self.per_uid,
                    });
                }
                if taken.shared >= self.shared {
                    return Err(self.full());
                }
                taken.shared += 1;
                *taken.by_uid.entry(peer.uid).or_insert(0) += 1;
                (Pool::Shared, true)
            }
        };
        Ok(Slot {
            admission: self.clone(),
            uid: peer.uid,
            counted_for_uid,
            pool,
        })
    }

    fn full(&self) -> Refusal {
        Refusal::Full {
            max_connections: self.shared + self.reserve,
            reserve: self.reserve,
        }
    }

    fn release(&self, slot: &Slot) {
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.pool {
            Pool::Shared => taken.shared -= 1,
            Pool::Reserve => taken.reserve -= 1,
            Pool::Strangers => taken.strangers -= 1,
        }
        if slot.counted_for_uid {
            if let Some(held) = taken.by_uid.get_mut(&slot.uid) {
                *held -= 1;
                if *held == 0 {
                    taken.by_uid.remove(&slot.uid);
                }
            }
        }
        drop(taken);
        self.released.notify_waiters();
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.admission.release(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32) -> Peer {
        Peer {
            uid,
            gid: uid,
            pid: Some(1),
        }
    }

    #[test]
    fn a_flooding_uid_is_capped_and_owners_keep_the_reserve() {
        let admission = Admission::new(6, 2, 3);
        let flood: Vec<Slot> = (0..10)
            .filter_map(|_| admission.admit(&peer(1000), Standing::Listed).ok())
            .collect();
        assert_eq!(flood.len(), 3, "per_uid caps one uid");
        let other: Vec<Slot> = (0..10)
            .filter_map(|_| admission.admit(&peer(1001), Standing::Listed).ok())
            .collect();
        assert_eq!(other.len(), 1, "the shared slots are 6 - 2 = 4");
        assert!(matches!(
            admission.admit(&peer(1002), Standing::Listed),
            Err(Refusal::Full { .. })
        ));
        let root: Vec<Slot> = (0..3)
            .filter_map(|_| admission.admit(&peer(0), Standing::Owner).ok())
            .collect();
        assert_eq!(root.len(), 2, "root gets the reserve");
        assert_eq!(root[0].pool, Pool::Reserve);
        drop(flood);
        assert!(admission.admit(&peer(1002), Standing::Listed).is_ok());
    }

    #[tokio::test]
    async fn an_owner_waits_for_a_slot_given_back_and_is_refused_when_none_is() {
        let admission = Admission::new(2, 1, 2);
        let mut held: Vec<Slot> = (0..2)
            .map(|_| admission.admit(&peer(0), Standing::Owner).unwrap())
            .collect();
        let waiting = {
            let admission = admission.clone();
            tokio::spawn(async move {
                admission
                    .admit_owner_waiting(&peer(0), Duration::from_secs(60))
                    .await
            })
        };
        // Given back while the owner waits: it gets that slot.
        tokio::task::yield_now().await;
        held.pop();
        let slot = waiting.await.unwrap().expect("the slot given back");
        assert_eq!(slot.pool, Pool::Reserve);
        // None given back: refused once the wait is over.
        let refused = admission
            .admit_owner_waiting(&peer(0), Duration::from_millis(1))
            .await;
        assert!(matches!(refused, Err(Refusal::Full { .. })), "{refused:?}");
    }

    #[test]
    fn strangers_take_no_shared_slot_and_their_lane_is_small() {
        let admission = Admission::new(2, 1, 2);
        let strangers: Vec<Slot> = (0..10)
            .filter_map(|_| admission.admit(&peer(65534), Standing::Stranger).ok())
            .collect();
        assert_eq!(strangers.len(), STRANGER_LANE);
        assert!(admission.admit(&peer(1000), Standing::Listed).is_ok());
        assert!(admission.admit(&peer(0), Standing::Owner).is_ok());
    }
}
