//! One client's life: admission ([`admit`]), then the loop that waits for a request
//! ([`request`]), checks out a server (transaction/statement mode) or keeps one (session mode),
//! brings its session state along ([`state`]), relays, and releases.

mod access;
mod admit;
pub mod auth;
mod cached;
pub mod handover;
mod listens;
mod login_auth;
mod params;
mod replication;
mod replies;
mod request;
mod sharded;
mod slim;
pub mod startup;
mod state;
mod tenant;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use admit::admit;
use bytes::BytesMut;
use corral_rt::balance::Seat;
use corral_rt::stream::{Detached, Stream};
use replies::{notify_while_waiting, refuse_statement, refuse_transaction, timed_out};
use request::{next_request, IdleTimer, Next};
use sharded::check_in_transaction;
use state::{deliver_held, recapture};

use crate::admin;
use crate::cancel::CancelSlot;
use crate::client_conn::ClientConn;
use crate::clock;
use crate::cluster;
use crate::cluster::Want;
use crate::cold;
use crate::config;
use crate::config::{millis_opt, ClientTimeouts, PoolMode};
use crate::connlog::{self, Who};
use crate::conns;
use crate::conns::State as ListState;
use crate::error::{Error, Kind, Result};
use crate::link::{self, Attach, Link};
use crate::login_places::{Lane, Source};
use crate::net::peer::Peer;
use crate::notify;
use crate::pool::{Checkout, ClientWait, Pool};
use crate::prepared;
use crate::relay::{self, Outcome, Phase, Timeouts};
use crate::route::{self, ClientRoute, Decision};
use crate::services::{ClientCount, LoginCount, Services};
use crate::session;
use crate::session::exec;
use crate::session::Settings;
use crate::tenants::Loaded;

/// The task of one accepted connection, to its end: registers the socket with the reactor of
/// the worker that polls it, admits the client and serves it. Errors are reported to the
/// client and logged. The connection holds a place of the login budget in `lane`, which its
/// login takes over.
pub fn serve(
    socket: Detached,
    peer: Peer,
    services: Services,
    worker: usize,
    lane: Lane,
) -> impl Future<Output = ()> + Send + 'static {
    task(socket, peer, services, worker, Arrival::New(lane))
}

/// How a client's task begins.
enum Arrival {
    /// A connection just accepted, holding a place of the login budget in this lane.
    New(Lane),
    /// A logged-in client moved from another worker (or handed over by another process).
    Moved(Box<Moved>),
}

/// A logged-in client on its way to another worker (see [`migrate`]): all of it but its socket.
struct Moved {
    buf: BytesMut,
    pass: usize,
    max_len: u32,
    custom: thin_vec::ThinVec<String>,
    statements: prepared::ClientStatements,
    session: Box<LoggedIn>,
    count: ClientCount,
}

/// A client's task on `worker`: a new connection, or a logged-in client moved from another
/// worker (`arrival`). Idle clients cost this future, so it runs in two stages: everything
/// until the client is logged in ([`start`]: the socket's registration, admission, a moved
/// client's unpacking, and the whole life of console and replication clients) is boxed and
/// freed when it ends; a pooled client's task then holds only [`Serving`] and its wait.
fn task(
    socket: Detached,
    peer: Peer,
    services: Services,
    worker: usize,
    arrival: Arrival,
) -> impl Future<Output = ()> + Send + 'static {
    // Counted from now (before the next client is placed), until the task ends or moves on:
    // taken here, not in `start`, which runs only when the worker first polls the task.
    let seat = services.balance.seat(worker);
    cold::then(
        start(socket, peer, services, worker, arrival, seat),
        serving,
    )
}

/// What a logged-in pooled client's task keeps while it is served.
struct Serving {
    client: ClientConn,
    services: Services,
    /// Held here, not boxed: a box is an allocation more (and its chunk's overhead) per idle
    /// client.
    session: LoggedIn,
    count: ClientCount,
    /// Counted on its worker (from before the next client is placed) until the task ends or
    /// moves on.
    _seat: Seat,
}

