//! An extended-protocol request (up to its Sync) whose statements are on several shards (a
//! driver's `executemany`): each Bind and Execute sent to its statement's shard, every shard in
//! a transaction of pgcorral's, committed atomically, and the answers put back in the client's
//! order, as one server's implicit transaction would give them (up to the first error).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use pgwire::backend::{self, TxStatus};
use pgwire::frontend::{self, cstr, BindBody};
use pgwire::header::HEADER_LEN;
use pgwire::{encode, Header};

use super::fanout::{
    answer_error, answer_raw, counted, note_ready, read_server, send, whole, Aimed,
};
use super::insert::keep_parse;
use super::{spanning, statements, Attach, Link};
use crate::client_conn::ClientConn;
use crate::error::{Error, Kind, Result};
use crate::pool::Checkout;
use crate::prepared::{Registry, Source, Statement};
use crate::route::shard::request_len;

/// Bytes of the shards' answers pgcorral holds at most before the client gets them.
const MAX_ANSWERS: usize = 64 << 20;

const SHAPE: &str = "a request whose statements are on several shards is split between them when it holds only Parse, Bind, Describe and Execute messages (Describe and Execute of the portal just bound), up to one Sync";

/// What one message sent to a shard is answered with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// ParseComplete, BindComplete, a portal's RowDescription or NoData: one message.
    One,
    /// A statement's ParameterDescription, then its RowDescription or NoData.
    Two,
    /// DataRows up to a CommandComplete, EmptyQueryResponse or PortalSuspended.
    Rows,
}

/// One message sent to a shard: how it is answered, and the client's message it answers
/// (`None`: pgcorral's own, hidden).
struct Sent {
    answer: Answer,
    client: Option<usize>,
}

/// What one client message got.
enum Got {
    Answer(BytesMut),
    Error(BytesMut),
}

/// Runs the client's request (at the front of its buffer), outside a transaction, each Bind's
/// statement on its shards in `shards` (in the order of the Binds: one, or every shard for an
/// UPDATE or DELETE whose row counts are summed), and answers it.
pub async fn pipeline(
    client: &mut ClientConn,
    at: &Attach<'_>,
    registry: &Registry,
    shards: &[Vec<usize>],
) -> Result<()> {
    let (request, involved) = take(client, shards)?;
    let plan = match plan(
        (client, registry, at.max_prepared),
        &request,
        shards,
        &involved,
    ) {
        Ok(p) => p,
        Err(msg) => return answer_error(client, "0A000", &msg).await,
    };
    let mut fanout = at.shards(involved.iter().copied()).await?;
    let _aimed = Aimed::at(at.slot, fanout.servers());
    let mut servers: Vec<&mut Checkout> = fanout.servers().iter_mut().collect();
    let (mut out, error) = exchange(&plan, &mut servers, at.max_prepared).await?;
    drop(servers);
    keep_parses(client, registry, &plan, error.as_ref().map(|e| e.0));
    if let Some((_, _, e)) = error {
        fanout.abort().await;
        out.extend_from_slice(&e);
        return answer_raw(client, &out, true).await;
    }
    if let Err(e) = fanout.commit().await? {
        out.extend_from_slice(&e);
        return answer_raw(client, &out, true).await;
    }
    encode::ready_for_query(&mut out, TxStatus::Idle);
    client.reply(&out).await
}

/// [`pipeline`] inside the client's transaction, now on `shard` in `link`: it spreads to each
/// shard the request needs (`begin` run there first), nothing is committed, and an error fails
/// the transaction (the failed shard's server becomes the current one, so that the client's
/// next requests are refused as PostgreSQL refuses them).
pub async fn in_transaction(
    client: &mut ClientConn,
    at: &Attach<'_>,
    registry: &Registry,
    (shards, shard): (&[Vec<usize>], usize),
    (link, begin): (&mut Link, &str),
) -> Result<usize> {
    let (request, involved) = take(client, shards)?;
    let plan = match plan(
        (client, registry, at.max_prepared),
        &request,
        shards,
        &involved,
    ) {
        Ok(p) => p,
        Err(msg) => {
            spanning::refuse(client, link, "0A000", &msg).await?;
            return Ok(shard);
        }
    };
    let spanning = spanning::join(link, at, shard, (&involved, begin)).await?;
    let mut servers = spanning.servers(&involved);
    let (mut out, error) = exchange(&plan, &mut servers, at.max_prepared).await?;
    drop(servers);
    keep_parses(client, registry, &plan, error.as_ref().map(|e| e.0));
    if let Some((_, _, e)) = &error {
        out.extend_from_slice(e);
    }
    let failed = error.is_some();
    spanning.answer(client, at.slot, out, (failed, true)).await
}

