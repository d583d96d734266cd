//! What the result cache reads of a database's catalog: the names its verdict allows (see
//! [`super::verdict::Catalog`]), and a fingerprint of everything a catalog change touches, read
//! again and again to see a change made anywhere.

use std::collections::HashMap;

use super::verdict::Catalog;
use crate::error::Result;
use crate::server::ServerConn;
use crate::session;
use crate::session::exec;

/// The names the verdict allows, as rows (kind, name, detail): `f` a safe function, `c` any
/// function, `o` a safe operator, `t` a safe type, `r` a relation (detail: its schema, `/1`
/// when it is a table the cache follows, else `/0`). A followed table is in the publication
/// (`$PUB`, the name as a literal), which publishes every kind of change, without a row filter
/// that would hide some.
const NAMES: &str = "WITH settings_types(name) AS (VALUES ('date'), ('time'), ('timetz'), ('timestamp'), ('timestamptz'), ('interval'), ('money'), ('xml')), \
     safe_base AS ( \
       SELECT t.oid FROM pg_catalog.pg_type t \
       JOIN pg_catalog.pg_proc i ON i.oid OPERATOR(pg_catalog.=) t.typinput \
       JOIN pg_catalog.pg_proc o ON o.oid OPERATOR(pg_catalog.=) t.typoutput \
       WHERE t.oid OPERATOR(pg_catalog.<) 16384 AND t.typcategory OPERATOR(pg_catalog.<>) 'A' AND ( \
         t.typtype OPERATOR(pg_catalog.=) 'p' \
         OR (i.provolatile OPERATOR(pg_catalog.=) 'i' AND o.provolatile OPERATOR(pg_catalog.=) 'i') \
         OR t.typname::pg_catalog.text IN (SELECT name FROM settings_types))), \
     safe_types AS ( \
       SELECT oid FROM safe_base \
       UNION SELECT t.oid FROM pg_catalog.pg_type t WHERE t.oid OPERATOR(pg_catalog.<) 16384 \
         AND t.typcategory OPERATOR(pg_catalog.=) 'A' AND t.typelem IN (SELECT oid FROM safe_base)), \
     user_names AS ( \
       SELECT 'f'::pg_catalog.text AS k, proname::pg_catalog.text AS n FROM pg_catalog.pg_proc WHERE oid OPERATOR(pg_catalog.>=) 16384 \
       UNION SELECT 'o', oprname::pg_catalog.text FROM pg_catalog.pg_operator WHERE oid OPERATOR(pg_catalog.>=) 16384 \
       UNION SELECT 't', typname::pg_catalog.text FROM pg_catalog.pg_type WHERE oid OPERATOR(pg_catalog.>=) 16384) \
     SELECT 'f', p.proname::pg_catalog.text, '' FROM pg_catalog.pg_proc p \
       WHERE p.pronamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace AND p.prokind IN ('f', 'a') \
       GROUP BY p.proname \
       HAVING pg_catalog.bool_and(p.provolatile OPERATOR(pg_catalog.=) 'i' \
         AND p.proargtypes::pg_catalog.oid[] OPERATOR(pg_catalog.<@) ARRAY(SELECT oid FROM safe_types)) \
       AND p.proname::pg_catalog.text NOT IN (SELECT n FROM user_names WHERE k OPERATOR(pg_catalog.=) 'f') \
     UNION ALL \
     SELECT 'c', p.proname::pg_catalog.text, '' FROM pg_catalog.pg_proc p GROUP BY p.proname \
     UNION ALL \
     SELECT 'o', o.oprname::pg_catalog.text, '' FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) o.oprcode \
       WHERE o.oid OPERATOR(pg_catalog.<) 16384 \
       GROUP BY o.oprname \
       HAVING pg_catalog.bool_and(p.provolatile OPERATOR(pg_catalog.=) 'i' OR (p.provolatile OPERATOR(pg_catalog.=) 's' AND p.proname::pg_catalog.text IN ( \
         'anytextcat', 'textanycat', 'interval_pl_timestamptz', 'timestamptz_pl_interval', 'timestamptz_mi_interval', \
         'date_lt_timestamptz', 'date_le_timestamptz', 'date_eq_timestamptz', 'date_ne_timestamptz', 'date_ge_timestamptz', 'date_gt_timestamptz', \
         'timestamp_lt_timestamptz', 'timestamp_le_timestamptz', 'timestamp_eq_timestamptz', 'timestamp_ne_timestamptz', 'timestamp_ge_timestamptz', 'timestamp_gt_timestamptz', \
         'timestamptz_lt_date', 'timestamptz_le_date', 'timestamptz_eq_date', 'timestamptz_ne_date', 'timestamptz_ge_date', 'timestamptz_gt_date', \
         'timestamptz_lt_timestamp', 'timestamptz_le_timestamp', 'timestamptz_eq_timestamp', 'timestamptz_ne_timestamp', 'timestamptz_ge_timestamp', 'timestamptz_gt_timestamp'))) \
       AND o.oprname::pg_catalog.text NOT IN (SELECT n FROM user_names WHERE k OPERATOR(pg_catalog.=) 'o') \
     UNION ALL \
     SELECT 't', t.typname::pg_catalog.text, '' FROM pg_catalog.pg_type t \
       WHERE t.oid IN (SELECT oid FROM safe_types) AND t.typtype OPERATOR(pg_catalog.<>) 'p' \
       AND t.typname::pg_catalog.text NOT IN (SELECT n FROM user_names WHERE k OPERATOR(pg_catalog.=) 't') \
     UNION ALL \
     SELECT 'r', c.relname::pg_catalog.text, n.nspname::pg_catalog.text || CASE WHEN \
         c.relkind OPERATOR(pg_catalog.=) 'r' AND c.relpersistence OPERATOR(pg_catalog.=) 'p' \
         AND NOT c.relispartition AND NOT c.relhassubclass AND NOT c.relrowsecurity \
         AND EXISTS (SELECT FROM pg_catalog.pg_publication p JOIN pg_catalog.pg_publication_tables pt \
           ON pt.pubname OPERATOR(pg_catalog.=) p.pubname \
           WHERE p.pubname OPERATOR(pg_catalog.=) $PUB AND p.pubinsert AND p.pubupdate AND p.pubdelete AND p.pubtruncate \
           AND pt.schemaname OPERATOR(pg_catalog.=) n.nspname AND pt.tablename OPERATOR(pg_catalog.=) c.relname \
           AND NOT EXISTS (SELECT FROM pg_catalog.pg_publication_rel pr WHERE pr.prpubid OPERATOR(pg_catalog.=) p.oid \
             AND pr.prrelid OPERATOR(pg_catalog.=) c.oid AND pr.prqual IS NOT NULL)) \
         AND n.nspname::pg_catalog.text NOT IN ('pg_catalog', 'information_schema', 'pg_toast') \
         AND NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid \
           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped AND a.atttypid NOT IN (SELECT oid FROM safe_types)) \
         THEN '/1' ELSE '/0' END \
       FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
       WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')";

