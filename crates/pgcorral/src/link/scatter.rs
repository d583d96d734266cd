//! A write that no one shard takes ([`crate::shard::scatter`]), run on each shard it touches in
//! one transaction of pgcorral's, committed atomically, and answered as one server would: the
//! rows changed summed (or, for omnisharded copies and DDL, the one answer all shards agree on).

use bytes::{Buf, BytesMut};
use pgwire::backend::{self, TxStatus};
use pgwire::encode;

use pgwire::frontend::query_text;

use super::fanout::{answer_raw, note_ready, read_server, send, whole, Aimed};
use super::{moves, Attach};
use crate::client_conn::ClientConn;
use crate::error::Result;
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
    let mut query = BytesMut::from(&client.buf[..len]);
    client.buf.advance(len);
    // A simple Query drops the unnamed statement, as PostgreSQL's does.
    client.statements.drop_unnamed();
    let mut fanout = at.shards(shards.iter().copied()).await?;
    let _aimed = Aimed::at(at.slot, fanout.servers());
    if let Write::MovesKey(table) = write {
        let text = query_text(query.get(5..).unwrap_or_default()).unwrap_or_default();
        let moved = match at.cluster.sharding() {
            Some(sharding) => moves::update(fanout.servers(), from, text, &sharding, table).await?,
            None => Ok(0),
        };
        let result = match moved {
            Ok(n) => fanout.commit().await?.map(|()| n),
            Err(e) => {
                fanout.abort().await;
                Err(e)
            }
        };
        return match result {
            Ok(n) => {
                let mut out = BytesMut::new();
                encode::command_complete(&mut out, &format!("UPDATE {n}"));
                encode::ready_for_query(&mut out, TxStatus::Idle);
                client.reply(&out).await
            }
            Err(e) => answer_raw(client, &e, true).await,
        };
    }
    for (s, shard) in fanout.servers().iter_mut().zip(shards) {
        if from.contains(shard) {
            send(s, &query).await?;
        }
    }
    query.clear();
    let mut out = BytesMut::new();
    let mut failed: Option<BytesMut> = None;
    // The first shard's command tag, and the rows all changed.
    let mut first_tag: Option<String> = None;
    let mut differ: Option<(String, String)> = None;
    let mut total = 0u64;
    for (i, s) in fanout.servers().iter_mut().enumerate() {
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
    if let Some(error) = failed {
        fanout.abort().await;
        out.extend_from_slice(&error);
        return answer_raw(client, &out, true).await;
    }
    if let Err(error) = fanout.commit().await? {
        out.extend_from_slice(&error);
        return answer_raw(client, &out, true).await;
    }
    let tag = first_tag.unwrap_or_default();
    let tag = match (write, tag.rsplit_once(' ')) {
        (Write::Rows, Some((prefix, n))) if n.parse::<u64>().is_ok() => format!("{prefix} {total}"),
        _ => tag,
    };
    encode::command_complete(&mut out, &tag);
    encode::ready_for_query(&mut out, TxStatus::Idle);
    client.reply(&out).await
}
