//! The accept loop: binds listen_addr:listen_port (and the Unix socket in unix_socket_dir),
//! spawns one task per client, and on shutdown stops accepting on TCP (the Unix socket stays,
//! for the console), then waits as the stop's mode ([`crate::services::Stop`]) says: for
//! clients to leave, for the servers to be released (up to shutdown_timeout), or not at all.

use std::net::SocketAddr;
use std::time::Duration;

use corral_rt::stream::Detached;
use corral_rt::timer;
use corral_rt::workers::{self, Workers};
use tokio::net::TcpListener;
use unix::UnixListen;

use crate::client;
use crate::clock;
use crate::config;
use crate::config::Config;
use crate::conns;
use crate::hba;
use crate::login_places::{self, Source};
use crate::metrics;
use crate::net::peer::Peer;
use crate::pool::stats;
use crate::services::{LoginCount, Services, Stop};
use crate::tls;

pub mod takeover;
mod tenants;
pub mod trim;
mod unix;
mod upkeep;

/// A bound pooler, ready to run.
pub struct Pooler {
    listener: TcpListener,
    /// The Unix-socket listener, unless unix_socket_dir is empty.
    unix: Option<UnixListen>,
    /// The Prometheus endpoint's listener, when `metrics_addr` is set.
    metrics: Option<TcpListener>,
    /// Where a new process asks for the listeners (`-R`), beside the Unix socket.
    takeover: Option<(tokio::net::UnixListener, std::path::PathBuf)>,
    /// The process this one took over from (`-R`): its clients come over this connection.
    from_old: Option<std::os::unix::net::UnixStream>,
    /// The tenant API's listener, when `api_listen` is set.
    api: Option<TcpListener>,
    services: Services,
}

impl Pooler {
    /// Binds the configured address (port 0 picks a free port), on the caller's runtime (the
    /// main thread's).
    pub async fn bind(config: Config) -> std::io::Result<Pooler> {
        Pooler::bind_inheriting(config, None).await
    }

