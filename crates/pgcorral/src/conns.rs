//! The lists of client and server connections that the admin console shows (SHOW CLIENTS, SHOW
//! SERVERS): each connection registers an entry when it is established and its handle removes
//! it when dropped. Entries hold what does not change plus a few atomics (state, link, request
//! time) that the data path sets with plain stores, once per transaction at most.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::clock;
use crate::clock::Tick;
use crate::intern;

/// A connection's state, as PgBouncer names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Logged in; a client may or may not hold a server, a server is lent to a client.
    Active = 0,
    /// A client waiting for a server.
    Waiting = 1,
    /// A server in the pool, unused.
    Idle = 2,
    /// A server logging in.
    Login = 3,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Active => "active",
            State::Waiting => "waiting",
            State::Idle => "idle",
            State::Login => "login",
        }
    }

    fn from_u8(v: u8) -> State {
        match v {
            1 => State::Waiting,
            2 => State::Idle,
            3 => State::Login,
            _ => State::Active,
        }
    }
}

/// One listed connection.
#[derive(Debug)]
pub struct Entry {
    /// Unique among clients and servers; what KILL_CLIENT and `link` name.
    pub id: u64,
    /// Its user, database, application name and TLS description, shared by the entries with
    /// the same (see [`Texts`]): one pointer, not four strings' worth, per idle client.
    names: Arc<Names>,
    /// The other end: the client's address, or the server's (see [`Entry::addr`]).
    addr: Addr,
    /// This end (see [`Entry::local`]).
    local: Addr,
    /// Microseconds since the epoch of the connection (see [`Entry::connect_time`]).
    connect_time: u64,
    state: AtomicU8,
    /// Microseconds since the epoch of the last request (clients) or checkout (servers).
    request_time: AtomicU64,
    /// The connection it is paired with (a client's server or a server's client), 0 for none.
    link: AtomicU64,
    /// The server's backend process id (servers); 0 for clients.
    pub remote_pid: AtomicI32,
    /// The pool generation a server was opened in (0 for clients); see [`Entry::generation`].
    generation: u32,
    /// Set to end the connection (KILL, KILL_CLIENT): a client's task stops and reports it.
    killed: AtomicU8,
    /// Under one lock (a lock's word less per entry): neither is touched per transaction.
    locked: Mutex<Locked>,
    /// Prepared statements the client has, or the server holds, as its last relay left them.
    prepared: AtomicU32,
    /// A replication connection's kind, as an index in [`REPLICATION`].
    replication: AtomicU8,
    /// A client idle long enough to wait for its next request without its request loop's
    /// state (see [`Lists::slim_idle_clients`]): [`SLIM_NO`], [`SLIM_ASKED`] or [`SLIM_DONE`].
    slim: AtomicU8,
}

/// A client runs its request loop (or is new).
const SLIM_NO: u8 = 0;
/// The upkeep asked an idle client to give up its request loop's state, and woke it.
const SLIM_ASKED: u8 = 1;
/// The client waits for its next request without it (asked no more until it has run one).
const SLIM_DONE: u8 = 2;

/// Why a connection was ended from outside its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Killed {
    /// KILL, KILL_CLIENT.
    Admin = 1,
    /// Its session's server was closed at once on a configuration change or RECONNECT
    /// (`server_fast_close`).
    ConfigChanged = 2,
    /// The process exits at once (SIGQUIT, SHUTDOWN, a second SIGTERM, the end of a stop):
    /// every client is told, wherever it is, as PostgreSQL's immediate shutdown tells its
    /// sessions.
    Exiting = 3,
    /// Its tenant was disabled, deleted or terminated (the tenant API).
    Tenant = 4,
}

/// SHOW CLIENTS' and SHOW SERVERS' `replication` column, PgBouncer's words.
const REPLICATION: [&str; 3] = ["none", "logical", "physical"];

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A socket address as SHOW CLIENTS and the logs show it: IPv6's flow label and scope id
/// left out, 20 bytes rather than `SocketAddr`'s 32 in every listed connection.
#[derive(Debug, Clone, Copy)]
struct Addr {
    ip: IpAddr,
    port: u16,
    /// A Unix socket's: only the port means anything (shown as "unix"). In the byte the
    /// address leaves over.
    unix: bool,
}

