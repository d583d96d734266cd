//! A read that no one shard answers, planned with PostgreSQL's own parser for every shard:
//! what each shard is sent, and how their answers merge into the one PostgreSQL would give,
//! or the construct that makes pgcorral refuse it (never a partial answer).

mod aggregates;
pub mod count;
pub mod having;
mod joins;
mod nat;
pub mod numeric;

use pg_query::protobuf::{a_const, FuncCall, LimitOption, SelectStmt, SortByDir, SortByNulls};
use pg_query::{Node, NodeEnum, NodeRef};

use super::Sharding;
use aggregates::{Columns, BUILTIN_AGGREGATES};
pub use aggregates::{Combine, Spread};
use having::Cond;

/// Groups (or distinct rows) a read across shards holds at most by default: beyond them it
/// fails with SQLSTATE 54000 rather than answer in part.
pub const MAX_GROUPS: usize = 100_000;

/// How the shards' answers to a read become the client's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gather {
    /// What each shard runs: the client's text, or PostgreSQL's deparse of it rewritten for the
    /// merge (its LIMIT raised by its OFFSET and the OFFSET dropped, or both dropped for groups
    /// and distinct rows; HAVING dropped; hidden columns added after the client's).
    pub text: String,
    /// How the shards' answers merge.
    pub merge: Merge,
    /// Rows the client gets at most (`LIMIT`), after `offset` rows are skipped.
    pub limit: Option<u64>,
    /// Rows skipped after the merge (`OFFSET`).
    pub offset: u64,
    /// `LIMIT $n`: the parameter (from 0) whose value is the limit, known when the client
    /// binds it. Without OFFSET, GROUP BY or DISTINCT the shards get the same `LIMIT $n`;
    /// otherwise an expression of it (see [`shard_bounds`]).
    pub limit_param: Option<usize>,
    /// `OFFSET $n`: the parameter (from 0) whose value is the offset, as `limit_param`.
    pub offset_param: Option<usize>,
    /// Groups or distinct rows held at most ([`MAX_GROUPS`] unless the caller sets it).
    pub max_groups: usize,
}

/// How the shards' rows merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// One shard's rows after another's: the query asks no order.
    Concat,
    /// A k-way merge of the shards' sorted rows, by these keys.
    Sorted(Vec<SortKey>),
    /// The shards' groups merged and combined: a `GROUP BY`, or a select list of aggregates (one
    /// group, one row from each shard).
    Grouped(Box<Grouping>),
    /// `SELECT DISTINCT` without aggregates: the shards' distinct rows deduplicated across
    /// shards, then sorted by these keys (if any ORDER BY); all of them are held.
    Distinct(Vec<SortKey>),
}

/// A grouped read's merge: the shards' groups merged by their key columns and combined in the
/// others, filtered by HAVING, sorted by ORDER BY; all the groups are held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grouping {
    /// Every column of the shards' answer: a group key (`None`) or how its values combine. The
    /// client's columns come first; the rest are hidden (what avg, variance, standard deviation
    /// and HAVING need), never sent to the client.
    pub columns: Vec<Option<Combine>>,
    /// How many of `columns` the client gets.
    pub visible: usize,
    /// HAVING, evaluated on the merged groups (the shards are sent no HAVING).
    pub having: Option<Cond>,
    /// ORDER BY, over the client's columns.
    pub order: Vec<SortKey>,
}

/// One `ORDER BY` item, as the output column it sorts by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    /// The output column.
    pub column: Column,
    /// `DESC`.
    pub desc: bool,
    /// NULLs before the values (`NULLS FIRST`, or PostgreSQL's default for DESC).
    pub nulls_first: bool,
    /// Sorted with an explicit `COLLATE "C"` (or `"POSIX"`): text compares as bytes.
    pub collate_c: bool,
}

/// An output column named by an `ORDER BY` item: found in the answer's RowDescription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Column {
    /// By position (`ORDER BY 2`), from 0.
    At(usize),
    /// By its output name (`ORDER BY total`, or a column the query returns as it is).
    Named(String),
}

