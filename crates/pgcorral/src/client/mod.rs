//! One client's life: admission ([`admit`]), then the loop that waits for a request
//! ([`request`]), checks out a server (transaction/statement mode) or keeps one (session mode),
//! brings its session state along ([`state`]), relays, and releases.

mod admit;
pub mod auth;
mod replies;
mod request;
pub mod startup;
mod state;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::cancel::CancelSlot;
use crate::config::{millis_opt, PoolMode};
use crate::conns::State as ListState;
use crate::error::{Error, Kind, Result};
use crate::pool::{Checkout, Pool};
use crate::relay::{self, Outcome, Timeouts};
use crate::services::{ClientCount, Services};
use crate::session::Settings;
use admit::admit;
use replies::{refuse_statement, refuse_transaction, timed_out};
use request::{next_request, IdleTimer};
use state::{recapture, restore};

/// The client's socket and what has been read from it but not yet forwarded.
pub struct ClientConn {
    pub stream: TcpStream,
    pub buf: BytesMut,
    /// Bytes of a message body still to pass through unparsed.
    pub pass: usize,
    /// Largest message accepted from this client.
    pub max_len: u32,
    /// The worker thread this client lives on; servers it holds are moved there.
    pub worker: usize,
    /// Custom (dotted) setting names seen in the client's SET/RESET/set_config since the last
    /// capture; empty (no allocation) for almost every client.
    pub custom: Vec<String>,
    /// Its prepared statements (transaction and statement mode); empty until it prepares one.
    pub statements: crate::prepared::ClientStatements,
}

/// Serves one accepted connection to its end; errors are reported to the client and logged.
pub async fn serve(stream: TcpStream, peer: SocketAddr, services: Services, worker: usize) {
    let count = services.admit_client();
    let mut client = ClientConn {
        stream,
        buf: BytesMut::new(),
        pass: 0,
        max_len: services.config.load().general.max_packet_size,
        worker,
        custom: Vec::new(),
        statements: Default::default(),
    };
    // Startup and login are boxed: their state is large and short-lived, and must not size the
    // future that lives as long as the client (idle clients should cost little memory).
    let admitted = Box::pin(admit(&mut client, &peer, &services, count.over_limit)).await;
    match admitted {
        Some(admit::Admitted::Pool(session)) => live(client, session, peer, services, count).await,
        Some(admit::Admitted::Console(role)) => {
            // Boxed: the console's state must not size every client's future.
            Box::pin(crate::admin::serve(&mut client, &services, role)).await;
            drop(count);
        }
        None => {}
    }
}

/// Runs a logged-in client until it leaves, or hands it to a less busy worker.
async fn live(
    mut client: ClientConn,
    mut session: Session,
    peer: SocketAddr,
    services: Services,
    count: ClientCount,
) {
    let server = session.server.take();
    let entry = session.listed.entry.clone();
    // KILL and KILL_CLIENT end the client wherever it is; its server goes back through the
    // checkout guard (closed if it was mid-request).
    let result = entry
        .killable(run(&mut client, &services, &mut session, server))
        .await
        .unwrap_or_else(|| {
            Err(Error::new(
                Kind::Shutdown,
                "terminating connection due to administrator command (KILL)",
            ))
        });
    let Session { pid, secret, .. } = &session;
    let (database, user) = session.pool.name();
    match result {
        Ok(Exit::Move(target)) => return migrate(client, session, peer, services, count, target),
        Ok(Exit::Left(reason)) => {
            tracing::info!(%peer, %user, %database, reason, "client disconnected")
        }
        Err(e) => {
            tracing::info!(%peer, %user, %database, error = %e, "client disconnected");
            let mut out = BytesMut::new();
            e.write_response(&mut out, "FATAL");
            let _ = client.stream.write_all(&out).await;
        }
    }
    services.cancel.unregister(*pid, *secret);
    drop(count);
}