/// A client's task until it is logged in (or moved in): a pooled client comes out ready for
/// its requests; console and replication clients are served here, to their end.
async fn start(
    socket: Detached,
    peer: Peer,
    services: Services,
    worker: usize,
    arrival: Arrival,
    seat: Seat,
) -> Option<Serving> {
    let mut client = ClientConn {
        stream: Stream::Closed,
        peer,
        buf: BytesMut::new(),
        pass: 0,
        max_len: 0,
        worker,
        custom: Default::default(),
        statements: Default::default(),
        read_armed: false,
    };
    client.stream = match socket.attach() {
        Ok(s) => s,
        Err(e) => {
            match arrival {
                Arrival::New(lane) => {
                    drop(LoginCount::adopt(
                        &services,
                        Source::of(client.peer.ip()),
                        lane,
                    ));
                    tracing::warn!(error = %e, "could not register a client socket")
                }
                Arrival::Moved(m) => {
                    tracing::warn!(peer = %client.peer, error = %e, "could not move a client between workers");
                    services.cancel.unregister(m.session.pid, m.session.secret);
                }
            }
            return None;
        }
    };
    let (session, count) = match arrival {
        Arrival::New(lane) => {
            client.max_len = services.config.load().general.max_packet_size;
            // The client is counted against max_client_conn from its successful login on.
            let (admitted, count) = admit(&mut client, &services, lane).await?;
            match admitted {
                admit::Admitted::Pool(session) => (*session, count),
                admit::Admitted::Console(role, listed) => {
                    // KILL_CLIENT ends a console client too.
                    let served = listed
                        .entry
                        .clone()
                        .killable(admin::serve(&mut client, &services, role))
                        .await;
                    if served.is_none() {
                        let mut out = BytesMut::new();
                        killed(listed.entry.killed()).write_response(&mut out, "FATAL");
                        let _ = client.stream.send(&out).await;
                    }
                    return None;
                }
                admit::Admitted::Replication(mut own) => {
                    let entry = own.listed.entry.clone();
                    let exit = entry
                        .clone()
                        .killable(link::dedicated::relay(&mut client, &mut own.server))
                        .await
                        .unwrap_or_else(|| Err(killed(entry.killed())));
                    if let Some(fatal) = departed(exit, &own.listed, &client.peer, &services) {
                        let _ = client.stream.send(&fatal).await;
                    }
                    services.cancel.unregister(own.pid, own.secret);
                    return None;
                }
            }
        }
        Arrival::Moved(m) => {
            let Moved {
                buf,
                pass,
                max_len,
                custom,
                statements,
                mut session,
                count,
            } = *m;
            (client.buf, client.pass, client.max_len) = (buf, pass, max_len);
            (client.custom, client.statements) = (custom, statements);
            // A session-mode client brings its server: it moves to this worker too, or
            // the session, which lives on that server, ends.
            if session.link.pooled().is_some_and(|s| !s.rehome(worker)) {
                session.link.release();
                session.slot.set(None);
                let lost = Error::new(
                    Kind::ServerIo,
                    "server connection lost while moving the session between workers",
                );
                if let Some(fatal) = left(Err(lost), &session, &client.peer, &services) {
                    let _ = client.stream.send(&fatal).await;
                }
                services.cancel.unregister(session.pid, session.secret);
                return None;
            }
            (*session, count)
        }
    };
    Some(Serving {
        client,
        services,
        session,
        count,
        _seat: seat,
    })
}

/// A logged-in pooled client's requests, to its end or its move to another worker or process.
/// KILL and KILL_CLIENT end the client wherever it is; its server goes back through the
/// checkout guard (closed if it was mid-request). Not an `async fn`, whose argument would be
/// kept twice; the block takes only the fields it names.
#[allow(clippy::manual_async_fn)]
fn serving(mut s: Serving) -> impl Future<Output = ()> + Send + 'static {
    async move {
        let exit = s
            .session
            .listed
            .entry
            .clone()
            .killable(slim::serve(&mut s.client, &s.services, &mut s.session))
            .await
            .unwrap_or_else(|| Err(killed(s.session.listed.entry.killed())));
        match exit {
            Ok(Exit::Move(target)) => migrate(s.client, s.session, s.services, s.count, target),
            Ok(Exit::HandOver) => {
                s.session.link.release();
                handover::send(s.client, s.session, &s.services);
            }
            exit => {
                s.session.link.release();
                if let Some(fatal) = left(exit, &s.session, &s.client.peer, &s.services) {
                    // Out of line: this wait would be the task's largest state.
                    let stream = &mut s.client.stream;
                    let _ = cold::cold(async move { stream.send(&fatal).await }).await;
                }
                s.services
                    .cancel
                    .unregister(s.session.pid, s.session.secret);
            }
        }
        // Named, so that the block holds the seat (it takes only the fields it names) and the
        // client stays counted on this worker until here.
        drop(s._seat);
    }
}

/// Waits for RESUME of `database`, or for WAIT_FOR_SERVERS (or an exit), whichever comes first.
async fn paused(services: &Services, database: &str) {
    tokio::select! {
        _ = services.control.wait_resumed(database) => {}
        _ = services.shutdown.cancelled() => {}
    }
}

/// What a client ended from outside is told: by KILL or KILL_CLIENT 57P01, as PgBouncer; when
/// its session's server was closed by `server_fast_close`, that its server is gone; when the
/// process exits at once, PostgreSQL's immediate-shutdown WARNING.
fn killed(why: Option<conns::Killed>) -> Error {
    match why {
        Some(conns::Killed::Exiting) => Error::new(
            Kind::Exiting,
            "terminating connection due to immediate shutdown command",
        ),
        Some(conns::Killed::ConfigChanged) => Error::new(
            Kind::ServerIo,
            "database configuration changed: the session's server connection was closed (server_fast_close)",
        ),
        Some(conns::Killed::Tenant) => Error::new(
            Kind::Shutdown,
            "terminating connection: its tenant was disabled, deleted or terminated",
        ),
        _ => Error::new(
            Kind::Shutdown,
            "terminating connection due to administrator command (KILL)",
        ),
    }
}

