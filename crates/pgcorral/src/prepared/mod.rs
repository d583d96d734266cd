//! Prepared statements in transaction and statement mode: each client's statements (protocol
//! Parse with a name, SQL PREPARE) are kept by pgcorral under the client's names and prepared on
//! whichever server the client lands on, under names of pgcorral's own that clients preparing
//! the same text share; each server keeps at most `max_prepared_statements` (least recently
//! used ones are closed). [`rewrite`] changes client messages, [`expect`] matches the server's
//! answers to them so that answers pgcorral owes or must hide come out in order, and
//! [`replay`] retries a batch whose statement a schema change made stale.

pub mod expect;
pub mod replay;
pub mod rewrite;
pub(crate) mod sql;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};

use bytes::Bytes;

/// The maps looked up on every request of a client that uses prepared statements: foldhash
/// (seeded per process) instead of SipHash, a fifth of the cost for short names and ids.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Prefix of the statement names pgcorral uses on servers.
pub const PREFIX: &str = "pgcorral_";

/// How a statement is created on a server.
#[derive(Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// A protocol-level Parse: the body after the statement name (query, NUL, parameter types).
    Parse(Bytes),
    /// SQL `PREPARE`: what follows the statement name (`(types) AS statement`).
    Sql(String),
}

/// One distinct statement text (with its parameter types), shared by every client that
/// prepared it.
#[derive(Debug)]
pub struct Statement {
    pub id: u64,
    /// Its name on servers: `pgcorral_<id>`.
    pub name: String,
    pub source: Source,
    /// A digest of the row description clients were given for it (Describe of the statement;
    /// the first one seen): wherever it is prepared, its description there must match, or the
    /// version there is another statement (see `expect::reshape`).
    pub shape: OnceLock<u64>,
    /// Its result type changed on a server (a schema change): clients that prepare the text
    /// from now on get a new statement, and this one is not prepared anywhere again for a
    /// client that was given its description.
    retired: AtomicBool,
}

impl Statement {
    /// The text it was prepared from: a Parse's body after the name (the statement, NUL,
    /// parameter types), or what follows an SQL PREPARE's name.
    pub fn text(&self) -> &[u8] {
        match &self.source {
            Source::Parse(b) => b,
            Source::Sql(s) => s.as_bytes(),
        }
    }

    pub fn is_retired(&self) -> bool {
        self.retired.load(Relaxed)
    }

    pub fn retire(&self) {
        self.retired.store(true, Relaxed);
    }
}

/// The digest of a row description (RowDescription or NoData, tag and body) kept in
/// [`Statement::shape`].
pub fn shape_of(tag: u8, body: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tag.hash(&mut h);
    body.hash(&mut h);
    h.finish()
}

/// Every statement any client holds, by text: clients that prepare the same text share one
/// server-side statement.
#[derive(Default)]
pub struct Registry {
    inner: parking_lot::Mutex<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    by_source: HashMap<Arc<Source>, Weak<Statement>>,
    next_id: u64,
    /// Size of the map after the last sweep of dead entries.
    swept_at: usize,
}

impl Registry {
    /// The statement for `source`, made if no client holds one.
    pub fn intern(&self, source: Source) -> Arc<Statement> {
        let mut r = self.inner.lock();
        if let Some(s) = r.by_source.get(&source).and_then(Weak::upgrade) {
            if !s.is_retired() {
                return s;
            }
        }
        if r.by_source.len() >= 2 * r.swept_at.max(512) {
            r.by_source.retain(|_, w| w.strong_count() > 0);
            r.swept_at = r.by_source.len();
        }
        r.next_id += 1;
        let id = r.next_id;
        let key = Arc::new(source);
        let stmt = Arc::new(Statement {
            id,
            name: format!("{PREFIX}{id}"),
            source: match &*key {
                Source::Parse(b) => Source::Parse(b.clone()),
                Source::Sql(s) => Source::Sql(s.clone()),
            },
            shape: OnceLock::new(),
            retired: AtomicBool::new(false),
        });
        r.by_source.insert(key, Arc::downgrade(&stmt));
        stmt
    }