impl Addr {
    fn new(a: SocketAddr, unix: bool) -> Addr {
        Addr {
            ip: a.ip(),
            port: a.port(),
            unix,
        }
    }
}

impl Entry {
    /// The other end: the client's address, or the server's. Over a Unix socket only the port
    /// means anything ([`Entry::unix`]).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr.ip, self.addr.port)
    }

    /// This end of the connection.
    pub fn local(&self) -> SocketAddr {
        SocketAddr::new(self.local.ip, self.local.port)
    }

    /// Over a Unix socket: [`Entry::addr`] and [`Entry::local`] carry only the port.
    pub fn unix(&self) -> bool {
        self.addr.unix
    }

    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Relaxed))
    }

    pub fn set_state(&self, s: State) {
        self.state.store(s as u8, Relaxed);
    }

    pub fn request_time(&self) -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_micros(self.request_time.load(Relaxed))
    }

    /// Ends the connection: its [`Killable`] future stops at its next poll, and is woken for it.
    pub fn kill(&self) {
        self.kill_for(Killed::Admin);
    }

    /// Ends the connection, for `why` (see [`Entry::kill`]).
    pub fn kill_for(&self, why: Killed) {
        self.killed.store(why as u8, Relaxed);
        self.wake();
    }

    /// Why the connection was ended; `None` while it was not.
    pub fn killed(&self) -> Option<Killed> {
        match self.killed.load(Relaxed) {
            0 => None,
            2 => Some(Killed::ConfigChanged),
            3 => Some(Killed::Exiting),
            4 => Some(Killed::Tenant),
            _ => Some(Killed::Admin),
        }
    }

    /// Wakes the task that runs the entry's [`Killable`], if it has been polled.
    fn wake(&self) {
        if let Some(w) = &self.locked.lock().waker {
            w.wake_by_ref();
        }
    }

    /// Runs `fut` until it completes or the connection is killed (`None`). Costs a relaxed
    /// load per poll, a waker registration when the task's waker changes (once, for a task),
    /// and three words in the future, rather than a second future to select on (every idle
    /// client holds this). Holds the entry itself, so `fut` may borrow what lists it mutably.
    pub fn killable<F: Future>(self: Arc<Self>, fut: F) -> Killable<F> {
        Killable {
            entry: self,
            registered: None,
            fut,
        }
    }

    pub fn connect_time(&self) -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_micros(self.connect_time)
    }

    pub fn pinned(&self) -> String {
        self.locked.lock().pinned.to_string()
    }

    pub fn set_pinned(&self, why: String) {
        self.locked.lock().pinned = why.into_boxed_str();
    }

    /// Its user (a server's: the login user), shared with the pool.
    pub fn user(&self) -> &Arc<str> {
        &self.names.user
    }

    pub fn database(&self) -> &Arc<str> {
        &self.names.database
    }

    /// As the client sent it at login; empty for servers.
    pub fn application_name(&self) -> &str {
        &self.names.application_name
    }

    /// TLS version and cipher suite ("TLSv1.3/TLS_AES_256_GCM_SHA384"); empty for plaintext.
    pub fn tls(&self) -> &str {
        &self.names.tls
    }

    /// The pool generation a server was opened in (0 for clients).
    pub fn generation(&self) -> u64 {
        self.generation.into()
    }

    pub fn prepared(&self) -> u32 {
        self.prepared.load(Relaxed)
    }

    pub fn set_prepared(&self, n: usize) {
        self.prepared
            .store(u32::try_from(n).unwrap_or(u32::MAX), Relaxed);
    }

    pub fn link(&self) -> u64 {
        self.link.load(Relaxed)
    }

    pub fn set_link(&self, id: u64) {
        self.link.store(id, Relaxed);
    }

    /// Marks a replication connection: `logical` or `physical` (other names are ignored).
    pub fn set_replication(&self, kind: &str) {
        if let Some(i) = REPLICATION.iter().position(|k| *k == kind) {
            self.replication.store(i as u8, Relaxed);
        }
    }

    /// `none`, `logical` or `physical`.
    pub fn replication(&self) -> &'static str {
        REPLICATION[usize::from(self.replication.load(Relaxed)).min(2)]
    }

    /// The client, idle, was asked to wait without its request loop's state: true once, and
    /// the client is then counted as waiting that way until [`Entry::unslim`].
    pub fn take_slim(&self) -> bool {
        // A load first: each wait for a request looks, and almost always finds nothing asked.
        self.slim.load(Relaxed) == SLIM_ASKED
            && self
                .slim
                .compare_exchange(SLIM_ASKED, SLIM_DONE, Relaxed, Relaxed)
                .is_ok()
    }

    /// The client waits without its request loop's state: not to be asked (nor woken) for it.
    pub fn slimmed(&self) {
        self.slim.store(SLIM_DONE, Relaxed);
    }

    /// The client runs its request loop again: it may be asked to slim down once more.
    pub fn unslim(&self) {
        self.slim.store(SLIM_NO, Relaxed);
    }
}

