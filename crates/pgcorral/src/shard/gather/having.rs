//! HAVING on merged groups: the bounded subset pgcorral evaluates itself (comparisons between
//! aggregates, GROUP BY columns and constants, AND, OR, NOT, IS [NOT] NULL, IS [NOT] TRUE and
//! its kin), planned from the parse tree and evaluated on each merged group in three-valued
//! logic as PostgreSQL does; anything else is refused by name.

use std::cmp::Ordering;

use pg_query::protobuf::{a_const, BoolExprType, BoolTestType, FuncCall, NullTestType};
use pg_query::{Node, NodeEnum};

use super::refusal;
use crate::shard::values::{self, Kind};

/// How deep a HAVING clause's conditions may nest.
const MAX_DEPTH: usize = 32;

/// A HAVING condition over the merged columns of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cond {
    /// Every one true (FALSE if one is, else NULL if one is).
    And(Vec<Cond>),
    /// One true (else NULL if one is, else FALSE).
    Or(Vec<Cond>),
    /// The opposite (NULL stays NULL).
    Not(Box<Cond>),
    /// `a op b`.
    Compare(Operand, Op, Operand),
    /// `x IS NULL` (`false`) or `x IS NOT NULL` (`true`).
    IsNull(Operand, bool),
    /// `c IS [NOT] TRUE`, `IS [NOT] FALSE`, `IS [NOT] UNKNOWN`: which truth values pass.
    Test(Box<Cond>, Truths),
    /// A boolean column or constant standing as a condition.
    Truth(Operand),
}

/// The truth values a `BooleanTest` accepts: TRUE, FALSE, UNKNOWN (NULL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truths {
    /// TRUE passes.
    pub when_true: bool,
    /// FALSE passes.
    pub when_false: bool,
    /// NULL passes.
    pub when_null: bool,
}

/// A comparison's side: a column of the shards' answer (a group key or a merged aggregate,
/// hidden or not) or a constant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A column of the shards' answer, by index.
    Column(usize),
    /// `NULL`.
    Null,
    /// A number constant, written as a plain decimal (`-12.5`, `1000`).
    Number(String),
    /// A quoted constant, compared as the other side's type reads it.
    Text(String),
    /// `TRUE` or `FALSE`.
    Bool(bool),
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `=`.
    Eq,
    /// `<>` or `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

/// What planning a HAVING clause needs of the query around it.
pub(super) trait Context {
    /// The column holding the merged value of aggregate call `f` (added to the shards' select
    /// list as a hidden column), `Ok(None)` when `f` is not an aggregate.
    fn aggregate(&mut self, f: &FuncCall) -> Result<Option<usize>, String>;
    /// The GROUP BY column the client's select list returns as exactly this column reference.
    fn column(&self, fields: &[Node]) -> Option<usize>;
    /// The query's text (constants are read from it as the shards' PostgreSQL would lex them).
    fn text(&self) -> &str;
}

/// What HAVING may contain, in a refusal's words.
const SUBSET: &str = "HAVING other than comparisons (=, <>, <, <=, >, >=) of aggregates, GROUP BY columns and constants, with AND, OR, NOT and IS [NOT] NULL";

/// The condition of HAVING clause `node`, or a refusal naming what pgcorral does not evaluate.
pub(super) fn plan(node: &Node, cx: &mut dyn Context) -> Result<Cond, String> {
    condition(node, cx, 0)
}

