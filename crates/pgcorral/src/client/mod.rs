//! One client's life: startup and login, then the loop that waits for a request, checks out a
//! server (transaction/statement mode) or keeps one (session mode), relays, and releases.

pub mod auth;
pub mod startup;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use pgwire::backend::TxStatus;
use pgwire::frontend::{self, Kind as FeKind};
use pgwire::{encode, sqlstate, Header};
use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::io::poll_read_buf;

use crate::cancel::CancelSlot;
use crate::config::{millis_opt, PoolMode};
use crate::error::{Error, Kind, Result};
use crate::pool::{Checkout, Pool};
use crate::relay::{self, Outcome, Phase, Timeouts};
use crate::services::{ClientCount, Services};
use crate::session::{apply, Settings};
use startup::Opening;

/// First read of a request: most requests fit; bigger ones grow the buffer in the relay.
const IDLE_READ: usize = 4096;

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
    };
    // Startup and login are boxed: their state is large and short-lived, and must not size the
    // future that lives as long as the client (idle clients should cost little memory).
    let admitted = Box::pin(admit(&mut client, &peer, &services, count.over_limit)).await;
    if let Some(session) = admitted {
        live(client, session, peer, services, count).await;
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
    let result = run(&mut client, &services, &mut session, server).await;
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

/// How a client's request loop ended.
enum Exit {
    /// The client left (the reason is logged).
    Left(&'static str),
    /// Idle, on a busy worker: continue on worker N.
    Move(usize),
}

/// A logged-in client, ready for requests.
struct Session {
    pool: Pool,
    /// The server held for the whole session (session mode).
    server: Option<Checkout>,
    slot: Arc<CancelSlot>,
    pid: i32,
    secret: i32,
    /// The client's session settings, applied to each server it gets (transaction and
    /// statement mode).
    settings: Settings,
    /// Its startup parameters as the server canonicalised them: what RESET returns to.
    startup: Vec<(String, String)>,
    /// Why the client keeps its server between transactions; empty when it does not.
    pinned: Vec<String>,
}

/// Startup packets, limits, authentication and the welcome. `None` when the client is done
/// (a cancel request, a probe, or a failure already reported to it).
async fn admit(
    client: &mut ClientConn,
    peer: &SocketAddr,
    services: &Services,
    over_limit: bool,
) -> Option<Session> {
    let login_timeout = millis_opt(services.config.load().general.client_login_timeout)
        .unwrap_or(std::time::Duration::MAX);
    let deadline = tokio::time::Instant::now().checked_add(login_timeout);
    let timed_out = || {
        Error::new(
            Kind::ClientIdle,
            format!(
                "client_login_timeout: login not completed within {} ms",
                login_timeout.as_millis()
            ),
        )
    };
    let opening = match within(deadline, startup::open(&mut client.stream, &mut client.buf)).await {
        Some(Ok(o)) => o,
        Some(Err(e)) => return fail(client, peer, e).await,
        None => return fail(client, peer, timed_out()).await,
    };
    let (minor, params) = match opening {
        Opening::Closed => return None,
        Opening::Cancel { pid, secret } => {
            let wait = millis_opt(services.config.load().general.cancel_wait_timeout);
            services.cancel.cancel(pid, secret, wait).await;
            return None;
        }
        Opening::Session { minor, params } => (minor, params),
    };
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let Some(user) = get("user").filter(|u| !u.is_empty()).map(str::to_string) else {
        let e = Error::new(
            Kind::UnknownUser,
            "no PostgreSQL user name specified in startup packet",
        );
        return fail(client, peer, e).await;
    };
    let database = get("database")
        .filter(|d| !d.is_empty())
        .unwrap_or(&user)
        .to_string();
    if over_limit {
        let e = Error::new(
            Kind::TooManyClients,
            "no more connections allowed (max_client_conn)",
        );
        return fail(client, peer, e).await;
    }
    if services.shutdown.is_cancelled() {
        let e = Error::new(Kind::Shutdown, "pgcorral is shutting down");
        return fail(client, peer, e).await;
    }
    let login = within(
        deadline,
        login(client, services, &user, &database, minor, &params),
    )
    .await
    .unwrap_or_else(|| Err(timed_out()));
    match login {
        Ok(session) => {
            tracing::info!(%peer, %user, %database, "client logged in");
            Some(session)
        }
        Err(e) => fail(client, peer, e).await,
    }
}

/// Runs `f` until `deadline` (`None` = no deadline); `None` when it expired.
async fn within<T>(
    deadline: Option<tokio::time::Instant>,
    f: impl std::future::Future<Output = T>,
) -> Option<T> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, f).await.ok(),
        None => Some(f.await),
    }
}