pin_project_lite::pin_project! {
    /// See [`Entry::killable`].
    pub struct Killable<F> {
        entry: Arc<Entry>,
        // The waker last given to the entry: a task's waker does not change between polls,
        // so the entry's lock is taken once, not at every poll.
        registered: Option<Waker>,
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for Killable<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if this.entry.killed.load(Relaxed) != 0 {
            return Poll::Ready(None);
        }
        if !this
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            let w = cx.waker().clone();
            this.entry.locked.lock().waker = Some(w.clone());
            *this.registered = Some(w);
            // A kill between the first look and the registration found no (or a stale)
            // waker; its flag is visible once the lock is taken after it.
            if this.entry.killed.load(Relaxed) != 0 {
                return Poll::Ready(None);
            }
        }
        this.fut.poll(cx).map(Some)
    }
}

/// What a new entry is made of.
pub struct New {
    pub user: Arc<str>,
    pub database: Arc<str>,
    pub addr: SocketAddr,
    pub local: SocketAddr,
    pub unix: bool,
    pub application_name: String,
    pub state: State,
    pub remote_pid: i32,
    pub generation: u64,
    pub tls: String,
}

/// The lists of clients and servers.
#[derive(Default)]
pub struct Lists {
    /// Turns the monotonic time a request was read at into wall-clock time.
    clock: WallClock,
    next_id: AtomicU64,
    clients: Mutex<HashMap<u64, Arc<Entry>>>,
    servers: Mutex<HashMap<u64, Arc<Entry>>>,
    texts: Texts,
}

/// What an entry keeps under its lock.
#[derive(Debug, Default)]
struct Locked {
    /// The client task to wake when it is killed (see [`Killable`]): set when the task first
    /// polls it, and again only if the task's waker changes.
    waker: Option<Waker>,
    /// Why the client is pinned to its server (SHOW CLIENTS), empty when it is not.
    pinned: Box<str>,
}

/// An entry's names: many entries have the same (a pool's user and database, an application's
/// name).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Names {
    user: Arc<str>,
    database: Arc<str>,
    application_name: Box<str>,
    tls: Box<str>,
}

/// The [`Names`] the entries hold, each kept once: an idle client's own copy would be an
/// allocation more (and its own application name another). Names no entry holds any more
/// are dropped by [`Lists::slim_idle_clients`].
#[derive(Default)]
struct Texts(Mutex<HashSet<Arc<Names>>>);

impl Texts {
    fn get(&self, names: Names) -> Arc<Names> {
        intern::kept(&mut self.0.lock(), names)
    }

    fn prune(&self) {
        self.0.lock().retain(|n| Arc::strong_count(n) > 1);
    }
}