/// A digest of the catalog rows a change to tables, columns, types, functions, operators,
/// views, policies, privileges or role memberships rewrites, and the WAL position now.
pub const FINGERPRINT: &str = "SELECT pg_catalog.md5(pg_catalog.concat_ws(',', \
     (SELECT pg_catalog.string_agg(oid::pg_catalog.text || ':' || xmin::pg_catalog.text, ',' ORDER BY oid) FROM pg_catalog.pg_class), \
     (SELECT pg_catalog.string_agg(attrelid::pg_catalog.text || '.' || attnum::pg_catalog.text || ':' || xmin::pg_catalog.text, ',' ORDER BY attrelid, attnum) \
        FROM pg_catalog.pg_attribute WHERE attrelid OPERATOR(pg_catalog.>=) 16384), \
     (SELECT pg_catalog.string_agg(oid::pg_catalog.text || ':' || xmin::pg_catalog.text, ',' ORDER BY oid) FROM pg_catalog.pg_proc WHERE oid OPERATOR(pg_catalog.>=) 16384), \
     (SELECT pg_catalog.string_agg(oid::pg_catalog.text || ':' || xmin::pg_catalog.text, ',' ORDER BY oid) FROM pg_catalog.pg_operator WHERE oid OPERATOR(pg_catalog.>=) 16384), \
     (SELECT pg_catalog.string_agg(oid::pg_catalog.text || ':' || xmin::pg_catalog.text, ',' ORDER BY oid) FROM pg_catalog.pg_type WHERE oid OPERATOR(pg_catalog.>=) 16384), \
     (SELECT pg_catalog.string_agg(oid::pg_catalog.text || ':' || xmin::pg_catalog.text, ',' ORDER BY oid) FROM pg_catalog.pg_namespace), \
     (SELECT pg_catalog.string_agg(oid::pg_catalog.text || ':' || xmin::pg_catalog.text, ',' ORDER BY oid) FROM pg_catalog.pg_rewrite), \
     (SELECT pg_catalog.string_agg(oid::pg_catalog.text || ':' || xmin::pg_catalog.text, ',' ORDER BY oid) FROM pg_catalog.pg_policy), \
     (SELECT pg_catalog.string_agg(roleid::pg_catalog.text || ':' || member::pg_catalog.text || ':' || xmin::pg_catalog.text, ',' ORDER BY roleid, member) FROM pg_catalog.pg_auth_members))), \
     pg_catalog.pg_current_wal_lsn()::pg_catalog.text";

