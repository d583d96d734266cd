//! `COPY ... FROM STDIN` into a sharded table: one server per shard, each in a transaction
//! running the client's COPY; the client's rows are split to their shards as they stream in
//! (bounded buffers), and the COPY commits everywhere or nowhere, answered with one
//! CommandComplete of the total.

use bytes::BytesMut;
use pg_query::NodeEnum;
use pgwire::backend::{self, TxStatus};
use pgwire::{encode, frontend};

use super::fanout::{answer_error, answer_raw, note_ready, read_server, send, until_ready};
use super::{spanning, Attach, Link};
use crate::client_conn::ClientConn;
use crate::error::{Error, Kind, Result};
use crate::net::framed::read_message;
use crate::pool::Checkout;
use crate::route::shard::{copy_request, learn_columns};
use crate::shard::copy::{is_ascii_safe_encoding, Options, Splitter, To};
use crate::shard::Sharding;

/// Bytes kept for one shard before they are written to its server.
const FLUSH_AT: usize = 64 << 10;

/// Runs the client's `COPY ... FROM STDIN` (a simple Query at the front of its buffer) into
/// sharded table `table`, answering the client as PostgreSQL would.
pub async fn copy_in(client: &mut ClientConn, at: &Attach<'_>, table: usize) -> Result<()> {
    let (copy, splitter) = match take_request(client, at, table).await? {
        Ok(c) => c,
        Err(msg) => return answer_error(client, "0A000", &msg).await,
    };
    let Request {
        text,
        early,
        extended,
        shards,
    } = copy;
    // One server per shard, with the client's settings, in a transaction running the COPY.
    let mut fanout = at.shards(0..shards).await?;
    let mut servers: Vec<&mut Checkout> = fanout.servers().iter_mut().collect();
    let copied = run(client, &mut servers, (&text, early), splitter, extended).await?;
    drop(servers);
    let mut out = BytesMut::new();
    match copied {
        Copied::Failed { error, ready } => {
            fanout.abort().await;
            answer_raw(client, &error, ready).await
        }
        Copied::Done(total) => {
            if let Err(error) = fanout.commit().await? {
                return answer_raw(client, &error, !extended).await;
            }
            encode::command_complete(&mut out, &format!("COPY {total}"));
            if !extended {
                encode::ready_for_query(&mut out, TxStatus::Idle);
            }
            client.reply(&out).await
        }
    }
}

/// [`copy_in`] inside the client's transaction, now on `shard` in `link`: it spreads to every
/// shard (`begin` run on each that joins), nothing is committed, and an error fails the
/// transaction. Returns the shard the transaction is now on.
pub async fn in_transaction(
    client: &mut ClientConn,
    at: &Attach<'_>,
    (table, shard): (usize, usize),
    (link, begin): (&mut Link, &str),
) -> Result<usize> {
    let (copy, splitter) = match take_request(client, at, table).await? {
        Ok(c) => c,
        Err(msg) => {
            spanning::refuse(client, link, "0A000", &msg).await?;
            return Ok(shard);
        }
    };
    let Request {
        text,
        early,
        extended,
        shards,
    } = copy;
    let all: Vec<usize> = (0..shards).collect();
    let spanning = spanning::join(link, at, shard, (&all, begin)).await?;
    let mut servers = spanning.servers(&all);
    let copied = run(client, &mut servers, (&text, early), splitter, extended).await?;
    drop(servers);
    let mut out = BytesMut::new();
    let (failed, ready) = match copied {
        Copied::Failed { error, ready } => {
            out.extend_from_slice(&error);
            (true, ready)
        }
        Copied::Done(total) => {
            encode::command_complete(&mut out, &format!("COPY {total}"));
            (false, !extended)
        }
    };
    spanning.answer(client, at.slot, out, (failed, ready)).await
}

/// The client's COPY request, taken from the front of its buffer.
struct Request {
    text: String,
    /// pgcorral's answers to its Parse, Bind and Describe.
    early: BytesMut,
    /// Sent through the extended protocol.
    extended: bool,
    /// How many shards the database has.
    shards: usize,
}

