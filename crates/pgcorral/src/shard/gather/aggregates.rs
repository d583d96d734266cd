//! The aggregates pgcorral combines across shards: how each one's shard values merge, and the
//! hidden columns (sums and counts of the argument) the shards are asked for to finish avg,
//! variance and standard deviation as one server would.

use pg_query::protobuf::{AExpr, AExprKind, FuncCall, ResTarget, TypeCast, TypeName};
use pg_query::{Node, NodeEnum};

use super::{last_name, refusal};

/// PostgreSQL 15's own aggregate and window function names: known aggregates even when the
/// catalog could not be read (the catalog adds the database's own).
pub(super) const BUILTIN_AGGREGATES: &[&str] = &[
    "array_agg",
    "avg",
    "bit_and",
    "bit_or",
    "bit_xor",
    "bool_and",
    "bool_or",
    "corr",
    "count",
    "covar_pop",
    "covar_samp",
    "cume_dist",
    "dense_rank",
    "every",
    "first_value",
    "json_agg",
    "json_object_agg",
    "jsonb_agg",
    "jsonb_object_agg",
    "lag",
    "last_value",
    "lead",
    "max",
    "min",
    "mode",
    "nth_value",
    "ntile",
    "percent_rank",
    "percentile_cont",
    "percentile_disc",
    "range_agg",
    "range_intersect_agg",
    "rank",
    "regr_avgx",
    "regr_avgy",
    "regr_count",
    "regr_intercept",
    "regr_r2",
    "regr_slope",
    "regr_sxx",
    "regr_sxy",
    "regr_syy",
    "row_number",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "string_agg",
    "sum",
    "var_pop",
    "var_samp",
    "variance",
    "xmlagg",
    "any_value",
    "json_agg_strict",
    "json_objectagg",
    "json_arrayagg",
];

/// How one aggregate column's values from the shards combine. Indexes name columns of the
/// shards' answer (the client's columns first, then the hidden ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// `count(…)`: added.
    Count,
    /// `sum(…)`: added (NULL when every shard's is).
    Sum,
    /// `min(…)`: the least, compared as PostgreSQL compares the type.
    Min,
    /// `max(…)`: the greatest, compared as PostgreSQL compares the type.
    Max,
    /// `bool_and(…)` or `every(…)`: false if any shard's is, NULL when every shard's is.
    BoolAnd,
    /// `bool_or(…)`: true if any shard's is, NULL when every shard's is.
    BoolOr,
    /// `avg(…)`: the merged sum of the argument divided by its merged count.
    Avg { sum: usize, count: usize },
    /// A variance or standard deviation: from the merged count, sum and sum of squares of the
    /// argument.
    Spread {
        stat: Spread,
        count: usize,
        sum: usize,
        squares: usize,
    },
}

/// Which variance or standard deviation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    /// `var_samp`, `variance`.
    VarSamp,
    /// `var_pop`.
    VarPop,
    /// `stddev_samp`, `stddev`.
    StddevSamp,
    /// `stddev_pop`.
    StddevPop,
}

/// The columns the shards are asked for: how each merges, and the hidden ones added to their
/// select list after the client's.
pub(super) struct Columns {
    /// Every column: a group key (`None`) or how it combines.
    pub combines: Vec<Option<Combine>>,
    /// The hidden columns' select-list items.
    pub hidden: Vec<Node>,
    /// A prefix of the hidden columns' names that the query's text does not contain.
    prefix: String,
}

impl Columns {
    /// The `visible` columns of a query with `sql`'s text, all group keys until told otherwise
    /// (hidden names are chosen not to occur in the text).
    pub fn new(sql: &str, visible: usize) -> Columns {
        let lower = sql.to_ascii_lowercase();
        let prefix = (0u32..)
            .map(|n| format!("_pgcorral{n}_"))
            .find(|p| !lower.contains(p.as_str()))
            .unwrap_or_default();
        Columns {
            combines: vec![None; visible],
            hidden: Vec::new(),
            prefix,
        }
    }

