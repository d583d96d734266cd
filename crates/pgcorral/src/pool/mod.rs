//! A pool of server connections for one (database, user): checkout with a FIFO queue of waiting
//! clients, a global size cap shared by every worker thread, and release through the
//! [`Checkout`] guard.

mod checkout;
mod dedicated;
mod hot;
mod inner;
pub mod limits;
mod listener;
pub mod logins;
mod mailbox;
pub mod maintain;
mod open;
mod ops;
pub mod registry;
pub mod shares;
pub mod stats;

use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

pub use checkout::Checkout;
use corral_rt::timer;
pub use dedicated::Dedicated;
use inner::{Grant, Inner};
use limits::{CapKey, Limits};
use parking_lot::Mutex;

use crate::clock;
use crate::cluster::topology;
use crate::cold;
use crate::config::{millis_opt, Config, ConnLogging, PoolMode};
use crate::connlog::{self, Who};
use crate::conns;
use crate::error::{Error, Kind, Result};
use crate::logsafe;
use crate::server::connect::{Secret, Target};
use crate::server::hosts;
use crate::server::{ServerConn, ServerParams};
use crate::session;

/// What a new server connection is opened for.
#[derive(Clone, Copy)]
enum Open<'a> {
    /// A client's checkout: a failed login is remembered for `server_login_retry`, and a
    /// server that is down is waited for up to `server_unavailable_wait`.
    Client,
    /// `min_pool_size` in the background: a failure is not remembered, so that a failed one
    /// during a restart does not turn clients away afterwards.
    Warm,
    /// One client's own connection (replication), logged in with these startup parameters
    /// besides the database's; its failure concerns that client only.
    Dedicated(&'a [(String, String)]),
}

/// How long a client may wait for a server when that is not its pool's setting: under a
/// forced user, the pool is the forced user's, and a client whose login user has a
/// `query_wait_timeout` of its own waits that long (PgBouncer's rule). The default: the pool's.
/// In ms (0 = forever; beyond 49 days, 49 days), 8 bytes in every idle client's session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientWait(Option<u32>);

impl ClientWait {
    /// A client logged in as `user` under `config`: its own `query_wait_timeout`, when its
    /// `[users]` entry has one.
    pub fn of_user(config: &Config, user: &str) -> ClientWait {
        ClientWait(
            config
                .own_query_wait_timeout(user)
                .map(|ms| u32::try_from(ms).unwrap_or(u32::MAX)),
        )
    }
}

/// Rolls back an open transaction on a checked-out server; true when it ends idle within the
/// cleanup timeout (otherwise the caller should treat the server as broken).
pub async fn rollback(server: &mut Checkout) -> bool {
    timer::timeout(
        checkout::CLEANUP_TIMEOUT,
        checkout::clean(server, true, None),
    )
    .await
    .unwrap_or(false)
}

/// Settings fixed when the pool is built.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub size: usize,
    /// Idle servers kept open.
    pub min_size: usize,
    /// Extra servers for clients that waited `reserve_timeout`.
    pub reserve_size: usize,
    pub reserve_timeout: Duration,
    pub mode: PoolMode,
    /// Run when a session-mode client leaves; empty = none.
    pub reset_query: String,
    /// How long a client waits for a server; `None` = forever.
    pub wait_timeout: Option<Duration>,
    /// `query_timeout`, which also bounds a client's wait for a server (as PgBouncer's
    /// janitor applies it to waiting clients); `None` = off.
    pub query_timeout: Option<Duration>,
    /// After a failed login, how long new logins fail at once with the same error.
    pub login_retry: Duration,
    /// Idle servers unused for longer are closed (down to `min_size`).
    pub idle_timeout: Option<Duration>,
    /// Servers older than this are closed when idle.
    pub lifetime: Option<Duration>,
    /// Servers idle for longer run `check_query` before reuse.
    pub check_delay: Duration,
    /// `None` = no check; an empty text is an empty query (PgBouncer 1.23's `<empty>`).
    pub check_query: Option<String>,
    /// How long a client's checkout waits for a server that is down (server_unavailable_wait).
    pub unavailable_wait: Duration,
    /// Shared caps this pool's servers count against.
    pub caps: Option<CapKey>,
    /// How long `check_query` may take.
    pub check_timeout: Duration,
    /// A failed check fails the checkout (so that the cluster bans the server and tries
    /// another) instead of opening a new connection to the same server.
    pub fail_on_check: bool,
    /// Which of its servers' connects and closes are logged (log_connections,
    /// log_disconnections).
    pub log: ConnLogging,
    /// Run on each new server connection once logged in; empty = none (`connect_query`).
    pub connect_query: String,
    /// With a list of hosts, each new connection starts at the next host (else at the one that
    /// last let pgcorral in: `load_balance_hosts = disable`).
    pub round_robin_hosts: bool,
    /// On RECONNECT or a changed server, session-mode servers in use are closed at once
    /// (`server_fast_close`), not when their clients leave.
    pub fast_close: bool,
}