fn condition(node: &Node, cx: &mut dyn Context, depth: usize) -> Result<Cond, String> {
    if depth > MAX_DEPTH {
        return Err(refusal("a HAVING clause nested this deep"));
    }
    let Some(n) = node.node.as_ref() else {
        return Err(refusal(SUBSET));
    };
    Ok(match n {
        NodeEnum::BoolExpr(b) => {
            let args = b
                .args
                .iter()
                .map(|a| condition(a, cx, depth + 1))
                .collect::<Result<Vec<_>, _>>()?;
            match (BoolExprType::try_from(b.boolop), args.len()) {
                (Ok(BoolExprType::AndExpr), _) => Cond::And(args),
                (Ok(BoolExprType::OrExpr), _) => Cond::Or(args),
                (Ok(BoolExprType::NotExpr), 1) => {
                    Cond::Not(Box::new(args.into_iter().next().ok_or(refusal(SUBSET))?))
                }
                _ => return Err(refusal(SUBSET)),
            }
        }
        NodeEnum::AExpr(e) => {
            let op = operator(e).ok_or_else(|| refusal(SUBSET))?;
            let (Some(l), Some(r)) = (e.lexpr.as_deref(), e.rexpr.as_deref()) else {
                return Err(refusal(SUBSET));
            };
            let (l, r) = (operand(l, cx)?, operand(r, cx)?);
            if !matches!(l, Operand::Column(_)) && !matches!(r, Operand::Column(_)) {
                return Err(refusal("a HAVING comparison of two constants"));
            }
            Cond::Compare(l, op, r)
        }
        NodeEnum::NullTest(t) if !t.argisrow => {
            let arg = t.arg.as_deref().ok_or_else(|| refusal(SUBSET))?;
            let not = match NullTestType::try_from(t.nulltesttype) {
                Ok(NullTestType::IsNull) => false,
                Ok(NullTestType::IsNotNull) => true,
                _ => return Err(refusal(SUBSET)),
            };
            Cond::IsNull(operand(arg, cx)?, not)
        }
        NodeEnum::BooleanTest(t) => {
            let arg = t.arg.as_deref().ok_or_else(|| refusal(SUBSET))?;
            let (when_true, when_false, when_null) = match BoolTestType::try_from(t.booltesttype) {
                Ok(BoolTestType::IsTrue) => (true, false, false),
                Ok(BoolTestType::IsNotTrue) => (false, true, true),
                Ok(BoolTestType::IsFalse) => (false, true, false),
                Ok(BoolTestType::IsNotFalse) => (true, false, true),
                Ok(BoolTestType::IsUnknown) => (false, false, true),
                Ok(BoolTestType::IsNotUnknown) => (true, true, false),
                _ => return Err(refusal(SUBSET)),
            };
            let truths = Truths {
                when_true,
                when_false,
                when_null,
            };
            Cond::Test(Box::new(condition(arg, cx, depth + 1)?), truths)
        }
        NodeEnum::FuncCall(_) | NodeEnum::ColumnRef(_) | NodeEnum::AConst(_) => {
            match operand(node, cx)? {
                o @ (Operand::Column(_) | Operand::Null | Operand::Bool(_)) => Cond::Truth(o),
                _ => return Err(refusal("a HAVING condition that is a number or a string")),
            }
        }
        _ => return Err(refusal(SUBSET)),
    })
}

/// A plain comparison operator (`=`, `<>` or `!=`, `<`, `<=`, `>`, `>=`, unqualified or
/// `OPERATOR(pg_catalog.…)`).
fn operator(e: &pg_query::protobuf::AExpr) -> Option<Op> {
    if e.kind != pg_query::protobuf::AExprKind::AexprOp as i32 {
        return None;
    }
    let name = match &e.name[..] {
        [one] => one,
        [schema, one] if is_string(schema, "pg_catalog") => one,
        _ => return None,
    };
    let Some(NodeEnum::String(s)) = name.node.as_ref() else {
        return None;
    };
    Some(match s.sval.as_str() {
        "=" => Op::Eq,
        "<>" | "!=" => Op::Ne,
        "<" => Op::Lt,
        "<=" => Op::Le,
        ">" => Op::Gt,
        ">=" => Op::Ge,
        _ => return None,
    })
}

fn is_string(n: &Node, s: &str) -> bool {
    matches!(n.node.as_ref(), Some(NodeEnum::String(v)) if v.sval == s)
}

