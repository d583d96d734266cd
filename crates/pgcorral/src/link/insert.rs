//! An `INSERT ... VALUES` whose rows are on several shards (alone in its request, outside a
//! transaction; a simple Query, or Parse/Bind/Describe/Execute with its rows' values as
//! parameters): one INSERT per shard with that shard's rows and parameters, every shard in a
//! transaction, committed everywhere or rolled back everywhere, answered as one INSERT of all
//! the rows (its RETURNING rows too).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use pgwire::backend::{self, TxStatus};
use pgwire::frontend::{cstr, BindBody};
use pgwire::header::HEADER_LEN;
use pgwire::{encode, frontend, Header};

use super::fanout::{answer_error, answer_raw, note_ready, read_server, send, whole};
use super::{spanning, Attach, Link};
use crate::client_conn::ClientConn;
use crate::error::{Error, Kind, Result};
use crate::pool::Checkout;
use crate::prepared::{Registry, Source};
use crate::route::shard::request_len;
use crate::shard::insert::{parse_rest, split, subset, Part};

/// What each shard is sent (after its BEGIN) and which of its first answers the client sees.
struct Work {
    shards: Vec<usize>,
    sends: Vec<BytesMut>,
    /// Per shard, one entry per answer to a Parse, Bind or Describe it is sent before the
    /// INSERT runs: shown to the client (answers to the client's own messages, from the first
    /// shard) or hidden.
    slots: Vec<VecDeque<bool>>,
    /// The client's Parse (name, body after the name) and the place of its ParseComplete
    /// among the first shard's answers: the statement is the client's once that came.
    parse: Option<(Vec<u8>, Vec<u8>, usize)>,
}

/// Runs the client's INSERT (its whole request at the front of its buffer) whose rows go to
/// `rows`' shards, in order.
/// `escapes`: the client's standard_conforming_strings is off.
pub async fn insert(
    client: &mut ClientConn,
    at: &Attach<'_>,
    registry: &Registry,
    rows: Vec<usize>,
    escapes: bool,
) -> Result<()> {
    let work = match take_work(client, &rows, escapes)? {
        Ok(w) => w,
        Err((code, msg)) => return answer_error(client, code, &msg).await,
    };
    let mut fanout = at.shards(work.shards.iter().copied()).await?;
    let mut servers: Vec<&mut Checkout> = fanout.servers().iter_mut().collect();
    let done = exchange(&work, &mut servers).await?;
    drop(servers);
    if let Some((name, rest, slot)) = &work.parse {
        keep_parse(client, registry, name, rest, done.answered > *slot);
    }
    if let Some((_, error)) = done.failed {
        fanout.abort().await;
        let mut shown = done.shown;
        shown.extend_from_slice(&error);
        return answer_raw(client, &shown, true).await;
    }
    let mut out = done.shown.clone();
    if let Err(error) = fanout.commit().await? {
        out.extend_from_slice(&error);
        return answer_raw(client, &out, true).await;
    }
    done.answer(&mut out);
    encode::ready_for_query(&mut out, TxStatus::Idle);
    client.reply(&out).await
}

/// [`insert`] inside the client's transaction, now on `shard` in `link`: it spreads to the
/// rows' shards (`begin` run on each that joins), nothing is committed, and an error fails the
/// transaction (the failed shard's server becomes the current one). Returns the shard the
/// transaction is now on.
pub async fn in_transaction(
    client: &mut ClientConn,
    at: &Attach<'_>,
    (registry, escapes): (&Registry, bool),
    (rows, shard): (Vec<usize>, usize),
    (link, begin): (&mut Link, &str),
) -> Result<usize> {
    let work = match take_work(client, &rows, escapes)? {
        Ok(w) => w,
        Err((code, msg)) => {
            spanning::refuse(client, link, code, &msg).await?;
            return Ok(shard);
        }
    };
    let spanning = spanning::join(link, at, shard, (&work.shards, begin)).await?;
    let mut servers = spanning.servers(&work.shards);
    let done = exchange(&work, &mut servers).await?;
    drop(servers);
    if let Some((name, rest, slot)) = &work.parse {
        keep_parse(client, registry, name, rest, done.answered > *slot);
    }
    let mut out = done.shown.clone();
    match &done.failed {
        Some((_, error)) => out.extend_from_slice(error),
        None => done.answer(&mut out),
    }
    let failed = done.failed.is_some();
    spanning.answer(client, at.slot, out, (failed, true)).await
}

