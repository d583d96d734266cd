//! A read across shards through the extended protocol: the client's Parse, Bind, Describes and
//! Execute (up to its Sync) become each shard's unnamed statement of the planned text, bound
//! with the client's values, and the shards' answers to them become the client's.

use std::sync::Arc;

use bytes::BytesMut;
use pgwire::backend;
use pgwire::frontend::{self, cstr, BindBody};
use pgwire::header::HEADER_LEN;
use pgwire::{encode, Header};

use super::super::fanout::{read_server, send, whole};
use super::super::insert::keep_parse;
use super::super::statements::{self, Prelude};
use super::describe::first_fields;
use super::Head;
use crate::client_conn::ClientConn;
use crate::error::Result;
use crate::pool::Checkout;
use crate::prepared::{param_types, Registry, Source, Statement};
use crate::shard::gather::count::count_value;
use crate::shard::gather::{Gather, Merge};

const SHAPE: &str = "a read across shards through the extended protocol is answered when its request holds one Bind of the statement, its Execute, and at most a Parse and Describes of them, up to a Sync";

/// One of the client's messages, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Message {
    Parse,
    /// Describe of the statement.
    Statement,
    Bind,
    /// Describe of the portal.
    Portal,
    Execute,
}

/// Why pgcorral answers a request itself: the SQLSTATE and message of its error.
pub(in crate::link) type Refused = (&'static str, String);

/// The client's request, read, and what each shard is sent for it.
#[derive(Clone)]
pub(in crate::link) struct Request {
    messages: Vec<Message>,
    /// The client's Parses: each statement's name and body after it.
    parses: Vec<(Vec<u8>, Vec<u8>)>,
    /// The Parse body (after the name) the shards parse: the planned text, the client's
    /// parameter types.
    parse: Vec<u8>,
    /// The client's Bind after its portal and statement names, up to its result formats.
    bind_values: Vec<u8>,
    /// The client's result formats (count and codes).
    results: Vec<u8>,
    /// What the first shard is sent (it also describes the statement when the client asked).
    first: BytesMut,
    /// What the other shards are sent.
    others: BytesMut,
    /// Rows the client's Execute asked at most (0: all).
    pub max_rows: u32,
    /// The LIMIT the client's values gave (`LIMIT $n`), if any.
    pub limit: Option<u64>,
    /// The OFFSET the client's values gave (`OFFSET $n`), if any.
    pub offset: Option<u64>,
    /// The planned text's columns the client gets.
    cut: Cut,
    /// The statement the shards bind by name: the planned form of a statement the client
    /// prepared before this request ([`Registry::form`]), prepared once on each shard's
    /// server; `None`: the planned text is parsed as each shard's unnamed statement.
    form: Option<Arc<Statement>>,
    /// The client's result formats do not fit its columns: the shards' error says so with
    /// their column count (hidden columns too), the client's with its own (the shards' message,
    /// the client's).
    misfit: Option<(String, String)>,
}

/// How far a shard's answer went before its rows: its statement parsed (and described: the
/// ParameterDescription and the RowDescription or NoData) and bound.
#[derive(Default)]
pub(in crate::link) struct Opened {
    parsed: bool,
    statement: Option<(BytesMut, BytesMut)>,
    bound: bool,
}

impl Request {
    /// Reads the client's request (`bytes`, up to its Sync) for the shards to run as `plan`
    /// says; `Err`: the message of pgcorral's refusal.
    pub fn read(
        client: &ClientConn,
        (bytes, registry): (&[u8], &Registry),
        plan: &Rewritten<'_>,
    ) -> std::result::Result<Request, Refused> {
        let shape = || ("0A000", SHAPE.to_string());
        let mut messages = Vec::new();
        let mut parses: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        // The bound statement's name and the Parse body it was made of; the portal.
        let mut bound: Option<(Vec<u8>, Vec<u8>, Vec<u8>)> = None;
        let mut described: Option<Vec<u8>> = None;
        let mut bind_values: Option<(Vec<u8>, Vec<u8>)> = None;
        let mut misfit = None;
        // The client's statement the Bind names, prepared before this request.
        let mut kept: Option<Arc<Statement>> = None;
        let mut max_rows = None;
        let mut limit = None;
        let mut offset = None;
        let mut pos = 0;
        let mut synced = false;
        while pos < bytes.len() {
            let h = Header::parse(&bytes[pos..], u32::MAX)
                .ok()
                .flatten()
                .filter(|h| h.total_len() <= bytes.len() - pos)
                .ok_or_else(shape)?;
            let body = &bytes[pos + HEADER_LEN..pos + h.total_len()];
            pos += h.total_len();
            if synced {
                return Err(shape());
            }
            let portal_is = |name: &[u8]| matches!(&bound, Some((_, _, p)) if p == name);
            let message = match h.tag {
                frontend::PARSE if bound.is_none() => {
                    let (name, rest) = cstr(body).ok_or_else(shape)?;
                    let taken = client.statements.named(name).is_some()
                        || parses.iter().any(|(n, _)| n == name);
                    if !name.is_empty() && taken {
                        // PostgreSQL's answer to the Parse (the request goes no further).
                        let name = String::from_utf8_lossy(name);
                        let msg = format!("prepared statement \"{name}\" already exists");
                        return Err(("42P05", msg));
                    }
                    parses.retain(|(n, _)| n != name);
                    parses.push((name.to_vec(), rest.to_vec()));
                    Message::Parse
                }
                frontend::BIND if bound.is_none() => {
                    let bind = BindBody::parse(body).ok_or_else(shape)?;
                    // Only the bound statement's Parse reaches the shards (as planned): a Parse
                    // of another would go unchecked.
                    if parses.iter().any(|(n, _)| n != bind.statement) {
                        return Err(shape());
                    }
                    let parsed = parses.iter().find(|(n, _)| n == bind.statement);
                    let source = match parsed {
                        Some((_, rest)) => rest.clone(),
                        None => {
                            kept = client.statements.named(bind.statement).cloned();
                            statement(client, bind.statement).ok_or_else(shape)?
                        }
                    };
                    let results = bind.values_and_results().ok_or_else(shape)?.1;
                    misfit = format_misfit(results, plan.cut);
                    result_formats(results, plan.cut).ok_or_else(shape)?;
                    let before = &bind.after_names[..bind.after_names.len() - results.len()];
                    bind_values = Some((before.to_vec(), results.to_vec()));
                    let value = |i| bound_value(&bind, i, &source).map_err(|m| ("0A000", m));
                    limit = match plan.limit_param {
                        Some(i) => value(i)?,
                        None => None,
                    };
                    // OFFSET NULL skips none.
                    offset = match plan.offset_param {
                        Some(i) => Some(value(i)?.unwrap_or(0)),
                        None => None,
                    };
                    bound = Some((bind.statement.to_vec(), source, bind.portal.to_vec()));
                    Message::Bind
                }
                frontend::DESCRIBE => {
                    let (&kind, rest) = body.split_first().ok_or_else(shape)?;
                    let (name, _) = cstr(rest).ok_or_else(shape)?;
                    match kind {
                        b'S' if described.is_none() => {
                            described = Some(name.to_vec());
                            Message::Statement
                        }
                        b'P' if portal_is(name) => Message::Portal,
                        _ => return Err(shape()),
                    }
                }
                frontend::EXECUTE if max_rows.is_none() => {
                    let (name, rest) = cstr(body).ok_or_else(shape)?;
                    let n = rest.get(..4).ok_or_else(shape)?;
                    if !portal_is(name) {
                        return Err(shape());
                    }
                    let n = i32::from_be_bytes([n[0], n[1], n[2], n[3]]);
                    max_rows = Some(u32::try_from(n).unwrap_or(0));
                    Message::Execute
                }
                frontend::SYNC => {
                    synced = true;
                    continue;
                }
                _ => return Err(shape()),
            };
            messages.push(message);
        }
        let (Some((statement, source, _)), Some(max_rows), Some((bind_values, results)), true) =
            (bound, max_rows, bind_values, synced)
        else {
            return Err(shape());
        };
        if described.is_some_and(|d| d != statement) {
            return Err(shape());
        }
        // The planned text with the client's parameter types.
        let (_, types) = cstr(&source).ok_or_else(shape)?;
        let mut parse = plan.text.as_bytes().to_vec();
        parse.push(0);
        parse.extend_from_slice(types);
        let form = kept
            .filter(|k| k.runs.is_none() && matches!(k.source, Source::Parse(_)))
            .map(|k| registry.form(&k, &parse));
        let mut request = Request {
            messages,
            parses,
            parse,
            bind_values,
            results,
            first: BytesMut::new(),
            others: BytesMut::new(),
            max_rows,
            limit,
            offset,
            cut: plan.cut,
            form,
            misfit,
        };
        request.build().ok_or_else(shape)?;
        Ok(request)
    }

    /// Writes what the first shard and the others are sent: the planned statement parsed
    /// (unless bound by name), described for the first when the client asked, bound with the
    /// client's values (result formats as [`result_formats`] gives them), its portal
    /// described and executed, and a Sync. `None`: the result formats cannot be read.
    fn build(&mut self) -> Option<()> {
        let formats = result_formats(&self.results, self.cut)?;
        let name = self.form.as_ref().map_or(&b""[..], |f| f.name.as_bytes());
        let mut first = BytesMut::new();
        let mut others = BytesMut::new();
        for (out, describes) in [
            (&mut first, self.messages.contains(&Message::Statement)),
            (&mut others, false),
        ] {
            if self.form.is_none() {
                encode::parse(out, b"", &self.parse);
            }
            if describes {
                encode::describe(out, b'S', name);
            }
            encode::bind(out, b"", name, &[&self.bind_values, &formats]);
            encode::describe(out, b'P', b"");
            encode::message(out, frontend::EXECUTE, |b| {
                b.extend_from_slice(&[0, 0, 0, 0, 0])
            });
            encode::sync(out);
        }
        self.first = first;
        self.others = others;
        Some(())
    }

    /// This request of an UPDATE that moves rows and returns the client's `RETURNING`
    /// columns (`visible` of them) before `hidden` of pgcorral's (`ctid, *`): those asked in
    /// text, the client's in its formats, the descriptions cut to the client's columns.
    /// `None`: the result formats cannot be read.
    pub fn returning(&self, visible: usize, hidden: usize) -> Option<Request> {
        let mut r = self.clone();
        r.cut = Cut {
            visible: Some(visible),
            hidden,
            rows_hidden: false,
        };
        r.misfit = format_misfit(&r.results, r.cut);
        r.build()?;
        Some(r)
    }

    /// Sends a shard's server (`first`: the first shard's) its part, after the Parse of the
    /// statement it binds by name when the server lacks it ([`statements::ready`]); returns
    /// what was sent before it, for [`open`].
    async fn send_to(&self, s: &mut Checkout, first: bool, max: usize) -> Result<Prelude> {
        let Some(form) = &self.form else {
            send(s, self.sent(first)).await?;
            return Ok(Prelude::default());
        };
        let mut out = BytesMut::new();
        let prelude =
            statements::ready(&mut s.statements, std::slice::from_ref(form), max, &mut out)
                .unwrap_or_default();
        out.extend_from_slice(self.sent(first));
        send(s, &out).await?;
        Ok(prelude)
    }

    /// What a shard's answer has reached before it is read: with a statement bound by name,
    /// nothing of the client's request is parsed on the shards, so its Parses (of other
    /// statements) are answered unless the Bind fails.
    fn opened(&self) -> Opened {
        Opened {
            parsed: self.form.is_some(),
            ..Opened::default()
        }
    }

    /// The statement the shards run.
    pub fn text(&self) -> &str {
        let end = self.parse.iter().position(|&b| b == 0).unwrap_or(0);
        std::str::from_utf8(&self.parse[..end]).unwrap_or_default()
    }

    /// Whether the first shard is asked to describe the statement.
    pub fn describes(&self) -> bool {
        self.messages.contains(&Message::Statement)
    }

    /// What a shard is sent (`first`: the first shard's), after what [`Request::send_to`]
    /// sends first.
    fn sent(&self, first: bool) -> &[u8] {
        if first {
            &self.first
        } else {
            &self.others
        }
    }

    /// Keeps the client's Parses as PostgreSQL would have: those before the point its request
    /// failed at (`reached`).
    fn keep_parses(&self, client: &mut ClientConn, registry: &Registry, reached: &Opened) {
        for (name, rest) in &self.parses {
            keep_parse(client, registry, name, rest, reached.parsed);
        }
    }

    /// The answers to the client's messages before its rows, as far as the shards' went
    /// (`reached`); the statement's description is the first shard's (`first`), the portal's
    /// `described` (the shards' row description cut to the client's columns), `None` when the
    /// request failed before it.
    pub fn opening(
        &self,
        out: &mut BytesMut,
        reached: &Opened,
        first: &Opened,
        described: Option<&[u8]>,
    ) {
        for m in &self.messages {
            match m {
                Message::Parse if reached.parsed => {
                    encode::message(out, backend::PARSE_COMPLETE, |_| {})
                }
                Message::Statement => match &first.statement {
                    Some((parameters, rows)) if reached.parsed => {
                        out.extend_from_slice(parameters);
                        out.extend_from_slice(&self.client_columns(rows));
                    }
                    _ => return,
                },
                Message::Bind if reached.bound => {
                    encode::message(out, backend::BIND_COMPLETE, |_| {})
                }
                Message::Portal => match described {
                    Some(_) if self.cut.rows_hidden => {
                        encode::message(out, backend::NO_DATA, |_| {})
                    }
                    Some(d) => out.extend_from_slice(d),
                    None => return,
                },
                Message::Execute => {}
                _ => return,
            }
        }
    }

    /// A statement's RowDescription cut to the client's columns (or its NoData).
    pub fn client_columns(&self, rows: &BytesMut) -> BytesMut {
        let hidden = self.cut.hidden;
        if self.cut.rows_hidden {
            let mut none = BytesMut::new();
            encode::message(&mut none, backend::NO_DATA, |_| {});
            return none;
        }
        let columns = (rows.len() >= 7 && rows[0] == backend::ROW_DESCRIPTION)
            .then(|| i16::from_be_bytes([rows[5], rows[6]]))
            .and_then(|n| usize::try_from(n).ok());
        match columns {
            Some(n) if hidden > 0 && n > hidden => {
                first_fields(rows, n - hidden).unwrap_or_else(|| rows.clone())
            }
            _ => rows.clone(),
        }
    }
}

/// The statement the shards run for the client's: its text, and the columns it returns after
/// the client's.
pub(in crate::link) struct Rewritten<'a> {
    pub text: &'a str,
    /// Which of its columns are the client's.
    cut: Cut,
    /// The parameter whose value is the LIMIT (`LIMIT $n`).
    limit_param: Option<usize>,
    /// The parameter whose value is the OFFSET (`OFFSET $n`).
    offset_param: Option<usize>,
}

