//! The data path while a client holds a server: bytes flow both ways at once, message bodies pass
//! through unparsed (only headers are read, plus the few small messages that change state:
//! ReadyForQuery and ErrorResponse), writes apply backpressure to reads, and the relay stops at
//! the first point where the server is idle and may go back to the pool.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Buf;
use pgwire::backend::{self, TxStatus};
use pgwire::frontend::{self, Kind as FeKind};
use pgwire::{FrameError, Header};
use tokio::io::AsyncWrite;

use crate::client::ClientConn;
use crate::pool::stats::{Done, Meter, Stats, Totals};
use crate::pool::Pool;
use crate::prepared::expect::{stale_plan, Answers};
use crate::prepared::replay::AtReady;
use crate::prepared::rewrite::{maybe_command, Link, Plan};
use crate::prepared::Registry;
use crate::server::{LinkState, ServerConn, ServerParams};
use crate::session::scan::{classify, custom_names, Effect};

/// Read no more from a side while this much of its data waits to be written to the other.
const READ_CHUNK: usize = 16 * 1024;

/// Below this much free space a buffer is grown before reading.
const MIN_READ_ROOM: usize = 1024;

/// Scanned bytes up to this many are copied behind pgcorral's own messages for the other side
/// (rewritten requests, answers it gives), so that both go out in one write; more are written
/// on their own after them.
const MERGE_MAX: usize = 8 * 1024;

/// Why the relay stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The server is idle: it may be released (transaction/statement mode, or shutdown).
    Idle,
    /// Statement mode: the server opened a transaction; its ReadyForQuery was held back.
    TransactionRefused,
    /// The client sent Terminate or closed its socket; everything before was forwarded.
    ClientGone,
    /// The client broke the protocol.
    ClientProtocol(String),
    /// The server closed or failed; `notified` when it sent the client a FATAL first.
    ServerGone { notified: bool },
    /// A timeout of [`Timeouts`] expired.
    TimedOut(Phase),
    /// The next message is a Query refused by `session_pinning = "refuse"` (left unread in
    /// the client's buffer); everything before it has been answered.
    Refused(&'static str),
}

/// What the link is doing, for the timeouts that apply to each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Requests are outstanding on the server.
    Query,
    /// Nothing outstanding, inside a transaction.
    IdleInTransaction,
    /// Nothing outstanding, outside a transaction (session mode, or a pinned client).
    Idle,
}

impl Phase {
    fn of(st: &LinkState) -> Phase {
        if st.pending > 0 {
            Phase::Query
        } else if st.tx != TxStatus::Idle {
            Phase::IdleInTransaction
        } else {
            Phase::Idle
        }
    }
}

/// query_timeout, idle_transaction_timeout and client_idle_timeout; `None` = off.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timeouts {
    pub query: Option<Duration>,
    pub idle_in_transaction: Option<Duration>,
    pub client_idle: Option<Duration>,
}

impl Timeouts {
    fn any(&self) -> bool {
        self.query.is_some() || self.idle_in_transaction.is_some() || self.client_idle.is_some()
    }

    fn of(&self, p: Phase) -> Option<Duration> {
        match p {
            Phase::Query => self.query,
            Phase::IdleInTransaction => self.idle_in_transaction,
            Phase::Idle => self.client_idle,
        }
    }
}

/// Watching clients' SQL for session state (transaction and statement mode).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Track {
    /// Session mode: the server is the client's for good.
    #[default]
    Off,
    /// Note statements that may change session state; server-bound state pins.
    Pin,
    /// The same, but simple-protocol statements that would pin are refused.
    Refuse,
}

/// How a relay behaves.
#[derive(Clone, Default)]
pub struct Mode<'a> {
    /// Stop when the server is idle (false in session mode).
    pub stop_when_idle: bool,
    /// Refuse transactions (statement mode).
    pub statement: bool,
    pub track: Track,
    pub timeouts: Timeouts,
    /// Prepared statements are the client's own, moved between servers (transaction and
    /// statement mode): the registry that shares them, and max_prepared_statements.
    pub prepared: Option<(&'a Registry, usize)>,
    /// The pool whose statistics count queries, transactions and bytes, and the worker's
    /// shard. A pool rather than its statistics, so that a request loop keeps one `Mode` and
    /// points it at each server's pool (several servers).
    pub stats: Option<(Pool, usize)>,
    /// One request batch in flight at a time (see [`LinkState::one_batch`]).
    pub one_batch: bool,
}

impl Mode<'_> {
    /// Where queries, transactions and bytes are counted, and the worker's shard.
    #[inline]
    fn stats(&self) -> Option<(&Stats, usize)> {
        self.stats.as_ref().map(|(p, w)| (p.stats(), *w))
    }
}

/// Makes room for a read, growing the buffer only when little space is left.
#[inline]
fn reserve(buf: &mut bytes::BytesMut) {
    if buf.capacity() - buf.len() < MIN_READ_ROOM {
        buf.reserve(READ_CHUNK);
    }
}

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
            hide = a.expect.hides(h.tag);
            let msg = &buf[pos..];
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
            if (hide || show) && pos > front {
                out.again = true;
                break;
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
                        crate::session::exec::set_param(params, k, v);
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
}

