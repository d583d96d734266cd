//! The data path while a client holds a server: bytes flow both ways at once, message bodies pass
//! through unparsed (only headers are read, plus the few small messages that change state:
//! ReadyForQuery and ErrorResponse), writes apply backpressure to reads, and the relay stops at
//! the first point where the server is idle and may go back to the pool.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Buf;
use corral_rt::balance::Balance;
use corral_rt::batch;
use corral_rt::direct::Budget;
use pgwire::backend::TxStatus;
use pgwire::FrameError;
use tokio::io::AsyncWrite;

use crate::client_conn::ClientConn;
use crate::cluster::Target;
use crate::logsafe;
use crate::pool::registry;
use crate::pool::stats::{Done, Meter, Stats, Totals};
use crate::pool::Pool;
use crate::prepared::expect::Answers;
use crate::prepared::rewrite::Link;
use crate::prepared::Registry;
use crate::server::{LinkState, ServerConn};
use crate::session::hooks::HookMap;

pub mod database_ddl;
mod scan;
mod state;
pub use scan::{scan_client, scan_server, ClientScan, ServerScan};
use state::{ClientFlush, ClientSide, PhaseTimer, ServerSide};

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
    /// The client sent Terminate (`eof` false) or closed its socket; everything before was
    /// forwarded.
    ClientGone { eof: bool },
    /// The client broke the protocol.
    ClientProtocol(String),
    /// The server closed or failed; `notified` when it sent the client a FATAL first.
    ServerGone { notified: bool },
    /// A timeout of [`Timeouts`] expired.
    TimedOut(Phase),
    /// A sharded database's batch inside a transaction is answered (see
    /// [`LinkState::between`]): the server stays the client's, and its next batch is checked
    /// before it goes.
    Between,
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
    /// Not a phase of its own: a transaction (explicit, or one statement's) has lasted longer
    /// than transaction_timeout, whatever it was doing. Only reported by the timer.
    Transaction,
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

/// query_timeout, idle_transaction_timeout, client_idle_timeout and transaction_timeout;
/// `None` = off.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timeouts {
    pub query: Option<Duration>,
    pub idle_in_transaction: Option<Duration>,
    pub client_idle: Option<Duration>,
    pub transaction: Option<Duration>,
}

impl Timeouts {
    fn any(&self) -> bool {
        self.query.is_some()
            || self.idle_in_transaction.is_some()
            || self.client_idle.is_some()
            || self.transaction.is_some()
    }