/// Reads the names the verdict needs from `server`, for the tables `publication` publishes.
pub async fn read(server: &mut ServerConn, publication: &str) -> Result<Catalog> {
    let mut literal = String::new();
    session::literal(&mut literal, publication);
    let rows = exec::query(server, &NAMES.replace("$PUB", &literal)).await?;
    Ok(build(rows.into_iter().filter_map(|r| {
        let mut r = r.into_iter();
        Some((r.next()??, r.next()??, r.next()?.unwrap_or_default()))
    })))
}

/// The catalog of rows (kind, name, detail) as [`NAMES`] returns them.
pub fn build(rows: impl Iterator<Item = (String, String, String)>) -> Catalog {
    let mut c = Catalog::default();
    let mut all_functions = Vec::new();
    let mut relations: HashMap<String, Vec<(String, bool)>> = HashMap::new();
    for (kind, name, detail) in rows {
        match kind.as_str() {
            "f" => {
                c.functions.insert(name);
            }
            "c" => all_functions.push(name),
            "o" => {
                c.operators.insert(name);
            }
            "t" => {
                c.types.insert(name);
            }
            "r" => {
                let (schema, ok) = match detail.rsplit_once('/') {
                    Some((s, flag)) => (s.to_string(), flag == "1"),
                    None => (detail, false),
                };
                relations.entry(name).or_default().push((schema, ok));
            }
            _ => {}
        }
    }
    c.callable = all_functions
        .into_iter()
        .filter(|f| !c.functions.contains(f))
        .collect();
    for name in relations.keys() {
        c.by_lower
            .entry(name.to_lowercase())
            .or_default()
            .push(name.clone());
    }
    c.relations = relations;
    c
}

/// Parses a `pg_lsn` text (`16/B374D848`).
pub fn lsn(text: &str) -> Option<u64> {
    let (hi, lo) = text.split_once('/')?;
    Some(u64::from_str_radix(hi, 16).ok()? << 32 | u64::from_str_radix(lo, 16).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_a_catalog() {
        let rows = [
            ("f", "lower", ""),
            ("c", "lower", ""),
            ("c", "now", ""),
            ("o", "=", ""),
            ("t", "int4", ""),
            ("r", "t", "public/1"),
            ("r", "t", "odd/schema/0"),
        ];
        let c = build(
            rows.iter()
                .map(|(a, b, d)| (a.to_string(), b.to_string(), d.to_string())),
        );
        assert!(c.functions.contains("lower") && !c.callable.contains("lower"));
        assert!(c.callable.contains("now"));
        assert_eq!(
            c.relations["t"],
            [
                ("public".to_string(), true),
                ("odd/schema".to_string(), false)
            ]
        );
    }

    #[test]
    fn lsns_read_as_postgres_writes_them() {
        assert_eq!(lsn("0/0"), Some(0));
        assert_eq!(lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(lsn("x"), None);
    }
}
