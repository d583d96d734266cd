//! The relay's scans of the bytes it forwards: message headers and the few bodies that change
//! state (ReadyForQuery, ErrorResponse, the SQL of Query and Parse), what can be forwarded and
//! where the relay must stop, answer or hide something.

use pgwire::backend::{self, TxStatus};
use pgwire::frontend::{self, Kind as FeKind};
use pgwire::{FrameError, Header};

use super::{Outcome, Track};
use crate::pool::stats::Done;
use crate::prepared::expect::{stale_plan, Answers, Reworded};
use crate::prepared::replay::AtReady;
use crate::prepared::rewrite::{maybe_command, Link, Plan};
use crate::server::{LinkState, ServerParams};
use crate::session::exec;
use crate::session::hooks::HookMap;
use crate::session::scan::{classify, custom_names, Effect};

/// Moves `pos` over what is buffered of a passing body; false when the buffer ends inside it.
#[inline]
fn skip_body(len: usize, pos: &mut usize, pass: &mut usize) -> bool {
    let n = (*pass).min(len - *pos);
    *pos += n;
    *pass -= n;
    *pass == 0
}

/// What the server-side scan found.
#[derive(Default, Debug)]
pub struct ServerScan {
    /// Bytes at the start of the buffer that are dropped (answers hidden from the client).
    pub front: usize,
    /// Bytes from the start of the buffer up to which `front..ready` may be forwarded.
    pub ready: usize,
    /// Stopped where pgcorral must answer or hide something: scan again once `ready` is sent.
    pub again: bool,
    pub stop: Option<Outcome>,
    pub fatal: bool,
    /// A batch's stale-plan error was hidden: the batch is due to be sent again (see
    /// [`crate::prepared::replay`]).
    pub replay: bool,
    /// SQLSTATE classes of the errors seen (the first few), for statistics.
    pub errors: [[u8; 2]; 4],
    pub n_errors: usize,
    /// ReadyForQuery messages passed to the client (queries and transactions that ended).
    pub done: Done,
}