    /// [`Pooler::bind`], or with the listeners a running process handed over (`-R`).
    #[allow(clippy::disallowed_methods)]
    pub async fn bind_inheriting(
        mut config: Config,
        inherited: Option<takeover::Inherited>,
    ) -> std::io::Result<Pooler> {
        // Before any socket: a file PostgreSQL would refuse stops the start.
        let rules = hba::for_config(&config.general)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let dir = config.general.unix_socket_dir.clone();
        let mut from_old = None;
        let (listener, unix) = match inherited {
            Some(got) => {
                from_old = Some(got.from_old);
                let std = std::net::TcpListener::from(got.tcp);
                std.set_nonblocking(true)?;
                let listener = TcpListener::from_std(std)?;
                let port = listener.local_addr()?.port();
                let unix = match (got.unix, dir.as_str()) {
                    (Some(fd), d) if !d.is_empty() => Some(UnixListen::adopt(fd, d, port)?),
                    _ => None,
                };
                (listener, unix)
            }
            None => {
                let host = match config.general.listen_addr.as_str() {
                    "*" => "0.0.0.0",
                    "localhost" => "127.0.0.1",
                    h => h,
                };
                let tcp = bind_tcp(
                    host,
                    config.general.listen_port,
                    config.general.so_reuseport,
                )?;
                // On the port TCP got, so that listen_port 0 names one socket file; before TCP
                // listens, so that a pooler that answers on its port answers on its socket too.
                let unix = match dir.as_str() {
                    "" => None,
                    dir => {
                        let mode =
                            config::socket_mode(&config.general.unix_socket_mode).unwrap_or(0o777);
                        Some(UnixListen::bind(dir, tcp.local_addr()?.port(), mode)?)
                    }
                };
                let at = tcp.local_addr()?;
                let tcp = tcp
                    .listen(LISTEN_BACKLOG)
                    .map_err(|e| cannot_listen(at, e))?;
                (tcp, unix)
            }
        };
        let takeover = match dir.as_str() {
            "" => None,
            dir => {
                use std::os::unix::fs::PermissionsExt;
                let path = takeover::path(dir, listener.local_addr()?.port());
                // The client socket answered to no one else (or was handed over by the process
                // that made this file): a file here is stale or that process's.
                let _ = std::fs::remove_file(&path);
                let at = format!("unix:{}", path.display());
                let l = tokio::net::UnixListener::bind(&path).map_err(|e| cannot_listen(&at, e))?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| cannot_listen(&at, e))?;
                Some((l, path))
            }
        };
        let metrics = match config.general.metrics_addr.as_str() {
            "" => None,
            addr => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|e| cannot_listen(addr, e))?,
            ),
        };
        let tls = tls::Tls::load(&config.general)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let (store, api) = tenants::open(&config.general, listener.local_addr()?.port()).await?;
        if let Some((_, fleet)) = &store {
            // The fleet's id goes into this node's cancel keys, unless the file sets one.
            if config.general.peer_id == 0 {
                config.general.peer_id = fleet.peer_id;
            }
        }
        let n_workers = config.general.workers;
        let services = Services::new(config, rules, workers::count(n_workers));
        services.tls.store(std::sync::Arc::new(tls));
        if let Some((store, fleet)) = store {
            let _ = services.tenants.set(tenants::tenants(store, fleet));
        }
        Ok(Pooler {
            listener,
            unix,
            metrics,
            takeover,
            from_old,
            api,
            services,
        })
    }

    /// Where the tenant API listens, when it is on.
    pub fn api_addr(&self) -> Option<SocketAddr> {
        self.api.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Where the Prometheus endpoint listens, when it is on.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound listener has an address")
    }

    /// The Unix socket clients may connect to, when there is one.
    pub fn unix_path(&self) -> Option<&std::path::Path> {
        self.unix.as_ref().map(UnixListen::path)
    }

    /// The shared services, e.g. to trigger shutdown.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Starts the worker threads, accepts clients and hands each to a worker in turn until
    /// `services().shutdown` fires, then drains as the stop's mode says (still accepting on
    /// the Unix socket, for the console). Runs on the main
    /// thread's runtime, where its background tasks are spawned too.
    #[allow(clippy::disallowed_methods)]
    pub async fn run(self) -> Ended {
        let Pooler {
            listener,
            unix,
            metrics,
            takeover,
            from_old,
            api,
            services,
        } = self;
        let mut handed_over = false;
        let io_uring = services.config.load().general.io_uring;
        let on_start = stats::own_shard;
        let workers = match Workers::start(services.balance.clone(), io_uring, on_start) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(error = %e, "cannot start worker threads");
                return Ended::Stopped;
            }
        };
        // The old process's clients (`-R`), read off the main thread as they come. Taking them
        // counts as a task: a stop that waits for the clients, and a handover of this process
        // in its turn, wait for the old process to be gone (it may still be sending clients).
        if let Some(stream) = from_old {
            let (to_here, taken_over) = tokio::sync::mpsc::unbounded_channel();
            takeover::receive_clients(stream, to_here);
            tokio::spawn(
                services
                    .tasks
                    .track_future(take_clients(services.clone(), taken_over)),
            );
        }
        let shutdown = services.shutdown.clone();
        tokio::spawn(sample_load(services.clone()));
        tokio::spawn(upkeep::run(services.clone()));
        if let Some(m) = metrics {
            tokio::spawn(metrics::serve(m, services.clone()));
        }
        tenants::start(&services, api);
        let mut backoff = Duration::from_millis(5);
        // A takeover handshake under way (`-R`): it runs beside the accepts, so that a process
        // that connects to the takeover socket and stalls delays no login.
        let mut giving: Option<Giving<'_>> = None;
        loop {
            if services.control.is_suspended() {
                // SUSPEND: new connections wait in the kernel's backlog until RESUME.
                tokio::select! {
                    _ = shutdown.closing() => break,
                    _ = services.control.wait_unsuspended() => {}
                }
            }
            let accepted = tokio::select! {
                _ = shutdown.closing() => break,
                _ = services.control.wait_suspended() => continue,
                r = listener.accept() => r.and_then(|(stream, peer)| {
                    let _ = stream.set_nodelay(true);
                    // Off tokio's reactor, to be registered with the worker's own.
                    Ok((Detached::Plain(stream.into_std()?, Vec::new()), Peer::Tcp(peer.into())))
                }),
                r = accept_unix(unix.as_ref()) => r,
                r = accept_takeover(takeover.as_ref()), if giving.is_none() => {
                    giving = Some(Box::pin(hand_over(r, &listener, unix.as_ref())));
                    continue;
                }
                gave = async { giving.as_mut().expect("a handshake").await }, if giving.is_some() => {
                    giving = None;
                    if let Some(to_new) = gave {
                        // Idle clients go over as they are woken (or become idle).
                        let (send, sent) = std::sync::mpsc::channel();
                        let _ = services.handover.set(send);
                        let forwarder = services.clone();
                        takeover::send_clients(to_new, sent, move || {
                            forwarder.handover_pending.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                        });
                        services.pools.lists.wake(conns::Kind::Client);
                        // Clients go on here until each leaves, those accepted but not logged
                        // in yet included (no stop has begun: they are not refused); new ones
                        // go to the new process.
                        handed_over = true;
                        break;
                    }
                    continue;
                }
            };
            accept(&services, accepted, &mut backoff).await;
        }
        drop(giving);
        drop(listener);
        if let Some((l, path)) = takeover {
            drop(l);
            if !handed_over {
                let _ = std::fs::remove_file(path);
            }
        }
        services.tasks.close();
        // A stop that waits keeps the Unix socket, as PgBouncer 1.25: the console stays
        // reachable (other logins are refused) until the process exits.
        let unix = match unix {
            // The new process listens on it now; the file is its.
            Some(u) if handed_over => {
                u.leave_file();
                None
            }
            _ if shutdown.is_exiting() => None,
            u => u,
        };
        {
            let drained = drain(&services);
            tokio::pin!(drained);
            loop {
                let accepted = tokio::select! {
                    _ = &mut drained => break,
                    r = accept_unix(unix.as_ref()) => r,
                };
                accept(&services, accepted, &mut backoff).await;
            }
        }
        // Removes the socket file: new clients are refused from now on.
        drop(unix);
        // Clients handed over (`-R`) are all sent before this process exits.
        let sending = std::time::Instant::now();
        while services
            .handover_pending
            .load(std::sync::atomic::Ordering::Acquire)
            > 0
            && sending.elapsed() < Duration::from_secs(10)
        {
            timer::sleep(Duration::from_millis(5)).await;
        }
        // Every client left is told and closed, background tasks (metrics, upkeep) end. The
        // clients' tasks get a moment to write the warning (a client that reads nothing does
        // not hold the exit up), as PostgreSQL's postmaster waits for its backends.
        services.shutdown.begin(Stop::Immediate);
        let _ = timer::timeout(EXIT_GRACE, services.tasks.wait()).await;
        drop(workers);
        match handed_over {
            true => Ended::HandedOver,
            false => Ended::Stopped,
        }
    }
}

