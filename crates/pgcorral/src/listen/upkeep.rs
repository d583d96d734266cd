//! The pools' upkeep in the background, every [`TICK`]: ends statistics periods, gives waiting
//! clients reserve places and sends away those past query_wait_timeout, closes and opens idle
//! servers ([`Pool::maintain`](crate::pool::Pool)), frees pools idle past pool_idle_timeout,
//! starts the health checks of databases with replicas when due, and logs PgBouncer's stats
//! line every `stats_period` (`log_stats`); every [`SLIM_EVERY`] ticks, slims idle clients
//! down; every tick, gives memory back once a burst of clients came or left.

use std::time::Duration;

use corral_rt::timer;

use super::trim;
use crate::config::millis_opt;
use crate::pool::maintain::TICK;
use crate::pool::stats::Averages;
use crate::services::Services;

/// Ticks between looks for idle clients to slim down (see `conns::Lists::slim_idle_clients`).
const SLIM_EVERY: u32 = 4;
/// How long a client has sent no request before it waits without its request loop's state.
const SLIM_AFTER: Duration = Duration::from_secs(1);

/// Runs until the process exits. During WAIT_FOR_SERVERS, every tick sends away the clients
/// waiting for a server (as PgBouncer's janitor), and no server is opened ahead of need.
pub async fn run(services: Services) {
    let mut tick = timer::interval(TICK);
    let mut next_worker = 0usize;
    let mut stats_logged = std::time::Instant::now();
    let mut ticks = 0u32;
    let mut burst = trim::Burst::default();
    loop {
        tokio::select! {
            _ = services.shutdown.exiting() => return,
            _ = tick.tick() => {}
        }
        ticks = ticks.wrapping_add(1);
        if ticks.is_multiple_of(SLIM_EVERY) {
            services.pools.lists.slim_idle_clients(SLIM_AFTER);
        }
        let clients = services.clients.load(std::sync::atomic::Ordering::Relaxed);
        if burst.settled(clients) {
            let released = trim::release_free_memory();
            tracing::debug!(
                clients,
                released,
                "clients came or left: free memory given back"
            );
        }
        let no_new_servers = services.shutdown.is_cancelled();
        // The file's pools, and each loaded tenant's.
        let tenants = services.tenants.get().map(|t| t.all()).unwrap_or_default();
        let registries: Vec<_> = std::iter::once(&services.pools)
            .chain(tenants.iter().map(|t| &t.pools))
            .collect();
        for topology in registries.iter().flat_map(|r| r.topologies()) {
            if topology.round_due() {
                // Always on the first worker: the monitor's connections are registered there.
                if let Some(handle) = services.balance.handle(0) {
                    handle.spawn(topology.round(0));
                }
            }
        }
        let (period, pool_idle, log_stats) = {
            let config = services.config.load();
            let g = &config.general;
            (
                Duration::from_secs(g.stats_period.max(1)),
                millis_opt(g.pool_idle_timeout),
                g.log_stats,
            )
        };
        for r in &registries {
            r.drop_idle(pool_idle);
        }
        services.console_stats.roll(period);
        for pool in services.every_pool() {
            pool.stats().roll(period);
            if no_new_servers {
                pool.shut_waiters();
            }
            pool.expire_waiters();
            let mut warm = pool.maintain();
            if no_new_servers {
                warm = 0;
            }
            for _ in 0..warm {
                // Spread new servers over the workers; they move to a client's worker anyway.
                let n = services.balance.len().max(1);
                next_worker = (next_worker + 1) % n;
                let Some(handle) = services.balance.handle(next_worker) else {
                    break;
                };
                let (p, w) = (pool.clone(), next_worker);
                handle.spawn(async move { p.warm(w).await });
            }
        }
        if stats_logged.elapsed() >= period {
            stats_logged = std::time::Instant::now();
            if log_stats {
                log_averages(&services);
            }
        }
    }
}

/// PgBouncer's stats line: every pool's averages over its last full period, together.
fn log_averages(services: &Services) {
    let mut a = Averages::default();
    for pool in services.every_pool() {
        a.merge(&pool.stats().averages());
    }
    tracing::info!(
        "stats: {} xacts/s, {} queries/s, in {} B/s, out {} B/s, xact {} us, query {} us, wait {} us",
        a.xact_count,
        a.query_count,
        a.bytes_received,
        a.bytes_sent,
        a.xact_time,
        a.query_time,
        a.wait_time
    );
}