/// Plans `sql` (the client's one statement, a read placed on no single shard) for every shard;
/// `Err` names what pgcorral cannot answer right across shards. `escapes`: the client's
/// standard_conforming_strings is off. `aggregates`: the names of the database's aggregate and
/// window functions, as its catalog reported them; empty when the catalog could not be read,
/// and then a call of any function not known as PostgreSQL's own aggregate is refused (it may
/// be the database's own aggregate, whose rows a plain merge would not combine).
pub fn plan(
    sharding: &Sharding,
    sql: &str,
    escapes: bool,
    aggregates: &[String],
) -> Result<Gather, String> {
    let parsed = pg_query::parse(sql, super::plan::parser_options(escapes))
        .map_err(|e| format!("it does not parse: {e}"))?;
    let [stmt] = &parsed.protobuf.stmts[..] else {
        return Err(refusal("several statements in one query"));
    };
    let Some(NodeEnum::SelectStmt(s)) = stmt.stmt.as_ref().and_then(|n| n.node.as_ref()) else {
        return Err(NOT_A_READ.to_string());
    };
    shape(s)?;
    let nodes = parsed.protobuf.nodes();
    for &(node, _, _, _) in &nodes {
        refuse_node(node)?;
    }
    joins::check(sharding, &s.from_clause)?;
    let (limit, offset) = limits(s)?;
    let limit_param = limit.param();
    let offset_param = offset.param();
    let (limit, offset) = (limit.value(), offset.value().unwrap_or(0));
    let aggregate = |f: &FuncCall| {
        f.agg_star
            || f.agg_distinct
            || !f.agg_order.is_empty()
            || f.agg_filter.is_some()
            || f.agg_within_group
            || last_name(&f.funcname).is_some_and(|n| {
                BUILTIN_AGGREGATES.contains(&n.as_str()) || aggregates.contains(&n)
            })
    };
    let unknown = |f: &FuncCall| {
        !last_name(&f.funcname).is_some_and(|n| BUILTIN_AGGREGATES.contains(&n.as_str()))
    };
    if aggregates.is_empty()
        && nodes
            .iter()
            .any(|(n, _, _, _)| matches!(n, NodeRef::FuncCall(f) if unknown(f)))
    {
        return Err(refusal(
            "a function call while the database's aggregates are unknown (its catalog could not be read)",
        ));
    }
    let has_aggregate = nodes.iter().any(|(n, _, _, _)| match n {
        NodeRef::FuncCall(f) => aggregate(f),
        _ => false,
    });
    let grouped = !s.group_clause.is_empty();
    // DISTINCT on a grouped read changes nothing: its rows differ in their GROUP BY columns,
    // all of which it returns.
    let distinct = !s.distinct_clause.is_empty() && !grouped && !has_aggregate;
    let order = || match s.sort_clause.is_empty() {
        true => Ok(Vec::new()),
        false => sort_keys(s),
    };
    let mut columns = Columns::new(sql, s.target_list.len());
    let mut having = false;
    let merge = if grouped || has_aggregate {
        let order = order()?;
        match grouped {
            true => group_columns(s, &aggregate, &mut columns)?,
            false => combines(s, &aggregate, &mut columns)?,
        }
        let cond = match s.having_clause.as_deref() {
            Some(h) => {
                having = true;
                let mut cx = HavingContext {
                    sql,
                    s,
                    columns: &mut columns,
                    aggregate: &aggregate,
                };
                Some(having::plan(h, &mut cx)?)
            }
            None => None,
        };
        Merge::Grouped(Box::new(Grouping {
            visible: s.target_list.len(),
            columns: columns.combines,
            having: cond,
            order,
        }))
    } else if s.having_clause.is_some() {
        return Err(refusal(
            "HAVING without GROUP BY or an aggregate in the select list",
        ));
    } else if distinct {
        Merge::Distinct(order()?)
    } else if s.sort_clause.is_empty() {
        Merge::Concat
    } else {
        Merge::Sorted(sort_keys(s)?)
    };
    // Groups and distinct rows are merged before LIMIT and OFFSET count them: the shards
    // return all of theirs.
    let bounded = limit.is_some() || offset > 0 || limit_param.is_some() || offset_param.is_some();
    let unlimited = (grouped || distinct) && bounded;
    let hidden = columns.hidden;
    let offsets = offset > 0 || offset_param.is_some();
    let text = if offsets || unlimited || having || !hidden.is_empty() {
        if escapes {
            // The rewritten text is PostgreSQL's deparser's, written for standard strings.
            return Err(refusal(
                "a read pgcorral rewrites for the shards (OFFSET; LIMIT with GROUP BY or DISTINCT; HAVING; avg, variance or stddev) with standard_conforming_strings off",
            ));
        }
        let mut rewritten = parsed.protobuf.clone();
        let Some(NodeEnum::SelectStmt(s)) = rewritten.stmts[0]
            .stmt
            .as_mut()
            .and_then(|n| n.node.as_mut())
        else {
            return Err(refusal("a statement other than SELECT"));
        };
        set_bounds(s, unlimited, (limit, offset), (limit_param, offset_param))?;
        s.having_clause = None;
        s.target_list.extend(hidden);
        let text = pg_query::deparse(&rewritten, Default::default())
            .map_err(|e| format!("it could not be rewritten for the shards: {e}"))?;
        // The deparser can write what its parser does not read back (a prefix operator before
        // an alias, the fuzzer found): such a text is refused here, not sent to the shards.
        if let Err(e) = pg_query::parse(&text, pg_query::ParserOptions::DEFAULT) {
            return Err(format!("it could not be rewritten for the shards: {e}"));
        }
        text
    } else {
        sql.to_string()
    };
    Ok(Gather {
        text,
        merge,
        limit,
        offset,
        limit_param,
        offset_param,
        max_groups: MAX_GROUPS,
    })
}

