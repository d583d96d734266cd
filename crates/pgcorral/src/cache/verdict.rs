//! Which reads the result cache may keep: one SELECT whose every part is allowed by name and
//! the database's catalog, denied by default. Each node kind allowed is destructured whole (no
//! `..`), so a field a new parser version adds fails to compile rather than go unvisited, and a
//! kind this code does not know is refused.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use pg_query::protobuf::{
    self as pb, a_const, AExprKind, Node, SelectStmt, SetOperation, SqlValueFunctionOp,
    SubLinkType, TypeName,
};
use pg_query::NodeEnum;

/// What the catalog of a database says about names, as [`super::catalog`] reads it.
#[derive(Default, Debug, Clone)]
pub struct Catalog {
    /// Functions of pg_catalog every overload of which is immutable and takes no argument
    /// whose input reads the catalog, and no user function shares the name.
    pub functions: HashSet<String>,
    /// Operators every built-in overload of which is immutable or depends only on settings
    /// (which are part of the key), and no user operator shares the name.
    pub operators: HashSet<String>,
    /// Types of pg_catalog whose input and output are immutable or depend only on settings,
    /// and no user type shares the name.
    pub types: HashSet<String>,
    /// Every function that is not in `functions` (a user's, or a built-in the cache may not
    /// run): a column reference whose last name is one of these may call it.
    pub callable: HashSet<String>,
    /// Every relation by name: its schema, and whether it is a table the cache can follow (a
    /// permanent, plain, published table without row security, partitions or columns of other
    /// types than those above).
    pub relations: HashMap<String, Vec<(String, bool)>>,
    /// The relations' names by their lower-case form (a request's words are matched with it).
    pub by_lower: HashMap<String, Vec<String>>,
}

/// Strings whose presence in a literal may make it read the clock when it becomes a date or
/// time (PostgreSQL's special date/time inputs that depend on when they are read).
const CLOCK_WORDS: [&str; 4] = ["now", "today", "tomorrow", "yesterday"];

/// A quick look that only spares a parse: a text whose first word is not one a SELECT can
/// start with (`SELECT`, `VALUES`, `TABLE`, `(`) is not cacheable. It never decides that a text
/// is: [`judge`] does.
pub fn may_read(text: &[u8]) -> bool {
    let t = text.trim_ascii_start();
    let word = t
        .split(|c| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or_default();
    t.starts_with(b"(")
        || [&b"select"[..], b"values", b"table"]
            .iter()
            .any(|w| word.eq_ignore_ascii_case(w))
}

/// The tables a cacheable `text` reads (by name: each stands for every table of that name), or
/// `None` when it may not be cached.
pub fn judge(text: &str, catalog: &Catalog) -> Option<Vec<Arc<str>>> {
    let parsed = pg_query::parse(text, pg_query::ParserOptions::DEFAULT).ok()?;
    let [stmt] = &parsed.protobuf.stmts[..] else {
        return None;
    };
    let NodeEnum::SelectStmt(s) = stmt.stmt.as_ref()?.node.as_ref()? else {
        return None;
    };
    let mut j = Judge {
        catalog,
        tables: Vec::new(),
    };
    j.select(s).then_some(())?;
    j.tables.sort();
    j.tables.dedup();
    Some(j.tables)
}

struct Judge<'a> {
    catalog: &'a Catalog,
    tables: Vec<Arc<str>>,
}