/// Takes the client's COPY request (whole at the front of its buffer: routing read it) and
/// makes its splitter; `Ok(Err(message))`: refused.
async fn take_request(
    client: &mut ClientConn,
    at: &Attach<'_>,
    table: usize,
) -> Result<std::result::Result<(Request, Splitter), String>> {
    let sharding = at.cluster.sharding().expect("a sharded database");
    // Its Sync, if any, is answered with the COPY's ReadyForQuery (PostgreSQL ignores Syncs
    // during a COPY).
    let extended = client.buf.first() != Some(&frontend::QUERY);
    let Some((len, text, early)) = copy_request(client) else {
        return Err(Error::new(
            Kind::ClientProtocol,
            "the COPY request is not whole",
        ));
    };
    let _ = client.buf.split_to(len);
    Ok(splitter(client, at, &sharding, table, &text)
        .await?
        .map(|splitter| {
            let shards = sharding.shards;
            (
                Request {
                    text,
                    early,
                    extended,
                    shards,
                },
                splitter,
            )
        }))
}

/// How a COPY split between shards ended.
enum Copied {
    /// Every shard took its rows: the total.
    Done(u64),
    /// The client's error, and whether its ReadyForQuery is due now (a simple Query's, or one
    /// before the COPY started; once started, an extended-protocol client's own Sync gets it).
    Failed { error: BytesMut, ready: bool },
}

/// Runs the COPY `text` on `servers` (one per shard, each in a transaction), answers the
/// client's request up to its CopyInResponse (`early`: pgcorral's answers to its Parse, Bind
/// and Describe), streams its rows through `splitter`, and reads every shard's outcome.
async fn run(
    client: &mut ClientConn,
    servers: &mut [&mut Checkout],
    (text, early): (&str, BytesMut),
    splitter: Splitter,
    extended: bool,
) -> Result<Copied> {
    let mut response: Option<BytesMut> = None;
    for s in servers.iter_mut() {
        let mut q = BytesMut::new();
        encode::query(&mut q, text);
        send(s, &q).await?;
        match until_copy_in(s).await? {
            Ok(r) => {
                response.get_or_insert(r);
            }
            Err(error) => return Ok(Copied::Failed { error, ready: true }),
        }
    }
    // Once the COPY has started, an extended-protocol client ends it with a Sync of its own
    // (the one after its Execute is ignored during a COPY, as PostgreSQL ignores it): that
    // Sync, routed as a request of its own, gets the ReadyForQuery.
    let ready = !extended;
    let mut out = early;
    out.extend_from_slice(&response.expect("every shard answered"));
    client.reply(&out).await?;
    if let Err(error) = stream_rows(client, servers, splitter).await? {
        return Ok(Copied::Failed { error, ready });
    }
    // Every shard's answer: its row count, or its error (the first one goes to the client).
    let mut total: u64 = 0;
    let mut error: Option<BytesMut> = None;
    for s in servers.iter_mut() {
        match until_ready(s).await? {
            Ok(n) => total += n,
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }
    Ok(match error {
        Some(error) => Copied::Failed { error, ready },
        None => Copied::Done(total),
    })
}

/// The splitter for the COPY in `text`: its options, and where the key's columns are in its
/// rows (its column list, or the table's own columns). `Ok(Err(message))` when pgcorral
/// cannot split it.
async fn splitter(
    client: &ClientConn,
    at: &Attach<'_>,
    sharding: &Sharding,
    table: usize,
    text: &str,
) -> Result<std::result::Result<Splitter, String>> {
    let parsed = pg_query::parse(text, pg_query::ParserOptions::DEFAULT)
        .map_err(|e| Error::new(Kind::ClientProtocol, e.to_string()))?;
    let Some(NodeEnum::CopyStmt(copy)) = parsed
        .protobuf
        .stmts
        .first()
        .and_then(|r| r.stmt.as_ref())
        .and_then(|n| n.node.as_ref())
    else {
        return Ok(Err("not a COPY".into()));
    };
    let options = match Options::from_copy_options(&copy.options) {
        Ok(o) => o,
        Err(e) => return Ok(Err(e)),
    };
    let encoding = at
        .settings
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("client_encoding"))
        .map_or("UTF8", |(_, v)| v.as_str());
    if !is_ascii_safe_encoding(encoding) {
        return Ok(Err(format!(
            "COPY into a sharded table cannot be split in client_encoding {encoding}, whose characters may hold the bytes of a delimiter or quote"
        )));
    }
    let t = &sharding.tables[table];
    let listed: Vec<String> = copy
        .attlist
        .iter()
        .filter_map(|n| match n.node.as_ref() {
            Some(NodeEnum::String(s)) => Some(s.sval.clone()),
            _ => None,
        })
        .collect();
    let columns: Vec<String> = if listed.is_empty() {
        if sharding.plans.columns(table).is_none() {
            learn_columns(at.cluster, sharding, table, at.worker).await?;
        }
        match sharding.plans.columns(table) {
            Some(c) => c.to_vec(),
            None => {
                return Ok(Err(format!(
                    "the columns of sharded table \"{}\" could not be read from shard 0's catalog",
                    t.name
                )))
            }
        }
    } else {
        listed
    };
    let positions: Option<Vec<usize>> = t
        .columns
        .iter()
        .map(|k| columns.iter().position(|c| c == k))
        .collect();
    let Some(positions) = positions else {
        return Ok(Err(format!(
            "COPY into sharded table \"{}\" must include its sharding key ({})",
            t.name,
            t.columns.join(", ")
        )));
    };
    Ok(Ok(Splitter::new(
        options,
        positions,
        t.types.clone(),
        sharding.function,
        sharding.shards,
        client.max_len as usize,
    )
    .with_key_columns(&t.columns)))
}