fn operand(node: &Node, cx: &mut dyn Context) -> Result<Operand, String> {
    match node.node.as_ref() {
        Some(NodeEnum::FuncCall(f)) => match cx.aggregate(f)? {
            Some(i) => Ok(Operand::Column(i)),
            None => Err(refusal(
                "a function call in HAVING that is not an aggregate",
            )),
        },
        Some(NodeEnum::ColumnRef(c)) => {
            cx.column(&c.fields).map(Operand::Column).ok_or_else(|| {
                refusal("a HAVING column that is not a GROUP BY column the query returns as it is")
            })
        }
        Some(NodeEnum::AConst(c)) if c.isnull => Ok(Operand::Null),
        Some(NodeEnum::AConst(c)) => match c.val.as_ref() {
            Some(a_const::Val::Ival(_) | a_const::Val::Fval(_)) => {
                let written = literal(cx.text(), c.location);
                let value = match c.val.as_ref() {
                    Some(a_const::Val::Ival(i)) => Some(i.ival.to_string()),
                    Some(a_const::Val::Fval(f)) => number(&f.fval),
                    _ => None,
                };
                // PostgreSQL 15 reads no `_` between digits and no 0x, 0o or 0b integers.
                match value.filter(|_| !written.contains(['_', 'x', 'X', 'o', 'O', 'b', 'B'])) {
                    Some(v) => Ok(Operand::Number(v)),
                    None => Err(refusal(&format!("the HAVING constant {written}"))),
                }
            }
            Some(a_const::Val::Boolval(b)) => Ok(Operand::Bool(b.boolval)),
            Some(a_const::Val::Sval(s)) => Ok(Operand::Text(s.sval.clone())),
            _ => Err(refusal("a bit-string constant in HAVING")),
        },
        _ => Err(refusal(SUBSET)),
    }
}

/// The number literal written at byte `at` of `text` (after a minus sign and spaces).
fn literal(text: &str, at: i32) -> &str {
    let rest = usize::try_from(at)
        .ok()
        .and_then(|at| text.get(at..))
        .unwrap_or("");
    let rest = rest.trim_start_matches(|c: char| c == '-' || c.is_ascii_whitespace());
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// A numeric literal (`1.5`, `.5`, `-2`, `1e3`, `12E-2`) as a plain decimal, or `None` for other
/// forms (and exponents beyond ±1000).
fn number(literal: &str) -> Option<String> {
    let (neg, body) = match literal.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, literal),
    };
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => {
            let e = &body[i + 1..];
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 4
            {
                return None;
            }
            (&body[..i], e.parse::<i64>().ok()?)
        }
        None => (body, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(whole) || !all_digits(fraction) || (whole.is_empty() && fraction.is_empty()) {
        return None;
    }
    if exp.abs() > 1000 {
        return None;
    }
    // The digits with the point `point` places from their start.
    let digits = format!("{whole}{fraction}");
    let point = whole.len() as i64 + exp;
    let (int, frac) = if point <= 0 {
        (
            String::new(),
            format!("{}{digits}", "0".repeat((-point) as usize)),
        )
    } else if point as usize >= digits.len() {
        (
            format!("{digits}{}", "0".repeat(point as usize - digits.len())),
            String::new(),
        )
    } else {
        (
            digits[..point as usize].to_string(),
            digits[point as usize..].to_string(),
        )
    };
    let int = int.trim_start_matches('0');
    let int = if int.is_empty() { "0" } else { int };
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    out.push_str(int);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(&frac);
    }
    Some(out)
}