/// How [`Pooler::run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A stop (signal, console, error).
    Stopped,
    /// A new process took the listeners over (`-R`): the files beside them (the Unix socket,
    /// the pidfile) are its now, whatever this process's guards would remove.
    HandedOver,
}

/// Hands a connection just accepted to a worker (or refuses it: the login budget is used up);
/// backs off after an accept error (out of file descriptors and the like) rather than spin.
async fn accept(
    services: &Services,
    accepted: std::io::Result<(Detached, Peer)>,
    backoff: &mut Duration,
) {
    match accepted {
        Ok((socket, peer)) => {
            *backoff = Duration::from_millis(5);
            // The login budget: beyond it (or beyond its source's share of it) a connection
            // is refused now, before it costs more than this descriptor for a moment.
            let source = Source::of(peer.ip());
            let Some(lane) = services.start_login(source) else {
                refuse(socket);
                return;
            };
            let login = LoginCount::adopt(services, source, lane);
            let Some((worker, handle)) = services
                .balance
                .pick()
                .and_then(|w| Some((w, services.balance.handle(w)?)))
            else {
                tracing::error!("no worker thread is running: connection closed");
                return;
            };
            let client = client::serve(socket, peer, services.clone(), worker, lane);
            // The client's task counts its login from here.
            login.hand_over();
            handle.spawn(services.tasks.track_future(clock::moments(client)));
        }
        Err(e) => {
            tracing::warn!(error = %e, "accept failed");
            timer::sleep(*backoff).await;
            *backoff = (*backoff * 2).min(Duration::from_secs(1));
        }
    }
}

