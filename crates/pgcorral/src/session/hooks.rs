//! What user code a database holds, read from its catalog: the names through which a statement
//! can reach code its text does not show (relations with triggers, rules, policies, defaults or
//! checks; types whose input, output or checks are user code; every user function and
//! operator), so that the session scan calls a query clean only when it names none of them.

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

    /// Keeps a map read from the catalog, unless a statement that may change it started after
    /// the read began (`generation` is the one seen before the read was sent).
    pub fn offer(&self, generation: u64, rows: &[Vec<Option<String>>]) {
        let mut map = read_rows(rows);
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

/// The catalog read, run with `search_path` set to `pg_catalog, pg_temp` for its own
/// transaction, so that no object a user made is resolved in it (and without the session's
/// statement_timeout, which may be a client's). Rows of four text columns:
///
/// - `f`, name: a user function, procedure or aggregate (any of them may be reached by its
///   name, by attribute notation `t.name`, or as an overload of a built-in);
/// - `o`, name: a user operator;
/// - `t`, oid, name, how: a user type that may run user code: `L` does (base, range,
///   multirange types, standalone composites), `D` a domain over the type in the fourth column,
///   `A` an array of it (enums, tables' row types and their arrays run none, and are left out);
/// - `k`, type oid, expression: a domain's CHECK;
/// - `r`, oid, name, `t`/`f`: a relation and whether it runs user code by itself (a view,
///   materialized view or foreign table; a trigger other than PostgreSQL's own for foreign
///   keys; a rule; row-level security; an index expression or predicate using a user object);
/// - `x`, relation oid, expression: a column default, generation expression or CHECK;
/// - `c`, relation oid, type oid: a column of a user type;
/// - `e`, oid, oid: two relations linked by inheritance or a foreign key (the code of one may
///   run for a statement on the other);
/// - `!`, reason: user code reached with no name (a user-defined cast with a function, a user
///   default conversion).
pub const READ_SQL: &str = "SELECT pg_catalog.set_config('statement_timeout', '0', true), \
pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);\
WITH rel AS (SELECT c.oid, c.relname, c.relkind, c.relhasrules, c.relrowsecurity FROM pg_class c \
 WHERE c.oid >= 16384::oid AND c.relkind IN ('r', 'p', 'v', 'm', 'f')) \
SELECT 'f', p.proname::text, NULL, NULL FROM pg_proc p WHERE p.oid >= 16384::oid GROUP BY p.proname \
UNION ALL SELECT 'o', o.oprname::text, NULL, NULL FROM pg_operator o WHERE o.oid >= 16384::oid GROUP BY o.oprname \
UNION ALL SELECT 't', t.oid::text, t.typname::text, CASE \
 WHEN t.typtype = 'd' THEN 'D' || t.typbasetype::text \
 WHEN t.typelem <> 0::oid AND t.typlen = -1 THEN 'A' || t.typelem::text \
 ELSE 'L' END FROM pg_type t WHERE t.oid >= 16384::oid AND t.typtype <> 'e' \
 AND (t.typrelid = 0::oid OR EXISTS (SELECT FROM pg_class r WHERE r.oid = t.typrelid AND r.relkind = 'c')) \
 AND NOT EXISTS (SELECT FROM pg_type e JOIN pg_class r ON r.oid = e.typrelid \
  WHERE e.oid = t.typelem AND t.typlen = -1 AND r.relkind <> 'c') \
UNION ALL SELECT 'k', k.contypid::text, pg_get_expr(k.conbin, 0), NULL FROM pg_constraint k \
 WHERE k.contypid >= 16384::oid AND k.contype = 'c' \
UNION ALL SELECT 'r', r.oid::text, r.relname::text, CASE WHEN r.relkind IN ('v', 'm', 'f') OR r.relhasrules OR r.relrowsecurity \
 OR EXISTS (SELECT FROM pg_trigger g WHERE g.tgrelid = r.oid AND NOT (g.tgisinternal AND g.tgfoid < 16384::oid AND g.tgconstraint <> 0::oid)) \
 OR EXISTS (SELECT FROM pg_index i JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = i.indexrelid \
  WHERE i.indrelid = r.oid AND d.refobjid >= 16384::oid \
  AND d.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass, 'pg_opclass'::regclass, 'pg_type'::regclass)) \
 THEN 't' ELSE 'f' END FROM rel r \
UNION ALL SELECT 'x', d.adrelid::text, pg_get_expr(d.adbin, d.adrelid), NULL FROM pg_attrdef d JOIN rel r ON r.oid = d.adrelid \
UNION ALL SELECT 'x', k.conrelid::text, pg_get_expr(k.conbin, k.conrelid), NULL FROM pg_constraint k JOIN rel r ON r.oid = k.conrelid \
 WHERE k.contype = 'c' \
UNION ALL SELECT 'c', a.attrelid::text, a.atttypid::text, NULL FROM pg_attribute a JOIN rel r ON r.oid = a.attrelid \
 WHERE a.attnum > 0 AND NOT a.attisdropped AND a.atttypid >= 16384::oid \
UNION ALL SELECT 'e', i.inhrelid::text, i.inhparent::text, NULL FROM pg_inherits i \
UNION ALL SELECT 'e', k.conrelid::text, k.confrelid::text, NULL FROM pg_constraint k WHERE k.contype = 'f' \
UNION ALL SELECT '!', 'cast', NULL, NULL WHERE EXISTS (SELECT FROM pg_cast c WHERE c.oid >= 16384::oid AND c.castmethod <> 'b') \
UNION ALL SELECT '!', 'conversion', NULL, NULL WHERE EXISTS (SELECT FROM pg_conversion v WHERE v.oid >= 16384::oid AND v.condefault)";

/// Column `i` of a row, `""` for NULL or missing.
fn col(row: &[Option<String>], i: usize) -> &str {
    row.get(i).and_then(|v| v.as_deref()).unwrap_or_default()
}

/// Builds the map from [`READ_SQL`]'s rows (generation and expiry left for the caller).
fn read_rows(rows: &[Vec<Option<String>>]) -> HookMap {
    // Trusted while its own expressions are judged by it; the caller sets the expiry.
    let mut map = HookMap::quiet();
    let oid = |s: &str| s.parse::<u32>().unwrap_or(0);
    // Types: (oid → name, how), and which are loud, to a fixed point.
    let mut types: Vec<(u32, String, String)> = Vec::new();
    let mut domain_checks: Vec<(u32, String)> = Vec::new();
    let mut rels: Vec<(u32, String, bool)> = Vec::new();
    let mut exprs: Vec<(u32, String)> = Vec::new();
    let mut columns: Vec<(u32, u32)> = Vec::new();
    let mut edges: Vec<(u32, u32)> = Vec::new();
    for row in rows {
        match col(row, 0) {
            "f" => {
                map.names.insert(col(row, 1).as_bytes().into());
            }
            "o" => map.operators.push(col(row, 1).as_bytes().into()),
            "t" => types.push((
                oid(col(row, 1)),
                col(row, 2).to_string(),
                col(row, 3).into(),
            )),
            "k" => domain_checks.push((oid(col(row, 1)), col(row, 2).to_string())),
            "r" => rels.push((
                oid(col(row, 1)),
                col(row, 2).to_string(),
                col(row, 3) == "t",
            )),
            "x" => exprs.push((oid(col(row, 1)), col(row, 2).to_string())),
            "c" => columns.push((oid(col(row, 1)), oid(col(row, 2)))),
            "e" => edges.push((oid(col(row, 1)), oid(col(row, 2)))),
            "!" => map.everything = true,
            _ => {}
        }
    }
    // An expression is clean when the scan finds it clean with the functions and operators
    // known so far (the types are judged below, by name too).
    let clean = |map: &HookMap, expr: &str| {
        let mut sql = String::with_capacity(expr.len() + 7);
        sql.push_str("SELECT ");
        sql.push_str(expr);
        super::scan::classify(sql.as_bytes(), map) == super::scan::Effect::None
    };
    let mut loud_types: HashSet<u32> = HashSet::new();
    for (t, _, how) in &types {
        if how == "L" {
            loud_types.insert(*t);
        }
    }
    for (t, expr) in &domain_checks {
        if !clean(&map, expr) {
            loud_types.insert(*t);
        }
    }
    // A domain or an array is loud when the type under it is.
    let over: Vec<(u32, u32)> = types
        .iter()
        .filter(|(_, _, how)| how.starts_with('D') || how.starts_with('A'))
        .map(|(t, _, how)| (*t, how.get(1..).map(oid).unwrap_or(0)))
        .collect();
    spread(&mut loud_types, &over, false);
    name(
        &mut map.names,
        &loud_types,
        types.iter().map(|(t, n, _)| (*t, n)),
    );
    // Relations: loud by themselves, by an expression or a column's type, then by their links.
    let mut loud_rels: HashSet<u32> = rels.iter().filter(|r| r.2).map(|r| r.0).collect();
    for (r, expr) in &exprs {
        if !loud_rels.contains(r) && !clean(&map, expr) {
            loud_rels.insert(*r);
        }
    }
    for (r, t) in &columns {
        if loud_types.contains(t) {
            loud_rels.insert(*r);
        }
    }
    spread(&mut loud_rels, &edges, true);
    name(
        &mut map.names,
        &loud_rels,
        rels.iter().map(|(r, n, _)| (*r, n)),
    );
    map
}

/// Makes loud, to a fixed point, each `a` of a link `(a, b)` whose `b` is loud (and, with
/// `both_ways`, each `b` whose `a` is).
fn spread(loud: &mut HashSet<u32>, links: &[(u32, u32)], both_ways: bool) {
    loop {
        let before = loud.len();
        for &(a, b) in links {
            if loud.contains(&b) || both_ways && loud.contains(&a) {
                loud.insert(a);
                if both_ways {
                    loud.insert(b);
                }
            }
        }
        if loud.len() == before {
            return;
        }
    }
}

/// Adds to `names` the name of each loud object of `objects` (oid, name).
fn name<'a>(
    names: &mut Names,
    loud: &HashSet<u32>,
    objects: impl Iterator<Item = (u32, &'a String)>,
) {
    for (o, n) in objects {
        if loud.contains(&o) {
            names.insert(n.as_bytes().into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: &[&str]) -> Vec<Option<String>> {
        v.iter().map(|s| Some(s.to_string())).collect()
    }

    #[test]
    fn a_map_names_what_reaches_user_code() {
        let rows = vec![
            row(&["f", "lower"]),
            row(&["o", "==="]),
            row(&["t", "20000", "checked", "D23"]),
            row(&["k", "20000", "(VALUE > 0)"]),
            row(&["t", "20001", "evil", "D23"]),
            row(&["k", "20001", "(set_config('role', 'x', false) IS NOT NULL)"]),
            row(&["t", "20002", "_evil", "A20001"]),
            row(&["t", "20003", "mood", "E"]),
            row(&["r", "30000", "plain", "f"]),
            row(&["r", "30001", "trig", "t"]),
            row(&["r", "30002", "defaulted", "f"]),
            row(&["x", "30002", "nextval('s'::regclass)"]),
            row(&["r", "30003", "locking", "f"]),
            row(&["x", "30003", "pg_advisory_lock(1)"]),
            row(&["r", "30004", "typed", "f"]),
            row(&["c", "30004", "20002"]),
            row(&["r", "30005", "child", "f"]),
            row(&["e", "30005", "30001"]),
            row(&["r", "30006", "moody", "f"]),
            row(&["c", "30006", "20003"]),
        ];
        let mut map = read_rows(&rows);
        map.expires = Tick::LATEST;
        for loud in [
            "lower", "evil", "_evil", "trig", "locking", "typed", "child",
        ] {
            assert!(map.loud(loud.as_bytes()), "{loud}");
        }
        for quiet in ["checked", "mood", "plain", "defaulted", "moody", "upper"] {
            assert!(!map.loud(quiet.as_bytes()), "{quiet}");
        }
        assert!(map.operator_in(b"select 1 === 2"));
        assert!(!map.silent());
        let mut empty = read_rows(&[row(&["r", "1", "t", "f"])]);
        empty.expires = Tick::LATEST;
        assert!(empty.silent());
    }

    #[test]
    fn nothing_is_trusted_unread_expired_or_after_a_stale() {
        assert!(HookMap::unknown(0).loud(b"anything"));
        let w = Watch::default();
        let claim = w.claim_read();
        assert!(claim.is_some());
        assert!(w.claim_read().is_none(), "one read at a time");
        drop(claim);
        let g = w.generation();
        w.offer(g, &[]);
        assert!(w.claim_read().is_none(), "read, not due");
        assert!(w.current().silent());
        // A read that began before a catalog change is not kept.
        let g = w.generation();
        w.stale();
        assert!(w.current().loud(b"x"));
        w.offer(g, &[]);
        assert!(w.current().loud(b"x"));
        w.offer(w.generation(), &[]);
        assert!(!w.current().loud(b"x"));
    }
}