    /// Adds `call` as a hidden column merged as `combine`; its index.
    fn hide(&mut self, call: FuncCall, combine: Option<Combine>) -> usize {
        let at = self.combines.len();
        self.combines.push(combine);
        self.hidden.push(Node {
            node: Some(NodeEnum::ResTarget(Box::new(ResTarget {
                name: format!("{}{at}", self.prefix),
                indirection: Vec::new(),
                val: Some(Box::new(Node {
                    node: Some(NodeEnum::FuncCall(Box::new(call))),
                })),
                location: -1,
            }))),
        });
        at
    }

    /// Adds aggregate call `f` as a hidden column (for HAVING), with the hidden columns it needs
    /// itself; its index.
    pub fn hide_aggregate(&mut self, f: &FuncCall) -> Result<usize, String> {
        let at = self.hide(f.clone(), None);
        let combine = self.combine(f)?;
        self.combines[at] = Some(combine);
        Ok(at)
    }

    /// How aggregate call `f` combines across shards, if pgcorral combines it, adding the hidden
    /// columns it needs.
    pub fn combine(&mut self, f: &FuncCall) -> Result<Combine, String> {
        let qualified_elsewhere = f.funcname.len() > 1
            && !matches!(f.funcname[0].node.as_ref(), Some(NodeEnum::String(s)) if s.sval == "pg_catalog");
        let name = last_name(&f.funcname).unwrap_or_default();
        if f.agg_distinct {
            return Err(refusal(&format!("{name}(DISTINCT …)")));
        }
        if !f.agg_order.is_empty() || f.agg_within_group || qualified_elsewhere {
            return Err(refusal(&format!("the aggregate {name}")));
        }
        let spread = match name.as_str() {
            "count" => return Ok(Combine::Count),
            "sum" => return Ok(Combine::Sum),
            "min" => return Ok(Combine::Min),
            "max" => return Ok(Combine::Max),
            "bool_and" | "every" => return Ok(Combine::BoolAnd),
            "bool_or" => return Ok(Combine::BoolOr),
            "avg" => None,
            "variance" | "var_samp" => Some(Spread::VarSamp),
            "var_pop" => Some(Spread::VarPop),
            "stddev" | "stddev_samp" => Some(Spread::StddevSamp),
            "stddev_pop" => Some(Spread::StddevPop),
            other => return Err(refusal(&format!("the aggregate {other}"))),
        };
        let ([arg], false) = (&f.args[..], f.agg_star) else {
            return Err(refusal(&format!("{name} of other than one argument")));
        };
        let sum = self.hide(part(f, "sum", arg.clone()), Some(Combine::Sum));
        let count = self.hide(part(f, "count", arg.clone()), Some(Combine::Count));
        let Some(stat) = spread else {
            return Ok(Combine::Avg { sum, count });
        };
        let squared = Node {
            node: Some(NodeEnum::AExpr(Box::new(AExpr {
                kind: AExprKind::AexprOp as i32,
                name: vec![string("pg_catalog"), string("*")],
                lexpr: Some(Box::new(numeric(arg.clone()))),
                rexpr: Some(Box::new(numeric(arg.clone()))),
                rexpr_list_start: -1,
                rexpr_list_end: -1,
                location: -1,
            }))),
        };
        let squares = self.hide(part(f, "sum", squared), Some(Combine::Sum));
        Ok(Combine::Spread {
            stat,
            count,
            sum,
            squares,
        })
    }
}

/// `pg_catalog.name(arg)` with `f`'s FILTER.
fn part(f: &FuncCall, name: &str, arg: Node) -> FuncCall {
    FuncCall {
        funcname: vec![string("pg_catalog"), string(name)],
        args: vec![arg],
        agg_order: Vec::new(),
        agg_filter: f.agg_filter.clone(),
        over: None,
        agg_within_group: false,
        agg_star: false,
        agg_distinct: false,
        func_variadic: false,
        funcformat: f.funcformat,
        location: -1,
    }
}

/// `arg::pg_catalog.numeric`.
fn numeric(arg: Node) -> Node {
    Node {
        node: Some(NodeEnum::TypeCast(Box::new(TypeCast {
            arg: Some(Box::new(arg)),
            type_name: Some(TypeName {
                names: vec![string("pg_catalog"), string("numeric")],
                typemod: -1,
                location: -1,
                ..Default::default()
            }),
            location: -1,
        }))),
    }
}

fn string(s: &str) -> Node {
    Node {
        node: Some(NodeEnum::String(pg_query::protobuf::String {
            sval: s.into(),
        })),
    }
}