/// Scans server bytes: passes bodies, inspects ReadyForQuery and ErrorResponse. Stops after a
/// ReadyForQuery that leaves the link idle when `stop_when_idle`, or before one that opens a
/// transaction in statement mode.
#[allow(clippy::too_many_arguments)]
pub fn scan_server(
    buf: &[u8],
    pass: &mut usize,
    st: &mut LinkState,
    params: &mut ServerParams,
    stop_when_idle: bool,
    statement_mode: bool,
    max: u32,
    mut answers: Option<&mut Answers>,
) -> Result<ServerScan, FrameError> {
    let mut out = ServerScan::default();
    let mut pos = 0;
    let mut front = 0;
    // Only counted Queries are owed: their answers pass as they are, up to ReadyForQuery. Only
    // a ReadyForQuery changes that here (it is looked at again after each); a stale `false`
    // would merely take the general way.
    let mut counted = answers.as_deref().is_some_and(|a| a.expect.only_counted());
    loop {
        if !skip_body(buf.len(), &mut pos, pass) {
            break;
        }
        if counted {
            pos = pass_whole(buf, pos, max);
        }
        if let Some(a) = answers.as_deref_mut().filter(|_| !counted) {
            if a.expect.fake_next() {
                if pos > front {
                    out.again = true;
                    break;
                }
                while let Some(f) = a.expect.next_fake() {
                    f.encode(a.out);
                }
            }
        }
        let Some(h) = Header::parse(&buf[pos..], max)? else {
            break;
        };
        let mut hide = false;
        if let Some(a) = answers.as_deref_mut().filter(|_| !counted) {
            // Answers are matched whole (rows and COPY data only pass through).
            let streamed = h.tag == backend::DATA_ROW || h.tag == backend::COPY_DATA;
            if !streamed && buf.len() - pos < h.total_len() {
                break;
            }
            let msg = &buf[pos..];
            // pgcorral's own answer before this message, or instead of it (see `Reword`).
            let reworded = if streamed {
                Reworded::No
            } else {
                a.expect.reworded(h.tag, &msg[5..h.total_len()])
            };
            hide = reworded == Reworded::Instead || a.expect.hides(h.tag);
            let retry = match h.tag {
                backend::ERROR_RESPONSE => {
                    stale_plan(&msg[5..h.total_len()])
                        && a.expect
                            .replay
                            .retries(st, a.expect.head_is_clients_bind_or_query())
                }
                backend::READY_FOR_QUERY => {
                    let after = LinkState {
                        pending: st.pending.saturating_sub(1),
                        ..*st
                    };
                    a.expect.replay.hides_ready(&after)
                }
                _ => false,
            };
            hide |= retry;
            // A hidden error shown after all goes out just before its ReadyForQuery.
            let show = h.tag == backend::READY_FOR_QUERY && a.expect.replay.at_ready_pending();
            if (hide || show || reworded != Reworded::No) && pos > front {
                out.again = true;
                break;
            }
            if reworded != Reworded::No {
                if let Some(f) = a
                    .expect
                    .reword(h.tag, &msg[5..h.total_len()], a.client, a.server)
                {
                    f.encode(a.out);
                }
            }
            if retry && h.tag == backend::ERROR_RESPONSE {
                a.expect.replay.hide_error(&msg[..h.total_len()]);
            }
            if matches!(
                h.tag,
                backend::BIND_COMPLETE
                    | backend::DATA_ROW
                    | backend::COMMAND_COMPLETE
                    | backend::EMPTY_QUERY_RESPONSE
                    | backend::PORTAL_SUSPENDED
                    | backend::COPY_IN_RESPONSE
                    | backend::COPY_OUT_RESPONSE
                    | backend::COPY_BOTH_RESPONSE
            ) {
                a.expect.replay.progress();
            }
            if h.tag != backend::READY_FOR_QUERY {
                let body = if streamed {
                    &[][..]
                } else {
                    &msg[5..h.total_len()]
                };
                a.expect.answer(h.tag, body, a.server, a.client, a.registry);
            }
        }
        match h.tag {
            backend::READY_FOR_QUERY | backend::ERROR_RESPONSE | backend::PARAMETER_STATUS => {
                if buf.len() - pos < h.total_len() {
                    break;
                }
                let body = &buf[pos + 5..pos + h.total_len()];
                if h.tag == backend::PARAMETER_STATUS {
                    if let Some((k, v)) = backend::parameter_status(body) {
                        exec::set_param(params, k, v);
                    }
                } else if h.tag == backend::ERROR_RESPONSE {
                    let fields = backend::ErrorFields::parse(body);
                    if let Some(f) = &fields {
                        if let (Some(slot), [a, b, ..]) =
                            (out.errors.get_mut(out.n_errors), f.code.as_bytes())
                        {
                            *slot = [*a, *b];
                            out.n_errors += 1;
                        }
                    }
                    if fields.as_ref().is_some_and(|f| f.is_fatal()) {
                        st.broken = true;
                        out.fatal = true;
                    }
                } else {
                    st.pending = st.pending.saturating_sub(1);
                    st.tx = body
                        .first()
                        .copied()
                        .and_then(TxStatus::from_byte)
                        .unwrap_or(TxStatus::Failed);
                    if let Some(a) = answers.as_deref_mut() {
                        if counted {
                            // Nothing is kept for a retry while only counted Queries are owed.
                            a.expect.counted_ready();
                        } else {
                            a.expect.answer(h.tag, body, a.server, a.client, a.registry);
                            match a.expect.replay.at_ready(st) {
                                AtReady::Forward => {}
                                AtReady::Retry => out.replay = true,
                                AtReady::ShowError(e) => a.out.extend_from_slice(&e),
                            }
                        }
                        counted = a.expect.only_counted();
                    }
                    if !hide {
                        out.done.queries += 1;
                        out.done.transactions += u32::from(st.tx == TxStatus::Idle);
                    }
                    let quiet = st.pending == 0 && !st.unsynced;
                    if !hide && statement_mode && quiet && st.tx != TxStatus::Idle {
                        out.stop = Some(Outcome::TransactionRefused);
                        break;
                    }
                    if !hide && stop_when_idle && st.is_idle() {
                        pos += h.total_len();
                        out.stop = Some(Outcome::Idle);
                        break;
                    }
                    if hide && st.between && stop_when_idle && st.is_idle() {
                        // The ReadyForQuery of the Sync that ended a sharded database's
                        // describe-only batch (see `flush_as_sync`): the server may go.
                        pos += h.total_len();
                        front = pos;
                        out.stop = Some(Outcome::Idle);
                        break;
                    }
                    if !hide && st.between && quiet && st.tx != TxStatus::Idle {
                        pos += h.total_len();
                        out.stop = Some(Outcome::Between);
                        break;
                    }
                }
                pos += h.total_len();
                if hide {
                    front = pos;
                }
            }
            _ if hide => {
                pos += h.total_len();
                front = pos;
            }
            tag => {
                if tag == backend::COPY_IN_RESPONSE {
                    let ignored = st.copy_in_started();
                    if let Some(a) = answers.as_deref_mut() {
                        a.expect.drop_syncs_after_head(ignored);
                        // The Sync of a counted batch may have been one of them.
                        counted = a.expect.only_counted();
                    }
                }
                pos += pgwire::header::HEADER_LEN;
                *pass = h.body_len();
            }
        }
    }
    out.ready = pos;
    out.front = front;
    Ok(out)
}