/// Checks that every comparison in `cond` is one pgcorral makes as PostgreSQL would, given the
/// columns' type OIDs (`kinds` from them; `None`: a type pgcorral does not compare). `bytewise`:
/// text compares as bytes in the database.
pub fn check(
    cond: &Cond,
    oids: &[u32],
    kinds: &[Option<Kind>],
    bytewise: bool,
) -> Result<(), String> {
    let kind = |o: &Operand| -> Result<Option<Kind>, String> {
        let Operand::Column(i) = o else {
            return Ok(None);
        };
        let (Some(&oid), Some(&kind)) = (oids.get(*i), kinds.get(*i)) else {
            return Err("a HAVING column is not in the shards' answer".into());
        };
        match kind {
            None => Err(format!("HAVING on a value of type OID {oid}, which pgcorral does not compare across shards")),
            Some(Kind::Float) => Err("HAVING on a float4 or float8 value across shards (its text may not hold the value exactly)".into()),
            // name truncates a constant to 63 bytes before comparing.
            Some(Kind::Text | Kind::Bpchar) if oid == 19 || !bytewise => Err("HAVING on text across shards needs collation \"C\" (the database's, with no column of another collation)".into()),
            Some(k) => Ok(Some(k)),
        }
    };
    match cond {
        Cond::And(cs) | Cond::Or(cs) => cs.iter().try_for_each(|c| check(c, oids, kinds, bytewise)),
        Cond::Not(c) | Cond::Test(c, _) => check(c, oids, kinds, bytewise),
        Cond::IsNull(Operand::Column(i), _) if *i >= oids.len() => {
            Err("a HAVING column is not in the shards' answer".into())
        }
        Cond::IsNull(..) => Ok(()),
        Cond::Truth(o) => match (o, kind(o)?) {
            (Operand::Column(_), Some(Kind::Bool)) | (Operand::Null | Operand::Bool(_), _) => {
                Ok(())
            }
            _ => Err("a HAVING condition that is not of type boolean".into()),
        },
        Cond::Compare(a, _, b) => match (kind(a)?, kind(b)?) {
            (Some(x), Some(y)) if numeric_kind(x) && numeric_kind(y) => Ok(()),
            (Some(x), Some(y)) if x == y && oid_class(a, oids) == oid_class(b, oids) => Ok(()),
            (Some(_), Some(_)) => {
                Err("a HAVING comparison of values of two types pgcorral does not compare".into())
            }
            (Some(k), None) => constant(k, b),
            (None, Some(k)) => constant(k, a),
            (None, None) => Err(refusal("a HAVING comparison of two constants")),
        },
    }
}

fn numeric_kind(k: Kind) -> bool {
    matches!(k, Kind::Int | Kind::Numeric)
}

/// Text and varchar compare alike; other types only with their own.
fn oid_class(o: &Operand, oids: &[u32]) -> Option<u32> {
    let Operand::Column(i) = o else { return None };
    oids.get(*i).map(|&oid| if oid == 1043 { 25 } else { oid })
}

/// Whether constant `c` compares with a value of kind `k` as PostgreSQL would read it.
fn constant(k: Kind, c: &Operand) -> Result<(), String> {
    let ok = match c {
        Operand::Null => true,
        Operand::Number(_) => numeric_kind(k),
        Operand::Bool(_) => k == Kind::Bool,
        // Read as the value's own type: pgcorral reads a constant only in the form the type
        // prints (ISO dates and times, canonical uuids), where it means what PostgreSQL reads.
        Operand::Text(t) => {
            !numeric_kind(k)
                && k != Kind::Bool
                && values::compare(k, t.as_bytes(), t.as_bytes()).is_some()
        }
        Operand::Column(_) => false,
    };
    match ok {
        true => Ok(()),
        false => Err(format!("a HAVING constant ({}) compared with a value of another type, or in a form pgcorral does not read", shown(c))),
    }
}

fn shown(c: &Operand) -> String {
    match c {
        Operand::Number(n) => n.clone(),
        Operand::Text(t) => format!("'{t}'"),
        Operand::Bool(b) => b.to_string(),
        Operand::Null => "NULL".into(),
        Operand::Column(i) => format!("column {}", i + 1),
    }
}