/// What HAVING's planning asks of the query: its aggregates become hidden columns, its column
/// references the GROUP BY columns the select list returns.
struct HavingContext<'a> {
    sql: &'a str,
    s: &'a SelectStmt,
    columns: &'a mut Columns,
    aggregate: &'a dyn Fn(&FuncCall) -> bool,
}

impl having::Context for HavingContext<'_> {
    fn aggregate(&mut self, f: &FuncCall) -> Result<Option<usize>, String> {
        match (self.aggregate)(f) {
            true => self.columns.hide_aggregate(f).map(Some),
            false => Ok(None),
        }
    }

    fn text(&self) -> &str {
        self.sql
    }

    fn column(&self, fields: &[Node]) -> Option<usize> {
        self.s.target_list.iter().enumerate().find_map(|(i, t)| {
            let Some(NodeEnum::ResTarget(r)) = t.node.as_ref() else {
                return None;
            };
            let key = self.columns.combines.get(i) == Some(&None);
            match r.val.as_deref().and_then(|v| v.node.as_ref()) {
                Some(NodeEnum::ColumnRef(c)) if key && c.fields == fields => Some(i),
                _ => None,
            }
        })
    }
}

/// What [`plan`] answers for a statement that is not a SELECT: the caller refuses it in its
/// own words (a write that names no shard).
pub const NOT_A_READ: &str = "not a SELECT";

/// The refusal of a read across shards for `what`.
fn refusal(what: &str) -> String {
    format!("{what} cannot be answered across shards by pgcorral yet: name the shard (SET SHARD, /* shard_id: n */) or give the sharding key")
}

/// The statement's own clauses that pgcorral does not merge.
fn shape(s: &SelectStmt) -> Result<(), String> {
    let refused = [
        (s.larg.is_some(), "UNION, INTERSECT or EXCEPT"),
        (s.with_clause.is_some(), "WITH"),
        (s.into_clause.is_some(), "SELECT INTO"),
        (!s.values_lists.is_empty(), "VALUES"),
        // DISTINCT ON keeps one row of each set the shards would each pick from.
        (
            s.distinct_clause.iter().any(|n| n.node.is_some()),
            "DISTINCT ON",
        ),
        (s.group_distinct, "GROUP BY DISTINCT"),
        (!s.window_clause.is_empty(), "WINDOW"),
        (
            s.limit_option == LimitOption::WithTies as i32,
            "FETCH FIRST … WITH TIES",
        ),
    ];
    match refused.iter().find(|(yes, _)| *yes) {
        Some((_, what)) => Err(refusal(what)),
        None => Ok(()),
    }
}

/// A construct anywhere in the statement that runs differently on a part of the data.
fn refuse_node(node: NodeRef<'_>) -> Result<(), String> {
    match node {
        NodeRef::SubLink(_) | NodeRef::RangeSubselect(_) => Err(refusal("a subquery")),
        NodeRef::FuncCall(f) if f.over.is_some() => Err(refusal("a window function")),
        NodeRef::GroupingSet(_) => Err(refusal("GROUPING SETS")),
        _ => Ok(()),
    }
}

/// A `LIMIT` or `OFFSET`: a constant (`None`: none, NULL or ALL) or the client's parameter.
#[derive(Clone, Copy)]
enum Bound {
    Const(Option<u64>),
    Param(usize),
}

impl Bound {
    fn param(self) -> Option<usize> {
        match self {
            Bound::Param(i) => Some(i),
            Bound::Const(_) => None,
        }
    }