impl PoolSettings {
    /// `query_wait_timeout` for `client`: its own, else the pool's.
    fn wait_timeout(&self, client: ClientWait) -> Option<Duration> {
        client
            .0
            .map_or(self.wait_timeout, |ms| millis_opt(ms.into()))
    }

    /// How long a client may wait for a server: the shorter of `wait_timeout` and
    /// `query_timeout`; `None` = forever.
    fn wait_limit(&self, client: ClientWait) -> Option<Duration> {
        match (self.wait_timeout(client), self.query_timeout) {
            (Some(w), Some(q)) => Some(w.min(q)),
            (w, q) => w.or(q),
        }
    }

    /// What a client that waited `waited` for a server (past [`PoolSettings::wait_limit`])
    /// is told: PgBouncer's `query_timeout` when that is the shorter limit, else
    /// `query_wait_timeout`.
    fn waited_too_long(&self, waited: Duration, client: ClientWait) -> Error {
        let by_query = match (self.wait_timeout(client), self.query_timeout) {
            (Some(w), Some(q)) => q < w,
            (None, Some(_)) => true,
            _ => false,
        };
        match by_query {
            true => Error::new(
                Kind::QueryTimeout,
                format!(
                    "query_timeout: no server connection within query_timeout ({} ms)",
                    waited.as_millis()
                ),
            ),
            false => Error::new(
                Kind::PoolTimeout,
                format!(
                    "query_wait_timeout: no server connection became free within {} ms",
                    waited.as_millis()
                ),
            ),
        }
    }

    /// A pool of `size` in `mode` with every optional behaviour off (no reserve, no timeouts,
    /// no checks, no caps).
    pub fn new(size: usize, mode: PoolMode) -> PoolSettings {
        PoolSettings {
            size,
            min_size: 0,
            reserve_size: 0,
            reserve_timeout: Duration::ZERO,
            mode,
            reset_query: String::new(),
            wait_timeout: None,
            query_timeout: None,
            login_retry: Duration::ZERO,
            idle_timeout: None,
            lifetime: None,
            check_delay: Duration::MAX,
            check_query: None,
            unavailable_wait: Duration::ZERO,
            caps: None,
            check_timeout: checkout::CLEANUP_TIMEOUT,
            fail_on_check: false,
            log: Default::default(),
            connect_query: String::new(),
            fast_close: false,
            round_robin_hosts: true,
        }
    }
}

pub(crate) struct Shared {
    /// (database as the client named it, user).
    name: (String, String),
    /// Replaced whole on reload.
    settings: arc_swap::ArcSwap<PoolSettings>,
    /// What checkout and check-in read of them.
    hot: hot::Hot,
    target: Mutex<Target>,
    inner: Mutex<Inner>,
    /// Parameters reported by the first server: what clients are told at startup.
    params: Mutex<Option<ServerParams>>,
    /// The last failed login and when, replayed to new logins within `login_retry`.
    login_failed: Mutex<Option<(Instant, Error)>>,
    /// With a list of hosts: where the next connection starts (`load_balance_hosts`).
    hosts: hosts::HostCursor,
    limits: Option<Arc<Limits>>,
    /// Clients logged in to this pool.
    clients: std::sync::atomic::AtomicUsize,
    stats: stats::Stats,
    /// Where its servers are listed for SHOW SERVERS.
    lists: Arc<conns::Lists>,
    /// Bumped by RECONNECT: servers of older generations are closed when they come back.
    generation: std::sync::atomic::AtomicU64,
    /// (database, user) once more, shared by the pool's entries in SHOW CLIENTS/SERVERS.
    listed_names: (Arc<str>, Arc<str>),
    /// The server it connects to, as routing knows it (set by its cluster).
    node: std::sync::OnceLock<Arc<topology::Node>>,
    /// Outcomes of logins with startup parameters, reused by later logins with the same.
    logins: logins::Logins,
    /// What user code its database holds, shared with the other pools of that database.
    hooks: Arc<session::hooks::Watch>,
    /// A leased pool's shares: asked for more when a client has to wait (set by its registry).
    shares: std::sync::OnceLock<Arc<shares::Shares>>,
}

