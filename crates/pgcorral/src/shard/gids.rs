//! The shard each of a sharded database's prepared transactions (two-phase commit's `PREPARE
//! TRANSACTION 'gid'`) was prepared on, so that `COMMIT PREPARED` and `ROLLBACK PREPARED`
//! reach it, from any client.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// Gids most kept (then forgotten all at once: a gid forgotten is asked of the shards).
const CAP: usize = 10_000;

/// Prepared transactions by gid: the shards it was prepared on through pgcorral (PostgreSQL's
/// gids are unique per server, so one gid may be prepared on several shards), oldest first.
/// Shared by the database's sharding as the catalog completes it.
#[derive(Clone, Default)]
pub struct Gids(
    Arc<Mutex<HashMap<String, Vec<usize>>>>,
    Arc<Mutex<HashMap<String, Vec<usize>>>>,
);

impl Gids {
    /// `gid` was prepared (or asked to be) on `shard`.
    pub fn note(&self, gid: &str, shard: usize) {
        let mut m = self.0.lock();
        if m.len() >= CAP && !m.contains_key(gid) {
            m.clear();
        }
        m.entry(gid.to_string()).or_default().push(shard);
    }

    /// `gid` was prepared on all of `shards` as one transaction (one that spread to them):
    /// its COMMIT or ROLLBACK PREPARED goes to all of them.
    pub fn note_together(&self, gid: &str, shards: Vec<usize>) {
        let mut m = self.1.lock();
        if m.len() >= CAP && !m.contains_key(gid) {
            m.clear();
        }
        m.insert(gid.to_string(), shards);
    }

    /// The shards `gid` was prepared on together, forgotten as its COMMIT or ROLLBACK
    /// PREPARED goes there.
    pub fn take_together(&self, gid: &str) -> Option<Vec<usize>> {
        self.1.lock().remove(gid)
    }

    /// The shard `gid` was prepared on, forgotten as its COMMIT or ROLLBACK PREPARED goes
    /// there (if that fails, the next one asks the shards).
    pub fn take(&self, gid: &str) -> Option<usize> {
        let mut m = self.0.lock();
        let shards = m.get_mut(gid)?;
        let shard = shards.remove(0);
        if shards.is_empty() {
            m.remove(gid);
        }
        Some(shard)
    }
}

impl std::fmt::Debug for Gids {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gids")
    }
}

impl PartialEq for Gids {
    /// Runtime state: two configurations are equal whatever they remember.
    fn eq(&self, _: &Gids) -> bool {
        true
    }
}

impl Eq for Gids {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gid_goes_where_it_was_prepared_once() {
        let g = Gids::default();
        g.note("a", 2);
        g.note("b", 0);
        g.note("a", 1);
        assert_eq!(g.take("a"), Some(2));
        assert_eq!(g.take("a"), Some(1));
        assert_eq!(g.take("a"), None);
        assert_eq!(g.take("b"), Some(0));
        assert_eq!(g.take("c"), None);
    }
}
