//! The handle every task gets: configuration, pools, the cancel map, client accounting and the
//! shutdown signal. Built once at start and passed down; cheap to clone.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use corral_rt::balance::Balance;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth_query::Lookups;
use crate::cache::Caches;
use crate::cancel::CancelMap;
use crate::config::Config;
use crate::conns;
use crate::control;
use crate::hba::Hba;
use crate::intern;
use crate::login_places::{Lane, Places, Source};
use crate::notify::Hubs;
use crate::pool::registry::Registry;
use crate::pool::stats::Stats;
use crate::pool::Pool;
use crate::prepared;
use crate::route;
use crate::secrets::SecretCache;
use crate::tenants::Tenants;
use crate::tls;

pub struct Inner {
    pub config: ArcSwap<Config>,
    pub pools: Registry,
    pub cancel: CancelMap,
    /// SCRAM secrets derived from plaintext passwords, reused across logins.
    pub scram_cache: SecretCache,
    /// auth_query lookups: their idle server connections and (opt-in) cache.
    pub auth_query: Lookups,
    /// Clients logged in now (counted against max_client_conn), console users included.
    pub clients: AtomicUsize,
    /// The same clients by database and by user, once their names are known
    /// (max_db_client_connections, max_user_client_connections).
    pub clients_by_name: parking_lot::Mutex<ByName>,
    /// Connections accepted and still logging in: their places in the login budget, by
    /// source address.
    pub logins: Places,
    /// Connections refused at accept because the login budget was used up (or the
    /// source's share of it, and the reserves).
    pub logins_refused: AtomicU64,
    /// A quarter of the open-files limit at start: the login budget's ceiling whatever
    /// max_login_clients says, so sockets that never log in cannot take every descriptor.
    pub login_fd_cap: usize,
    /// Fired by the stopping signals and SHUTDOWN: stop accepting (the console still may, over
    /// the Unix socket), then as [`Stop`] says.
    pub shutdown: Arc<Shutdown>,
    /// Every client task, so shutdown can wait for them.
    pub tasks: TaskTracker,
    /// Worker threads: their load, runtimes, and where clients go.
    pub balance: Arc<Balance>,
    /// Prepared statements by text, shared by the clients that prepare the same one.
    pub statements: prepared::Registry,
    /// Routing decisions by query text (databases with replicas), and unique ids.
    pub router: route::Router,
    /// Admin console sessions open now.
    pub consoles: AtomicUsize,
    /// The console's own statistics (its logins, and each command as a transaction of one
    /// query), shown as database `pgbouncer` in SHOW STATS, as PgBouncer counts its admin pool.
    pub console_stats: Stats,
    /// Paused and disabled databases (admin console).
    pub control: control::Control,
    /// The file the configuration came from (RELOAD, SIGHUP), when there is one.
    pub config_path: std::sync::OnceLock<std::path::PathBuf>,
    /// Bumped when the configuration is replaced; clients re-read it at their next transaction.
    pub config_gen: std::sync::atomic::AtomicU64,
    /// Set once a new process took the listeners (`-R`): where idle clients are sent to it,
    /// each as its encoded state and its socket.
    pub handover: std::sync::OnceLock<std::sync::mpsc::Sender<(Vec<u8>, std::os::fd::OwnedFd)>>,
    /// Clients handed over and not sent yet: the process exits only once it is 0.
    pub handover_pending: AtomicUsize,
    /// TLS for clients and servers, from the configuration's files (replaced on reload); the
    /// same handle as the pools' targets hold.
    pub tls: tls::Shared,
    /// `auth_type = "hba"`'s rules and ident maps, read again on reload.
    pub hba: ArcSwap<Hba>,
    /// The tenant registry and the tenants loaded from it, with `tenant_registry` (set once,
    /// at start).
    pub tenants: std::sync::OnceLock<Arc<Tenants>>,
    /// Each database's LISTEN hub, for clients without a server of their own.
    pub notify: Hubs,
    /// The result cache: its answers and the databases it follows.
    pub cache: Arc<Caches>,
}