/// Logs why a logged-in client left; for an error, returns the FATAL message to send it.
fn left(
    exit: Result<Exit>,
    session: &LoggedIn,
    peer: &Peer,
    services: &Services,
) -> Option<BytesMut> {
    match exit {
        Ok(Exit::Left(reason)) => departed(Ok(reason), &session.listed, peer, services),
        // Not a departure: the caller moves the client.
        Ok(Exit::Move(_) | Exit::HandOver | Exit::Slim(_)) => None,
        Err(e) => departed(Err(e), &session.listed, peer, services),
    }
}

/// Logs why a client (pooled, or linked: [`replication`]) left, in PgBouncer's words; for an
/// error, also as a pooler error when it is pgcorral's own, and returns the FATAL message to
/// send it.
fn departed(
    exit: Result<&'static str>,
    listed: &conns::Listed,
    peer: &Peer,
    services: &Services,
) -> Option<BytesMut> {
    let g = services.config.load();
    let who = Who::client(listed, peer);
    match exit {
        Ok(reason) => {
            connlog::closing(g.general.conn_logging(), &who, &reason);
            None
        }
        Err(e) => {
            connlog::closing(g.general.conn_logging(), &who, &e.client_message());
            if e.is_pooler_error() {
                connlog::pooler_error(g.general.conn_logging(), &who, &e.client_message());
            }
            let mut out = BytesMut::new();
            e.write_response(&mut out, "FATAL");
            Some(out)
        }
    }
}

/// Moves an idle client to worker `target`: its socket is re-registered with that worker's
/// reactor and its session goes on in a task there; a session-mode client's server goes with
/// it (re-registered by the new task, on its own worker).
fn migrate(
    client: ClientConn,
    session: LoggedIn,
    services: Services,
    count: ClientCount,
    target: usize,
) {
    let ClientConn {
        stream,
        peer,
        buf,
        pass,
        max_len,
        custom,
        statements,
        ..
    } = client;
    let (Some(handle), Ok(socket)) = (services.balance.handle(target).cloned(), stream.detach())
    else {
        tracing::warn!(%peer, "could not move a client between workers; closing it");
        services.cancel.unregister(session.pid, session.secret);
        return;
    };
    let moved = Box::new(Moved {
        buf,
        pass,
        max_len,
        custom,
        statements,
        session: Box::new(session),
        count,
    });
    go_on(&handle, socket, peer, services, target, moved);
}

/// Goes on with a logged-in client `moved` on `worker` (whose executor `handle` is), from its
/// next request on: one moved between workers, or handed over by another process (`-R`).
fn go_on(
    handle: &corral_rt::exec::Handle,
    socket: Detached,
    peer: Peer,
    services: Services,
    worker: usize,
    moved: Box<Moved>,
) {
    let tasks = services.tasks.clone();
    handle.spawn(tasks.track_future(clock::moments(task(
        socket,
        peer,
        services,
        worker,
        Arrival::Moved(moved),
    ))));
}

impl Drop for LoggedIn {
    fn drop(&mut self) {
        self.pool.client_left();
    }
}

/// How a client's request loop ended.
enum Exit {
    /// The client left (the reason is logged).
    Left(&'static str),
    /// Idle, on a busy worker: continue on worker N.
    Move(usize),
    /// Idle, while a new process takes over (`-R`): continue there.
    HandOver,
    /// Idle a while: wait for the next request without the loop's state ([`slim`]), by
    /// client_idle_timeout's deadline if any.
    Slim(Option<tokio::time::Instant>),
}

/// A logged-in client, ready for requests.
struct LoggedIn {
    /// The tenant it is a client of, if any.
    tenant: Option<Arc<Loaded>>,
    /// The pool that counts the client (its cluster's first).
    pool: Pool,
    /// Every server's pool of its (database, user).
    cluster: cluster::Cluster,
    /// Its SET SERVER ROLE and read-your-writes position (databases with routing: allocated at
    /// its first request, see [`routing`]).
    route: Option<Box<ClientRoute>>,
    /// Its entry in SHOW CLIENTS.
    listed: conns::Listed,
    /// What it is attached to: the server of its transaction, or the one it keeps between
    /// transactions (session mode, or pinned).
    link: Link,
    slot: Arc<CancelSlot>,
    pid: i32,
    secret: i32,
    /// The client's session settings, applied to each server it gets (transaction and
    /// statement mode).
    settings: Settings,
    /// Its startup parameters as the server canonicalised them: what RESET returns to
    /// (shared by clients that sent the same).
    startup: session::Settings,
    /// Why the client keeps its server between transactions; empty when it does not.
    pinned: thin_vec::ThinVec<String>,
    /// How long it waits for a busy pool, when not its pool's setting (its login user's own).
    wait: ClientWait,
    /// The channels it listens on through its database's hub (transaction and statement
    /// mode), and its notifications waiting.
    listening: Option<Box<notify::Listener>>,
}

/// What the client's servers are acquired with, on `worker`.
fn attach<'a>(services: &Services, session: &'a LoggedIn, worker: usize) -> Attach<'a> {
    Attach {
        cluster: &session.cluster,
        slot: &session.slot,
        worker,
        wait: session.wait,
        settings: &session.settings,
        max_prepared: services.config.load().general.max_prepared_statements,
    }
}