/// Which list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Client,
    Server,
}

/// A listed connection; dropping it removes the entry.
pub struct Listed {
    lists: Arc<Lists>,
    kind: Kind,
    pub entry: Arc<Entry>,
}

impl std::ops::Deref for Listed {
    type Target = Entry;
    fn deref(&self) -> &Entry {
        &self.entry
    }
}

impl Listed {
    /// A request starts at `at` (shown as request_time; waits are measured from it): the
    /// monotonic time the caller read anyway, so that marking it reads no clock.
    pub fn requested_at(&self, at: Tick) {
        self.request_time
            .store(self.lists.clock.micros(at), Relaxed);
    }
}

/// Both clocks read once, together: wall-clock µs of a later [`Tick`].
struct WallClock {
    at: Tick,
    wall_us: u64,
}

impl Default for WallClock {
    fn default() -> WallClock {
        WallClock {
            at: clock::now(),
            wall_us: now_us(),
        }
    }
}

impl WallClock {
    fn micros(&self, at: Tick) -> u64 {
        self.wall_us + at.micros_since(self.at)
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.lists.list(self.kind).lock().remove(&self.entry.id);
    }
}

impl Lists {
    fn list(&self, kind: Kind) -> &Mutex<HashMap<u64, Arc<Entry>>> {
        match kind {
            Kind::Client => &self.clients,
            Kind::Server => &self.servers,
        }
    }

    /// A new connection's id, taken before it is listed (a client takes its id as its login
    /// starts, so it comes before the id of a server its login opens, as in PgBouncer).
    pub fn reserve(&self) -> u64 {
        self.next_id.fetch_add(1, Relaxed) + 1
    }

    /// Lists a new connection.
    pub fn add(self: &Arc<Self>, kind: Kind, n: New) -> Listed {
        self.add_as(kind, self.reserve(), n)
    }

    /// Lists a new connection under an id from [`Lists::reserve`].
    pub fn add_as(self: &Arc<Self>, kind: Kind, id: u64, n: New) -> Listed {
        let now = now_us();
        let entry = Arc::new(Entry {
            id,
            names: self.texts.get(Names {
                user: n.user,
                database: n.database,
                application_name: n.application_name.into_boxed_str(),
                tls: n.tls.into_boxed_str(),
            }),
            addr: Addr::new(n.addr, n.unix),
            local: Addr::new(n.local, n.unix),
            connect_time: now,
            state: AtomicU8::new(n.state as u8),
            request_time: AtomicU64::new(now),
            link: AtomicU64::new(0),
            remote_pid: AtomicI32::new(n.remote_pid),
            // A pool's generation goes up by one per RECONNECT or reload that changes it.
            generation: u32::try_from(n.generation).unwrap_or(u32::MAX),
            killed: Default::default(),
            locked: Default::default(),
            prepared: AtomicU32::new(0),
            replication: AtomicU8::new(0),
            slim: AtomicU8::new(SLIM_NO),
        });
        self.list(kind).lock().insert(id, entry.clone());
        Listed {
            lists: self.clone(),
            kind,
            entry,
        }
    }

    /// Wakes the task of every entry of a list (it looks at what changed, e.g. shutdown).
    pub fn wake(&self, kind: Kind) {
        for e in self.list(kind).lock().values() {
            e.wake();
        }
    }

    /// Asks the clients that hold no server and have sent no request for `idle` to wait for
    /// their next one without their request loop's state, and wakes them for it (once per
    /// idle spell: see [`Entry::take_slim`]); a busy client is never asked. Gives back the
    /// room the lists kept after a burst of connections, and the texts no entry holds. Returns
    /// how many clients are listed.
    pub fn slim_idle_clients(&self, idle: std::time::Duration) -> usize {
        let before = now_us().saturating_sub(idle.as_micros() as u64);
        let mut clients = self.clients.lock();
        for e in clients.values() {
            if e.link() == 0
                && e.request_time.load(Relaxed) < before
                && e.slim
                    .compare_exchange(SLIM_NO, SLIM_ASKED, Relaxed, Relaxed)
                    .is_ok()
            {
                e.wake();
            }
        }
        shrink(&mut clients);
        let listed = clients.len();
        drop(clients);
        shrink(&mut self.servers.lock());
        self.texts.prune();
        listed
    }

