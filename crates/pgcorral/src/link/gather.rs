//! A read across shards: the client's request sent to a server of each shard at once, their
//! answers merged as [`crate::shard::gather`] planned (one after another, a k-way merge, or
//! groups and aggregates combined and filtered by HAVING, or distinct rows deduplicated) into
//! the one answer PostgreSQL would give, hidden columns left out, in bounded memory.

pub(super) mod describe;
pub(super) mod extended;
mod grouped;

use std::borrow::Cow;
use std::cmp::Ordering;

use bytes::{Buf, BytesMut};
use pgwire::backend::{self, TxStatus};
use pgwire::encode;

use super::fanout::{answer_error, read_server, send, whole, Aimed};
use super::{spanning, Attach, Link};
use crate::client_conn::ClientConn;
use crate::error::Result;
use crate::pool::Checkout;
use crate::prepared::Registry;
use crate::route::Gathered;
use crate::shard::gather::{Gather, Merge};
use crate::shard::values;
use describe::{agreed, first_fields, prepare, SortAt};

/// Bytes of rows kept before they are written to the client.
const FLUSH_AT: usize = 64 << 10;

/// What a shard answered first: its rows' description, or the end of its answer.
pub(in crate::link) enum Head {
    Rows(BytesMut),
    /// An error (the whole ErrorResponse).
    Failed(BytesMut),
    /// A CommandComplete without rows, or an empty query.
    Done,
}

/// Answers the client's request (a Query, or an extended-protocol request binding one
/// statement: [`extended`]) from a server (`g.want`) of each of `g.shards`, merged as `g.plan`
/// says, outside a transaction.
pub async fn gather(
    client: &mut ClientConn,
    at: &Attach<'_>,
    g: &Gathered,
    registry: &Registry,
) -> Result<()> {
    let asked = match Asked::take(client, g, registry) {
        Ok(a) => a,
        Err((code, msg)) => return answer_error(client, code, &msg).await,
    };
    let mut owned = Vec::with_capacity(g.shards.len());
    for &shard in &g.shards {
        owned.push(at.checkout(shard, g.want, false).await?);
    }
    let mut servers: Vec<&mut Checkout> = owned.iter_mut().collect();
    let aimed = Aimed::at(at.slot, &servers);
    let (mut out, _) = ask(client, (&mut servers, at), &asked, g, registry).await?;
    drop(aimed);
    encode::ready_for_query(&mut out, TxStatus::Idle);
    client.reply(&out).await
}

/// [`gather`] inside the client's transaction, now on `shard` in `link`: it spreads to each
/// shard the read asks (`begin` run there first), and an error fails the transaction.
/// Returns the shard the transaction is on after it.
pub async fn in_transaction(
    client: &mut ClientConn,
    at: &Attach<'_>,
    (g, registry): (&Gathered, &Registry),
    shard: usize,
    (link, begin): (&mut Link, &str),
) -> Result<usize> {
    let asked = match Asked::take(client, g, registry) {
        Ok(a) => a,
        Err((code, msg)) => {
            spanning::refuse(client, link, code, &msg).await?;
            return Ok(shard);
        }
    };
    let spanning = spanning::join(link, at, shard, (&g.shards, begin)).await?;
    let mut servers = spanning.servers(&g.shards);
    let aimed = Aimed::at(at.slot, &servers);
    let (out, failed) = ask(client, (&mut servers, at), &asked, g, registry).await?;
    drop(aimed);
    drop(servers);
    spanning.answer(client, at.slot, out, (failed, true)).await
}

/// What the shards are asked: the planned text as a Query, or the client's extended-protocol
/// request rewritten for them.
enum Asked {
    Query(BytesMut),
    Extended(Box<extended::Request>),
}

