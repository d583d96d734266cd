//! Caps on server connections shared by several pools (`max_db_connections`,
//! `max_user_connections`): a count per database and per user, and one first-come-first-served
//! queue of pools waiting for room, so a busy pool cannot starve another under the same cap.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::{Checkout, Pool};
use crate::clock;
use crate::clock::Tick;

/// Which caps a pool's servers count against, and their sizes (0 = no cap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapKey {
    pub database: String,
    pub user: String,
    pub max_db: usize,
    pub max_user: usize,
}

struct Waiter {
    since: Tick,
    key: CapKey,
    tx: oneshot::Sender<CapGrant>,
}

/// What a pool waiting under a cap is given.
pub(super) enum CapGrant {
    /// Room to open a server.
    Permit(Room),
    /// A server of its own pool, checked in while it waited (it keeps its place under the cap).
    Server(Checkout),
    /// WAIT_FOR_SERVERS began: the client is closed.
    Shutdown,
}

/// What a server being checked in should do, given who waits under its caps.
pub(super) enum Claim {
    /// Nobody earlier under the cap: the pool's own rules apply.
    None,
    /// A client of another pool has waited longer: close the server to give it room.
    Yield,
    /// A client of the same pool waits for room: hand it this server.
    Handoff(oneshot::Sender<CapGrant>),
}

#[derive(Default)]
struct State {
    db: HashMap<String, usize>,
    user: HashMap<String, usize>,
    waiters: VecDeque<Waiter>,
    /// Pools under some cap, to find idle servers to close when another pool needs room.
    pools: Vec<Weak<super::Shared>>,
}

/// True when a server of `a` and one of `b` count against a common cap.
fn shares(a: &CapKey, b: &CapKey) -> bool {
    (a.max_db > 0 && b.max_db > 0 && a.database == b.database)
        || (a.max_user > 0 && b.max_user > 0 && a.user == b.user)
}

impl State {
    fn fits(&self, k: &CapKey) -> bool {
        (k.max_db == 0 || self.db.get(&k.database).copied().unwrap_or(0) < k.max_db)
            && (k.max_user == 0 || self.user.get(&k.user).copied().unwrap_or(0) < k.max_user)
    }

    fn take(&mut self, k: &CapKey) {
        *self.db.entry(k.database.clone()).or_default() += 1;
        *self.user.entry(k.user.clone()).or_default() += 1;
    }

    fn give_back(&mut self, k: &CapKey) {
        for (map, name) in [(&mut self.db, &k.database), (&mut self.user, &k.user)] {
            if let Some(n) = map.get_mut(name) {
                *n -= 1;
                if *n == 0 {
                    map.remove(name);
                }
            }
        }
    }
}

/// The shared caps; one per process.
#[derive(Default)]
pub struct Limits(Mutex<State>);

/// Room for one server under its caps; given back on drop. Kept by the server it is for as
/// its [`crate::server::Permit`].
pub struct Room {
    limits: Arc<Limits>,
    key: Option<CapKey>,
}

impl Drop for Room {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.limits.release(&key);
        }
    }
}

impl Limits {
    /// Remembers a pool whose idle servers may be closed to make room for another pool.
    pub(super) fn register(&self, pool: &Pool) {
        let mut st = self.0.lock();
        st.pools.retain(|w| w.strong_count() > 0);
        st.pools.push(Arc::downgrade(&pool.0));
    }

    /// Room for one more server of `key`: at once when there is some, else after idle servers
    /// of other pools under the same cap are closed, or in turn as servers close.
    pub(super) async fn acquire(self: &Arc<Self>, key: &CapKey, own: &Pool) -> CapGrant {
        let rx = {
            let mut st = self.0.lock();
            let queued = st.waiters.iter().any(|w| shares(&w.key, key));
            if !queued && st.fits(key) {
                st.take(key);
                return CapGrant::Permit(Room {
                    limits: self.clone(),
                    key: Some(key.clone()),
                });
            }
            let (tx, rx) = oneshot::channel();
            st.waiters.push_back(Waiter {
                since: clock::now(),
                key: key.clone(),
                tx,
            });
            rx
        };
        self.evict_idle(key, own);
        match rx.await {
            Ok(p) => p,
            // Only dropped with the process; never observed by a live client.
            Err(_) => std::future::pending().await,
        }
    }

    /// WAIT_FOR_SERVERS: every pool waiting for room is told to give up.
    pub(super) fn shut_waiters(&self) {
        let waiting: Vec<_> = self.0.lock().waiters.drain(..).collect();
        for w in waiting {
            let _ = w.tx.send(CapGrant::Shutdown);
        }
    }

    /// Closes one idle server of another pool that shares a cap with `key`.
    fn evict_idle(&self, key: &CapKey, own: &Pool) {
        let pools: Vec<Pool> = {
            let st = self.0.lock();
            st.pools
                .iter()
                .filter_map(|w| w.upgrade().map(Pool))
                .collect()
        };
        for p in pools {
            if Arc::ptr_eq(&p.0, &own.0) {
                continue;
            }
            let settings = p.settings();
            let Some(k) = settings.caps.as_ref() else {
                continue;
            };
            if shares(k, key) && p.close_one_idle() {
                return;
            }
        }
    }

    /// True when a pool waiting since before `since` needs room that a server of `key` holds.
    /// Decides where a server of `key` goes when its pool's own first waiter has waited since
    /// `since` (or there is none): the longest waiter under a shared cap goes first.
    pub(super) fn claim(&self, key: &CapKey, since: Option<Tick>) -> Claim {
        let mut st = self.0.lock();
        let first = st.waiters.iter().position(|w| {
            since.is_none_or(|s| w.since < s) && !w.tx.is_closed() && shares(&w.key, key)
        });
        let Some(i) = first else {
            return Claim::None;
        };
        let w = &st.waiters[i];
        if w.key.database == key.database && w.key.user == key.user {
            let w = st.waiters.remove(i).expect("index checked");
            Claim::Handoff(w.tx)
        } else {
            Claim::Yield
        }
    }

    fn release(self: &Arc<Self>, key: &CapKey) {
        let mut st = self.0.lock();
        st.give_back(key);
        // First come, first served: the earliest waiter that now fits.
        let mut i = 0;
        while i < st.waiters.len() {
            if st.waiters[i].tx.is_closed() {
                st.waiters.remove(i);
                continue;
            }
            if !st.fits(&st.waiters[i].key) {
                i += 1;
                continue;
            }
            let w = st.waiters.remove(i).expect("index checked");
            st.take(&w.key);
            let permit = Room {
                limits: self.clone(),
                key: Some(w.key),
            };
            if let Err(CapGrant::Permit(mut p)) = w.tx.send(CapGrant::Permit(permit)) {
                // The waiter left: undo without re-entering this lock.
                if let Some(k) = p.key.take() {
                    st.give_back(&k);
                }
                continue;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_fits() {
        let mut st = State::default();
        let k = CapKey {
            database: "d".into(),
            user: "u".into(),
            max_db: 2,
            max_user: 0,
        };
        assert!(st.fits(&k));
        st.take(&k);
        st.take(&k);
        assert!(!st.fits(&k));
        st.give_back(&k);
        assert!(st.fits(&k));
        st.give_back(&k);
        assert!(st.db.is_empty() && st.user.is_empty());
    }
}