    /// The live statement for the text of `stmt` (a new one if `stmt` is retired).
    pub fn renew(&self, stmt: &Statement) -> Arc<Statement> {
        self.intern(match &stmt.source {
            Source::Parse(b) => Source::Parse(b.clone()),
            Source::Sql(s) => Source::Sql(s.clone()),
        })
    }

    /// Statements known (alive or not yet swept), for tests and statistics.
    pub fn len(&self) -> usize {
        self.inner.lock().by_source.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A client's statements. Empty (no allocation) until the client prepares something.
#[derive(Default)]
pub struct ClientStatements(Option<Box<ClientInner>>);

#[derive(Default)]
pub struct ClientInner {
    /// Protocol-level statements by the client's name.
    named: FastMap<Box<[u8]>, Arc<Statement>>,
    /// SQL-level statements by the client's (case-folded) name.
    sql: FastMap<String, Arc<Statement>>,
    /// The body of the client's last Parse of the unnamed statement, to parse it again on
    /// another server when a Bind or Describe refers to it later.
    unnamed: Vec<u8>,
}

impl ClientStatements {
    fn get(&mut self) -> &mut ClientInner {
        self.0.get_or_insert_with(Default::default)
    }

    pub fn named(&self, name: &[u8]) -> Option<&Arc<Statement>> {
        self.0.as_ref()?.named.get(name)
    }

    pub fn sql(&self, name: &str) -> Option<&Arc<Statement>> {
        self.0.as_ref()?.sql.get(name)
    }

    pub fn unnamed(&self) -> Option<&[u8]> {
        self.0
            .as_ref()
            .map(|c| c.unnamed.as_slice())
            .filter(|u| !u.is_empty())
    }

    pub fn set_unnamed(&mut self, body: &[u8]) {
        let u = &mut self.get().unnamed;
        u.clear();
        u.extend_from_slice(body);
    }

    /// Records a protocol-level statement; false when the name is taken.
    pub fn add_named(&mut self, name: &[u8], stmt: Arc<Statement>) -> bool {
        let named = &mut self.get().named;
        if named.contains_key(name) {
            return false;
        }
        named.insert(name.into(), stmt);
        true
    }

    pub fn remove_named(&mut self, name: &[u8]) {
        if let Some(c) = self.0.as_mut() {
            c.named.remove(name);
        }
    }

    /// Records an SQL-level statement; false when the name is taken (by either kind: they
    /// share PostgreSQL's namespace).
    pub fn add_sql(&mut self, name: String, stmt: Arc<Statement>) -> bool {
        let c = self.get();
        if c.sql.contains_key(&name) || c.named.contains_key(name.as_bytes()) {
            return false;
        }
        c.sql.insert(name, stmt);
        true
    }

    /// Removes an SQL-level statement; false when the client has none of that name.
    pub fn remove_sql(&mut self, name: &str) -> bool {
        self.0.as_mut().is_some_and(|c| {
            c.sql.remove(name).is_some() || c.named.remove(name.as_bytes()).is_some()
        })
    }

    /// Makes every name of the client's for statement `old` stand for `new`.
    pub fn replace(&mut self, old: u64, new: &Arc<Statement>) {
        if let Some(c) = self.0.as_mut() {
            for s in c.named.values_mut().chain(c.sql.values_mut()) {
                if s.id == old {
                    *s = new.clone();
                }
            }
        }
    }

    /// `DEALLOCATE ALL` / `DISCARD ALL`: forgets every statement of this client (only).
    pub fn clear(&mut self) {
        if let Some(c) = self.0.as_mut() {
            c.named.clear();
            c.sql.clear();
            c.unnamed.clear();
        }
    }

    pub fn count(&self) -> usize {
        self.0.as_ref().map_or(0, |c| c.named.len() + c.sql.len())
    }
}

/// The statements prepared on one server connection, least recently used first out.
#[derive(Default)]
pub struct ServerStatements {
    /// Statement id → (statement, last use).
    map: FastMap<u64, (Arc<Statement>, u64)>,
    tick: u64,
    /// Names still prepared on the server but no longer usable (their plans went stale after a
    /// schema change): closed before the next statement is prepared there.
    stale: Vec<String>,
}

impl ServerStatements {
    /// Whether `stmt` is prepared here; marks it used.
    pub fn touch(&mut self, stmt: &Statement) -> bool {
        self.tick += 1;
        match self.map.get_mut(&stmt.id) {
            Some(e) => {
                e.1 = self.tick;
                true
            }
            None => false,
        }
    }

    /// Records `stmt` as prepared here. Returns the statement to close first when `max` is
    /// reached (the least recently used).
    pub fn insert(&mut self, stmt: &Arc<Statement>, max: usize) -> Option<Arc<Statement>> {
        let mut evicted = None;
        if max > 0 && self.map.len() >= max {
            if let Some(&id) = self
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(id, _)| id)
            {
                evicted = self.map.remove(&id).map(|(s, _)| s);
            }
        }
        self.tick += 1;
        self.map.insert(stmt.id, (stmt.clone(), self.tick));
        evicted
    }

    pub fn remove(&mut self, id: u64) {
        self.map.remove(&id);
    }

    /// Everything was deallocated on the server (DISCARD ALL, DEALLOCATE ALL).
    pub fn clear(&mut self) {
        self.map.clear();
        self.stale.clear();
    }

    /// Whether statement `id` is prepared here (without marking it used).
    pub fn has(&self, id: u64) -> bool {
        self.map.contains_key(&id)
    }

    pub fn get(&self, id: u64) -> Option<&Arc<Statement>> {
        self.map.get(&id).map(|(s, _)| s)
    }

    /// The server said "cached plan must not change result type" for statement `id` (or its
    /// description here differs from the one clients were given): a table changed under it.
    /// It is retired (see [`Statement::retire`]) and closed here before the next prepare.
    pub fn retire(&mut self, id: u64) {
        if let Some((s, _)) = self.map.remove(&id) {
            s.retire();
            self.stale.push(s.name.clone());
        }
    }

    /// Names to close before preparing anything on the server.
    pub fn take_stale(&mut self) -> Vec<String> {
        std::mem::take(&mut self.stale)
    }

    /// Keeps only the statements whose server names are in `present` (read back from the
    /// server after a client ran SQL that may have deallocated some).
    pub fn retain_names(&mut self, present: &[String]) {
        self.map
            .retain(|_, (s, _)| present.iter().any(|p| *p == s.name));
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Source {
        Source::Parse(Bytes::from(format!("{text}\0\0\0")))
    }

    #[test]
    fn same_text_same_statement() {
        let r = Registry::default();
        let a = r.intern(parse("select 1"));
        let b = r.intern(parse("select 1"));
        let c = r.intern(parse("select 2"));
        assert_eq!(a.id, b.id);
        assert_ne!(a.id, c.id);
        assert_eq!(a.name, format!("{PREFIX}{}", a.id));
        let sql = r.intern(Source::Sql("AS select 1".into()));
        assert_ne!(sql.id, a.id);
    }

    #[test]
    fn dropped_statements_get_new_ids() {
        let r = Registry::default();
        let id = r.intern(parse("select 1")).id;
        assert_ne!(r.intern(parse("select 1")).id, id);
    }

    #[test]
    fn server_statements_evict_least_recently_used() {
        let r = Registry::default();
        let s: Vec<_> = (0..3)
            .map(|i| r.intern(parse(&format!("select {i}"))))
            .collect();
        let mut srv = ServerStatements::default();
        assert!(srv.insert(&s[0], 2).is_none());
        assert!(srv.insert(&s[1], 2).is_none());
        assert!(srv.touch(&s[0]));
        let out = srv.insert(&s[2], 2).expect("evicts");
        assert_eq!(out.id, s[1].id);
        assert!(srv.touch(&s[0]) && srv.touch(&s[2]) && !srv.touch(&s[1]));
    }

    #[test]
    fn client_names_are_the_clients_own() {
        let r = Registry::default();
        let st = r.intern(parse("select 1"));
        let mut a = ClientStatements::default();
        assert_eq!(a.count(), 0);
        assert!(a.add_named(b"s1", st.clone()));
        assert!(!a.add_named(b"s1", st.clone()), "name taken");
        assert!(!a.add_sql("s1".into(), st.clone()), "one namespace");
        assert!(a.add_sql("p".into(), st.clone()));
        assert!(a.remove_sql("p"));
        assert!(!a.remove_sql("p"));
        a.clear();
        assert_eq!(a.count(), 0);
    }
}