impl Asked {
    /// Takes the client's request (`g.len` bytes at the front of its buffer) out; `Err`: why
    /// pgcorral refuses it.
    fn take(
        client: &mut ClientConn,
        g: &Gathered,
        registry: &Registry,
    ) -> std::result::Result<Asked, extended::Refused> {
        if g.extended {
            let bytes = client.buf.split_to(g.len);
            let planned = extended::Rewritten::of(&g.plan);
            return extended::Request::read(client, (&bytes, registry), &planned)
                .map(|r| Asked::Extended(Box::new(r)));
        }
        client.buf.advance(g.len);
        // A simple Query drops the unnamed statement, as PostgreSQL's does.
        client.statements.drop_unnamed();
        let mut query = BytesMut::new();
        encode::query(&mut query, &g.plan.text);
        Ok(Asked::Query(query))
    }
}

/// Sends each server what it is asked, reads the shards' answers and merges them: the
/// client's answer not yet written (without its ReadyForQuery), and whether it ended in an
/// error.
async fn ask(
    client: &mut ClientConn,
    (servers, at): (&mut [&mut Checkout], &Attach<'_>),
    asked: &Asked,
    g: &Gathered,
    registry: &Registry,
) -> Result<(BytesMut, bool)> {
    let plan = (&g.plan, g.text_bytewise);
    let mut out = BytesMut::new();
    match asked {
        Asked::Query(query) => {
            for s in servers.iter_mut() {
                send(s, query).await?;
            }
            let mut heads = Vec::with_capacity(servers.len());
            for (i, s) in servers.iter_mut().enumerate() {
                heads.push(head(s, (i == 0).then_some(&mut out)).await?);
            }
            let opening = |out: &mut BytesMut, described: Option<&[u8]>| {
                out.extend_from_slice(described.unwrap_or_default())
            };
            let mut answer = Answer {
                out,
                opening: &opening,
                max_rows: 0,
                limit: None,
                offset: None,
            };
            merge(client, servers, heads, &mut answer, plan).await
        }
        Asked::Extended(request) => {
            let asked = (request.as_ref(), at.max_prepared);
            let (heads, opened, failed) =
                extended::open_all(client, registry, servers, asked, &mut out).await?;
            // The answers to the client's Parse, Bind and Describes.
            let reached = &opened[failed.unwrap_or(0)];
            let opening = |out: &mut BytesMut, described: Option<&[u8]>| {
                request.opening(out, reached, &opened[0], described)
            };
            let mut answer = Answer {
                out,
                opening: &opening,
                max_rows: request.max_rows,
                limit: request.limit,
                offset: request.offset,
            };
            merge(client, servers, heads, &mut answer, plan).await
        }
    }
}

/// How the client's answer begins and ends: what is written before the rows (from the
/// shards' row description cut to the client's columns, `None` when a shard failed first),
/// and the rows its Execute asked at most (0: all).
struct Answer<'a> {
    out: BytesMut,
    opening: &'a (dyn Fn(&mut BytesMut, Option<&[u8]>) + Sync),
    max_rows: u32,
    /// The LIMIT the client's values gave (`LIMIT $n`).
    limit: Option<u64>,
    /// The OFFSET the client's values gave (`OFFSET $n`).
    offset: Option<u64>,
}

