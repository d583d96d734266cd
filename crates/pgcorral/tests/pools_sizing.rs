//! Pool sizes as a user sees them, against a real PostgreSQL: default, per-database and per-user
//! pool_size and their precedence, min_pool_size, the reserve, and the caps shared by several
//! pools (max_db_connections, max_user_connections) with their fairness.
//!
//! Server connections are counted on the PostgreSQL side (pg_stat_activity), never through
//! pgcorral's own counters.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::pools::*;
use support::*;
use tokio_postgres::Client;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Pids of the client backends matching `cond`.
async fn pids_where(admin: &Client, cond: &str) -> Vec<i32> {
    admin
        .query(
            &format!(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' \
                 AND pid <> pg_backend_pid() AND {cond} ORDER BY pid"
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// How often a [`Peak`] samples the server connections.
const SAMPLE: Duration = Duration::from_millis(10);

/// A task that connects as `user` to `db` itself (logging in needs a server too, so under a cap
/// the login may wait) and runs `rounds` transactions holding the server for `hold`; returns
/// the pids and `current_database()`.
fn worker(
    port: u16,
    user: &'static str,
    db: &'static str,
    rounds: usize,
    hold: Duration,
) -> tokio::task::JoinHandle<(HashSet<i32>, String)> {
    tokio::spawn(async move {
        let c = within(
            Duration::from_secs(60),
            "login under a cap",
            connect(port, user, None, db),
        )
        .await
        .unwrap_or_else(|e| panic!("{user}@{db}: login: {e}"));
        let mut pids = HashSet::new();
        for r in 0..rounds {
            pids.insert(hold_transaction(&c, hold, &format!("{user}@{db} round {r}")).await);
        }
        (pids, value(&c, "SELECT current_database()").await)
    })
}

// ---------------------------------------------------------------------------------------------
// 1. Pool sizing
// ---------------------------------------------------------------------------------------------

/// In transaction mode, 8 clients holding transactions open at once get exactly the pool's
/// size of server connections: default_pool_size, else the database's pool_size, else the
/// user's pool_size (which wins over the database's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_size_precedence_bounds_server_connections() {
    let pg = Postgres::start();
    for u in ["plain", "sized"] {
        pg.create_user(u, "pw");
    }
    for d in ["dflt", "dbsized"] {
        pg.create_db(d);
    }
    let rest = db(&pg, "dflt", "")
        + &db(&pg, "dbsized", "pool_size = 3")
        + &user("plain", "")
        + &user("sized", "pool_size = 4");
    let pooler = Pooler::start(&toml(
        "default_pool_size = 2\npool_mode = \"transaction\"",
        &rest,
    ))
    .await;
    let admin = direct(&pg).await;
    for (u, d, size, why) in [
        ("plain", "dflt", 2, "default_pool_size"),
        ("plain", "dbsized", 3, "the database's pool_size"),
        (
            "sized",
            "dflt",
            4,
            "the user's pool_size over default_pool_size",
        ),
        (
            "sized",
            "dbsized",
            4,
            "the user's pool_size over the database's",
        ),
    ] {
        let cs = clients(&pooler, u, d, 8).await;
        let peak = Peak::watch(&pg, of(u, d), SAMPLE).await;
        let (cs, pids) = transactions(cs, 2, Duration::from_millis(250)).await;
        let max = peak.finish().await;
        assert!(
            max <= size,
            "{u}@{d} ({why} = {size}): PostgreSQL saw {max} server connections"
        );
        assert_eq!(
            pids.len() as i64,
            size,
            "{u}@{d} ({why} = {size}): 8 concurrent transactions ran on {pids:?}"
        );
        // The servers stay in the pool, idle.
        assert_eq!(count(&admin, &of(u, d)).await, size, "{u}@{d}");
        drop(cs);
    }
}

// ---------------------------------------------------------------------------------------------
// 2. min_pool_size
// ---------------------------------------------------------------------------------------------

/// Once a pool exists (its first client came and went), it keeps min_pool_size servers open:
/// the general setting or the database's own; killed ones are replaced; and idle servers above
/// the minimum are closed after server_idle_timeout, but never below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_pool_size_keeps_servers_open() {
    let pg = Postgres::start();
    pg.create_user("app", "pw");
    for d in ["gen", "own"] {
        pg.create_db(d);
    }
    let rest = db(&pg, "gen", "") + &db(&pg, "own", "min_pool_size = 3");
    let pooler = Pooler::start(&toml(
        "default_pool_size = 5\nmin_pool_size = 2\nserver_idle_timeout = 1000",
        &rest,
    ))
    .await;
    let admin = direct(&pg).await;
    let five = Duration::from_secs(5);
    for (d, min) in [("gen", 2i64), ("own", 3)] {
        let cond = of("app", d);
        assert_eq!(count(&admin, &cond).await, 0, "{d}: no pool yet");
        {
            let c = pooler.connect("app", None, d).await;
            assert_eq!(value(&c, "SELECT 1").await, "1");
        }
        wait_count(
            &admin,
            &cond,
            min,
            five,
            &format!("{d}: after the first client"),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            count(&admin, &cond).await,
            min,
            "{d}: not exactly min_pool_size once settled (server_idle_timeout = 1 s)"
        );

        // Killed servers are replaced.
        for round in 0..2 {
            let old = pids_where(&admin, &cond).await;
            assert_eq!(old.len() as i64, min);
            sql(
                &pg,
                "postgres",
                &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {cond}"),
            );
            let list = old
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(",");
            wait_count(
                &admin,
                &format!("pid IN ({list})"),
                0,
                five,
                "terminated servers gone",
            )
            .await;
            wait_count(
                &admin,
                &cond,
                min,
                five,
                &format!("{d} round {round}: replacements for terminated servers"),
            )
            .await;
        }

        // Above the minimum: busy servers are kept while used, then trimmed back to it.
        let cs = clients(&pooler, "app", d, 5).await;
        let (cs, pids) = transactions(cs, 1, Duration::from_millis(300)).await;
        assert_eq!(pids.len(), 5, "{d}: 5 concurrent transactions");
        wait_count(
            &admin,
            &cond,
            min,
            five,
            &format!("{d}: idle servers above min_pool_size closed after server_idle_timeout"),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            count(&admin, &cond).await,
            min,
            "{d}: trimmed below the minimum"
        );
        // The kept servers serve clients.
        for c in &cs {
            assert_eq!(value(c, "SELECT 1").await, "1");
        }
    }
}

/// A database with a forced user (`user = ...`) has one pool, the forced user's, as
/// PgBouncer: clients of every login name share its pool_size (the forced user's own from
/// `[users]`, not the connecting user's), and SHOW CLIENTS lists them under their own names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_user_database_has_one_pool_for_every_login_name() {
    let pg = Postgres::start();
    for u in ["alice", "bob", "owner"] {
        pg.create_user(u, "pw");
    }
    let rest = db(&pg, "postgres", "user = \"owner\"\npool_size = 5")
        + &user("alice", "pool_size = 4")
        + &user("bob", "")
        + &user("owner", "pool_size = 2")
        + &user("admin", "");
    let pooler = Pooler::start(&toml(
        "pool_mode = \"transaction\"\nadmin_users = [\"admin\"]",
        &rest,
    ))
    .await;
    let mut cs = clients(&pooler, "alice", "postgres", 4).await;
    cs.extend(clients(&pooler, "bob", "postgres", 4).await);
    let peak = Peak::watch(&pg, "usename = 'owner'".into(), SAMPLE).await;
    let (cs, pids) = transactions(cs, 2, Duration::from_millis(200)).await;
    let max = peak.finish().await;
    assert!(
        max <= 2,
        "the forced user's pool_size (2): PostgreSQL saw {max}"
    );
    assert_eq!(
        pids.len(),
        2,
        "8 clients of two names shared one pool: {pids:?}"
    );
    let admin = pooler.connect("admin", None, "pgbouncer").await;
    let pools = simple_rows(&admin.simple_query("SHOW POOLS").await.unwrap());
    let ours: Vec<_> = pools.iter().filter(|r| r[0] == "postgres").collect();
    assert_eq!(ours.len(), 1, "one pool: {pools:?}");
    assert_eq!(ours[0][1], "owner", "the pool is the forced user's");
    let listed = simple_rows(&admin.simple_query("SHOW CLIENTS").await.unwrap());
    for name in ["alice", "bob"] {
        assert!(
            listed.iter().any(|r| r[1] == name && r[2] == "postgres"),
            "{name} listed under its own name: {listed:?}"
        );
    }
    drop(cs);
}

