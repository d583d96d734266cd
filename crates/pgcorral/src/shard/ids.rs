//! Ids that no two rows of a sharded database share, whichever pgcorral made them and whichever
//! shard keeps the row (`SELECT pgcorral.unique_id()`): positive 63-bit integers from the time,
//! the pgcorral's `peer_id` and a counter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The ids' epoch: 2026-01-01T00:00:00Z, in milliseconds since 1970 (41 bits of milliseconds
/// last until 2095).
pub const EPOCH_MS: u64 = 1_767_225_600_000;
/// Bits of the node (`peer_id`, 0 to 65535, as PgBouncer's).
pub const NODE_BITS: u32 = 16;
/// Bits of the counter within one millisecond (64 ids per millisecond per node).
pub const SEQ_BITS: u32 = 6;
const SEQ_MAX: u64 = (1 << SEQ_BITS) - 1;

/// One pgcorral's id generator, shared by its clients: the last id's millisecond and counter.
/// Its ids only grow: a millisecond whose counter is spent is waited out, never borrowed from
/// the future, and a clock that goes back keeps the last millisecond until it catches up.
pub struct UniqueIds {
    /// `millisecond << SEQ_BITS | counter` of the last id given.
    last: AtomicU64,
}

impl Default for UniqueIds {
    fn default() -> Self {
        UniqueIds::starting_at(now_ms())
    }
}

impl UniqueIds {
    /// A generator whose first id is of a millisecond after `ms` (since [`EPOCH_MS`]): a
    /// pgcorral started again within one millisecond gives none its predecessor gave.
    pub fn starting_at(ms: u64) -> UniqueIds {
        UniqueIds {
            last: AtomicU64::new(ms << SEQ_BITS | SEQ_MAX),
        }
    }

    /// The next id of node `node` at `now` (milliseconds since [`EPOCH_MS`]); `None` when this
    /// millisecond's ids are spent (ask again in the next one).
    pub fn next_at(&self, node: u16, now: u64) -> Option<i64> {
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let (ms, seq) = (last >> SEQ_BITS, last & SEQ_MAX);
            let next = if now > ms {
                now << SEQ_BITS
            } else if seq < SEQ_MAX {
                last + 1
            } else {
                return None;
            };
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    let (ms, seq) = (next >> SEQ_BITS, next & SEQ_MAX);
                    let node = u64::from(node);
                    return Some((ms << (NODE_BITS + SEQ_BITS) | node << SEQ_BITS | seq) as i64);
                }
                Err(seen) => last = seen,
            }
        }
    }

    /// The next id of node `node`, waiting out a spent millisecond (at most about one).
    pub fn next(&self, node: u16) -> i64 {
        loop {
            if let Some(id) = self.next_at(node, now_ms()) {
                return id;
            }
            std::thread::yield_now();
        }
    }
}

/// Milliseconds since [`EPOCH_MS`] (0 before it).
fn now_ms() -> u64 {
    let since_1970 = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    since_1970.saturating_sub(EPOCH_MS) & ((1 << 41) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_grow_and_differ_between_nodes() {
        let g = UniqueIds::starting_at(10);
        assert_eq!(g.next_at(3, 10), None, "the starting millisecond is spent");
        let a = g.next_at(3, 11).unwrap();
        let b = g.next_at(3, 11).unwrap();
        assert_eq!(b, a + 1);
        assert_eq!(a, (11 << 22 | 3 << 6) as i64);
        // A clock that went back keeps the last millisecond.
        let c = g.next_at(3, 5).unwrap();
        assert_eq!(c, b + 1);
        // A spent millisecond waits.
        for _ in 3..=SEQ_MAX {
            g.next_at(3, 11).unwrap();
        }
        assert_eq!(g.next_at(3, 11), None);
        assert!(g.next_at(3, 12).unwrap() > c);
        // Another node's ids are others.
        let h = UniqueIds::starting_at(10);
        assert_ne!(h.next_at(4, 11).unwrap(), a);
        // The largest are positive.
        let far = UniqueIds::starting_at((1 << 41) - 2);
        assert!(far.next_at(u16::MAX, (1 << 41) - 1).unwrap() > 0);
    }

    #[test]
    fn concurrent_ids_are_unique() {
        let g = std::sync::Arc::new(UniqueIds::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let g = g.clone();
                std::thread::spawn(move || (0..5000).map(|_| g.next(1)).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<i64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        assert!(all[0] > 0);
    }
}
