//! Decides with PostgreSQL's own parser whether SQL text may run on a replica.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};

use parking_lot::Mutex;
use pg_query::protobuf::{
    a_const, ExplainStmt, SelectStmt, TransactionStmt, TransactionStmtKind, WindowDef,
};
use pg_query::{Node, NodeEnum};

use crate::skeleton;

/// Where a query may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Only plain reads: may go to a replica.
    Read,
    /// Starts a transaction that declares itself READ ONLY (BEGIN READ ONLY, START TRANSACTION
    /// READ ONLY, BEGIN ISOLATION LEVEL ... READ ONLY): may go to a replica.
    ReadOnlyBegin,
    /// Anything else (writes, DDL, BEGIN, SET, utility commands, SQL that does not parse): the
    /// primary.
    Write,
}

/// Classifies `sql`, which may hold several statements: `Write` if any of them is not a plain
/// read, else `ReadOnlyBegin` if one of them is a `BEGIN ... READ ONLY`, else `Read`.
/// `writing_functions` are function names (matched case-insensitively on their last part) whose
/// call makes a SELECT a write, such as `nextval`.
pub fn classify(sql: &str, writing_functions: &[String]) -> Class {
    let Ok(parsed) = pg_query::parse(sql, pg_query::ParserOptions::DEFAULT) else {
        return Class::Write;
    };
    let mut class = Class::Read;
    for raw in &parsed.protobuf.stmts {
        match statement(raw.stmt.as_deref(), writing_functions) {
            Class::Write => return Class::Write,
            Class::ReadOnlyBegin => class = Class::ReadOnlyBegin,
            Class::Read => {}
        }
    }
    class
}

fn statement(stmt: Option<&Node>, writing_functions: &[String]) -> Class {
    match stmt.and_then(|n| n.node.as_ref()) {
        Some(NodeEnum::SelectStmt(s)) if plain_select(s, writing_functions) => Class::Read,
        Some(NodeEnum::VariableShowStmt(_)) => Class::Read,
        Some(NodeEnum::TransactionStmt(t)) if begins_read_only(t) => Class::ReadOnlyBegin,
        Some(NodeEnum::ExplainStmt(e))
            if !analyzes(e) && statement(e.query.as_deref(), writing_functions) == Class::Read =>
        {
            Class::Read
        }
        _ => Class::Write,
    }
}

/// BEGIN / START TRANSACTION whose last access mode is READ ONLY.
fn begins_read_only(t: &TransactionStmt) -> bool {
    let starts = matches!(
        t.kind(),
        TransactionStmtKind::TransStmtBegin | TransactionStmtKind::TransStmtStart
    );
    let read_only = t
        .options
        .iter()
        .rev()
        .find_map(|o| match &o.node {
            Some(NodeEnum::DefElem(d)) if d.defname == "transaction_read_only" => Some(d),
            _ => None,
        })
        .and_then(|d| match d.arg.as_deref().and_then(|a| a.node.as_ref()) {
            Some(NodeEnum::AConst(c)) => c.val.as_ref(),
            _ => None,
        })
        .is_some_and(|v| match v {
            a_const::Val::Ival(i) => i.ival != 0,
            a_const::Val::Boolval(b) => b.boolval,
            _ => false,
        });
    starts && read_only
}

/// Any ANALYZE option, whatever its value (conservative).
fn analyzes(e: &ExplainStmt) -> bool {
    e.options
        .iter()
        .any(|o| matches!(&o.node, Some(NodeEnum::DefElem(d)) if d.defname == "analyze"))
}

/// A SELECT (or VALUES, UNION, ...) without locking clause, INTO, data-modifying CTE or call of
/// a writing function anywhere in it.
fn plain_select(s: &SelectStmt, wf: &[String]) -> bool {
    s.locking_clause.is_empty()
        && s.into_clause.is_none()
        && s.with_clause.as_ref().is_none_or(|w| all(&w.ctes, wf))
        && [
            &s.distinct_clause,
            &s.target_list,
            &s.from_clause,
            &s.group_clause,
        ]
        .into_iter()
        .chain([&s.window_clause, &s.values_lists, &s.sort_clause])
        .all(|list| all(list, wf))
        && [
            &s.where_clause,
            &s.having_clause,
            &s.limit_offset,
            &s.limit_count,
        ]
        .into_iter()
        .all(|n| opt(n, wf))
        && [&s.larg, &s.rarg]
            .into_iter()
            .all(|arm| arm.as_deref().is_none_or(|arm| plain_select(arm, wf)))
}