/// A TCP socket bound to the first address of `host`:`port` that takes it, not listening yet:
/// with SO_REUSEADDR (as std's and tokio's listeners), and SO_REUSEPORT when `reuseport` (several
/// processes may listen on the port, and the kernel spreads new connections over them).
fn bind_tcp(host: &str, port: u16, reuseport: bool) -> std::io::Result<tokio::net::TcpSocket> {
    use std::net::ToSocketAddrs;
    let mut last = None;
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| cannot_listen(format_args!("{host}:{port}"), e))?;
    for addr in addrs {
        let socket = match addr {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        if reuseport {
            socket.set_reuseport(true)?;
        }
        match socket.bind(addr) {
            Ok(()) => return Ok(socket),
            Err(e) => last = Some(cannot_listen(addr, e)),
        }
    }
    Err(last.unwrap_or_else(|| {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, "resolves to nothing");
        cannot_listen(format_args!("{host}:{port}"), e)
    }))
}

/// A listener's error naming where it was to listen, as PgBouncer's log does: `cannot listen on
/// 127.0.0.1:6432: Address already in use`, `cannot listen on unix:/tmp/.s.PGSQL.6432: ...`.
pub(crate) fn cannot_listen(at: impl std::fmt::Display, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("cannot listen on {at}: {e}"))
}

/// The accept backlog of the TCP listener (tokio's own default).
const LISTEN_BACKLOG: u32 = 1024;

/// Waits as the stop's mode says; returns at once on an immediate exit. WAIT_FOR_CLIENTS waits
/// for every client (console users included) to leave; WAIT_FOR_SERVERS (or a WAIT_FOR_CLIENTS
/// made stricter) until no server is in use by a client, within shutdown_timeout.
async fn drain(services: &Services) {
    let shutdown = &services.shutdown;
    let clients = || services.clients.load(std::sync::atomic::Ordering::Relaxed);
    if !shutdown.is_cancelled() {
        // WAIT_FOR_CLIENTS: clients go on as before until each leaves; a stricter stop
        // (WAIT_FOR_SERVERS, immediate) takes over.
        tracing::info!(
            clients = clients(),
            "shutting down: no new connections; waiting for all clients to disconnect"
        );
        tokio::select! {
            _ = services.tasks.wait() => {
                tracing::info!("client connections dropped, exiting");
                return;
            }
            _ = shutdown.cancelled() => {}
        }
    }
    if shutdown.is_exiting() {
        return;
    }
    let timeout = services.config.load().general.shutdown_timeout();
    tracing::info!(
        clients = clients(),
        "shutting down: no new connections; waiting up to {} ms for transactions to finish",
        timeout.as_millis()
    );
    tokio::select! {
        r = timer::timeout(timeout, servers_released(services)) => match r {
            Ok(()) => tracing::info!("server connections dropped, exiting"),
            Err(_) => tracing::warn!("shutdown_timeout reached; closing remaining connections"),
        },
        _ = shutdown.exiting() => {}
    }
}

/// Completes once no pool has a server in use by a client (or being opened for one), looked at
/// every [`RELEASED_CHECK`], as PgBouncer's janitor looks at its servers.
async fn servers_released(services: &Services) {
    loop {
        if services.every_pool().iter().all(|p| p.busy() == 0) {
            return;
        }
        timer::sleep(RELEASED_CHECK).await;
    }
}

/// How often WAIT_FOR_SERVERS looks whether the servers are released.
const RELEASED_CHECK: Duration = Duration::from_millis(50);