/// The client's INSERT request (at the front of its buffer), taken out and split into each
/// shard's part (`Ok(Err(_))`: refused, with its SQLSTATE and message).
fn take_work(
    client: &mut ClientConn,
    rows: &[usize],
    escapes: bool,
) -> Result<std::result::Result<Work, Refusal>> {
    let Some(len) = request_len(client) else {
        return Err(Error::new(
            Kind::ClientProtocol,
            "the INSERT request is not whole",
        ));
    };
    let request = client.buf.split_to(len);
    Ok(if request.first() == Some(&frontend::QUERY) {
        // A simple Query drops the unnamed statement, as PostgreSQL's does.
        client.statements.drop_unnamed();
        simple(&request, rows, escapes)
    } else {
        extended(client, &request, rows, escapes)
    })
}

/// What the shards answered an INSERT split between them.
struct Exchanged {
    /// Answers to the client's own messages (from the first shard), in its order.
    shown: BytesMut,
    /// How many of the first shard's answers to its first messages came.
    answered: usize,
    described: Option<BytesMut>,
    data: BytesMut,
    total: u64,
    tag_prefix: String,
    /// The first error, and the index of the server that sent it.
    failed: Option<(usize, BytesMut)>,
}

impl Exchanged {
    /// The INSERT's own answer: its RETURNING rows and `INSERT 0 n`.
    fn answer(&self, out: &mut BytesMut) {
        out.extend_from_slice(self.described.as_deref().unwrap_or_default());
        out.extend_from_slice(&self.data);
        encode::command_complete(out, &format!("{} {}", self.tag_prefix, self.total));
    }
}

/// Sends each shard its part, one after the other, and reads its answers; stops at the first
/// shard that fails. Each shard's answers are kept until every shard has answered: a failure
/// on one leaves nothing of the others behind, and the client sees none of their rows.
async fn exchange(work: &Work, servers: &mut [&mut Checkout]) -> Result<Exchanged> {
    let mut done = Exchanged {
        shown: BytesMut::new(),
        answered: 0,
        described: None,
        data: BytesMut::new(),
        total: 0,
        tag_prefix: String::from("INSERT 0"),
        failed: None,
    };
    for (i, (s, (bytes, slots))) in servers
        .iter_mut()
        .zip(work.sends.iter().zip(&work.slots))
        .enumerate()
    {
        let mut slots = slots.clone();
        send(s, bytes).await?;
        loop {
            let (tag, body) = read_server(s).await?;
            let whole = || whole(tag, &body);
            match tag {
                backend::PARSE_COMPLETE
                | backend::BIND_COMPLETE
                | backend::PARAMETER_DESCRIPTION
                | backend::NO_DATA
                | backend::ROW_DESCRIPTION
                    if !slots.is_empty() =>
                {
                    if slots.pop_front() == Some(true) {
                        done.shown.extend_from_slice(&whole());
                    }
                    if i == 0 {
                        done.answered += 1;
                    }
                }
                backend::ROW_DESCRIPTION if done.described.is_none() => {
                    done.described = Some(whole())
                }
                backend::DATA_ROW => done.data.extend_from_slice(&whole()),
                backend::COMMAND_COMPLETE => {
                    let t = String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body))
                        .into_owned();
                    if let Some((prefix, n)) = t.rsplit_once(' ') {
                        done.total += n.parse::<u64>().unwrap_or(0);
                        done.tag_prefix = prefix.to_string();
                    }
                }
                backend::ERROR_RESPONSE => {
                    done.failed = done.failed.take().or_else(|| Some((i, whole())))
                }
                backend::READY_FOR_QUERY => {
                    note_ready(s, &body);
                    break;
                }
                _ => {}
            }
        }
        if done.failed.is_some() {
            break;
        }
    }
    Ok(done)
}