fn all(nodes: &[Node], wf: &[String]) -> bool {
    nodes.iter().all(|n| read_only(n, wf))
}

fn opt(node: &Option<Box<Node>>, wf: &[String]) -> bool {
    node.as_deref().is_none_or(|n| read_only(n, wf))
}

/// Walks the node kinds that can appear inside a SELECT. Unknown kinds count as writes, so that
/// a node this walker does not look into (INSERT in a CTE, SQL/JSON syntax, ...) is never read
/// as harmless.
fn read_only(node: &Node, wf: &[String]) -> bool {
    use NodeEnum as N;
    let Some(node) = &node.node else {
        return true;
    };
    match node {
        N::ColumnRef(_) | N::ParamRef(_) | N::AConst(_) | N::AStar(_) | N::String(_) => true,
        N::Integer(_) | N::Float(_) | N::Boolean(_) | N::BitString(_) => true,
        N::SqlvalueFunction(_) | N::RangeVar(_) | N::TypeName(_) => true,
        N::SelectStmt(s) => plain_select(s, wf),
        N::CommonTableExpr(c) => opt(&c.ctequery, wf),
        N::FuncCall(f) => {
            let writes = match f.funcname.last().and_then(|n| n.node.as_ref()) {
                Some(N::String(name)) => wf.iter().any(|w| {
                    let w = w.rsplit('.').next().unwrap_or(w);
                    w.eq_ignore_ascii_case(&name.sval)
                }),
                _ => true,
            };
            !writes
                && all(&f.args, wf)
                && all(&f.agg_order, wf)
                && opt(&f.agg_filter, wf)
                && f.over.as_deref().is_none_or(|w| window(w, wf))
        }
        N::WindowDef(w) => window(w, wf),
        N::AExpr(e) => opt(&e.lexpr, wf) && opt(&e.rexpr, wf),
        N::BoolExpr(e) => all(&e.args, wf),
        N::NullTest(e) => opt(&e.arg, wf),
        N::BooleanTest(e) => opt(&e.arg, wf),
        N::CoalesceExpr(e) => all(&e.args, wf),
        N::MinMaxExpr(e) => all(&e.args, wf),
        N::RowExpr(e) => all(&e.args, wf),
        N::AArrayExpr(e) => all(&e.elements, wf),
        N::AIndirection(e) => opt(&e.arg, wf) && all(&e.indirection, wf),
        N::AIndices(e) => opt(&e.lidx, wf) && opt(&e.uidx, wf),
        N::TypeCast(e) => opt(&e.arg, wf),
        N::CollateClause(e) => opt(&e.arg, wf),
        N::NamedArgExpr(e) => opt(&e.arg, wf),
        N::CaseExpr(e) => opt(&e.arg, wf) && all(&e.args, wf) && opt(&e.defresult, wf),
        N::CaseWhen(e) => opt(&e.expr, wf) && opt(&e.result, wf),
        N::SubLink(e) => opt(&e.testexpr, wf) && opt(&e.subselect, wf),
        N::GroupingFunc(e) => all(&e.args, wf),
        N::GroupingSet(e) => all(&e.content, wf),
        N::XmlExpr(e) => all(&e.named_args, wf) && all(&e.args, wf),
        N::XmlSerialize(e) => opt(&e.expr, wf),
        N::ResTarget(t) => opt(&t.val, wf) && all(&t.indirection, wf),
        N::SortBy(s) => opt(&s.node, wf),
        N::List(l) => all(&l.items, wf),
        N::RangeSubselect(r) => opt(&r.subquery, wf),
        N::RangeFunction(r) => all(&r.functions, wf),
        N::RangeTableSample(r) => {
            opt(&r.relation, wf) && all(&r.args, wf) && opt(&r.repeatable, wf)
        }
        N::RangeTableFunc(r) => {
            opt(&r.docexpr, wf)
                && opt(&r.rowexpr, wf)
                && all(&r.namespaces, wf)
                && all(&r.columns, wf)
        }
        N::RangeTableFuncCol(c) => opt(&c.colexpr, wf) && opt(&c.coldefexpr, wf),
        N::JoinExpr(j) => opt(&j.larg, wf) && opt(&j.rarg, wf) && opt(&j.quals, wf),
        _ => false,
    }
}

