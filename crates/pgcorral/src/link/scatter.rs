//! A write that no one shard takes ([`crate::shard::scatter`]), run on each shard it touches in
//! one transaction of pgcorral's, committed atomically, and answered as one server would: the
//! rows changed summed (or, for omnisharded copies and DDL, the one answer all shards agree on).

use bytes::BytesMut;
use pgwire::backend::{self, TxStatus};
use pgwire::encode;

use pgwire::frontend::query_text;

use super::fanout::{
    answer_error, answer_raw, counted, error, note_ready, read_server, send, whole, Aimed,
};
use super::gather::extended::{self, Request, Rewritten};
use super::gather::Head;
use super::{moves, spanning, Attach, Link};
use crate::client_conn::ClientConn;
use crate::error::Result;
use crate::pool::Checkout;
use crate::prepared::Registry;
use crate::route::Scattered;
use crate::shard::scatter::{self, Write};

/// Bytes of answers kept before they are written to the client.
const FLUSH_AT: usize = 64 << 10;

/// Runs the client's request (`w.len` bytes at the front of its buffer: a simple Query, or an
/// extended-protocol request binding one statement) as `w.write`, in a transaction on each of
/// `w.shards`, sent to those of `w.from` (the others take moved rows), and answers it.
pub async fn scatter(
    client: &mut ClientConn,
    at: &Attach<'_>,
    w: &Scattered,
    registry: &Registry,
) -> Result<()> {
    let sent = match Sent::take(client, w, registry) {
        Ok(s) => s,
        Err((code, msg)) => return answer_error(client, code, &msg).await,
    };
    let mut fanout = at.shards(w.shards.iter().copied()).await?;
    let _aimed = Aimed::at(at.slot, fanout.servers());
    let mut servers: Vec<&mut Checkout> = fanout.servers().iter_mut().collect();
    let on = (&w.shards[..], &w.from[..]);
    let ran = run_on(client, (at, registry), &mut servers, on, (w.write, &sent)).await?;
    drop(servers);
    let mut out = ran.out;
    if let Some(error) = ran.failed {
        fanout.abort().await;
        out.extend_from_slice(&error);
        return answer_raw(client, &out, true).await;
    }
    if let Err(error) = fanout.commit().await? {
        out.extend_from_slice(&error);
        return answer_raw(client, &out, true).await;
    }
    encode::command_complete(&mut out, &ran.tag);
    encode::ready_for_query(&mut out, TxStatus::Idle);
    client.reply(&out).await
}

/// [`scatter`] inside the client's transaction, now on `shard` in `link`: it spreads to
/// `w.shards` (`begin` run on each that joins), nothing is committed, and an error fails the
/// transaction. Returns the shard the transaction is now on.
pub async fn in_transaction(
    client: &mut ClientConn,
    at: &Attach<'_>,
    (w, registry): (&Scattered, &Registry),
    shard: usize,
    (link, begin): (&mut Link, &str),
) -> Result<usize> {
    let sent = match Sent::take(client, w, registry) {
        Ok(s) => s,
        Err((code, msg)) => {
            spanning::refuse(client, link, code, &msg).await?;
            return Ok(shard);
        }
    };
    let spanning = spanning::join(link, at, shard, (&w.shards, begin)).await?;
    let mut servers = spanning.servers(&w.shards);
    let on = (&w.shards[..], &w.from[..]);
    let ran = run_on(client, (at, registry), &mut servers, on, (w.write, &sent)).await?;
    drop(servers);
    let mut out = ran.out;
    match &ran.failed {
        Some(error) => out.extend_from_slice(error),
        None => encode::command_complete(&mut out, &ran.tag),
    }
    let failed = ran.failed.is_some();
    spanning.answer(client, at.slot, out, (failed, true)).await
}

/// What the shards are sent: the client's Query, or its extended-protocol request rewritten
/// for them (its statement parsed as each shard's unnamed one).
enum Sent {
    Query(BytesMut),
    Extended(Box<Request>),
}