/// A database with a forced user and min_pool_size has its servers opened from the start,
/// before any client (its pool is known from the file, as PgBouncer's); one without a forced
/// user waits for its first client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_pool_size_of_a_forced_user_database_opens_at_start() {
    let pg = Postgres::start();
    pg.create_user("owner", "pw");
    pg.create_db("free");
    let rest = db(
        &pg,
        "postgres",
        "user = \"owner\"\nmin_pool_size = 3\npool_size = 5",
    ) + &db(&pg, "free", "min_pool_size = 2");
    let _pooler = Pooler::start(&toml("", &rest)).await;
    let admin = direct(&pg).await;
    wait_count(
        &admin,
        &of("owner", "postgres"),
        3,
        Duration::from_secs(10),
        "the forced user's min_pool_size servers, without a client",
    )
    .await;
    assert_eq!(
        count(&admin, "datname = 'free'").await,
        0,
        "no client, no pool"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Reserve pool
// ---------------------------------------------------------------------------------------------

/// pool_size 1: while one client holds a transaction, another is served on a second (reserve)
/// server after about reserve_pool_timeout; without a reserve it waits for the first to finish.
/// The reserve is the general one or the user's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_pool_serves_a_client_that_waited_reserve_pool_timeout() {
    let pg = Postgres::start();
    pg.create_user("app", "pw");
    let admin = direct(&pg).await;
    let cond = of("app", "postgres");
    // The general reserve, none, and the user's own ([users]' reserve_pool_size, as PgBouncer).
    for (general, own) in [(1, ""), (0, ""), (0, "reserve_pool_size = 1")] {
        let reserve = if own.is_empty() { general } else { 1 };
        let pooler = Pooler::start(&toml(
            &format!(
                "default_pool_size = 1\nreserve_pool_size = {general}\nreserve_pool_timeout = 300\n\
                 query_wait_timeout = 30000"
            ),
            &(db(&pg, "postgres", "") + &user("app", own)),
        ))
        .await;
        let a = pooler.connect("app", None, "postgres").await;
        let b = Arc::new(pooler.connect("app", None, "postgres").await);
        a.batch_execute("BEGIN").await.unwrap();
        let a_pid = backend_pid(&a).await;
        let start = Instant::now();
        let waiting = {
            let b = b.clone();
            tokio::spawn(async move {
                let p = backend_pid(&b).await;
                (p, start.elapsed())
            })
        };
        if reserve == 1 {
            let (b_pid, took) = within(Duration::from_secs(5), "reserve server", waiting)
                .await
                .unwrap();
            assert_ne!(b_pid, a_pid, "served on the held server?");
            assert!(
                took >= Duration::from_millis(250),
                "served before reserve_pool_timeout: {took:?}"
            );
            assert!(took < Duration::from_secs(3), "reserve came late: {took:?}");
            assert_eq!(count(&admin, &cond).await, 2, "pool_size + reserve");
        } else {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            assert!(
                !waiting.is_finished(),
                "served without a reserve while the only server was held"
            );
            assert_eq!(count(&admin, &cond).await, 1, "no reserve server");
            a.batch_execute("COMMIT").await.unwrap();
            let (b_pid, _) = within(Duration::from_secs(5), "freed server", waiting)
                .await
                .unwrap();
            assert_eq!(b_pid, a_pid, "the only server");
        }
        a.batch_execute("ROLLBACK").await.ok();
        drop((a, b));
        pooler.shutdown().await;
        wait_count(&admin, &cond, 0, Duration::from_secs(5), "pooler gone").await;
    }
}