/// Where the run of whole messages from `pos` that the server scan only passes ends, while
/// only counted Queries are owed: any but ReadyForQuery, ErrorResponse, ParameterStatus and
/// CopyInResponse. The first message not wholly buffered, or with a bad length, takes the
/// general way (which passes its body as it comes, or reports it).
#[inline]
fn pass_whole(buf: &[u8], mut pos: usize, max: u32) -> usize {
    while let Some(&[tag, a, b, c, d]) = buf.get(pos..pos + pgwire::header::HEADER_LEN) {
        if matches!(
            tag,
            backend::READY_FOR_QUERY
                | backend::ERROR_RESPONSE
                | backend::PARAMETER_STATUS
                | backend::COPY_IN_RESPONSE
        ) {
            break;
        }
        let len = u32::from_be_bytes([a, b, c, d]);
        if !(4..=max).contains(&len) || buf.len() - pos <= len as usize {
            break;
        }
        pos += len as usize + 1;
    }
    pos
}

/// What the client-side scan found.
#[derive(Default, Debug)]
pub struct ClientScan {
    /// Bytes at the start of the buffer replaced by rewritten messages (see [`Link`]).
    pub front: usize,
    /// Bytes from the start of the buffer up to which `front..ready` may be forwarded as they are.
    pub ready: usize,
    /// Stopped before a message to rewrite: scan again once `ready` is sent.
    pub again: bool,
    pub terminate: bool,
    pub bad_tag: Option<u8>,
    /// Stopped before a Query refused by `session_pinning = "refuse"`, and why.
    pub refuse: Option<&'static str>,
    /// Stopped before a batch that must wait for the answer to the last (`one_batch`).
    pub held: bool,
    /// Where the first Query or Parse starting with DROP, CREATE or ALTER is (see
    /// [`super::database_ddl`]).
    pub ddl: Option<usize>,
}