/// A client's routing state, allocated at its first routed request: a client of a database
/// without routing carries none.
fn routing(route: &mut Option<Box<ClientRoute>>) -> &mut ClientRoute {
    route.get_or_insert_with(Default::default)
}

/// A client's timeouts (ms, 0 = off) as the relay takes them.
fn timeouts(t: &ClientTimeouts) -> Timeouts {
    Timeouts {
        query: millis_opt(t.query),
        idle_in_transaction: millis_opt(t.idle_transaction),
        client_idle: millis_opt(t.client_idle),
        transaction: millis_opt(t.transaction),
    }
}

/// How the relay runs for a logged-in client in `mode` on `worker`, under the configuration now.
fn relay_mode<'a>(
    services: &'a Services,
    session: &LoggedIn,
    mode: PoolMode,
    worker: usize,
) -> relay::Mode<'a> {
    let pool = &session.pool;
    let pooled = mode != PoolMode::Session;
    // A tenant's client: the tenant's configuration (the file's [general] with its own).
    let config = match &session.tenant {
        Some(t) => t.config(),
        None => services.config.load_full(),
    };
    let g = &config.general;
    // Session mode looks at a client's statements only when it has startup settings, which
    // RESET, RESET ALL and DISCARD ALL return to (the server got them by set_config): after
    // such a statement the settings are read back and the startup values set again.
    let startup_settings = !pooled && !session.startup.is_empty();
    let track = match (pooled, g.session_pinning) {
        (false, _) if startup_settings => relay::Track::Pin,
        (false, _) => relay::Track::Off,
        (true, config::SessionPinning::Pin) => relay::Track::Pin,
        (true, config::SessionPinning::Refuse) => relay::Track::Refuse,
    };
    relay::Mode {
        stop_when_idle: pooled,
        stop_when_dirty: startup_settings,
        statement: mode == PoolMode::Statement,
        track,
        // The user's own timeouts, else [general]'s: resolved here, at login and after a
        // reload, not per request.
        // The client's own login name: under a forced user the pool is another user's.
        timeouts: timeouts(&config.client_timeouts(session.listed.user())),
        prepared: pooled.then_some((
            &services.statements,
            g.max_prepared_statements,
            g.retry_stale_statements,
        )),
        stats: Some((pool.clone(), worker)),
        target: None,
        between: false,
        // Session mode: a client holds its server for good, so it can only move with it, and
        // only at an idle answer (pooled clients move between transactions, without one).
        shed: (!pooled && services.balance.len() > 1).then_some((&*services.balance, worker)),
        pools: Some(&services.pools),
    }
}

/// A server of the client's cluster for the request in its buffer, chosen by the router; `None`
/// when pgcorral answered the request itself (SET/SHOW SERVER ROLE). The target is noted in
/// the client's routing state.
async fn routed_checkout(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
) -> Result<Option<Checkout>> {
    let mut tried = false;
    let target = loop {
        match route::decide(
            client,
            &session.cluster,
            &services.router,
            routing(&mut session.route),
        ) {
            Decision::Route(target) => break target,
            other => {
                if cold::cold(not_routed(client, services, session, other, &mut tried)).await? {
                    session.listed.set_state(ListState::Idle);
                    return Ok(None);
                }
            }
        }
    };
    routing(&mut session.route).target = Some(target);
    let ryw = session.cluster.topology().settings().read_your_writes;
    let min_lsn = if ryw && target.want != Want::Primary {
        routing(&mut session.route).min_lsn
    } else {
        0
    };
    session
        .cluster
        .checkout(target, client.worker, min_lsn, session.wait)
        .await
        .map(Some)
}