/// The shards' answers (their first messages read: `heads`) merged into the client's: what is
/// left to write (without its ReadyForQuery), and whether it ends in an error.
async fn merge(
    client: &mut ClientConn,
    servers: &mut [&mut Checkout],
    heads: Vec<Head>,
    answer: &mut Answer<'_>,
    (plan, text_bytewise): (&Gather, bool),
) -> Result<(BytesMut, bool)> {
    let mut out = std::mem::take(&mut answer.out);
    let failed = heads.iter().find_map(|h| match h {
        Head::Failed(e) => Some(e.clone()),
        _ => None,
    });
    if let Some(error) = failed {
        drain(servers).await?;
        (answer.opening)(&mut out, None);
        out.extend_from_slice(&error);
        return Ok((out, true));
    }
    let descriptions: Vec<&BytesMut> = heads
        .iter()
        .filter_map(|h| match h {
            Head::Rows(d) => Some(d),
            _ => None,
        })
        .collect();
    if descriptions.is_empty() {
        // No rows described: a statement whose answer is its tag alone.
        drain(servers).await?;
        (answer.opening)(&mut out, None);
        encode::command_complete(&mut out, "SELECT 0");
        return Ok((out, false));
    }
    let checked = agreed(&descriptions).and_then(|fields| {
        let prepared = prepare(plan, &fields, text_bytewise)?;
        // The client's columns only: hidden ones are the merge's.
        let described = match &plan.merge {
            Merge::Grouped(g) if g.visible < fields.len() => {
                first_fields(descriptions[0], g.visible)
                    .ok_or("a shard's row description could not be read")?
            }
            _ => descriptions[0].clone(),
        };
        Ok((prepared, described))
    });
    let (prepared, described) = match checked {
        Ok(k) => k,
        Err(msg) => {
            drain(servers).await?;
            (answer.opening)(&mut out, None);
            encode::error_response(&mut out, "ERROR", "0A000", &msg);
            return Ok((out, true));
        }
    };
    (answer.opening)(&mut out, Some(&described));
    let limit = match (plan.limit.or(answer.limit), answer.max_rows) {
        (l, 0) => l,
        (None, m) => Some(u64::from(m)),
        (Some(l), m) => Some(l.min(u64::from(m))),
    };
    let mut rows = Rows {
        out,
        sent: 0,
        skip: answer.offset.unwrap_or(plan.offset),
        limit,
    };
    let keys = &prepared.order;
    let merged = match &plan.merge {
        Merge::Concat => concat(client, servers, &mut rows).await?,
        Merge::Sorted(_) => sorted(client, servers, &mut rows, keys).await?,
        Merge::Grouped(g) => {
            let p = grouped::Plan {
                columns: &g.columns,
                visible: g.visible,
                having: g.having.as_ref(),
                kinds: &prepared.kinds,
                binary: &prepared.binary,
                order: keys,
                cap: plan.max_groups,
            };
            grouped::merge(client, servers, &mut rows, &p).await?
        }
        Merge::Distinct(_) => {
            let columns = vec![None; prepared.kinds.len()];
            let p = grouped::Plan {
                columns: &columns,
                visible: columns.len(),
                having: None,
                kinds: &prepared.kinds,
                binary: &prepared.binary,
                order: keys,
                cap: plan.max_groups,
            };
            grouped::merge(client, servers, &mut rows, &p).await?
        }
    };
    // Every server is read to its end; the merge's own error comes first.
    let drained = drain(servers).await?;
    let error = merged.err().or(drained);
    let mut out = rows.out;
    let failed = error.is_some();
    match error {
        Some(e) => out.extend_from_slice(&e),
        // An Execute's rows run out at its count: PostgreSQL then suspends the portal.
        None if answer.max_rows > 0 && rows.sent == u64::from(answer.max_rows) => {
            encode::message(&mut out, backend::PORTAL_SUSPENDED, |_| {})
        }
        None => encode::command_complete(&mut out, &format!("SELECT {}", rows.sent)),
    }
    Ok((out, failed))
}

/// The client's rows as they are merged: what is kept to write, how many were sent, and what
/// OFFSET and LIMIT still ask.
struct Rows {
    out: BytesMut,
    sent: u64,
    skip: u64,
    limit: Option<u64>,
}

impl Rows {
    /// Whether the LIMIT is reached: no more rows are wanted.
    fn full(&self) -> bool {
        self.limit.is_some_and(|l| self.sent >= l)
    }

    /// Takes one DataRow body, after OFFSET's rows and up to LIMIT's.
    fn push(&mut self, body: &[u8]) {
        if self.skip > 0 {
            self.skip -= 1;
            return;
        }
        if self.full() {
            return;
        }
        encode::message(&mut self.out, backend::DATA_ROW, |b| {
            b.extend_from_slice(body)
        });
        self.sent += 1;
    }

