//! Grouped and distinct reads across shards: every shard's groups (or distinct rows) merged by
//! their key columns in batches, at most a cap of them held; aggregates combined, avg, variance
//! and standard deviation finished, HAVING applied, then ORDER BY, OFFSET and LIMIT.

use std::cmp::Ordering;

use bytes::{BufMut, BytesMut};
use pgwire::encode;

use super::describe::SortAt;
use super::{field, next_row, order, unreadable, Next, Rows};
use crate::client_conn::ClientConn;
use crate::error::Result;
use crate::pool::Checkout;
use crate::shard::gather::having::{self, Cond};
use crate::shard::gather::numeric::{self, Unfinished};
use crate::shard::gather::Combine;
use crate::shard::values::{self, binary, Kind};

/// One group: its values, in the shards' columns.
type Group = Vec<Option<Vec<u8>>>;

/// What a grouped merge needs: the plan's columns and HAVING, the answer's kinds, the ORDER BY
/// keys and the cap.
pub(super) struct Plan<'a> {
    /// Every column: a group key (`None`) or how it combines.
    pub columns: &'a [Option<Combine>],
    /// How many columns the client gets (the first ones).
    pub visible: usize,
    pub having: Option<&'a Cond>,
    /// Every column's kind.
    pub kinds: &'a [Option<Kind>],
    /// Every column's type OID when its values come in binary format (read as text for the
    /// merge, written back in binary for the client).
    pub binary: &'a [Option<u32>],
    /// ORDER BY, over the client's columns.
    pub order: &'a [SortAt],
    /// Groups held at most.
    pub cap: usize,
}

/// Merges every shard's groups by their key columns and combines the others; finishes them,
/// applies HAVING, sorts the client's columns by ORDER BY (else they come in key order) and
/// writes them through `rows`. At most `plan.cap` groups are held, and half as many shard rows
/// waiting to be folded in.
pub(super) async fn merge(
    client: &mut ClientConn,
    servers: &mut [&mut Checkout],
    rows: &mut Rows,
    plan: &Plan<'_>,
) -> Result<std::result::Result<(), BytesMut>> {
    let Some(kinds) = plan.kinds.iter().copied().collect::<Option<Vec<Kind>>>() else {
        return Ok(Err(unreadable()));
    };
    let keys: Vec<(usize, Kind)> = (plan.columns.iter().enumerate())
        .filter(|(_, c)| c.is_none())
        .map(|(i, _)| (i, kinds[i]))
        .collect();
    let batch_at = (plan.cap / 2).max(1);
    let mut groups: Vec<Group> = Vec::new();
    let mut batch: Vec<Group> = Vec::new();
    for s in servers.iter_mut() {
        loop {
            let row = match next_row(s).await? {
                Next::Row(r) => r,
                Next::End => break,
                Next::Failed(e) => return Ok(Err(e)),
            };
            let values = (0..plan.columns.len())
                .map(
                    |i| match (field(&row, i)?, plan.binary.get(i).copied().flatten()) {
                        (None, _) => Some(None),
                        (Some(v), None) => Some(Some(v.to_vec())),
                        (Some(v), Some(oid)) => binary::to_text(oid, v).map(Some),
                    },
                )
                .collect::<Option<Vec<_>>>();
            // Keys are read before they are sorted: a sort never meets a value it cannot read.
            let Some(values) = values.filter(|v| readable(v, &keys)) else {
                return Ok(Err(unreadable()));
            };
            batch.push(values);
            if batch.len() >= batch_at {
                let Some(merged) = fold_in(groups, std::mem::take(&mut batch), plan, &keys) else {
                    return Ok(Err(unreadable()));
                };
                groups = merged;
                if groups.len() > plan.cap {
                    return Ok(Err(too_many_groups(plan.cap)));
                }
            }
        }
    }
    let Some(merged) = fold_in(groups, batch, plan, &keys) else {
        return Ok(Err(unreadable()));
    };
    if merged.len() > plan.cap {
        return Ok(Err(too_many_groups(plan.cap)));
    }
    let mut out = Vec::with_capacity(merged.len());
    for mut g in merged {
        if let Err(e) = finish(&mut g, plan.columns) {
            return Ok(Err(e));
        }
        if let Some(cond) = plan.having {
            match having::passes(cond, &g, plan.kinds) {
                Some(true) => {}
                Some(false) => continue,
                None => return Ok(Err(unreadable())),
            }
        }
        g.truncate(plan.visible);
        out.push(data_row(&g));
    }
    if !plan.order.is_empty() {
        let sort_keys: Vec<(usize, Kind)> = plan.order.iter().map(|k| (k.0, k.1)).collect();
        // The groups are in text still: sorted as text.
        let text_order: Vec<SortAt> = plan
            .order
            .iter()
            .map(|k| (k.0, k.1, k.2, k.3, None))
            .collect();
        let all_read = out.iter().all(|r| {
            sort_keys.iter().all(|&(i, kind)| match field(r, i) {
                Some(Some(v)) => values::compare(kind, v, v).is_some(),
                Some(None) => true,
                None => false,
            })
        });
        if !all_read {
            return Ok(Err(unreadable()));
        }
        out.sort_by(|a, b| order(a, b, &text_order).unwrap_or(Ordering::Equal));
    }
    let written = &plan.binary[..plan.visible.min(plan.binary.len())];
    for row in &out {
        if written.iter().any(Option::is_some) {
            let Some(row) = in_binary(row, written) else {
                return Ok(Err(unreadable()));
            };
            rows.push(&row);
        } else {
            rows.push(row);
        }
        rows.flush(client).await?;
    }
    Ok(Ok(()))
}