#[derive(Clone)]
pub struct Services(Arc<Inner>);

impl std::ops::Deref for Services {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Services {
    /// `rules`: the hba rules read for `config` (`hba::for_config`, which refuses to start
    /// on a file it cannot use).
    pub fn new(config: Config, rules: Hba, workers: usize) -> Services {
        let pools = Registry::default();
        let tls = pools.tls.clone();
        let shutdown = Arc::new(Shutdown::new(pools.lists.clone()));
        pools.open_forced(&config);
        let node = config.general.peer_id;
        let general = config.general.clone();
        Services(Arc::new(Inner {
            hba: ArcSwap::from_pointee(rules),
            config: ArcSwap::from_pointee(config),
            pools,
            cancel: CancelMap::default(),
            scram_cache: Default::default(),
            auth_query: Default::default(),
            clients: AtomicUsize::new(0),
            clients_by_name: Default::default(),
            logins: Places::default(),
            logins_refused: AtomicU64::new(0),
            login_fd_cap: open_files_limit().map_or(usize::MAX, |n| (n / 4).max(1)),
            shutdown,
            tasks: TaskTracker::new(),
            balance: Arc::new(Balance::new(workers)),
            statements: Default::default(),
            router: route::Router::new(node),
            consoles: AtomicUsize::new(0),
            console_stats: Stats::default(),
            control: Default::default(),
            config_path: Default::default(),
            config_gen: Default::default(),
            handover: Default::default(),
            handover_pending: AtomicUsize::new(0),
            tls,
            tenants: Default::default(),
            notify: Default::default(),
            cache: Arc::new(Caches::new(&general)),
        }))
    }

    /// Every pool: the file's databases' and the loaded tenants'.
    pub fn every_pool(&self) -> Vec<Pool> {
        let mut pools = self.pools.all();
        if let Some(t) = self.tenants.get() {
            pools.extend(t.pools());
        }
        pools
    }

    /// Counts a logged-in client against max_client_conn (plus [`ADMIN_RESERVE`] for an
    /// admin user on the console); the guard uncounts it. `None` when there is no room.
    pub fn admit_client(&self, admin: bool) -> Option<ClientCount> {
        let mut max = self.config.load().general.max_client_conn;
        if admin {
            max = max.saturating_add(ADMIN_RESERVE);
        }
        let n = self.clients.fetch_add(1, Ordering::AcqRel) + 1;
        let count = ClientCount {
            services: self.clone(),
            names: None,
        };
        (n <= max).then_some(count)
    }

    /// Clients logged in now to `database` (as named at login).
    pub fn clients_of_database(&self, database: &str) -> usize {
        self.clients_by_name.lock().count(Side::Database, database)
    }

    /// Clients logged in now as `user`.
    pub fn clients_of_user(&self, user: &str) -> usize {
        self.clients_by_name.lock().count(Side::User, user)
    }

    /// How many connections may be logging in at once: max_login_clients, or a quarter of the
    /// open-files limit when that is smaller.
    pub fn login_budget(&self) -> usize {
        self.config
            .load()
            .general
            .max_login_clients
            .min(self.login_fd_cap)
    }

    /// Gives a connection just accepted from `source` a place in the login budget (or in a
    /// reserve: [`Places::take`]); otherwise counts it refused and returns `None`. The client's
    /// task takes over the place ([`LoginCount::adopt`]).
    pub fn start_login(&self, source: Source) -> Option<Lane> {
        let budget = self.login_budget();
        if let Some(lane) = self.logins.take(source, budget) {
            return Some(lane);
        }
        let refused = self.logins_refused.fetch_add(1, Ordering::Relaxed) + 1;
        // Logged at the 1st, 2nd, 4th, 8th... refusal: an attack cannot flood the log.
        if refused.is_power_of_two() {
            tracing::warn!(
                refused,
                budget,
                sources = self.logins.sources(),
                "connections refused at accept: too many clients still logging in (max_login_clients), or too many from one address"
            );
        }
        None
    }