    fn value(self) -> Option<u64> {
        match self {
            Bound::Const(v) => v,
            Bound::Param(_) => None,
        }
    }
}

/// The statement's `LIMIT` and `OFFSET`, each a constant or a parameter.
fn limits(s: &SelectStmt) -> Result<(Bound, Bound), String> {
    let bound = |n: Option<&Node>, what: &str| -> Result<Bound, String> {
        let Some(n) = n else {
            return Ok(Bound::Const(None));
        };
        if let Some(NodeEnum::ParamRef(p)) = n.node.as_ref() {
            if let Some(i) = usize::try_from(p.number)
                .ok()
                .and_then(|i| i.checked_sub(1))
            {
                return Ok(Bound::Param(i));
            }
        }
        match constant(n) {
            Some(v) => Ok(Bound::Const(v)),
            None => Err(refusal(&format!(
                "{what} that is not a constant or a parameter"
            ))),
        }
    };
    Ok((
        bound(s.limit_count.as_deref(), "a LIMIT")?,
        bound(s.limit_offset.as_deref(), "an OFFSET")?,
    ))
}

/// Sets the shards' LIMIT and OFFSET in the rewritten statement `s`: the rows the merge may
/// need (LIMIT raised by OFFSET, or none for groups and distinct rows: `unlimited`), none
/// skipped.
fn set_bounds(
    s: &mut SelectStmt,
    unlimited: bool,
    (limit, offset): (Option<u64>, u64),
    (limit_param, offset_param): (Option<usize>, Option<usize>),
) -> Result<(), String> {
    if limit_param.is_some() || offset_param.is_some() {
        let (count, skip) = shard_bounds(unlimited, (limit, offset), (limit_param, offset_param))?;
        s.limit_count = count;
        s.limit_offset = skip;
    } else {
        s.limit_offset = None;
        s.limit_count = match unlimited {
            true => None,
            false => limit.map(|l| Box::new(integer(l.saturating_add(offset)))),
        };
    }
    s.limit_option = match s.limit_count {
        Some(_) => LimitOption::Count as i32,
        None => LimitOption::Default as i32,
    };
    Ok(())
}

/// The shards' LIMIT and OFFSET expressions (`None`: none).
type ShardBounds = (Option<Box<Node>>, Option<Box<Node>>);

/// The shards' `LIMIT` and `OFFSET` when the client's are parameters (`params`, from 0) and
/// the text is rewritten. Each shard returns the rows the merge may need (LIMIT raised by the
/// OFFSET, none for groups or distinct rows, `unlimited`) and skips none, yet refuses a
/// negative LIMIT or OFFSET as PostgreSQL does, OFFSET first: its OFFSET is `least($o, 0)`,
/// and its LIMIT is the client's when negative. Every parameter stays in the text, beside
/// bigint constants, so that PostgreSQL types it as a LIMIT's or OFFSET's (bigint), and one the
/// client declared of a type a LIMIT refuses fails there too.
fn shard_bounds(
    unlimited: bool,
    (limit, offset): (Option<u64>, u64),
    (limit_param, offset_param): (Option<usize>, Option<usize>),
) -> Result<ShardBounds, String> {
    // Named in pg_catalog: no type or operator of the user's can stand in.
    const ZERO: &str = "0::pg_catalog.int8";
    let skip = offset_param.map(|o| format!("least(${}, {ZERO})", o + 1));
    // What the OFFSET adds to the LIMIT.
    let added = match offset_param {
        Some(o) => format!("greatest(${}, {ZERO})", o + 1),
        None => offset.to_string(),
    };
    let negative = |l: usize| {
        format!(
            "CASE WHEN ${n} OPERATOR(pg_catalog.<) {ZERO} THEN ${n}",
            n = l + 1
        )
    };
    let count = match (unlimited, limit_param, limit) {
        (true, Some(l), _) => Some(format!("{} END", negative(l))),
        (true, None, _) | (false, None, None) => None,
        (false, Some(l), _) => Some(format!(
            "{} ELSE ${} OPERATOR(pg_catalog.+) {added} END",
            negative(l),
            l + 1
        )),
        (false, None, Some(l)) => Some(format!("{l} OPERATOR(pg_catalog.+) {added}")),
    };
    let sql = format!(
        "SELECT 1 LIMIT {} OFFSET {}",
        count.as_deref().unwrap_or("ALL"),
        skip.as_deref().unwrap_or("0")
    );
    let parsed = pg_query::parse(&sql, super::plan::parser_options(false))
        .map_err(|e| format!("its LIMIT could not be rewritten for the shards: {e}"))?;
    let Some(NodeEnum::SelectStmt(s)) = parsed.protobuf.stmts[0]
        .stmt
        .as_ref()
        .and_then(|n| n.node.as_ref())
    else {
        return Err(refusal("a LIMIT pgcorral cannot rewrite"));
    };
    Ok((
        count.and(s.limit_count.clone()),
        skip.and(s.limit_offset.clone()),
    ))
}