/// Whether every key value of `values` can be read (so that comparing keys never fails).
fn readable(values: &[Option<Vec<u8>>], keys: &[(usize, Kind)]) -> bool {
    keys.iter().all(|&(i, kind)| match &values[i] {
        Some(v) => values::compare(kind, v, v).is_some(),
        None => true,
    })
}

/// The sorted groups with a batch of shard rows folded in (sorted by key, rows of equal keys
/// combined): `None` when a value cannot be combined.
fn fold_in(
    groups: Vec<Group>,
    mut batch: Vec<Group>,
    plan: &Plan<'_>,
    keys: &[(usize, Kind)],
) -> Option<Vec<Group>> {
    batch.sort_by(|a, b| key_order(a, b, keys));
    let mut out: Vec<Group> = Vec::with_capacity(groups.len() + batch.len());
    let (mut a, mut b) = (groups.into_iter().peekable(), batch.into_iter().peekable());
    loop {
        let first = match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(x), Some(y)) => key_order(x, y, keys) != Ordering::Greater,
        };
        let Some(next) = (if first { a.next() } else { b.next() }) else {
            break;
        };
        match out.last_mut() {
            Some(last) if key_order(last, &next, keys) == Ordering::Equal => {
                fold_row(last, &next, plan)?;
            }
            _ => out.push(next),
        }
    }
    Some(out)
}

