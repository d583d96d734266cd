//! Prepared statements in transaction and statement mode: each client's statements (protocol
//! Parse with a name, SQL PREPARE) are kept by pgcorral under the client's names and prepared on
//! whichever server the client lands on, under names of pgcorral's own. Every Parse a client
//! sends reaches a server as a real Parse; clients share a server statement only when what
//! their Parses resolved is the same (text, parameter types, row description: see
//! [`Registry::settle`]). Each server keeps at most `max_prepared_statements` (least recently
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

use bytes::{BufMut, Bytes, BytesMut};

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

/// One statement as a client's Parse (or SQL PREPARE) made it on a server; clients whose
/// Parses resolved the same way share it (see [`Registry::settle`]).
#[derive(Debug)]
pub struct Statement {
    pub id: u64,
    /// Its name on servers: `pgcorral_<id>` (where it is prepared under another name, see
    /// [`ServerStatements`]).
    pub name: String,
    pub source: Source,
    /// The SQL-level statement an `EXECUTE name ...` text runs (a Parse of SQL `EXECUTE` of
    /// one of the client's statements): prepared first wherever this one is, and its server
    /// name put in the text there.
    pub runs: Option<Arc<Statement>>,
    /// The parameter types (OIDs) its first Parse resolved (a ParameterDescription), and so the
    /// types it is parsed with on any other server: PostgreSQL keeps a prepared statement's
    /// parameter types for its life.
    pub params: OnceLock<Box<[u32]>>,
    /// The row description its first Parse resolved (RowDescription or NoData: tag, then
    /// body): wherever it is prepared again, its description there must match, or the client
    /// gets PostgreSQL's "cached plan must not change result type".
    pub shape: OnceLock<Box<[u8]>>,
    /// Its result type changed on a server (a schema change): no Parse is settled onto it any
    /// more, and it is not prepared anywhere again for a client (but in a retried batch).
    retired: AtomicBool,
    /// The statements the shards run for it when it is bound across shards (the text
    /// pgcorral planned for them: [`Registry::form`]), most recent last.
    forms: parking_lot::Mutex<Vec<Arc<Statement>>>,
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

    /// The query text and what follows it (parameter types) of a Parse of this statement
    /// under any name, with `runs_as` the server name of [`Statement::runs`] there: with the
    /// parameter types its first Parse resolved once they are known. `None`: an SQL-level
    /// statement not resolved yet (prepared with its own `PREPARE`).
    pub fn parse_body(&self, runs_as: Option<&str>) -> Option<Bytes> {
        let (text, declared): (&[u8], Option<&[u8]>) = match &self.source {
            Source::Parse(b) => {
                let (text, rest) = split_text(b)?;
                (text, Some(rest))
            }
            Source::Sql(rest) => (sql::prepared_query(rest)?.as_bytes(), None),
        };
        let renamed = match runs_as {
            Some(name) => Some(execute_text(text, name)?),
            None => None,
        };
        let mut out = BytesMut::new();
        out.put_slice(renamed.as_deref().unwrap_or(text));
        out.put_u8(0);
        match (self.params.get(), declared) {
            (Some(params), _) => {
                out.put_u16(params.len() as u16);
                for &p in params.iter() {
                    out.put_u32(p);
                }
            }
            (None, Some(declared)) => out.put_slice(declared),
            (None, None) => return None,
        }
        Some(out.freeze())
    }

    /// What identifies it for sharing: how it was written, what it runs, and what its Parse
    /// resolved; `None` until resolved.
    fn identity(&self) -> Option<Box<[u8]>> {
        let (params, shape) = (self.params.get()?, self.shape.get()?);
        let (kind, src): (u8, &[u8]) = match &self.source {
            Source::Parse(b) => (b'P', b),
            Source::Sql(s) => (b'Q', s.as_bytes()),
        };
        let mut k = Vec::with_capacity(src.len() + 4 * params.len() + shape.len() + 24);
        k.push(kind);
        k.extend_from_slice(&(src.len() as u64).to_be_bytes());
        k.extend_from_slice(src);
        k.extend_from_slice(&self.runs.as_ref().map_or(0, |r| r.id).to_be_bytes());
        k.extend_from_slice(&(params.len() as u64).to_be_bytes());
        for p in params.iter() {
            k.extend_from_slice(&p.to_be_bytes());
        }
        k.extend_from_slice(shape);
        Some(k.into())
    }
}