// ---------------------------------------------------------------------------------------------
// 4. max_db_connections
// ---------------------------------------------------------------------------------------------

/// Two users' pools of 5 on one database with max_db_connections = 2: PostgreSQL never sees
/// more than 2 server connections for the database, and every client of both users gets its
/// work done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_db_connections_caps_servers_across_users() {
    let pg = Postgres::start();
    pg.create_db("shared");
    for u in ["alice", "bob"] {
        pg.create_user(u, "pw");
    }
    let rest = db(&pg, "shared", "max_db_connections = 2") + &user("alice", "") + &user("bob", "");
    let pooler = Pooler::start(&toml("default_pool_size = 5", &rest)).await;
    let peak = Peak::watch(&pg, "datname = 'shared'".into(), SAMPLE).await;
    let mut tasks = Vec::new();
    for _ in 0..5 {
        for u in ["alice", "bob"] {
            tasks.push((
                u,
                worker(pooler.port(), u, "shared", 4, Duration::from_millis(50)),
            ));
        }
    }
    for (u, t) in tasks {
        let (pids, db) = within(Duration::from_secs(90), "capped clients", t)
            .await
            .unwrap();
        assert!(!pids.is_empty(), "{u}");
        assert_eq!(db, "shared");
    }
    let max = peak.finish().await;
    assert!(
        max <= 2,
        "PostgreSQL saw {max} connections to a database capped at 2"
    );
    assert!(max >= 1);
    let admin = direct(&pg).await;
    assert!(held_servers(&admin, "datname = 'shared'", pg.port).await <= 2);
}

