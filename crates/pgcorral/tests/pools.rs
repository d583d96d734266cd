//! Pools as a user sees them, against a real PostgreSQL: pool sizes and their precedence,
//! min_pool_size, the reserve, caps shared by several pools (max_db_connections,
//! max_user_connections) and their fairness, routing and pool modes per database and user,
//! server health checks and a PostgreSQL restart under idle clients.
//!
//! Server connections are counted on the PostgreSQL side (pg_stat_activity), never through
//! pgcorral's own counters.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;
use tokio_postgres::Client;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A pgcorral configuration: `[general]` (trust, port 0) plus `general` lines, then `rest`
/// (database and user sections).
fn toml(general: &str, rest: &str) -> String {
    format!("[general]\nlisten_port = 0\nauth_type = \"trust\"\n{general}\n\n{rest}")
}

/// A `[databases.NAME]` section pointing at `pg`, plus `extra` lines. `name` is written as
/// given, so quote it (`"\"*\""`) when it needs quoting.
fn db(pg: &Postgres, name: &str, extra: &str) -> String {
    format!(
        "[databases.{name}]\nhost = \"127.0.0.1\"\nport = {}\n{extra}\n\n",
        pg.port
    )
}

/// A `[users.NAME]` section with `extra` lines.
fn user(name: &str, extra: &str) -> String {
    format!("[users.{name}]\n{extra}\n\n")
}

/// `pg.sql` without blocking the runtime.
fn sql(pg: &Postgres, db: &str, q: &str) -> String {
    blocking(|| pg.sql(db, q))
}

/// `pg_stat_activity` condition for the backends of `user` on `db`.
fn of(user: &str, db: &str) -> String {
    format!("usename = '{user}' AND datname = '{db}'")
}