    /// More than half of the login budget is in use: logins are cut short
    /// ([`PRESSURE_LOGIN_TIMEOUT`]).
    pub fn login_pressure(&self) -> bool {
        self.logins.of_budget().saturating_mul(2) > self.login_budget()
    }
}

/// Logins beyond max_client_conn kept for admin_users on the admin console, so that it stays
/// reachable when applications (or an attacker with valid logins) hold every place.
pub const ADMIN_RESERVE: usize = 3;

/// While more than half of the login budget is in use (in a place kept for the console,
/// always), a login still unfinished after this long (checked every this long) is ended,
/// whatever client_login_timeout says.
pub const PRESSURE_LOGIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The soft limit on open files (RLIMIT_NOFILE), when there is one (from /proc, Linux).
fn open_files_limit() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    soft_open_files(&text)
}

/// The soft limit of "Max open files" in the text of /proc/self/limits; `None` if unlimited.
fn soft_open_files(limits: &str) -> Option<usize> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A connection's place in the login budget ([`Services::start_login`]); given back on drop
/// unless handed over.
pub struct LoginCount {
    services: Services,
    /// Where the connection came from and which place it holds; `None` once handed over.
    place: Option<(Source, Lane)>,
}

impl LoginCount {
    /// Takes over the place `start_login` gave this connection (from `source`, in `lane`).
    pub fn adopt(services: &Services, source: Source, lane: Lane) -> LoginCount {
        LoginCount {
            services: services.clone(),
            place: Some((source, lane)),
        }
    }

    /// Leaves the place to the client's task, which adopts it. (Not `mem::forget`: the guard's
    /// handle on the services must still be dropped, or they, their pools and every server
    /// connection would outlive shutdown.)
    pub fn hand_over(mut self) {
        self.place = None;
    }
}

impl Drop for LoginCount {
    fn drop(&mut self) {
        if let Some((source, lane)) = self.place.take() {
            self.services.logins.give_back(source, lane);
        }
    }
}

/// One logged-in client; uncounted on drop (under its database and user too, once
/// [`ClientCount::name`] counted it there).
pub struct ClientCount {
    services: Services,
    /// Its database and user, as the count's map holds them: one pointer, shared by the clients
    /// counted under the same two names.
    names: Option<Arc<Pair>>,
}

/// A database and a user that clients are counted under (see [`ByName`]).
#[derive(PartialEq, Eq, Hash)]
struct Pair {
    database: Arc<str>,
    user: Arc<str>,
}

impl ClientCount {
    /// Counts the client under its `database` and `user`, and checks the caps
    /// (`max_db_client_connections`, `max_user_client_connections`; 0 = none) with it
    /// counted, as PgBouncer: `Err` names the cap it is over (the database's first). `exempt`
    /// (an admin user on the console) is counted but never refused. Counted once: a second
    /// call only checks.
    pub fn name(
        &mut self,
        database: &str,
        user: &str,
        caps: (usize, usize),
        exempt: bool,
    ) -> Result<(), &'static str> {
        let mut by = self.services.clients_by_name.lock();
        if self.names.is_none() {
            // The map's own names: no copy of them per client.
            self.names = Some(by.add(database, user));
        }
        by.over(database, user, caps, exempt)
    }
}