/// A Parse body's query text and what follows its NUL.
fn split_text(body: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = body.iter().position(|&c| c == 0)?;
    Some((&body[..i], &body[i + 1..]))
}

/// `EXECUTE name rest` (the text of a Parse that runs one of the client's SQL-level
/// statements) with the statement's server name `server_name` in place of the client's.
pub fn execute_text(text: &[u8], server_name: &str) -> Option<Vec<u8>> {
    let sql::Command::Execute { rest, .. } = sql::parse(std::str::from_utf8(text).ok()?)? else {
        return None;
    };
    let sep = if rest.is_empty() { "" } else { " " };
    Some(format!("EXECUTE {server_name}{sep}{rest}").into_bytes())
}

/// The row description kept in [`Statement::shape`]: a RowDescription or NoData, tag and body.
pub fn shape_of(tag: u8, body: &[u8]) -> Box<[u8]> {
    let mut s = Vec::with_capacity(1 + body.len());
    s.push(tag);
    s.extend_from_slice(body);
    s.into()
}

/// Whether a statement described as `known` (see [`shape_of`]) may now be described by `tag`
/// and `body` without PostgreSQL's "cached plan must not change result type": as PostgreSQL
/// compares a re-analysed statement's result, by the columns' names, types and type
/// modifiers, not by the table each comes from (a changed search_path may find a table of the
/// same shape elsewhere).
pub fn same_result_type(known: &[u8], tag: u8, body: &[u8]) -> bool {
    if known.first() != Some(&tag) {
        return false;
    }
    let known = &known[1..];
    if tag != pgwire::backend::ROW_DESCRIPTION {
        return known == body;
    }
    /// The bytes of a field after its name: table oid (4), column number (2), type oid (4),
    /// type length (2), type modifier (4), format (2).
    const AFTER_NAME: usize = 18;
    let columns = |b: &[u8]| -> Option<Vec<(Vec<u8>, [u8; 12])>> {
        let n = u16::from_be_bytes(b.get(..2)?.try_into().ok()?) as usize;
        let mut rest = b.get(2..)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let end = rest.iter().position(|&c| c == 0)?;
            let f = rest.get(end + 1..end + 1 + AFTER_NAME)?;
            let mut kept = [0u8; 12];
            kept.copy_from_slice(&f[6..]);
            out.push((rest[..end].to_vec(), kept));
            rest = &rest[end + 1 + AFTER_NAME..];
        }
        rest.is_empty().then_some(out)
    };
    match (columns(known), columns(body)) {
        (Some(a), Some(b)) => a == b,
        _ => known == body,
    }
}