/// What the router decided when it did not name a server: `true` when the request has been
/// answered (pgcorral's own reply, a split COPY or INSERT), `false` to decide again (more of the
/// request read, or what the router needed read from a server; `tried`: a table's columns were
/// read once already).
async fn not_routed(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
    decision: Decision,
    tried: &mut bool,
) -> Result<bool> {
    let reply = match decision {
        Decision::Route(_) => return Ok(false),
        Decision::Reply(out) => out,
        Decision::SplitInsert(rows, true) => {
            sharded::begin_split(client, services, session, sharded::Split::Insert(rows)).await?;
            return Ok(true);
        }
        Decision::SplitInsert(rows, false) => {
            let escapes = session.route.as_ref().is_some_and(|r| r.escapes);
            let at = attach(services, session, client.worker);
            link::insert::insert(client, &at, &services.statements, rows, escapes).await?;
            return Ok(true);
        }
        Decision::CopyIn(table, true) => {
            sharded::begin_split(client, services, session, sharded::Split::Copy(table)).await?;
            return Ok(true);
        }
        Decision::CopyIn(table, false) => {
            link::copy_in::copy_in(client, &attach(services, session, client.worker), table)
                .await?;
            return Ok(true);
        }
        Decision::Gather(g) if g.begins => {
            sharded::begin_split(client, services, session, sharded::Split::Gather(g)).await?;
            return Ok(true);
        }
        Decision::Gather(g) => {
            let at = attach(services, session, client.worker);
            link::gather::gather(client, &at, &g, &services.statements).await?;
            return Ok(true);
        }
        Decision::SplitPipeline(shards, false) => {
            let at = attach(services, session, client.worker);
            link::pipeline::pipeline(client, &at, &services.statements, &shards).await?;
            return Ok(true);
        }
        Decision::SplitPipeline(shards, true) => {
            let split = sharded::Split::Pipeline(shards);
            sharded::begin_split(client, services, session, split).await?;
            return Ok(true);
        }
        Decision::FinishPrepared(shards, len) => {
            let at = attach(services, session, client.worker);
            link::twophase::finish_client(client, &at, &shards, len).await?;
            return Ok(true);
        }
        Decision::Scatter(w) if w.begins => {
            sharded::begin_split(client, services, session, sharded::Split::Scatter(w)).await?;
            return Ok(true);
        }
        Decision::Scatter(w) => {
            let at = attach(services, session, client.worker);
            link::scatter::scatter(client, &at, &w, &services.statements).await?;
            return Ok(true);
        }
        Decision::NeedMore => {
            if request::read_more(client).await?.is_none() {
                return Err(Error::new(Kind::ClientIo, "client closed the connection"));
            }
            return Ok(false);
        }
        need @ (Decision::ReadCatalog | Decision::LearnColumns(_) | Decision::FindGid(_)) => {
            if need == Decision::ReadCatalog {
                // Once per database and user: finish what a commit across shards left prepared.
                link::twophase::spawn_recovery(session.cluster.clone(), client.worker);
            }
            match route::learn(
                client,
                &session.cluster,
                routing(&mut session.route),
                &need,
                tried,
            )
            .await?
            {
                Some(out) => out,
                None => return Ok(false),
            }
        }
    };
    client.reply(&reply).await?;
    Ok(true)
}

/// The request loop, with the server the client holds in `session.link` (kept there between
/// transactions in session mode, or while pinned). Returns why the client left normally.
/// Not an `async fn`, whose arguments would be kept twice in every client's future.
#[allow(clippy::manual_async_fn)]
fn run<'a>(
    client: &'a mut ClientConn,
    services: &'a Services,
    session: &'a mut LoggedIn,
) -> impl Future<Output = Result<Exit>> + 'a {
    async move {
        // The pool mode is the client's for its whole connection; the rest follows reloads.
        let mode = session.pool.settings().mode;
        let mut config_gen = services.config_gen.load(Ordering::Relaxed);
        let mut relay_mode = relay_mode(services, session, mode, client.worker);
        let mut wait_notify = millis_opt(services.config.load().general.query_wait_notify);
        let mut cache_on = cached::enabled(services, session, mode);
        let mut idle_timer = IdleTimer::default();
        let mut between = false;
        loop {
            if session.link.is_free() {
                let gen = services.config_gen.load(Ordering::Relaxed);
                if gen != config_gen {
                    config_gen = gen;
                    relay_mode = self::relay_mode(services, session, mode, client.worker);
                    let config = services.config.load();
                    wait_notify = millis_opt(config.general.query_wait_notify);
                    session.wait = ClientWait::of_user(&config, session.listed.user());
                    cache_on = cached::enabled(services, session, mode);
                }
                if let Some(target) = services.balance.move_target(client.worker) {
                    return Ok(Exit::Move(target));
                }
                let idle_timeout = relay_mode.timeouts.client_idle;
                let timer = &mut idle_timer;
                let modes = (mode, cache_on);
                let waited = wait_free(client, services, session, modes, (idle_timeout, timer));
                match waited.await? {
                    Waited::Request => {}
                    Waited::Answered => continue,
                    Waited::Exit(exit) => return Ok(exit),
                }
                let asked = clock::now();
                session.listed.requested_at(asked);
                session.listed.set_state(ListState::Waiting);
                if services.control.is_paused(session.pool.name().0) {
                    // PAUSE: the transaction waits for RESUME before it gets a server (or for
                    // a shutdown, which closes it below).
                    cold::cold(paused(services, session.pool.name().0)).await;
                }
                if services.shutdown.is_cancelled() {
                    // WAIT_FOR_SERVERS: no new transaction, as PgBouncer (its words, logged
                    // `closing because: server shutting down`).
                    return Err(Error::server_shutting_down());
                }
                let mut s = if session.cluster.routed() {
                    match routed_checkout(client, services, session).await? {
                        Some(s) => s,
                        None => continue,
                    }
                } else if let Some(after) = wait_notify {
                    // Boxed: the notice's timer and write must not size every client's future.
                    let checkout = session.pool.checkout(client.worker, session.wait);
                    cold::cold(notify_while_waiting(client, checkout, after)).await?
                } else {
                    session.pool.checkout(client.worker, session.wait).await?
                };
                note_checkout(session, &mut s, client.worker, asked);
                if !session::matches(&s.applied, &session.settings)
                    || session
                        .route
                        .as_ref()
                        .is_some_and(|r| r.pending_begin.is_some())
                {
                    cold::cold(bring_along(client, session, &mut s)).await?;
                }
                session.slot.set(Some(s.key.clone()));
                session.link = Link::Pooled(s);
            } else if between
                || session
                    .route
                    .as_mut()
                    .is_some_and(|r| std::mem::take(&mut r.check_next))
            {
                // A sharded database's transaction: its next batch must stay on its shard.
                let timeouts = &relay_mode.timeouts;
                let next =
                    next_in_transaction(client, services, session, timeouts, &mut idle_timer);
                match cold::cold(next).await? {
                    Between::Relay => between = false,
                    Between::Answered => {
                        between = true;
                        continue;
                    }
                    Between::Left(why) => return Ok(Exit::Left(why)),
                }
            } else if session.listening.is_some()
                && session.link.pooled().is_some_and(|s| s.state.is_idle())
            {
                // Pinned between transactions while it listens through the hub: its
                // notifications are written while it waits for its next request (never
                // inside a transaction its server is in).
                let idle_timeout = relay_mode.timeouts.client_idle;
                if let Some(why) = cold::cold(listens::wait_pinned(
                    client,
                    services,
                    session,
                    idle_timeout,
                ))
                .await?
                {
                    return Ok(Exit::Left(why));
                }
            }
            let s = session.link.pooled().expect("attached");
            // Set for this relay in place (no second Mode kept in every client's future).
            relay_mode.stop_when_idle |= services.shutdown.is_cancelled();
            // With several servers, the statistics are those of the server's own pool, and
            // each transaction is routed on its own: a pipelined next one must wait.
            let routed = session.cluster.routed();
            relay_mode.target = session.route.as_ref().and_then(|r| r.target);
            relay_mode.between = routed && session.cluster.sharded();
            let mut home = None;
            if routed {
                // A routed session does not move (its servers may be several).
                relay_mode.shed = None;
                home = relay_mode.stats.replace((s.pool().clone(), client.worker));
            }
            let outcome = relay::run(client, s, &relay_mode).await;
            if relay_mode.between {
                // A sharded database reads the client's strings as its server now would.
                routing(&mut session.route).escapes = route::escapes(&s.params);
            }
            relay::record_rest(&relay_mode, s);
            // SHOW CLIENTS' and SHOW SERVERS' prepared_statements, as this relay left them.
            session.listed.set_prepared(client.statements.count());
            if let Some(l) = &s.listed {
                l.set_prepared(s.statements.len());
            }
            if routed {
                relay_mode.stats = home;
            }
            let step = match settled(services, session, &outcome, mode, client.worker) {
                Some(step) => step,
                None => settle(client, services, session, outcome, mode, &relay_mode).await?,
            };
            match step {
                Step::Next => {}
                Step::Between => between = true,
                Step::Exit(exit) => return exit,
            }
        }
    }
}