/// The request at the front of the client's buffer, taken out, and the shards it involves.
fn take(client: &mut ClientConn, shards: &[Vec<usize>]) -> Result<(BytesMut, Vec<usize>)> {
    let Some(len) = request_len(client) else {
        return Err(Error::new(Kind::ClientProtocol, "the request is not whole"));
    };
    let mut involved: Vec<usize> = shards.iter().flatten().copied().collect();
    involved.sort_unstable();
    involved.dedup();
    Ok((client.buf.split_to(len), involved))
}

/// The client's Parses took effect up to its first failed message (`failed`), as on one server.
fn keep_parses(client: &mut ClientConn, registry: &Registry, plan: &Plan, failed: Option<usize>) {
    let answered = failed.unwrap_or(plan.messages);
    for (i, name, rest) in &plan.parses {
        keep_parse(client, registry, name, rest, *i < answered);
    }
}

/// Sends each server its part and reads the answers: the client's, in its order, up to the
/// first error, and that error (the client's message it answers, the server's index, the
/// error itself).
async fn exchange(
    plan: &Plan,
    servers: &mut [&mut Checkout],
    max: usize,
) -> Result<(BytesMut, Option<(usize, usize, BytesMut)>)> {
    // Each server's answers to what makes its statements ready, pgcorral's own.
    let mut readied = Vec::with_capacity(servers.len());
    for ((s, (bytes, _)), needs) in servers.iter_mut().zip(&plan.sends).zip(&plan.needs) {
        let mut out = BytesMut::new();
        let prelude = statements::ready(&mut s.statements, needs, max, &mut out);
        out.extend_from_slice(bytes);
        send(s, &out).await?;
        readied.push(prelude.unwrap_or_default());
    }
    let mut got: HashMap<usize, (usize, Got)> = HashMap::new();
    let mut held = 0usize;
    for (k, (s, (_, sent))) in servers.iter_mut().zip(&plan.sends).enumerate() {
        let own: Vec<Sent> = (0..readied[k].answers())
            .map(|_| Sent {
                answer: Answer::One,
                client: None,
            })
            .collect();
        let mut next = own.iter().chain(sent);
        let mut current: Option<(&Sent, BytesMut, u8)> = None;
        // Answers to the prelude read so far (they come first).
        let mut ran = 0;
        loop {
            let (tag, body) = read_server(s).await?;
            held += body.len() + HEADER_LEN;
            let prelude = matches!(tag, backend::PARSE_COMPLETE | backend::CLOSE_COMPLETE);
            if prelude && ran < own.len() {
                ran += 1;
            }
            match tag {
                backend::READY_FOR_QUERY => {
                    note_ready(s, &body);
                    break;
                }
                backend::NOTICE_RESPONSE
                | backend::PARAMETER_STATUS
                | backend::NOTIFICATION_RESPONSE => continue,
                backend::ERROR_RESPONSE => {
                    readied[k].failed_after(&mut s.statements, ran);
                    let at = match current.take() {
                        Some((m, _, _)) => m.client,
                        None => next.next().and_then(|m| m.client),
                    };
                    // Answered to pgcorral's own message, it is the client's next one's.
                    let at = at.or_else(|| next.find_map(|m| m.client));
                    if let Some(i) = at {
                        // An error on any shard is the message's answer.
                        let first = got.get(&i).is_some_and(|(_, g)| matches!(g, Got::Error(_)));
                        if !first {
                            got.insert(i, (k, Got::Error(whole(tag, &body))));
                        }
                    }
                    continue;
                }
                _ => {}
            }
            let (m, mut bytes, count) = match current.take() {
                Some(c) => c,
                None => match next.next() {
                    Some(m) => (m, BytesMut::new(), 0),
                    None => continue,
                },
            };
            if m.client.is_some() && held <= MAX_ANSWERS {
                bytes.extend_from_slice(&whole(tag, &body));
            }
            let done = match m.answer {
                Answer::One => true,
                Answer::Two => count == 1,
                Answer::Rows => tag != backend::DATA_ROW,
            };
            if done {
                if let Some(i) = m.client {
                    match got.remove(&i) {
                        None => {
                            got.insert(i, (k, Got::Answer(bytes)));
                        }
                        // Another shard answered it too (a Bind and Execute run on several).
                        Some((j, Got::Answer(before))) => {
                            let both = match m.answer {
                                Answer::Rows => summed(before, &bytes),
                                _ => before,
                            };
                            got.insert(i, (j, Got::Answer(both)));
                        }
                        Some(error) => {
                            got.insert(i, error);
                        }
                    }
                }
            } else {
                current = Some((m, bytes, count + 1));
            }
        }
    }
    // The client's answers in its order, up to the first error.
    let mut out = BytesMut::new();
    for i in 0..plan.messages {
        match got.remove(&i) {
            Some((_, Got::Answer(b))) => out.extend_from_slice(&b),
            Some((k, Got::Error(e))) => return Ok((out, Some((i, k, e)))),
            None => {}
        }
    }
    if held > MAX_ANSWERS {
        let mut e = BytesMut::new();
        encode::error_response(
            &mut e,
            "ERROR",
            "54000",
            "the answers to a request split between shards exceed what pgcorral holds (64 MiB)",
        );
        return Ok((out, Some((plan.messages, 0, e))));
    }
    Ok((out, None))
}