fn window(w: &WindowDef, wf: &[String]) -> bool {
    all(&w.partition_clause, wf)
        && all(&w.order_clause, wf)
        && opt(&w.start_offset, wf)
        && opt(&w.end_offset, wf)
}

/// Reads a cached answer or classifies and caches it; bounded (cleared when it reaches `cap`
/// entries). Thread-safe. The key is a 64-bit hash of the text and the writing functions.
pub struct Cache {
    answers: Mutex<HashMap<u64, Class>>,
    hasher: RandomState,
    cap: usize,
}

impl Default for Cache {
    fn default() -> Self {
        Self::new(10_000)
    }
}

impl Cache {
    /// A cache holding at most `cap` answers.
    pub fn new(cap: usize) -> Self {
        Self {
            answers: Mutex::new(HashMap::new()),
            hasher: RandomState::new(),
            cap,
        }
    }

    /// [`classify`], remembered by the text's skeleton (its constants left out, see
    /// [`crate::skeleton`]) and `functions_key`, a digest of `writing_functions`.
    pub fn classify(&self, sql: &str, writing_functions: &[String], functions_key: u64) -> Class {
        let mut h = self.hasher.build_hasher();
        h.write_u64(functions_key);
        if !skeleton::hash(sql, &mut h) {
            h = self.hasher.build_hasher();
            h.write_u64(functions_key);
            h.write_u8(0xff);
            h.write(sql.as_bytes());
        }
        let key = h.finish();
        if let Some(&class) = self.answers.lock().get(&key) {
            return class;
        }
        let class = classify(sql, writing_functions);
        let mut answers = self.answers.lock();
        if answers.len() >= self.cap {
            answers.clear();
        }
        answers.insert(key, class);
        class
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(sql: &str) -> Class {
        let wf: Vec<String> = ["nextval", "setval", "pg_advisory_lock"]
            .map(String::from)
            .to_vec();
        classify(sql, &wf)
    }

    #[test]
    fn plain_selects_are_reads() {
        assert_eq!(class("SELECT 1"), Class::Read);
        assert_eq!(
            class("SELECT a.x FROM a JOIN b ON a.id = b.id WHERE a.y IN (SELECT y FROM c)"),
            Class::Read
        );
        assert_eq!(
            class("SELECT 1 UNION ALL SELECT 2 EXCEPT SELECT 3"),
            Class::Read
        );
        assert_eq!(class("VALUES (1, 'a'), (2, 'b')"), Class::Read);
        assert_eq!(
            class("WITH t AS (SELECT 1 AS x) SELECT x FROM t"),
            Class::Read
        );
        assert_eq!(class("SELECT $1::int"), Class::Read);
        assert_eq!(class("SELECT lower(x) FROM t"), Class::Read);
        assert_eq!(class("SELECT 1; SELECT 2"), Class::Read);
    }

    #[test]
    fn locking_clauses_are_writes() {
        assert_eq!(class("SELECT * FROM t FOR UPDATE"), Class::Write);
        assert_eq!(class("SELECT * FROM t FOR NO KEY UPDATE"), Class::Write);
        assert_eq!(class("SELECT * FROM t FOR SHARE"), Class::Write);
        assert_eq!(class("SELECT * FROM t FOR KEY SHARE"), Class::Write);
        assert_eq!(
            class("SELECT * FROM (SELECT * FROM t FOR UPDATE) s"),
            Class::Write
        );
        assert_eq!(
            class("SELECT 1 WHERE EXISTS (SELECT 1 FROM t FOR SHARE)"),
            Class::Write
        );
        assert_eq!(
            class("SELECT ARRAY(SELECT x FROM t FOR UPDATE)"),
            Class::Write
        );
    }

    #[test]
    fn select_into_and_modifying_ctes_are_writes() {
        assert_eq!(class("SELECT * INTO new_t FROM t"), Class::Write);
        assert_eq!(
            class("WITH ins AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM ins"),
            Class::Write
        );
        assert_eq!(
            class("SELECT * FROM (WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d) s"),
            Class::Write
        );
    }

    #[test]
    fn writing_functions_are_writes() {
        assert_eq!(class("SELECT nextval('s')"), Class::Write);
        assert_eq!(class("SELECT NEXTVAL('s')"), Class::Write);
        assert_eq!(class("SELECT pg_catalog.setval('s', 1)"), Class::Write);
        assert_eq!(class("SELECT pg_advisory_lock(1)"), Class::Write);
        assert_eq!(class("VALUES (nextval('s'))"), Class::Write);
        assert_eq!(class("SELECT * FROM t LIMIT nextval('s')"), Class::Write);
        assert_eq!(class("SELECT ARRAY[nextval('s')]"), Class::Write);
        assert_eq!(class("SELECT * FROM nextval('s')"), Class::Write);
        assert_eq!(classify("SELECT nextval('s')", &[]), Class::Read);
    }

    #[test]
    fn modifications_and_utilities_are_writes() {
        assert_eq!(class("INSERT INTO t VALUES (1)"), Class::Write);
        assert_eq!(class("UPDATE t SET x = 1"), Class::Write);
        assert_eq!(class("DELETE FROM t"), Class::Write);
        assert_eq!(class("CREATE TABLE t (x int)"), Class::Write);
        assert_eq!(class("COPY t FROM STDIN"), Class::Write);
        assert_eq!(class("SET search_path TO x"), Class::Write);
        assert_eq!(class("SELECT 1; INSERT INTO t VALUES (1)"), Class::Write);
        assert_eq!(class("SHOW search_path"), Class::Read);
    }

    #[test]
    fn transactions() {
        assert_eq!(class("BEGIN"), Class::Write);
        assert_eq!(class("BEGIN READ ONLY"), Class::ReadOnlyBegin);
        assert_eq!(class("BEGIN READ WRITE"), Class::Write);
        assert_eq!(
            class("START TRANSACTION ISOLATION LEVEL SERIALIZABLE READ ONLY"),
            Class::ReadOnlyBegin
        );
        assert_eq!(class("BEGIN READ ONLY; SELECT 1"), Class::ReadOnlyBegin);
        assert_eq!(class("BEGIN READ ONLY; UPDATE t SET x = 1"), Class::Write);
        assert_eq!(class("COMMIT"), Class::Write);
    }

    #[test]
    fn explain() {
        assert_eq!(class("EXPLAIN SELECT * FROM t"), Class::Read);
        assert_eq!(class("EXPLAIN ANALYZE SELECT * FROM t"), Class::Write);
        assert_eq!(class("EXPLAIN (ANALYZE false) SELECT 1"), Class::Write);
        assert_eq!(class("EXPLAIN INSERT INTO t VALUES (1)"), Class::Write);
    }

    #[test]
    fn unparsable_and_empty() {
        assert_eq!(class("SELEC 1 FROM"), Class::Write);
        assert_eq!(class("SELECT 'a\0b'"), Class::Write);
        assert_eq!(class(""), Class::Read);
        assert_eq!(class("  -- nothing\n /* at all */ "), Class::Read);
    }

    #[test]
    fn cache_answers_and_stays_bounded() {
        let cache = Cache::new(2);
        let wf = vec!["nextval".to_string()];
        assert_eq!(cache.classify("SELECT 1", &wf, 1), Class::Read);
        assert_eq!(cache.classify("SELECT 2", &wf, 1), Class::Read);
        assert_eq!(cache.answers.lock().len(), 1, "constants share an entry");
        assert_eq!(cache.classify("SELECT nextval('s')", &wf, 1), Class::Write);
        assert_eq!(cache.classify("SELECT nextval('t')", &wf, 1), Class::Write);
        assert_eq!(cache.classify("SELECT nextval('s')", &[], 2), Class::Read);
        assert!(cache.answers.lock().len() <= 2);
    }
}