/// Whether a merged group passes `cond` (TRUE; FALSE and NULL do not): `row` holds its values,
/// `kinds` their kinds (checked by [`check`]). `None` when a value cannot be read.
pub fn passes(cond: &Cond, row: &[Option<Vec<u8>>], kinds: &[Option<Kind>]) -> Option<bool> {
    Some(eval(cond, row, kinds)? == Some(true))
}

/// `cond`'s truth value (`None` inside: NULL), or `None` when a value cannot be read.
fn eval(cond: &Cond, row: &[Option<Vec<u8>>], kinds: &[Option<Kind>]) -> Option<Option<bool>> {
    Some(match cond {
        Cond::And(cs) => {
            let mut out = Some(true);
            for c in cs {
                match eval(c, row, kinds)? {
                    Some(false) => return Some(Some(false)),
                    None => out = None,
                    Some(true) => {}
                }
            }
            out
        }
        Cond::Or(cs) => {
            let mut out = Some(false);
            for c in cs {
                match eval(c, row, kinds)? {
                    Some(true) => return Some(Some(true)),
                    None => out = None,
                    Some(false) => {}
                }
            }
            out
        }
        Cond::Not(c) => eval(c, row, kinds)?.map(|b| !b),
        Cond::Test(c, t) => Some(match eval(c, row, kinds)? {
            Some(true) => t.when_true,
            Some(false) => t.when_false,
            None => t.when_null,
        }),
        Cond::IsNull(o, not) => Some(value(o, row)?.is_none() != *not),
        Cond::Truth(o) => value(o, row)?.map(|v| v == b"t"),
        Cond::Compare(a, op, b) => {
            let (Some(x), Some(y)) = (value(a, row)?, value(b, row)?) else {
                return Some(None);
            };
            let kind = match (column_kind(a, kinds), column_kind(b, kinds)) {
                (Some(k1), Some(k2)) if k1 != k2 => Kind::Numeric,
                (Some(k), _) | (_, Some(k)) => k,
                (None, None) => return None,
            };
            // Numbers (integers among them) compare as numeric: exactly.
            let kind = if numeric_kind(kind) {
                Kind::Numeric
            } else {
                kind
            };
            let o = values::compare(kind, x, y)?;
            Some(match op {
                Op::Eq => o == Ordering::Equal,
                Op::Ne => o != Ordering::Equal,
                Op::Lt => o == Ordering::Less,
                Op::Le => o != Ordering::Greater,
                Op::Gt => o == Ordering::Greater,
                Op::Ge => o != Ordering::Less,
            })
        }
    })
}

fn column_kind(o: &Operand, kinds: &[Option<Kind>]) -> Option<Kind> {
    match o {
        Operand::Column(i) => kinds.get(*i).copied().flatten(),
        _ => None,
    }
}