impl Sent {
    /// Takes the client's request (`w.len` bytes at the front of its buffer) out; `Err`: why
    /// pgcorral refuses it.
    fn take(
        client: &mut ClientConn,
        w: &Scattered,
        registry: &Registry,
    ) -> std::result::Result<Sent, extended::Refused> {
        let bytes = client.buf.split_to(w.len);
        let Some(text) = w.extended.as_deref() else {
            // A simple Query drops the unnamed statement, as PostgreSQL's does.
            client.statements.drop_unnamed();
            return Ok(Sent::Query(bytes));
        };
        let rewritten = match w.write {
            Write::MovesKey(_) => Rewritten::moving(text),
            _ => Rewritten::as_is(text),
        };
        Request::read(client, (&bytes, registry), &rewritten).map(|r| Sent::Extended(Box::new(r)))
    }
}

/// What the shards answered a write run on several: the client's answer so far (rows not yet
/// written to it), its command tag, or the first error.
struct Ran {
    out: BytesMut,
    tag: String,
    failed: Option<BytesMut>,
}

/// Runs the client's request (`sent`) as `write` on `servers` (of `shards`, in order), sent
/// to those of `from`; rows are streamed to the client as they come.
async fn run_on(
    client: &mut ClientConn,
    (at, registry): (&Attach<'_>, &Registry),
    servers: &mut [&mut Checkout],
    (shards, from): (&[usize], &[usize]),
    (write, sent): (Write, &Sent),
) -> Result<Ran> {
    if let Write::MovesKey(table) = write {
        return moved(client, (at, registry), servers, from, (table, sent)).await;
    }
    let mut sent_to: Vec<&mut Checkout> = servers
        .iter_mut()
        .zip(shards)
        .filter(|(_, shard)| from.contains(shard))
        .map(|(s, _)| &mut **s)
        .collect();
    let mut got = Got::default();
    match sent {
        Sent::Query(query) => {
            for s in sent_to.iter_mut() {
                send(s, query).await?;
            }
        }
        Sent::Extended(request) => {
            let asked = (request.as_ref(), at.max_prepared);
            open(client, registry, &mut sent_to, asked, &mut got).await?;
        }
    }
    for (i, s) in sent_to.iter_mut().enumerate() {
        got.rest(client, s, (i == 0, i == 0 || write == Write::Rows), write)
            .await?;
    }
    let Got {
        out,
        mut failed,
        first_tag,
        differ,
        total,
    } = got;
    if failed.is_none() {
        if let Some((a, b)) = differ {
            let mut e = BytesMut::new();
            encode::error_response(
                &mut e,
                "ERROR",
                "XX000",
                &format!("the shards' copies answered differently ({a} on the first, {b} on another): nothing was changed; the omnisharded table's copies may differ"),
            );
            failed = Some(e);
        }
    }
    let tag = first_tag.unwrap_or_default();
    let tag = match (write, tag.rsplit_once(' ')) {
        (Write::Rows, Some((prefix, n))) if n.parse::<u64>().is_ok() => format!("{prefix} {total}"),
        _ => tag,
    };
    Ok(Ran { out, tag, failed })
}

/// [`run_on`] for an UPDATE that moves rows between shards: sent to the servers of `from`
/// (every shard is among `servers`, in order), its rows read and moved ([`moves`]).
async fn moved(
    client: &mut ClientConn,
    (at, registry): (&Attach<'_>, &Registry),
    servers: &mut [&mut Checkout],
    from: &[usize],
    (table, sent): (usize, &Sent),
) -> Result<Ran> {
    let ran = |out: BytesMut, moved: std::result::Result<(u64, BytesMut), BytesMut>| match moved {
        Ok((n, rows)) => Ran {
            out: {
                let mut out = out;
                out.extend_from_slice(&rows);
                out
            },
            tag: format!("UPDATE {n}"),
            failed: None,
        },
        Err(e) => Ran {
            out,
            tag: String::new(),
            failed: Some(e),
        },
    };
    let Some(sharding) = at.cluster.sharding() else {
        return Ok(ran(BytesMut::new(), Ok((0, BytesMut::new()))));
    };
    let request = match sent {
        Sent::Query(query) => {
            let text = query_text(query.get(5..).unwrap_or_default()).unwrap_or_default();
            let moved = moves::update(servers, from, text, &sharding, table).await?;
            return Ok(ran(BytesMut::new(), moved));
        }
        Sent::Extended(request) => request,
    };
    let moving = match moves::Moving::start(servers, from, &sharding, table).await? {
        Ok(m) => m,
        Err(e) => return Ok(ran(BytesMut::new(), Err(e))),
    };
    // The client's RETURNING columns come first, in its formats; the rows' place and values
    // after them, in text.
    let with_returning;
    let request = match scatter::returned_columns(request.text(), moving.width()) {
        Ok(None) => request,
        Ok(Some(visible)) => match request.returning(visible, moving.width() + 1) {
            Some(r) => {
                with_returning = r;
                &with_returning
            }
            None => {
                let e = error("08P01", "the Bind's result formats cannot be read");
                return Ok(ran(BytesMut::new(), Err(e)));
            }
        },
        Err(msg) => return Ok(ran(BytesMut::new(), Err(error("0A000", &msg)))),
    };
    // The first of them (in shard order) answers the client's own messages.
    let mut sent_to: Vec<&mut Checkout> = servers
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| from.contains(i))
        .map(|(_, s)| &mut **s)
        .collect();
    let mut got = Got::default();
    let asked = (request, at.max_prepared);
    open(client, registry, &mut sent_to, asked, &mut got).await?;
    drop(sent_to);
    // The answers' rest (rows, tags, errors) is read as a simple Query's would be.
    let moved = moving.finish(servers, from, &sharding).await?;
    Ok(ran(got.out, got.failed.map_or(moved, Err)))
}

/// The shards' answers to a write as they are read: the client's answer so far, the first
/// error, the first shard's command tag, two tags that differ, and the rows all changed.
#[derive(Default)]
struct Got {
    out: BytesMut,
    failed: Option<BytesMut>,
    first_tag: Option<String>,
    differ: Option<(String, String)>,
    total: u64,
}

impl Got {
    /// Reads a shard's answer (after what [`open`] read of it) up to its ReadyForQuery: its
    /// description and notices (the `first` shard's), its rows (kept when `shown`), its tag,
    /// its error. `write`: how the tags combine.
    async fn rest(
        &mut self,
        client: &mut ClientConn,
        s: &mut Checkout,
        (first, shown): (bool, bool),
        write: Write,
    ) -> Result<()> {
        loop {
            let (tag, body) = read_server(s).await?;
            match tag {
                backend::ROW_DESCRIPTION | backend::NOTICE_RESPONSE if first => {
                    self.out.extend_from_slice(&whole(tag, &body))
                }
                backend::DATA_ROW if shown && self.failed.is_none() => {
                    self.out.extend_from_slice(&whole(tag, &body));
                    if self.out.len() >= FLUSH_AT {
                        client.reply(&self.out).await?;
                        self.out.clear();
                    }
                }
                backend::COMMAND_COMPLETE => {
                    let t = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body))
                        .into_owned();
                    match &self.first_tag {
                        None => self.first_tag = Some(t.clone()),
                        Some(f) if write != Write::Rows && *f != t && self.differ.is_none() => {
                            self.differ = Some((f.clone(), t.clone()))
                        }
                        Some(_) => {}
                    }
                    self.total += counted(&body).map_or(0, |(_, n)| n);
                }
                backend::ERROR_RESPONSE => {
                    self.failed.get_or_insert_with(|| whole(tag, &body));
                }
                backend::READY_FOR_QUERY => {
                    note_ready(s, &body);
                    return Ok(());
                }
                _ => {}
            }
        }
    }
}