/// Scans client bytes: counts requests owed a ReadyForQuery and notes unsynced extended
/// messages. Stops before Terminate or an unknown tag. With `track`, the SQL of Query and
/// Parse messages is checked for statements that may change session state. The first that
/// may be a statement on a database is noted ([`ClientScan::ddl`]).
#[allow(clippy::too_many_arguments)]
pub fn scan_client(
    buf: &[u8],
    pass: &mut usize,
    st: &mut LinkState,
    track: Track,
    hooks: &HookMap,
    custom: &mut thin_vec::ThinVec<String>,
    max: u32,
    mut link: Option<&mut Link>,
) -> Result<ClientScan, FrameError> {
    let mut out = ClientScan::default();
    let mut pos = 0;
    let mut front = 0;
    // Where a counted extended batch (see [`Link::counted_batch`]) being scanned ends.
    let mut batch_end = 0;
    loop {
        if !skip_body(buf.len(), &mut pos, pass) {
            break;
        }
        // The type is checked before the length, as PostgreSQL does.
        if let Some(&tag) = buf.get(pos) {
            if matches!(frontend::kind(tag), FeKind::Unknown) {
                out.bad_tag = Some(tag);
                break;
            }
        }
        let Some(h) = Header::parse(&buf[pos..], max)? else {
            break;
        };
        if track == Track::Refuse && h.tag == frontend::QUERY && buf.len() - pos < h.total_len() {
            // Whether it is refused shows only in its whole text: nothing of it goes before.
            break;
        }
        if (h.tag == frontend::QUERY || h.tag == frontend::PARSE)
            && out.ddl.is_none()
            && super::database_ddl::maybe(h, &buf[pos..])
        {
            out.ddl = Some(pos);
        }
        if st.one_batch && st.pending > 0 && !st.unsynced {
            // The next batch waits for the answer to this one: it may be routed elsewhere.
            out.held = true;
            break;
        }
        // A simple Query that cannot be a statement command, or an extended batch of the
        // unnamed statement wholly buffered, when nothing else is owed: only counted (its
        // answers end at its ReadyForQuery), not planned, recorded and followed.
        let mut count_only = pos < batch_end;
        if let Some(l) = link.as_deref_mut().filter(|_| !count_only) {
            if h.tag == frontend::QUERY && l.counts() {
                match maybe_command(h, &buf[pos..]) {
                    None => break, // its first word is still to come
                    Some(maybe) => count_only = !maybe,
                }
            } else if h.tag == frontend::PARSE {
                if let Some(n) = l.counted_batch(&buf[pos..], max) {
                    batch_end = pos + n;
                    count_only = true;
                }
            }
        }
        if h.tag == frontend::BIND && track != Track::Off && !count_only {
            if let Some(l) = link.as_deref() {
                // Running a statement does what its text does, in whichever transaction it
                // is bound (a counted batch's Bind follows its Parse, which was looked at).
                mark(st, bound_effect(l, &buf[pos..], h, hooks));
            }
        }
        if h.tag == frontend::FLUSH && st.between && st.unsynced && !st.bound && !count_only {
            if let Some(l) = link.as_deref_mut() {
                // A sharded database's Parse and Describe without a Bind: the statement's
                // shard is not known yet, so this batch ends here, with a Sync of pgcorral's
                // (its ReadyForQuery hidden) in place of the Flush; the Bind that follows is
                // routed on its own.
                if pos > front {
                    out.again = true;
                    break;
                }
                l.flush_as_sync(st);
                pos += h.total_len();
                front = pos;
                continue;
            }
        }
        if let Some(l) = link.as_deref_mut().filter(|_| !count_only) {
            match l.plan(h, &buf[pos..]) {
                Plan::NeedMore => break,
                Plan::Rewrite if pos > front => {
                    out.again = true;
                    break;
                }
                Plan::Rewrite => {
                    if h.tag == frontend::PARSE || h.tag == frontend::QUERY {
                        // A Parse's text, or an SQL PREPARE/EXECUTE/DEALLOCATE that pgcorral
                        // carries out (an EXECUTE runs a statement: it taints).
                        mark(st, sql_effect(&buf[pos..], h, hooks));
                    }
                    let before = *st;
                    let a = l.apply(h, &buf[pos..], st);
                    if a.consume == 0 {
                        // It waits for the server to describe a statement.
                        out.again = true;
                        break;
                    }
                    if l.retry {
                        l.expect
                            .replay
                            .client_message(h, &buf[pos..], &before, true);
                    }
                    pos += a.consume;
                    front = pos;
                    *pass = a.pass;
                    continue;
                }
                Plan::Raw => {}
            }
        }
        if track != Track::Off && (h.tag == frontend::QUERY || h.tag == frontend::PARSE) {
            match sql_effect(&buf[pos..], h, hooks) {
                Effect::Pins(why) if track == Track::Refuse && h.tag == frontend::QUERY => {
                    out.refuse = Some(why);
                    break;
                }
                Effect::None => {}
                e => {
                    mark(st, e);
                    if let Some(sql) = sql_text(&buf[pos..], h) {
                        custom.extend(custom_names(sql));
                    }
                }
            }
        } else if track != Track::Off && h.tag == frontend::FUNCTION_CALL {
            // A function called by its oid may be any function.
            mark(st, Effect::Taint);
        }
        if let Some(l) = link.as_deref_mut().filter(|l| !count_only && l.retry) {
            l.expect.replay.client_message(h, &buf[pos..], st, false);
        }
        let mut counted = true;
        match frontend::kind(h.tag) {
            FeKind::Request => st.on_request(),
            FeKind::Sync => {
                counted = st.on_sync();
            }
            FeKind::Extended => on_extended(st, h.tag),
            FeKind::Copy => st.on_other(false),
            FeKind::Terminate => {
                out.terminate = true;
                break;
            }
            FeKind::Unknown => {
                out.bad_tag = Some(h.tag);
                break;
            }
        }
        if let Some(l) = link.as_deref_mut() {
            if count_only {
                l.counted(h, &buf[pos..]);
                if h.tag == frontend::PARSE {
                    // The rest of the batch is buffered and was checked whole.
                    pos = counted_rest(buf, pos + h.total_len(), batch_end, st, l);
                    continue;
                }
            } else {
                l.raw(h, &buf[pos..], counted, st);
            }
        }
        pos += pgwire::header::HEADER_LEN;
        *pass = h.body_len();
    }
    out.ready = pos;
    out.front = front;
    Ok(out)
}