/// Client backends matching `cond` (a condition over pg_stat_activity), the asking one excluded.
async fn count(admin: &Client, cond: &str) -> i64 {
    admin
        .query_one(
            &format!(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
                 AND pid <> pg_backend_pid() AND {cond}"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

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

/// Waits until `count(cond) == want`, failing after `limit`.
async fn wait_count(admin: &Client, cond: &str, want: i64, limit: Duration, what: &str) {
    let start = Instant::now();
    loop {
        let n = count(admin, cond).await;
        if n == want {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: {n} server connections ({cond}) after {limit:?}, expected {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How often a [`Peak`] samples the server connections.
const SAMPLE: Duration = Duration::from_millis(10);

/// `n` clients of `user` on `db`, connected one after another.
async fn clients(pooler: &Pooler, user: &str, db: &str, n: usize) -> Vec<Client> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            within(
                Duration::from_secs(10),
                "connect through pgcorral",
                pooler.connect(user, None, db),
            )
            .await,
        );
    }
    out
}

/// One transaction that holds its server for `hold` (idle in transaction on the client's side);
/// the backend pid it ran on.
async fn hold_transaction(c: &Client, hold: Duration, who: &str) -> i32 {
    within(Duration::from_secs(30), who, async {
        c.batch_execute("BEGIN")
            .await
            .unwrap_or_else(|e| panic!("{who}: BEGIN: {e}"));
        let p = backend_pid(c).await;
        tokio::time::sleep(hold).await;
        c.batch_execute("COMMIT")
            .await
            .unwrap_or_else(|e| panic!("{who}: COMMIT: {e}"));
        p
    })
    .await
}

/// All `clients` at once, each running `rounds` transactions that hold their server for `hold`.
/// Gives the clients back, with every backend pid the transactions ran on.
async fn transactions(
    clients: Vec<Client>,
    rounds: usize,
    hold: Duration,
) -> (Vec<Client>, HashSet<i32>) {
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            tokio::spawn(async move {
                let mut pids = Vec::new();
                for r in 0..rounds {
                    pids.push(hold_transaction(&c, hold, &format!("client {i} round {r}")).await);
                }
                (c, pids)
            })
        })
        .collect();
    let mut all = HashSet::new();
    let mut back = Vec::new();
    for t in tasks {
        let (c, pids) = within(Duration::from_secs(120), "transactions", t)
            .await
            .unwrap();
        all.extend(pids);
        back.push(c);
    }
    (back, all)
}

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

// ---------------------------------------------------------------------------------------------
// 3. Reserve pool
// ---------------------------------------------------------------------------------------------

/// pool_size 1: while one client holds a transaction, another is served on a second (reserve)
/// server after about reserve_pool_timeout; without a reserve it waits for the first to finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_pool_serves_a_client_that_waited_reserve_pool_timeout() {
    let pg = Postgres::start();
    pg.create_user("app", "pw");
    let admin = direct(&pg).await;
    let cond = of("app", "postgres");
    for reserve in [1, 0] {
        let pooler = Pooler::start(&toml(
            &format!(
                "default_pool_size = 1\nreserve_pool_size = {reserve}\nreserve_pool_timeout = 300\n\
                 query_wait_timeout = 30000"
            ),
            &db(&pg, "postgres", ""),
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

// ---------------------------------------------------------------------------------------------
// 6. Databases, users, wildcard and pool modes
// ---------------------------------------------------------------------------------------------

/// Several databases and users: named entries, an entry with another server-side dbname, the
/// `"*"` wildcard (any other name, same name on the server), and pool_mode per database and per
/// user (the user's wins).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn databases_users_wildcard_and_pool_modes() {
    let pg = Postgres::start();
    for d in ["alpha", "gamma", "delta"] {
        pg.create_db(d);
    }
    for u in ["alice", "bob", "sess"] {
        pg.create_user(u, "pw");
    }
    let rest = db(&pg, "alpha", "")
        + &db(&pg, "alias", "dbname = \"alpha\"")
        + &db(
            &pg,
            "sessdb",
            "dbname = \"alpha\"\npool_mode = \"session\"\npool_size = 2",
        )
        + &db(&pg, "stmt", "dbname = \"alpha\"\npool_mode = \"statement\"")
        + &db(&pg, "\"*\"", "")
        + &user("alice", "")
        + &user("bob", "")
        + &user("sess", "pool_mode = \"session\"\npool_size = 3");
    let pooler = Pooler::start(&toml(
        "default_pool_size = 1\npool_mode = \"transaction\"",
        &rest,
    ))
    .await;

    // Routing.
    for (u, client_db, server_db) in [
        ("alice", "alpha", "alpha"),
        ("bob", "alias", "alpha"),
        ("alice", "gamma", "gamma"),
        ("bob", "delta", "delta"),
        ("bob", "gamma", "gamma"),
        ("sess", "postgres", "postgres"),
    ] {
        let c = pooler.connect(u, None, client_db).await;
        assert_eq!(
            value(&c, "SELECT current_database()").await,
            server_db,
            "{u}@{client_db}"
        );
        assert_eq!(value(&c, "SELECT current_user").await, u, "{u}@{client_db}");
    }

    // Transaction mode (general): alice's two clients share her pool's one server; bob's pool
    // on the same database is another.
    let a = clients(&pooler, "alice", "alpha", 2).await;
    let b = pooler.connect("bob", None, "alpha").await;
    let shared = backend_pid(&a[0]).await;
    for _ in 0..3 {
        for c in &a {
            assert_eq!(
                backend_pid(c).await,
                shared,
                "alice's transaction-mode clients"
            );
        }
    }
    assert_ne!(backend_pid(&b).await, shared, "bob has his own pool");
    // The wildcard's pools are transaction mode too.
    let g = clients(&pooler, "alice", "gamma", 2).await;
    let gp = backend_pid(&g[0]).await;
    assert_eq!(
        backend_pid(&g[1]).await,
        gp,
        "wildcard pool of size 1, shared"
    );

    // Session mode by database: each client keeps its own server.
    let s = clients(&pooler, "alice", "sessdb", 2).await;
    let (s0, s1) = (backend_pid(&s[0]).await, backend_pid(&s[1]).await);
    assert_ne!(s0, s1, "session-mode clients share a server");
    for _ in 0..3 {
        assert_eq!(backend_pid(&s[0]).await, s0);
        assert_eq!(backend_pid(&s[1]).await, s1);
        assert_eq!(backend_pid(&a[0]).await, shared);
    }

    // Session mode by user, over the general transaction mode.
    let u = clients(&pooler, "sess", "alpha", 2).await;
    let (u0, u1) = (backend_pid(&u[0]).await, backend_pid(&u[1]).await);
    assert_ne!(u0, u1, "user-level session mode");
    u[0].batch_execute("SET application_name = 'mine'")
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(backend_pid(&u[0]).await, u0);
        assert_eq!(backend_pid(&u[1]).await, u1);
    }
    assert_eq!(value(&u[0], "SHOW application_name").await, "mine");

    // Statement mode by database: single statements work, transaction blocks are refused.
    let st = pooler.connect("alice", None, "stmt").await;
    assert_eq!(value(&st, "SELECT current_database()").await, "alpha");
    let err = within(Duration::from_secs(10), "BEGIN", st.simple_query("BEGIN"))
        .await
        .map(drop)
        .expect_err("BEGIN in statement mode");
    assert_eq!(sqlstate(&err), "0A000", "{err}");
    assert_eq!(
        value(&st, "SELECT 2").await,
        "2",
        "usable after the refusal"
    );
    assert_eq!(
        value(&st, "SELECT txid_current_if_assigned() IS NULL").await,
        "t",
        "no transaction left open"
    );
    // ... but a user in session mode on that database may use transactions (user wins).
    let us = pooler.connect("sess", None, "stmt").await;
    let p = backend_pid(&us).await;
    us.batch_execute("BEGIN").await.unwrap();
    assert_eq!(backend_pid(&us).await, p);
    us.batch_execute("COMMIT").await.unwrap();
    assert_eq!(backend_pid(&us).await, p);
}

// ---------------------------------------------------------------------------------------------
// 7. Server health
// ---------------------------------------------------------------------------------------------

/// Idle pooled servers that PostgreSQL terminated are never handed to a client: every client's
/// next query succeeds, on a new server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_idle_servers_are_never_handed_out() {
    let pg = Postgres::start();
    pg.create_user("app", "pw");
    let admin = direct(&pg).await;
    let cond = of("app", "postgres");
    let pooler = Pooler::start(&toml("default_pool_size = 3", &db(&pg, "postgres", ""))).await;
    let mut cs = clients(&pooler, "app", "postgres", 3).await;
    for round in 0..3 {
        let (back, old) = transactions(cs, 1, Duration::from_millis(200)).await;
        cs = back;
        assert_eq!(old.len(), 3);
        assert_eq!(count(&admin, &cond).await, 3);
        sql(
            &pg,
            "postgres",
            &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {cond}"),
        );
        wait_count(&admin, &cond, 0, Duration::from_secs(5), "terminated").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let tasks: Vec<_> = cs
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                tokio::spawn(async move {
                    match scalar(&c, "SELECT pg_backend_pid()").await {
                        Ok(p) => (c, p.unwrap().parse::<i32>().unwrap()),
                        Err(e) => panic!("round {round} client {i}: stale server: {e}"),
                    }
                })
            })
            .collect();
        cs = Vec::new();
        for t in tasks {
            let (c, p) = within(Duration::from_secs(10), "query after kill", t)
                .await
                .unwrap();
            assert!(!old.contains(&p), "a terminated server was reused");
            cs.push(c);
        }
    }
}