impl Judge<'_> {
    fn select(&mut self, s: &SelectStmt) -> bool {
        let SelectStmt {
            distinct_clause,
            into_clause,
            target_list,
            from_clause,
            where_clause,
            group_clause,
            group_distinct: _,
            having_clause,
            window_clause,
            values_lists,
            sort_clause,
            limit_offset,
            limit_count,
            limit_option: _,
            locking_clause,
            with_clause,
            op,
            all: _,
            larg,
            rarg,
        } = s;
        if into_clause.is_some()
            || with_clause.is_some()
            || !locking_clause.is_empty()
            || !window_clause.is_empty()
        {
            return false;
        }
        let set_op = *op != SetOperation::SetopNone as i32 && *op != SetOperation::Undefined as i32;
        if set_op {
            return larg.as_deref().is_some_and(|l| self.select(l))
                && rarg.as_deref().is_some_and(|r| self.select(r))
                && self.all(sort_clause)
                && self.opt(limit_offset)
                && self.opt(limit_count);
        }
        self.all(distinct_clause)
            && self.all(target_list)
            && self.all(from_clause)
            && self.opt(where_clause)
            && self.all(group_clause)
            && self.opt(having_clause)
            && self.all(values_lists)
            && self.all(sort_clause)
            && self.opt(limit_offset)
            && self.opt(limit_count)
    }

    fn all(&mut self, nodes: &[Node]) -> bool {
        nodes.iter().all(|n| self.node(n))
    }

    fn opt(&mut self, node: &Option<Box<Node>>) -> bool {
        node.as_deref().is_none_or(|n| self.node(n))
    }

    fn node(&mut self, n: &Node) -> bool {
        let Some(n) = n.node.as_ref() else {
            // An empty node: a missing DISTINCT list's marker.
            return true;
        };
        match n {
            NodeEnum::SelectStmt(s) => self.select(s),
            NodeEnum::List(l) => {
                let pb::List { items } = l;
                self.all(items)
            }
            NodeEnum::String(_) | NodeEnum::AStar(_) | NodeEnum::Integer(_) => true,
            NodeEnum::ResTarget(r) => {
                let pb::ResTarget {
                    name: _,
                    indirection,
                    val,
                    location: _,
                } = &**r;
                indirection.is_empty() && self.opt(val)
            }
            NodeEnum::ColumnRef(c) => {
                let pb::ColumnRef {
                    fields,
                    location: _,
                } = c;
                self.column(fields)
            }
            NodeEnum::AConst(c) => literal(c),
            NodeEnum::AExpr(e) => self.expr(e),
            NodeEnum::BoolExpr(b) => {
                let pb::BoolExpr {
                    xpr,
                    boolop: _,
                    args,
                    location: _,
                } = &**b;
                self.opt(xpr) && self.all(args)
            }
            NodeEnum::NullTest(t) => {
                let pb::NullTest {
                    xpr,
                    arg,
                    nulltesttype: _,
                    argisrow: _,
                    location: _,
                } = &**t;
                self.opt(xpr) && self.opt(arg)
            }
            NodeEnum::BooleanTest(t) => {
                let pb::BooleanTest {
                    xpr,
                    arg,
                    booltesttype: _,
                    location: _,
                } = &**t;
                self.opt(xpr) && self.opt(arg)
            }
            NodeEnum::FuncCall(f) => self.call(f),
            NodeEnum::TypeCast(c) => {
                let pb::TypeCast {
                    arg,
                    type_name,
                    location: _,
                } = &**c;
                type_name.as_ref().is_some_and(|t| self.type_name(t)) && self.opt(arg)
            }
            NodeEnum::RangeVar(r) => self.relation(r),
            NodeEnum::JoinExpr(j) => self.join(j),
            NodeEnum::SortBy(b) => {
                let pb::SortBy {
                    node,
                    sortby_dir: _,
                    sortby_nulls: _,
                    use_op,
                    location: _,
                } = &**b;
                use_op.is_empty() && self.opt(node)
            }
            NodeEnum::CaseExpr(c) => {
                let pb::CaseExpr {
                    xpr,
                    casetype: _,
                    casecollid: _,
                    arg,
                    args,
                    defresult,
                    location: _,
                } = &**c;
                self.opt(xpr) && self.opt(arg) && self.all(args) && self.opt(defresult)
            }
            NodeEnum::CaseWhen(w) => {
                let pb::CaseWhen {
                    xpr,
                    expr,
                    result,
                    location: _,
                } = &**w;
                self.opt(xpr) && self.opt(expr) && self.opt(result)
            }
            NodeEnum::CoalesceExpr(c) => {
                let pb::CoalesceExpr {
                    xpr,
                    coalescetype: _,
                    coalescecollid: _,
                    args,
                    location: _,
                } = &**c;
                self.opt(xpr) && self.all(args)
            }
            NodeEnum::MinMaxExpr(m) => {
                let pb::MinMaxExpr {
                    xpr,
                    minmaxtype: _,
                    minmaxcollid: _,
                    inputcollid: _,
                    op: _,
                    args,
                    location: _,
                } = &**m;
                self.opt(xpr) && self.all(args)
            }
            NodeEnum::SubLink(l) => self.sublink(l),
            NodeEnum::RangeSubselect(r) => {
                let pb::RangeSubselect {
                    lateral,
                    subquery,
                    alias: _,
                } = &**r;
                !lateral && self.opt(subquery)
            }
            NodeEnum::SqlvalueFunction(f) => {
                let pb::SqlValueFunction {
                    xpr,
                    op,
                    r#type: _,
                    typmod: _,
                    location: _,
                } = &**f;
                role_value(*op) && self.opt(xpr)
            }
            _ => false,
        }
    }

    /// A column: `a`, `t.a`, `t.*`. Attribute notation calls a function of that name when no
    /// column has it (`t.f` is `f(t)`), so a last name that names a function the cache may not
    /// run is refused.
    fn column(&mut self, fields: &[Node]) -> bool {
        let last = fields.last().and_then(|n| match n.node.as_ref() {
            Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
            _ => None,
        });
        if fields.len() > 1 && last.is_some_and(|n| self.catalog.callable.contains(n)) {
            return false;
        }
        self.all(fields)
    }

    fn join(&mut self, j: &pb::JoinExpr) -> bool {
        let pb::JoinExpr {
            jointype: _,
            is_natural: _,
            larg,
            rarg,
            using_clause,
            join_using_alias: _,
            quals,
            alias: _,
            rtindex: _,
        } = j;
        self.opt(larg) && self.opt(rarg) && self.all(using_clause) && self.opt(quals)
    }

    fn expr(&mut self, e: &pb::AExpr) -> bool {
        let pb::AExpr {
            kind,
            name,
            lexpr,
            rexpr,
            rexpr_list_start: _,
            rexpr_list_end: _,
            location: _,
        } = e;
        let kind = AExprKind::try_from(*kind).unwrap_or(AExprKind::Undefined);
        let names: &[&str] = match kind {
            AExprKind::AexprBetween
            | AExprKind::AexprNotBetween
            | AExprKind::AexprBetweenSym
            | AExprKind::AexprNotBetweenSym => &[">=", "<="],
            AExprKind::AexprOp
            | AExprKind::AexprOpAny
            | AExprKind::AexprOpAll
            | AExprKind::AexprDistinct
            | AExprKind::AexprNotDistinct
            | AExprKind::AexprNullif
            | AExprKind::AexprIn
            | AExprKind::AexprLike
            | AExprKind::AexprIlike => &[],
            _ => return false,
        };
        let own = if names.is_empty() {
            match operator_name(name) {
                Some(n) => self.catalog.operators.contains(n),
                None => false,
            }
        } else {
            names.iter().all(|n| self.catalog.operators.contains(*n))
        };
        own && self.opt(lexpr) && self.opt(rexpr)
    }

    fn call(&mut self, f: &pb::FuncCall) -> bool {
        let pb::FuncCall {
            funcname,
            args,
            agg_order,
            agg_filter,
            over,
            agg_within_group: _,
            agg_star: _,
            agg_distinct: _,
            func_variadic: _,
            funcformat: _,
            location: _,
        } = f;
        over.is_none()
            && qualified_name(funcname).is_some_and(|n| self.catalog.functions.contains(n))
            && self.all(args)
            && self.all(agg_order)
            && self.opt(agg_filter)
    }

    fn type_name(&mut self, t: &TypeName) -> bool {
        let TypeName {
            names,
            type_oid,
            setof,
            pct_type,
            typmods,
            typemod: _,
            array_bounds,
            location: _,
        } = t;
        *type_oid == 0
            && !setof
            && !pct_type
            && qualified_name(names).is_some_and(|n| self.catalog.types.contains(n))
            && self.all(typmods)
            && self.all(array_bounds)
    }

    fn relation(&mut self, r: &pb::RangeVar) -> bool {
        let pb::RangeVar {
            catalogname,
            schemaname,
            relname,
            inh: _,
            relpersistence,
            alias: _,
            location: _,
        } = r;
        if !catalogname.is_empty() || relpersistence != "p" {
            return false;
        }
        let Some(found) = self.catalog.relations.get(relname) else {
            return false;
        };
        // Every relation the name may stand for (in its schema, or in any when unqualified:
        // the search_path decides) must be a table the cache follows.
        let mut any = false;
        for (schema, ok) in found {
            if schemaname.is_empty() || schema == schemaname {
                if !ok {
                    return false;
                }
                any = true;
            }
        }
        if any {
            self.tables.push(Arc::from(relname.as_str()));
        }
        any
    }

    fn sublink(&mut self, l: &pb::SubLink) -> bool {
        let pb::SubLink {
            xpr,
            sub_link_type,
            sub_link_id: _,
            testexpr,
            oper_name,
            subselect,
            location: _,
        } = l;
        let kind = SubLinkType::try_from(*sub_link_type).unwrap_or(SubLinkType::Undefined);
        let ops_ok = match kind {
            SubLinkType::ExistsSublink | SubLinkType::ExprSublink | SubLinkType::ArraySublink => {
                oper_name.is_empty()
            }
            // `x IN (SELECT ...)` names no operator: it is `=`.
            SubLinkType::AnySublink if oper_name.is_empty() => self.catalog.operators.contains("="),
            SubLinkType::AnySublink | SubLinkType::AllSublink => {
                operator_name(oper_name).is_some_and(|n| self.catalog.operators.contains(n))
            }
            _ => false,
        };
        ops_ok && self.opt(xpr) && self.opt(testexpr) && self.opt(subselect)
    }
}

