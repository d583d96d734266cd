//! A write that no one shard takes, planned with PostgreSQL's own parser: whether it may run on
//! every shard it touches in one atomic transaction and what the client is answered, or why
//! pgcorral refuses it (never a write that lands on a part of the shards).

use pg_query::protobuf::RangeVar;
use pg_query::{NodeEnum, NodeRef};

use super::Sharding;

/// A write that runs on several shards, and how their answers become the client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// UPDATE or DELETE of a sharded table's rows: each shard changes its own rows; RETURNING
    /// rows are all shards', the row count their sum.
    Rows,
    /// A write of omnisharded tables (the same on every shard): every shard's copy changes
    /// alike, and the client is answered once (the shards must agree on the row count).
    Copies,
    /// A utility statement (CREATE, ALTER, DROP, TRUNCATE, CREATE INDEX, ...) naming sharded
    /// or omnisharded tables only: it runs on every shard, answered once.
    Ddl,
    /// An UPDATE that assigns sharded table `n`'s key: run where the rows are, each changed
    /// row whose key is now another shard's deleted there and inserted on that shard.
    MovesKey(usize),
}

impl Write {
    /// Whether it goes to every shard even when the database has a default shard (what
    /// PgCat-style configs send keyless requests to): copies and DDL must, or the shards'
    /// tables would differ.
    pub fn every_shard(self) -> bool {
        !matches!(self, Write::Rows)
    }
}

/// The column of the row version's place that [`moving`] adds to what an UPDATE returns.
pub const CTID: &str = "ctid";

/// Whether an UPDATE that assigns a sharding key (`sql`, one statement) can move its rows:
/// `Err` names why not.
pub fn moved(sql: &str) -> Result<(), String> {
    moving(sql).map(drop)
}

/// The UPDATE `sql` rewritten to return each changed row's place and every column (`RETURNING
/// ctid, *`, after the client's own `RETURNING` columns), for pgcorral to move the rows whose
/// key is now another shard's.
pub fn moving(sql: &str) -> Result<String, String> {
    let refused = |what: &str| {
        format!("{what} in an UPDATE that moves rows between shards cannot be run by pgcorral yet: delete the rows and insert them again")
    };
    let mut parsed = pg_query::parse(sql, pg_query::ParserOptions::DEFAULT)
        .map_err(|e| format!("it does not parse: {e}"))?
        .protobuf;
    let [stmt] = &mut parsed.stmts[..] else {
        return Err(refused("several statements"));
    };
    let Some(NodeEnum::UpdateStmt(u)) = stmt.stmt.as_mut().and_then(|n| n.node.as_mut()) else {
        return Err(refused("a statement other than UPDATE"));
    };
    if u.with_clause.is_some() || !u.from_clause.is_empty() {
        return Err(refused("WITH or FROM"));
    }
    let column = |name: Option<&str>| {
        let fields = match name {
            Some(n) => vec![pg_query::Node {
                node: Some(NodeEnum::String(pg_query::protobuf::String {
                    sval: n.into(),
                })),
            }],
            None => vec![pg_query::Node {
                node: Some(NodeEnum::AStar(pg_query::protobuf::AStar {})),
            }],
        };
        pg_query::Node {
            node: Some(NodeEnum::ResTarget(Box::new(
                pg_query::protobuf::ResTarget {
                    val: Some(Box::new(pg_query::Node {
                        node: Some(NodeEnum::ColumnRef(pg_query::protobuf::ColumnRef {
                            fields,
                            location: -1,
                        })),
                    })),
                    location: -1,
                    ..Default::default()
                },
            ))),
        }
    };
    let mut clause = u.returning_clause.take().unwrap_or_default();
    if !clause.options.is_empty() {
        return Err(refused("RETURNING OLD or NEW"));
    }
    clause.exprs.extend([column(Some(CTID)), column(None)]);
    u.returning_clause = Some(clause);
    pg_query::deparse(&parsed, Default::default())
        .map_err(|e| format!("it could not be rewritten: {e}"))
}