/// Servers PostgreSQL closes itself for idleness (idle_session_timeout) are never handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_closed_by_idle_session_timeout_are_never_handed_out() {
    let pg = Postgres::start();
    pg.create_user("app", "pw");
    pg.sql(
        "postgres",
        "ALTER ROLE app SET idle_session_timeout = '400ms'",
    );
    let pooler = Pooler::start(&toml("default_pool_size = 2", &db(&pg, "postgres", ""))).await;
    let cs = clients(&pooler, "app", "postgres", 2).await;
    let mut seen = HashSet::new();
    for round in 0..4 {
        for (i, c) in cs.iter().enumerate() {
            match within(
                Duration::from_secs(10),
                "query",
                scalar(c, "SELECT pg_backend_pid()"),
            )
            .await
            {
                Ok(p) => {
                    seen.insert(p.unwrap());
                }
                Err(e) => panic!("round {round} client {i}: {e}"),
            }
        }
        // Longer than idle_session_timeout: PostgreSQL closes the pooled servers meanwhile.
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
    assert!(seen.len() >= 4, "servers were replaced: {seen:?}");
}

/// `server_check_query` runs on servers idle longer than server_check_delay (0: always); a
/// server whose check fails is closed and the client served by another, with no error.
/// `check` fails when `health.v` is 0.
async fn failing_check_discards_the_server(check: &str) {
    let pg = Postgres::start();
    pg.create_user("app", "pw");
    pg.create_db("checked");
    pg.sql(
        "checked",
        "CREATE TABLE health (v int); INSERT INTO health VALUES (1)",
    );
    let admin = direct(&pg).await;
    let pooler = Pooler::start(&toml(
        &format!("default_pool_size = 1\nserver_check_delay = 0\nserver_check_query = \"{check}\""),
        &db(&pg, "checked", ""),
    ))
    .await;
    let c = pooler.connect("app", None, "checked").await;
    let first = backend_pid(&c).await;
    assert_eq!(
        backend_pid(&c).await,
        first,
        "a passing check keeps the server"
    );
    sql(&pg, "checked", "UPDATE health SET v = 0");
    let second = backend_pid(&c).await;
    assert_ne!(
        second, first,
        "a server whose server_check_query failed was handed out"
    );
    wait_count(
        &admin,
        &format!("pid = {first}"),
        0,
        Duration::from_secs(5),
        "the server that failed its check is closed",
    )
    .await;
    sql(&pg, "checked", "UPDATE health SET v = 1");
    let third = backend_pid(&c).await;
    assert_eq!(
        backend_pid(&c).await,
        third,
        "checks pass again: server reused"
    );
    assert_eq!(count(&admin, &of("app", "checked")).await, 1);
}