/// A non-negative integer constant (`Some(None)`: NULL), else `None`. A negative one is left
/// to the shards, which refuse it as PostgreSQL does.
fn constant(n: &Node) -> Option<Option<u64>> {
    match n.node.as_ref()? {
        NodeEnum::AConst(c) if c.isnull => Some(None),
        NodeEnum::AConst(c) => match c.val.as_ref()? {
            a_const::Val::Ival(i) => u64::try_from(i.ival).ok().map(Some),
            // Beyond int4, or with a fraction: rounded as PostgreSQL's numeric to bigint.
            a_const::Val::Fval(f) => u64::try_from(count::decimal(&f.fval)?).ok().map(Some),
            _ => None,
        },
        _ => None,
    }
}

/// An integer constant node.
fn integer(v: u64) -> Node {
    let val = match i32::try_from(v) {
        Ok(i) => a_const::Val::Ival(pg_query::protobuf::Integer { ival: i }),
        Err(_) => a_const::Val::Fval(pg_query::protobuf::Float {
            fval: v.to_string(),
        }),
    };
    Node {
        node: Some(NodeEnum::AConst(pg_query::protobuf::AConst {
            isnull: false,
            location: -1,
            val: Some(val),
        })),
    }
}

/// The last part of a (possibly qualified) name, in lower case as PostgreSQL folds it (a
/// quoted name keeps its case in the tree already).
fn last_name(names: &[Node]) -> Option<String> {
    match names.last()?.node.as_ref()? {
        NodeEnum::String(s) => Some(s.sval.clone()),
        _ => None,
    }
}

/// Each output column of an aggregate query (one row, no GROUP BY) as an aggregate pgcorral
/// combines: a bare call of one of the aggregates [`Columns::combine`] knows, over all the rows.
fn combines(
    s: &SelectStmt,
    aggregate: &dyn Fn(&FuncCall) -> bool,
    columns: &mut Columns,
) -> Result<(), String> {
    for (i, t) in s.target_list.iter().enumerate() {
        let Some(NodeEnum::ResTarget(r)) = t.node.as_ref() else {
            return Err(refusal("an aggregate query's column"));
        };
        let Some(NodeEnum::FuncCall(f)) = r.val.as_deref().and_then(|v| v.node.as_ref()) else {
            return Err(refusal(
                "a column beside aggregates that is not an aggregate itself",
            ));
        };
        if !aggregate(f) {
            return Err(refusal(
                "a column beside aggregates that is not an aggregate itself",
            ));
        }
        columns.combines[i] = Some(columns.combine(f)?);
    }
    Ok(())
}

/// Each output column of a `GROUP BY` query: a group key (left `None`: a column the GROUP BY
/// names, by position, output name or as the same column) or an aggregate pgcorral combines.
/// Every GROUP BY item must be an output column, else groups the client cannot tell apart could
/// not be merged right.
fn group_columns(
    s: &SelectStmt,
    aggregate: &dyn Fn(&FuncCall) -> bool,
    columns: &mut Columns,
) -> Result<(), String> {
    let mut named = vec![false; s.group_clause.len()];
    for (i, t) in s.target_list.iter().enumerate() {
        let Some(NodeEnum::ResTarget(r)) = t.node.as_ref() else {
            return Err(refusal("a grouped query's column"));
        };
        let val = r.val.as_deref().and_then(|v| v.node.as_ref());
        if let Some(NodeEnum::FuncCall(f)) = val {
            if aggregate(f) {
                columns.combines[i] = Some(columns.combine(f)?);
                continue;
            }
        }
        let mut found = false;
        for (g, item) in s.group_clause.iter().enumerate() {
            let hit = match item.node.as_ref() {
                Some(NodeEnum::AConst(_)) => constant_at(item) == Some(i),
                Some(NodeEnum::ColumnRef(c)) => {
                    matches!(val, Some(NodeEnum::ColumnRef(v)) if v.fields == c.fields)
                        || matches!(&c.fields[..], [one] if matches!(one.node.as_ref(), Some(NodeEnum::String(n)) if !r.name.is_empty() && n.sval == r.name))
                }
                _ => false,
            };
            if hit {
                named[g] = true;
                found = true;
            }
        }
        if !found {
            return Err(refusal(
                "a grouped query's column that is neither a GROUP BY column nor an aggregate",
            ));
        }
    }
    if named.contains(&false) {
        return Err(refusal("GROUP BY a column the query does not return"));
    }
    Ok(())
}