/// Streams the client's COPY data to the shards until its CopyDone (`Ok(Ok)`: every shard got
/// its rows and a CopyDone) or CopyFail / bad data (`Ok(Err(error message))`: every shard got
/// a CopyFail).
async fn stream_rows(
    client: &mut ClientConn,
    servers: &mut [&mut Checkout],
    mut splitter: Splitter,
) -> Result<std::result::Result<(), BytesMut>> {
    let mut pending: Vec<BytesMut> = servers.iter().map(|_| BytesMut::new()).collect();
    loop {
        let (tag, body) = read_message(&mut client.stream, &mut client.buf, client.max_len)
            .await
            .map_err(|e| Error::new(Kind::ClientIo, e.to_string()))?;
        let mut split = |to: To, row: &[u8]| match to {
            To::Shard(n) => encode::message(&mut pending[n], frontend::COPY_DATA, |b| {
                b.extend_from_slice(row)
            }),
            To::Every => {
                for p in pending.iter_mut() {
                    encode::message(p, frontend::COPY_DATA, |b| b.extend_from_slice(row));
                }
            }
        };
        let done = match tag {
            frontend::COPY_DATA => splitter.feed(&body, &mut split).map(|()| false),
            frontend::COPY_DONE => splitter.finish(&mut split).map(|()| true),
            frontend::COPY_FAIL => {
                let why =
                    String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body)).into_owned();
                Err(format!("COPY from stdin failed: {why}"))
            }
            // PostgreSQL ignores these during COPY.
            frontend::FLUSH | frontend::SYNC => Ok(false),
            other => Err(format!(
                "unexpected message type 0x{other:02X} during COPY from stdin"
            )),
        };
        match done {
            Ok(done) => {
                for (s, p) in servers.iter_mut().zip(pending.iter_mut()) {
                    if done {
                        encode::message(p, frontend::COPY_DONE, |_| {});
                    }
                    if done || p.len() >= FLUSH_AT {
                        send(s, p).await?;
                        p.clear();
                    }
                }
                if done {
                    return Ok(Ok(()));
                }
            }
            Err(msg) => {
                for s in servers.iter_mut() {
                    let mut fail = BytesMut::new();
                    encode::message(&mut fail, frontend::COPY_FAIL, |b| {
                        b.extend_from_slice(msg.as_bytes());
                        b.extend_from_slice(&[0]);
                    });
                    send(s, &fail).await?;
                    let _ = until_ready(s).await?;
                }
                let mut error = BytesMut::new();
                let code = if tag == frontend::COPY_FAIL {
                    "57014"
                } else {
                    "22P04"
                };
                encode::error_response(&mut error, "ERROR", code, &msg);
                return Ok(Err(error));
            }
        }
    }
}

/// Reads a server's answers to the COPY Query up to its CopyInResponse (returned whole, for
/// the client), or its error (`Err`, the whole ErrorResponse; the ReadyForQuery after it read).
async fn until_copy_in(s: &mut Checkout) -> Result<std::result::Result<BytesMut, BytesMut>> {
    let mut error = None;
    loop {
        let (tag, body) = read_server(s).await?;
        match tag {
            backend::COPY_IN_RESPONSE => {
                let mut whole = BytesMut::new();
                encode::message(&mut whole, tag, |b| b.extend_from_slice(&body));
                return Ok(Ok(whole));
            }
            backend::ERROR_RESPONSE => {
                let mut whole = BytesMut::new();
                encode::message(&mut whole, tag, |b| b.extend_from_slice(&body));
                error = Some(whole);
            }
            backend::READY_FOR_QUERY => {
                note_ready(s, &body);
                return Ok(Err(error.unwrap_or_else(|| {
                    let mut e = BytesMut::new();
                    encode::error_response(
                        &mut e,
                        "ERROR",
                        "08P01",
                        "the shard did not start the COPY",
                    );
                    e
                })));
            }
            _ => {}
        }
    }
}