/// How many columns the client's own `RETURNING` gives in `sql`, an UPDATE that [`moving`]
/// rewrote (its last two columns, `ctid, *`, are pgcorral's), in a table of `width` columns
/// (`*` and `t.*` are that many): `Ok(None)` when the client asked none; `Err` names what
/// pgcorral cannot count (a composite's fields, `(x).*`).
pub fn returned_columns(sql: &str, width: usize) -> Result<Option<usize>, String> {
    let parsed = pg_query::parse(sql, pg_query::ParserOptions::DEFAULT)
        .map_err(|e| format!("it does not parse: {e}"))?
        .protobuf;
    let clause = parsed
        .stmts
        .first()
        .and_then(|s| s.stmt.as_ref())
        .and_then(|n| match n.node.as_ref() {
            Some(NodeEnum::UpdateStmt(u)) => u.returning_clause.as_ref(),
            _ => None,
        })
        .ok_or("not an UPDATE returning its rows")?;
    let theirs = clause.exprs.len().saturating_sub(2);
    if theirs == 0 {
        return Ok(None);
    }
    let mut n = 0;
    for e in &clause.exprs[..theirs] {
        let Some(NodeEnum::ResTarget(r)) = e.node.as_ref() else {
            return Err("a RETURNING item pgcorral cannot read".into());
        };
        n += match r.val.as_deref().and_then(|v| v.node.as_ref()) {
            Some(NodeEnum::ColumnRef(c))
                if matches!(
                    c.fields.last().and_then(|f| f.node.as_ref()),
                    Some(NodeEnum::AStar(_))
                ) =>
            {
                width
            }
            Some(NodeEnum::AIndirection(i))
                if i.indirection
                    .iter()
                    .any(|x| matches!(x.node, Some(NodeEnum::AStar(_)))) =>
            {
                return Err("RETURNING a composite's fields ((x).*) in an UPDATE that moves rows between shards through the extended protocol cannot be run by pgcorral yet: name the fields".into());
            }
            _ => 1,
        };
    }
    Ok(Some(n))
}

/// Plans `sql`, a request whose one statement is not on one shard: `Ok(None)` when it is not
/// a write this planner places (a read, or a statement naming tables pgcorral does not know);
/// `Err` names why it cannot run across shards.
pub fn plan(sharding: &Sharding, sql: &str, escapes: bool) -> Result<Option<Write>, String> {
    let Ok(parsed) = pg_query::parse(sql, super::plan::parser_options(escapes)) else {
        return Ok(None);
    };
    let [stmt] = &parsed.protobuf.stmts[..] else {
        return Ok(None);
    };
    let Some(node) = stmt.stmt.as_ref().and_then(|n| n.node.as_ref()) else {
        return Ok(None);
    };
    let target = match node {
        NodeEnum::UpdateStmt(u) => u.relation.as_ref(),
        NodeEnum::DeleteStmt(d) => d.relation.as_ref(),
        NodeEnum::InsertStmt(i) => i.relation.as_ref(),
        NodeEnum::SelectStmt(_) | NodeEnum::ExplainStmt(_) | NodeEnum::CopyStmt(_) => {
            return Ok(None)
        }
        other if utility(other) => return ddl(sharding, &parsed.tables()),
        _ => return Ok(None),
    };
    let Some(target) = target else {
        return Ok(None);
    };
    let omni = |r: &RangeVar| sharding.is_omnisharded(schema(r), &r.relname);
    let sharded = |r: &RangeVar| sharding.table(schema(r), &r.relname).is_some();
    // Every table it names other than the one it writes, wherever (FROM, USING, subqueries,
    // WITH), must be the same on every shard: each shard reads only its own part of any other.
    let mut others = 0;
    for (n, _, _, _) in parsed.protobuf.nodes() {
        if let NodeRef::RangeVar(r) = n {
            if !omni(r) {
                others += 1;
            }
        }
    }
    if omni(target) {
        return match others {
            0 => Ok(Some(Write::Copies)),
            _ => Err(refusal(
                "a write of an omnisharded table that reads a table that is not omnisharded",
            )),
        };
    }
    match node {
        NodeEnum::InsertStmt(_) => Ok(None),
        _ if !sharded(target) => Ok(None),
        // The target itself is one of the tables named.
        _ if others > 1 => Err(refusal(
            "an UPDATE or DELETE across shards that reads a sharded table (in FROM, USING, a subquery or WITH)",
        )),
        _ => Ok(Some(Write::Rows)),
    }
}

/// The schema a table reference names, if any.
pub(in crate::shard) fn schema(r: &RangeVar) -> Option<&str> {
    (!r.schemaname.is_empty()).then_some(r.schemaname.as_str())
}

/// A utility statement that changes tables (DDL and the like): not a query, not session or
/// transaction control, not a statement that names no table.
fn utility(node: &NodeEnum) -> bool {
    !matches!(
        node,
        NodeEnum::VariableSetStmt(_)
            | NodeEnum::VariableShowStmt(_)
            | NodeEnum::TransactionStmt(_)
            | NodeEnum::DiscardStmt(_)
            | NodeEnum::DeallocateStmt(_)
            | NodeEnum::PrepareStmt(_)
            | NodeEnum::ExecuteStmt(_)
            | NodeEnum::ListenStmt(_)
            | NodeEnum::UnlistenStmt(_)
            | NodeEnum::NotifyStmt(_)
            | NodeEnum::LockStmt(_)
            | NodeEnum::CallStmt(_)
            | NodeEnum::DoStmt(_)
            | NodeEnum::CreateTableAsStmt(_)
            | NodeEnum::MergeStmt(_)
            | NodeEnum::VacuumStmt(_)
    )
}

