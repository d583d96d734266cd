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
    /// Waiting clients, first come first.
    pub waiters: VecDeque<Waiting>,
}

/// A client waiting for a server.
pub(super) struct Waiting {
    /// When it started waiting.
    pub since: Tick,
    /// The worker it runs on.
    pub worker: usize,
    /// How long it may wait, when not the pool's setting.
    pub wait: super::ClientWait,
    pub entry: Entry,
}

/// How far down the queue a server checked in looks for a client on its own worker.
const LOOK_FOR_LOCAL: usize = 64;
/// A client on the server's worker goes before the first in line only if it started waiting
/// less than this after it, or less than half the first's wait so far: the queue's order bends
/// by that much at most.
const PASS_OVER_FOR: Duration = Duration::from_millis(2);

impl Inner {
    /// The most recently used idle server on `worker`, else the most recently used one anywhere.
    pub fn pop_idle(&mut self, worker: usize) -> Option<Box<ServerConn>> {
        match self.idle.iter().rposition(|s| s.home == worker) {
            Some(i) => Some(self.idle.swap_remove(i)),
            None => self.idle.pop(),
        }
    }

    /// The client a server on `worker` goes to: the first one on the same worker (the server
    /// then stays registered where it is, and its answers keep waking the thread that forwards
    /// them) if it started waiting less than [`PASS_OVER_FOR`], or less than half the first
    /// one's wait at `now`, after the first in line, and is among the first [`LOOK_FOR_LOCAL`];
    /// else the first in line.
    pub fn pop_waiter_for(&mut self, worker: usize, now: Tick) -> Option<Entry> {
        let front = self.waiters.front()?;
        if front.worker != worker {
            let first = front.since;
            let bend = PASS_OVER_FOR.max(now.since(first) / 2);
            let local = (self.waiters.iter().take(LOOK_FOR_LOCAL))
                .position(|w| w.worker == worker)
                .filter(|&i| self.waiters[i].since.since(first) < bend);
            if let Some(w) = local.and_then(|i| self.waiters.remove(i)) {
                return Some(w.entry);
            }
        }
        self.waiters.pop_front().map(|w| w.entry)
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
    /// WAIT_FOR_SERVERS began: the client is closed (`server shutting down`).
    Shutdown,
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

#[cfg(test)]
mod tests {
    use super::super::mailbox;
    use super::*;
    use std::task::Waker;

    fn inner_with(workers: &[usize]) -> (Inner, Vec<mailbox::Wait>) {
        let mut inner = Inner::default();
        let mut waits = Vec::new();
        for &worker in workers {
            let (wait, entry) = mailbox::open(Waker::noop().clone());
            waits.push(wait);
            inner.waiters.push_back(Waiting {
                since: crate::clock::now(),
                worker,
                wait: Default::default(),
                entry,
            });
        }
        (inner, waits)
    }

    fn queued(inner: &Inner) -> Vec<usize> {
        inner.waiters.iter().map(|w| w.worker).collect()
    }

    #[test]
    fn a_server_goes_to_a_client_on_its_worker_unless_it_came_much_later() {
        let first = crate::clock::now();
        let (mut inner, _waits) = inner_with(&[1, 1, 0, 1, 0]);
        assert!(inner.pop_waiter_for(0, first).is_some());
        assert_eq!(queued(&inner), [1, 1, 1, 0], "the first on worker 0");
        assert!(inner.pop_waiter_for(1, first).is_some());
        assert_eq!(
            queued(&inner),
            [1, 1, 0],
            "the first in line is on worker 1"
        );
        assert!(inner.pop_waiter_for(2, first).is_some());
        assert_eq!(
            queued(&inner),
            [1, 0],
            "none on worker 2: the first in line"
        );
        // A client of worker 0 that came 2 ms after the first in line waits its turn; one that
        // came with it does not.
        std::thread::sleep(PASS_OVER_FOR);
        let (later, _later_waits) = inner_with(&[0]);
        inner.waiters.extend(later.waiters);
        assert!(inner.pop_waiter_for(0, first).is_some());
        assert_eq!(
            queued(&inner),
            [1, 0],
            "the one that came with the first went"
        );
        assert!(inner.pop_waiter_for(0, first).is_some());
        assert_eq!(
            queued(&inner),
            [0],
            "the later one let the first in line go"
        );
    }
}