/// What each involved shard is sent, the statements it binds by name (prepared once on its
/// server: [`statements::ready`]), and the client's Parses (their message, name and body).
struct Plan {
    sends: Vec<(BytesMut, Vec<Sent>)>,
    needs: Vec<Vec<Arc<Statement>>>,
    parses: Vec<(usize, Vec<u8>, Vec<u8>)>,
    /// The client's messages before its Sync.
    messages: usize,
}

/// Splits `request` between `involved` shards (sorted; the first answers Parses and a
/// statement's Describe).
fn plan(
    (client, registry, max): (&ClientConn, &Registry, usize),
    request: &[u8],
    shards: &[Vec<usize>],
    involved: &[usize],
) -> std::result::Result<Plan, String> {
    let shape = || SHAPE.to_string();
    let mut p = Planner {
        client,
        registry,
        max,
        involved,
        sends: involved
            .iter()
            .map(|_| (BytesMut::new(), Vec::new()))
            .collect(),
        needs: involved.iter().map(|_| Vec::new()).collect(),
        unnamed_on: involved.iter().map(|_| None).collect(),
        parses: Vec::new(),
        named: Vec::new(),
        unnamed: client
            .statements
            .unnamed()
            .map(|b| (Bytes::copy_from_slice(b), None)),
        portal: None,
        i: 0,
    };
    let mut binds = shards.iter();
    let mut pos = 0;
    let mut synced = false;
    while pos < request.len() {
        let h = Header::parse(&request[pos..], u32::MAX)
            .ok()
            .flatten()
            .filter(|h| h.total_len() <= request.len() - pos)
            .ok_or_else(shape)?;
        let body = &request[pos + HEADER_LEN..pos + h.total_len()];
        pos += h.total_len();
        if synced {
            return Err(shape());
        }
        match h.tag {
            frontend::PARSE => p.parse(body),
            frontend::BIND => p.bind(body, binds.next().ok_or_else(shape)?),
            frontend::DESCRIBE => p.describe(body),
            frontend::EXECUTE => p.execute(body),
            frontend::SYNC => {
                synced = true;
                continue;
            }
            _ => None,
        }
        .ok_or_else(shape)?;
        p.i += 1;
    }
    if binds.next().is_some() || !synced {
        return Err(shape());
    }
    for (out, _) in p.sends.iter_mut() {
        encode::sync(out);
    }
    Ok(Plan {
        sends: p.sends,
        needs: p.needs,
        parses: p.parses,
        messages: p.i,
    })
}

