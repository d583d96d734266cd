//! The shards' RowDescriptions for a read across shards: read, checked alike, cut to the
//! client's columns, and matched against the plan (which columns merge how, by which type).

use bytes::{Buf, BufMut, BytesMut};
use pgwire::backend;
use pgwire::encode;

use crate::shard::gather::{having, Column, Combine, Gather, Merge, SortKey};
use crate::shard::values::{binary, Kind};

/// An ORDER BY key as a column of the answer: its index, kind, DESC, NULLS FIRST, and its type
/// OID when its values come in binary format.
pub(super) type SortAt = (usize, Kind, bool, bool, Option<u32>);

/// One field of a RowDescription: its name and type (OID, modifier, format code).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Field {
    pub name: Vec<u8>,
    pub oid: u32,
    pub typmod: i32,
    pub format: i16,
}

/// The fields of a whole RowDescription message, or `None` when it cannot be read.
pub(super) fn fields(message: &[u8]) -> Option<Vec<Field>> {
    let mut b = message.get(5..)?;
    if b.len() < 2 {
        return None;
    }
    let n = b.get_i16();
    let mut out = Vec::new();
    for _ in 0..n.max(0) {
        let end = b.iter().position(|&c| c == 0)?;
        let name = b[..end].to_vec();
        b = &b[end + 1..];
        if b.len() < 18 {
            return None;
        }
        b.advance(6); // table OID and column number: each shard's own
        let oid = b.get_u32();
        b.advance(2); // type size
        let typmod = b.get_i32();
        let format = b.get_i16();
        out.push(Field {
            name,
            oid,
            typmod,
            format,
        });
    }
    Some(out)
}

/// The fields every shard described alike, or why they differ.
pub(super) fn agreed(descriptions: &[&BytesMut]) -> Result<Vec<Field>, String> {
    let first = fields(descriptions[0]).ok_or("a shard's row description could not be read")?;
    for d in &descriptions[1..] {
        if fields(d).as_ref() != Some(&first) {
            return Err("the shards describe the answer's columns differently (are their tables alike?): pgcorral cannot merge it".into());
        }
    }
    Ok(first)
}

/// A whole RowDescription `message` cut to its first `n` fields (the client's, without the
/// hidden ones), or `None` when it cannot be read.
pub(in crate::link) fn first_fields(message: &[u8], n: usize) -> Option<BytesMut> {
    let body = message.get(7..)?;
    let mut at = 0;
    for _ in 0..n {
        let end = body.get(at..)?.iter().position(|&c| c == 0)?;
        at += end + 1 + 18;
    }
    let kept = body.get(..at)?;
    let mut out = BytesMut::new();
    encode::message(&mut out, backend::ROW_DESCRIPTION, |b| {
        b.put_i16(i16::try_from(n).unwrap_or(i16::MAX));
        b.extend_from_slice(kept);
    });
    Some(out)
}

/// What the merge needs of the answer's columns once the plan fits them.
pub(super) struct Prepared {
    /// The ORDER BY keys, over the client's columns.
    pub order: Vec<SortAt>,
    /// Every column's kind (`None`: not one pgcorral compares).
    pub kinds: Vec<Option<Kind>>,
    /// Every column's type OID when its values come in binary format.
    pub binary: Vec<Option<u32>>,
}

/// The refusal of a read across shards for `what`, with what to do instead.
fn refuse(what: String) -> String {
    format!("{what}; name the shard (SET SHARD, /* shard_id: n */) or give the sharding key")
}

