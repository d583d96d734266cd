//! A (database, user)'s pools, one per server of the database, and the choice between them: a
//! request that needs the primary gets it, reads are spread over the replicas (and the primary
//! when `primary_reads_enabled`) by the database's load-balancing algorithm, and a server that
//! fails is banned and the request tried on the next one. [`topology`] holds what is known of
//! the servers, [`monitor`] keeps it current.

pub mod monitor;
pub mod topology;

use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_rt::timer;
use topology::{Node, Role, Topology, View};

use crate::error::{Error, Kind, Result};
use crate::logsafe::Esc;
use crate::pool::{Checkout, ClientWait, Pool};
use crate::session::exec;
use crate::shard::Sharding;

/// How long a request waits for the first check of servers whose role is detected.
const FIRST_CHECK_WAIT: Duration = Duration::from_secs(10);

/// What a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Writes, and anything not known to be a plain read.
    Primary,
    /// A replica (`SET SERVER ROLE TO 'replica'`, `default_role = "replica"`).
    Replica,
    /// A plain read: a replica, or the primary when primary reads are enabled.
    Read,
    /// Any server.
    Any,
}

impl Want {
    pub fn name(self) -> &'static str {
        match self {
            Want::Primary => "primary",
            Want::Replica => "replica",
            Want::Read => "read",
            Want::Any => "any",
        }
    }
}

/// Which shards of its database a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shards {
    /// One shard; a database that is not sharded has only shard 0.
    One(usize),
    /// Every shard of the database (what sharding sends without a sharding key).
    All,
}

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub shards: Shards,
    /// The server it needs in each shard.
    pub want: Want,
    /// The request may write: read-your-writes notes the primary's position after it.
    pub writes: bool,
}

impl Target {
    /// Shard 0's server for `want` (every database has one shard today).
    pub fn first_shard(want: Want, writes: bool) -> Target {
        Target {
            shards: Shards::One(0),
            want,
            writes,
        }
    }
}

/// One shard's pools (one per server) and what is known of its servers.
pub struct ShardPools {
    /// One per node of the topology, in the same order.
    pub pools: Vec<Pool>,
    pub topology: Arc<Topology>,
    /// [`Topology::monitored`], fixed with its servers.
    routed: bool,
}

impl ShardPools {
    pub fn new(pools: Vec<Pool>, topology: Arc<Topology>) -> ShardPools {
        for (pool, node) in pools.iter().zip(&topology.nodes) {
            pool.set_node(node.clone());
        }
        let routed = topology.monitored();
        ShardPools {
            pools,
            topology,
            routed,
        }
    }
}

struct Inner {
    /// One for a database that is not sharded.
    shards: Vec<ShardPools>,
    /// Every shard's pools, in shard order.
    all: Vec<Pool>,
    /// How keys map to shards (sharded databases), as configured and then as the shards'
    /// catalogs completed it.
    sharding: Option<arc_swap::ArcSwap<Sharding>>,
    /// As configured (what a reload compares).
    configured: Option<Arc<Sharding>>,
    /// Some shard has several servers (or one of detected role): requests need a role.
    roles: bool,
}

/// A cheap-to-clone handle on one (database, user)'s pools.
#[derive(Clone)]
pub struct Cluster(Arc<Inner>);

impl Cluster {
    pub fn new(shards: Vec<ShardPools>, sharding: Option<Arc<Sharding>>) -> Cluster {
        assert!(!shards.is_empty() && shards.iter().all(|s| !s.pools.is_empty()));
        let all = shards
            .iter()
            .flat_map(|s| s.pools.iter().cloned())
            .collect();
        let roles = shards.iter().any(|s| s.routed);
        Cluster(Arc::new(Inner {
            shards,
            all,
            roles,
            configured: sharding.clone(),
            sharding: sharding.map(arc_swap::ArcSwap::new),
        }))
    }

    /// The pool that names the cluster and counts its clients (the first server's).
    pub fn home(&self) -> &Pool {
        &self.0.all[0]
    }

    /// Every pool of every shard.
    pub fn pools(&self) -> &[Pool] {
        &self.0.all
    }

    /// Every pool logs in to its server with this SCRAM client key (a client's proof revealed
    /// it; see [`Pool::learn_client_key`]).
    pub fn learn_client_key(&self, key: [u8; 32]) {
        for p in self.pools() {
            p.learn_client_key(key);
        }
    }