/// [`plan`]'s state as it reads the client's messages; each step is `None` when the request
/// is not of the shape that can be split ([`SHAPE`]).
struct Planner<'a> {
    client: &'a ClientConn,
    registry: &'a Registry,
    /// max_prepared_statements: a shard binds at most this many statements by name in one
    /// request (the others are parsed as its unnamed one).
    max: usize,
    involved: &'a [usize],
    sends: Vec<(BytesMut, Vec<Sent>)>,
    /// The statements each shard binds by name.
    needs: Vec<Vec<Arc<Statement>>>,
    /// The client's statement each shard's unnamed statement was last parsed from in this
    /// request ([`Version`]); `None`: not known.
    unnamed_on: Vec<Option<Version>>,
    parses: Vec<(usize, Vec<u8>, Vec<u8>)>,
    /// Statements parsed in this request, by name, with the message that parsed them, and the
    /// unnamed one (with its message, `None`: parsed before this request).
    named: Vec<(Vec<u8>, Bytes, usize)>,
    unnamed: Option<(Bytes, Option<usize>)>,
    /// The portal last bound, and the indexes of its shards in `involved`.
    portal: Option<(Vec<u8>, Vec<usize>)>,
    /// The client's message being planned.
    i: usize,
}

/// Which of the client's statements, as parsed where: its name and the message of this
/// request that parsed it (`None`: before it). A shard whose unnamed statement was parsed from
/// it binds it again without parsing it again, as one server binds the client's statement.
type Version = (Vec<u8>, Option<usize>);

/// A statement a Bind or Describe names: its Parse body (after the name), the message of this
/// request that parsed it, and the client's statement when it was kept before this request.
struct Named {
    body: Bytes,
    parsed_at: Option<usize>,
    kept: Option<Arc<Statement>>,
}

impl Planner<'_> {
    /// A statement's text: parsed in this request, else kept for the client.
    fn text_of(&self, name: &[u8]) -> Option<Named> {
        if name.is_empty() {
            let (body, parsed_at) = self.unnamed.clone()?;
            return Some(Named {
                body,
                parsed_at,
                kept: None,
            });
        }
        if let Some((_, b, at)) = self.named.iter().rev().find(|(n, _, _)| n == name) {
            return Some(Named {
                body: b.clone(),
                parsed_at: Some(*at),
                kept: None,
            });
        }
        let stmt = self.client.statements.named(name)?;
        match &stmt.source {
            Source::Parse(b) => Some(Named {
                body: b.clone(),
                parsed_at: None,
                kept: Some(stmt.clone()),
            }),
            Source::Sql(_) => None,
        }
    }

    /// Records a message sent to the shard at `k`.
    fn push(&mut self, k: usize, answer: Answer, client: Option<usize>) {
        self.sends[k].1.push(Sent { answer, client });
    }

    /// The name shard `k` binds the statement `name` (`named`) under: the planned form of a
    /// statement kept before this request, prepared once on the shard's server, while the
    /// shard binds fewer than `max` by name; else its unnamed statement, parsed there (hidden)
    /// unless it already holds this version of it.
    fn bound_as(&mut self, k: usize, name: &[u8], named: &Named) -> Vec<u8> {
        if let Some(kept) = named.kept.as_ref().filter(|s| s.runs.is_none()) {
            let needs = &self.needs[k];
            let here = needs.iter().find(|f| f.text() == &named.body[..]).cloned();
            let form = match here {
                Some(f) => Some(f),
                None if self.max == 0 || needs.len() < self.max => {
                    let f = self.registry.form(kept, &named.body);
                    self.needs[k].push(f.clone());
                    Some(f)
                }
                None => None,
            };
            if let Some(f) = form {
                return f.name.clone().into_bytes();
            }
        }
        let version = (name.to_vec(), named.parsed_at);
        if self.unnamed_on[k].as_ref() != Some(&version) {
            encode::parse(&mut self.sends[k].0, b"", &named.body);
            self.push(k, Answer::One, None);
            self.unnamed_on[k] = Some(version);
        }
        Vec::new()
    }

    /// A Parse goes (unnamed) to the first shard, which answers it; it is kept for the Binds.
    fn parse(&mut self, body: &[u8]) -> Option<()> {
        let (name, rest) = cstr(body)?;
        if !name.is_empty()
            && (self.client.statements.named(name).is_some()
                || self.named.iter().any(|(n, _, _)| n == name))
        {
            return None;
        }
        let rest = Bytes::copy_from_slice(rest);
        encode::parse(&mut self.sends[0].0, b"", &rest);
        self.push(0, Answer::One, Some(self.i));
        self.unnamed_on[0] = Some((name.to_vec(), Some(self.i)));
        self.parses.push((self.i, name.to_vec(), rest.to_vec()));
        if name.is_empty() {
            self.unnamed = Some((rest, Some(self.i)));
        } else {
            self.named.push((name.to_vec(), rest, self.i));
        }
        Some(())
    }

    /// A Bind goes to its shards, bound there by name or after a hidden Parse of its
    /// statement ([`Planner::bound_as`]); the client gets one BindComplete.
    fn bind(&mut self, body: &[u8], shards: &[usize]) -> Option<()> {
        let bind = BindBody::parse(body)?;
        let named = self.text_of(bind.statement)?;
        let mut ks = Vec::with_capacity(shards.len());
        for shard in shards {
            let k = self.involved.iter().position(|s| s == shard)?;
            let name = self.bound_as(k, bind.statement, &named);
            encode::bind(&mut self.sends[k].0, b"", &name, &[bind.after_names]);
            self.push(k, Answer::One, Some(self.i));
            ks.push(k);
        }
        self.portal = Some((bind.portal.to_vec(), ks));
        Some(())
    }

    /// A statement's Describe goes to the first shard (as it binds it); a portal's to the
    /// portal's shard.
    fn describe(&mut self, body: &[u8]) -> Option<()> {
        let (&kind, rest) = body.split_first()?;
        let (name, _) = cstr(rest)?;
        match kind {
            b'S' => {
                let named = self.text_of(name)?;
                let as_named = self.bound_as(0, name, &named);
                encode::describe(&mut self.sends[0].0, b'S', &as_named);
                self.push(0, Answer::Two, Some(self.i));
            }
            b'P' => {
                // Its first shard describes it (each would alike).
                let k = *self.portal_shards(name)?.first()?;
                encode::describe(&mut self.sends[k].0, b'P', b"");
                self.push(k, Answer::One, Some(self.i));
            }
            _ => return None,
        }
        Some(())
    }

    /// An Execute of the portal just bound goes to its shards (asking all its rows when it
    /// has several, whose answers are summed).
    fn execute(&mut self, body: &[u8]) -> Option<()> {
        let (name, rest) = cstr(body)?;
        let ks = self.portal_shards(name)?.to_vec();
        if ks.len() > 1 && rest.get(..4)? != [0, 0, 0, 0] {
            return None;
        }
        for k in ks {
            encode::message(&mut self.sends[k].0, frontend::EXECUTE, |b| {
                b.extend_from_slice(&[0]);
                b.extend_from_slice(rest);
            });
            self.push(k, Answer::Rows, Some(self.i));
        }
        Some(())
    }

    fn portal_shards(&self, name: &[u8]) -> Option<&[usize]> {
        match &self.portal {
            Some((p, ks)) if p == name => Some(ks),
            _ => None,
        }
    }
}