/// Reports a startup/login failure as FATAL and logs it.
async fn fail<T>(client: &mut ClientConn, peer: &SocketAddr, e: Error) -> Option<T> {
    tracing::info!(%peer, error = %e, sqlstate = e.sqlstate(), "client login failed");
    let mut out = BytesMut::new();
    e.write_response(&mut out, "FATAL");
    let _ = client.stream.write_all(&out).await;
    None
}

/// Authenticates, finds the pool, applies the startup parameters, and sends the welcome:
/// parameters, key, ReadyForQuery.
async fn login(
    client: &mut ClientConn,
    services: &Services,
    user: &str,
    database: &str,
    minor: u16,
    params: &[(String, String)],
) -> Result<Session> {
    let config = services.config.load_full();
    if database == "pgbouncer" || database == "pgcorral" {
        return Err(Error::new(
            Kind::NotSupported,
            "the admin console is not available yet",
        ));
    }
    let mut out = BytesMut::with_capacity(512);
    startup::negotiate(&mut out, minor, params);
    let authed = auth::authenticate(
        &mut client.stream,
        &mut client.buf,
        &mut out,
        &config,
        &services.scram_cache,
        user,
    )
    .await?;
    // Only an authenticated client learns whether the database exists, as with PostgreSQL.
    let pool = services.pools.get(&config, database, user)?;
    if let Some(key) = authed.client_key {
        pool.learn_client_key(key);
    }
    let startup_settings = crate::session::startup::settings(params)?;
    let slot = Arc::new(CancelSlot::default());
    let session_mode = pool.settings().mode == PoolMode::Session;
    let mut settings = Settings::default();
    let mut startup = Vec::new();
    let mut server = None;
    let mut server_params = pool.params();
    if session_mode || !startup_settings.is_empty() || server_params.is_none() {
        // A server applies the startup parameters, so the client is told the values as the
        // server canonicalises them (and the first login to a pool learns its parameters).
        let mut s = pool.checkout(client.worker).await?;
        if startup_settings.is_empty() {
            apply::sync(&mut s, &settings).await?;
        } else {
            let login_user = pool.server_user();
            settings = apply::login(&mut s, &settings, &startup_settings, &login_user)
                .await?
                .settings;
            startup = settings
                .iter()
                .filter(|(n, _)| {
                    startup_settings
                        .iter()
                        .any(|(k, _)| k.eq_ignore_ascii_case(n))
                })
                .cloned()
                .collect();
        }
        server_params = Some(s.params.clone());
        if session_mode {
            server = Some(s);
        }
    }
    let pid = match &server {
        Some(s) => {
            slot.set(Some(s.key));
            s.key.pid
        }
        None => rand::random::<i32>() & 0x7fff_ffff,
    };
    for (k, v) in server_params.unwrap_or_default().iter() {
        encode::parameter_status(&mut out, k, v);
    }
    let secret = services.cancel.register(pid, slot.clone());
    encode::backend_key_data(&mut out, pid, secret);
    encode::ready_for_query(&mut out, TxStatus::Idle);
    if let Err(e) = client.stream.write_all(&out).await {
        services.cancel.unregister(pid, secret);
        return Err(Error::with_source(Kind::ClientIo, "write", e));
    }
    Ok(Session {
        pool,
        server,
        slot,
        pid,
        secret,
        settings,
        startup,
        pinned: Vec::new(),
    })
}

