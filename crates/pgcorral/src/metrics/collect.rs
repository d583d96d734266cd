//! What `/metrics` shows: a `prometheus-client` collector that reads the pools' own counters
//! (`pool::stats`, `Pool::snapshot`) at scrape time, so nothing is counted twice.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::buckets::{self, Folded};
use crate::config::PoolMode;
use crate::pool::stats::Totals;
use crate::pool::{Pool, Snapshot};
use crate::services::Services;

/// Reads everything on each scrape.
pub struct Pgcorral(pub Services);

impl fmt::Debug for Pgcorral {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Pgcorral")
    }
}

/// Tenants' pools reported one by one at most (the rest are counted in
/// `pgcorral_tenant_pools_unreported`): a bound on the series a fleet of tenants makes.
pub const MAX_TENANT_POOLS: usize = 1000;

/// One pool's numbers, read once per scrape.
struct PoolData {
    /// The tenant's external id, for a tenant's pool.
    tenant: Option<String>,
    database: String,
    user: String,
    /// `host:port`: a database with replicas has one pool per server.
    server: String,
    /// The shard the server serves ("0" for a database that is not sharded).
    shard: String,
    mode: &'static str,
    size: usize,
    now: Snapshot,
    totals: Totals,
    query: Folded,
    wait: Folded,
    errors: Vec<(String, u64)>,
}

impl PoolData {
    /// `database`, `user`, `server`, `shard`, and `tenant` for a tenant's pool.
    fn labels(&self) -> Vec<(&str, &str)> {
        let mut l = vec![
            ("database", self.database.as_str()),
            ("user", &self.user),
            ("server", &self.server),
            ("shard", &self.shard),
        ];
        if let Some(t) = &self.tenant {
            l.push(("tenant", t));
        }
        l
    }

    fn with<'a>(&'a self, key: &'a str, value: &'a str) -> Vec<(&'a str, &'a str)> {
        let mut l = self.labels();
        l.push((key, value));
        l
    }
}

/// Every pool's numbers: the file's, then up to [`MAX_TENANT_POOLS`] of the tenants' (by
/// tenant); also how many tenants' pools were left out.
fn read(services: &Services) -> (Vec<PoolData>, usize) {
    let mut all: Vec<(Option<String>, Pool)> = services
        .pools
        .all()
        .into_iter()
        .map(|p| (None, p))
        .collect();
    let (mut reported, mut left_out) = (0, 0);
    if let Some(tenants) = services.tenants.get() {
        for t in tenants.all() {
            for p in t.pools.all() {
                if reported >= MAX_TENANT_POOLS {
                    left_out += 1;
                    continue;
                }
                reported += 1;
                all.push((Some(t.id.clone()), p));
            }
        }
    }
    let mut pools: Vec<PoolData> = all
        .iter()
        .map(|(tenant, p)| {
            let (database, user) = p.name();
            let stats = p.stats();
            PoolData {
                tenant: tenant.clone(),
                database: database.to_string(),
                user: user.to_string(),
                server: p.node().map(|n| n.addr()).unwrap_or_default(),
                shard: p.node().map_or(0, |n| n.shard).to_string(),
                mode: mode_name(p.settings().mode),
                size: p.settings().size,
                now: p.snapshot(),
                totals: stats.totals(),
                query: buckets::fold(&stats.query_hist.counts()),
                wait: buckets::fold(&stats.wait_hist.counts()),
                errors: stats
                    .errors()
                    .into_iter()
                    .map(|(c, n)| (String::from_utf8_lossy(&c).into_owned(), n))
                    .collect(),
            }
        })
        .collect();
    pools.sort_by(|a, b| {
        (&a.tenant, &a.database, &a.user, &a.server).cmp(&(
            &b.tenant,
            &b.database,
            &b.user,
            &b.server,
        ))
    });
    (pools, left_out)
}

fn mode_name(m: PoolMode) -> &'static str {
    match m {
        PoolMode::Session => "session",
        PoolMode::Transaction => "transaction",
        PoolMode::Statement => "statement",
    }
}

fn secs(us: u64) -> f64 {
    us as f64 / 1e6
}

fn gauge(m: &mut MetricEncoder, v: impl EncodeGaugeValue) -> fmt::Result {
    m.encode_gauge(&v)
}