/// A pool's numbers at one moment (admin console).
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Clients logged in.
    pub clients: usize,
    /// Servers open or being opened.
    pub open: usize,
    pub idle: usize,
    /// Clients waiting for a server.
    pub waiting: usize,
    /// How long the longest-waiting client has waited.
    pub max_wait: Duration,
}

/// A cheap-to-clone handle on one pool.
#[derive(Clone)]
pub struct Pool(Arc<Shared>);

impl Pool {
    pub fn new(
        name: (String, String),
        target: Target,
        settings: PoolSettings,
        limits: &Arc<Limits>,
        lists: &Arc<conns::Lists>,
        hooks: Arc<session::hooks::Watch>,
    ) -> Pool {
        let limits = settings.caps.as_ref().map(|_| limits.clone());
        let listed_names = (Arc::from(name.0.as_str()), Arc::from(name.1.as_str()));
        let pool = Pool(Arc::new(Shared {
            name,
            hot: hot::Hot::new(&settings),
            settings: arc_swap::ArcSwap::from_pointee(settings),
            target: Mutex::new(target),
            inner: Mutex::new(Inner::default()),
            params: Mutex::new(None),
            login_failed: Mutex::new(None),
            hosts: Default::default(),
            limits,
            clients: Default::default(),
            stats: Default::default(),
            lists: lists.clone(),
            generation: Default::default(),
            listed_names,
            node: Default::default(),
            logins: Default::default(),
            hooks,
            shares: Default::default(),
        }));
        if let Some(l) = &pool.0.limits {
            l.register(&pool);
        }
        pool
    }

    /// Logins with startup parameters seen before.
    pub fn logins(&self) -> &logins::Logins {
        &self.0.logins
    }

    /// Tells the pool which server of its database it serves (once, by its cluster).
    pub fn set_node(&self, node: Arc<topology::Node>) {
        let _ = self.0.node.set(node);
    }

    /// Makes the pool a leased one: its size is set from `shares`, which it asks for more
    /// when a client has to wait (once, by its registry).
    pub fn set_shares(&self, shares: Arc<shares::Shares>) {
        let _ = self.0.shares.set(shares);
    }

    /// The server it serves, with its role, ban and lag.
    pub fn node(&self) -> Option<&Arc<topology::Node>> {
        self.0.node.get()
    }

    /// [`Pool::name`], shared (for connection lists).
    pub fn listed_names(&self) -> (Arc<str>, Arc<str>) {
        self.0.listed_names.clone()
    }

    pub fn name(&self) -> (&str, &str) {
        (&self.0.name.0, &self.0.name.1)
    }

    /// The pool's settings now (replaced on reload).
    pub fn settings(&self) -> arc_swap::Guard<Arc<PoolSettings>> {
        self.0.settings.load()
    }

    /// Replaces the settings (reload); takes effect from each pool operation on.
    pub fn set_settings(&self, settings: PoolSettings) {
        self.0.hot.set(&settings);
        self.0.settings.store(Arc::new(settings));
    }

    /// The user this pool's servers log in as.
    pub fn server_user(&self) -> String {
        self.0.target.lock().user.clone()
    }

    /// Server parameters clients are told at startup, once any server has been connected.
    pub fn params(&self) -> Option<ServerParams> {
        self.0.params.lock().clone()
    }

    /// Records the ClientKey a SCRAM client revealed, so pgcorral can log in to a server that
    /// holds the same verifier.
    /// The SCRAM client key learned from a client (see [`Pool::learn_client_key`]), if any.
    pub fn client_key(&self) -> Option<[u8; 32]> {
        match &self.0.target.lock().secret {
            Secret::Scram { client_key, .. } => *client_key,
            _ => None,
        }
    }

    pub fn learn_client_key(&self, key: [u8; 32]) {
        if let Secret::Scram { client_key, .. } = &mut self.0.target.lock().secret {
            *client_key = Some(key);
        }
    }