    fn of(&self, p: Phase) -> Option<Duration> {
        match p {
            Phase::Query => self.query,
            Phase::IdleInTransaction => self.idle_in_transaction,
            Phase::Idle => self.client_idle,
            Phase::Transaction => self.transaction,
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
    /// Stop when the server is idle after a request that may have changed the session
    /// (session mode, for a client with startup settings: RESET must return to them).
    pub stop_when_dirty: bool,
    /// Refuse transactions (statement mode).
    pub statement: bool,
    pub track: Track,
    pub timeouts: Timeouts,
    /// Prepared statements are the client's own, moved between servers (transaction and
    /// statement mode): the registry that shares them, max_prepared_statements and
    /// retry_stale_statements.
    pub prepared: Option<(&'a Registry, usize, bool)>,
    /// The pool whose statistics count queries, transactions and bytes, and the worker's
    /// shard. A pool rather than its statistics, so that a request loop keeps one `Mode` and
    /// points it at each server's pool (several servers).
    pub stats: Option<(Pool, usize)>,
    /// Where the request was routed, for a database with routing: each transaction is routed
    /// on its own, so one request batch is in flight at a time (see
    /// [`LinkState::one_batch`]). `None`: the database's one server.
    pub target: Option<Target>,
    /// A sharded database: stop at each answered batch of a transaction ([`Outcome::Between`]).
    pub between: bool,
    /// Session mode: also stop when the server is idle while the client's worker would move a
    /// client elsewhere (the balance and that worker), so that the client can move with its
    /// server.
    pub shed: Option<(&'a Balance, usize)>,
    /// Every pool: idle servers to a database are closed before a statement that needs no
    /// other session on it (DROP DATABASE and the like: [`database_ddl`]).
    pub pools: Option<&'a registry::Registry>,
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

/// Before a statement that PostgreSQL refuses while other sessions are connected to its
/// database (the message at the start of `msg`), closes pgcorral's idle servers to that
/// database, in every pool. Servers lent to clients stay: PostgreSQL's error is then the truth.
#[cold]
#[inline(never)]
fn close_for_ddl(pools: &registry::Registry, msg: &[u8]) {
    let Some(h) = pgwire::Header::parse(msg, u32::MAX).ok().flatten() else {
        return;
    };
    let Some(database) = scan::sql_text(msg, h).and_then(database_ddl::target) else {
        return;
    };
    let closed = pools.close_idle_to(&database);
    if closed > 0 {
        tracing::info!(
            database = %logsafe::Esc(&database),
            closed,
            "closed idle server connections to a database before a statement that needs it unused"
        );
    }
}

/// The client side's scan: bytes to forward (after dropping what was rewritten), a stop, and
/// whether to scan again once those bytes are written.
fn scan_c(
    client: &mut ClientConn,
    server: &mut ServerConn,
    mode: &Mode,
    hooks: &HookMap,
    unnamed_here: &mut bool,
) -> ClientSide {
    let catalog = server.state.catalog;
    let mut link = mode.prepared.map(|(registry, max, retry)| Link {
        registry,
        max,
        client: &mut client.statements,
        server: &mut server.statements,
        expect: &mut server.expect,
        out: &mut server.wout,
        unnamed_here,
        tally: &mut server.meter.delta,
        retry,
    });
    match scan_client(
        &client.buf,
        &mut client.pass,
        &mut server.state,
        mode.track,
        hooks,
        &mut client.custom,
        client.max_len,
        link.as_mut(),
    ) {
        Ok(s) => {
            if server.state.catalog && !catalog {
                // Before it reaches the server: no transaction is judged by the catalog as it
                // was once this may have changed it.
                if let Some(w) = &server.hooks {
                    w.stale();
                }
            }
            if let (Some(at), Some(pools)) = (s.ddl, mode.pools) {
                close_for_ddl(pools, &client.buf[at..]);
            }
            client.buf.advance(s.front);
            ClientSide {
                ready: s.ready - s.front,
                stop: client_stop(&s),
                again: s.again,
                held: s.held,
                reading: false,
            }
        }
        Err(e) => ClientSide {
            ready: 0,
            stop: Some(Outcome::ClientProtocol(e.to_string())),
            again: false,
            held: false,
            reading: false,
        },
    }
}

/// The server side's scan; answers pgcorral gives itself go to `server.fout`.
fn scan_s(
    client: &mut ClientConn,
    server: &mut ServerConn,
    mode: &Mode,
) -> Result<ServerScan, FrameError> {
    let stop = mode.stop_when_idle
        || (mode.stop_when_dirty && server.state.dirty)
        || mode.shed.is_some_and(|(b, w)| b.may_move(w));
    let mut answers = mode.prepared.map(|(registry, _, _)| Answers {
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
        stop,
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
    // The catalog the transaction is judged by (transaction and statement mode), and whether it
    // may have changed while the transaction ran: if so, what the transaction reached is not
    // known, and it is treated as one that ran user code.
    let pooled = mode.stop_when_idle;
    // The version is read before the map is loaded: a map stored in between is newer than the
    // version it is kept with, never older.
    let mut version = 0;
    let hooks = match (server.hooks.as_deref(), pooled) {
        (Some(w), true) => {
            version = w.version();
            match server.map.take() {
                Some((v, map)) if v == version => map,
                _ => w.current(),
            }
        }
        // A pooled server outside any pool's watch: nothing is trusted.
        (None, true) => Arc::new(HookMap::unknown(0)),
        // Session mode keeps its server: only what returns to the startup settings matters
        // (a statement's text), not what user code its names reach.
        (_, false) => Arc::new(HookMap::quiet()),
    };
    // Whatever an earlier client left marked was marked stale then: this run marks its own.
    server.state.catalog = false;
    let outcome = relay(client, server, mode, &hooks).await;
    if let Some(w) = server.hooks.as_deref().filter(|_| pooled) {
        if w.generation() != hooks.generation {
            server.state.dirty = true;
            server.state.taint = true;
        }
        // Read again before it expires, by the client loop once this transaction is over.
        server.read_hooks = hooks.due();
        server.map = Some((version, hooks));
    }
    outcome
}

/// [`run`], judging the client's statements by `hooks`.
async fn relay(
    client: &mut ClientConn,
    server: &mut ServerConn,
    mode: &Mode<'_>,
    hooks: &HookMap,
) -> Outcome {
    if server.state.pending == 0 && !server.state.unsynced {
        // Nothing outstanding: nothing is owed either.
        server.expect.clear();
    }
    // A registration for the server's socket made before this relay may hold another task's
    // waker.
    server.read_armed = false;
    // The client's unnamed statement is not on this server until it is parsed here.
    let mut unnamed_here = false;
    let mut timer = PhaseTimer::new(&mode.timeouts);
    server.state.one_batch = mode.target.is_some();
    server.state.between = mode.between;
    // Whatever the client already sent (the request that caused checkout) goes first.
    let mut c = scan_c(client, server, mode, hooks, &mut unnamed_here);
    metered(mode, &mut server.meter, &server.state, Done::default());
    // Anything the server sent while idle reaches this client; answers pgcorral owes go out.
    let mut s = ServerSide::new(!server.rbuf.is_empty() || server.expect.fake_next());
    // Sockets are read and written straight, outside any task budget: this is the relay's.
    let mut budget = Budget::new();
    let mut flush = ClientFlush::default();

    loop {
        if c.may_resume(&s, &server.state) {
            // Answered, and still in a transaction: the next batch belongs to it.
            c.resume();
        }
        if c.wants_scan() {
            c = scan_c(client, server, mode, hooks, &mut unnamed_here);
            s.again |= server.expect.fake_next();
            metered(mode, &mut server.meter, &server.state, Done::default());
        }
        let verifying = server.expect.verifying;
        if s.begin_scan() {
            match scan_s(client, server, mode) {
                Ok(scan) => {
                    metered(mode, &mut server.meter, &server.state, scan.done);
                    if let Some((stats, _)) = mode.stats() {
                        for class in &scan.errors[..scan.n_errors] {
                            stats.error(*class);
                        }
                    }
                    s.scanned(scan);
                }
                Err(e) => {
                    tracing::warn!(error = %logsafe::Esc(&e), "server sent an invalid message");
                    s.stop = Some(server_gone(server, false));
                }
            }
        }
        if (verifying && !server.expect.verifying && c.again) || c.may_resume(&s, &server.state) {
            // The client's message that waited for a description goes on; so does a held
            // batch once everything before it is answered, even when none of the answers was
            // the client's (pgcorral's own Parse, Describe and Sync before an EXECUTE).
            continue;
        }
        if s.take_replay(&c, client.pass) {
            if let Some(batch) = server.expect.replay.take_due() {
                let mut buf = bytes::BytesMut::with_capacity(batch.len() + client.buf.len());
                buf.extend_from_slice(&batch);
                buf.extend_from_slice(&client.buf);
                client.buf = buf;
                // The unnamed statement may have gone stale too: parse it again.
                unnamed_here = false;
                c.again = true;
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
        // pgcorral gives and the server's bytes after them. Plain forwarding only tests
        // whether there are any such bytes of pgcorral's own.
        if !server.wout.is_empty() {
            if c.ready > 0 && c.ready <= MERGE_MAX {
                server.wout.extend_from_slice(&client.buf[..c.ready]);
                let n = c.ready;
                to_server(client, server, &mut c, n);
            }
            match server.stream.try_write_now(&server.wout) {
                None => {}
                Some(Ok(n)) if n > 0 => {
                    consume(&mut server.wout, n);
                    wrote = true;
                }
                Some(_) => return server_gone(server, s.fatal),
            }
        } else if c.ready > 0 {
            match server.stream.try_write_now(&client.buf[..c.ready]) {
                None => {}
                Some(Ok(n)) if n > 0 => {
                    to_server(client, server, &mut c, n);
                    wrote = true;
                }
                Some(_) => return server_gone(server, s.fatal),
            }
        }
        if !server.fout.is_empty() {
            if s.ready > 0 && s.ready <= MERGE_MAX {
                server.fout.extend_from_slice(&server.rbuf[..s.ready]);
                // Counted as sent when `fout` is written.
                consume(&mut server.rbuf, s.ready);
                s.ready = 0;
            }
            match client.stream.try_write_now(&server.fout) {
                None => {}
                Some(Ok(n)) if n > 0 => {
                    consume(&mut server.fout, n);
                    server.meter.delta.bytes_sent += n as u64;
                    wrote = true;
                    wrote_to_client(&mut flush, client);
                }
                Some(_) => return client_gone(client),
            }
        } else if s.ready > 0 {
            match client.stream.try_write_now(&server.rbuf[..s.ready]) {
                None => {}
                Some(Ok(n)) if n > 0 => {
                    to_client(server, &mut s, n);
                    wrote = true;
                    wrote_to_client(&mut flush, client);
                }
                Some(_) => return client_gone(client),
            }
        }
        if wrote && (c.rescans() || s.rescans()) {
            // A side waited for its bytes to be written before its next scan (or a held batch,
            // or a replay): back to the top, as after a write the poll made.
            continue;
        }
        let c_sent = c.all_sent(&server.wout);
        if s.finished(&server.fout) {
            // The server may be released, but not while the client is part-way through a
            // message (stray COPY data after a failed COPY): the server would take the next
            // client's bytes for the rest of it. Forward the rest of that message first.
            let mid_message = !c_sent || client.pass > 0;
            if !(mid_message && s.releasable()) {
                let o = s.stop.take().expect("checked");
                return finish(o, client, server, c.ready);
            }
            if let Some(o) = c.stop.take() {
                // The client left part-way through it: the server is out of frame (closed).
                return finish(o, client, server, c.ready);
            }
        }
        if c_sent {
            // A refused Query waits until what came before it has been answered.
            if let Some(o) = c.take_stop(server.state.pending == 0 && s.ready == 0) {
                return finish(o, client, server, c.ready);
            }
        }
        if s.plan_read() {
            reserve(&mut server.rbuf);
        }
        if c.plan_read(c_sent, &s, client.pass) {
            reserve(&mut client.buf);
        }
        timer.follow(&server.state, &mode.timeouts);
        // A `move` closure holds one pointer to each of the two connections, the timer and the
        // two sides: a pointer (or a copy) per field it reads would make every client's future
        // bigger.
        let ev = {
            let (client, server, timer) = (&mut *client, &mut *server, &mut timer);
            let (c, s) = (&c, &s);
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
                } else if c.ready > 0 {
                    if let Poll::Ready(r) =
                        server.stream.poll_write_from(cx, &client.buf[..c.ready])
                    {
                        return Poll::Ready(Event::ToServer(r));
                    }
                }
                if !server.fout.is_empty() {
                    if let Poll::Ready(r) = client.stream.poll_write_from(cx, &server.fout) {
                        return Poll::Ready(Event::ToClientOwn(r));
                    }
                } else if s.ready > 0 {
                    if let Poll::Ready(r) =
                        client.stream.poll_write_from(cx, &server.rbuf[..s.ready])
                    {
                        return Poll::Ready(Event::ToClient(r));
                    }
                }
                // A socket whose last read left this task registered, and that nothing has
                // made readable since, needs no second registration: the socket keeps the first
                // until bytes come (and wakes the task then). Within a transaction or session
                // that saves two of them per statement.
                if s.reading && !server.stream.still_registered(server.read_armed) {
                    let (stream, rbuf) = (&mut server.stream, &mut server.rbuf);
                    if let Poll::Ready(r) = stream.poll_read_armed(cx, rbuf, &mut server.read_armed)
                    {
                        return Poll::Ready(Event::FromServer(r));
                    }
                }
                if c.reading && !client.stream.still_registered(client.read_armed) {
                    if let Poll::Ready(r) = client.poll_read(cx) {
                        return Poll::Ready(Event::FromClient(r));
                    }
                }
                if timer.expired(cx) {
                    return Poll::Ready(Event::Timeout);
                }
                Poll::Pending
            })
            .await
        };
        if flush.take_held() {
            client.stream.flush_batched();
        }
        if budget.spend() {
            // This task is run again at once, before the worker sends its batch: what the
            // relay wrote goes out first.
            batch::flush();
            tokio::task::yield_now().await;
        }

        match ev {
            Event::ToServer(Ok(n)) if n > 0 => to_server(client, server, &mut c, n),
            Event::ToServerOwn(Ok(n)) if n > 0 => server.wout.advance(n),
            Event::ToServer(_) | Event::ToServerOwn(_) => return server_gone(server, s.fatal),
            Event::ToClient(Ok(n)) if n > 0 => {
                to_client(server, &mut s, n);
                wrote_to_client(&mut flush, client);
            }
            Event::ToClientOwn(Ok(n)) if n > 0 => {
                server.fout.advance(n);
                server.meter.delta.bytes_sent += n as u64;
                wrote_to_client(&mut flush, client);
            }
            Event::ToClient(_) | Event::ToClientOwn(_) => return client_gone(client),
            Event::Timeout => {
                client.buf.advance(c.ready);
                return Outcome::TimedOut(timer.reason());
            }
            Event::FromServer(Ok(n)) if n > 0 => s.received(),
            Event::FromServer(_) => s.stop = Some(server_gone(server, s.fatal)),
            Event::FromClient(Ok(n)) if n > 0 && s.stop.is_some() => {
                // Draining: only the rest of the message in flight, unscanned (it can only be
                // COPY data the server will ignore).
                c.drain(&mut client.pass, client.buf.len());
            }
            Event::FromClient(Ok(n)) if n > 0 => {
                c.received();
                // A read that filled the buffer leaves the client's readiness set: the relay goes
                // on forwarding without waiting, so the worker does not look for events, and
                // the server's readiness would not show what it sent meanwhile (an error in the
                // middle of a long pipeline would wait for the client to stop sending). Its
                // socket is read straight then, once per such read.
                flush.client_read(&client.buf);
                if s.reading && flush.streaming() {
                    reserve(&mut server.rbuf);
                    match server.stream.try_read_now(&mut server.rbuf) {
                        None => {}
                        Some(Ok(n)) if n > 0 => s.received(),
                        Some(_) => s.stop = Some(server_gone(server, s.fatal)),
                    }
                }
            }
            Event::FromClient(_) => c.stop = Some(client_gone(client)),
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
    Outcome::ClientGone { eof: true }
}

/// After a write to the client: the worker's batch goes out now while the client streams;
/// else the write is held there until the relay's next event.
#[inline]
fn wrote_to_client(flush: &mut ClientFlush, client: &mut ClientConn) {
    if flush.wrote() {
        client.stream.flush_batched();
    }
}

/// `n` of the client side's scanned bytes went to the server.
#[inline]
fn to_server(client: &mut ClientConn, server: &mut ServerConn, c: &mut ClientSide, n: usize) {
    consume(&mut client.buf, n);
    c.sent(n);
    server.meter.delta.bytes_received += n as u64;
}

/// `n` of the server side's scanned bytes went to the client.
#[inline]
fn to_client(server: &mut ServerConn, s: &mut ServerSide, n: usize) {
    consume(&mut server.rbuf, n);
    s.sent(n);
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
        Some(Outcome::ClientGone { eof: false })
    } else if let Some(why) = s.refuse {
        Some(Outcome::Refused(why))
    } else {
        s.bad_tag
            .map(|t| Outcome::ClientProtocol(format!("invalid frontend message type {t}")))
    }
}

#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