/// Moves an idle client (no server held) to worker `target`: its socket is re-registered with
/// that worker's reactor and its session goes on in a task there.
fn migrate(
    client: ClientConn,
    session: Session,
    peer: SocketAddr,
    services: Services,
    count: ClientCount,
    target: usize,
) {
    let ClientConn {
        stream,
        buf,
        pass,
        max_len,
        custom,
        statements,
        ..
    } = client;
    let (Some(handle), Ok(std)) = (services.balance.handle(target).cloned(), stream.into_std())
    else {
        tracing::warn!(%peer, "could not move a client between workers; closing it");
        services.cancel.unregister(session.pid, session.secret);
        return;
    };
    let tasks = services.tasks.clone();
    handle.spawn(tasks.track_future(async move {
        match TcpStream::from_std(std) {
            Ok(stream) => {
                let client = ClientConn {
                    stream,
                    buf,
                    pass,
                    max_len,
                    worker: target,
                    custom,
                    statements,
                };
                Box::pin(live(client, session, peer, services, count)).await
            }
            Err(e) => {
                tracing::warn!(%peer, error = %e, "could not move a client between workers");
                services.cancel.unregister(session.pid, session.secret);
            }
        }
    }));
}

impl Drop for Session {
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
}

/// A logged-in client, ready for requests.
struct Session {
    /// The pool that counts the client (its cluster's first).
    pool: Pool,
    /// Every server's pool of its (database, user).
    cluster: crate::cluster::Cluster,
    /// Its SET SERVER ROLE and read-your-writes position.
    route: crate::route::ClientRoute,
    /// Its entry in SHOW CLIENTS.
    listed: crate::conns::Listed,
    /// The server held for the whole session (session mode).
    server: Option<Checkout>,
    slot: Arc<CancelSlot>,
    pid: i32,
    secret: i32,
    /// The client's session settings, applied to each server it gets (transaction and
    /// statement mode).
    settings: Settings,
    /// Its startup parameters as the server canonicalised them: what RESET returns to
    /// (shared by clients that sent the same).
    startup: crate::session::Settings,
    /// Why the client keeps its server between transactions; empty when it does not.
    pinned: Vec<String>,
}

/// How the relay runs for a client of `pool` in `mode` on `worker`, under the configuration now.
fn relay_mode<'a>(
    services: &'a Services,
    pool: &'a Pool,
    mode: PoolMode,
    worker: usize,
) -> relay::Mode<'a> {
    let pooled = mode != PoolMode::Session;
    let config = services.config.load();
    let g = &config.general;
    let track = match (pooled, g.session_pinning) {
        (false, _) => relay::Track::Off,
        (true, crate::config::SessionPinning::Pin) => relay::Track::Pin,
        (true, crate::config::SessionPinning::Refuse) => relay::Track::Refuse,
    };
    relay::Mode {
        stop_when_idle: pooled,
        statement: mode == PoolMode::Statement,
        track,
        timeouts: Timeouts {
            query: millis_opt(g.query_timeout),
            idle_in_transaction: millis_opt(g.idle_transaction_timeout),
            client_idle: millis_opt(g.client_idle_timeout),
        },
        prepared: pooled.then_some((&services.statements, g.max_prepared_statements)),
        stats: Some((pool.stats(), worker)),
        one_batch: false,
    }
}

/// The request loop. Returns why the client left normally.
/// A server of the client's cluster for the request in its buffer, chosen by the router; `None`
/// when pgcorral answered the request itself (SET/SHOW SERVER ROLE). Notes in `session.route` whether it may write.
async fn routed_checkout(
    client: &mut ClientConn,
    services: &Services,
    session: &mut Session,
) -> Result<Option<Checkout>> {
    let decision = crate::route::decide(
        client,
        &session.cluster,
        &services.router,
        &mut session.route,
    )
    .await?;
    let crate::route::Decision::Route { want, writes } = decision else {
        session.listed.set_state(ListState::Idle);
        return Ok(None);
    };
    session.route.writes = writes;
    let ryw = session.cluster.topology().settings().read_your_writes;
    let min_lsn = if ryw && want != crate::cluster::Want::Primary {
        session.route.min_lsn
    } else {
        0
    };
    session
        .cluster
        .checkout(want, client.worker, min_lsn)
        .await
        .map(Some)
}