/// The parameter types of a ParameterDescription body.
pub fn param_types(body: &[u8]) -> Option<Box<[u32]>> {
    let n = u16::from_be_bytes(body.get(..2)?.try_into().ok()?) as usize;
    let oids = body.get(2..2 + 4 * n)?;
    Some(
        oids.chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// Planned texts kept per client statement ([`Registry::form`]).
const FORMS_KEPT: usize = 4;

/// Every statement any client holds, by what its Parse resolved: clients whose Parses of a
/// text resolved the same parameter types and row description share one statement.
#[derive(Default)]
pub struct Registry {
    inner: parking_lot::Mutex<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    by_identity: HashMap<Box<[u8]>, Weak<Statement>>,
    next_id: u64,
    /// Size of the map after the last sweep of dead entries.
    swept_at: usize,
}

impl Registry {
    /// A new statement for a client's Parse of `source` (not shared before its Parse is
    /// resolved: see [`Registry::settle`]).
    pub fn fresh(&self, source: Source, runs: Option<Arc<Statement>>) -> Arc<Statement> {
        let id = {
            let mut r = self.inner.lock();
            r.next_id += 1;
            r.next_id
        };
        Arc::new(Statement {
            id,
            name: format!("{PREFIX}{id}"),
            source,
            runs,
            params: OnceLock::new(),
            shape: OnceLock::new(),
            retired: AtomicBool::new(false),
            forms: Default::default(),
        })
    }

    /// The statement shards run for `of` when it is bound across shards as `body` (a Parse
    /// body after the name: the text pgcorral planned, NUL, parameter types): one of
    /// pgcorral's, kept with `of` (a few per statement, as the planned text can depend on the
    /// values bound), so that each shard's server prepares it once and binds it after, as
    /// PostgreSQL keeps the client's statement. Never settled onto another (see
    /// [`Registry::settle`]): its name is its own on every server.
    pub fn form(&self, of: &Statement, body: &[u8]) -> Arc<Statement> {
        let mut forms = of.forms.lock();
        if let Some(f) = forms.iter().find(|f| f.text() == body) {
            return f.clone();
        }
        if forms.len() >= FORMS_KEPT {
            forms.remove(0);
        }
        let f = self.fresh(Source::Parse(Bytes::copy_from_slice(body)), None);
        forms.push(f.clone());
        f
    }

    /// `stmt`'s Parse was resolved (its parameter types and row description are known): the
    /// statement it is the same as, when another client's Parse resolved the same way and that
    /// statement is still held and not retired; else `stmt` becomes the one later Parses
    /// resolving that way are settled onto.
    ///
    /// Why that is sound: a prepared statement PostgreSQL plans again after a schema change is
    /// analysed again from its text, under the catalog and search_path of that moment, with
    /// the parameter types of its first Parse kept; and it fails (0A000) when its result type
    /// changed. A fresh Parse of the text that resolves the same parameter types and the same
    /// row description therefore behaves as the older statement does from now on.
    pub fn settle(&self, stmt: &Arc<Statement>) -> Option<Arc<Statement>> {
        let key = stmt.identity()?;
        let mut r = self.inner.lock();
        if let Some(s) = r.by_identity.get(&key).and_then(Weak::upgrade) {
            if s.id != stmt.id && !s.is_retired() {
                return Some(s);
            }
        }
        if r.by_identity.len() >= 2 * r.swept_at.max(512) {
            r.by_identity.retain(|_, w| w.strong_count() > 0);
            r.swept_at = r.by_identity.len();
        }
        r.by_identity.insert(key, Arc::downgrade(stmt));
        None
    }

    /// A new statement for the text of `stmt` (retired), parsed with the parameter types its
    /// first Parse resolved.
    pub fn renew(&self, stmt: &Statement) -> Arc<Statement> {
        let source = match &stmt.source {
            Source::Parse(b) => Source::Parse(b.clone()),
            Source::Sql(s) => Source::Sql(s.clone()),
        };
        let fresh = self.fresh(source, stmt.runs.clone());
        if let Some(p) = stmt.params.get() {
            let _ = fresh.params.set(p.clone());
        }
        fresh
    }

    /// Statements known (alive or not yet swept), for tests and statistics.
    pub fn len(&self) -> usize {
        self.inner.lock().by_identity.len()
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
    /// The SQL-level statement the unnamed one runs when its text is `EXECUTE name ...`.
    unnamed_runs: Option<Arc<Statement>>,
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

    /// No named statement (protocol or SQL level), and no unnamed one that runs one of them:
    /// all the client's statements are its unnamed one's text, if any.
    pub fn only_unnamed(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|c| c.named.is_empty() && c.sql.is_empty() && c.unnamed_runs.is_none())
    }

    /// The statement the unnamed one's `EXECUTE` text runs.
    pub fn unnamed_runs(&self) -> Option<&Arc<Statement>> {
        self.0.as_ref()?.unnamed_runs.as_ref()
    }

    /// The client has no unnamed statement (a simple Query dropped it).
    #[inline]
    pub fn drop_unnamed(&mut self) {
        if let Some(c) = self.0.as_mut() {
            c.unnamed.clear();
            c.unnamed_runs = None;
        }
    }

    pub fn set_unnamed(&mut self, body: &[u8]) {
        let c = self.get();
        c.unnamed.clear();
        c.unnamed.extend_from_slice(body);
        c.unnamed_runs = None;
    }

    /// The unnamed statement is `body`, whose text runs `runs` with SQL `EXECUTE`.
    pub fn set_unnamed_runs(&mut self, body: &[u8], runs: Arc<Statement>) {
        self.set_unnamed(body);
        self.get().unnamed_runs = Some(runs);
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
            c.unnamed_runs = None;
        }
    }

    pub fn count(&self) -> usize {
        self.0.as_ref().map_or(0, |c| c.named.len() + c.sql.len())
    }
}

/// One statement prepared on a server.
#[derive(Debug)]
struct Here {
    stmt: Arc<Statement>,
    /// The statement whose name it has there: `stmt` itself, or the statement of the client's
    /// Parse that was settled onto `stmt` (see [`ServerStatements::settle`]).
    named: Arc<Statement>,
    used: u64,
}

/// The statements prepared on one server connection, least recently used first out.
#[derive(Default)]
pub struct ServerStatements {
    /// Statement id → where it is.
    map: FastMap<u64, Here>,
    tick: u64,
    /// Names still prepared on the server but no longer usable (their plans went stale after a
    /// schema change, or a copy of a statement the server has under another name): closed
    /// before the next statement is prepared there.
    stale: Vec<String>,
}

impl ServerStatements {
    /// Whether `stmt` is prepared here; marks it used.
    pub fn touch(&mut self, stmt: &Statement) -> bool {
        self.name_of(stmt).is_some()
    }

    /// The statement under whose name `stmt` is prepared here (usually `stmt` itself); marks
    /// it used.
    pub fn name_of(&mut self, stmt: &Statement) -> Option<Arc<Statement>> {
        self.tick += 1;
        let e = self.map.get_mut(&stmt.id)?;
        e.used = self.tick;
        Some(e.named.clone())
    }

    /// Records `stmt` as prepared here under its own name. Returns the statement (as named
    /// here) to close first when `max` is reached (the least recently used); when more than
    /// `max` are here (it was lowered), the other least recently used ones go to the stale
    /// names ([`ServerStatements::take_stale`]), closed with it, down to `max`.
    pub fn insert(&mut self, stmt: &Arc<Statement>, max: usize) -> Option<Arc<Statement>> {
        let mut evicted = None;
        while max > 0 && self.map.len() >= max {
            let Some(&id) = self
                .map
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(id, _)| id)
            else {
                break;
            };
            let Some(e) = self.map.remove(&id) else {
                break;
            };
            // Above the limit (it was lowered): the others are closed with the first.
            if let Some(first) = evicted.replace(e.named) {
                self.stale.push(first.name.clone());
            }
        }
        self.tick += 1;
        self.map.insert(
            stmt.id,
            Here {
                stmt: stmt.clone(),
                named: stmt.clone(),
                used: self.tick,
            },
        );
        evicted
    }

    /// `parsed`, prepared here by a client's Parse, was found to be the same statement as
    /// `same` (see [`Registry::settle`]): it stands for `same` here, or, when the server has
    /// `same` already, it is closed before the next prepare.
    pub fn settle(&mut self, parsed: &Arc<Statement>, same: &Arc<Statement>) {
        let Some(e) = self.map.remove(&parsed.id) else {
            return;
        };
        match self.map.entry(same.id) {
            std::collections::hash_map::Entry::Occupied(_) => {
                self.stale.push(e.named.name.clone());
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Here {
                    stmt: same.clone(),
                    ..e
                });
            }
        }
    }

    pub fn remove(&mut self, id: u64) {
        self.map.remove(&id);
    }

    /// `name` may be prepared here, unused: it is closed before the next prepare.
    pub fn close_later(&mut self, name: String) {
        self.stale.push(name);
    }

    /// Statement `id` may or may not be prepared here (its Parse was sent, and the server
    /// answered an error somewhere after): it is no longer counted as here, and its name is
    /// closed before the next prepare (closing a name the server lacks is no error).
    pub fn forget(&mut self, id: u64) {
        if let Some(e) = self.map.remove(&id) {
            self.stale.push(e.named.name.clone());
        }
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
        self.map.get(&id).map(|e| &e.stmt)
    }

    /// The server said "cached plan must not change result type" for statement `id` (or its
    /// description here differs from the one clients were given): a table changed under it.
    /// It is retired (see [`Statement::retire`]) and closed here before the next prepare.
    pub fn retire(&mut self, id: u64) {
        if let Some(e) = self.map.remove(&id) {
            e.stmt.retire();
            self.stale.push(e.named.name.clone());
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
            .retain(|_, e| present.iter().any(|p| *p == e.named.name));
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

    /// A statement as a Parse of `text` resolved it.
    fn row_description(cols: &[(&str, u32, u32)]) -> Vec<u8> {
        let mut b = (cols.len() as u16).to_be_bytes().to_vec();
        for (name, table, ty) in cols {
            b.extend_from_slice(name.as_bytes());
            b.push(0);
            b.extend_from_slice(&table.to_be_bytes());
            b.extend_from_slice(&1u16.to_be_bytes());
            b.extend_from_slice(&ty.to_be_bytes());
            b.extend_from_slice(&4i16.to_be_bytes());
            b.extend_from_slice(&(-1i32).to_be_bytes());
            b.extend_from_slice(&0u16.to_be_bytes());
        }
        b
    }

    #[test]
    fn the_result_type_is_the_columns_not_their_tables() {
        let rd = pgwire::backend::ROW_DESCRIPTION;
        let known = shape_of(rd, &row_description(&[("id", 16384, 23)]));
        let other_table = row_description(&[("id", 16390, 23)]);
        assert!(same_result_type(&known, rd, &other_table));
        assert!(!same_result_type(
            &known,
            rd,
            &row_description(&[("id", 16384, 20)])
        ));
        assert!(!same_result_type(
            &known,
            rd,
            &row_description(&[("ID", 16384, 23)])
        ));
        assert!(!same_result_type(
            &known,
            rd,
            &row_description(&[("id", 16384, 23), ("v", 16384, 25)])
        ));
        assert!(!same_result_type(&known, pgwire::backend::NO_DATA, b""));
        let none = shape_of(pgwire::backend::NO_DATA, b"");
        assert!(same_result_type(&none, pgwire::backend::NO_DATA, b""));
    }

    fn resolved(r: &Registry, text: &str, params: &[u32], shape: &[u8]) -> Arc<Statement> {
        let s = r.fresh(parse(text), None);
        s.params.set(params.into()).unwrap();
        s.shape.set(shape.into()).unwrap();
        s
    }

    #[test]
    fn parses_that_resolved_alike_share_a_statement() {
        let r = Registry::default();
        let a = resolved(&r, "insert into r values ($1)", &[1700], b"n");
        assert!(r.settle(&a).is_none(), "the first of its kind");
        assert_eq!(a.name, format!("{PREFIX}{}", a.id));
        let b = resolved(&r, "insert into r values ($1)", &[1700], b"n");
        assert_ne!(a.id, b.id, "each Parse is a statement of its own");
        assert_eq!(r.settle(&b).map(|s| s.id), Some(a.id));
        // The table was made again with another column type: not the same statement.
        let c = resolved(&r, "insert into r values ($1)", &[23], b"n");
        assert!(r.settle(&c).is_none());
        let d = resolved(&r, "select 1", &[], b"T\0\x01a\0");
        let e = resolved(&r, "select 1", &[], b"T\0\x01b\0");
        assert!(
            r.settle(&d).is_none() && r.settle(&e).is_none(),
            "another shape"
        );
        // Not resolved (yet): never shared.
        assert!(r.settle(&r.fresh(parse("select 1"), None)).is_none());
        // Retired: later Parses resolving the same way make a new one.
        c.retire();
        let f = resolved(&r, "insert into r values ($1)", &[23], b"n");
        assert!(r.settle(&f).is_none());
        let g = resolved(&r, "insert into r values ($1)", &[23], b"n");
        assert_eq!(r.settle(&g).map(|s| s.id), Some(f.id));
    }

    #[test]
    fn dropped_statements_are_not_shared() {
        let r = Registry::default();
        let id = {
            let a = resolved(&r, "select 1", &[], b"n");
            r.settle(&a);
            a.id
        };
        let b = resolved(&r, "select 1", &[], b"n");
        assert!(r.settle(&b).is_none());
        assert_ne!(b.id, id);
    }

    /// Prepared elsewhere, a statement is parsed with the parameter types its first Parse
    /// resolved, and an `EXECUTE` text names the server's statement.
    #[test]
    fn parse_bodies_carry_the_resolved_types() {
        let r = Registry::default();
        let s = r.fresh(parse("insert into r values ($1)"), None);
        assert_eq!(
            s.parse_body(None).as_deref(),
            Some(&b"insert into r values ($1)\0\0\0"[..])
        );
        s.params.set(vec![1700].into()).unwrap();
        assert_eq!(
            s.parse_body(None).as_deref(),
            Some(&b"insert into r values ($1)\0\0\x01\0\0\x06\xa4"[..])
        );
        let q = r.fresh(Source::Sql("(int) AS select $1".into()), None);
        assert_eq!(q.parse_body(None), None, "its own PREPARE until resolved");
        q.params.set(vec![23].into()).unwrap();
        assert_eq!(
            q.parse_body(None).as_deref(),
            Some(&b"select $1\0\0\x01\0\0\0\x17"[..])
        );
        let x = r.fresh(parse("execute p (1)"), Some(q.clone()));
        assert_eq!(
            x.parse_body(Some("pgcorral_9")).as_deref(),
            Some(&b"EXECUTE pgcorral_9 (1)\0\0\0"[..])
        );
    }

    #[test]
    fn server_statements_evict_least_recently_used() {
        let r = Registry::default();
        let s: Vec<_> = (0..3)
            .map(|i| r.fresh(parse(&format!("select {i}")), None))
            .collect();
        let mut srv = ServerStatements::default();
        assert!(srv.insert(&s[0], 2).is_none());
        assert!(srv.insert(&s[1], 2).is_none());
        assert!(srv.touch(&s[0]));
        let out = srv.insert(&s[2], 2).expect("evicts");
        assert_eq!(out.id, s[1].id);
        assert!(srv.touch(&s[0]) && srv.touch(&s[2]) && !srv.touch(&s[1]));
    }

    /// max_prepared_statements lowered below what a server holds: the next prepare closes the
    /// least recently used down to the new limit (PgBouncer's `test_evict_statement_cache`).
    #[test]
    fn a_lowered_limit_evicts_down_to_it() {
        let r = Registry::default();
        let s: Vec<_> = (0..6)
            .map(|i| r.fresh(parse(&format!("select {i}")), None))
            .collect();
        let mut srv = ServerStatements::default();
        for st in &s[..5] {
            assert!(srv.insert(st, 5).is_none());
        }
        assert!(srv.touch(&s[0]));
        let first = srv.insert(&s[5], 2).expect("evicts");
        let mut closed = srv.take_stale();
        closed.push(first.name.clone());
        closed.sort();
        let mut want: Vec<String> = s[1..5].iter().map(|x| x.name.clone()).collect();
        want.sort();
        assert_eq!(closed, want);
        assert_eq!(srv.len(), 2);
        assert!(srv.touch(&s[0]) && srv.touch(&s[5]));
    }

    /// A client's Parse settled onto another statement: on a server without that one, the
    /// client's copy stands for it (under its own name); on one with it, the copy is closed.
    #[test]
    fn a_settled_parse_stands_for_its_statement_or_is_closed() {
        let r = Registry::default();
        let (e, n, m) = (
            resolved(&r, "select 1", &[], b"n"),
            resolved(&r, "select 1", &[], b"n"),
            resolved(&r, "select 1", &[], b"n"),
        );
        let mut srv = ServerStatements::default();
        srv.insert(&n, 0);
        srv.settle(&n, &e);
        assert!(!srv.has(n.id));
        assert_eq!(srv.name_of(&e).map(|s| s.id), Some(n.id), "under n's name");
        assert!(srv.take_stale().is_empty());
        srv.insert(&m, 0);
        srv.settle(&m, &e);
        assert!(!srv.has(m.id) && srv.has(e.id));
        assert_eq!(srv.take_stale(), std::slice::from_ref(&m.name));
        // Retired or evicted, it is closed under the name it has there.
        srv.retire(e.id);
        assert_eq!(srv.take_stale(), std::slice::from_ref(&n.name));
    }

    #[test]
    fn client_names_are_the_clients_own() {
        let r = Registry::default();
        let st = r.fresh(parse("select 1"), None);
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