type Refusal = (&'static str, String);

/// A simple Query's INSERT: each shard gets its rows as a Query.
fn simple(request: &[u8], rows: &[usize], escapes: bool) -> std::result::Result<Work, Refusal> {
    let text = request
        .get(HEADER_LEN..)
        .and_then(frontend::query_text)
        .unwrap_or_default();
    let parts = split(text, rows, escapes).map_err(|m| ("0A000", m))?;
    let mut work = Work {
        shards: Vec::new(),
        sends: Vec::new(),
        slots: Vec::new(),
        parse: None,
    };
    for Part { shard, sql, .. } in parts {
        let mut q = BytesMut::new();
        encode::query(&mut q, &sql);
        work.shards.push(shard);
        work.sends.push(q);
        work.slots.push(VecDeque::new());
    }
    Ok(work)
}

/// One of the client's messages the first shard answers for it, in the client's order.
enum Step {
    Parse,
    Bind,
    Describe(u8),
}

const SHAPE: &str = "an INSERT whose rows are on several shards is split when its request is one Bind and one Execute (of every row), with at most a Parse and Describes of them, up to a Sync";

/// An extended-protocol INSERT. The first shard is sent the client's own Parse, Bind and
/// Describes (of the unnamed statement and portal) and answers them as PostgreSQL does,
/// errors included; then every shard runs its part as the unnamed statement with its own
/// parameters.
fn extended(
    client: &ClientConn,
    request: &[u8],
    rows: &[usize],
    escapes: bool,
) -> std::result::Result<Work, Refusal> {
    let shape = || ("0A000", SHAPE.to_string());
    let (parse, bind, steps) = shape_of(request).ok_or_else(shape)?;
    let stmt = bind.statement;
    // The statement bound: this request's Parse of it, or one the client parsed before.
    let original: Vec<u8> = match parse {
        Some((name, rest)) if name == stmt => rest.to_vec(),
        Some(_) => return Err(shape()),
        None if stmt.is_empty() => client.statements.unnamed().ok_or_else(shape)?.to_vec(),
        None => match client.statements.named(stmt).map(|s| &s.source) {
            Some(Source::Parse(b)) => b.to_vec(),
            _ => return Err(shape()),
        },
    };
    if let Some((name, _)) = parse.filter(|p| !p.0.is_empty()) {
        if client.statements.named(name).is_some() {
            return Err((
                "42P05",
                format!(
                    "prepared statement \"{}\" already exists",
                    String::from_utf8_lossy(name)
                ),
            ));
        }
    }
    let text = frontend::query_text(&original).unwrap_or_default();
    let parts = split(text, rows, escapes).map_err(|m| ("0A000", m))?;
    // The first shard answers the client's own messages.
    let (mut first, mut first_slots, parse_slot) =
        first_shard(&original, parse.is_none(), &steps, &bind);
    let mut work = Work {
        shards: Vec::new(),
        sends: Vec::new(),
        slots: Vec::new(),
        parse: parse
            .zip(parse_slot)
            .map(|((n, r), slot)| (n.to_vec(), r.to_vec(), slot)),
    };
    for (i, part) in parts.iter().enumerate() {
        let mut out = if i == 0 {
            std::mem::take(&mut first)
        } else {
            BytesMut::new()
        };
        let mut slots = if i == 0 {
            std::mem::take(&mut first_slots)
        } else {
            VecDeque::new()
        };
        let rest = parse_rest(&original, &part.sql, &part.params).ok_or_else(shape)?;
        encode::parse(&mut out, b"", &rest);
        let values = subset(&bind, &part.params).ok_or_else(shape)?;
        encode::message(&mut out, frontend::BIND, |b| b.extend_from_slice(&values));
        encode::message(&mut out, frontend::EXECUTE, |b| {
            b.extend_from_slice(&[0, 0, 0, 0, 0])
        });
        encode::sync(&mut out);
        slots.extend([false, false]);
        work.shards.push(part.shard);
        work.sends.push(out);
        work.slots.push(slots);
    }
    Ok(work)
}

/// An INSERT request's Parse (its name and the rest), Bind and the first shard's steps.
type Shape<'a> = (Option<(&'a [u8], &'a [u8])>, BindBody<'a>, Vec<Step>);

