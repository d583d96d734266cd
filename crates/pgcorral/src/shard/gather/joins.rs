//! Which joins a read across shards answers shard by shard: every shard joins its own rows, and
//! the shards' answers together are one server's only when no row needs a partner on another
//! shard. So: at most two tables that are not omnisharded, and two only when they are sharded
//! alike and joined on their whole sharding keys (each row's partners then live on its shard);
//! and an outer join keeps no rows of omnisharded tables alone (every shard would keep them).

use pg_query::protobuf::{AExprKind, BoolExprType, JoinExpr, JoinType, RangeVar};
use pg_query::{Node, NodeEnum, NodeRef};

use super::refusal;
use crate::shard::scatter::schema;
use crate::shard::{Sharding, Table};

/// `Err`: the construct of `from` that pgcorral cannot answer across shards.
pub fn check(sharding: &Sharding, from: &[Node]) -> Result<(), String> {
    let nodes = under(from);
    let spread: Vec<&RangeVar> = nodes
        .iter()
        .filter_map(|n| match n {
            NodeRef::RangeVar(r) if !omni(sharding, r) => Some(*r),
            _ => None,
        })
        .collect();
    for n in &nodes {
        if let NodeRef::JoinExpr(j) = n {
            outer(sharding, j)?;
        }
    }
    match spread[..] {
        [] | [_] => Ok(()),
        [a, b] if colocated(sharding, &nodes, (a, b)) => Ok(()),
        _ => Err(refusal(
            "a join of sharded tables other than of two sharded alike on their whole sharding keys",
        )),
    }
}

/// Every node of `from`.
fn under(from: &[Node]) -> Vec<NodeRef<'_>> {
    from.iter()
        .filter_map(|n| n.node.as_ref())
        .flat_map(|n| n.nodes())
        .map(|(n, _, _, _)| n)
        .collect()
}

fn omni(sharding: &Sharding, r: &RangeVar) -> bool {
    sharding.is_omnisharded(schema(r), &r.relname)
}

/// Whether a join side holds a table that is not omnisharded (whose rows each live on one
/// shard).
fn spread_in(sharding: &Sharding, side: Option<&Node>) -> bool {
    side.is_some_and(|n| {
        under(std::slice::from_ref(n))
            .iter()
            .any(|n| matches!(n, NodeRef::RangeVar(r) if !omni(sharding, r)))
    })
}

/// An outer join must keep rows of a side that holds a sharded table: a side of omnisharded
/// tables alone is whole on every shard, and each would keep its unmatched rows.
fn outer(sharding: &Sharding, j: &JoinExpr) -> Result<(), String> {
    let (left, right) = (
        spread_in(sharding, j.larg.as_deref()),
        spread_in(sharding, j.rarg.as_deref()),
    );
    let kept_whole = match JoinType::try_from(j.jointype) {
        Ok(JoinType::JoinLeft) => !left && right,
        Ok(JoinType::JoinRight) => !right && left,
        Ok(JoinType::JoinFull) => left != right,
        _ => false,
    };
    match kept_whole {
        true => Err(refusal(
            "an outer join that keeps the rows of omnisharded tables against a sharded one",
        )),
        false => Ok(()),
    }
}

/// Whether tables `a` and `b` are sharded alike and a join in `from` joins them directly on
/// their whole sharding keys.
fn colocated(sharding: &Sharding, nodes: &[NodeRef<'_>], (a, b): (&RangeVar, &RangeVar)) -> bool {
    let table = |r: &RangeVar| sharding.table(schema(r), &r.relname);
    let (Some(ta), Some(tb)) = (table(a), table(b)) else {
        return false;
    };
    if ta.types != tb.types || ta.refused.is_some() || tb.refused.is_some() {
        return false;
    }
    nodes.iter().any(|n| match n {
        NodeRef::JoinExpr(j) => joins(j, (a, ta), (b, tb)),
        _ => false,
    })
}

/// Whether join `j` has `a` and `b` as its two sides and equates their key columns, in order.
fn joins(j: &JoinExpr, (a, ta): (&RangeVar, &Table), (b, tb): (&RangeVar, &Table)) -> bool {
    fn side(n: Option<&Node>) -> Option<&RangeVar> {
        match n?.node.as_ref()? {
            NodeEnum::RangeVar(r) => Some(r),
            _ => None,
        }
    }
    let (Some(l), Some(r)) = (side(j.larg.as_deref()), side(j.rarg.as_deref())) else {
        return false;
    };
    if !((l == a && r == b) || (l == b && r == a)) {
        return false;
    }
    let pairs = ta.columns.iter().zip(&tb.columns);
    // NATURAL and USING join on equal column names.
    if j.is_natural || !j.using_clause.is_empty() {
        let named = |c: &String| {
            j.is_natural
                || j.using_clause
                    .iter()
                    .any(|u| matches!(&u.node, Some(NodeEnum::String(s)) if &s.sval == c))
        };
        return pairs.into_iter().all(|(ca, cb)| ca == cb && named(ca));
    }
    let mut equalities = Vec::new();
    if let Some(q) = j.quals.as_deref() {
        conjuncts(q, &mut equalities);
    }
    let (na, nb) = (name(a), name(b));
    let column = |n: &Node| -> Option<(String, String)> {
        let Some(NodeEnum::ColumnRef(c)) = n.node.as_ref() else {
            return None;
        };
        match &c.fields[..] {
            [t, col] => Some((text(t)?, text(col)?)),
            _ => None,
        }
    };
    pairs.into_iter().all(|(ca, cb)| {
        equalities.iter().any(|(l, r)| {
            let (Some(l), Some(r)) = (column(l), column(r)) else {
                return false;
            };
            let want_a = (na.to_string(), ca.clone());
            let want_b = (nb.to_string(), cb.clone());
            (l == want_a && r == want_b) || (l == want_b && r == want_a)
        })
    })
}

/// The name a table goes by in the query: its alias, else its own.
fn name(r: &RangeVar) -> &str {
    r.alias.as_ref().map_or(&r.relname, |a| &a.aliasname)
}

fn text(n: &Node) -> Option<String> {
    match n.node.as_ref()? {
        NodeEnum::String(s) => Some(s.sval.clone()),
        _ => None,
    }
}

/// The `left = right` operands of the conjuncts of `q` (an AND tree).
fn conjuncts<'a>(q: &'a Node, out: &mut Vec<(&'a Node, &'a Node)>) {
    match q.node.as_ref() {
        Some(NodeEnum::BoolExpr(b)) if b.boolop == BoolExprType::AndExpr as i32 => {
            for arg in &b.args {
                conjuncts(arg, out);
            }
        }
        Some(NodeEnum::AExpr(e))
            if e.kind == AExprKind::AexprOp as i32
                && e.name.len() == 1
                && text(&e.name[0]).as_deref() == Some("=") =>
        {
            if let (Some(l), Some(r)) = (e.lexpr.as_deref(), e.rexpr.as_deref()) {
                out.push((l, r));
            }
        }
        _ => {}
    }
}