/// An operand's value: `Some(None)` for NULL, `None` when the column is not in the row.
fn value<'a>(o: &'a Operand, row: &'a [Option<Vec<u8>>]) -> Option<Option<&'a [u8]>> {
    Some(match o {
        Operand::Column(i) => row.get(*i)?.as_deref(),
        Operand::Null => None,
        Operand::Number(n) => Some(n.as_bytes()),
        Operand::Text(t) => Some(t.as_bytes()),
        Operand::Bool(true) => Some(b"t"),
        Operand::Bool(false) => Some(b"f"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_literals_become_plain_decimals() {
        for (literal, want) in [
            ("1.5", Some("1.5")),
            (".5", Some("0.5")),
            ("-2", Some("-2")),
            ("1e3", Some("1000")),
            ("12E-2", Some("0.12")),
            ("1.25e1", Some("12.5")),
            ("-0.5e-2", Some("-0.005")),
            ("007", Some("7")),
            ("5.", Some("5")),
            ("99999999999999999999", Some("99999999999999999999")),
            ("1_000", None),
            ("0x1F", None),
            ("1e", None),
            ("1e10000", None),
            ("", None),
            (".", None),
        ] {
            assert_eq!(number(literal).as_deref(), want, "{literal}");
        }
    }

    fn row(values: &[Option<&str>]) -> Vec<Option<Vec<u8>>> {
        values
            .iter()
            .map(|v| v.map(|s| s.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn conditions_follow_three_valued_logic() {
        let kinds = [
            Some(Kind::Int),
            Some(Kind::Numeric),
            Some(Kind::Bool),
            Some(Kind::Text),
        ];
        let c = |i| Operand::Column(i);
        let gt = |a, n: &str| Cond::Compare(a, Op::Gt, Operand::Number(n.into()));
        let r = row(&[Some("5"), None, Some("t"), Some("apple")]);
        let cases = [
            (gt(c(0), "4.5"), Some(true)),
            (gt(c(0), "5"), Some(false)),
            (gt(c(1), "0"), None),
            (Cond::Not(Box::new(gt(c(1), "0"))), None),
            (Cond::Or(vec![gt(c(1), "0"), gt(c(0), "1")]), Some(true)),
            (Cond::And(vec![gt(c(1), "0"), gt(c(0), "9")]), Some(false)),
            (Cond::And(vec![gt(c(1), "0"), gt(c(0), "1")]), None),
            (Cond::IsNull(c(1), false), Some(true)),
            (Cond::IsNull(c(0), true), Some(true)),
            (Cond::Truth(c(2)), Some(true)),
            (
                Cond::Compare(c(3), Op::Lt, Operand::Text("banana".into())),
                Some(true),
            ),
            (
                Cond::Compare(Operand::Number("6".into()), Op::Gt, c(0)),
                Some(true),
            ),
            (Cond::Compare(c(0), Op::Eq, Operand::Null), None),
        ];
        for (cond, want) in cases {
            assert_eq!(eval(&cond, &r, &kinds), Some(want), "{cond:?}");
        }
        let unknown = Truths {
            when_true: false,
            when_false: false,
            when_null: true,
        };
        assert_eq!(
            passes(&Cond::Test(Box::new(gt(c(1), "0")), unknown), &r, &kinds),
            Some(true)
        );
        // An unreadable value is not taken for any truth value.
        let bad = row(&[Some("x")]);
        assert_eq!(passes(&gt(c(0), "1"), &bad, &kinds), None);
    }

    #[test]
    fn comparisons_are_checked_against_the_columns_types() {
        let oids = [20, 1700, 16, 25, 701, 1082, 19, 1042, 1043];
        let kinds = oids.map(Kind::of_oid);
        let c = |i| Operand::Column(i);
        let num = |n: &str| Operand::Number(n.into());
        let text = |t: &str| Operand::Text(t.into());
        let ok = [
            Cond::Compare(c(0), Op::Gt, num("1.5")),
            Cond::Compare(c(0), Op::Lt, c(1)),
            Cond::Compare(c(5), Op::Ge, text("2024-01-05")),
            Cond::Compare(c(3), Op::Eq, c(8)),
            Cond::Compare(c(7), Op::Eq, text("ab")),
            Cond::Truth(c(2)),
            Cond::IsNull(c(4), true),
        ];
        for cond in ok {
            assert_eq!(check(&cond, &oids, &kinds, true), Ok(()), "{cond:?}");
        }
        let refused = [
            Cond::Compare(c(4), Op::Gt, num("1")),
            Cond::Compare(c(0), Op::Gt, text("1")),
            Cond::Compare(c(5), Op::Gt, text("Jan 5 2024")),
            Cond::Compare(c(3), Op::Eq, c(7)),
            Cond::Compare(c(6), Op::Eq, text("x")),
            Cond::Compare(c(2), Op::Eq, num("1")),
            Cond::Truth(c(0)),
        ];
        for cond in refused {
            assert!(check(&cond, &oids, &kinds, true).is_err(), "{cond:?}");
        }
        let text_cond = Cond::Compare(c(3), Op::Eq, text("x"));
        assert!(check(&text_cond, &oids, &kinds, false).is_err());
    }
}