    /// Writes what is kept once it is large.
    async fn flush(&mut self, client: &mut ClientConn) -> Result<()> {
        if self.out.len() >= FLUSH_AT {
            client.reply(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }
}

/// A shard's first answer: its RowDescription (whole), its error, or its end. Notices and
/// parameter changes before it go to `out` (the first shard's; the others' are dropped, so the
/// client sees each once).
async fn head(s: &mut Checkout, mut out: Option<&mut BytesMut>) -> Result<Head> {
    loop {
        let (tag, body) = read_server(s).await?;
        let whole = || whole(tag, &body);
        match tag {
            backend::ROW_DESCRIPTION => return Ok(Head::Rows(whole())),
            backend::ERROR_RESPONSE => return Ok(Head::Failed(whole())),
            backend::COMMAND_COMPLETE | backend::EMPTY_QUERY_RESPONSE => return Ok(Head::Done),
            backend::NOTICE_RESPONSE | backend::PARAMETER_STATUS => {
                if let Some(out) = out.as_deref_mut() {
                    out.extend_from_slice(&whole());
                }
            }
            _ => {}
        }
    }
}

/// Reads each server's answers up to its ReadyForQuery, dropping rows; the first error any of
/// them sent on the way, if one did.
async fn drain(servers: &mut [&mut Checkout]) -> Result<Option<BytesMut>> {
    let mut error = None;
    for s in servers.iter_mut() {
        loop {
            let (tag, body) = read_server(s).await?;
            match tag {
                backend::ERROR_RESPONSE if error.is_none() => error = Some(whole(tag, &body)),
                backend::READY_FOR_QUERY => {
                    super::fanout::note_ready(s, &body);
                    break;
                }
                _ => {}
            }
        }
    }
    Ok(error)
}

/// One shard's rows after another's.
async fn concat(
    client: &mut ClientConn,
    servers: &mut [&mut Checkout],
    rows: &mut Rows,
) -> Result<std::result::Result<(), BytesMut>> {
    for s in servers.iter_mut() {
        loop {
            if rows.full() {
                break;
            }
            match next_row(s).await? {
                Next::Row(body) => {
                    rows.push(&body);
                    rows.flush(client).await?;
                }
                Next::End => break,
                Next::Failed(e) => return Ok(Err(e)),
            }
        }
    }
    Ok(Ok(()))
}

/// A shard's next row, or the end of its rows (its CommandComplete), or its error.
enum Next {
    Row(BytesMut),
    End,
    Failed(BytesMut),
}

async fn next_row(s: &mut Checkout) -> Result<Next> {
    loop {
        let (tag, body) = read_server(s).await?;
        match tag {
            backend::DATA_ROW => return Ok(Next::Row(body)),
            backend::COMMAND_COMPLETE => return Ok(Next::End),
            backend::ERROR_RESPONSE => return Ok(Next::Failed(whole(tag, &body))),
            _ => {}
        }
    }
}

/// Column `i` of a DataRow body: `Some(None)` for NULL, `None` when it cannot be read.
fn field(body: &[u8], i: usize) -> Option<Option<&[u8]>> {
    let mut b = body;
    if b.len() < 2 {
        return None;
    }
    let n = usize::try_from(b.get_i16()).ok()?;
    if i >= n {
        return None;
    }
    for j in 0..=i {
        if b.len() < 4 {
            return None;
        }
        let len = b.get_i32();
        let value = if len < 0 {
            None
        } else {
            let len = usize::try_from(len).ok()?;
            let v = b.get(..len)?;
            b = &b[len..];
            Some(v)
        };
        if j == i {
            return Some(value);
        }
    }
    None
}

/// How row `a` sorts against row `b` by `keys` (column, kind, descending, NULLs first);
/// `None` when a value cannot be read.
fn order<'a>(a: &'a [u8], b: &'a [u8], keys: &[SortAt]) -> Option<Ordering> {
    for &(i, kind, desc, nulls_first, binary) in keys {
        // Values in binary format are read as text for the comparison.
        let read = |row: &'a [u8]| -> Option<Option<Cow<'a, [u8]>>> {
            match (field(row, i)?, binary) {
                (None, _) => Some(None),
                (Some(v), None) => Some(Some(Cow::Borrowed(v))),
                (Some(v), Some(oid)) => {
                    values::binary::to_text(oid, v).map(|t| Some(Cow::Owned(t)))
                }
            }
        };
        let (a, b) = (read(a)?, read(b)?);
        let o = match (a.as_deref(), b.as_deref()) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) if nulls_first => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) if nulls_first => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(x), Some(y)) => {
                let o = values::compare(kind, x, y)?;
                if desc {
                    o.reverse()
                } else {
                    o
                }
            }
        };
        if o != Ordering::Equal {
            return Some(o);
        }
    }
    Some(Ordering::Equal)
}