/// Sends each shard its part of the client's extended-protocol request (`max`:
/// max_prepared_statements), reads each one's answer up to its portal's description
/// ([`extended::open_all`]), and writes the client's ParseComplete, BindComplete and
/// descriptions (as far as the shards went) to `got.out`.
async fn open(
    client: &mut ClientConn,
    registry: &Registry,
    servers: &mut [&mut Checkout],
    (request, max): (&Request, usize),
    got: &mut Got,
) -> Result<()> {
    let asked = (request, max);
    let (heads, opened, failed) =
        extended::open_all(client, registry, servers, asked, &mut got.out).await?;
    let reached = &opened[failed.unwrap_or(0)];
    match (failed, heads.first()) {
        (Some(k), _) => {
            request.opening(&mut got.out, reached, &opened[0], None);
            if let Head::Failed(e) = &heads[k] {
                got.failed = Some(e.clone());
            }
        }
        (None, Some(Head::Rows(description))) => {
            let theirs = request.client_columns(description);
            request.opening(&mut got.out, reached, &opened[0], Some(&theirs))
        }
        (None, _) => {
            let mut none = BytesMut::new();
            encode::message(&mut none, backend::NO_DATA, |_| {});
            request.opening(&mut got.out, reached, &opened[0], Some(&none));
        }
    }
    Ok(())
}
