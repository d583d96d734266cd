//! A login flood from one source address (or a few) locks no one else out: while 127.0.0.2
//! (and 127.0.0.3 to .5) connect as fast as they can and hold their connections silent,
//! application logins and console logins of an admin user, both with passwords over TCP,
//! from 127.0.0.1 get in.

mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use support::flood::{Flood, Plan};
use support::*;

/// Logins from the second source: this many application logins, and as many console logins.
const LOGINS: usize = 30;

/// The pooler for the flood: SCRAM with passwords for `app` and the admin user `boss`, and a
/// small login budget, so that one source can fill it.
fn flood_config(pg: &Postgres, budget: usize) -> String {
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"scram-sha-256\"\n\
         admin_users = [\"boss\"]\nmax_login_clients = {budget}\n\n\
         [users.app]\npassword = \"app-secret\"\n[users.boss]\npassword = \"boss-secret\"\n\n\
         [databases.postgres]\nhost = \"127.0.0.1\"\nport = {port}\n",
        port = pg.port
    )
}

/// One login as `user` with `password` to `db` and one statement: how long it took, if both
/// worked.
async fn one_login(port: u16, user: &str, password: &str, db: &str, sql: &str) -> Option<Duration> {
    let start = Instant::now();
    let c = connect(port, user, Some(password), db).await.ok()?;
    c.simple_query(sql).await.ok()?;
    Some(start.elapsed())
}

/// The logins that got in, of [`LOGINS`], and the slowest and median of their times.
fn summary(what: &str, took: &mut [Duration]) -> String {
    took.sort();
    let (median, max) = match took.len() {
        0 => (Duration::ZERO, Duration::ZERO),
        n => (took[n / 2], took[n - 1]),
    };
    format!(
        "{} of {LOGINS} {what} logins got in (median {median:.0?}, slowest {max:.0?})",
        took.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_flooding_source_locks_out_neither_applications_nor_admins() {
    flood_while_logging_in(&[IpAddr::from([127, 0, 0, 2])]).await;
}

/// Four flooding sources fill the budget between them (each holds at most its share): the
/// others still find their share, and the console its places.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_flooding_sources_lock_out_neither_applications_nor_admins() {
    let sources: Vec<_> = (2..6).map(|i| IpAddr::from([127, 0, 0, i])).collect();
    flood_while_logging_in(&sources).await;
}

/// Floods the pooler from `sources` (sharing 60 connections at a time, which say nothing and
/// hold on for 3 s, reconnecting at once when ended; for 60 s or 300 000 connections at most)
/// while 127.0.0.1 makes [`LOGINS`] application logins and as many console logins of an admin
/// user; at least 90 % of each must get in.
async fn flood_while_logging_in(sources: &[IpAddr]) {
    let pg = Postgres::start();
    pg.create_user("app", "unused-on-a-trusting-server");
    let pooler = PoolerProcess::start_logging(&flood_config(&pg, 20), "warn");
    let floods: Vec<_> = sources
        .iter()
        .map(|&source| {
            Flood::start(Plan {
                source,
                port: pooler.port,
                tasks: 60 / sources.len(),
                hold: Duration::from_secs(3),
                max: 300_000 / sources.len(),
                limit: Duration::from_secs(60),
            })
        })
        .collect();
    // The flood fills the budget before the logins begin.
    let start = Instant::now();
    let connected = || floods.iter().map(Flood::connected).sum::<usize>();
    while connected() < 200 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (mut apps, mut consoles) = (Vec::new(), Vec::new());
    for _ in 0..LOGINS {
        let port = pooler.port;
        apps.extend(one_login(port, "app", "app-secret", "postgres", "SELECT 1").await);
        let console = one_login(port, "boss", "boss-secret", "pgbouncer", "SHOW VERSION");
        consoles.extend(console.await);
        // Spread over a few of the flood's holds, so that places it lets go of are there too.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = start.elapsed();
    let going_on = floods.iter().all(Flood::going_on);
    let mut counts = Vec::new();
    for f in floods {
        counts.push(f.stop().await);
    }
    let figures = format!(
        "{}, {} within {took:.1?} while {sources:?} flooded ({counts:?})",
        summary("application", &mut apps),
        summary("console", &mut consoles),
    );
    eprintln!("{figures}");
    // The flood was one, to the end: each source was refused far more often than it got a
    // place.
    assert!(going_on, "the flood ended before the logins: {figures}");
    for c in &counts {
        let refused = c.ended_at_once.load(std::sync::atomic::Ordering::Relaxed);
        assert!(refused > 100, "{figures}");
    }
    assert!(apps.len() * 10 >= LOGINS * 9, "{figures}");
    assert!(consoles.len() * 10 >= LOGINS * 9, "{figures}");
}
