//! The result cache's memory: answers by query, role and settings, shared by every worker,
//! bounded in bytes with the least recently used dropped first, and indexed by table so that a
//! change drops every answer that read the table.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;

use crate::server::Settings;

/// What an answer is cached under: the pool (its login user and database), the query's text
/// and the client's session settings (role and session_authorization among them).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub pool: usize,
    pub text: Arc<[u8]>,
    pub settings: Settings,
}

/// A table of a pool, by the name the query used (a name stands for every table of that name).
pub type Table = (usize, Arc<str>);

struct Entry {
    answer: Bytes,
    tables: Vec<Table>,
    /// Its place in the LRU order.
    tick: u64,
    /// The pool's generation (see [`Store::generation`]) it was read in.
    generation: u64,
}

/// Counters shown by SHOW CACHE and the metrics.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub hits: u64,
    pub misses: u64,
    pub stored: u64,
    pub evicted: u64,
}

/// The answers, their order of use and their tables.
#[derive(Default)]
pub struct Store {
    entries: HashMap<Key, Entry>,
    lru: BTreeMap<u64, Key>,
    by_table: HashMap<Table, HashSet<Key>>,
    /// Bumped by each change to a table: a read begun before it is not stored.
    table_gen: HashMap<Table, u64>,
    /// Invalidations per table, for SHOW CACHE.
    invalidated: HashMap<Table, u64>,
    bytes: usize,
    tick: u64,
    pub counts: Counts,
}

/// Where a read stood when it began: it is stored only if none of its tables changed since.
pub struct Begun {
    gens: Vec<(Table, u64)>,
    generation: u64,
}

impl Store {
    /// The answer cached under `key`, if it was read in `generation` (the pool's catalog and
    /// session generation now); counted as a hit (a miss is counted by the caller, once the
    /// text is known to be cacheable).
    pub fn get(&mut self, key: &Key, generation: u64) -> Option<Bytes> {
        let found = match self.entries.get_mut(key) {
            Some(e) if e.generation == generation => {
                self.tick += 1;
                self.lru.remove(&e.tick);
                e.tick = self.tick;
                self.lru.insert(self.tick, key.clone());
                Some(e.answer.clone())
            }
            Some(_) => {
                self.remove(key);
                None
            }
            None => None,
        };
        if found.is_some() {
            self.counts.hits += 1;
        }
        found
    }

    /// Notes where a read of `tables` begins.
    pub fn begin(&self, tables: &[Table], generation: u64) -> Begun {
        let gens = tables
            .iter()
            .map(|t| (t.clone(), self.table_gen.get(t).copied().unwrap_or(0)))
            .collect();
        Begun { gens, generation }
    }

    /// Stores `answer` for `key` unless one of its tables changed since `begun` or it is larger
    /// than `max_entry`; drops the least recently used answers beyond `cap` bytes.
    pub fn put(&mut self, key: Key, answer: Bytes, begun: Begun, (cap, max_entry): (usize, usize)) {
        if answer.len() > max_entry || answer.len() > cap {
            return;
        }
        if begun
            .gens
            .iter()
            .any(|(t, g)| self.table_gen.get(t).copied().unwrap_or(0) != *g)
        {
            return;
        }
        self.remove(&key);
        self.tick += 1;
        let tables: Vec<Table> = begun.gens.into_iter().map(|(t, _)| t).collect();
        for t in &tables {
            self.by_table
                .entry(t.clone())
                .or_default()
                .insert(key.clone());
        }
        self.bytes += answer.len();
        self.lru.insert(self.tick, key.clone());
        self.entries.insert(
            key,
            Entry {
                answer,
                tables,
                tick: self.tick,
                generation: begun.generation,
            },
        );
        self.counts.stored += 1;
        while self.bytes > cap {
            let Some((_, oldest)) = self.lru.pop_first() else {
                break;
            };
            self.remove(&oldest);
            self.counts.evicted += 1;
        }
    }

    /// A table changed: every answer that read it is dropped, and reads begun before are not
    /// stored.
    pub fn invalidate(&mut self, table: &Table) {
        *self.table_gen.entry(table.clone()).or_default() += 1;
        if let Some(keys) = self.by_table.remove(table) {
            *self.invalidated.entry(table.clone()).or_default() += 1;
            for k in keys {
                self.remove(&k);
            }
        }
    }

    /// [`Store::invalidate`] for every table of `pool` named `name` in any case (a word of a
    /// request's text, which may be quoted or not).
    pub fn invalidate_named(&mut self, pool: usize, name: &str) {
        let mut tables: Vec<Table> = self
            .by_table
            .keys()
            .chain(self.table_gen.keys())
            .filter(|(p, t)| *p == pool && t.eq_ignore_ascii_case(name))
            .cloned()
            .collect();
        tables.sort();
        tables.dedup();
        for t in tables {
            self.invalidate(&t);
        }
    }