fn counter<V: EncodeCounterValue>(m: &mut MetricEncoder, v: V) -> fmt::Result {
    m.encode_counter::<NoLabelSet, V, u64>(&v, None)
}

fn histogram(m: &mut MetricEncoder, sum_us: u64, h: &Folded) -> fmt::Result {
    m.encode_histogram::<NoLabelSet>(secs(sum_us), h.count, &h.buckets, None)
}

/// One metric family with a sample per pool, labelled `database`, `user` and `server`.
fn per_pool(
    enc: &mut DescriptorEncoder,
    pools: &[PoolData],
    (name, unit, kind, help): (&str, Option<Unit>, MetricType, &str),
    each: impl Fn(&mut MetricEncoder, &PoolData) -> fmt::Result,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, unit.as_ref(), kind)?;
    for p in pools {
        each(&mut m.encode_family(&p.labels())?, p)?;
    }
    Ok(())
}

/// A per-pool counter from its totals.
fn total(
    enc: &mut DescriptorEncoder,
    pools: &[PoolData],
    name: &str,
    unit: Option<Unit>,
    help: &str,
    v: impl Fn(&Totals) -> u64,
) -> fmt::Result {
    let secs_unit = matches!(unit, Some(Unit::Seconds));
    per_pool(
        enc,
        pools,
        (name, unit, MetricType::Counter, help),
        |m, p| {
            let n = v(&p.totals);
            if secs_unit {
                counter(m, secs(n))
            } else {
                counter(m, n)
            }
        },
    )
}

/// Reads one count from a pool's snapshot.
type Count = fn(&Snapshot) -> usize;

/// A per-pool gauge split by `state`.
fn by_state(
    enc: &mut DescriptorEncoder,
    pools: &[PoolData],
    name: &str,
    help: &str,
    states: [(&str, Count); 2],
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for p in pools {
        for (state, v) in states {
            gauge(&mut m.encode_family(&p.with("state", state))?, v(&p.now))?;
        }
    }
    Ok(())
}

/// The result cache: answers held and their bytes, hits, misses, answers stored and evicted,
/// and invalidations (every table's, in all).
fn cache_families(e: &mut DescriptorEncoder, services: &Services) -> fmt::Result {
    let s = services.cache.show();
    let invalidations: u64 = s.tables.iter().map(|t| t.invalidations).sum();
    for (name, help, v) in [
        (
            "pgcorral_cache_entries",
            "Answers the result cache holds",
            s.entries as u64,
        ),
        (
            "pgcorral_cache_bytes",
            "Bytes of the answers the result cache holds",
            s.bytes as u64,
        ),
    ] {
        gauge(
            &mut e.encode_descriptor(name, help, None, MetricType::Gauge)?,
            v,
        )?;
    }
    for (name, help, v) in [
        (
            "pgcorral_cache_hits",
            "Reads answered from the result cache",
            s.counts.hits,
        ),
        (
            "pgcorral_cache_misses",
            "Cacheable reads not in the result cache",
            s.counts.misses,
        ),
        (
            "pgcorral_cache_stored",
            "Answers stored in the result cache",
            s.counts.stored,
        ),
        (
            "pgcorral_cache_evicted",
            "Answers dropped from the result cache for room",
            s.counts.evicted,
        ),
        (
            "pgcorral_cache_invalidations",
            "Table changes that dropped answers of the result cache",
            invalidations,
        ),
    ] {
        counter(
            &mut e.encode_descriptor(name, help, None, MetricType::Counter)?,
            v,
        )?;
    }
    Ok(())
}

impl Collector for Pgcorral {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        use std::sync::atomic::Ordering::Relaxed;
        let services = &self.0;
        let (pools, left_out) = read(services);
        let e = &mut enc;