async fn run(
    client: &mut ClientConn,
    services: &Services,
    session: &mut Session,
    mut server: Option<Checkout>,
) -> Result<Exit> {
    let pool = session.pool.clone();
    let slot = session.slot.clone();
    // The pool mode is the client's for its whole connection; the rest follows reloads.
    let mode = pool.settings().mode;
    let mut config_gen = services.config_gen.load(Ordering::Relaxed);
    let mut relay_mode = relay_mode(services, &pool, mode, client.worker);
    let mut timeouts = relay_mode.timeouts;
    let mut idle_timer = IdleTimer::default();
    loop {
        if server.is_none() {
            let gen = services.config_gen.load(Ordering::Relaxed);
            if gen != config_gen {
                config_gen = gen;
                relay_mode = self::relay_mode(services, &pool, mode, client.worker);
                timeouts = relay_mode.timeouts;
            }
            if let Some(target) = services.balance.move_target(client.worker) {
                return Ok(Exit::Move(target));
            }
            match next_request(client, services, timeouts.client_idle, &mut idle_timer).await? {
                Some(()) => {}
                None => return Ok(Exit::Left("client closed the connection")),
            }
            let asked = std::time::Instant::now();
            session.listed.requested();
            session.listed.set_state(ListState::Waiting);
            if services.control.is_paused(pool.name().0) {
                // PAUSE: the transaction waits for RESUME before it gets a server.
                services.control.wait_resumed(pool.name().0).await;
            }
            let mut s = if session.cluster.routed() {
                match Box::pin(routed_checkout(client, services, session)).await? {
                    Some(s) => s,
                    None => continue,
                }
            } else {
                pool.checkout(client.worker).await?
            };
            s.pool().stats().waited(client.worker, asked.elapsed());
            session.listed.set_state(ListState::Active);
            if let Some(l) = &s.listed {
                l.set_link(session.listed.id);
                session.listed.set_link(l.id);
            }
            if !crate::session::matches(&s.applied, &session.settings) {
                restore(&mut s, &session.settings).await?;
            }
            slot.set(Some(s.key));
            server = Some(s);
        }
        let s = server.as_mut().expect("attached");
        let mut m = relay_mode;
        m.stop_when_idle |= services.shutdown.is_cancelled();
        // With several servers, the statistics are those of the server's own pool.
        let used = session.cluster.routed().then(|| s.pool().clone());
        if let Some(p) = &used {
            m.stats = Some((p.stats(), client.worker));
            // Each transaction is routed on its own: a pipelined next one must wait.
            m.one_batch = true;
        }
        let outcome = relay::run(client, s, &m).await;
        relay::record_rest(&m, s);
        match outcome {
            Outcome::Idle => {
                if session.route.writes && session.cluster.topology().settings().read_your_writes {
                    let at = Box::pin(crate::cluster::wal_position(s)).await;
                    session.route.min_lsn = session.route.min_lsn.max(at);
                }
                if s.state.dirty {
                    Box::pin(recapture(session, s, &mut client.custom)).await?;
                }
                if !session.pinned.is_empty() && !services.shutdown.is_cancelled() {
                    continue;
                }
                slot.set(None);
                server = None;
                session.listed.set_link(0);
                if mode == PoolMode::Session {
                    return Ok(Exit::Left("shutdown"));
                }
            }
            Outcome::TimedOut(phase) => {
                slot.set(None);
                return Err(timed_out(phase, &timeouts));
            }
            Outcome::Refused(why) => {
                refuse_statement(client, s.state.tx, why).await?;
                if s.state.is_idle() && session.pinned.is_empty() && !s.state.dirty {
                    slot.set(None);
                    server = None;
                }
            }
            Outcome::TransactionRefused => {
                Box::pin(refuse_transaction(
                    client,
                    server.as_mut().expect("attached"),
                ))
                .await?;
                slot.set(None);
                server = None;
            }
            Outcome::ClientGone => {
                slot.set(None);
                return Ok(Exit::Left("client closed the connection"));
            }
            Outcome::ClientProtocol(msg) => {
                slot.set(None);
                return Err(Error::new(Kind::ClientProtocol, msg));
            }
            Outcome::ServerGone { notified } => {
                slot.set(None);
                drop(server.take());
                if notified {
                    return Ok(Exit::Left("server closed the connection after an error"));
                }
                return Err(Error::new(
                    Kind::ServerIo,
                    "server closed the connection unexpectedly",
                ));
            }
        }
    }
}