/// Under a shared cap, a pool hammered by many clients cannot starve another pool's single
/// client: each of its queries is answered within a few seconds while the hammering goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_pool_cannot_starve_another_under_a_shared_cap() {
    let pg = Postgres::start();
    for u in ["alice", "bob"] {
        pg.create_user(u, "pw");
    }
    let rest = db(&pg, "postgres", "") + &user("alice", "") + &user("bob", "");
    let pooler = Pooler::start(&toml(
        "default_pool_size = 5\nmax_db_connections = 2",
        &rest,
    ))
    .await;
    let peak = Peak::watch(
        &pg,
        "datname = 'postgres' AND usename <> 'postgres'".into(),
        SAMPLE,
    )
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut hammers = Vec::new();
    for i in 0..8 {
        let (stop, done, port) = (stop.clone(), done.clone(), pooler.port());
        hammers.push(tokio::spawn(async move {
            let c = within(
                Duration::from_secs(60),
                "alice login",
                connect(port, "alice", None, "postgres"),
            )
            .await
            .unwrap_or_else(|e| panic!("alice {i}: login: {e}"));
            while !stop.load(Ordering::SeqCst) {
                within(
                    Duration::from_secs(60),
                    "alice transaction",
                    c.batch_execute("BEGIN; SELECT pg_sleep(0.01); COMMIT"),
                )
                .await
                .unwrap_or_else(|e| panic!("alice {i}: {e}"));
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    // Let the hammering get going.
    let start = Instant::now();
    while done.load(Ordering::SeqCst) < 20 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "alice made no progress"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bob = within(
        Duration::from_secs(5),
        "bob's login while alice hammers",
        pooler.connect("bob", None, "postgres"),
    )
    .await;
    for i in 0..10 {
        let t = Instant::now();
        let who = within(
            Duration::from_secs(5),
            &format!("bob's query {i} while alice hammers"),
            scalar(&bob, "SELECT current_user"),
        )
        .await
        .unwrap();
        assert_eq!(who.as_deref(), Some("bob"));
        let took = t.elapsed();
        assert!(took < Duration::from_secs(5), "bob's query {i}: {took:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = done.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        done.load(Ordering::SeqCst) > before,
        "alice stalled after bob's queries"
    );
    stop.store(true, Ordering::SeqCst);
    for h in hammers {
        within(Duration::from_secs(60), "alice's clients", h)
            .await
            .unwrap();
    }
    let max = peak.finish().await;
    assert!(
        max <= 2,
        "PostgreSQL saw {max} connections under a cap of 2"
    );
}

/// Idle servers of one pool are closed to make room for another pool under a shared cap, in
/// both directions, even with a long server_idle_timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_servers_of_one_pool_make_room_for_another() {
    let pg = Postgres::start();
    for u in ["alice", "bob"] {
        pg.create_user(u, "pw");
    }
    let rest =
        db(&pg, "postgres", "max_db_connections = 2") + &user("alice", "") + &user("bob", "");
    let pooler = Pooler::start(&toml(
        "default_pool_size = 5\nserver_idle_timeout = 600000\nquery_wait_timeout = 60000",
        &rest,
    ))
    .await;
    let admin = direct(&pg).await;
    let users = "datname = 'postgres' AND usename IN ('alice', 'bob')";
    let mut alice = clients(&pooler, "alice", "postgres", 2).await;
    let mut bob = clients(&pooler, "bob", "postgres", 2).await;
    for round in 0..3 {
        // Alice takes both places; her servers then sit idle in her pool.
        let (a, pids) = transactions(alice, 1, Duration::from_millis(200)).await;
        alice = a;
        assert_eq!(
            pids.len(),
            2,
            "round {round}: alice's two transactions at once"
        );
        assert_eq!(count(&admin, &of("alice", "postgres")).await, 2);
        // Bob needs both places: alice's idle servers must give way.
        let (b, pids) = within(
            Duration::from_secs(10),
            &format!("round {round}: bob while alice's servers idle"),
            transactions(bob, 1, Duration::from_millis(200)),
        )
        .await;
        bob = b;
        assert_eq!(
            pids.len(),
            2,
            "round {round}: bob's two transactions at once"
        );
        assert_eq!(count(&admin, &of("bob", "postgres")).await, 2);
        assert!(
            count(&admin, users).await <= 2,
            "round {round}: cap exceeded"
        );
    }
}

/// With one pool alone under a saturated max_db_connections (pool_size above the cap), servers
/// are reused from transaction to transaction, not closed and reopened: the point of pooling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_cap_reuses_servers() {
    let pg = Postgres::start();
    pg.create_user("alice", "pw");
    let pooler = Pooler::start(&toml(
        "default_pool_size = 5\nmax_db_connections = 2",
        &db(&pg, "postgres", ""),
    ))
    .await;
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            worker(
                pooler.port(),
                "alice",
                "postgres",
                10,
                Duration::from_millis(20),
            )
        })
        .collect();
    let mut pids = HashSet::new();
    for t in tasks {
        pids.extend(
            within(Duration::from_secs(90), "alice's clients", t)
                .await
                .unwrap()
                .0,
        );
    }
    assert!(
        pids.len() <= 2,
        "60 transactions under a cap of 2 ran on {} distinct server connections: servers are \
         closed and reopened instead of reused",
        pids.len()
    );
}

// ---------------------------------------------------------------------------------------------
// 5. max_user_connections
// ---------------------------------------------------------------------------------------------

/// One user's pools on two databases share the user's max_user_connections; both databases are
/// served; another user on the same database is not held to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_user_connections_caps_a_user_across_databases() {
    let pg = Postgres::start();
    for d in ["one", "two"] {
        pg.create_db(d);
    }
    for u in ["carol", "dave"] {
        pg.create_user(u, "pw");
    }
    let rest = db(&pg, "one", "")
        + &db(&pg, "two", "")
        + &user("carol", "max_user_connections = 2")
        + &user("dave", "");
    let pooler = Pooler::start(&toml("default_pool_size = 5", &rest)).await;
    let peak = Peak::watch(&pg, "usename = 'carol'".into(), SAMPLE).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        for d in ["one", "two"] {
            tasks.push((
                d,
                worker(pooler.port(), "carol", d, 4, Duration::from_millis(50)),
            ));
        }
    }
    // Dave is not capped: three transactions at once on three servers.
    let dave = clients(&pooler, "dave", "one", 3).await;
    let (_dave, dave_pids) = transactions(dave, 1, Duration::from_millis(300)).await;
    assert_eq!(dave_pids.len(), 3, "dave is not held to carol's cap");
    for (d, t) in tasks {
        let (pids, served) = within(Duration::from_secs(90), "carol's clients", t)
            .await
            .unwrap();
        assert!(!pids.is_empty());
        assert_eq!(served, d);
    }
    let max = peak.finish().await;
    assert!(
        max <= 2,
        "PostgreSQL saw {max} connections of carol (cap 2)"
    );
    assert!(max >= 1);
}