/// A check query that ends in an ERROR (division by zero) has failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_query_error_discards_the_server() {
    failing_check_discards_the_server("SELECT 1 / (SELECT v FROM health)").await;
}

/// A check query whose server goes away (FATAL) has failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_query_fatal_discards_the_server() {
    failing_check_discards_the_server(
        "SELECT CASE WHEN (SELECT v FROM health) = 0 THEN pg_terminate_backend(pg_backend_pid()) END",
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// 8. PostgreSQL restart
// ---------------------------------------------------------------------------------------------

/// PostgreSQL restarts while transaction-mode clients sit idle (their servers idle in the
/// pool): afterwards every client's next queries succeed, one at a time and all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_costs_idle_clients_nothing() {
    let pg = Postgres::start();
    pg.create_user("app", "pw");
    for min in [0, 2] {
        let pooler = Pooler::start(&toml(
            &format!(
                "default_pool_size = 3\nmin_pool_size = {min}\nserver_login_retry = 100\n\
                 pool_mode = \"transaction\""
            ),
            &db(&pg, "postgres", ""),
        ))
        .await;
        let cs = clients(&pooler, "app", "postgres", 4).await;
        let (cs, _) = transactions(cs, 1, Duration::from_millis(100)).await;
        let cs: Vec<Arc<Client>> = cs.into_iter().map(Arc::new).collect();
        for round in 0..3 {
            blocking(|| pg.pg_ctl("restart"));
            for (i, c) in cs.iter().enumerate() {
                for q in 0..3 {
                    let r = within(
                        Duration::from_secs(10),
                        "query after restart",
                        scalar(c, "SELECT 1"),
                    )
                    .await;
                    if let Err(e) = r {
                        panic!("min_pool_size {min}, restart {round}, client {i}, query {q}: {e}");
                    }
                }
            }
            blocking(|| pg.pg_ctl("restart"));
            let tasks: Vec<_> = cs
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let c = c.clone();
                    tokio::spawn(async move {
                        for q in 0..3 {
                            if let Err(e) = c.simple_query("SELECT 1").await {
                                panic!(
                                    "min_pool_size {min}, restart {round} (all at once), \
                                     client {i}, query {q}: {e}"
                                );
                            }
                        }
                    })
                })
                .collect();
            for t in tasks {
                within(Duration::from_secs(20), "clients after restart", t)
                    .await
                    .unwrap();
            }
        }
        // A new client too.
        let c = within(
            Duration::from_secs(10),
            "new client",
            pooler.connect("app", None, "postgres"),
        )
        .await;
        assert_eq!(value(&c, "SELECT 1").await, "1");
        drop((c, cs));
        pooler.shutdown().await;
    }
}
