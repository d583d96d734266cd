//! What user code a database holds, as its pools share it: the names through which a statement
//! can reach code its text does not show, trusted for a while after each catalog read (which
//! [`crate::session::hooks`] makes) and distrusted at once before a statement that may change
//! the catalog.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::clock::{self, Tick};

/// How long a map read from the catalog is trusted before it is read again (by the next
/// transaction that needs it, which is captured and reset meanwhile). Catalog changes made
/// through this pgcorral are seen at once (see [`Watch::stale`]); this bounds how long one made
/// by another connection (a migration run directly against PostgreSQL) goes unseen.
pub const LIFETIME: Duration = Duration::from_secs(1);

type Names = HashSet<Box<[u8]>, foldhash::fast::RandomState>;

/// The hooks of one database as one catalog read found them.
#[derive(Debug)]
pub struct HookMap {
    /// Not read yet, or given up: every name may reach user code.
    unknown: bool,
    /// Something reaches user code without any name (a user-defined cast or default encoding
    /// conversion): every statement that names anything may.
    everything: bool,
    /// Relations, types and functions whose use may run user code, as the catalog spells them.
    names: Names,
    /// User-defined operators' names (searched as text: the lexer does not split operators).
    operators: Vec<Box<[u8]>>,
    /// The [`Watch`] generation it was read in.
    pub generation: u64,
    /// When it is read again, before it expires, by a transaction that ends after then.
    due: Tick,
    /// When it stops being trusted.
    expires: Tick,
}

impl HookMap {
    /// A map that trusts nothing: every name may reach user code.
    pub fn unknown(generation: u64) -> HookMap {
        HookMap {
            unknown: true,
            everything: true,
            names: Names::default(),
            operators: Vec::new(),
            generation,
            due: Tick::EARLIEST,
            expires: Tick::EARLIEST,
        }
    }

    /// A database with no user code at all, for ever: session mode (which keeps its server, so
    /// judges statements by their text only), and tests and benchmarks of the scan.
    pub fn quiet() -> HookMap {
        HookMap {
            unknown: false,
            everything: false,
            names: Names::default(),
            operators: Vec::new(),
            generation: 0,
            due: Tick::LATEST,
            expires: Tick::LATEST,
        }
    }

    /// True while the map may be used: read, and not expired.
    #[inline]
    pub fn trusted(&self) -> bool {
        !self.unknown && clock::now() < self.expires
    }

    /// True when the text of a query alone can show it clean: the map is trusted and names
    /// nothing, so that no name in any text reaches user code.
    #[inline]
    pub fn silent(&self) -> bool {
        !self.everything && self.names.is_empty() && self.operators.is_empty() && self.trusted()
    }

    /// True when the map should be read again (it is due, expired or unknown).
    #[inline]
    pub fn due(&self) -> bool {
        self.unknown || clock::now() >= self.due
    }

    /// True when `name` (as the catalog spells it) may reach user code, trusted or not (the scan
    /// asks [`Self::trusted`] once per text, then [`Self::names`]).
    #[cfg(test)]
    pub fn loud(&self, name: &[u8]) -> bool {
        !self.trusted() || self.names(name)
    }

    /// [`Self::loud`] for a map known to be trusted.
    #[inline]
    pub fn names(&self, name: &[u8]) -> bool {
        self.everything || self.names.contains(name)
    }

    /// Names one more relation, type or function that may reach user code.
    pub fn add_name(&mut self, name: &[u8]) {
        self.names.insert(name.into());
    }

    /// Names one more user-defined operator.
    pub fn add_operator(&mut self, op: &[u8]) {
        self.operators.push(op.into());
    }

    /// Something reaches user code with no name: every statement that names anything may.
    pub fn reach_everything(&mut self) {
        self.everything = true;
    }

    /// True when `sql` may hold a user-defined operator.
    pub fn operator_in(&self, sql: &[u8]) -> bool {
        self.operators
            .iter()
            .any(|op| memchr::memmem::find(sql, op).is_some())
    }