/// Ends a connection refused at accept (the login budget is used up): one try at sending
/// FATAL 53300 without waiting (before its startup packet is read, as a PostgreSQL server
/// too busy to fork says), then the socket is closed.
fn refuse(socket: Detached) {
    use std::io::Write;
    let mut out = bytes::BytesMut::new();
    login_places::refusal().write_response(&mut out, "FATAL");
    // Accepted sockets are non-blocking: a full socket buffer loses the message, not time.
    let _ = match &socket {
        Detached::Plain(s, _) => (&*s).write(&out),
        Detached::Unix(s, _) => (&*s).write(&out),
        Detached::Tls(..) => Ok(0),
    };
}

/// A takeover handshake under way ([`hand_over`]).
type Giving<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Option<std::os::unix::net::UnixStream>> + Send + 'a>,
>;

/// The next process asking for a takeover; never, without the socket.
async fn accept_takeover(
    takeover: Option<&(tokio::net::UnixListener, std::path::PathBuf)>,
) -> std::io::Result<std::os::unix::net::UnixStream> {
    match takeover {
        Some((l, _)) => l.accept().await.and_then(|(s, _)| s.into_std()),
        None => std::future::pending().await,
    }
}

/// Gives the listeners to the process that asked (`-R`); the connection to it once it has them.
/// The exchange blocks, on the main thread's runtime's blocking pool; the accept loop polls this
/// beside its accepts, so a peer that stalls (up to the handshake's patience) delays no login.
#[allow(clippy::disallowed_methods)]
async fn hand_over(
    asked: std::io::Result<std::os::unix::net::UnixStream>,
    tcp: &TcpListener,
    unix: Option<&UnixListen>,
) -> Option<std::os::unix::net::UnixStream> {
    use std::os::fd::AsFd;
    let stream = match asked {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "takeover: accept failed");
            return None;
        }
    };
    let fds = tcp
        .as_fd()
        .try_clone_to_owned()
        .and_then(|t| Ok((t, unix.map(|u| u.fd().try_clone_to_owned()).transpose()?)));
    let (tcp, unix) = match fds {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "takeover: cannot share the listeners");
            return None;
        }
    };
    let gave = tokio::task::spawn_blocking(move || {
        use std::os::fd::AsFd;
        takeover::give(stream, tcp.as_fd(), unix.as_ref().map(|u| u.as_fd()))
    })
    .await;
    match gave {
        Ok(Ok(stream)) => {
            tracing::info!("takeover: a new process has the listeners; idle clients go to it, the others finish here");
            Some(stream)
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "takeover refused");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "takeover failed");
            None
        }
    }
}

/// Takes the clients the old process sends (`-R`) until it is gone: each goes on here, or, once
/// a newer process has taken this one over, straight on to that one (the old process may still
/// be finishing a transaction of a client it sends here later). An immediate exit closes those
/// that come after it.
async fn take_clients(
    services: Services,
    mut taken_over: tokio::sync::mpsc::UnboundedReceiver<(Vec<u8>, std::os::fd::OwnedFd)>,
) {
    loop {
        let (state, fd) = tokio::select! {
            _ = services.shutdown.exiting() => return,
            got = taken_over.recv() => match got {
                Some(c) => c,
                None => return,
            },
        };
        if services.handover.get().is_some() {
            client::handover::pass_on(&services, state, fd);
        } else if let Some(worker) = services.balance.pick() {
            client::handover::resume(&services, &state, fd, worker);
        }
    }
}

/// The next client on the Unix socket; never, without one.
async fn accept_unix(unix: Option<&UnixListen>) -> std::io::Result<(Detached, Peer)> {
    match unix {
        Some(u) => u.accept().await,
        None => std::future::pending().await,
    }
}

/// How long an exit waits for its clients' tasks to end (each writes its warning first).
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// How often worker load is sampled for client placement.
const LOAD_SAMPLE: Duration = Duration::from_millis(100);

async fn sample_load(services: Services) {
    let mut tick = timer::interval(LOAD_SAMPLE);
    let mut last = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = services.shutdown.cancelled() => return,
            now = tick.tick() => {
                services.balance.sample(now - last);
                last = now;
            }
        }
    }
}
