//! What pgcorral knows of one database's servers: each one's configured and detected role,
//! weight, ban, replay position and lag. Shared by every user's pools of the database; written by
//! the monitor and by failed checkouts, read on every routed checkout.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::{
    Config, Database, DefaultRole, LagLimit, LoadBalancing, ServerEntry, ServerRole,
};
use crate::server;
use crate::server::connect;

/// The routing settings of one database (its own, else `[general]`'s).
#[derive(Debug, Clone)]
pub struct RouteSettings {
    pub load_balancing: LoadBalancing,
    pub default_role: DefaultRole,
    pub query_parser_enabled: bool,
    pub primary_reads_enabled: bool,
    pub healthcheck_timeout: Duration,
    pub healthcheck_delay: Duration,
    pub healthcheck_interval: Duration,
    pub ban_time: Duration,
    pub max_lag: LagLimit,
    pub read_your_writes: bool,
    pub writing_functions: Arc<Vec<String>>,
    /// A digest of `writing_functions` (part of the routing cache's key).
    pub writing_key: u64,
    /// How long a request for the primary waits for one (server_unavailable_wait).
    pub unavailable_wait: Duration,
}

impl RouteSettings {
    pub fn of(config: &Config, db: &Database) -> RouteSettings {
        let g = &config.general;
        let ms = Duration::from_millis;
        RouteSettings {
            load_balancing: db.load_balancing.unwrap_or(g.load_balancing),
            default_role: db.default_role.unwrap_or(g.default_role),
            query_parser_enabled: db.query_parser_enabled.unwrap_or(g.query_parser_enabled),
            primary_reads_enabled: db.primary_reads_enabled.unwrap_or(g.primary_reads_enabled),
            healthcheck_timeout: ms(db.healthcheck_timeout.unwrap_or(g.healthcheck_timeout)),
            healthcheck_delay: ms(db.healthcheck_delay.unwrap_or(g.healthcheck_delay)),
            healthcheck_interval: ms(db.healthcheck_interval.unwrap_or(g.healthcheck_interval)),
            ban_time: ms(db.ban_time.unwrap_or(g.ban_time)),
            // Validated when the configuration was loaded.
            max_lag: LagLimit::parse(db.max_replica_lag.as_deref().unwrap_or(&g.max_replica_lag))
                .unwrap_or_default(),
            read_your_writes: db.read_your_writes.unwrap_or(g.read_your_writes),
            writing_functions: Arc::new(g.writing_functions.clone()),
            writing_key: {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                g.writing_functions.hash(&mut h);
                h.finish()
            },
            unavailable_wait: ms(g.server_unavailable_wait),
        }
    }
}

/// A server's role as routing sees it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    Replica,
    /// `role = "auto"` and not (yet) reachable: takes no traffic.
    Unknown,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Replica => "replica",
            Role::Unknown => "unknown",
        }
    }
}

/// One server of the database.
#[derive(Debug)]
pub struct Node {
    /// Its place in its shard's list.
    pub index: usize,
    /// The shard it serves (0 for a database that is not sharded).
    pub shard: usize,
    pub host: String,
    pub port: u16,
    pub configured: ServerRole,
    pub weight: u32,
    state: Mutex<NodeState>,
}

/// What the monitor and failed checkouts found out about a node.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// Out of rotation until then.
    pub banned_until: Option<Instant>,
    pub ban_reason: String,
    /// From `pg_is_in_recovery()` at the last successful check.
    pub in_recovery: Option<bool>,
    /// Reachable at the last check (true until a check says otherwise).
    pub down: bool,
    /// Replay position (replicas) or current WAL position (primary), as an integer LSN.
    pub lsn: u64,
    pub lag_bytes: Option<u64>,
    pub lag_time: Option<Duration>,
    /// Behind by more than max_replica_lag.
    pub lagging: bool,
    pub checked_at: Option<Instant>,
}

/// What routing reads of a node, under one lock.
#[derive(Debug, Clone, Copy)]
pub struct View {
    pub role: Role,
    pub banned: bool,
    pub lagging: bool,
    pub lsn: u64,
}

impl Node {
    /// The role routing uses: the configured one, or the detected one for `auto`.
    pub fn role(&self) -> Role {
        self.role_in(&self.state.lock())
    }

    fn role_in(&self, s: &NodeState) -> Role {
        match self.configured {
            ServerRole::Primary => Role::Primary,
            ServerRole::Replica => Role::Replica,
            ServerRole::Auto => match (s.down, s.in_recovery) {
                (false, Some(false)) => Role::Primary,
                (false, Some(true)) => Role::Replica,
                _ => Role::Unknown,
            },
        }
    }

    /// Role, ban (an expired one is lifted), lag and position at `now`.
    pub fn view(&self, now: Instant) -> View {
        let mut s = self.state.lock();
        if s.banned_until.is_some_and(|t| t <= now) {
            s.banned_until = None;
            tracing::info!(server = %self.addr(), "ban expired; back in rotation");
        }
        View {
            role: self.role_in(&s),
            banned: s.banned_until.is_some(),
            lagging: s.lagging,
            lsn: s.lsn,
        }
    }

    pub fn state(&self) -> NodeState {
        self.state.lock().clone()
    }

    pub fn update(&self, f: impl FnOnce(&mut NodeState)) {
        f(&mut self.state.lock())
    }