    /// A trusted map naming `names` and `operators` (tests of the scan).
    #[cfg(test)]
    pub fn naming(names: &[&str], operators: &[&str]) -> HookMap {
        let mut map = HookMap::quiet();
        map.names = names.iter().map(|n| n.as_bytes().into()).collect();
        map.operators = operators.iter().map(|n| n.as_bytes().into()).collect();
        map
    }
}

/// One database's map as its pools share it: replaced whole when read again, and marked
/// unknown ([`Watch::stale`]) before any statement that may change the catalog reaches the
/// server, so that no transaction is judged by a map older than a catalog change it could see.
#[derive(Debug)]
pub struct Watch {
    map: ArcSwap<HookMap>,
    /// Bumped by each [`Watch::stale`]; a read started in an older generation is not kept.
    generation: AtomicU64,
    /// Bumped by each map stored, so that a server can keep the map it was last judged by
    /// until another is stored (see [`Watch::version`]).
    version: AtomicU64,
    /// A read is under way: one at a time.
    reading: AtomicBool,
    /// Orders `stale` against `offer`.
    lock: Mutex<()>,
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            map: ArcSwap::from_pointee(HookMap::unknown(0)),
            generation: AtomicU64::new(0),
            version: AtomicU64::new(0),
            reading: AtomicBool::new(false),
            lock: Mutex::new(()),
        }
    }
}

impl Watch {
    /// The map now (one atomic load; the caller keeps it for one transaction).
    #[inline]
    pub fn current(&self) -> Arc<HookMap> {
        self.map.load_full()
    }

    /// Which map is stored: a server holding the map of this version needs no new copy (one
    /// load of a counter that changes about once a second, rather than a reference count that
    /// every worker would update per transaction).
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The generation now: a transaction judged by a map of an older one may have seen a
    /// catalog change the map does not know.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A statement that may change the catalog is about to run: nothing is trusted until the
    /// catalog is read again after it.
    #[cold]
    pub fn stale(&self) {
        let _g = self.lock.lock();
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        self.map.store(Arc::new(HookMap::unknown(generation)));
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether the map needs reading (unknown, expired or due) and no read is under way; if
    /// so, the caller reads it, and others do not until the claim is dropped.
    pub fn claim_read(&self) -> Option<ReadClaim<'_>> {
        let map = self.map.load();
        if map.trusted() && clock::now() < map.due {
            return None;
        }
        (!self.reading.swap(true, Ordering::AcqRel)).then_some(ReadClaim(self))
    }

    /// Keeps a map read from the catalog (see [`crate::session::hooks::read_rows`]), unless a statement that may change it started after
    /// the read began (`generation` is the one seen before the read was sent).
    pub fn offer(&self, generation: u64, mut map: HookMap) {
        map.generation = generation;
        let now = clock::now();
        map.due = now.after(LIFETIME / 2);
        map.expires = now.after(LIFETIME);
        let _g = self.lock.lock();
        if self.generation.load(Ordering::Acquire) == generation {
            self.map.store(Arc::new(map));
            self.version.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// The right to read a database's catalog, held by one server at a time.
pub struct ReadClaim<'a>(&'a Watch);

impl Drop for ReadClaim<'_> {
    fn drop(&mut self) {
        self.0.reading.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_trusted_unread_expired_or_after_a_stale() {
        assert!(HookMap::unknown(0).loud(b"anything"));
        let w = Watch::default();
        let claim = w.claim_read();
        assert!(claim.is_some());
        assert!(w.claim_read().is_none(), "one read at a time");
        drop(claim);
        let g = w.generation();
        w.offer(g, HookMap::quiet());
        assert!(w.claim_read().is_none(), "read, not due");
        assert!(w.current().silent());
        // A read that began before a catalog change is not kept.
        let g = w.generation();
        w.stale();
        assert!(w.current().loud(b"x"));
        w.offer(g, HookMap::quiet());
        assert!(w.current().loud(b"x"));
        w.offer(w.generation(), HookMap::quiet());
        assert!(!w.current().loud(b"x"));
    }
}