/// Scans client bytes: counts requests owed a ReadyForQuery and notes unsynced extended
/// messages. Stops before Terminate or an unknown tag. With `track`, the SQL of Query and
/// Parse messages is checked for statements that may change session state.
pub fn scan_client(
    buf: &[u8],
    pass: &mut usize,
    st: &mut LinkState,
    track: Track,
    custom: &mut Vec<String>,
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
        let Some(h) = Header::parse(&buf[pos..], max)? else {
            break;
        };
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
        if let Some(l) = link.as_deref_mut().filter(|_| !count_only) {
            match l.plan(h, &buf[pos..]) {
                Plan::NeedMore => break,
                Plan::Rewrite if pos > front => {
                    out.again = true;
                    break;
                }
                Plan::Rewrite => {
                    if h.tag == frontend::PARSE && sql_effect(&buf[pos..], h) != Effect::None {
                        st.dirty = true;
                    }
                    let before = *st;
                    let a = l.apply(h, &buf[pos..], st);
                    if a.consume == 0 {
                        // It waits for the server to describe a statement.
                        out.again = true;
                        break;
                    }
                    l.expect
                        .replay
                        .client_message(h, &buf[pos..], &before, true);
                    pos += a.consume;
                    front = pos;
                    *pass = a.pass;
                    continue;
                }
                Plan::Raw => {}
            }
        }
        if track != Track::Off && (h.tag == frontend::QUERY || h.tag == frontend::PARSE) {
            match sql_effect(&buf[pos..], h) {
                Effect::Pins(why) if track == Track::Refuse && h.tag == frontend::QUERY => {
                    out.refuse = Some(why);
                    break;
                }
                Effect::None => {}
                _ => {
                    st.dirty = true;
                    if let Some(sql) = sql_text(&buf[pos..], h) {
                        custom.extend(custom_names(sql));
                    }
                }
            }
        }
        if let Some(l) = link.as_deref_mut().filter(|_| !count_only) {
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
                l.raw(h, &buf[pos..], counted);
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

/// What the SQL of a Query or Parse message (`msg` starts at its header) may do to the
/// session; a message not wholly buffered counts as dirty.
fn sql_effect(msg: &[u8], h: Header) -> Effect {
    match sql_text(msg, h) {
        Some(sql) => classify(sql),
        None => Effect::Dirty,
    }
}

/// The SQL text of a wholly buffered Query or Parse message (`msg` starts at its header). A
/// Query's is its body but the final NUL, without a search: a NUL inside makes PostgreSQL
/// refuse the message (nothing of it runs), and the longer text can only make [`classify`] find
/// more, never less. A Parse's runs from after the statement name (usually empty: no search)
/// to its NUL, found with memchr (parameter types follow it).
fn sql_text(msg: &[u8], h: Header) -> Option<&[u8]> {
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

enum Event {
    ToServer(std::io::Result<usize>),
    /// pgcorral's rewritten or added messages written to the server.
    ToServerOwn(std::io::Result<usize>),
    ToClient(std::io::Result<usize>),
    /// pgcorral's own answers written to the client.
    ToClientOwn(std::io::Result<usize>),
    FromServer(std::io::Result<usize>),
    FromClient(std::io::Result<usize>),
    Timeout,
}

/// The client side's scan: bytes to forward (after dropping what was rewritten), a stop, and
/// whether to scan again once those bytes are written.
struct ClientSide {
    ready: usize,
    stop: Option<Outcome>,
    again: bool,
    held: bool,
}

fn scan_c(
    client: &mut ClientConn,
    server: &mut ServerConn,
    mode: &Mode,
    unnamed_here: &mut bool,
) -> ClientSide {
    let mut link = mode.prepared.map(|(registry, max)| Link {
        registry,
        max,
        client: &mut client.statements,
        server: &mut server.statements,
        expect: &mut server.expect,
        out: &mut server.wout,
        unnamed_here,
    });
    match scan_client(
        &client.buf,
        &mut client.pass,
        &mut server.state,
        mode.track,
        &mut client.custom,
        client.max_len,
        link.as_mut(),
    ) {
        Ok(s) => {
            client.buf.advance(s.front);
            ClientSide {
                ready: s.ready - s.front,
                stop: client_stop(&s),
                again: s.again,
                held: s.held,
            }
        }
        Err(e) => ClientSide {
            ready: 0,
            stop: Some(Outcome::ClientProtocol(e.to_string())),
            again: false,
            held: false,
        },
    }
}

/// The server side's scan; answers pgcorral gives itself go to `server.fout`.
fn scan_s(
    client: &mut ClientConn,
    server: &mut ServerConn,
    mode: &Mode,
) -> Result<ServerScan, FrameError> {
    let mut answers = mode.prepared.map(|(registry, _)| Answers {
        registry,
        expect: &mut server.expect,
        server: &mut server.statements,
        client: &mut client.statements,
        out: &mut server.fout,
    });
    let mut s = scan_server(
        &server.rbuf,
        &mut server.pass,
        &mut server.state,
        &mut server.params,
        mode.stop_when_idle,
        mode.statement,
        client.max_len,
        answers.as_mut(),
    )?;
    server.rbuf.advance(s.front);
    s.ready -= s.front;
    Ok(s)
}

/// Records what the meter holds still once a relay ended: the bytes since the last query
/// ended, or, when the relay ended because the server went idle, the last query and
/// transaction too (one record per transaction in the common case).
pub fn record_rest(mode: &Mode, server: &mut ServerConn) {
    if let Some((stats, w)) = mode.stats() {
        stats.record(w, &std::mem::take(&mut server.meter.delta));
    }
}

/// Records what the meter saw after a scan: `done` holds what the server's ReadyForQuery
/// messages ended (nothing after a scan of the client's side).
#[inline]
fn metered(mode: &Mode, meter: &mut Meter, st: &LinkState, done: Done) {
    if let Some((stats, w)) = mode.stats() {
        if meter.observe(st, done) {
            stats
                .query_hist
                .record_n(w, meter.last_query, u64::from(done.queries));
            if !(mode.stop_when_idle && st.is_idle()) {
                stats.record(w, &meter.delta);
                meter.delta = Totals::default();
            }
            // Else the relay ends now: `record_rest` records this with the answer's bytes,
            // in one go.
        }
    }
}

/// Relays between `client` and `server` until the server may be released, a side is gone, or
/// a timeout expires; counts what passed in `mode.stats` (the caller records the rest with
/// [`record_rest`]: no wrapper future, so that every client's future stays small).
pub async fn run(client: &mut ClientConn, server: &mut ServerConn, mode: &Mode<'_>) -> Outcome {
    if server.state.pending == 0 && !server.state.unsynced {
        // Nothing outstanding: nothing is owed either.
        server.expect.clear();
    }
    // A registration for the server's socket made before this relay may hold another task's
    // waker.
    server.read_armed = false;
    // The client's unnamed statement is not on this server until it is parsed here.
    let mut unnamed_here = false;
    // The timer exists only when some timeout is configured; it is re-armed when the phase
    // changes.
    let timed = mode.timeouts.any();
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut phase: Option<Phase> = None;
    let mut armed = false;
    // c_ready: client bytes scanned, to write to the server after `server.wout` (rewritten
    // messages); c_stop: the client side ended (acted on once both are written); c_again: scan
    // again once they are. s_ready/s_stop/s_again: the same for the server side, whose bytes
    // follow `server.fout` (answers pgcorral gives).
    server.state.one_batch = mode.one_batch;
    // Whatever the client already sent (the request that caused checkout) goes first.
    let c = scan_c(client, server, mode, &mut unnamed_here);
    let (mut c_ready, mut c_stop, mut c_again) = (c.ready, c.stop, c.again);
    // The client's next batch waits for the answer to the last (one_batch).
    let mut c_held = c.held;
    metered(mode, &mut server.meter, &server.state, Done::default());
    let mut s_ready = 0usize;
    let mut s_stop: Option<Outcome> = None;
    // Anything the server sent while idle reaches this client; answers pgcorral owes go out.
    let mut s_again = !server.rbuf.is_empty() || server.expect.fake_next();
    let mut fatal_seen = false;
    // A batch whose stale-plan error was hidden goes to the server again, ahead of anything
    // the client sent since, once nothing of the client's is part-way out.
    let mut replay_due = false;
    // Sockets are read and written straight, outside any task budget: this is the relay's.
    let mut budget = crate::net::direct::Budget::new();

    loop {
        if c_held && server.state.pending == 0 && s_ready == 0 && s_stop.is_none() {
            // Answered, and still in a transaction: the next batch belongs to it.
            c_held = false;
            c_again = true;
        }
        if c_again && c_ready == 0 && c_stop.is_none() {
            let c = scan_c(client, server, mode, &mut unnamed_here);
            (c_ready, c_stop, c_again) = (c.ready, c.stop, c.again);
            c_held = c.held;
            s_again |= server.expect.fake_next();
            metered(mode, &mut server.meter, &server.state, Done::default());
        }
        let verifying = server.expect.verifying;
        if s_again && s_ready == 0 && s_stop.is_none() {
            s_again = false;
            match scan_s(client, server, mode) {
                Ok(s) => {
                    s_ready = s.ready;
                    fatal_seen |= s.fatal;
                    s_stop = s.stop;
                    s_again = s.again;
                    replay_due |= s.replay;
                    metered(mode, &mut server.meter, &server.state, s.done);
                    if let Some((stats, _)) = mode.stats() {
                        for class in &s.errors[..s.n_errors] {
                            stats.error(*class);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "server sent an invalid message");
                    s_stop = Some(server_gone(server, false));
                }
            }
        }
        if verifying && !server.expect.verifying && c_again {
            // The client's message that waited for a description goes on.
            continue;
        }
        if replay_due && c_ready == 0 && client.pass == 0 {
            replay_due = false;
            if let Some(batch) = server.expect.replay.take_due() {
                let mut buf = bytes::BytesMut::with_capacity(batch.len() + client.buf.len());
                buf.extend_from_slice(&batch);
                buf.extend_from_slice(&client.buf);
                client.buf = buf;
                // The unnamed statement may have gone stale too: parse it again.
                unnamed_here = false;
                c_again = true;
                continue;
            }
        }
        // What was just scanned goes out now where the socket takes it without a poll
        // (plaintext TCP), so that a request or an answer is scanned, written and, when it
        // ends the relay, finished in one turn of this loop.
        let mut wrote = false;
        // Rewritten messages and the client's bytes after them (a Bind under a new statement
        // name, then its Execute and Sync) go out in one write: two would be two TCP segments,
        // and two wakeups of the server's backend, per transaction. The same for answers
        // pgcorral gives and the server's bytes after them.
        if c_ready > 0 && !server.wout.is_empty() && c_ready <= MERGE_MAX {
            server.wout.extend_from_slice(&client.buf[..c_ready]);
            let n = c_ready;
            to_server(client, server, &mut c_ready, n);
        }
        if s_ready > 0 && !server.fout.is_empty() && s_ready <= MERGE_MAX {
            server.fout.extend_from_slice(&server.rbuf[..s_ready]);
            // Counted as sent when `fout` is written.
            consume(&mut server.rbuf, s_ready);
            s_ready = 0;
        }
        if !server.wout.is_empty() {
            match server.stream.try_write_now(&server.wout) {
                None => {}
                Some(Ok(n)) if n > 0 => {
                    consume(&mut server.wout, n);
                    wrote = true;
                }
                Some(_) => return server_gone(server, fatal_seen),
            }
        } else if c_ready > 0 {
            match server.stream.try_write_now(&client.buf[..c_ready]) {
                None => {}
                Some(Ok(n)) if n > 0 => {
                    to_server(client, server, &mut c_ready, n);
                    wrote = true;
                }
                Some(_) => return server_gone(server, fatal_seen),
            }
        }
        if !server.fout.is_empty() {
            match client.stream.try_write_now(&server.fout) {
                None => {}
                Some(Ok(n)) if n > 0 => {
                    consume(&mut server.fout, n);
                    server.meter.delta.bytes_sent += n as u64;
                    wrote = true;
                }
                Some(_) => return client_gone(client),
            }
        } else if s_ready > 0 {
            match client.stream.try_write_now(&server.rbuf[..s_ready]) {
                None => {}
                Some(Ok(n)) if n > 0 => {
                    to_client(server, &mut s_ready, n);
                    wrote = true;
                }
                Some(_) => return client_gone(client),
            }
        }
        if wrote && (c_held || c_again || s_again || replay_due) {
            // A side waited for its bytes to be written before its next scan (or a held batch,
            // or a replay): back to the top, as after a write the poll made.
            continue;
        }
        let c_sent = c_ready == 0 && server.wout.is_empty();
        if s_ready == 0 && server.fout.is_empty() && s_stop.is_some() {
            // The server may be released, but not while the client is part-way through a
            // message (stray COPY data after a failed COPY): the server would take the next
            // client's bytes for the rest of it. Forward the rest of that message first.
            let mid_message = !c_sent || client.pass > 0;
            let releasable = matches!(s_stop, Some(Outcome::Idle | Outcome::TransactionRefused));
            if !(mid_message && releasable) {
                let o = s_stop.take().expect("checked");
                return finish(o, client, server, c_ready);
            }
            if let Some(o) = c_stop.take() {
                // The client left part-way through it: the server is out of frame (closed).
                return finish(o, client, server, c_ready);
            }
        }
        if c_sent {
            // A refused Query waits until what came before it has been answered.
            let answered = server.state.pending == 0 && s_ready == 0;
            if !matches!(c_stop, Some(Outcome::Refused(_))) || answered {
                if let Some(o) = c_stop.take() {
                    return finish(o, client, server, c_ready);
                }
            }
        }
        let read_server = s_ready == 0 && s_stop.is_none() && !s_again;
        // Once the server side has stopped, the client is read only to finish the message in
        // flight; its next request waits for the next checkout.
        let read_client = c_sent
            && !c_again
            && !c_held
            && c_stop.is_none()
            && (s_stop.is_none() || client.pass > 0);
        if read_server {
            reserve(&mut server.rbuf);
        }
        if read_client {
            reserve(&mut client.buf);
        }
        if timed {
            let p = Phase::of(&server.state);
            if phase != Some(p) {
                phase = Some(p);
                armed = false;
                if let Some(d) = mode.timeouts.of(p) {
                    let at = tokio::time::Instant::now() + d;
                    match &mut timer {
                        Some(t) => t.as_mut().reset(at),
                        None => timer = Some(Box::pin(crate::timer::sleep_until(at))),
                    }
                    armed = true;
                }
            }
        }
        // A `move` closure holds the two connections and the timer whole, and copies of the
        // counts: one pointer per field it reads would make every client's future bigger.
        let ev = {
            let (client, server, timer) = (&mut *client, &mut *server, &mut timer);
            poll_fn(move |cx| {
                // TLS records still in a session go out as the socket takes them.
                if client.stream.pending_output() {
                    if let Poll::Ready(Err(e)) = Pin::new(&mut client.stream).poll_flush(cx) {
                        return Poll::Ready(Event::ToClient(Err(e)));
                    }
                }
                if server.stream.pending_output() {
                    if let Poll::Ready(Err(e)) = Pin::new(&mut server.stream).poll_flush(cx) {
                        return Poll::Ready(Event::ToServer(Err(e)));
                    }
                }
                if !server.wout.is_empty() {
                    if let Poll::Ready(r) = server.stream.poll_write_from(cx, &server.wout) {
                        return Poll::Ready(Event::ToServerOwn(r));
                    }
                } else if c_ready > 0 {
                    if let Poll::Ready(r) =
                        server.stream.poll_write_from(cx, &client.buf[..c_ready])
                    {
                        return Poll::Ready(Event::ToServer(r));
                    }
                }
                if !server.fout.is_empty() {
                    if let Poll::Ready(r) = client.stream.poll_write_from(cx, &server.fout) {
                        return Poll::Ready(Event::ToClientOwn(r));
                    }
                } else if s_ready > 0 {
                    if let Poll::Ready(r) =
                        client.stream.poll_write_from(cx, &server.rbuf[..s_ready])
                    {
                        return Poll::Ready(Event::ToClient(r));
                    }
                }
                // A socket whose last read left this task registered, and that nothing has
                // made readable since, needs no second registration: the socket keeps the first
                // until bytes come (and wakes the task then). Within a transaction or session
                // that saves two of them per statement.
                if read_server && !server.stream.still_registered(server.read_armed) {
                    let (stream, rbuf) = (&mut server.stream, &mut server.rbuf);
                    if let Poll::Ready(r) = stream.poll_read_armed(cx, rbuf, &mut server.read_armed)
                    {
                        return Poll::Ready(Event::FromServer(r));
                    }
                }
                if read_client && !client.stream.still_registered(client.read_armed) {
                    if let Poll::Ready(r) = client.poll_read(cx) {
                        return Poll::Ready(Event::FromClient(r));
                    }
                }
                if armed {
                    if let Some(t) = timer.as_mut() {
                        if t.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(Event::Timeout);
                        }
                    }
                }
                Poll::Pending
            })
            .await
        };
        if budget.spend() {
            tokio::task::yield_now().await;
        }

        match ev {
            Event::ToServer(Ok(n)) if n > 0 => to_server(client, server, &mut c_ready, n),
            Event::ToServerOwn(Ok(n)) if n > 0 => server.wout.advance(n),
            Event::ToServer(_) | Event::ToServerOwn(_) => return server_gone(server, fatal_seen),
            Event::ToClient(Ok(n)) if n > 0 => to_client(server, &mut s_ready, n),
            Event::ToClientOwn(Ok(n)) if n > 0 => {
                server.fout.advance(n);
                server.meter.delta.bytes_sent += n as u64;
            }
            Event::ToClient(_) | Event::ToClientOwn(_) => return client_gone(client),
            Event::Timeout => {
                let p = phase.expect("armed for a phase");
                client.buf.advance(c_ready);
                return Outcome::TimedOut(p);
            }
            Event::FromServer(Ok(n)) if n > 0 => s_again = true,
            Event::FromServer(_) => s_stop = Some(server_gone(server, fatal_seen)),
            Event::FromClient(Ok(n)) if n > 0 && s_stop.is_some() => {
                // Draining: only the rest of the message in flight, unscanned (it can only be
                // COPY data the server will ignore).
                let take = client.pass.min(client.buf.len());
                client.pass -= take;
                c_ready = take;
            }
            Event::FromClient(Ok(n)) if n > 0 => c_again = true,
            Event::FromClient(_) => c_stop = Some(client_gone(client)),
        }
    }
}

/// The server's socket failed (or closed): the server is not reused. `notified`: the client
/// already got the server's FATAL error.
#[cold]
fn server_gone(server: &mut ServerConn, notified: bool) -> Outcome {
    server.state.broken = true;
    Outcome::ServerGone { notified }
}

/// The client's socket failed (or closed): what it sent and was not forwarded is dropped.
#[cold]
fn client_gone(client: &mut ClientConn) -> Outcome {
    client.buf.clear();
    Outcome::ClientGone
}

/// `n` of the client's `c_ready` scanned bytes went to the server.
#[inline]
fn to_server(client: &mut ClientConn, server: &mut ServerConn, c_ready: &mut usize, n: usize) {
    consume(&mut client.buf, n);
    *c_ready -= n;
    server.meter.delta.bytes_received += n as u64;
}

/// `n` of the server's `s_ready` scanned bytes went to the client.
#[inline]
fn to_client(server: &mut ServerConn, s_ready: &mut usize, n: usize) {
    consume(&mut server.rbuf, n);
    *s_ready -= n;
    server.meter.delta.bytes_sent += n as u64;
}

/// Drops the first `n` bytes of `buf`, which were sent. All of them (the usual case) empties it
/// in place: no offset for the next read's `reserve` to undo.
#[inline]
fn consume(buf: &mut bytes::BytesMut, n: usize) {
    if n == buf.len() {
        buf.clear();
    } else {
        buf.advance(n);
    }
}

/// Ends the relay with `o`. A client message only partly forwarded leaves the server out of
/// frame: it must not be reused, and the client's unsent bytes of that message are dropped
/// (with what of `server.wout` did not go out).
fn finish(o: Outcome, client: &mut ClientConn, server: &mut ServerConn, c_ready: usize) -> Outcome {
    if c_ready > 0 || client.pass > 0 || !server.wout.is_empty() {
        server.state.broken = true;
        client.buf.advance(c_ready);
        server.wout.clear();
    }
    o
}

fn client_stop(s: &ClientScan) -> Option<Outcome> {
    if s.terminate {
        Some(Outcome::ClientGone)
    } else if let Some(why) = s.refuse {
        Some(Outcome::Refused(why))
    } else {
        s.bad_tag.map(|t| {
            Outcome::ClientProtocol(format!("invalid frontend message type {}", t as char))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prepared::expect::Msg;

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    /// [`scan_server`] in transaction mode without prepared-statement tracking.
    fn scan_plain(buf: &[u8], pass: &mut usize, st: &mut LinkState) -> ServerScan {
        scan_server(
            buf,
            pass,
            st,
            &mut Default::default(),
            true,
            false,
            1 << 20,
            None,
        )
        .unwrap()
    }

    #[test]
    fn server_scan_stops_after_idle_ready() {
        let mut buf = msg(b'T', b"rowdesc");
        buf.extend(msg(b'D', b"row"));
        buf.extend(msg(b'C', b"SELECT 1\0"));
        let z_end = buf.len() + 6;
        buf.extend(msg(b'Z', b"I"));
        buf.extend(msg(b'N', b"later"));
        let mut st = LinkState {
            pending: 1,
            ..Default::default()
        };
        let mut pass = 0;
        let s = scan_plain(&buf, &mut pass, &mut st);
        assert_eq!(s.ready, z_end);
        assert_eq!(s.stop, Some(Outcome::Idle));
        assert!(st.is_idle());
    }

    #[test]
    fn server_scan_passes_partial_bodies() {
        let full = msg(b'D', &[7u8; 100]);
        let mut st = LinkState {
            pending: 1,
            ..Default::default()
        };
        let mut pass = 0;
        let s = scan_plain(&full[..40], &mut pass, &mut st);
        assert_eq!(s.ready, 40);
        assert_eq!(pass, 104 - 40 + 1);
        let s = scan_plain(&full[40..], &mut pass, &mut st);
        assert_eq!(s.ready, full.len() - 40);
        assert_eq!(pass, 0);
    }

    #[test]
    fn server_scan_waits_for_whole_ready_and_keeps_transactions() {
        let z = msg(b'Z', b"T");
        let mut st = LinkState {
            pending: 1,
            ..Default::default()
        };
        let mut pass = 0;
        let s = scan_plain(&z[..3], &mut pass, &mut st);
        assert_eq!((s.ready, s.done), (0, Done::default()));
        let s = scan_plain(&z, &mut pass, &mut st);
        assert_eq!(s.ready, z.len());
        assert_eq!(s.stop, None);
        assert_eq!(st.tx, TxStatus::InTransaction);
        assert_eq!(
            s.done,
            Done {
                queries: 1,
                transactions: 0
            }
        );
        // Two answers in one read (pipelined queries): each ends a query, the idle one a
        // transaction.
        let mut two = msg(b'Z', b"I");
        two.extend(msg(b'Z', b"T"));
        st.pending = 2;
        let s = scan_plain(&two, &mut 0, &mut st);
        assert_eq!(
            s.done,
            Done {
                queries: 2,
                transactions: 1
            }
        );
    }

    #[test]
    fn statement_mode_holds_back_transaction_ready() {
        let mut buf = msg(b'C', b"BEGIN\0");
        let before = buf.len();
        buf.extend(msg(b'Z', b"T"));
        let mut st = LinkState {
            pending: 1,
            ..Default::default()
        };
        let s = scan_server(
            &buf,
            &mut 0,
            &mut st,
            &mut Default::default(),
            true,
            true,
            1 << 20,
            None,
        )
        .unwrap();
        assert_eq!(s.ready, before);
        assert_eq!(s.stop, Some(Outcome::TransactionRefused));
    }

    #[test]
    fn fatal_error_marks_broken() {
        let buf = msg(b'E', b"SFATAL\0VFATAL\0C57P01\0Mbye\0\0");
        let mut st = LinkState {
            pending: 1,
            ..Default::default()
        };
        let s = scan_plain(&buf, &mut 0, &mut st);
        assert!(s.fatal && st.broken);
    }

    #[test]
    fn client_scan_counts_requests_and_syncs() {
        let mut buf = msg(b'P', b"\0select 1\0\0\0");
        buf.extend(msg(b'B', b"\0\0\0\0\0\0\0\0"));
        buf.extend(msg(b'E', b"\0\0\0\0\0"));
        let mut st = LinkState::default();
        let mut pass = 0;
        let s = scan_client(
            &buf,
            &mut pass,
            &mut st,
            Track::Pin,
            &mut Vec::new(),
            1 << 20,
            None,
        )
        .unwrap();
        assert_eq!(s.ready, buf.len());
        assert!(st.unsynced && st.pending == 0);
        let mut more = msg(b'S', b"");
        more.extend(msg(b'Q', b"select 2\0"));
        let s = scan_client(
            &more,
            &mut pass,
            &mut st,
            Track::Pin,
            &mut Vec::new(),
            1 << 20,
            None,
        )
        .unwrap();
        assert_eq!(s.ready, more.len());
        assert!(!st.unsynced);
        assert_eq!(st.pending, 2);
    }

    #[test]
    fn client_scan_stops_at_terminate_and_bad_tags() {
        let mut buf = msg(b'Q', b"x\0");
        let q = buf.len();
        buf.extend(msg(b'X', b""));
        let mut st = LinkState::default();
        let s = scan_client(
            &buf,
            &mut 0,
            &mut st,
            Track::Pin,
            &mut Vec::new(),
            1 << 20,
            None,
        )
        .unwrap();
        assert_eq!((s.ready, s.terminate), (q, true));
        let bad = msg(b'?', b"");
        let s = scan_client(
            &bad,
            &mut 0,
            &mut st,
            Track::Pin,
            &mut Vec::new(),
            1 << 20,
            None,
        )
        .unwrap();
        assert_eq!((s.ready, s.bad_tag), (0, Some(b'?')));
        assert!(scan_client(
            b"Q\x7f\xff\xff\xff",
            &mut 0,
            &mut st,
            Track::Pin,
            &mut Vec::new(),
            1 << 20,
            None
        )
        .is_err());
    }

    /// Scans one message per tag (empty bodies; ReadyForQuery says idle) from the client or server.
    fn client_sends(st: &mut LinkState, tags: &str) {
        let mut buf = Vec::new();
        for t in tags.bytes() {
            buf.extend(msg(t, b""));
        }
        let s = scan_client(&buf, &mut 0, st, Track::Pin, &mut Vec::new(), 1 << 20, None).unwrap();
        assert_eq!(s.ready, buf.len());
    }

    fn server_sends(st: &mut LinkState, tags: &str) -> Option<Outcome> {
        let mut buf = Vec::new();
        for t in tags.bytes() {
            buf.extend(msg(t, if t == b'Z' { b"I" } else { b"" }));
        }
        scan_plain(&buf, &mut 0, st).stop
    }

    #[test]
    fn extended_copy_in_syncs_after_execute_are_uncounted() {
        // tokio-postgres/libpq: Bind, Execute, Sync; CopyInResponse; data, CopyDone, Sync.
        let mut st = LinkState::default();
        client_sends(&mut st, "BES");
        assert_eq!(st.pending, 1);
        assert_eq!(server_sends(&mut st, "2G"), None);
        assert_eq!((st.pending, st.unsynced), (0, true));
        client_sends(&mut st, "ddcS");
        assert_eq!(server_sends(&mut st, "CZ"), Some(Outcome::Idle));
        assert!(st.is_idle());

        // The same after an error in the data: one ReadyForQuery, after the last Sync.
        client_sends(&mut st, "BES");
        server_sends(&mut st, "2GE");
        assert!(!st.is_idle());
        client_sends(&mut st, "dcS");
        assert_eq!(server_sends(&mut st, "Z"), Some(Outcome::Idle));
    }

    #[test]
    fn extended_copy_in_pipelined_with_flush_and_extra_syncs() {
        let mut st = LinkState::default();
        client_sends(&mut st, "PBEHSSdcSQ");
        assert_eq!(st.pending, 4);
        assert_eq!(server_sends(&mut st, "12GCZ"), None);
        assert_eq!(st.pending, 1);
        assert_eq!(server_sends(&mut st, "TDCZ"), Some(Outcome::Idle));
    }

    #[test]
    fn syncs_sent_in_copy_in_mode_are_ignored() {
        let mut st = LinkState::default();
        client_sends(&mut st, "BEH");
        server_sends(&mut st, "2G");
        client_sends(&mut st, "SH");
        assert_eq!(st.pending, 0);
        client_sends(&mut st, "dcS");
        assert_eq!(st.pending, 1);
        assert_eq!(server_sends(&mut st, "CZ"), Some(Outcome::Idle));
    }

    #[test]
    fn simple_copy_in_and_copy_after_answered_batches_count_as_before() {
        let mut st = LinkState::default();
        client_sends(&mut st, "Q");
        server_sends(&mut st, "G");
        assert_eq!((st.pending, st.unsynced), (1, false));
        client_sends(&mut st, "dc");
        assert_eq!(server_sends(&mut st, "CZ"), Some(Outcome::Idle));

        client_sends(&mut st, "BES");
        assert_eq!(server_sends(&mut st, "2CZ"), Some(Outcome::Idle));
        client_sends(&mut st, "Q");
        server_sends(&mut st, "G");
        assert_eq!((st.pending, st.unsynced), (1, false));
        client_sends(&mut st, "c");
        assert_eq!(server_sends(&mut st, "CZ"), Some(Outcome::Idle));

        // A batch with Query pipelined behind it: its CopyInResponse is the Query's.
        client_sends(&mut st, "BESQ");
        assert_eq!(server_sends(&mut st, "2CZ"), None);
        server_sends(&mut st, "G");
        assert_eq!(st.pending, 1);
        client_sends(&mut st, "c");
        assert_eq!(server_sends(&mut st, "CZ"), Some(Outcome::Idle));
    }

    /// What a link to one server keeps for prepared statements, for scans with tracking on.
    #[derive(Default)]
    struct Tracked {
        registry: Registry,
        client: crate::prepared::ClientStatements,
        server: crate::prepared::ServerStatements,
        /// The server's parameters, as its ParameterStatus messages set them.
        params: ServerParams,
        expect: crate::prepared::expect::Expected,
        wout: bytes::BytesMut,
        fout: bytes::BytesMut,
        unnamed_here: bool,
        /// Client and server bytes not scanned yet, and what of a body passes still.
        cbuf: Vec<u8>,
        cpass: usize,
        sbuf: Vec<u8>,
        spass: usize,
    }

    impl Tracked {
        /// Scans client bytes with tracking on.
        fn client(&mut self, buf: &[u8], pass: &mut usize, st: &mut LinkState) -> ClientScan {
            let mut link = Link {
                registry: &self.registry,
                max: 0,
                client: &mut self.client,
                server: &mut self.server,
                expect: &mut self.expect,
                out: &mut self.wout,
                unnamed_here: &mut self.unnamed_here,
            };
            scan_client(
                buf,
                pass,
                st,
                Track::Pin,
                &mut Vec::new(),
                1 << 20,
                Some(&mut link),
            )
            .unwrap()
        }

        /// Scans server bytes with tracking on; what reaches the client (pgcorral's answers
        /// first, then the server's bytes it forwards).
        fn server(
            &mut self,
            buf: &[u8],
            pass: &mut usize,
            st: &mut LinkState,
        ) -> (ServerScan, Vec<u8>) {
            let mut answers = Answers {
                registry: &self.registry,
                expect: &mut self.expect,
                server: &mut self.server,
                client: &mut self.client,
                out: &mut self.fout,
            };
            let s = scan_server(
                buf,
                pass,
                st,
                &mut self.params,
                true,
                false,
                1 << 20,
                Some(&mut answers),
            )
            .unwrap();
            let mut shown = self.fout.split().to_vec();
            shown.extend_from_slice(&buf[s.front..s.ready]);
            (s, shown)
        }
    }

    impl Tracked {
        /// What the server gets for client bytes `bytes` (scanned again after each message
        /// pgcorral rewrites, as the relay does).
        fn send(&mut self, bytes: &[u8], st: &mut LinkState) -> Vec<u8> {
            let mut buf = std::mem::take(&mut self.cbuf);
            let mut pass = self.cpass;
            buf.extend_from_slice(bytes);
            let mut to_server = Vec::new();
            loop {
                let s = self.client(&buf, &mut pass, st);
                to_server.extend_from_slice(&self.wout.split());
                to_server.extend_from_slice(&buf[s.front..s.ready]);
                buf.drain(..s.ready);
                if !s.again {
                    (self.cbuf, self.cpass) = (buf, pass);
                    return to_server;
                }
            }
        }

        /// What the client gets for server bytes `bytes`, as tags of whole messages (scanned
        /// again where pgcorral
        /// answers or hides something, as the relay does); what ends part-way through a
        /// message pgcorral must see whole waits for the next bytes.
        fn receive(&mut self, bytes: &[u8], st: &mut LinkState) -> Vec<u8> {
            let mut buf = std::mem::take(&mut self.sbuf);
            let mut pass = self.spass;
            buf.extend_from_slice(bytes);
            let mut shown = Vec::new();
            loop {
                let (s, part) = self.server(&buf, &mut pass, st);
                shown.extend_from_slice(&part);
                buf.drain(..s.ready);
                if !s.again {
                    (self.sbuf, self.spass) = (buf, pass);
                    return shown;
                }
            }
        }
    }

    fn msgs(parts: &[Vec<u8>]) -> Vec<u8> {
        parts.concat()
    }

    fn parse(name: &str, sql: &str) -> Vec<u8> {
        msg(b'P', format!("{name}\0{sql}\0\0\0").as_bytes())
    }

    fn bind(stmt: &str) -> Vec<u8> {
        msg(b'B', format!("\0{stmt}\0\0\0\0\0\0\0").as_bytes())
    }

    /// A SELECT's whole answer, ReadyForQuery included.
    fn rows() -> Vec<u8> {
        msgs(&[
            msg(b'T', b"\0\0"),
            msg(b'D', b"\0\0"),
            msg(b'C', b"SELECT 1\0"),
            msg(b'Z', b"I"),
        ])
    }

    /// Plain Queries are counted, not queued; pipelined with extended-protocol messages that
    /// pgcorral rewrites and answers itself, every answer still comes out in order.
    #[test]
    fn counted_queries_mix_with_tracked_messages_in_one_pipeline() {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        // Counted; then a named Parse (prepared under pgcorral's name) and its Sync; then a
        // Query behind them, which is queued (something tracked is owed before it).
        let sent = t.send(
            &msgs(&[
                msg(b'Q', b"select 1\0"),
                parse("s1", "select 2"),
                msg(b'S', b""),
                msg(b'Q', b"select 3\0"),
            ]),
            &mut st,
        );
        assert_eq!(tags_of(&sent), "QPSQ");
        assert!(String::from_utf8_lossy(&sent).contains("pgcorral_1\0select 2"));
        assert_eq!(st.pending, 3);
        let answer = msgs(&[rows(), msg(b'1', b""), msg(b'Z', b"I"), rows()]);
        assert_eq!(tags_of(&t.receive(&answer, &mut st)), "TDCZ1ZTDCZ");
        assert!(t.expect.is_empty() && st.is_idle());

        // The same text under another name is on the server already: pgcorral answers its
        // Parse, but only after the counted Query before it has had its ReadyForQuery; an
        // error in a counted Query is just forwarded.
        let sent = t.send(
            &msgs(&[
                msg(b'Q', b"select 1/0\0"),
                parse("s2", "select 2"),
                bind("s2"),
                msg(b'E', b"\0\0\0\0\0"),
                msg(b'S', b""),
            ]),
            &mut st,
        );
        assert_eq!(tags_of(&sent), "QBES");
        let answer = msgs(&[
            msg(b'E', b"SERROR\0C22012\0Mdivision by zero\0\0"),
            msg(b'Z', b"I"),
            msg(b'2', b""),
            msg(b'D', b"\0\0"),
            msg(b'C', b"SELECT 1\0"),
            msg(b'Z', b"I"),
        ]);
        assert_eq!(tags_of(&t.receive(&answer, &mut st)), "EZ12DCZ");
        assert!(t.expect.is_empty() && st.is_idle());
        assert_eq!(t.client.count(), 2);

        // Answers split anywhere between reads come out the same.
        let answer = msgs(&[rows(), msg(b'1', b""), msg(b'Z', b"I"), rows()]);
        for cut in 0..answer.len() {
            let mut st = LinkState::default();
            t.send(
                &msgs(&[
                    msg(b'Q', b"select 1\0"),
                    parse("s3", "select 3"),
                    msg(b'S', b""),
                    msg(b'Q', b"select 3\0"),
                ]),
                &mut st,
            );
            let mut shown = t.receive(&answer[..cut], &mut st);
            shown.extend(t.receive(&answer[cut..], &mut st));
            assert_eq!(tags_of(&shown), "TDCZ1ZTDCZ", "cut at {cut}");
            assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");
            // s3 is closed by the client, so the next round prepares it again.
            t.client.remove_named(b"s3");
            t.server.clear();
        }
    }

    /// Only counted Queries owed: their answers pass without a look, wherever reads split
    /// them, each ending at its ReadyForQuery; a batch sent while they are answered is tracked
    /// behind them.
    #[test]
    fn counted_queries_alone_and_then_with_a_batch_behind_them() {
        let answer = msgs(&[rows(), rows(), rows()]);
        for cut in 0..answer.len() {
            let mut t = Tracked::default();
            let mut st = LinkState::default();
            let q = msg(b'Q', b"select 1\0");
            let sent = t.send(&msgs(&[q.clone(), q.clone(), q.clone()]), &mut st);
            assert_eq!(sent, msgs(&[q.clone(), q.clone(), q]));
            assert!(t.expect.only_counted());
            let mut shown = t.receive(&answer[..cut], &mut st);
            shown.extend(t.receive(&answer[cut..], &mut st));
            assert_eq!(tags_of(&shown), "TDCZTDCZTDCZ", "cut at {cut}");
            assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");
        }

        let first = rows();
        for cut in 0..first.len() {
            let mut t = Tracked::default();
            let mut st = LinkState::default();
            let q = msg(b'Q', b"select 1\0");
            t.send(&msgs(&[q.clone(), q]), &mut st);
            let mut shown = t.receive(&first[..cut], &mut st);
            // A named Parse of a statement this server has: pgcorral answers it, after the two
            // counted Queries' answers.
            t.server.insert(
                &t.registry
                    .intern(crate::prepared::Source::Parse(bytes::Bytes::from_static(
                        b"select 2\0\0\0",
                    ))),
                0,
            );
            let sent = t.send(&msgs(&[parse("s1", "select 2"), msg(b'S', b"")]), &mut st);
            assert_eq!(tags_of(&sent), "S");
            assert!(!t.expect.only_counted());
            shown.extend(t.receive(&first[cut..], &mut st));
            shown.extend(t.receive(&msgs(&[rows(), msg(b'Z', b"I")]), &mut st));
            assert_eq!(tags_of(&shown), "TDCZTDCZ1Z", "cut at {cut}");
            assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");
        }
    }

    /// After an error in an extended batch whose Sync is not sent yet, PostgreSQL ignores
    /// everything up to that Sync: a Query then is neither counted nor owed anything.
    #[test]
    fn a_query_while_the_server_skips_to_sync_is_not_counted() {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        t.send(&parse("s1", "select bad"), &mut st);
        let e = msg(b'E', b"SERROR\0C42703\0Mno\0\0");
        assert_eq!(tags_of(&t.receive(&e, &mut st)), "E");
        assert!(t.expect.skipping);
        t.send(&msgs(&[msg(b'Q', b"select 1\0"), msg(b'S', b"")]), &mut st);
        assert_eq!(tags_of(&t.receive(&msg(b'Z', b"I"), &mut st)), "Z");
        assert!(t.expect.is_empty());
        assert!(
            t.client.named(b"s1").is_none(),
            "the failed Parse is undone"
        );
    }

    /// What pgbench -M extended sends for one statement: the unnamed one parsed, bound,
    /// described, executed, synced.
    fn unnamed_batch(sql: &str) -> Vec<u8> {
        msgs(&[
            parse("", sql),
            bind(""),
            msg(b'D', b"P\0"),
            msg(b'E', b"\0\0\0\0\0"),
            msg(b'S', b""),
        ])
    }

    /// Its answer: ParseComplete, BindComplete, the rows and ReadyForQuery.
    fn unnamed_answer() -> Vec<u8> {
        msgs(&[msg(b'1', b""), msg(b'2', b""), rows()])
    }

    /// A batch of the unnamed statement, wholly buffered, is counted: sent as it is, nothing
    /// queued or kept for a retry, its Parse remembered; its answers pass wherever reads split
    /// them. Split across the client's reads it is tracked as before, to the same effect.
    #[test]
    fn an_unnamed_batch_is_counted_and_split_ones_are_tracked() {
        let batch = unnamed_batch("select 1");
        let answer = unnamed_answer();
        for cut in 0..answer.len() {
            let mut t = Tracked::default();
            let mut st = LinkState::default();
            assert_eq!(t.send(&batch, &mut st), batch);
            assert!(t.expect.only_counted() && t.expect.replay.is_idle());
            assert_eq!(t.client.unnamed(), Some(&b"select 1\0\0\0"[..]));
            assert!(t.unnamed_here);
            let mut shown = t.receive(&answer[..cut], &mut st);
            shown.extend(t.receive(&answer[cut..], &mut st));
            assert_eq!(tags_of(&shown), "12TDCZ", "cut at {cut}");
            assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");
        }
        for cut in 0..batch.len() {
            let mut t = Tracked::default();
            let mut st = LinkState::default();
            let mut sent = t.send(&batch[..cut], &mut st);
            assert!(!t.expect.only_counted() || cut == 0, "cut at {cut}");
            sent.extend(t.send(&batch[cut..], &mut st));
            assert_eq!(sent, batch, "cut at {cut}");
            assert_eq!(t.client.unnamed(), Some(&b"select 1\0\0\0"[..]));
            assert_eq!(tags_of(&t.receive(&answer, &mut st)), "12TDCZ");
            assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");
        }
    }

    /// While only counted Queries are owed, the messages the server scan looks at are still
    /// seen among those it passes whole: a ParameterStatus updates the server's parameters, an
    /// error is counted and a FATAL one marks the link broken.
    #[test]
    fn counted_answers_still_show_parameters_and_errors() {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        let q = msg(b'Q', b"select 1\0");
        assert_eq!(t.send(&q, &mut st), q);
        assert!(t.expect.only_counted());
        let answer = msgs(&[
            rows_without_ready(),
            msg(b'S', b"TimeZone\0UTC\0"),
            msg(b'N', b"SNOTICE\0C00000\0Mhello\0\0"),
            msg(b'E', b"SFATAL\0C57P01\0Mbye\0\0"),
            msg(b'Z', b"I"),
        ]);
        let (s, shown) = t.server(&answer, &mut 0, &mut st);
        assert_eq!(shown, answer);
        assert!(t.params.iter().any(|(k, v)| k == "TimeZone" && v == "UTC"));
        assert_eq!((s.n_errors, s.errors[0]), (1, *b"57"));
        assert!(s.fatal && st.broken);
        assert_eq!(s.done.queries, 1);
    }

    /// [`rows`] but its ReadyForQuery.
    fn rows_without_ready() -> Vec<u8> {
        let r = rows();
        r[..r.len() - 6].to_vec()
    }

    /// A counted batch that parses the unnamed statement twice, with a Flush inside: one
    /// request owed, the second text remembered, its answers end idle; and two such batches in
    /// one read are owed two.
    #[test]
    fn a_counted_batch_with_two_parses_and_a_flush() {
        let batch = msgs(&[
            parse("", "select 1"),
            bind(""),
            msg(b'E', b"\0\0\0\0\0"),
            msg(b'H', b""),
            parse("", "select 2"),
            bind(""),
            msg(b'D', b"P\0"),
            msg(b'E', b"\0\0\0\0\0"),
            msg(b'S', b""),
        ]);
        let answer = msgs(&[
            msg(b'1', b""),
            msg(b'2', b""),
            msg(b'D', b"\0\x01\0\0\0\x011"),
            msg(b'C', b"SELECT 1\0"),
            msg(b'1', b""),
            msg(b'2', b""),
            rows(),
        ]);
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        assert_eq!(t.send(&batch, &mut st), batch);
        assert_eq!((st.pending, st.unsynced), (1, false));
        assert!(t.expect.only_counted());
        assert_eq!(t.client.unnamed(), Some(&b"select 2\0\0\0"[..]));
        assert_eq!(tags_of(&t.receive(&answer, &mut st)), "12DC12TDCZ");
        assert!(t.expect.is_empty() && st.is_idle());

        let two = msgs(&[batch.clone(), batch]);
        assert_eq!(t.send(&two, &mut st), two);
        assert_eq!((st.pending, st.unsynced), (2, false));
        let answers = msgs(&[answer.clone(), answer]);
        assert_eq!(
            tags_of(&t.receive(&answers, &mut st)),
            "12DC12TDCZ12DC12TDCZ"
        );
        assert!(t.expect.is_empty() && st.is_idle());
    }

    /// What a counted batch cannot be: one that uses a named statement, or the unnamed one
    /// without parsing it first, or holds a Query.
    #[test]
    fn batches_that_need_tracking_are_not_counted() {
        for batch in [
            msgs(&[parse("s1", "select 1"), bind("s1"), msg(b'S', b"")]),
            msgs(&[parse("", "select 1"), bind("s1"), msg(b'S', b"")]),
            msgs(&[parse("", "select 1"), msg(b'D', b"Ss1\0"), msg(b'S', b"")]),
            msgs(&[parse("", "select 1"), msg(b'C', b"Ss1\0"), msg(b'S', b"")]),
            msgs(&[bind(""), msg(b'E', b"\0\0\0\0\0"), msg(b'S', b"")]),
            msgs(&[
                parse("", "select 1"),
                msg(b'Q', b"select 1\0"),
                msg(b'S', b""),
            ]),
            msgs(&[
                parse("", "select 1"),
                parse("s2", "select 2"),
                msg(b'S', b""),
            ]),
        ] {
            let mut t = Tracked::default();
            let mut st = LinkState::default();
            t.client.add_named(
                b"s1",
                t.registry
                    .intern(crate::prepared::Source::Parse(bytes::Bytes::from_static(
                        b"select 1\0\0\0",
                    ))),
            );
            t.send(&batch, &mut st);
            assert!(!t.expect.only_counted(), "{:?}", tags_of(&batch));
        }
        // Behind anything owed, a batch is tracked too.
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        t.send(&parse("s1", "select 1"), &mut st);
        t.send(&unnamed_batch("select 2"), &mut st);
        assert!(!t.expect.only_counted());
        let answer = msgs(&[msg(b'1', b""), unnamed_answer()]);
        assert_eq!(tags_of(&t.receive(&answer, &mut st)), "112TDCZ");
        assert!(t.expect.is_empty() && st.is_idle());
    }

    /// Errors inside a counted batch (its Parse, its Execute) reach the client, and its
    /// ReadyForQuery still ends it; the failed text is remembered as PostgreSQL's unnamed
    /// statement is gone.
    #[test]
    fn errors_inside_a_counted_batch_end_at_its_ready_for_query() {
        let e = msg(b'E', b"SERROR\0C42601\0Msyntax error\0\0");
        for answer in [
            msgs(&[e.clone(), msg(b'Z', b"I")]),
            msgs(&[msg(b'1', b""), msg(b'2', b""), e, msg(b'Z', b"I")]),
        ] {
            let mut t = Tracked::default();
            let mut st = LinkState::default();
            t.send(&unnamed_batch("select bad"), &mut st);
            assert!(t.expect.only_counted());
            assert_eq!(tags_of(&t.receive(&answer, &mut st)), tags_of(&answer));
            assert!(t.expect.is_empty() && st.is_idle() && !t.expect.skipping);
            // The next batch is counted again.
            t.send(&unnamed_batch("select 1"), &mut st);
            assert!(t.expect.only_counted());
            assert_eq!(tags_of(&t.receive(&unnamed_answer(), &mut st)), "12TDCZ");
            assert!(t.expect.is_empty() && st.is_idle());
        }
    }

    /// Counted batches pipelined with named statements: the ParseComplete pgcorral owes for a
    /// statement the server has comes after the counted batch's answers, wherever reads split
    /// them; a later Bind of the unnamed statement in another relay (another server) parses it
    /// again, hidden.
    #[test]
    fn counted_batches_mix_with_named_statements() {
        let answer = msgs(&[
            unnamed_answer(),
            msg(b'2', b""),
            msg(b'C', b"SELECT 1\0"),
            msg(b'Z', b"I"),
        ]);
        for cut in 0..answer.len() {
            let mut t = Tracked::default();
            let mut st = LinkState::default();
            t.server.insert(
                &t.registry
                    .intern(crate::prepared::Source::Parse(bytes::Bytes::from_static(
                        b"select 2\0\0\0",
                    ))),
                0,
            );
            let sent = t.send(
                &msgs(&[
                    unnamed_batch("select 1"),
                    parse("s1", "select 2"),
                    bind("s1"),
                    msg(b'E', b"\0\0\0\0\0"),
                    msg(b'S', b""),
                ]),
                &mut st,
            );
            assert_eq!(tags_of(&sent), "PBDESBES");
            assert!(String::from_utf8_lossy(&sent).contains("pgcorral_1\0"));
            let mut shown = t.receive(&answer[..cut], &mut st);
            shown.extend(t.receive(&answer[cut..], &mut st));
            assert_eq!(tags_of(&shown), "12TDCZ12CZ", "cut at {cut}");
            assert!(t.expect.is_empty() && st.is_idle(), "cut at {cut}");

            // Another relay: the unnamed statement is not known to be on this server.
            t.unnamed_here = false;
            let sent = t.send(
                &msgs(&[
                    bind(""),
                    msg(b'D', b"P\0"),
                    msg(b'E', b"\0\0\0\0\0"),
                    msg(b'S', b""),
                ]),
                &mut st,
            );
            assert_eq!(tags_of(&sent), "PBDES");
            assert!(sent.windows(9).any(|w| w == b"select 1\0"));
            assert_eq!(tags_of(&t.receive(&unnamed_answer(), &mut st)), "2TDCZ");
            assert!(t.expect.is_empty() && st.is_idle());
        }
    }

    /// A counted batch keeps nothing for a retry, and the batch of a named statement after it
    /// is still retried when the statement went stale.
    #[test]
    fn a_stale_named_statement_after_counted_batches_is_retried() {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        t.send(
            &msgs(&[parse("s1", "select * from t"), msg(b'S', b"")]),
            &mut st,
        );
        t.receive(&msgs(&[msg(b'1', b""), msg(b'Z', b"I")]), &mut st);
        t.send(&unnamed_batch("select 1"), &mut st);
        assert!(t.expect.only_counted() && t.expect.replay.is_idle());
        t.receive(&unnamed_answer(), &mut st);
        let named = msgs(&[
            bind("s1"),
            msg(b'D', b"P\0"),
            msg(b'E', b"\0\0\0\0\0"),
            msg(b'S', b""),
        ]);
        assert_eq!(tags_of(&t.send(&named, &mut st)), "BDES");
        let stale = msg(
            b'E',
            b"SERROR\0C0A000\0Mcached plan must not change result type\0\0",
        );
        let mut buf = msgs(&[stale, msg(b'Z', b"I")]);
        let (mut shown, mut replay) = (Vec::new(), false);
        loop {
            let (s, part) = t.server(&buf, &mut 0, &mut st);
            shown.extend(part);
            replay |= s.replay;
            buf.drain(..s.ready);
            if !s.again {
                break;
            }
        }
        assert!(buf.is_empty() && shown.is_empty() && replay);
        assert_eq!(t.expect.replay.take_due().as_deref(), Some(&named[..]));
    }

    /// COPY FROM STDIN run by a counted batch: PostgreSQL ignores the batch's Sync, so its
    /// answers end at the ReadyForQuery of the Sync sent after the COPY.
    #[test]
    fn copy_in_from_a_counted_batch() {
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        t.send(&unnamed_batch("copy t from stdin"), &mut st);
        assert!(t.expect.only_counted());
        let start = msgs(&[msg(b'1', b""), msg(b'2', b""), msg(b'G', b"\0\0\0")]);
        assert_eq!(tags_of(&t.receive(&start, &mut st)), "12G");
        assert_eq!((st.pending, st.unsynced), (0, true));
        t.send(
            &msgs(&[msg(b'd', b"1\n"), msg(b'c', b""), msg(b'S', b"")]),
            &mut st,
        );
        let (s, shown) = t.server(
            &msgs(&[msg(b'C', b"COPY 1\0"), msg(b'Z', b"I")]),
            &mut 0,
            &mut st,
        );
        assert_eq!(
            (tags_of(&shown), s.stop),
            ("CZ".into(), Some(Outcome::Idle))
        );
        assert!(t.expect.is_empty() && st.is_idle());
    }

    fn tags_of(mut b: &[u8]) -> String {
        let mut t = String::new();
        while let Ok(Some(h)) = Header::parse(b, 1 << 20) {
            t.push(h.tag as char);
            b = &b[h.total_len().min(b.len())..];
        }
        t
    }

    /// A Query that may be PREPARE, EXECUTE or DEALLOCATE, whose start arrives in one read and
    /// the rest in another, is rewritten all the same: nothing of it is forwarded until its
    /// first word shows what it is, nor then if it is one of those, until it is whole.
    #[test]
    fn a_query_split_across_reads_is_still_rewritten() {
        for sql in [
            "PREPARE p AS SELECT 1",
            "  execute p",
            "DEALLOCATE p",
            "discard all",
        ] {
            let m = msg(b'Q', format!("{sql}\0").as_bytes());
            // Counted or planned: alone, or behind an answer still owed for something else.
            for (cut, queued) in (0..m.len()).flat_map(|c| [(c, false), (c, true)]) {
                let mut t = Tracked::default();
                if !sql.starts_with("PREPARE") {
                    // The client has statement p.
                    let mut st = LinkState::default();
                    let prep = msg(b'Q', b"PREPARE p AS SELECT 1\0");
                    t.client(&prep, &mut 0, &mut st);
                    t.wout.clear();
                    t.receive(&msgs(&[msg(b'C', b"PREPARE\0"), msg(b'Z', b"I")]), &mut st);
                    assert!(t.expect.is_empty());
                }
                if queued {
                    t.expect.push(Msg::Sync);
                }
                let mut st = LinkState::default();
                let mut pass = 0;
                let first = t.client(&m[..cut], &mut pass, &mut st);
                assert_eq!(
                    (first.front, first.ready, pass),
                    (0, 0, 0),
                    "{sql:?} cut at {cut}: nothing forwarded yet"
                );
                let s = t.client(&m, &mut pass, &mut st);
                let out = String::from_utf8_lossy(&t.wout).into_owned();
                if sql == "discard all" {
                    // Forwarded as it is; the client's statements are forgotten.
                    assert_eq!((s.front, s.ready), (0, m.len()), "{sql:?} cut at {cut}");
                    assert_eq!(t.client.count(), 0, "{sql:?} cut at {cut}");
                    continue;
                }
                assert_eq!(
                    (s.front, s.ready),
                    (m.len(), m.len()),
                    "{sql:?} cut at {cut}"
                );
                if sql.starts_with("DEALLOCATE") {
                    assert_eq!(tags_of(&t.wout), "S", "answered by pgcorral");
                    assert_eq!(t.client.count(), 0, "{sql:?} cut at {cut}");
                } else {
                    assert!(out.contains("pgcorral_"), "{sql:?} cut at {cut}: {out:?}");
                }
            }
        }
    }

    /// A plain Query cut after its first byte is forwarded at once: it cannot be one of those.
    #[test]
    fn a_plain_query_split_across_reads_is_forwarded_as_it_comes() {
        let m = msg(b'Q', b"SELECT 1\0");
        let mut t = Tracked::default();
        let mut st = LinkState::default();
        let mut pass = 0;
        let s = t.client(&m[..7], &mut pass, &mut st);
        assert_eq!((s.front, s.ready, pass), (0, 7, m.len() - 7));
        assert_eq!(st.pending, 1);
        let s = t.client(&m[7..], &mut pass, &mut st);
        assert_eq!((s.ready, pass), (m.len() - 7, 0));
        let answer = msgs(&[msg(b'C', b"SELECT 1\0"), msg(b'Z', b"I")]);
        let (s, shown) = t.server(&answer, &mut 0, &mut st);
        assert_eq!(
            (tags_of(&shown), s.stop),
            ("CZ".into(), Some(Outcome::Idle))
        );
        assert!(t.expect.is_empty() && t.wout.is_empty());
    }

    /// [`sql_text`] as it was written before memchr: byte loops.
    fn sql_text_naive(msg: &[u8], h: Header) -> Option<&[u8]> {
        let body = msg.get(pgwire::header::HEADER_LEN..h.total_len())?;
        let sql = if h.tag == frontend::PARSE {
            match body.iter().position(|&b| b == 0) {
                Some(i) => &body[i + 1..],
                None => body,
            }
        } else {
            body
        };
        let end = sql.iter().position(|&b| b == 0).unwrap_or(sql.len());
        Some(&sql[..end])
    }

    proptest::proptest! {
        /// Over bodies with and without NULs (few distinct bytes, so NULs are common), whole or
        /// cut short, of a Query or a Parse: the same text as the naive loop, but for a whole
        /// Query ending in a NUL, whose text is all of it.
        #[test]
        fn sql_text_agrees_with_the_naive_loop(
            parse in proptest::prelude::any::<bool>(),
            body in proptest::collection::vec(0u8..4, 0..200),
            cut in 0usize..210,
        ) {
            let m = msg(if parse { b'P' } else { b'Q' }, &body);
            let m = &m[..m.len().min(cut + pgwire::header::HEADER_LEN)];
            let h = Header::parse(&msg(m[0], &body), 1 << 20).unwrap().unwrap();
            let (got, naive) = (sql_text(m, h), sql_text_naive(m, h));
            match (got, naive) {
                // A Query that ends in its NUL: the whole body but that NUL, which starts
                // with the text up to the first NUL.
                (Some(g), Some(n)) if !parse && m.len() == h.total_len() && body.last() == Some(&0) => {
                    proptest::prop_assert_eq!(g, &body[..body.len() - 1]);
                    proptest::prop_assert!(g.starts_with(n));
                }
                _ => proptest::prop_assert_eq!(got, naive),
            }
        }

        #[test]
        fn scans_never_overrun(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let mut st = LinkState::default();
            let mut pass = 0;
            if let Ok(s) = scan_client(&bytes, &mut pass, &mut st, Track::Pin, &mut Vec::new(), 1 << 16, None) {
                proptest::prop_assert!(s.ready <= bytes.len());
            }
            let mut pass = 0;
            if let Ok(s) = scan_server(&bytes, &mut pass, &mut st, &mut Default::default(), true, true, 1 << 16, None) {
                proptest::prop_assert!(s.ready <= bytes.len());
            }
        }
    }
}