/// Which of the planned text's columns the client gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Cut {
    /// The client's columns, when pgcorral's follow them.
    visible: Option<usize>,
    /// Columns after the client's.
    hidden: usize,
    /// Every column is pgcorral's: asked in text, the client's statement described as NoData.
    rows_hidden: bool,
}

impl<'a> Rewritten<'a> {
    /// The text a read across shards is planned to run as.
    pub fn of(plan: &'a Gather) -> Rewritten<'a> {
        match &plan.merge {
            Merge::Grouped(g) if g.columns.len() > g.visible => Rewritten {
                text: &plan.text,
                cut: Cut {
                    visible: Some(g.visible),
                    hidden: g.columns.len() - g.visible,
                    rows_hidden: false,
                },
                limit_param: plan.limit_param,
                offset_param: plan.offset_param,
            },
            _ => Rewritten {
                limit_param: plan.limit_param,
                offset_param: plan.offset_param,
                ..Rewritten::as_is(&plan.text)
            },
        }
    }

    /// The client's own statement `text`, as it is.
    pub fn as_is(text: &'a str) -> Rewritten<'a> {
        Rewritten {
            text,
            cut: Cut::default(),
            limit_param: None,
            offset_param: None,
        }
    }

    /// An UPDATE that moves rows between shards, rewritten to return them (`text`) for
    /// pgcorral alone.
    pub fn moving(text: &'a str) -> Rewritten<'a> {
        Rewritten {
            cut: Cut {
                rows_hidden: true,
                ..Cut::default()
            },
            ..Rewritten::as_is(text)
        }
    }
}

/// The LIMIT or OFFSET the Bind's parameter `i` gives, as PostgreSQL reads it from the type
/// the statement's Parse body (`source`) declares for it ([`count_value`]): `None` for NULL
/// or a negative value (the shards refuse it as PostgreSQL does); `Err`: pgcorral's refusal.
fn bound_value(
    bind: &BindBody<'_>,
    i: usize,
    source: &[u8],
) -> std::result::Result<Option<u64>, String> {
    let unread = || SHAPE.to_string();
    // Not declared (0) when the Parse gives fewer types than `i`.
    let declared = cstr(source)
        .and_then(|(_, types)| param_types(types))
        .and_then(|types| types.get(i).copied())
        .unwrap_or(0);
    let value = bind.param(i).ok_or_else(unread)?;
    let format = bind.format(i).ok_or_else(unread)?;
    Ok(count_value(declared, format, value)?.and_then(|n| u64::try_from(n).ok()))
}

/// The Parse body (after the name) of the client's prepared statement `name` (`b""`: its
/// unnamed one).
fn statement(client: &ClientConn, name: &[u8]) -> Option<Vec<u8>> {
    if name.is_empty() {
        return client.statements.unnamed().map(<[u8]>::to_vec);
    }
    match &client.statements.named(name)?.source {
        Source::Parse(b) => Some(b.to_vec()),
        Source::Sql(_) => None,
    }
}

/// The result format codes (count and codes) the shards are sent for the client's `results`:
/// the client's for its columns, text for the hidden ones; `None` when they cannot be read.
fn result_formats(results: &[u8], plan: Cut) -> Option<Vec<u8>> {
    if plan.rows_hidden {
        // Every column in text.
        return Some(vec![0, 0]);
    }
    let hidden = plan.hidden;
    let count = usize::from(u16::from_be_bytes([*results.first()?, *results.get(1)?]));
    let codes: Vec<u16> = (0..count)
        .map(|i| {
            Some(u16::from_be_bytes([
                *results.get(2 + 2 * i)?,
                *results.get(3 + 2 * i)?,
            ]))
        })
        .collect::<Option<_>>()?;
    let codes = match (&codes[..], plan.visible) {
        // All text, or no hidden columns: as the client sent them.
        ([], _) | ([0], _) => codes,
        _ if hidden == 0 => codes,
        ([code], Some(visible)) => {
            let mut all = vec![*code; visible];
            all.resize(visible + hidden, 0);
            all
        }
        (many, _) => {
            let mut all = many.to_vec();
            all.resize(many.len() + hidden, 0);
            all
        }
    };
    let mut out = Vec::with_capacity(2 + 2 * codes.len());
    out.extend_from_slice(&u16::try_from(codes.len()).ok()?.to_be_bytes());
    for c in codes {
        out.extend_from_slice(&c.to_be_bytes());
    }
    Some(out)
}

/// PostgreSQL's message for a Bind whose result formats are neither none, one, nor one per
/// column, as the shards give it (counting the hidden columns) and as the client's statement
/// would have it; `None` when the formats fit or nothing is hidden.
fn format_misfit(results: &[u8], plan: Cut) -> Option<(String, String)> {
    let visible = plan.visible?;
    let count = usize::from(u16::from_be_bytes([*results.first()?, *results.get(1)?]));
    if plan.hidden == 0 || count <= 1 || count == visible {
        return None;
    }
    let says = |formats: usize, columns: usize| {
        format!("bind message has {formats} result formats but query has {columns} columns")
    };
    Some((
        says(count + plan.hidden, visible + plan.hidden),
        says(count, visible),
    ))
}

/// The whole ErrorResponse `e` with its message `from` said as `to` (every other field as
/// it is); `None` when its message is another (a server speaking another language).
fn with_message(e: &[u8], from: &str, to: &str) -> Option<BytesMut> {
    let body = e.get(HEADER_LEN..)?;
    if backend::error_field(body, b'M')? != from.as_bytes() {
        return None;
    }
    let mut out = BytesMut::new();
    encode::error_with_fields(&mut out, body, |kind, _| {
        (kind == b'M').then(|| to.as_bytes().to_vec())
    });
    Some(out)
}

/// Sends each of `servers` its part of `request` (`max`: max_prepared_statements) and reads
/// each one's answer up to its portal's description ([`open`]; notices and parameter changes
/// of the first go to `out`), then keeps the client's Parses as far as the shards went: each
/// shard's head and how far it went, and the first that failed (whose answers, else the first
/// shard's, are the client's: each shard ran the client's messages alike).
pub(in crate::link) async fn open_all(
    client: &mut ClientConn,
    registry: &Registry,
    servers: &mut [&mut Checkout],
    (request, max): (&Request, usize),
    out: &mut BytesMut,
) -> Result<(Vec<Head>, Vec<Opened>, Option<usize>)> {
    let mut preludes = Vec::with_capacity(servers.len());
    for (i, s) in servers.iter_mut().enumerate() {
        preludes.push(request.send_to(s, i == 0, max).await?);
    }
    let mut heads = Vec::with_capacity(servers.len());
    let mut opened = Vec::with_capacity(servers.len());
    for (i, s) in servers.iter_mut().enumerate() {
        let asked = (request, &preludes[i]);
        let (h, o) = open(s, asked, (i == 0).then_some(&mut *out)).await?;
        heads.push(h);
        opened.push(o);
    }
    let failed = heads.iter().position(|h| matches!(h, Head::Failed(_)));
    request.keep_parses(client, registry, &opened[failed.unwrap_or(0)]);
    Ok((heads, opened, failed))
}

/// A shard's answer to `request` up to its portal's RowDescription (its head), and how far it
/// went; notices and parameter changes before it go to `out` (the first shard's, which
/// describes the statement when the client asked; the others' are dropped).
async fn open(
    s: &mut Checkout,
    (request, prelude): (&Request, &Prelude),
    mut out: Option<&mut BytesMut>,
) -> Result<(Head, Opened)> {
    let describes = out.is_some() && request.describes();
    let mut opened = request.opened();
    // Answers to the prelude read so far (they come first).
    let mut ran = 0;
    let mut parameters = None;
    loop {
        let (tag, body) = read_server(s).await?;
        let whole = || whole(tag, &body);
        match tag {
            backend::PARSE_COMPLETE | backend::CLOSE_COMPLETE if ran < prelude.answers() => {
                ran += 1
            }
            backend::PARSE_COMPLETE => opened.parsed = true,
            backend::PARAMETER_DESCRIPTION => parameters = Some(whole()),
            backend::ROW_DESCRIPTION | backend::NO_DATA
                if describes && opened.statement.is_none() =>
            {
                opened.statement = Some((parameters.take().unwrap_or_default(), whole()));
            }
            backend::BIND_COMPLETE => opened.bound = true,
            backend::ROW_DESCRIPTION => return Ok((Head::Rows(whole()), opened)),
            backend::ERROR_RESPONSE => {
                prelude.failed_after(&mut s.statements, ran);
                let e = whole();
                let e = match &request.misfit {
                    Some((shards, client)) => with_message(&e, shards, client).unwrap_or(e),
                    None => e,
                };
                return Ok((Head::Failed(e), opened));
            }
            backend::NO_DATA | backend::COMMAND_COMPLETE | backend::EMPTY_QUERY_RESPONSE => {
                return Ok((Head::Done, opened))
            }
            backend::NOTICE_RESPONSE | backend::PARAMETER_STATUS => {
                if let Some(out) = out.as_deref_mut() {
                    out.extend_from_slice(&whole());
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::gather::{Grouping, MAX_GROUPS};

    fn plan(visible: usize, hidden: usize) -> Gather {
        Gather {
            text: "SELECT".into(),
            merge: Merge::Grouped(Box::new(Grouping {
                columns: vec![None; visible + hidden],
                visible,
                having: None,
                order: Vec::new(),
            })),
            limit: None,
            offset: 0,
            limit_param: None,
            offset_param: None,
            max_groups: MAX_GROUPS,
        }
    }

    fn codes(c: &[u16]) -> Vec<u8> {
        let mut out = (c.len() as u16).to_be_bytes().to_vec();
        for c in c {
            out.extend_from_slice(&c.to_be_bytes());
        }
        out
    }

    #[test]
    fn hidden_columns_are_asked_in_text_and_the_clients_in_its_formats() {
        let p = plan(2, 1);
        let p = Rewritten::of(&p).cut;
        assert_eq!(result_formats(&codes(&[]), p), Some(codes(&[])));
        assert_eq!(result_formats(&codes(&[0]), p), Some(codes(&[0])));
        assert_eq!(result_formats(&codes(&[1]), p), Some(codes(&[1, 1, 0])));
        assert_eq!(result_formats(&codes(&[1, 0]), p), Some(codes(&[1, 0, 0])));
        let none = plan(2, 0);
        assert_eq!(
            result_formats(&codes(&[1]), Rewritten::of(&none).cut),
            Some(codes(&[1]))
        );
        assert_eq!(result_formats(&[0, 2, 0], p), None);
    }

    #[test]
    fn a_misfit_of_result_formats_is_told_with_the_clients_columns() {
        let p = plan(2, 1);
        let p = Rewritten::of(&p).cut;
        assert_eq!(format_misfit(&codes(&[1, 1]), p), None);
        assert_eq!(format_misfit(&codes(&[1]), p), None);
        let (shards, client) = format_misfit(&codes(&[1, 0, 1]), p).unwrap();
        assert_eq!(
            shards,
            "bind message has 4 result formats but query has 3 columns"
        );
        assert_eq!(
            client,
            "bind message has 3 result formats but query has 2 columns"
        );
        let mut e = BytesMut::new();
        encode::error_response(&mut e, "ERROR", "08P01", &shards);
        let told = with_message(&e, &shards, &client).unwrap();
        let mut want = BytesMut::new();
        encode::error_response(&mut want, "ERROR", "08P01", &client);
        assert_eq!(told, want);
        assert_eq!(with_message(&e, "another", &client), None);
    }
}
