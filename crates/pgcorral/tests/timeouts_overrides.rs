//! Timeouts a user or a database sets for itself, as a client sees them against a real
//! PostgreSQL: a user's query_timeout, idle_transaction_timeout, transaction_timeout and
//! client_idle_timeout over `[general]`'s; query_wait_timeout by user, then database, then
//! `[general]`; a database's server_lifetime; pool_idle_timeout.

mod support;

use std::time::{Duration, Instant};

use bytes::BytesMut;
use support::raw::Raw;
use support::timeouts::*;
use support::*;

/// One database (`postgres`, every client logged in to the server as `postgres`) and the
/// users clients may log in as.
fn with_users(pg: &Postgres, general: &str, users: &str) -> String {
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\n{general}\n\n{users}\n\n\
         [databases.postgres]\nhost = \"127.0.0.1\"\nport = {}\nuser = \"postgres\"\n",
        pg.port
    )
}

async fn login(port: u16, user: &str, db: &str) -> Raw {
    within(HANG, "login", Raw::login(port, user, db))
        .await
        .unwrap_or_else(|e| panic!("login as {user}: {e:?}"))
}

/// Sends a simple Query without waiting for its answer.
async fn send_query(raw: &mut Raw, sql: &str) {
    let mut out = BytesMut::new();
    pgwire::encode::query(&mut out, sql);
    raw.send(&out).await;
}

/// A user's own timeouts win over `[general]`'s, for that user only: its query is cut at its
/// query_timeout, its idle transaction at its idle_transaction_timeout, and another user keeps
/// `[general]`'s (long) ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_query_and_idle_transaction_timeouts_win_over_generals() {
    let pg = Postgres::start();
    for mode in ["transaction", "session"] {
        let pooler = Pooler::start(&with_users(
            &pg,
            &format!(
                "pool_mode = \"{mode}\"\nquery_timeout = 60000\nidle_transaction_timeout = 60000"
            ),
            "[users.quick]\nquery_timeout = 500\nidle_transaction_timeout = 500\n\n[users.patient]\n",
        ))
        .await;

        let mut quick = login(pooler.port(), "quick", "postgres").await;
        let start = Instant::now();
        send_query(&mut quick, "SELECT pg_sleep(20)").await;
        let err = within(HANG, "query_timeout", quick.expect_error_and_close()).await;
        let took = start.elapsed();
        assert_eq!(
            (err.code.as_str(), err.severity.as_str()),
            ("57014", "FATAL"),
            "{mode}: {err:?}"
        );
        assert!(err.message.contains("query timeout"), "{mode}: {err:?}");
        assert!(took >= Duration::from_millis(450), "{mode}: {took:?}");
        assert!(took < Duration::from_secs(8), "{mode}: {took:?}");

        let mut quick = login(pooler.port(), "quick", "postgres").await;
        quick.query("BEGIN").await.unwrap();
        let start = Instant::now();
        let err = within(
            HANG,
            "idle_transaction_timeout",
            quick.expect_error_and_close(),
        )
        .await;
        assert_eq!(
            (err.code.as_str(), err.severity.as_str()),
            ("25P03", "FATAL"),
            "{mode}: {err:?}"
        );
        assert!(
            err.message.contains("idle transaction timeout"),
            "{mode}: {err:?}"
        );
        assert!(start.elapsed() >= Duration::from_millis(450), "{mode}");

        // [general]'s for a user without its own: a second of sleep and of idling in a
        // transaction is nothing.
        let mut patient = login(pooler.port(), "patient", "postgres").await;
        patient.query("SELECT pg_sleep(1)").await.unwrap();
        patient.query("BEGIN").await.unwrap();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let rows = patient.query("SELECT 7; COMMIT").await.unwrap();
        assert_eq!(rows[0][0].as_deref(), Some("7"), "{mode}");
    }
}