/// What the wait of a client attached to nothing came to.
enum Waited {
    /// A request is buffered: its transaction begins.
    Request,
    /// pgcorral answered (notifications written, a LISTEN): wait again.
    Answered,
    /// The loop ends.
    Exit(Exit),
}

/// Waits for the next request of a client attached to nothing (slimmed meanwhile unless it
/// listens through the hub), writing its notifications as they come and answering its
/// LISTENs itself (transaction and statement mode).
async fn wait_free(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
    (mode, cache_on): (PoolMode, bool),
    (idle_timeout, timer): (Option<std::time::Duration>, &mut IdleTimer),
) -> Result<Waited> {
    // A listening client is not slimmed: its notifications are watched for here.
    let inbox = session.listening.as_deref().map(notify::Listener::inbox);
    let slim = inbox.is_none().then_some(&*session.listed.entry);
    let next = match next_request(client, services, idle_timeout, timer, true, slim, inbox).await? {
        Next::HandOver if handover::movable(client, session) => {
            return Ok(Waited::Exit(Exit::HandOver))
        }
        // A takeover began and this client stays (see `handover::movable`): it waits for its
        // next request without watching for it again.
        Next::HandOver => {
            next_request(client, services, idle_timeout, timer, false, None, inbox).await?
        }
        next => next,
    };
    match next {
        // Notifications that came before the request are written before it is served, as
        // PostgreSQL sends them while it waits for the command (an UNLISTEN must not drop
        // them).
        Next::Request | Next::HandOver if session.listening.is_some() => {
            if cold::cold(listens::before_request(client, session)).await? {
                return Ok(Waited::Exit(Exit::Left(listens::LISTENING_ENDED)));
            }
        }
        Next::Request | Next::HandOver => {}
        Next::Gone(why) => return Ok(Waited::Exit(Exit::Left(why))),
        Next::Slim(deadline) => return Ok(Waited::Exit(Exit::Slim(deadline))),
        Next::Notified => {
            return Ok(match cold::cold(listens::deliver(client, session)).await? {
                true => Waited::Exit(Exit::Left(listens::LISTENING_ENDED)),
                false => Waited::Answered,
            })
        }
    }
    if mode != PoolMode::Session
        && listens::may_be_asked(client)
        && !session.cluster.routed()
        && cold::cold(listens::answer(client, services, session)).await?
    {
        return Ok(Waited::Answered);
    }
    if cache_on
        && session.pinned.is_empty()
        && cold::cold(cached::serve(client, services, session)).await?
    {
        return Ok(Waited::Answered);
    }
    Ok(Waited::Request)
}