impl Drop for ClientCount {
    fn drop(&mut self) {
        if let Some(pair) = self.names.take() {
            self.services.clients_by_name.lock().remove(pair);
        }
        self.services.clients.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Clients logged in, by database and by user (names without clients are not kept).
#[derive(Default)]
pub struct ByName {
    database: HashMap<Arc<str>, usize>,
    user: HashMap<Arc<str>, usize>,
    /// The pairs counted clients hold, each kept once (while a client holds it).
    pairs: HashSet<Arc<Pair>>,
}

/// Which of [`ByName`]'s counts.
#[derive(Clone, Copy)]
pub enum Side {
    Database,
    User,
}

impl ByName {
    fn map(&mut self, side: Side) -> &mut HashMap<Arc<str>, usize> {
        match side {
            Side::Database => &mut self.database,
            Side::User => &mut self.user,
        }
    }

    /// Clients counted under `name`.
    pub fn count(&self, side: Side, name: &str) -> usize {
        let map = match side {
            Side::Database => &self.database,
            Side::User => &self.user,
        };
        map.get(name).copied().unwrap_or(0)
    }

    /// Counts one client more under `database` and `user`; returns the names as kept here.
    fn add(&mut self, database: &str, user: &str) -> Arc<Pair> {
        let pair = Pair {
            database: self.add_one(Side::Database, database),
            user: self.add_one(Side::User, user),
        };
        intern::kept(&mut self.pairs, pair)
    }

    fn add_one(&mut self, side: Side, name: &str) -> Arc<str> {
        let map = self.map(side);
        if let Some(n) = map.get_mut(name) {
            *n += 1;
            let (kept, _) = map.get_key_value(name).expect("counted above");
            return kept.clone();
        }
        let kept: Arc<str> = name.into();
        map.insert(kept.clone(), 1);
        kept
    }

    /// Counts one client less under the pair it held.
    fn remove(&mut self, pair: Arc<Pair>) {
        // Every clone of a pair is made and dropped under the lock: the set's and this one
        // are the last.
        if Arc::strong_count(&pair) == 2 {
            self.pairs.remove(&pair);
        }
        for (side, name) in [(Side::Database, &pair.database), (Side::User, &pair.user)] {
            let map = self.map(side);
            if let Some(n) = map.get_mut(name) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(name);
                }
            }
        }
    }

    /// Which cap (its key) the counted client is over, if any.
    fn over(
        &self,
        database: &str,
        user: &str,
        (max_db, max_user): (usize, usize),
        exempt: bool,
    ) -> Result<(), &'static str> {
        if exempt {
            return Ok(());
        }
        if max_db > 0 && self.count(Side::Database, database) > max_db {
            return Err("max_db_client_connections");
        }
        if max_user > 0 && self.count(Side::User, user) > max_user {
            return Err("max_user_client_connections");
        }
        Ok(())
    }
}

/// The shutdown signal, in PgBouncer's three modes ([`Stop`]). What runs per transaction reads
/// one flag; a client waiting for its next request is woken through its entry in the client
/// list (it polls under [`crate::conns::Entry::killable`]), so waiting registers with nothing
/// shared by all clients. Other tasks (listener, maintenance, metrics) await the tokens.
pub struct Shutdown {
    /// No new transactions: a client that asks for a server is closed (WAIT_FOR_SERVERS).
    fired: AtomicBool,
    token: CancellationToken,
    /// The TCP listeners close (every mode); the Unix socket stays for the console until the
    /// process exits.
    closing: CancellationToken,
    /// The process exits at once: every client is closed.
    now: CancellationToken,
    lists: Arc<conns::Lists>,
}

/// How pgcorral stops: PgBouncer's `SHUTDOWN` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Exit at once (SIGQUIT, `SHUTDOWN`).
    Immediate,
    /// Close the TCP listeners; a client that asks for a server (a new transaction, or one
    /// already waiting for a server) is closed, one in a transaction finishes it; exit once no
    /// server is in use by a client (within shutdown_timeout) (SIGINT, `SHUTDOWN
    /// WAIT_FOR_SERVERS`).
    WaitForServers,
    /// Close the TCP listeners and exit once every client (console users included) has
    /// disconnected on its own (SIGTERM, `SHUTDOWN WAIT_FOR_CLIENTS`).
    WaitForClients,
}

impl Shutdown {
    fn new(lists: Arc<conns::Lists>) -> Shutdown {
        Shutdown {
            fired: AtomicBool::new(false),
            token: CancellationToken::new(),
            closing: CancellationToken::new(),
            now: CancellationToken::new(),
            lists,
        }
    }

