//! The result cache: answers of reads that cannot depend on the clock or on state the cache
//! does not follow, kept per query, role and settings and dropped when a table they read
//! changes (through pgcorral at once; anywhere else as logical decoding reports it).
//!
//! [`Caches`] (in the services) holds the one [`store::Store`] every worker shares and a
//! [`follow::Follow`] per pool whose database has `query_cache` on; the request loop asks
//! [`Caches::follower`] (serving only while it is fresh), judges the text ([`verdict`]), and
//! looks up or fills an answer.

pub mod catalog;
pub mod follow;
mod pgoutput;
pub mod store;
pub mod verdict;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::config::General;
use crate::pool::Pool;
pub use follow::Follow;
pub use store::{Begun, Key, Table};

/// The store and the pools' followers.
pub struct Caches {
    store: Mutex<store::Store>,
    follows: Mutex<HashMap<usize, Arc<Follow>>>,
    /// `query_cache_size`, `query_cache_max_entry`, `query_cache_lag`, `query_cache_publication`
    /// as last configured.
    limits: Mutex<Limits>,
}

#[derive(Clone)]
struct Limits {
    size: usize,
    max_entry: usize,
    lag: u64,
    publication: String,
}

impl Caches {
    pub fn new(general: &General) -> Caches {
        let c = Caches {
            store: Mutex::default(),
            follows: Mutex::default(),
            limits: Mutex::new(Limits {
                size: 0,
                max_entry: 0,
                lag: 0,
                publication: String::new(),
            }),
        };
        c.configure(general);
        c
    }

    /// Takes the `[general]` settings of a (re)loaded configuration. A reload drops every
    /// answer: the databases' `query_cache_tables` may have changed.
    pub fn configure(&self, g: &General) {
        self.store.lock().clear();
        *self.limits.lock() = Limits {
            size: g.query_cache_size,
            max_entry: g.query_cache_max_entry,
            lag: g.query_cache_lag,
            publication: g.query_cache_publication.clone(),
        };
    }

    fn lag(&self) -> u64 {
        self.limits.lock().lag
    }

    fn publication(&self) -> String {
        self.limits.lock().publication.clone()
    }

    /// `pool`'s follower, started (on `worker`) at first use; answers are served only while it
    /// is [`Follow::fresh`].
    pub fn follower(self: &Arc<Self>, pool: &Pool, worker: usize) -> Arc<Follow> {
        let f = self
            .follows
            .lock()
            .entry(pool.identity())
            .or_insert_with(|| Arc::new(Follow::new(pool.clone())))
            .clone();
        f.start(self, worker);
        f
    }

    /// The generation answers of `f`'s pool are read in now: it moves with the catalog (the
    /// follower's epoch) and with every statement pgcorral saw that may change it or run user
    /// code (the session-state watch).
    pub fn generation(f: &Follow) -> u64 {
        f.epoch.load(Ordering::Acquire) + f.pool.hook_watch().generation()
    }

    /// The answer under `key`, if it was read in `generation`.
    pub fn get(&self, key: &Key, generation: u64) -> Option<Bytes> {
        self.store.lock().get(key, generation)
    }

    /// Counts a cacheable read not found.
    pub fn missed(&self) {
        self.store.lock().counts.misses += 1;
    }

    /// Notes where a read of `tables` of `f`'s pool begins.
    pub fn begin(&self, f: &Follow, tables: &[Arc<str>]) -> Begun {
        let id = f.pool.identity();
        let tables: Vec<Table> = tables.iter().map(|t| (id, t.clone())).collect();
        self.store.lock().begin(&tables, Self::generation(f))
    }

    /// Stores an answer read since `begun`.
    pub fn put(&self, key: Key, answer: Bytes, begun: Begun) {
        let l = self.limits.lock().clone();
        self.store
            .lock()
            .put(key, answer, begun, (l.size, l.max_entry));
    }

    /// A table of `f`'s pool changed (named as the stream names it).
    fn changed(&self, f: &Follow, table: Option<&Arc<str>>) {
        match table {
            Some(t) => self
                .store
                .lock()
                .invalidate(&(f.pool.identity(), t.clone())),
            // A relation the stream did not describe: every answer of the pool goes.
            None => self.clear_pool(f),
        }
    }

    /// Drops every answer of `f`'s pool.
    pub fn clear_pool(&self, f: &Follow) {
        self.store.lock().clear_pool(f.pool.identity());
    }

    /// A request through pgcorral that is not a cached read: every table of `f`'s pool named
    /// in `text` (any word that is a relation's name in any case, a superset) drops its
    /// answers at once, and reads of it under way are not stored.
    pub fn written(&self, f: &Follow, text: &[u8]) {
        let Some(catalog) = f.catalog.load_full() else {
            return;
        };
        let id = f.pool.identity();
        let words = text
            .split(|c| !(c.is_ascii_alphanumeric() || *c == b'_' || *c >= 0x80))
            .filter(|w| !w.is_empty());
        let mut store = self.store.lock();
        for w in words {
            let w = String::from_utf8_lossy(w).to_lowercase();
            for name in catalog.by_lower.get(&w).into_iter().flatten() {
                store.invalidate(&(id, Arc::from(name.as_str())));
            }
        }
    }

    /// CLEAR CACHE: every answer, or those that read `table`.
    pub fn clear(&self, table: Option<&str>) {
        let mut store = self.store.lock();
        match table {
            None => store.clear(),
            Some(t) => {
                let ids: Vec<usize> = self.follows.lock().keys().copied().collect();
                for id in ids {
                    store.invalidate_named(id, t);
                }
            }
        }
    }

    /// SHOW CACHE and the metrics: what the store holds, its counters, and its tables.
    pub fn show(&self) -> Shown {
        let names: HashMap<usize, String> = self
            .follows
            .lock()
            .iter()
            .map(|(id, f)| (*id, f.pool.name().0.to_string()))
            .collect();
        let store = self.store.lock();
        let tables = store
            .tables()
            .into_iter()
            .map(|((id, t), entries, invalidations)| TableShown {
                database: names.get(&id).cloned().unwrap_or_default(),
                table: t.to_string(),
                entries,
                invalidations,
            })
            .collect();
        let (entries, bytes) = store.size();
        Shown {
            entries,
            bytes,
            counts: store.counts,
            tables,
        }
    }
}

/// What [`Caches::show`] returns.
pub struct Shown {
    pub entries: usize,
    pub bytes: usize,
    pub counts: store::Counts,
    pub tables: Vec<TableShown>,
}

/// A table's line of SHOW CACHE.
pub struct TableShown {
    pub database: String,
    pub table: String,
    /// Answers that read it.
    pub entries: usize,
    /// Changes that dropped its answers.
    pub invalidations: u64,
}