/// The kinds of the sort keys' columns (with their indexes, directions and NULL placement),
/// and of the grouped and distinct columns, checked against what pgcorral can compare and
/// combine as PostgreSQL does. `text_bytewise`: text compares as bytes in the database.
pub(super) fn prepare(
    plan: &Gather,
    fields: &[Field],
    text_bytewise: bool,
) -> Result<Prepared, String> {
    let binary: Vec<Option<u32>> = (fields.iter())
        .map(|f| (f.format != 0).then_some(f.oid))
        .collect();
    let kind = |i: usize, bytewise: bool| -> Result<Kind, String> {
        let f = &fields[i];
        let name = String::from_utf8_lossy(&f.name);
        if f.format != 0 && !binary::supported(f.oid) {
            return Err(format!(
                "column {name} is asked in binary format, and pgcorral reads values of its type (OID {}) in text only: ask for it in text",
                f.oid
            ));
        }
        match Kind::of_oid(f.oid) {
            Some(Kind::Text | Kind::Bpchar) if !bytewise => Err(format!(
                "ORDER BY, GROUP BY, DISTINCT, min or max of text column {name} across shards needs collation \"C\" (the database's, with no column of another collation, or COLLATE \"C\" in the ORDER BY)"
            )),
            Some(k) => Ok(k),
            None => Err(format!(
                "column {name} is of a type (OID {}) pgcorral does not compare across shards",
                f.oid
            )),
        }
    };
    let sort = |keys: &[SortKey], visible: usize| {
        keys.iter()
            .map(|k| {
                let i = match &k.column {
                    Column::At(i) if *i < visible => *i,
                    Column::At(i) => return Err(refuse(format!("ORDER BY {} is not a column of the answer", i + 1))),
                    Column::Named(n) => {
                        let mut found = fields[..visible].iter().enumerate().filter(|(_, f)| f.name == n.as_bytes());
                        match (found.next(), found.next()) {
                            (Some((i, _)), None) => i,
                            _ => return Err(refuse(format!(
                                "ORDER BY {n}: across shards, rows are sorted by the columns the query returns, and {n} is not one of them (or is several)"
                            ))),
                        }
                    }
                };
                let k2 = kind(i, text_bytewise || k.collate_c).map_err(refuse)?;
                Ok((i, k2, k.desc, k.nulls_first, binary[i]))
            })
            .collect::<Result<Vec<_>, String>>()
    };
    let oid_is = |i: usize, oids: &[u32]| fields.get(i).is_some_and(|f| oids.contains(&f.oid));
    let combined = |i: usize, c: &Combine| -> Result<(), String> {
        let k = kind(i, text_bytewise).map_err(refuse)?;
        let type_name = match k {
            Kind::Float => "float4 or float8".to_string(),
            _ => format!("OID {}", fields[i].oid),
        };
        let ok = match c {
            Combine::Count | Combine::Sum => matches!(k, Kind::Int | Kind::Numeric),
            Combine::Min | Combine::Max => true,
            Combine::BoolAnd | Combine::BoolOr => k == Kind::Bool,
            Combine::Avg { sum, count } => {
                if k != Kind::Numeric {
                    return Err(refuse(format!("avg of {type_name} across shards (its rounding would differ from one server's)")));
                }
                oid_is(*sum, &[20, 1700]) && oid_is(*count, &[20])
            }
            Combine::Spread {
                count,
                sum,
                squares,
                ..
            } => {
                if k != Kind::Numeric {
                    return Err(refuse(format!("stddev or variance of {type_name} across shards (its rounding would differ from one server's)")));
                }
                oid_is(*sum, &[20, 1700]) && oid_is(*count, &[20]) && oid_is(*squares, &[1700])
            }
        };
        match ok {
            true => Ok(()),
            false => Err(refuse(format!("an aggregate of type {type_name} across shards (its rounding would differ from one server's, or pgcorral does not combine it)"))),
        }
    };
    let kinds: Vec<Option<Kind>> = fields.iter().map(|f| Kind::of_oid(f.oid)).collect();
    let order = match &plan.merge {
        Merge::Concat => Vec::new(),
        Merge::Sorted(keys) => sort(keys, fields.len())?,
        Merge::Grouped(g) => {
            if g.columns.len() != fields.len() || g.visible > fields.len() {
                return Err(refuse("the grouped columns do not match the answer".into()));
            }
            for (i, c) in g.columns.iter().enumerate() {
                match c {
                    // Groups are told apart by their keys' values, compared as PostgreSQL does.
                    None => {
                        kind(i, text_bytewise).map_err(refuse)?;
                    }
                    Some(c) => combined(i, c)?,
                }
            }
            if let Some(cond) = &g.having {
                let oids: Vec<u32> = fields.iter().map(|f| f.oid).collect();
                having::check(cond, &oids, &kinds, text_bytewise).map_err(refuse)?;
            }
            sort(&g.order, g.visible)?
        }
        Merge::Distinct(keys) => {
            for (i, f) in fields.iter().enumerate() {
                let k = kind(i, text_bytewise).map_err(refuse)?;
                prints_alike(f, k).map_err(refuse)?;
            }
            sort(keys, fields.len())?
        }
    };
    Ok(Prepared {
        order,
        kinds,
        binary,
    })
}

/// Whether values of column `f` that PostgreSQL's DISTINCT takes as one always print alike:
/// else which of them it shows is not fixed, and pgcorral's could differ.
fn prints_alike(f: &Field, kind: Kind) -> Result<(), String> {
    let name = String::from_utf8_lossy(&f.name);
    match kind {
        Kind::Float => Err(format!("DISTINCT on float column {name} across shards (-0 and 0 are one value, and which of them PostgreSQL shows is not fixed)")),
        Kind::Numeric if f.typmod < 0 => Err(format!("DISTINCT on numeric column {name} of no fixed scale across shards (1.0 and 1.00 are one value, and which of them PostgreSQL shows is not fixed)")),
        Kind::Bpchar if f.typmod < 0 => Err(format!("DISTINCT on bpchar column {name} of no fixed length across shards ('a' and 'a ' are one value, and which of them PostgreSQL shows is not fixed)")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn description(columns: &[(&str, u32, i32)]) -> BytesMut {
        let mut out = BytesMut::new();
        encode::message(&mut out, backend::ROW_DESCRIPTION, |b| {
            b.put_i16(columns.len() as i16);
            for (i, (name, oid, typmod)) in columns.iter().enumerate() {
                b.extend_from_slice(name.as_bytes());
                b.put_u8(0);
                b.put_u32(16384);
                b.put_i16(i as i16 + 1);
                b.put_u32(*oid);
                b.put_i16(-1);
                b.put_i32(*typmod);
                b.put_i16(0);
            }
        });
        out
    }

    #[test]
    fn a_description_is_cut_to_the_clients_columns() {
        let all = description(&[("grp", 23, -1), ("avg", 1700, -1), ("_pgcorral0_2", 20, -1)]);
        let cut = first_fields(&all, 2).unwrap();
        assert_eq!(cut, description(&[("grp", 23, -1), ("avg", 1700, -1)]));
        let f = fields(&cut).unwrap();
        assert_eq!((f.len(), f[1].oid), (2, 1700));
        assert_eq!(first_fields(&all, 3).unwrap(), all);
        assert!(first_fields(&all, 4).is_none());
        assert!(first_fields(&all[..10], 1).is_none());
    }
}