    /// Drops every answer of `pool` (a catalog change, CLEAR CACHE), and every read of it under
    /// way is not stored.
    pub fn clear_pool(&mut self, pool: usize) {
        let tables: Vec<Table> = self
            .table_gen
            .keys()
            .chain(self.by_table.keys())
            .filter(|t| t.0 == pool)
            .cloned()
            .collect();
        for t in tables {
            self.invalidate(&t);
        }
        // And the answers that read no table.
        let keys: Vec<Key> = self
            .entries
            .keys()
            .filter(|k| k.pool == pool)
            .cloned()
            .collect();
        for k in keys {
            self.remove(&k);
        }
    }

    /// Drops every answer.
    pub fn clear(&mut self) {
        let mut pools: Vec<usize> = self.entries.keys().map(|k| k.pool).collect();
        pools.sort_unstable();
        pools.dedup();
        let tables: Vec<Table> = self.by_table.keys().cloned().collect();
        for t in tables {
            self.invalidate(&t);
        }
        for p in pools {
            self.clear_pool(p);
        }
    }

    fn remove(&mut self, key: &Key) {
        let Some(e) = self.entries.remove(key) else {
            return;
        };
        self.lru.remove(&e.tick);
        self.bytes -= e.answer.len();
        for t in &e.tables {
            if let Some(keys) = self.by_table.get_mut(t) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_table.remove(t);
                }
            }
        }
    }

    /// Entries and bytes held.
    pub fn size(&self) -> (usize, usize) {
        (self.entries.len(), self.bytes)
    }

    /// Per table of `pool`s: entries that read it and times it was invalidated.
    pub fn tables(&self) -> Vec<(Table, usize, u64)> {
        let mut names: Vec<&Table> = self
            .by_table
            .keys()
            .chain(self.invalidated.keys())
            .collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|t| {
                let n = self.by_table.get(t).map_or(0, HashSet::len);
                (t.clone(), n, self.invalidated.get(t).copied().unwrap_or(0))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> Key {
        Key {
            pool: 1,
            text: Arc::from(text.as_bytes()),
            settings: Arc::default(),
        }
    }

    fn t(name: &str) -> Table {
        (1, Arc::from(name))
    }

    const ROOM: (usize, usize) = (100, 50);

    #[test]
    fn an_answer_is_served_until_its_table_changes() {
        let mut s = Store::default();
        let b = s.begin(&[t("a")], 0);
        s.put(key("q"), Bytes::from_static(b"answer"), b, ROOM);
        assert_eq!(s.get(&key("q"), 0).as_deref(), Some(&b"answer"[..]));
        s.invalidate(&t("b"));
        assert!(s.get(&key("q"), 0).is_some());
        s.invalidate(&t("a"));
        assert!(s.get(&key("q"), 0).is_none());
        assert_eq!(s.size(), (0, 0));
        assert_eq!(s.counts.hits, 2);
    }

    #[test]
    fn a_read_begun_before_a_change_is_not_stored() {
        let mut s = Store::default();
        let b = s.begin(&[t("a")], 0);
        s.invalidate(&t("a"));
        s.put(key("q"), Bytes::from_static(b"old"), b, ROOM);
        assert!(s.get(&key("q"), 0).is_none());
    }

    #[test]
    fn another_generation_is_a_miss() {
        let mut s = Store::default();
        let b = s.begin(&[t("a")], 3);
        s.put(key("q"), Bytes::from_static(b"x"), b, ROOM);
        assert!(s.get(&key("q"), 4).is_none());
        assert_eq!(s.size(), (0, 0));
    }

    #[test]
    fn the_least_recently_used_go_first_and_large_ones_never_come() {
        let mut s = Store::default();
        for q in ["q1", "q2", "q3"] {
            let b = s.begin(&[t("a")], 0);
            s.put(key(q), Bytes::from(vec![0; 40]), b, ROOM);
            if q == "q2" {
                // q1 used after q2 was stored: q2 is the least recently used.
                assert!(s.get(&key("q1"), 0).is_some());
            }
        }
        assert!(s.get(&key("q2"), 0).is_none());
        assert!(s.get(&key("q1"), 0).is_some());
        assert!(s.get(&key("q3"), 0).is_some());
        assert_eq!(s.size(), (2, 80));
        let b = s.begin(&[t("a")], 0);
        s.put(key("big"), Bytes::from(vec![0; 51]), b, ROOM);
        assert!(s.get(&key("big"), 0).is_none());
    }

    #[test]
    fn clearing_a_pool_leaves_the_others() {
        let mut s = Store::default();
        let b = s.begin(&[t("a")], 0);
        s.put(key("q"), Bytes::from_static(b"1"), b, ROOM);
        let other = Key {
            pool: 2,
            ..key("q")
        };
        let b = s.begin(&[(2, Arc::from("a"))], 0);
        s.put(other.clone(), Bytes::from_static(b"2"), b, ROOM);
        s.clear_pool(1);
        assert!(s.get(&key("q"), 0).is_none());
        assert!(s.get(&other, 0).is_some());
    }
}