/// query_wait_notify: a client that waits longer than it for a server is sent PgBouncer's
/// NOTICE that it is queued, once per wait, and then served; one served at once is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_client_is_notified_after_query_wait_notify() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&toml(
        "default_pool_size = 1\npool_mode = \"transaction\"\nquery_wait_notify = 300",
        &db(&pg, "postgres", ""),
    ))
    .await;
    let holder = pooler.connect("postgres", None, "postgres").await;
    let (mut waiter, mut messages) = client_with_messages(pooler.port()).await;
    assert_eq!(select_one(&waiter).await, 1);
    assert!(messages.try_recv().is_err(), "notified without waiting");
    for round in 0..2 {
        holder.batch_execute("BEGIN").await.unwrap();
        let q = tokio::spawn(async move {
            let r = select_one(&waiter).await;
            (waiter, r)
        });
        tokio::time::sleep(Duration::from_millis(800)).await;
        holder.batch_execute("COMMIT").await.unwrap();
        let (w, r) = within(Duration::from_secs(10), "the queued query", q)
            .await
            .unwrap();
        waiter = w;
        assert_eq!(r, 1);
        match messages.recv().await {
            Some(tokio_postgres::AsyncMessage::Notice(n)) => assert_eq!(
                n.message(),
                "No server connection available in postgres backend, client being queued"
            ),
            other => panic!("round {round}: no notice: {other:?}"),
        }
        assert!(
            messages.try_recv().is_err(),
            "round {round}: notified twice"
        );
    }
}