/// The `ORDER BY` items as output columns.
fn sort_keys(s: &SelectStmt) -> Result<Vec<SortKey>, String> {
    let mut keys = Vec::new();
    for item in &s.sort_clause {
        let Some(NodeEnum::SortBy(by)) = item.node.as_ref() else {
            return Err(refusal("an ORDER BY item"));
        };
        let desc = match SortByDir::try_from(by.sortby_dir) {
            Ok(SortByDir::SortbyDesc) => true,
            Ok(SortByDir::SortbyUsing) => return Err(refusal("ORDER BY … USING")),
            _ => false,
        };
        let nulls_first = match SortByNulls::try_from(by.sortby_nulls) {
            Ok(SortByNulls::SortbyNullsFirst) => true,
            Ok(SortByNulls::SortbyNullsLast) => false,
            // PostgreSQL's default: NULLs sort as if larger than any value.
            _ => desc,
        };
        let mut node = by.node.as_deref().and_then(|n| n.node.as_ref());
        let mut collate_c = false;
        if let Some(NodeEnum::CollateClause(c)) = node {
            let name = last_name(&c.collname).unwrap_or_default();
            if name != "C" && name != "POSIX" {
                return Err(refusal(&format!("ORDER BY … COLLATE \"{name}\"")));
            }
            collate_c = true;
            node = c.arg.as_deref().and_then(|n| n.node.as_ref());
        }
        let column = match node {
            Some(NodeEnum::AConst(_)) => match by.node.as_deref().and_then(constant_at) {
                Some(i) => Column::At(i),
                None => return Err(refusal("ORDER BY a constant that is not a column number")),
            },
            Some(NodeEnum::ColumnRef(c)) => match &c.fields[..] {
                [one] => match one.node.as_ref() {
                    Some(NodeEnum::String(s)) => Column::Named(s.sval.clone()),
                    _ => return Err(refusal("ORDER BY *")),
                },
                _ => match same_column_in_targets(s, &c.fields) {
                    Some(i) => Column::At(i),
                    None => {
                        return Err(refusal(
                            "ORDER BY a qualified column the query does not return as it is",
                        ))
                    }
                },
            },
            _ => {
                return Err(refusal(
                    "ORDER BY an expression (name its output column, or its position)",
                ))
            }
        };
        keys.push(SortKey {
            column,
            desc,
            nulls_first,
            collate_c,
        });
    }
    Ok(keys)
}

/// `ORDER BY n` (from 1) as a column index, through a COLLATE if any.
fn constant_at(n: &Node) -> Option<usize> {
    let n = match n.node.as_ref()? {
        NodeEnum::CollateClause(c) => c.arg.as_deref()?,
        _ => n,
    };
    match n.node.as_ref()? {
        NodeEnum::AConst(c) => match c.val.as_ref()? {
            a_const::Val::Ival(i) => usize::try_from(i.ival).ok()?.checked_sub(1),
            _ => None,
        },
        _ => None,
    }
}

/// The one output column that is exactly the column reference `fields` (no alias needed:
/// `SELECT t.a … ORDER BY t.a`), when the select list names its columns (no `*`).
fn same_column_in_targets(s: &SelectStmt, fields: &[Node]) -> Option<usize> {
    let mut found = None;
    for (i, t) in s.target_list.iter().enumerate() {
        let Some(NodeEnum::ResTarget(r)) = t.node.as_ref() else {
            return None;
        };
        match r.val.as_deref().and_then(|v| v.node.as_ref()) {
            Some(NodeEnum::ColumnRef(c)) if c.fields == fields => {
                if found.is_some() {
                    return None;
                }
                found = Some(i);
            }
            Some(NodeEnum::ColumnRef(c))
                if c.fields
                    .iter()
                    .any(|f| matches!(f.node, Some(NodeEnum::AStar(_)))) =>
            {
                return None
            }
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests;
