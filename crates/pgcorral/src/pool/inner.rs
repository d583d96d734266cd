//! The lock-guarded part of a pool: idle servers (LIFO, so hot ones are reused), the count of
//! open ones, and the FIFO queue of waiting clients. Nothing here awaits while locked.

use std::collections::VecDeque;
use std::time::Duration;

use super::mailbox::Entry;
use super::{Checkout, Pool};
use crate::clock::Tick;
use crate::server::ServerConn;

#[derive(Default)]
pub(super) struct Inner {
    /// Boxed so a server moves between this list and a checkout without being copied or
    /// re-allocated, and a checkout (held in every client's future) stays one pointer.
    #[allow(clippy::vec_box)]
    pub idle: Vec<Box<ServerConn>>,
    /// Servers open or being opened, idle ones included; never above the pool size.
    pub open: usize,
    /// Waiting clients, each with when it started waiting.
    pub waiters: VecDeque<(Tick, Entry)>,
}

impl Inner {
    /// The most recently used idle server on `worker`, else the most recently used one anywhere.
    pub fn pop_idle(&mut self, worker: usize) -> Option<Box<ServerConn>> {
        match self.idle.iter().rposition(|s| s.home == worker) {
            Some(i) => Some(self.idle.swap_remove(i)),
            None => self.idle.pop(),
        }
    }

    /// Counts a new place (above what is open) and hands it to waiter `w`; false, and the
    /// place not counted, when that client has given up.
    pub fn grant_place(&mut self, w: Entry, pool: &Pool) -> bool {
        self.open += 1;
        match w.send(Grant::Slot(Slot::new(pool.clone()))) {
            Ok(()) => true,
            Err(g) => {
                g.forget_slot();
                self.open -= 1;
                false
            }
        }
    }
}

/// What a waiting client is handed.
pub(super) enum Grant {
    /// A server, already checked out to it.
    Server(Checkout),
    /// Permission to open a new server in a place that became free (or in the reserve).
    Slot(Slot),
    /// Waited this long, past query_wait_timeout: the client gets an error.
    TimedOut(Duration),
}

impl Grant {
    /// A grant that could not be sent: a place in it is dropped without being given back, for
    /// the caller (who holds the lock) to count.
    pub fn forget_slot(self) {
        if let Grant::Slot(s) = self {
            s.fulfil();
        }
    }
}

/// A counted place in the pool with no server in it yet; dropping it gives the place back.
pub(super) struct Slot(Option<Pool>);

impl Slot {
    pub fn new(pool: Pool) -> Slot {
        Slot(Some(pool))
    }

    /// The place now holds a server: keep it counted.
    pub fn fulfil(mut self) {
        self.0 = None;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(pool) = self.0.take() {
            pool.release_slot();
        }
    }
}