/// transaction_timeout, in `[general]` and a user's own winning over it: a transaction is cut
/// after that long from its first request, whether it is idle or running a query (a single
/// statement's implicit transaction too), with 25P04; activity inside it does not extend it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_timeout_counts_the_whole_transaction() {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE TABLE tt (i int)");
    for mode in ["transaction", "session"] {
        let pooler = Pooler::start(&with_users(
            &pg,
            &format!("pool_mode = \"{mode}\"\ntransaction_timeout = 60000"),
            "[users.brief]\ntransaction_timeout = 900\n\n[users.patient]\n",
        ))
        .await;

        // Working inside the transaction does not keep it alive.
        let mut brief = login(pooler.port(), "brief", "postgres").await;
        let start = Instant::now();
        brief
            .query("BEGIN; INSERT INTO tt VALUES (1)")
            .await
            .unwrap();
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            brief.query("SELECT 1").await.unwrap();
        }
        let err = within(HANG, "transaction_timeout", brief.expect_error_and_close()).await;
        let took = start.elapsed();
        assert_eq!(
            (err.code.as_str(), err.severity.as_str()),
            ("25P04", "FATAL"),
            "{mode}: {err:?}"
        );
        assert!(
            err.message.contains("transaction timeout"),
            "{mode}: {err:?}"
        );
        assert!(took >= Duration::from_millis(850), "{mode}: {took:?}");
        assert!(took < Duration::from_secs(8), "{mode}: {took:?}");
        wait_until(Duration::from_secs(5), "rolled back", || {
            pg.sql("postgres", "SELECT count(*) FROM tt") == "0"
        })
        .await;

        // One long statement is a transaction too.
        let mut brief = login(pooler.port(), "brief", "postgres").await;
        send_query(&mut brief, "SELECT pg_sleep(20) /* tt-long */").await;
        let err = within(HANG, "one statement", brief.expect_error_and_close()).await;
        assert_eq!(err.code, "25P04", "{mode}: {err:?}");
        wait_until(Duration::from_secs(5), "the statement still runs", || {
            running(&pg, "tt-long") == 0
        })
        .await;

        // Transactions shorter than it, one after the other, are fine; so is [general]'s
        // minute for another user.
        let mut brief = login(pooler.port(), "brief", "postgres").await;
        for _ in 0..3 {
            brief.query("BEGIN; SELECT 1").await.unwrap();
            tokio::time::sleep(Duration::from_millis(400)).await;
            brief.query("COMMIT").await.unwrap();
        }
        let mut patient = login(pooler.port(), "patient", "postgres").await;
        patient.query("BEGIN").await.unwrap();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        patient.query("COMMIT").await.unwrap();
    }
}

/// A user's client_idle_timeout wins over `[general]`'s (off here): its idle client is closed
/// with 57P05, another user's is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_client_idle_timeout() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&with_users(
        &pg,
        "pool_mode = \"transaction\"",
        "[users.restless]\nclient_idle_timeout = 500\n\n[users.patient]\n",
    ))
    .await;
    let mut patient = login(pooler.port(), "patient", "postgres").await;
    let mut restless = login(pooler.port(), "restless", "postgres").await;
    let start = Instant::now();
    restless.query("SELECT 1").await.unwrap();
    let err = within(
        HANG,
        "client_idle_timeout",
        restless.expect_error_and_close(),
    )
    .await;
    assert_eq!(err.code, "57P05", "{err:?}");
    assert!(err.message.contains("client_idle_timeout"), "{err:?}");
    assert!(start.elapsed() >= Duration::from_millis(450));
    let rows = patient.query("SELECT 1").await.unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("1"));
}

/// query_wait_timeout: the user's, else the database's, else `[general]`'s (here a minute).
/// Each pool of one server is held in a transaction by one client while another waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_wait_timeout_by_user_then_database_then_general() {
    let pg = Postgres::start();
    // Per-user pools here (no forced user); a forced user's pool is the next test's.
    pg.create_user("hasty", "pw");
    let port = pg.port;
    let toml = format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\
         default_pool_size = 1\nquery_wait_timeout = 60000\n\n\
         [users.postgres]\n\n[users.hasty]\nquery_wait_timeout = 300\n\n\
         [databases.fast]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\n\
         query_wait_timeout = 1000\n\n\
         [databases.slow]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\n"
    );
    let pooler = Pooler::start(&toml).await;

    // Waits about `expect` for a server of (db, user) held by another client, or, with
    // `None`, is still waiting after 1.5 s (and gets the server once the holder commits).
    let waits = |db: &'static str, user: &'static str, expect: Option<u64>| {
        let port = pooler.port();
        async move {
            // Both log in first: a login may need the pool's server too.
            let mut holder = login(port, user, db).await;
            let mut waiter = login(port, user, db).await;
            holder.query("BEGIN").await.unwrap();
            let start = Instant::now();
            send_query(&mut waiter, "SELECT 1").await;
            match expect {
                Some(ms) => {
                    let err =
                        within(HANG, "query_wait_timeout", waiter.expect_error_and_close()).await;
                    let took = start.elapsed();
                    assert_eq!(err.code, "57014", "{db}/{user}: {err:?}");
                    assert!(
                        err.message.contains("query_wait_timeout"),
                        "{db}/{user}: {err:?}"
                    );
                    assert!(
                        took >= Duration::from_millis(ms - 50),
                        "{db}/{user}: {took:?}"
                    );
                    assert!(
                        took < Duration::from_millis(ms * 3 + 1000),
                        "{db}/{user}: {took:?}"
                    );
                }
                None => {
                    let waited =
                        tokio::time::timeout(Duration::from_millis(1500), waiter.read()).await;
                    assert!(
                        waited.is_err(),
                        "{db}/{user}: answered while the pool was held: {waited:?}"
                    );
                }
            }
            holder.query("COMMIT").await.unwrap();
            if expect.is_none() {
                // The waiting query now runs.
                loop {
                    let (tag, _) = within(HANG, "answer", waiter.read()).await.expect("answer");
                    if tag == pgwire::backend::READY_FOR_QUERY {
                        break;
                    }
                }
            }
        }
    };
    waits("fast", "postgres", Some(1000)).await;
    waits("fast", "hasty", Some(300)).await;
    waits("slow", "hasty", Some(300)).await;
    waits("slow", "postgres", None).await;
}