/// How two groups' keys compare (NULLs together, after the values; values read already).
fn key_order(a: &[Option<Vec<u8>>], b: &[Option<Vec<u8>>], keys: &[(usize, Kind)]) -> Ordering {
    for &(i, kind) in keys {
        let o = match (&a[i], &b[i]) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(x), Some(y)) => values::compare(kind, x, y).unwrap_or(Ordering::Equal),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// Combines a shard's group `v` into `acc`, column by column.
fn fold_row(acc: &mut Group, v: &Group, plan: &Plan<'_>) -> Option<()> {
    for (i, c) in plan.columns.iter().enumerate() {
        let (Some(c), Some(kind)) = (c, plan.kinds[i]) else {
            continue;
        };
        acc[i] = fold(*c, kind, acc[i].take(), v[i].as_deref())?;
    }
    Some(())
}

/// Combines a shard's value `v` of an aggregate into what the others gave (`acc`); `None` when
/// a value cannot be read. avg, variance and standard deviation are finished later from their
/// hidden columns (each shard's own is dropped).
fn fold(c: Combine, kind: Kind, acc: Option<Vec<u8>>, v: Option<&[u8]>) -> Option<Option<Vec<u8>>> {
    if matches!(c, Combine::Avg { .. } | Combine::Spread { .. }) {
        return Some(None);
    }
    Some(match (acc, v) {
        (a, None) => a,
        (None, Some(v)) => Some(v.to_vec()),
        (Some(a), Some(v)) => Some(match c {
            Combine::Count | Combine::Sum => values::add(kind, &a, v)?,
            Combine::BoolAnd | Combine::BoolOr => {
                let (x, y) = (boolean(&a)?, boolean(v)?);
                let b = match c {
                    Combine::BoolAnd => x && y,
                    _ => x || y,
                };
                (if b { b"t" } else { b"f" }).to_vec()
            }
            _ => {
                let o = values::compare(kind, &a, v)?;
                let keep_a = match c {
                    Combine::Min => o != Ordering::Greater,
                    _ => o != Ordering::Less,
                };
                if keep_a {
                    a
                } else {
                    v.to_vec()
                }
            }
        }),
    })
}

fn boolean(v: &[u8]) -> Option<bool> {
    match v {
        b"t" => Some(true),
        b"f" => Some(false),
        _ => None,
    }
}

/// Finishes avg, variance and standard deviation from their merged hidden columns.
fn finish(g: &mut Group, columns: &[Option<Combine>]) -> std::result::Result<(), BytesMut> {
    for (i, c) in columns.iter().enumerate() {
        let value = match *c {
            Some(Combine::Avg { sum, count }) => {
                let count = g.get(count).cloned().flatten().ok_or_else(unreadable)?;
                numeric::avg(g.get(sum).cloned().flatten().as_deref(), &count)
            }
            Some(Combine::Spread {
                stat,
                count,
                sum,
                squares,
            }) => {
                let part = |at: usize| g.get(at).cloned().flatten();
                let count = part(count).ok_or_else(unreadable)?;
                numeric::spread(stat, &count, part(sum).as_deref(), part(squares).as_deref())
            }
            _ => continue,
        };
        g[i] = match value {
            Ok(v) => v,
            Err(Unfinished::Unreadable) => return Err(unreadable()),
            Err(Unfinished::TooLong) => {
                let mut e = BytesMut::new();
                encode::error_response(
                    &mut e,
                    "ERROR",
                    "0A000",
                    "avg, variance or stddev over numbers of more than 4000 digits cannot be answered across shards by pgcorral: name the shard",
                );
                return Err(e);
            }
        };
    }
    Ok(())
}

/// DataRow body `row` (in text) with the columns of `binary` that have a type OID written in
/// binary format; `None` when a value cannot be.
fn in_binary(row: &[u8], binary: &[Option<u32>]) -> Option<BytesMut> {
    let values = (0..binary.len())
        .map(|i| match (field(row, i)?, binary[i]) {
            (None, _) => Some(None),
            (Some(v), None) => Some(Some(v.to_vec())),
            (Some(v), Some(oid)) => binary::to_binary(oid, v).map(Some),
        })
        .collect::<Option<Vec<_>>>()?;
    Some(data_row(&values))
}

/// A DataRow body of `values`.
fn data_row(values: &[Option<Vec<u8>>]) -> BytesMut {
    let mut body = BytesMut::new();
    body.put_i16(i16::try_from(values.len()).unwrap_or(i16::MAX));
    for v in values {
        match v {
            None => body.put_i32(-1),
            Some(v) => {
                body.put_i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
                body.extend_from_slice(v);
            }
        }
    }
    body
}

/// The error for a grouped or distinct read with more groups than pgcorral holds.
fn too_many_groups(cap: usize) -> BytesMut {
    let mut e = BytesMut::new();
    encode::error_response(
        &mut e,
        "ERROR",
        "54000",
        &format!("a grouped or distinct read across shards has more than {cap} groups or rows, which pgcorral does not hold: name the shard, or narrow the query"),
    );
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(values: &[Option<&str>]) -> Group {
        values
            .iter()
            .map(|v| v.map(|s| s.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn batches_fold_into_sorted_groups() {
        let columns = [
            None,
            Some(Combine::Count),
            Some(Combine::BoolAnd),
            Some(Combine::Max),
        ];
        let kinds = [
            Some(Kind::Int),
            Some(Kind::Int),
            Some(Kind::Bool),
            Some(Kind::Text),
        ];
        let plan = Plan {
            columns: &columns,
            visible: 4,
            having: None,
            kinds: &kinds,
            binary: &[],
            order: &[],
            cap: 10,
        };
        let keys = [(0, Kind::Int)];
        let first = fold_in(
            Vec::new(),
            vec![
                group(&[Some("2"), Some("1"), Some("t"), Some("a")]),
                group(&[None, Some("4"), None, None]),
                group(&[Some("1"), Some("3"), Some("t"), Some("b")]),
            ],
            &plan,
            &keys,
        )
        .unwrap();
        let both = fold_in(
            first,
            vec![
                group(&[Some("2"), Some("5"), Some("f"), Some("c")]),
                group(&[None, Some("1"), Some("t"), None]),
                group(&[Some("2"), Some("1"), None, Some("b")]),
            ],
            &plan,
            &keys,
        )
        .unwrap();
        assert_eq!(
            both,
            vec![
                group(&[Some("1"), Some("3"), Some("t"), Some("b")]),
                group(&[Some("2"), Some("7"), Some("f"), Some("c")]),
                group(&[None, Some("5"), Some("t"), None]),
            ]
        );
        // A bool that is not one is not combined.
        let bad = fold_in(
            both,
            vec![group(&[Some("1"), Some("1"), Some("x"), None])],
            &plan,
            &keys,
        );
        assert_eq!(bad, None);
    }
}