    /// Nobody but its holder has this cluster (no client, no login under way).
    pub fn unshared(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }

    pub fn shards(&self) -> &[ShardPools] {
        &self.0.shards
    }

    /// How keys map to shards now, for a sharded database.
    pub fn sharding(&self) -> Option<Arc<Sharding>> {
        self.0.sharding.as_ref().map(|s| s.load_full())
    }

    /// [`Cluster::sharding`] for a moment, without touching the shared reference count: not to
    /// be held across an await.
    pub fn sharding_now(&self) -> Option<arc_swap::Guard<Arc<Sharding>>> {
        self.0.sharding.as_ref().map(|s| s.load())
    }

    /// The database is sharded.
    pub fn sharded(&self) -> bool {
        self.0.sharding.is_some()
    }

    /// Some shard has several servers, or one of detected role: a request needs a role
    /// (primary, replica) as well as a shard.
    pub fn has_roles(&self) -> bool {
        self.0.roles
    }

    /// How keys map to shards as configured.
    pub fn configured_sharding(&self) -> Option<&Sharding> {
        self.0.configured.as_deref()
    }

    /// Replaces how keys map to shards (completed from the shards' catalogs).
    pub fn set_sharding(&self, sharding: Arc<Sharding>) {
        if let Some(s) = &self.0.sharding {
            s.store(sharding);
        }
    }

    /// The first shard's servers; their routing settings are the database's.
    pub fn topology(&self) -> &Arc<Topology> {
        &self.0.shards[0].topology
    }

    /// Requests need routing: the database is sharded, has several servers, or one of
    /// detected role.
    pub fn routed(&self) -> bool {
        self.0.sharding.is_some() || self.0.shards[0].routed
    }

    /// A server of `target`, on `worker`: in the shard it names, the server `target.want`
    /// asks for. `min_lsn` > 0: only servers that have replayed that far (read-your-writes). A
    /// server that cannot be reached is banned (the primary never is) and the next one tried;
    /// a request for the primary waits up to `server_unavailable_wait` for one to be
    /// reachable (a restart, a failover). A client waits for a busy pool at most `wait`.
    pub async fn checkout(
        &self,
        target: Target,
        worker: usize,
        min_lsn: u64,
        wait: ClientWait,
    ) -> Result<Checkout> {
        let shard = match target.shards {
            Shards::One(n) if n < self.0.shards.len() => &self.0.shards[n],
            other => {
                return Err(Error::new(
                    Kind::NotSupported,
                    format!(
                        "database \"{}\" has {} shard(s): no request can go to {other:?}",
                        self.0.shards[0].topology.database,
                        self.0.shards.len()
                    ),
                ))
            }
        };
        if !shard.routed {
            return shard.pools[0].checkout(worker, wait).await;
        }
        Box::pin(checkout_routed(shard, target.want, worker, min_lsn, wait)).await
    }
}