/// A utility statement naming `tables`: on every shard when each is sharded or omnisharded.
fn ddl(sharding: &Sharding, tables: &[String]) -> Result<Option<Write>, String> {
    let known = |t: &String| {
        let (s, n) = match t.split_once('.') {
            Some((s, n)) => (Some(s), n),
            None => (None, t.as_str()),
        };
        sharding.table(s, n).is_some() || sharding.is_omnisharded(s, n)
    };
    match tables {
        [] => Ok(None),
        t if t.iter().all(known) => Ok(Some(Write::Ddl)),
        _ if tables.iter().any(known) => Err(refusal(
            "a statement naming both sharded or omnisharded tables and tables pgcorral does not know",
        )),
        _ => Ok(None),
    }
}

fn refusal(what: &str) -> String {
    format!("{what} cannot run across shards: name the shard (SET SHARD, /* shard_id: n */) or give the sharding key")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::key::{Function, KeyType};
    use crate::shard::Table;

    fn sharding() -> Sharding {
        Sharding::new(
            3,
            Function::PgHash,
            vec![
                Table::new("orders", vec!["id".into()], vec![KeyType::Int8]),
                Table::new("items", vec!["order_id".into()], vec![KeyType::Int8]),
            ],
            &["countries".to_string()],
            None,
            vec![KeyType::Int8],
        )
    }

    #[test]
    fn writes_are_placed_by_what_they_name() {
        let s = sharding();
        let p = |sql: &str| plan(&s, sql, false);
        assert_eq!(
            p("UPDATE orders SET v = v + 1 WHERE v > 3"),
            Ok(Some(Write::Rows))
        );
        assert_eq!(p("DELETE FROM orders RETURNING id"), Ok(Some(Write::Rows)));
        assert_eq!(
            p("DELETE FROM orders o USING countries c WHERE o.c = c.code AND c.name = 'x'"),
            Ok(Some(Write::Rows))
        );
        assert_eq!(
            p("INSERT INTO countries VALUES ('fr')"),
            Ok(Some(Write::Copies))
        );
        assert_eq!(
            p("UPDATE countries SET name = upper(name)"),
            Ok(Some(Write::Copies))
        );
        assert_eq!(
            p("ALTER TABLE orders ADD COLUMN note text"),
            Ok(Some(Write::Ddl))
        );
        assert_eq!(p("CREATE INDEX ON orders (v)"), Ok(Some(Write::Ddl)));
        assert_eq!(p("TRUNCATE orders, countries"), Ok(Some(Write::Ddl)));
        assert_eq!(
            p("CREATE TABLE orders (id int8, v int)"),
            Ok(Some(Write::Ddl))
        );
        assert_eq!(p("SELECT * FROM orders"), Ok(None));
        assert_eq!(p("UPDATE other SET v = 1"), Ok(None));
        assert_eq!(p("CREATE TABLE other (id int)"), Ok(None));
        assert_eq!(p("SET x = 1"), Ok(None));
        assert_eq!(
            p("UPDATE orders SET v = 1; UPDATE orders SET v = 2"),
            Ok(None)
        );
        assert_eq!(p("not sql"), Ok(None));
        for refused in [
            "UPDATE orders SET v = (SELECT max(v) FROM orders)",
            "DELETE FROM orders WHERE id IN (SELECT order_id FROM items)",
            "UPDATE orders o SET v = 1 FROM items i WHERE i.order_id = o.id",
            "WITH x AS (SELECT id FROM items) DELETE FROM orders WHERE id IN (SELECT id FROM x)",
            "INSERT INTO countries SELECT code FROM orders",
            "UPDATE countries SET n = (SELECT count(*) FROM orders)",
            "DROP TABLE orders, other",
        ] {
            assert!(p(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn the_clients_returning_columns_are_counted_with_stars_as_the_tables() {
        let counted = |sql: &str| returned_columns(&moving(sql).unwrap(), 3);
        assert_eq!(counted("UPDATE t SET k = 1"), Ok(None));
        assert_eq!(counted("UPDATE t SET k = 1 RETURNING k"), Ok(Some(1)));
        assert_eq!(
            counted("UPDATE t SET k = 1 RETURNING k, *, v + 1"),
            Ok(Some(5))
        );
        assert_eq!(counted("UPDATE t SET k = 1 RETURNING t.*"), Ok(Some(3)));
        assert!(counted("UPDATE t SET k = 1 RETURNING (t).*").is_err());
    }
}
