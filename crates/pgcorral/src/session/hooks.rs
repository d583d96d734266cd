//! What user code a database holds, read from its catalog: the names through which a statement
//! can reach code its text does not show (relations with triggers, rules, policies, defaults or
//! checks; types whose input, output or checks are user code; every user function and
//! operator), so that the session scan calls a query clean only when it names none of them.
//! The map itself, shared by a database's pools, is [`crate::server::hooks`]'s.

use std::collections::HashSet;

pub use crate::server::hooks::{HookMap, ReadClaim, Watch, LIFETIME};

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
pub fn read_rows(rows: &[Vec<Option<String>>]) -> HookMap {
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
                map.add_name(col(row, 1).as_bytes());
            }
            "o" => map.add_operator(col(row, 1).as_bytes()),
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
            "!" => map.reach_everything(),
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
    name(&mut map, &loud_types, types.iter().map(|(t, n, _)| (*t, n)));
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
    name(&mut map, &loud_rels, rels.iter().map(|(r, n, _)| (*r, n)));
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

/// Adds to `map` the name of each loud object of `objects` (oid, name).
fn name<'a>(
    map: &mut HookMap,
    loud: &HashSet<u32>,
    objects: impl Iterator<Item = (u32, &'a String)>,
) {
    for (o, n) in objects {
        if loud.contains(&o) {
            map.add_name(n.as_bytes());
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
        // Trusted as read (the caller that keeps it sets when it expires).
        let map = read_rows(&rows);
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
        let empty = read_rows(&[row(&["r", "1", "t", "f"])]);
        assert!(empty.silent());
    }
}
