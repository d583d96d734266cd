//! The pools' upkeep in the background, every [`TICK`]: ends statistics periods, gives waiting
//! clients reserve places and sends away those past query_wait_timeout, closes and opens idle
//! servers ([`Pool::maintain`](crate::pool::Pool)), and starts the health checks of databases
//! with replicas when due.

use std::time::Duration;

use corral_rt::timer;

use crate::pool::maintain::TICK;
use crate::services::Services;

/// Runs until shutdown.
pub async fn run(services: Services) {
    let mut tick = timer::interval(TICK);
    let mut next_worker = 0usize;
    loop {
        tokio::select! {
            _ = services.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        for topology in services.pools.topologies() {
            if topology.round_due() {
                // Always on the first worker: the monitor's connections are registered there.
                if let Some(handle) = services.balance.handle(0) {
                    handle.spawn(topology.round(0));
                }
            }
        }
        let period = Duration::from_secs(services.config.load().general.stats_period.max(1));
        services.console_stats.roll(period);
        for pool in services.pools.all() {
            pool.stats().roll(period);
            pool.expire_waiters();
            let warm = pool.maintain();
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
    }
}