    /// Ends every connection of a list, for `why` (see [`Entry::kill_for`]).
    pub fn kill_all(&self, kind: Kind, why: Killed) {
        for e in self.list(kind).lock().values() {
            e.kill_for(why);
        }
    }

    /// Every entry of a list, oldest first.
    pub fn all(&self, kind: Kind) -> Vec<Arc<Entry>> {
        let mut v: Vec<_> = self.list(kind).lock().values().cloned().collect();
        v.sort_by_key(|e| e.id);
        v
    }
}

/// Gives back a map's room when it holds a quarter of what it grew to (after a burst).
fn shrink(map: &mut HashMap<u64, Arc<Entry>>) {
    if map.capacity() > 64 && map.len() < map.capacity() / 4 {
        map.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn client() -> New {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        New {
            user: Arc::from("u"),
            database: Arc::from("d"),
            addr: a,
            local: a,
            unix: false,
            application_name: String::new(),
            state: State::Active,
            remote_pid: 0,
            generation: 0,
            tls: String::new(),
        }
    }

    #[test]
    fn entries_leave_when_dropped() {
        let lists = Arc::new(Lists::default());
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let new = |db: &str| New {
            user: Arc::from("u"),
            database: Arc::from(db),
            addr: a,
            local: a,
            unix: false,
            application_name: String::new(),
            state: State::Active,
            remote_pid: 7,
            generation: 0,
            tls: String::new(),
        };
        let c = lists.add(Kind::Client, new("x"));
        let s = lists.add(Kind::Server, new("y"));
        c.set_link(s.id);
        s.set_state(State::Idle);
        assert_eq!(lists.all(Kind::Client).len(), 1);
        assert_eq!(lists.all(Kind::Server)[0].state(), State::Idle);
        assert_eq!(lists.all(Kind::Client)[0].link(), s.id);
        drop(c);
        assert!(lists.all(Kind::Client).is_empty());
        assert_eq!(lists.all(Kind::Server).len(), 1);
    }

    #[test]
    fn idle_clients_are_asked_to_slim_once_per_idle_spell() {
        let lists = Arc::new(Lists::default());
        let (idle, busy, fresh) = (
            lists.add(Kind::Client, client()),
            lists.add(Kind::Client, client()),
            lists.add(Kind::Client, client()),
        );
        for c in [&idle, &busy] {
            c.request_time.store(now_us() - 5_000_000, Relaxed);
        }
        busy.set_link(99);
        assert_eq!(lists.slim_idle_clients(Duration::from_secs(1)), 3);
        assert!(idle.take_slim());
        assert!(!idle.take_slim(), "once");
        assert!(!busy.take_slim(), "it holds a server");
        assert!(!fresh.take_slim(), "it sent a request lately");
        lists.slim_idle_clients(Duration::from_secs(1));
        assert!(!idle.take_slim(), "still slim: not asked again");
        idle.unslim();
        lists.slim_idle_clients(Duration::from_secs(1));
        assert!(idle.take_slim(), "idle again after its loop ran");
        busy.slimmed();
        busy.set_link(0);
        lists.slim_idle_clients(Duration::from_secs(1));
        assert!(!busy.take_slim(), "slim already: neither asked nor woken");
    }

    #[test]
    fn a_list_gives_back_its_room_after_a_burst() {
        let lists = Arc::new(Lists::default());
        let burst: Vec<Listed> = (0..1000)
            .map(|_| lists.add(Kind::Client, client()))
            .collect();
        drop(burst);
        assert!(lists.clients.lock().capacity() >= 1000);
        lists.slim_idle_clients(Duration::from_secs(1));
        assert!(lists.clients.lock().capacity() < 64);
    }
}