async fn checkout_routed(
    shard: &ShardPools,
    want: Want,
    worker: usize,
    min_lsn: u64,
    wait: ClientWait,
) -> Result<Checkout> {
    let topology = &shard.topology;
    let started = Instant::now();
    let give_up = started + topology.settings().unavailable_wait;
    let mut tried: Vec<usize> = Vec::new();
    let mut last: Option<Error> = None;
    let mut pause = Duration::from_millis(50);
    loop {
        let Some(i) = pick(shard, want, &tried, min_lsn) else {
            // Roles of `auto` servers are not known until their first check: wait for it.
            let first_check = topology.unchecked() && started.elapsed() < FIRST_CHECK_WAIT;
            if (want == Want::Primary && Instant::now() < give_up) || first_check {
                // No primary reachable now: wait for it to come back or for a replica to
                // be promoted (the monitor detects it).
                timer::sleep(pause.min(give_up - Instant::now())).await;
                pause = (pause * 2).min(Duration::from_millis(250));
                tried.clear();
                continue;
            }
            return Err(last.unwrap_or_else(|| {
                    Error::new(
                        Kind::ServerConnect,
                        format!(
                            "no server of database \"{}\" can take this request ({}): every candidate is down, banned or lagging",
                            topology.database,
                            want.name()
                        ),
                    )
                }));
        };
        let node = &topology.nodes[i];
        match shard.pools[i].checkout(worker, wait).await {
            Ok(c) => return Ok(c),
            Err(e) if takes_server_down(&e) => {
                tracing::info!(database = %Esc(&topology.database), server = %node.addr(), error = %Esc(&e), want = want.name(), "server failed; trying another");
                node.ban(topology.settings().ban_time, e.message());
                tried.push(i);
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
}

/// The server of `shard` to try next for `want`, skipping `tried`.
pub fn pick(shard: &ShardPools, want: Want, tried: &[usize], min_lsn: u64) -> Option<usize> {
    let topology = &shard.topology;
    let settings = topology.settings();
    let now = Instant::now();
    let views: Vec<(&Arc<Node>, View)> = topology
        .nodes
        .iter()
        .filter(|n| !tried.contains(&n.index))
        .map(|n| (n, n.view(now)))
        .collect();
    if want == Want::Primary {
        return views
            .iter()
            .find(|(_, v)| v.role == Role::Primary)
            .map(|(n, _)| n.index);
    }
    let eligible = |n: &Node, v: &View| match want {
        Want::Replica => v.role == Role::Replica,
        Want::Read => {
            v.role == Role::Replica
                || (v.role == Role::Primary && settings.primary_reads_enabled && n.weight > 0)
        }
        Want::Any => v.role != Role::Unknown,
        Want::Primary => unreachable!(),
    };
    let fresh = |v: &View| v.role == Role::Primary || (v.lsn >= min_lsn && !v.lagging);
    let mut candidates: Vec<&Arc<Node>> = views
        .iter()
        .filter(|(n, v)| eligible(n, v) && !v.banned && fresh(v))
        .map(|(n, _)| *n)
        .collect();
    if candidates.is_empty() {
        // Every replica banned: lift the bans, a guard against false positives.
        let replicas: Vec<_> = views
            .iter()
            .filter(|(_, v)| v.role == Role::Replica)
            .collect();
        if !replicas.is_empty() && replicas.iter().all(|(_, v)| v.banned) {
            tracing::warn!(database = %Esc(&topology.database), "every replica is banned; lifting the bans");
            for (n, _) in &replicas {
                n.unban();
            }
            candidates = replicas
                .iter()
                .filter(|(n, v)| eligible(n, v) && fresh(v))
                .map(|(n, _)| *n)
                .collect();
        }
    }
    if candidates.is_empty() && want != Want::Replica {
        // Reads fall back to the primary rather than fail.
        return views
            .iter()
            .find(|(_, v)| v.role == Role::Primary)
            .map(|(n, _)| n.index);
    }
    topology.choose(&candidates, |i| {
        let (open, idle, _) = shard.pools[i].counts();
        open.saturating_sub(idle)
    })
}

/// The primary's WAL insert position after a client's write on `server` (read-your-writes):
/// its later reads go to servers that have replayed this far. 0 when the server is not the
/// primary or the query fails (the client then reads where routing sends it).
pub async fn wal_position(server: &mut Checkout) -> u64 {
    if server.pool().node().map(|n| n.role()) != Some(Role::Primary) {
        return 0;
    }
    match exec::query(server, "SELECT pg_current_wal_insert_lsn()").await {
        Ok(rows) => rows
            .first()
            .and_then(|r| r.first())
            .and_then(|v| v.as_deref())
            .and_then(monitor::parse_lsn)
            .unwrap_or(0),
        Err(e) => {
            tracing::debug!(error = %Esc(&e), "could not read the primary's WAL position");
            0
        }
    }
}

/// The error says the server is down or failing (not: the pool is busy, or the client's
/// own doing).
fn takes_server_down(e: &Error) -> bool {
    matches!(e.kind(), Kind::ServerConnect | Kind::ServerIo) || e.server_unavailable()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::embedded_default;
    use crate::pool::registry::Registry;

    /// Every database has one shard: a target naming another, or all of them, is refused with
    /// 0A000 before any server is asked (nothing routes there until sharding does).
    #[tokio::test]
    async fn a_target_beyond_the_one_shard_is_refused() {
        let config = embedded_default(|_| None).unwrap();
        let cluster = Registry::default().get(&config, "db", "u").unwrap();
        for shards in [Shards::One(1), Shards::All] {
            let target = Target {
                shards,
                want: Want::Primary,
                writes: false,
            };
            let refused = cluster
                .checkout(target, 0, 0, ClientWait::default())
                .await
                .err()
                .unwrap();
            assert_eq!(refused.kind(), Kind::NotSupported, "{shards:?}");
        }
    }
}