/// The request loop. Returns why the client left normally.
async fn run(
    client: &mut ClientConn,
    services: &Services,
    session: &mut Session,
    mut server: Option<Checkout>,
) -> Result<Exit> {
    let pool = session.pool.clone();
    let slot = session.slot.clone();
    let mode = pool.settings().mode;
    let pooled = mode != PoolMode::Session;
    let g = &services.config.load().general;
    let timeouts = Timeouts {
        query: millis_opt(g.query_timeout),
        idle_in_transaction: millis_opt(g.idle_transaction_timeout),
        client_idle: millis_opt(g.client_idle_timeout),
    };
    let track = match (pooled, g.session_pinning) {
        (false, _) => relay::Track::Off,
        (true, crate::config::SessionPinning::Pin) => relay::Track::Pin,
        (true, crate::config::SessionPinning::Refuse) => relay::Track::Refuse,
    };
    let relay_mode = relay::Mode {
        stop_when_idle: pooled,
        statement: mode == PoolMode::Statement,
        track,
        timeouts,
    };
    loop {
        if server.is_none() {
            if let Some(target) = services.balance.move_target(client.worker) {
                return Ok(Exit::Move(target));
            }
            match next_request(client, services, timeouts.client_idle).await? {
                Some(()) => {}
                None => return Ok(Exit::Left("client closed the connection")),
            }
            let mut s = pool.checkout(client.worker).await?;
            if !crate::session::matches(&s.applied, &session.settings) {
                restore(&mut s, &session.settings).await?;
            }
            slot.set(Some(s.key));
            server = Some(s);
        }
        let s = server.as_mut().expect("attached");
        let mut m = relay_mode;
        m.stop_when_idle |= services.shutdown.is_cancelled();
        let outcome = relay::run(client, s, m).await;
        match outcome {
            Outcome::Idle => {
                if s.state.dirty {
                    Box::pin(recapture(session, s, &mut client.custom)).await?;
                }
                if !session.pinned.is_empty() && !services.shutdown.is_cancelled() {
                    continue;
                }
                slot.set(None);
                server = None;
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

/// The error a client gets when a timeout of the relay expired.
fn timed_out(phase: Phase, t: &Timeouts) -> Error {
    let ms = |d: Option<std::time::Duration>| d.map(|d| d.as_millis()).unwrap_or(0);
    match phase {
        Phase::Query => Error::new(
            Kind::QueryTimeout,
            format!("query_timeout: query ran longer than {} ms; connection closed", ms(t.query)),
        ),
        Phase::IdleInTransaction => Error::new(
            Kind::IdleInTransaction,
            format!(
                "idle_transaction_timeout: idle in a transaction for longer than {} ms; the transaction was rolled back",
                ms(t.idle_in_transaction)
            ),
        ),
        Phase::Idle => client_idle_error(ms(t.client_idle)),
    }
}

fn client_idle_error(ms: u128) -> Error {
    Error::new(
        Kind::ClientIdle,
        format!("client_idle_timeout: idle for longer than {ms} ms; connection closed"),
    )
}

/// Applies the client's settings to a server it was just given; a failure ends the session
/// (its state cannot be restored).
async fn restore(server: &mut Checkout, settings: &Settings) -> Result<()> {
    apply::sync(server, settings).await.map_err(|e| {
        Error::new(
            e.kind(),
            format!("could not restore the session's settings on a server connection: {e}"),
        )
    })
}

/// After a transaction that may have changed the session: records the client's settings as
/// the server now has them, and pins or unpins the client by what is bound to the server.
async fn recapture(
    session: &mut Session,
    server: &mut Checkout,
    seen: &mut Vec<String>,
) -> Result<()> {
    let login_user = session.pool.server_user();
    let mut custom: Vec<String> = crate::session::custom_names_of(&session.settings)
        .chain(crate::session::custom_names_of(&session.startup))
        .chain(seen.drain(..))
        .collect();
    custom.sort();
    custom.dedup();
    *seen = Vec::new();
    let captured = apply::capture(server, &login_user, &custom).await?;
    session.settings = crate::session::with_startup(&captured.settings, &session.startup);
    if captured.pins != session.pinned {
        if captured.pins.is_empty() {
            tracing::info!(
                pid = session.pid,
                "client unpinned: its server-bound state is gone"
            );
        } else {
            tracing::info!(pid = session.pid, reasons = ?captured.pins, "client pinned to its server connection until this state is released");
        }
        session.pinned = captured.pins;
    }
    server.bound = !session.pinned.is_empty();
    Ok(())
}

/// Waits for the first message of the next request while no server is attached. Returns
/// `None` when the client is gone; stray COPY messages (after a failed COPY) are dropped.
async fn next_request(
    client: &mut ClientConn,
    services: &Services,
    idle_timeout: Option<std::time::Duration>,
) -> Result<Option<()>> {
    let deadline = idle_timeout.map(|t| tokio::time::Instant::now() + t);
    loop {
        if client.pass > 0 {
            // Discarding the rest of a stray COPY message.
            let n = client.pass.min(client.buf.len());
            client.buf.advance(n);
            client.pass -= n;
        }
        if client.pass == 0 {
            match Header::parse(&client.buf, client.max_len) {
                Err(e) => return Err(Error::new(Kind::ClientProtocol, e.to_string())),
                Ok(Some(h)) => match frontend::kind(h.tag) {
                    FeKind::Terminate => return Ok(None),
                    FeKind::Copy => {
                        client.buf.advance(pgwire::header::HEADER_LEN);
                        client.pass = h.body_len();
                        continue;
                    }
                    FeKind::Unknown => {
                        return Err(Error::new(
                            Kind::ClientProtocol,
                            format!("invalid frontend message type {}", h.tag as char),
                        ))
                    }
                    _ => return Ok(Some(())),
                },
                Ok(None) => {}
            }
        }
        if client.buf.is_empty() {
            // Idle between requests: hold no buffer while waiting, so an idle client costs
            // only its task and socket.
            client.buf = BytesMut::new();
        }
        tokio::select! {
            biased;
            r = client.stream.readable() => r.map_err(|e| Error::with_source(Kind::ClientIo, "read", e))?,
            _ = services.shutdown.cancelled() => {
                return Err(Error::new(Kind::Shutdown, "pgcorral is shutting down"));
            }
            _ = sleep_until(deadline) => {
                return Err(client_idle_error(idle_timeout.unwrap_or_default().as_millis()));
            }
        }
        if client.buf.capacity() - client.buf.len() < 1024 {
            client.buf.reserve(IDLE_READ);
        }
        // One read attempt. Readiness can be stale (left set by an exact-length read), so
        // Pending just means: wait again, and the empty buffer is dropped meanwhile. A short
        // read clears readiness, so the relay's next read costs no wasted system call.
        let read =
            poll_fn(
                |cx| match poll_read_buf(Pin::new(&mut client.stream), cx, &mut client.buf) {
                    Poll::Pending => Poll::Ready(None),
                    Poll::Ready(r) => Poll::Ready(Some(r)),
                },
            )
            .await;
        match read {
            None => {}
            Some(Ok(0)) => return Ok(None),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(Error::with_source(Kind::ClientIo, "read", e)),
        }
    }
}

/// `session_pinning = "refuse"`: drops the Query at the head of the client's buffer and answers
/// it with an error, keeping the transaction status as it is.
async fn refuse_statement(client: &mut ClientConn, tx: TxStatus, why: &str) -> Result<()> {
    if let Ok(Some(h)) = Header::parse(&client.buf, client.max_len) {
        client.buf.advance(h.total_len().min(client.buf.len()));
    }
    tracing::info!(
        worker = client.worker,
        why,
        "refused a statement that would pin the client to its server"
    );
    let mut out = BytesMut::new();
    encode::error_response(
        &mut out,
        "ERROR",
        sqlstate::FEATURE_NOT_SUPPORTED,
        &format!("{why} is not allowed here: it would tie the session to one server connection (session_pinning = \"refuse\")"),
    );
    encode::ready_for_query(&mut out, tx);
    client
        .stream
        .write_all(&out)
        .await
        .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Statement mode: a request opened a transaction. Roll it back, tell the client, and give it a
/// clean ReadyForQuery in place of the one held back.
async fn refuse_transaction(client: &mut ClientConn, server: &mut Checkout) -> Result<()> {
    // Drop the held ReadyForQuery from the server's buffer.
    let z = Header::parse(&server.rbuf, u32::MAX)
        .ok()
        .flatten()
        .map(|h| h.total_len())
        .unwrap_or(0);
    let z = z.min(server.rbuf.len());
    server.rbuf.advance(z);
    let ok = crate::pool::rollback(server).await;
    let mut out = BytesMut::new();
    encode::error_response(
        &mut out,
        "ERROR",
        sqlstate::FEATURE_NOT_SUPPORTED,
        "transaction blocks are not allowed in statement pooling mode; the transaction was rolled back",
    );
    encode::ready_for_query(&mut out, TxStatus::Idle);
    client
        .stream
        .write_all(&out)
        .await
        .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))?;
    if !ok {
        server.state.broken = true;
    }
    Ok(())
}