    /// Starts stopping in `mode`; false when a stop had already begun (a stricter mode still
    /// takes over: WAIT_FOR_SERVERS after WAIT_FOR_CLIENTS, Immediate after either).
    pub fn begin(&self, mode: Stop) -> bool {
        let first = !self.is_stopping();
        self.closing.cancel();
        match mode {
            Stop::WaitForClients => {}
            Stop::WaitForServers => self.no_new_transactions(),
            Stop::Immediate => {
                self.now.cancel();
                self.no_new_transactions();
                // Idle or not, in a transaction or a COPY: each is told and closed.
                self.lists
                    .kill_all(conns::Kind::Client, conns::Killed::Exiting);
            }
        }
        first
    }

    /// WAIT_FOR_SERVERS: the TCP listeners close and clients get no server any more (what
    /// in-process tests use to stop a pooler).
    pub fn cancel(&self) {
        self.begin(Stop::WaitForServers);
    }

    /// Sets the flag, cancels the token, wakes every listed client (an idle one closes if the
    /// process is exiting; one waiting for RESUME is closed).
    fn no_new_transactions(&self) {
        self.fired.store(true, Ordering::SeqCst);
        self.token.cancel();
        self.lists.wake(conns::Kind::Client);
    }

    /// True once clients get no new server (WAIT_FOR_SERVERS or Immediate). One atomic load.
    pub fn is_cancelled(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Completes once clients get no new server.
    pub fn cancelled(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.token.cancelled()
    }

    /// True once any stop has begun.
    pub fn is_stopping(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// Completes once any stop has begun: the TCP listeners close.
    pub fn closing(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.closing.cancelled()
    }

    /// True once the process is exiting (an immediate stop, or the end of one that waited).
    pub fn is_exiting(&self) -> bool {
        self.now.is_cancelled()
    }

    /// Fires when the process is exiting (for servers that take a token).
    pub fn exiting_token(&self) -> CancellationToken {
        self.now.clone()
    }

    /// Completes once the process is exiting.
    pub fn exiting(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.now.cancelled()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn open_files_limit_is_read_from_proc() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             63704                63704                processes \n\
                    Max open files            1024                 524288               files     \n";
        assert_eq!(super::soft_open_files(text), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(super::soft_open_files(unlimited), None);
        assert!(super::open_files_limit().is_some_and(|n| n > 0));
    }

    #[test]
    fn clients_by_name_are_capped_per_database_then_per_user() {
        use super::{ByName, Side};
        let mut by = ByName::default();
        let alice = by.add("app", "alice");
        let bob = by.add("app", "bob");
        assert_eq!(by.over("app", "bob", (2, 1), false), Ok(()));
        let bob2 = by.add("app", "bob");
        // Three on app (cap 2) and two as bob (cap 1): the database's cap is named first.
        assert_eq!(
            by.over("app", "bob", (2, 1), false),
            Err("max_db_client_connections")
        );
        assert_eq!(
            by.over("app", "bob", (0, 1), false),
            Err("max_user_client_connections")
        );
        assert_eq!(by.over("app", "bob", (0, 0), false), Ok(()));
        assert_eq!(by.over("app", "bob", (2, 1), true), Ok(()));
        by.remove(bob);
        by.remove(bob2);
        assert_eq!(by.count(Side::Database, "app"), 1);
        assert_eq!(by.count(Side::User, "bob"), 0);
        assert!(!by.user.contains_key("bob"));
        by.remove(alice);
        assert!(by.database.is_empty() && by.user.is_empty() && by.pairs.is_empty());
    }

    #[test]
    fn clients_share_the_names_they_are_counted_under() {
        let mut by = super::ByName::default();
        let alice = by.add("app", "alice");
        let bob = by.add("app", "bob");
        let bob2 = by.add("app", "bob");
        assert!(std::sync::Arc::ptr_eq(&alice.database, &bob.database));
        assert!(std::sync::Arc::ptr_eq(&bob, &bob2), "one pair for both");
        assert_eq!(
            (&*alice.database, &*alice.user, &*bob.user),
            ("app", "alice", "bob")
        );
        by.remove(bob);
        assert_eq!(by.pairs.len(), 2, "bob2 still holds it");
        by.remove(bob2);
        assert_eq!(by.pairs.len(), 1);
    }
}