/// Under a forced user every client shares the forced user's pool, and each waits as long as
/// its login user says (PgBouncer's rule): its own query_wait_timeout, else the database's,
/// never the forced user's. A client with a shorter limit gives up first even when queued
/// behind one with a longer limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_forced_user_each_client_waits_as_its_login_user_says() {
    let pg = Postgres::start();
    let port = pg.port;
    let toml = format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\
         default_pool_size = 1\nquery_wait_timeout = 60000\n\n\
         [users.postgres]\nquery_wait_timeout = 30000\n\n[users.plain]\n\n\
         [users.hasty]\nquery_wait_timeout = 300\n\n\
         [databases.forced]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\n\
         user = \"postgres\"\nquery_wait_timeout = 1500\n"
    );
    let pooler = Pooler::start(&toml).await;
    let mut holder = login(pooler.port(), "postgres", "forced").await;
    let mut plain = login(pooler.port(), "plain", "forced").await;
    let mut hasty = login(pooler.port(), "hasty", "forced").await;
    holder.query("BEGIN").await.unwrap();
    let start = Instant::now();
    // `plain` waits first, `hasty` behind it.
    send_query(&mut plain, "SELECT 1").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    send_query(&mut hasty, "SELECT 1").await;
    let err = within(HANG, "hasty's wait", hasty.expect_error_and_close()).await;
    let took = start.elapsed();
    assert_eq!(err.code, "57014", "{err:?}");
    assert!(err.message.contains("query_wait_timeout"), "{err:?}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(1400),
        "hasty waited its own 300 ms, not plain's turn: {took:?}"
    );
    // `plain` has no limit of its own: the database's 1.5 s, not the forced user's 30 s.
    let err = within(HANG, "plain's wait", plain.expect_error_and_close()).await;
    let took = start.elapsed();
    assert_eq!(err.code, "57014", "{err:?}");
    assert!(
        took >= Duration::from_millis(1450) && took < Duration::from_millis(6000),
        "plain waited the database's 1.5 s: {took:?}"
    );
    holder.query("COMMIT").await.unwrap();
    holder.query("SELECT 1").await.unwrap();
}

/// A database's server_lifetime: its servers are closed once idle past it, while another
/// database's (with `[general]`'s hour) stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_databases_server_lifetime() {
    let pg = Postgres::start();
    let port = pg.port;
    let toml = format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\n\
         [databases.short]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\n\
         server_lifetime = 500\n\n\
         [databases.long]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\n"
    );
    let pooler = Pooler::start(&toml).await;
    let short = pooler.connect("postgres", None, "short").await;
    let long = pooler.connect("postgres", None, "long").await;
    let short_pid = backend_pid(&short).await;
    let long_pid = backend_pid(&long).await;
    assert_ne!(short_pid, long_pid);
    let alive = |pid: i32| {
        pg.sql(
            "postgres",
            &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"),
        ) == "1"
    };
    wait_until(Duration::from_secs(5), "short's server closed", || {
        !alive(short_pid)
    })
    .await;
    assert!(alive(long_pid), "long's server was closed too");
    // A new server for the next transaction.
    assert_ne!(backend_pid(&short).await, short_pid);
    assert_eq!(backend_pid(&long).await, long_pid);
}

/// pool_idle_timeout: a (database, user)'s pools with no client and no server for that long
/// are freed, and made anew at the next login; a database with min_pool_size keeps its pools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_idle_timeout_frees_empty_pools() {
    let pg = Postgres::start();
    let port = pg.port;
    let toml = format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\
         pool_idle_timeout = 300\nserver_idle_timeout = 300\n\n\
         [databases.postgres]\nhost = \"127.0.0.1\"\nport = {port}\n\n\
         [databases.warm]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\n\
         min_pool_size = 1\n"
    );
    let pooler = Pooler::start(&toml).await;
    let pools = |db: &str| {
        pooler
            .services
            .pools
            .all()
            .iter()
            .filter(|p| p.name().0 == db)
            .count()
    };
    let client = pooler.connect("postgres", None, "postgres").await;
    let warm = pooler.connect("postgres", None, "warm").await;
    assert_eq!(select_one(&client).await, 1);
    assert_eq!(select_one(&warm).await, 1);
    // With a client logged in, the pool stays, though its server is closed when idle.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(pools("postgres"), 1);
    drop(client);
    drop(warm);
    wait_until(Duration::from_secs(5), "the idle pool freed", || {
        pools("postgres") == 0
    })
    .await;
    assert_eq!(pools("warm"), 1, "a pool keeping min_pool_size was freed");
    // The next login makes it anew.
    let again = pooler.connect("postgres", None, "postgres").await;
    assert_eq!(select_one(&again).await, 1);
    assert_eq!(pools("postgres"), 1);
}