/// What became of a sharded transaction's next request between its relays.
enum Between {
    /// It goes to the transaction's server.
    Relay,
    /// It was answered (or split between shards): wait for the next one.
    Answered,
    /// The client left (why).
    Left(&'static str),
}

/// Waits for a sharded transaction's next request (within its idle-in-transaction timeout)
/// and checks that it stays on its shard, or runs it across shards ([`check_in_transaction`]).
async fn next_in_transaction(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
    timeouts: &Timeouts,
    idle_timer: &mut IdleTimer,
) -> Result<Between> {
    let wait = timeouts.idle_in_transaction;
    // In a transaction: never moved (`movable` false).
    // Not slimmed here (`None`): a transaction's state stays.
    match next_request(client, services, wait, idle_timer, false, None, None).await {
        Ok(Next::Request | Next::HandOver | Next::Slim(_) | Next::Notified) => {}
        Ok(Next::Gone(why)) => return Ok(Between::Left(why)),
        Err(e) if e.kind() == Kind::ClientIdle => {
            return Err(timed_out(Phase::IdleInTransaction, timeouts))
        }
        Err(e) => return Err(e),
    }
    Ok(
        match check_in_transaction(client, services, session).await? {
            true => Between::Answered,
            false => Between::Relay,
        },
    )
}

/// Notes a server just checked out for the client's request sent at `asked`: the wait in its
/// pool's statistics, both sides' states and links in SHOW CLIENTS/SERVERS.
fn note_checkout(session: &LoggedIn, s: &mut Checkout, worker: usize, asked: clock::Tick) {
    let got = clock::now();
    // The wait's time and count go with the transaction's (one record of the counters per
    // transaction); its histogram is recorded now.
    let waited = got.micros_since(asked);
    s.pool().stats().wait_hist.record(worker, waited);
    s.meter.waited(waited);
    session.listed.set_state(ListState::Active);
    if let Some(l) = &s.listed {
        l.requested_at(got);
        l.set_link(session.listed.id);
        session.listed.set_link(l.id);
    }
}

/// Brings a server just checked out up to the client's session: its settings (and what the
/// server said meanwhile), and a sharded transaction's deferred BEGIN. Called only when one
/// of them is needed: boxed by the caller, a round trip whose state must not size every
/// client's future.
async fn bring_along(
    client: &mut ClientConn,
    session: &mut LoggedIn,
    s: &mut Checkout,
) -> Result<()> {
    if !session::matches(&s.applied, &session.settings) {
        link::restore(s, &session.settings).await?;
        if !s.held.is_empty() {
            deliver_held(client, s).await?;
        }
    }
    if let Some(begin) = session.route.as_mut().and_then(|r| r.pending_begin.take()) {
        // A sharded database's deferred BEGIN, now that its shard is known.
        exec::in_transaction(s, &begin).await?;
    }
    Ok(())
}

/// What the request loop does next after a relay.
enum Step {
    /// Wait for the next request.
    Next,
    /// A sharded database's transaction goes on: check its next batch first.
    Between,
    /// The loop ends.
    Exit(Result<Exit>),
}

/// [`settle`] for the common case, with nothing to wait for: a plain client's transaction
/// answered, its session unchanged, nothing held for it. `None`: the full [`settle`].
#[inline]
fn settled(
    services: &Services,
    session: &mut LoggedIn,
    outcome: &Outcome,
    mode: PoolMode,
    worker: usize,
) -> Option<Step> {
    if !matches!(outcome, Outcome::Idle) || session.route.is_some() {
        return None;
    }
    let s = session.link.pooled()?;
    if s.state.dirty || s.read_hooks || !s.held.is_empty() {
        return None;
    }
    Some(idle(services, session, mode, worker))
}

/// The end of a transaction answered with the client's session brought up to date: the server
/// kept (a pinned client, or session mode: moved with it when its worker would move a client)
/// or released, and whether the loop goes on.
fn idle(services: &Services, session: &mut LoggedIn, mode: PoolMode, worker: usize) -> Step {
    let stopping = services.shutdown.is_cancelled();
    if !session.pinned.is_empty() && !stopping {
        return Step::Next;
    }
    if mode == PoolMode::Session && !stopping {
        // The relay stopped at an idle answer because the worker would move a client: this
        // one moves, with its server, unless another took the move.
        return match services.balance.move_target(worker) {
            Some(target) => Step::Exit(Ok(Exit::Move(target))),
            None => Step::Next,
        };
    }
    session.slot.set(None);
    session.link.release();
    session.listed.set_link(0);
    match mode {
        PoolMode::Session => Step::Exit(Ok(Exit::Left("server shutting down"))),
        _ => Step::Next,
    }
}

/// After a relay that ended with `outcome`: what the client keeps (its server in session mode
/// or while pinned, else nothing), its session state read back after a transaction that may
/// have changed it, pgcorral's answers owed, and whether the loop goes on.
async fn settle(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
    outcome: Outcome,
    mode: PoolMode,
    relay_mode: &relay::Mode<'_>,
) -> Result<Step> {
    let s = session.link.pooled().expect("attached");
    match outcome {
        Outcome::Idle if session.route.as_ref().is_some_and(|r| r.owe_ready) => {
            // A deferred transaction's Parse and Describe ran outside it: its
            // ReadyForQuery is pgcorral's (see `ClientRoute::owe_ready`).
            let route = routing(&mut session.route);
            route.owe_ready = false;
            let mut ready = BytesMut::new();
            pgwire::encode::ready_for_query(&mut ready, route.status());
            client
                .stream
                .send(&ready)
                .await
                .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))?;
            session.slot.set(None);
            session.link.release();
            session.listed.set_link(0);
        }
        Outcome::Idle => {
            if let Some(r) = session.route.as_mut() {
                // The transaction ended: the next one may spread only if it is begun alone.
                r.tx_begin = None;
                r.savepoints = false;
            }
            if matches!(session.link, Link::Spanning(_)) {
                // A transaction across shards just ended: its other shards' parts end with it.
                cold::cold(link::spanning::finish(&mut session.link)).await?;
            }
            let s = session.link.pooled().expect("attached");
            if session
                .route
                .as_ref()
                .is_some_and(|r| r.target.is_some_and(|t| t.writes))
                && session.cluster.topology().settings().read_your_writes
            {
                let at = cold::cold(cluster::wal_position(s)).await;
                let route = routing(&mut session.route);
                route.min_lsn = route.min_lsn.max(at);
            }
            if s.state.dirty {
                // Taken out of the session while it is recaptured (on error, it is dropped
                // as the request loop ends).
                let mut s = session.link.take_pooled().expect("attached");
                let keeps = mode == PoolMode::Session;
                let at = (services, client.worker);
                cold::cold(recapture(at, session, &mut s, &mut client.custom, keeps)).await?;
                session.link = Link::Pooled(s);
            }
            let s = session.link.pooled().expect("attached");
            if s.read_hooks {
                // A failure leaves the map as it was; a broken server is closed at
                // its release, as after any of pgcorral's own queries.
                let _ = cold::cold(session::apply::read_hooks(s)).await;
            }
            if !s.held.is_empty() {
                cold::cold(deliver_held(client, s)).await?;
            }
            return Ok(idle(services, session, mode, client.worker));
        }
        Outcome::Between => return Ok(Step::Between),
        Outcome::TimedOut(phase) => {
            session.slot.set(None);
            return Ok(Step::Exit(Err(timed_out(phase, &relay_mode.timeouts))));
        }
        Outcome::Refused(why) => {
            cold::cold(refuse_statement(client, s.state.tx, why)).await?;
            if s.state.is_idle() && session.pinned.is_empty() && !s.state.dirty {
                session.slot.set(None);
                session.link.release();
            }
        }
        Outcome::TransactionRefused => {
            cold::cold(refuse_transaction(client, s)).await?;
            session.slot.set(None);
            session.link.release();
        }
        Outcome::ClientGone { eof } => {
            session.slot.set(None);
            return Ok(Step::Exit(Ok(Exit::Left(match eof {
                true => request::UNEXPECTED_EOF,
                false => request::CLOSE_REQUEST,
            }))));
        }
        Outcome::ClientProtocol(msg) => {
            session.slot.set(None);
            return Ok(Step::Exit(Err(Error::new(Kind::ClientProtocol, msg))));
        }
        Outcome::ServerGone { notified } => {
            session.slot.set(None);
            session.link.release();
            if notified {
                return Ok(Step::Exit(Ok(Exit::Left(
                    "server closed the connection after an error",
                ))));
            }
            return Ok(Step::Exit(Err(Error::new(
                Kind::ServerIo,
                "server closed the connection unexpectedly",
            ))));
        }
    }
    Ok(Step::Next)
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use super::*;

    /// The size of what `f` returns, without calling it.
    fn output_size<A, B, C, D, E, R>(_: &impl FnOnce(A, B, C, D, E) -> R) -> usize {
        size_of::<R>()
    }

    /// What an idle client keeps (docs/architecture/memory.md): its task's
    /// future, with its connection and session inside (the login's state is freed by then, see
    /// [`task`]), its list entry and its cancel slot. The request loop's state is not in the
    /// task (see [`slim`]). glibc hands out blocks in steps of 16 bytes with 8 of its own: the
    /// task's 416 (and 8 of the executor's wrappers) take a 432-byte block, 417 would take 448.
    /// Raise a bound only knowingly: each byte is 10 KB at 10,000 clients.
    #[test]
    fn an_idle_client_stays_small() {
        let task = output_size(&task);
        assert!(task <= 416, "task future: {task}");
        let sizes = [
            size_of::<ClientConn>(),
            size_of::<LoggedIn>(),
            size_of::<conns::Entry>(),
        ];
        assert!(
            sizes[0] <= 120 && sizes[1] <= 136 && sizes[2] <= 136,
            "{sizes:?}"
        );
        // 24: in its `Arc` (two counters) 40, the same 48-byte block as 16 would take.
        assert!(size_of::<CancelSlot>() <= 24);
    }
}
