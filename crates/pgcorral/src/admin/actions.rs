//! The console's commands that act: PAUSE, RESUME, DISABLE, ENABLE, RECONNECT, KILL,
//! KILL_CLIENT, WAIT_CLOSE, SHUTDOWN (RELOAD and SET are in [`crate::reload`]).

use std::time::Duration;

use corral_rt::timer;

use crate::conns::Kind;
use crate::pool::Pool;
use crate::services::Services;

/// How often PAUSE and WAIT_CLOSE look again.
const POLL: Duration = Duration::from_millis(10);

/// An error for the console user: (SQLSTATE, message).
pub type Refusal = (&'static str, String);

/// The pools of `db`, or every pool.
fn pools_of(services: &Services, db: Option<&str>) -> Vec<Pool> {
    services
        .pools
        .all()
        .into_iter()
        .filter(|p| db.is_none_or(|d| p.name().0 == d))
        .collect()
}

/// Refuses a database name pgcorral does not know (with PgBouncer's words and SQLSTATE: its
/// console reports every error as 08P01).
fn known(services: &Services, db: &str) -> Result<(), Refusal> {
    let config = services.config.load();
    if config.databases.contains_key(db) || services.pools.all().iter().any(|p| p.name().0 == db) {
        Ok(())
    } else {
        Err(("08P01", format!("no such database: {db}")))
    }
}

/// PAUSE [db]: new transactions wait; returns once every server is back in the pool, then
/// closes them all (so that PostgreSQL can restart under it).
pub async fn pause(services: &Services, db: Option<&str>) -> Result<(), Refusal> {
    if let Some(d) = db {
        known(services, d)?;
    }
    services.control.pause(db);
    tracing::info!(
        database = db.unwrap_or("*"),
        "PAUSE: waiting for transactions to finish"
    );
    loop {
        let pools = pools_of(services, db);
        if pools.iter().all(|p| p.active_servers() == 0) {
            for p in &pools {
                p.close_idle();
            }
            break;
        }
        timer::sleep(POLL).await;
    }
    tracing::info!(database = db.unwrap_or("*"), "paused");
    Ok(())
}

/// SUSPEND: everything pauses as for PAUSE, and no new connection is accepted; returns once
/// every server is back in the pool. RESUME ends it.
pub async fn suspend(services: &Services) -> Result<(), Refusal> {
    services.control.suspend();
    pause(services, None).await
}

/// RESUME [db].
pub fn resume(services: &Services, db: Option<&str>) -> Result<(), Refusal> {
    if services.control.resume(db) {
        tracing::info!(database = db.unwrap_or("*"), "RESUME");
        Ok(())
    } else {
        Err((
            "55000",
            format!("{} is not paused", db.unwrap_or("pgcorral")),
        ))
    }
}

/// DISABLE db: new logins to it are refused; connected clients go on.
pub fn disable(services: &Services, db: &str) -> Result<(), Refusal> {
    known(services, db)?;
    services.control.disable(db);
    Ok(())
}

/// ENABLE db.
pub fn enable(services: &Services, db: &str) -> Result<(), Refusal> {
    known(services, db)?;
    services.control.enable(db);
    Ok(())
}

/// RECONNECT [db]: every server is closed and replaced once its client is done with it.
pub fn reconnect(services: &Services, db: Option<&str>) -> Result<(), Refusal> {
    if let Some(d) = db {
        known(services, d)?;
    }
    for p in pools_of(services, db) {
        p.reconnect();
    }
    Ok(())
}

/// KILL [db]: ends every client of `db` (of every database but the console's, without one)
/// and closes its servers; new transactions wait for RESUME (as in PgBouncer).
pub fn kill(services: &Services, db: Option<&str>) -> Result<(), Refusal> {
    match db {
        Some(d) if super::is_console(d) => {
            return Err(("08P01", format!("cannot kill admin db: {d}")));
        }
        Some(d) => known(services, d)?,
        None => {}
    }
    let names: Vec<String> = match db {
        Some(d) => vec![d.to_string()],
        None => {
            let mut v: Vec<String> = services.config.load().databases.keys().cloned().collect();
            v.extend(services.pools.all().iter().map(|p| p.name().0.to_string()));
            v.sort();
            v.dedup();
            v
        }
    };
    for d in &names {
        services.control.pause(Some(d));
    }
    let mut n = 0;
    for c in services.pools.lists.all(Kind::Client) {
        if db.is_none_or(|d| &**c.database() == d) && !super::is_console(c.database()) {
            c.kill();
            n += 1;
        }
    }
    for p in pools_of(services, db) {
        p.reconnect();
    }
    tracing::info!(database = db.unwrap_or("*"), clients = n, "KILL");
    Ok(())
}

/// KILL_CLIENT id: ends one client, named by its `id` in SHOW CLIENTS (or its `ptr`, in hex
/// with `0x`); PgBouncer's words when the id is not a number or names no client.
pub fn kill_client(services: &Services, id: &str) -> Result<(), Refusal> {
    let parsed = match id.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => id.parse().ok(),
    };
    let Some(parsed) = parsed else {
        return Err(("08P01", "invalid client pointer supplied".to_string()));
    };
    let client = services
        .pools
        .lists
        .all(Kind::Client)
        .into_iter()
        .find(|c| c.id == parsed);
    match client {
        Some(c) => {
            c.kill();
            tracing::info!(client = parsed, "KILL_CLIENT");
            Ok(())
        }
        None => Err(("08P01", "client not found".to_string())),
    }
}

/// WAIT_CLOSE [db]: waits until every server retired by RECONNECT (or KILL) is closed.
pub async fn wait_close(services: &Services, db: Option<&str>) -> Result<(), Refusal> {
    if let Some(d) = db {
        known(services, d)?;
    }
    loop {
        let pools = pools_of(services, db);
        let old = services.pools.lists.all(Kind::Server).into_iter().any(|s| {
            pools
                .iter()
                .any(|p| p.name().0 == &**s.database() && s.generation() < p.generation())
        });
        if !old {
            return Ok(());
        }
        timer::sleep(POLL).await;
    }
}