/// One Execute's answers from two shards as one: the rows of both, and the first's command tag
/// with the row counts summed (`UPDATE 3` and `UPDATE 4`: `UPDATE 7`).
fn summed(first: BytesMut, second: &[u8]) -> BytesMut {
    let (rows_a, end_a) = split_end(&first);
    let (rows_b, end_b) = split_end(second);
    let mut out = BytesMut::with_capacity(first.len() + second.len());
    out.extend_from_slice(rows_a);
    out.extend_from_slice(rows_b);
    match (tag_count(end_a), tag_count(end_b)) {
        (Some((prefix, a)), Some((_, b))) => {
            encode::command_complete(&mut out, &format!("{prefix} {}", a + b))
        }
        _ => out.extend_from_slice(end_a),
    }
    out
}

/// A whole CommandComplete message's tag split before its row count ([`counted`]).
fn tag_count(end: &[u8]) -> Option<(&str, u64)> {
    match end.first() {
        Some(&backend::COMMAND_COMPLETE) => counted(end.get(HEADER_LEN..)?),
        _ => None,
    }
}

/// An Execute's answer split before its last message (the one that ends it).
fn split_end(answer: &[u8]) -> (&[u8], &[u8]) {
    let mut pos = 0;
    let mut last = 0;
    while let Some(h) = Header::parse(&answer[pos..], u32::MAX).ok().flatten() {
        if h.total_len() > answer.len() - pos {
            break;
        }
        last = pos;
        pos += h.total_len();
    }
    answer.split_at(last)
}