    /// (open, idle, waiting) counts.
    pub fn counts(&self) -> (usize, usize, usize) {
        let i = self.0.inner.lock();
        (i.open, i.idle.len(), i.waiters.len())
    }

    /// What the admin console shows of this pool now.
    pub fn snapshot(&self) -> Snapshot {
        let i = self.0.inner.lock();
        Snapshot {
            clients: self.0.clients.load(std::sync::atomic::Ordering::Relaxed),
            open: i.open,
            idle: i.idle.len(),
            waiting: i.waiters.len(),
            max_wait: i
                .waiters
                .front()
                .map(|w| w.since.elapsed())
                .unwrap_or_default(),
        }
    }

    pub fn stats(&self) -> &stats::Stats {
        &self.0.stats
    }

    /// A client logged in to this pool (until [`Pool::client_left`]).
    pub fn client_joined(&self) {
        self.0
            .clients
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn client_left(&self) {
        self.0
            .clients
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Hands out a server to a client on `worker`: an idle one (preferring one already on that
    /// worker), a new one if under the cap, else the first to come back (first come, first
    /// served), waiting at most the pool's wait timeout (or `wait`, the client's own). The
    /// server ends up registered with the worker's reactor.
    pub async fn checkout(&self, worker: usize, wait: ClientWait) -> Result<Checkout> {
        // The common case completes without awaiting. A wait is small enough to stay in the
        // client's future (no allocation per wait); the check and opening a server are boxed so
        // that every client's future stays small.
        match self.checkout_idle(worker) {
            Some(c) if !self.needs_check(&c) => Ok(c),
            Some(c) => cold::cold(self.check_then_slow(c, worker, wait)).await,
            None => self.checkout_slow(worker, wait).await,
        }
    }

    /// True when an idle server has been unused long enough to be checked before reuse.
    fn needs_check(&self, server: &ServerConn) -> bool {
        self.0
            .hot
            .check_after_ns()
            .is_some_and(|d| clock::now().nanos_since(server.last_used) >= d)
    }

    /// Runs `server_check_query` on a long-idle server; a failed check discards it and the
    /// checkout goes on as if there had been no idle server.
    async fn check_then_slow(
        &self,
        mut c: Checkout,
        worker: usize,
        wait: ClientWait,
    ) -> Result<Checkout> {
        let s = self.0.settings.load_full();
        let applied = c.applied.clone();
        let ok = timer::timeout(
            s.check_timeout,
            checkout::clean(&mut c, false, s.check_query.clone()),
        )
        .await
        .unwrap_or(false);
        if ok {
            c.applied = applied;
            return Ok(c);
        }
        self.closing(&c, &"server_check_query failed");
        c.state.broken = true;
        drop(c);
        if s.fail_on_check {
            return Err(Error::new(
                Kind::ServerIo,
                format!(
                    "health check failed: {:?} did not answer within {} ms",
                    s.check_query.as_deref().unwrap_or_default(),
                    s.check_timeout.as_millis()
                ),
            ));
        }
        self.checkout_slow(worker, wait).await
    }

    /// An idle server, healthy and moved to `worker`, if there is one.
    fn checkout_idle(&self, worker: usize) -> Option<Checkout> {
        loop {
            let mut server = self.0.inner.lock().pop_idle(worker)?;
            if server.is_closed_while_idle() {
                self.closing(&server, &"server conn crashed?");
                drop(server);
                self.release_slot();
                continue;
            }
            let mut checkout = Checkout::new(server, self.clone());
            if checkout.rehome(worker) {
                return Some(checkout);
            }
        }
    }

    /// No idle server: a new one if under the cap, else a place in the queue. Opening a server
    /// is boxed apart, so that a client that waits (the common case under load) moves only the
    /// small waiting state into its box.
    async fn checkout_slow(&self, worker: usize, wait: ClientWait) -> Result<Checkout> {
        loop {
            if let Some(c) = self.checkout_idle(worker) {
                return Ok(c);
            }
            // The task's waker, registered with the wait as it is opened.
            let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
            let queued = {
                let mut inner = self.0.inner.lock();
                if !inner.idle.is_empty() {
                    continue;
                }
                if inner.open < self.0.hot.size() {
                    inner.open += 1;
                    None
                } else {
                    let (queued, entry) = mailbox::open(waker);
                    inner.waiters.push_back(inner::Waiting {
                        since: clock::now(),
                        worker,
                        wait,
                        entry,
                    });
                    Some(queued)
                }
            };
            if let (Some(_), Some(shares)) = (&queued, self.0.shares.get()) {
                shares.ask();
            }
            let mut checkout = match queued {
                None => {
                    let slot = inner::Slot::new(self.clone());
                    return cold::cold(self.open(slot, worker, wait)).await;
                }
                Some(queued) => match queued.await {
                    Some(Grant::Server(checkout)) => checkout,
                    Some(Grant::Slot(slot)) => {
                        return cold::cold(self.open(slot, worker, wait)).await
                    }
                    Some(Grant::TimedOut(waited)) => {
                        return Err(self.0.settings.load().waited_too_long(waited, wait))
                    }
                    Some(Grant::Shutdown) => return Err(Error::server_shutting_down()),
                    None => return Err(Error::new(Kind::Shutdown, "pool closed")),
                },
            };
            if checkout.rehome(worker) {
                return Ok(checkout);
            }
        }
    }

    /// WAIT_FOR_SERVERS: every client waiting for a server here (or for room under
    /// max_db_connections/max_user_connections) is sent away, as PgBouncer's janitor does on
    /// each pass. Run on every maintenance tick while the stop lasts.
    pub(crate) fn shut_waiters(&self) {
        let waiting: Vec<_> = {
            let mut inner = self.0.inner.lock();
            inner.waiters.drain(..).map(|w| w.entry).collect()
        };
        for w in waiting {
            let _ = w.send(Grant::Shutdown);
        }
        if let Some(l) = &self.0.limits {
            l.shut_waiters();
        }
    }

    /// Servers in use by clients now, or being opened for them (open but not idle).
    pub fn busy(&self) -> usize {
        let i = self.0.inner.lock();
        i.open.saturating_sub(i.idle.len())
    }

    /// Run on every maintenance tick (so up to one [`maintain::TICK`] late, like PgBouncer's
    /// janitor): clients that waited `reserve_timeout` get a reserve place while there is one,
    /// and those that waited `wait_timeout` are sent away. A wait costs no timer of its own.
    pub(crate) fn expire_waiters(&self) {
        let s = self.0.settings.load();
        let now = clock::now();
        let mut inner = self.0.inner.lock();
        while let Some(since) = inner.waiters.front().map(|w| w.since) {
            if s.reserve_size == 0
                || now.since(since) < s.reserve_timeout
                || inner.open >= s.size + s.reserve_size
            {
                break;
            }
            let w = inner.waiters.pop_front().expect("checked").entry;
            if inner.grant_place(w, self) {
                // PgBouncer's words: a client waited reserve_pool_timeout.
                tracing::warn!(db = %logsafe::Esc(&self.0.name.0), user = %logsafe::Esc(&self.0.name.1), "taking connection from reserve_pool");
            }
        }
        // Each waiter's own limit (a forced user's pool has clients of several users), so the
        // whole queue is looked at, not only its front.
        let mut i = 0;
        while i < inner.waiters.len() {
            let w = &inner.waiters[i];
            let waited = now.since(w.since);
            if s.wait_limit(w.wait).is_some_and(|t| waited >= t) {
                let w = inner.waiters.remove(i).expect("in range").entry;
                let _ = w.send(Grant::TimedOut(waited));
            } else {
                i += 1;
            }
        }
    }

    /// Opens a server in a place already counted, for a client; on error the place is given
    /// back.
    async fn open(&self, slot: inner::Slot, worker: usize, wait: ClientWait) -> Result<Checkout> {
        self.open_for(slot, worker, Open::Client, wait).await
    }

    /// Adds an open, idle connection to the pool, counted against its size; when the pool is
    /// full the connection is closed and `false` returned. A hook for the checkout benchmark
    /// (`benches/hot_path.rs`), which has no server to connect to; not in the product.
    #[cfg(feature = "bench-hooks")]
    pub fn adopt(&self, server: ServerConn) -> bool {
        {
            let mut inner = self.0.inner.lock();
            if inner.open >= self.0.settings.load().size {
                return false;
            }
            inner.open += 1;
        }
        self.checkin(Box::new(server));
        true
    }

    /// Opens one server into the idle list (for `min_pool_size`), if the pool has room.
    pub async fn warm(&self, worker: usize) {
        let slot = {
            let mut inner = self.0.inner.lock();
            if inner.open >= self.0.settings.load().size {
                return;
            }
            inner.open += 1;
            inner::Slot::new(self.clone())
        };
        if let Err(e) = self
            .open_for(slot, worker, Open::Warm, ClientWait::default())
            .await
        {
            tracing::debug!(pool = ?self.0.name, error = %logsafe::Esc(&e), "could not open a min_pool_size server");
        }
    }

    /// Closes the least recently used idle server; false when there is none.
    pub(crate) fn close_one_idle(&self) -> bool {
        let server = {
            let mut inner = self.0.inner.lock();
            if inner.idle.is_empty() {
                return false;
            }
            inner.idle.remove(0)
        };
        // To make room under a shared cap for another pool's client.
        self.closing(&server, &"evicted");
        drop(server);
        self.release_slot();
        true
    }

    /// Puts a clean server back: to the first waiter, else on the idle list. A server past its
    /// lifetime, or whose place an earlier client of another pool under a shared cap is
    /// waiting for, is closed instead.
    fn checkin(&self, server: Box<ServerConn>) {
        let mut server = server;
        // Another worker may take it from here: its last write must not wait in this one's batch.
        server.stream.flush_batched();
        let now = clock::now();
        let expired = (self.0.hot.lifetime_ns())
            .is_some_and(|l| now.nanos_since(server.created) >= l)
            || server.generation < self.generation();
        let mut yield_cap = false;
        let caps = match (&self.0.limits, expired) {
            (Some(l), false) => self.0.settings.load().caps.clone().map(|k| (l, k)),
            _ => None,
        };
        if let Some((l, k)) = caps {
            let head = self.0.inner.lock().waiters.front().map(|w| w.since);
            match l.claim(&k, head) {
                limits::Claim::None => {}
                limits::Claim::Yield => yield_cap = true,
                limits::Claim::Handoff(tx) => {
                    server.last_used = now;
                    match tx.send(limits::CapGrant::Server(Checkout::new(
                        server,
                        self.clone(),
                    ))) {
                        Ok(()) => return,
                        Err(limits::CapGrant::Server(mut c)) => server = c.take(),
                        Err(_) => unreachable!("sent a server"),
                    }
                }
            }
        }
        if expired || yield_cap {
            let why = match (expired, server.generation < self.generation()) {
                (true, true) => "database configuration changed",
                (true, false) => "server lifetime over",
                _ => "evicted",
            };
            self.closing(&server, &why);
            drop(server);
            self.release_slot();
            return;
        }
        server.last_used = now;
        if let Some(l) = &server.listed {
            l.set_state(conns::State::Idle);
            l.set_link(0);
        }
        let mut inner = self.0.inner.lock();
        if inner.open > self.0.hot.limit() {
            // The pool was made smaller (a reload, a fleet share given back): this server goes
            // rather than to a waiter.
            drop(inner);
            self.closing(&server, &"pool_size lowered");
            drop(server);
            self.release_slot();
            return;
        }
        while let Some(w) = inner.pop_waiter_for(server.home, now) {
            match w.send(Grant::Server(Checkout::new(server, self.clone()))) {
                Ok(()) => return,
                Err(Grant::Server(mut c)) => server = c.take(),
                Err(_) => unreachable!("sent a server"),
            }
        }
        inner.idle.push(server);
    }

    /// Logs why one of its servers is being closed (log_disconnections), in PgBouncer's words.
    pub(crate) fn closing(&self, server: &ServerConn, why: &dyn std::fmt::Display) {
        if let Some(l) = &server.listed {
            connlog::closing(self.0.settings.load().log, &Who::server(l), why);
        }
    }

    /// Gives up a server's place in the pool: a waiter may open a new one in its stead.
    fn release_slot(&self) {
        let mut inner = self.0.inner.lock();
        // Over the pool's size (it was made smaller), the place is not handed on.
        let over = inner.open > self.0.hot.limit();
        if !over {
            while let Some(w) = inner.waiters.pop_front().map(|w| w.entry) {
                match w.send(Grant::Slot(inner::Slot::new(self.clone()))) {
                    Ok(()) => return,
                    Err(g) => g.forget_slot(),
                }
            }
        }
        inner.open -= 1;
    }
}