/// A literal that cannot read the clock (a string that does not hold one of [`CLOCK_WORDS`]).
fn literal(c: &pb::AConst) -> bool {
    let pb::AConst {
        isnull: _,
        location: _,
        val,
    } = c;
    match val {
        Some(a_const::Val::Sval(s)) => {
            let lower = s.sval.to_ascii_lowercase();
            !CLOCK_WORDS.iter().any(|w| lower.contains(w))
        }
        _ => true,
    }
}

/// `CURRENT_USER` and its kin (the role and settings are part of the key); not the clock's.
fn role_value(op: i32) -> bool {
    matches!(
        SqlValueFunctionOp::try_from(op),
        Ok(SqlValueFunctionOp::SvfopCurrentRole
            | SqlValueFunctionOp::SvfopCurrentUser
            | SqlValueFunctionOp::SvfopUser
            | SqlValueFunctionOp::SvfopSessionUser
            | SqlValueFunctionOp::SvfopCurrentCatalog
            | SqlValueFunctionOp::SvfopCurrentSchema)
    )
}

/// The name of `names` (`name` or `pg_catalog.name`); `None` for another schema's.
fn qualified_name(names: &[Node]) -> Option<&str> {
    let parts: Vec<&str> = names
        .iter()
        .map(|n| match n.node.as_ref() {
            Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    match parts[..] {
        [name] => Some(name),
        ["pg_catalog", name] => Some(name),
        _ => None,
    }
}

/// An operator's name (`=` or `OPERATOR(pg_catalog.=)`).
fn operator_name(names: &[Node]) -> Option<&str> {
    qualified_name(names)
}

#[cfg(test)]
mod tests;