/// The parts of an extended-protocol INSERT request: its Parse (name and the rest), its Bind,
/// and the client's messages the first shard answers. `None` when the request is not of the
/// shape [`SHAPE`] names.
fn shape_of(request: &[u8]) -> Option<Shape<'_>> {
    let mut parse: Option<(&[u8], &[u8])> = None;
    let mut bind: Option<BindBody> = None;
    let mut steps = Vec::new();
    let mut executed = false;
    let mut pos = 0;
    while pos < request.len() {
        let h = Header::parse(&request[pos..], u32::MAX)
            .ok()
            .flatten()
            .filter(|h| h.total_len() <= request.len() - pos)?;
        let body = &request[pos + HEADER_LEN..pos + h.total_len()];
        pos += h.total_len();
        if executed && h.tag != frontend::SYNC {
            return None;
        }
        match h.tag {
            frontend::PARSE if parse.is_none() && bind.is_none() => {
                parse = Some(cstr(body)?);
                steps.push(Step::Parse);
            }
            frontend::BIND if bind.is_none() => {
                bind = Some(BindBody::parse(body)?);
                steps.push(Step::Bind);
            }
            frontend::DESCRIBE => {
                let (&kind, rest) = body.split_first()?;
                let (name, _) = cstr(rest)?;
                // A portal is described after the Bind that makes it, a statement as it is
                // parsed or bound here.
                let ok = match kind {
                    b'P' => bind.is_some_and(|b| b.portal == name),
                    b'S' => bind.map_or(parse.map(|p| p.0), |b| Some(b.statement)) == Some(name),
                    _ => false,
                };
                if !ok {
                    return None;
                }
                steps.push(Step::Describe(kind));
            }
            frontend::EXECUTE => {
                let (portal, rest) = cstr(body)?;
                let whole = rest == [0, 0, 0, 0];
                if bind.is_none_or(|b| b.portal != portal) || !whole {
                    return None;
                }
                executed = true;
            }
            frontend::SYNC => {}
            _ => return None,
        }
    }
    match (bind, executed) {
        (Some(bind), true) => Some((parse, bind, steps)),
        _ => None,
    }
}

/// What the first shard is sent for the client's own messages (a hidden Parse of the
/// statement first when the request has none), which of its answers are the client's, and
/// where the client's ParseComplete is among them.
fn first_shard(
    original: &[u8],
    hidden_parse: bool,
    steps: &[Step],
    bind: &BindBody<'_>,
) -> (BytesMut, VecDeque<bool>, Option<usize>) {
    let mut first = BytesMut::new();
    let mut first_slots = VecDeque::new();
    let mut parse_slot = None;
    if hidden_parse {
        encode::parse(&mut first, b"", original);
        first_slots.push_back(false);
    }
    for step in steps {
        match step {
            Step::Parse => {
                encode::parse(&mut first, b"", original);
                parse_slot = Some(first_slots.len());
                first_slots.push_back(true);
            }
            Step::Bind => {
                encode::bind(&mut first, b"", b"", &[bind.after_names]);
                first_slots.push_back(true);
            }
            Step::Describe(kind) => {
                encode::describe(&mut first, *kind, b"");
                first_slots.push_back(true);
                if *kind == b'S' {
                    first_slots.push_back(true);
                }
            }
        }
    }
    (first, first_slots, parse_slot)
}

/// The client's Parse took effect (`done`: its ParseComplete came) or not: its statement is
/// the client's, as PostgreSQL keeps it (a failed Parse of the unnamed statement leaves none).
pub(super) fn keep_parse(
    client: &mut ClientConn,
    registry: &Registry,
    name: &[u8],
    rest: &[u8],
    done: bool,
) {
    if name.is_empty() {
        if done {
            client.statements.set_unnamed(rest);
        } else {
            client.statements.drop_unnamed();
        }
    } else if done {
        let stmt = registry.fresh(Source::Parse(Bytes::copy_from_slice(rest)), None);
        client.statements.add_named(name, stmt);
    }
}