/// A k-way merge of the shards' sorted rows: one row per shard held at a time.
async fn sorted(
    client: &mut ClientConn,
    servers: &mut [&mut Checkout],
    rows: &mut Rows,
    keys: &[SortAt],
) -> Result<std::result::Result<(), BytesMut>> {
    let mut fronts: Vec<Option<BytesMut>> = Vec::with_capacity(servers.len());
    for s in servers.iter_mut() {
        match next_row(s).await? {
            Next::Row(r) => fronts.push(Some(r)),
            Next::End => fronts.push(None),
            Next::Failed(e) => return Ok(Err(e)),
        }
    }
    while !rows.full() {
        let mut least: Option<usize> = None;
        for (i, f) in fronts.iter().enumerate() {
            let Some(row) = f else { continue };
            least = match least {
                None => Some(i),
                Some(l) => {
                    let held = fronts[l].as_deref().expect("a front row");
                    match order(row, held, keys) {
                        Some(Ordering::Less) => Some(i),
                        Some(_) => Some(l),
                        None => return Ok(Err(unreadable())),
                    }
                }
            };
        }
        let Some(l) = least else { break };
        let row = fronts[l].take().expect("the least row");
        rows.push(&row);
        rows.flush(client).await?;
        match next_row(servers[l]).await? {
            Next::Row(r) => fronts[l] = Some(r),
            Next::End => {}
            Next::Failed(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(()))
}

/// pgcorral's error for a value it could not read while merging.
fn unreadable() -> BytesMut {
    let mut e = BytesMut::new();
    encode::error_response(
        &mut e,
        "ERROR",
        "0A000",
        "a value of the shards' answers could not be read to merge them (is DateStyle ISO?)",
    );
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::values::Kind;
    use bytes::BufMut;

    fn row(values: &[Option<&str>]) -> Vec<u8> {
        let mut b = BytesMut::new();
        b.put_i16(values.len() as i16);
        for v in values {
            match v {
                None => b.put_i32(-1),
                Some(v) => {
                    b.put_i32(v.len() as i32);
                    b.extend_from_slice(v.as_bytes());
                }
            }
        }
        b.to_vec()
    }

    #[test]
    fn fields_of_a_data_row_are_read_and_bad_ones_refused() {
        let r = row(&[Some("1"), None, Some("abc")]);
        assert_eq!(field(&r, 0), Some(Some(&b"1"[..])));
        assert_eq!(field(&r, 1), Some(None));
        assert_eq!(field(&r, 2), Some(Some(&b"abc"[..])));
        assert_eq!(field(&r, 3), None);
        assert_eq!(field(&r[..r.len() - 1], 2), None);
        assert_eq!(field(&[], 0), None);
    }

    #[test]
    fn rows_sort_by_keys_with_nulls_where_postgresql_puts_them() {
        let a = row(&[Some("1"), None]);
        let b = row(&[Some("2"), Some("x")]);
        let asc = [(0, Kind::Int, false, false, None)];
        assert_eq!(order(&a, &b, &asc), Some(Ordering::Less));
        let desc = [(0, Kind::Int, true, true, None)];
        assert_eq!(order(&a, &b, &desc), Some(Ordering::Greater));
        // NULLS LAST (ascending's default): the NULL sorts after "x".
        let nulls = [(1, Kind::Text, false, false, None)];
        assert_eq!(order(&a, &b, &nulls), Some(Ordering::Greater));
        let nulls_first = [(1, Kind::Text, false, true, None)];
        assert_eq!(order(&a, &b, &nulls_first), Some(Ordering::Less));
    }
}