/// What a Parse, Bind, Describe, Execute, Close or Flush does to the link's state.
#[inline]
fn on_extended(st: &mut LinkState, tag: u8) {
    // A Flush asks for nothing of its own: after a Sync it leaves the link synced.
    st.unsynced |= tag != frontend::FLUSH;
    st.bound |= tag == frontend::BIND;
    if tag == frontend::EXECUTE {
        st.on_execute();
    } else {
        st.on_other(tag == frontend::FLUSH);
    }
}

/// The messages of a counted batch after one of its Parses, from `pos` up to `end`, where
/// [`Link::counted_batch`] found its Sync: they were checked whole and are buffered, so each
/// only moves the link's state and is recorded as [`scan_client`] would, without its checks.
/// Stops before another Parse, which takes the general way. Returns where it stopped.
fn counted_rest(buf: &[u8], mut pos: usize, end: usize, st: &mut LinkState, l: &mut Link) -> usize {
    while pos < end {
        let tag = buf[pos];
        let Some(len) = buf.get(pos + 1..pos + 5).and_then(|b| b.try_into().ok()) else {
            break;
        };
        let h = Header {
            tag,
            len: u32::from_be_bytes(len),
        };
        match tag {
            frontend::PARSE => break,
            frontend::SYNC => {
                st.on_sync();
            }
            _ => on_extended(st, tag),
        }
        l.counted(h, &buf[pos..]);
        pos += h.total_len();
    }
    pos
}

/// What running the statement a Bind names (`msg` starts at its header) may do to the
/// session, by the text the client prepared it with; nothing for a statement pgcorral does not
/// know (the server refuses the Bind) or a Bind not yet buffered as far as its names (looked at
/// again when it is).
fn bound_effect(l: &Link, msg: &[u8], h: Header, hooks: &HookMap) -> Effect {
    let body = msg
        .get(pgwire::header::HEADER_LEN..h.total_len().min(msg.len()))
        .unwrap_or_default();
    let Some(p) = memchr::memchr(0, body) else {
        return Effect::None;
    };
    let rest = &body[p + 1..];
    let Some(n) = memchr::memchr(0, rest) else {
        return Effect::None;
    };
    let text = if n == 0 {
        l.client.unnamed()
    } else {
        l.client.named(&rest[..n]).map(|s| s.text())
    };
    match text {
        Some(t) => classify(&t[..memchr::memchr(0, t).unwrap_or(t.len())], hooks),
        None => Effect::None,
    }
}

/// Notes on the link what a message's SQL may do to the session.
#[inline]
fn mark(st: &mut LinkState, e: Effect) {
    if e != Effect::None {
        st.dirty = true;
        st.taint |= e >= Effect::Unsure;
        st.catalog |= e >= Effect::Taint;
    }
}

/// What the SQL of a Query or Parse message (`msg` starts at its header) may do to the
/// session; a message not wholly buffered counts as dirty.
fn sql_effect(msg: &[u8], h: Header, hooks: &HookMap) -> Effect {
    match sql_text(msg, h) {
        Some(sql) => classify(sql, hooks),
        None => Effect::Dirty,
    }
}

/// The SQL text of a wholly buffered Query or Parse message (`msg` starts at its header). A
/// Query's is its body but the final NUL, without a search: a NUL inside makes PostgreSQL
/// refuse the message (nothing of it runs), and the longer text can only make [`classify`] find
/// more, never less. A Parse's runs from after the statement name (usually empty: no search)
/// to its NUL, found with memchr (parameter types follow it).
pub(super) fn sql_text(msg: &[u8], h: Header) -> Option<&[u8]> {
    let body = msg.get(pgwire::header::HEADER_LEN..h.total_len())?;
    let sql = if h.tag == frontend::PARSE {
        match body {
            [0, rest @ ..] => rest,
            _ => match memchr::memchr(0, body) {
                Some(i) => &body[i + 1..],
                None => body,
            },
        }
    } else if let [text @ .., 0] = body {
        return Some(text);
    } else {
        body
    };
    let end = memchr::memchr(0, sql).unwrap_or(sql.len());
    Some(&sql[..end])
}