    /// Takes the node out of rotation for `time`. The primary is never banned.
    pub fn ban(&self, time: Duration, reason: &str) {
        let mut s = self.state.lock();
        if self.role_in(&s) == Role::Primary {
            return;
        }
        if s.banned_until.is_none_or(|t| t <= Instant::now()) {
            tracing::warn!(server = %self.addr(), reason, ban_ms = time.as_millis() as u64, "banning server");
        }
        s.banned_until = Some(Instant::now() + time);
        s.ban_reason = reason.to_string();
    }

    pub fn unban(&self) {
        let mut s = self.state.lock();
        s.banned_until = None;
        s.ban_reason.clear();
    }

    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// How routing treats a node now, in a word (SHOW POOLS, SHOW SERVERS): `banned` (out of
/// rotation for `ban_time`), `down` (the last check failed; the primary is never banned),
/// `lagging`, or `ok`.
pub fn status(node: &Node) -> &'static str {
    let v = node.view(Instant::now());
    if v.banned {
        "banned"
    } else if node.state().down {
        "down"
    } else if v.lagging {
        "lagging"
    } else {
        "ok"
    }
}

/// A database's servers (one shard's, for a sharded database), in configuration order.
pub struct Topology {
    pub database: String,
    pub shard: usize,
    pub nodes: Vec<Arc<Node>>,
    settings: arc_swap::ArcSwap<RouteSettings>,
    /// Round-robin position.
    turn: AtomicUsize,
    /// When the monitor last started a round (ms since `born`), and whether one runs.
    pub(super) last_round: AtomicU64,
    pub(super) round_running: std::sync::atomic::AtomicBool,
    pub(super) born: Instant,
    /// The server login the monitor uses (the first pool's).
    pub(super) login: Mutex<Option<connect::Target>>,
    /// The monitor's connection to each node.
    pub(super) links: Mutex<Vec<Option<server::ServerConn>>>,
}

impl Topology {
    pub fn new(
        database: &str,
        shard: usize,
        servers: &[ServerEntry],
        settings: RouteSettings,
    ) -> Topology {
        let nodes = servers
            .iter()
            .enumerate()
            .map(|(index, s)| {
                Arc::new(Node {
                    index,
                    shard,
                    host: s.host.clone(),
                    port: s.port,
                    configured: s.role,
                    weight: s.weight,
                    state: Mutex::new(NodeState::default()),
                })
            })
            .collect();
        Topology {
            database: database.to_string(),
            shard,
            nodes,
            settings: arc_swap::ArcSwap::from_pointee(settings),
            turn: AtomicUsize::new(0),
            last_round: AtomicU64::new(0),
            round_running: Default::default(),
            born: Instant::now(),
            login: Mutex::new(None),
            links: Mutex::new((0..servers.len()).map(|_| None).collect()),
        }
    }

    /// The server login the monitor uses, unless it has one.
    pub fn offer_login(&self, target: Option<&connect::Target>) {
        let mut login = self.login.lock();
        if login.is_none() {
            *login = target.cloned();
        }
    }

    pub fn settings(&self) -> arc_swap::Guard<Arc<RouteSettings>> {
        self.settings.load()
    }

    pub fn set_settings(&self, s: RouteSettings) {
        self.settings.store(Arc::new(s));
    }

    /// True when the servers (addresses, roles, weights) are those of `servers`.
    pub fn same_servers(&self, servers: &[ServerEntry]) -> bool {
        self.nodes.len() == servers.len()
            && self.nodes.iter().zip(servers).all(|(n, s)| {
                n.host == s.host
                    && n.port == s.port
                    && n.configured == s.role
                    && n.weight == s.weight
            })
    }

    /// The primary now, if one is known.
    pub fn primary(&self) -> Option<&Arc<Node>> {
        self.nodes.iter().find(|n| n.role() == Role::Primary)
    }

    /// Some `auto` server has not been checked yet (its role is unknown until then).
    pub fn unchecked(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| n.configured == ServerRole::Auto && n.state.lock().checked_at.is_none())
    }

    /// Monitoring is needed: several servers, or one whose role must be detected.
    pub fn monitored(&self) -> bool {
        self.nodes.len() > 1 || self.nodes.iter().any(|n| n.configured == ServerRole::Auto)
    }

    /// Picks one of `candidates` by the load-balancing algorithm and weights; `load(index)` is
    /// a node's connections in use (least_outstanding).
    pub fn choose(
        &self,
        candidates: &[&Arc<Node>],
        load: impl Fn(usize) -> usize,
    ) -> Option<usize> {
        let total: u64 = candidates.iter().map(|n| n.weight.max(1) as u64).sum();
        if candidates.is_empty() {
            return None;
        }
        if candidates.len() == 1 {
            return Some(candidates[0].index);
        }
        let pick = match self.settings().load_balancing {
            LoadBalancing::Random => rand::Rng::gen_range(&mut rand::thread_rng(), 0..total),
            LoadBalancing::RoundRobin => self.turn.fetch_add(1, Relaxed) as u64 % total,
            LoadBalancing::LeastOutstanding => {
                // Fewest checked-out connections per unit of weight; ties go round robin.
                let start = self.turn.fetch_add(1, Relaxed);
                let n = candidates.len();
                let best = (0..n)
                    .map(|i| candidates[(start + i) % n])
                    .min_by_key(|c| (load(c.index) as u64 * 1_000_000) / c.weight.max(1) as u64)
                    .expect("not empty");
                return Some(best.index);
            }
        };
        let mut acc = 0u64;
        for c in candidates {
            acc += c.weight.max(1) as u64;
            if pick < acc {
                return Some(c.index);
            }
        }
        candidates.last().map(|c| c.index)
    }
}
