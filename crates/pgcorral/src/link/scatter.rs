//! A write that no one shard takes ([`crate::shard::scatter`]), run on each shard it touches in
//! one transaction of pgcorral's, committed atomically, and answered as one server would: the
//! rows changed summed (or, for omnisharded copies and DDL, the one answer all shards agree on).

use bytes::{Buf, BytesMut};
use pgwire::backend::{self, TxStatus};
use pgwire::encode;

use pgwire::frontend::query_text;

use super::fanout::{answer_raw, note_ready, read_server, send, whole, Aimed};
use super::{moves, spanning, Attach, Link};
use crate::client_conn::ClientConn;
use crate::error::Result;
use crate::pool::Checkout;
use crate::shard::scatter::Write;

/// Bytes of answers kept before they are written to the client.
const FLUSH_AT: usize = 64 << 10;

/// Runs the client's simple Query (`len` bytes at the front of its buffer) as `write`, in a
/// transaction on each of `shards`, sent to those of `from` (the others take moved rows), and
/// answers it.
pub async fn scatter(
    client: &mut ClientConn,
    at: &Attach<'_>,
    (shards, from): (&[usize], &[usize]),
    write: Write,
    len: usize,
) -> Result<()> {
    let query = BytesMut::from(&client.buf[..len]);
    client.buf.advance(len);
    // A simple Query drops the unnamed statement, as PostgreSQL's does.
    client.statements.drop_unnamed();
    let mut fanout = at.shards(shards.iter().copied()).await?;
    let _aimed = Aimed::at(at.slot, fanout.servers());
    let mut servers: Vec<&mut Checkout> = fanout.servers().iter_mut().collect();
    let ran = run_on(client, at, &mut servers, (shards, from), write, &query).await?;
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
/// `shards` (`begin` run on each that joins), nothing is committed, and an error fails the
/// transaction. Returns the shard the transaction is now on.
pub async fn in_transaction(
    client: &mut ClientConn,
    at: &Attach<'_>,
    (shards, from, shard): (&[usize], &[usize], usize),
    (write, len): (Write, usize),
    (link, begin): (&mut Link, &str),
) -> Result<usize> {
    let query = BytesMut::from(&client.buf[..len]);
    client.buf.advance(len);
    client.statements.drop_unnamed();
    let spanning = spanning::join(link, at, shard, (shards, begin)).await?;
    let mut servers = spanning.servers(shards);
    let ran = run_on(client, at, &mut servers, (shards, from), write, &query).await?;
    drop(servers);
    let mut out = ran.out;
    match &ran.failed {
        Some(error) => out.extend_from_slice(error),
        None => encode::command_complete(&mut out, &ran.tag),
    }
    let failed = ran.failed.is_some();
    spanning.answer(client, at.slot, out, (failed, true)).await
}

/// What the shards answered a write run on several: the client's answer so far (rows not yet
/// written to it), its command tag, or the first error.
struct Ran {
    out: BytesMut,
    tag: String,
    failed: Option<BytesMut>,
}

/// Runs `query` (a simple Query) as `write` on `servers` (of `shards`, in order), sent to
/// those of `from`; rows are streamed to the client as they come.
async fn run_on(
    client: &mut ClientConn,
    at: &Attach<'_>,
    servers: &mut [&mut Checkout],
    (shards, from): (&[usize], &[usize]),
    write: Write,
    query: &BytesMut,
) -> Result<Ran> {
    if let Write::MovesKey(table) = write {
        let text = query_text(query.get(5..).unwrap_or_default()).unwrap_or_default();
        let moved = match at.cluster.sharding() {
            Some(sharding) => moves::update(servers, from, text, &sharding, table).await?,
            None => Ok(0),
        };
        return Ok(match moved {
            Ok(n) => Ran {
                out: BytesMut::new(),
                tag: format!("UPDATE {n}"),
                failed: None,
            },
            Err(e) => Ran {
                out: BytesMut::new(),
                tag: String::new(),
                failed: Some(e),
            },
        });
    }
    for (s, shard) in servers.iter_mut().zip(shards) {
        if from.contains(shard) {
            send(s, query).await?;
        }
    }
    let mut out = BytesMut::new();
    let mut failed: Option<BytesMut> = None;
    // The first shard's command tag, and the rows all changed.
    let mut first_tag: Option<String> = None;
    let mut differ: Option<(String, String)> = None;
    let mut total = 0u64;
    let sent = servers
        .iter_mut()
        .zip(shards)
        .filter(|(_, shard)| from.contains(shard));
    for (i, (s, _)) in sent.enumerate() {
        let shown = i == 0 || write == Write::Rows;
        loop {
            let (tag, body) = read_server(s).await?;
            match tag {
                backend::ROW_DESCRIPTION | backend::NOTICE_RESPONSE if i == 0 => {
                    out.extend_from_slice(&whole(tag, &body))
                }
                backend::DATA_ROW if shown && failed.is_none() => {
                    out.extend_from_slice(&whole(tag, &body));
                    if out.len() >= FLUSH_AT {
                        client.reply(&out).await?;
                        out.clear();
                    }
                }
                backend::COMMAND_COMPLETE => {
                    let t = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body))
                        .into_owned();
                    match &first_tag {
                        None => first_tag = Some(t.clone()),
                        Some(f) if write != Write::Rows && *f != t && differ.is_none() => {
                            differ = Some((f.clone(), t.clone()))
                        }
                        Some(_) => {}
                    }
                    if let Some((_, n)) = t.rsplit_once(' ') {
                        total += n.parse::<u64>().unwrap_or(0);
                    }
                }
                backend::ERROR_RESPONSE => {
                    failed.get_or_insert_with(|| whole(tag, &body));
                }
                backend::READY_FOR_QUERY => {
                    note_ready(s, &body);
                    break;
                }
                _ => {}
            }
        }
    }
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