        gauge(
            &mut e.encode_descriptor(
                "pgcorral_up",
                "1 while pgcorral serves",
                None,
                MetricType::Gauge,
            )?,
            1i64,
        )?;
        e.encode_descriptor(
            "pgcorral_build",
            "The running version",
            None,
            MetricType::Info,
        )?
        .encode_info(&[("version", env!("CARGO_PKG_VERSION"))])?;
        gauge(
            &mut e.encode_descriptor(
                "pgcorral_clients_connected",
                "Clients logged in now, console users included (counted against max_client_conn)",
                None,
                MetricType::Gauge,
            )?,
            services.clients.load(Relaxed) as u64,
        )?;
        gauge(
            &mut e.encode_descriptor(
                "pgcorral_clients_logging_in",
                "Client connections accepted and still in startup or authentication (in max_login_clients or the places kept beyond it)",
                None,
                MetricType::Gauge,
            )?,
            services.logins.in_use() as u64,
        )?;
        counter(
            &mut e.encode_descriptor(
                "pgcorral_clients_login_refused",
                "Client connections refused at accept: max_login_clients were logging in, or their address held its share of them",
                None,
                MetricType::Counter,
            )?,
            services.logins_refused.load(Relaxed),
        )?;
        gauge(
            &mut e.encode_descriptor(
                "pgcorral_tenant_pools_unreported",
                "Tenants' pools left out of the per-pool metrics (more than 1000 are not reported one by one)",
                None,
                MetricType::Gauge,
            )?,
            left_out as u64,
        )?;
        cache_families(e, services)?;

        let mut m = e.encode_descriptor(
            "pgcorral_pool",
            "Each pool (database, user) and its pool_mode",
            None,
            MetricType::Info,
        )?;
        for p in &pools {
            m.encode_info(&p.with("mode", p.mode))?;
        }
        per_pool(
            e,
            &pools,
            (
                "pgcorral_pool_size",
                None,
                MetricType::Gauge,
                "The pool's configured size (servers)",
            ),
            |m, p| gauge(m, p.size as u64),
        )?;
        by_state(
            e,
            &pools,
            "pgcorral_client_connections",
            "Logged-in clients of the pool: waiting for a server, or active (all others)",
            [
                ("active", |s| s.clients.saturating_sub(s.waiting)),
                ("waiting", |s| s.waiting),
            ],
        )?;
        by_state(
            e,
            &pools,
            "pgcorral_server_connections",
            "Server connections of the pool: idle, or active (in use or being opened)",
            [
                ("active", |s| s.open.saturating_sub(s.idle)),
                ("idle", |s| s.idle),
            ],
        )?;
        per_pool(
            e,
            &pools,
            (
                "pgcorral_client_wait_max",
                Some(Unit::Seconds),
                MetricType::Gauge,
                "How long the longest-waiting client of the pool has waited so far",
            ),
            |m, p| gauge(m, p.now.max_wait.as_secs_f64()),
        )?;

        total(
            e,
            &pools,
            "pgcorral_transactions",
            None,
            "Transactions completed",
            |t| t.xact_count,
        )?;
        total(
            e,
            &pools,
            "pgcorral_queries",
            None,
            "Queries completed",
            |t| t.query_count,
        )?;
        total(
            e,
            &pools,
            "pgcorral_received",
            Some(Unit::Bytes),
            "Bytes received from clients",
            |t| t.bytes_received,
        )?;
        total(
            e,
            &pools,
            "pgcorral_sent",
            Some(Unit::Bytes),
            "Bytes sent to clients",
            |t| t.bytes_sent,
        )?;
        total(
            e,
            &pools,
            "pgcorral_transaction",
            Some(Unit::Seconds),
            "Time spent in transactions",
            |t| t.xact_time,
        )?;
        let mut m = e.encode_descriptor(
            "pgcorral_errors",
            "Errors servers sent to clients, by SQLSTATE class (its first two characters)",
            None,
            MetricType::Counter,
        )?;
        for p in &pools {
            for (class, n) in &p.errors {
                counter(&mut m.encode_family(&p.with("class", class))?, *n)?;
            }
        }

        per_pool(
            e,
            &pools,
            (
                "pgcorral_query_duration",
                Some(Unit::Seconds),
                MetricType::Histogram,
                "Query round trips through the pool (le exact to within 20%)",
            ),
            |m, p| histogram(m, p.totals.query_time, &p.query),
        )?;
        per_pool(
            e,
            &pools,
            (
                "pgcorral_wait_duration",
                Some(Unit::Seconds),
                MetricType::Histogram,
                "Time clients waited for a server, per request (le exact to within 20%)",
            ),
            |m, p| histogram(m, p.totals.wait_time, &p.wait),
        )
    }
}
