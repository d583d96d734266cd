//! The timeouts on pgcorral's side towards PostgreSQL, as a user sees them, against a real
//! PostgreSQL: server_connect_timeout and server_login_retry, server_idle_timeout,
//! server_lifetime, server_check_delay/server_check_query, and cancel_wait_timeout when the
//! forwarding of a cancel stalls.

mod support;

use std::time::{Duration, Instant};

use bytes::BytesMut;
use pgwire::backend;
use support::raw::Raw;
use support::timeouts::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A login through pgcorral that must fail: its error and how long it took.
async fn failed_login(port: u16, user: &str, db: &str) -> (tokio_postgres::Error, Duration) {
    let start = Instant::now();
    match within(HANG, "login", connect(port, user, None, db)).await {
        Ok(_) => panic!("login to {db} as {user} succeeded"),
        Err(e) => (e, start.elapsed()),
    }
}

/// Server backends on database `db`, other than the one asking.
fn backends_on(pg: &Postgres, db: &str) -> usize {
    pg.sql(
        "postgres",
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' AND pid <> pg_backend_pid()"
        ),
    )
    .parse()
    .unwrap()
}

/// Whether a backend with `pid` exists.
fn backend_exists(pg: &Postgres, pid: i32) -> bool {
    pg.sql(
        "postgres",
        &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"),
    ) != "0"
}

// ---------------------------------------------------------------------------------------------
// server_connect_timeout
// ---------------------------------------------------------------------------------------------

/// A server that accepts TCP and never says a word: the login that needs it fails with 08001
/// after about server_connect_timeout, instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_connect_timeout_silent_server_fails_login() {
    let silent = Proxy::silent().await;
    let pooler = Pooler::start(&config_at(
        silent.port,
        "postgres",
        "server_connect_timeout = 500\nserver_login_retry = 0\nserver_unavailable_wait = 0",
    ))
    .await;
    for round in 0..2 {
        let (err, took) = failed_login(pooler.port(), "postgres", "postgres").await;
        assert_eq!(sqlstate(&err), "08001", "round {round}: {err}");
        assert!(
            took >= Duration::from_millis(450),
            "round {round}: failed before the timeout: {took:?}"
        );
        assert!(took < Duration::from_secs(8), "round {round}: {took:?}");
        let msg = db_message(&err);
        assert!(msg.contains("timed out"), "{msg}");
        assert!(
            msg.contains(&silent.port.to_string()),
            "names the server: {msg}"
        );
    }
    assert!(silent.stalled() >= 2, "each login tried the server");
}

/// Once the pool knows the server, a query that needs a new server connection (the one
/// connection is busy) and gets a silent server fails with 08001 after about the timeout;
/// the client holding the working connection is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_connect_timeout_on_a_query() {
    let pg = Postgres::start();
    let proxy = Proxy::start(pg.port, ProxyMode::Forward).await;
    let pooler = Pooler::start(&config_at(
        proxy.port,
        "postgres",
        "pool_mode = \"transaction\"\ndefault_pool_size = 2\nserver_connect_timeout = 500\n\
         server_unavailable_wait = 0",
    ))
    .await;
    let a = pooler.connect("postgres", None, "postgres").await;
    assert_eq!(select_one(&a).await, 1);
    proxy.set(ProxyMode::Stall);
    a.simple_query("BEGIN").await.unwrap();
    // A raw login sends no settings, so it needs no server: only its query does.
    let mut b = within(
        HANG,
        "raw login",
        Raw::login(pooler.port(), "postgres", "postgres"),
    )
    .await
    .unwrap();
    let mut q = BytesMut::new();
    pgwire::encode::query(&mut q, "SELECT 1");
    let start = Instant::now();
    b.send(&q).await;
    let err = b.expect_error_and_close().await;
    let took = start.elapsed();
    assert_eq!(err.code, "08001", "{err:?}");
    assert!(err.message.contains("timed out"), "{err:?}");
    assert!(took >= Duration::from_millis(450), "{took:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    assert!(proxy.stalled() >= 1);
    a.simple_query("COMMIT").await.unwrap();
    assert_eq!(select_one(&a).await, 1);
}

/// A client waiting for a server that cannot be reached waits no longer than it may wait for
/// a server at all: query_timeout, when shorter than query_wait_timeout, ends the wait with
/// PgBouncer's `query_timeout` (57014), and query_wait_timeout with its own, however long
/// server_unavailable_wait is (PgBouncer's waiting clients, which a pgbouncer.ini gets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_an_unreachable_server_ends_at_the_clients_wait_limit() {
    let nobody = free_port();
    for (limits, word, limit) in [
        (
            "query_timeout = 1000\nquery_wait_timeout = 60000",
            "query_timeout",
            1000,
        ),
        ("query_wait_timeout = 1500", "query_wait_timeout", 1500),
    ] {
        let pooler = Pooler::start(&config_at(
            nobody,
            "postgres",
            &format!("server_unavailable_wait = 600000\nserver_login_retry = 0\n{limits}"),
        ))
        .await;
        let (err, took) = failed_login(pooler.port(), "postgres", "postgres").await;
        assert_eq!(sqlstate(&err), "57014", "{word}: {err}");
        assert!(db_message(&err).starts_with(word), "{word}: {err}");
        assert!(
            took >= Duration::from_millis(limit - 100),
            "{word}: {took:?}"
        );
        assert!(
            took < Duration::from_millis(limit + 3000),
            "{word}: {took:?}"
        );
    }
}

/// While the wait lasts, a server that comes back is used: the waiting login succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_client_gets_the_server_that_comes_back() {
    let pg = Postgres::start();
    let proxy = Proxy::start(pg.port, ProxyMode::Reject).await;
    let pooler = Pooler::start(&config_at(
        proxy.port,
        "postgres",
        "server_unavailable_wait = 600000\nserver_login_retry = 0\nquery_wait_timeout = 20000",
    ))
    .await;
    let port = pooler.port();
    let login = tokio::spawn(async move { connect(port, "postgres", None, "postgres").await });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(proxy.accepted() >= 1, "the login tried the server");
    proxy.set(ProxyMode::Forward);
    let c = within(HANG, "the waiting login", login)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the waiting login failed: {e}"));
    assert_eq!(select_one(&c).await, 1);
}

// ---------------------------------------------------------------------------------------------
// server_login_retry
// ---------------------------------------------------------------------------------------------

/// After a failed server login, logins to that pool fail at once with the same error, without
/// trying the server, for server_login_retry; after it, they try again and succeed once the
/// server is back. The "server" hangs up on every connection until it is switched to forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_login_retry_replays_the_failure_then_tries_again() {
    const RETRY: Duration = Duration::from_millis(3000);
    let pg = Postgres::start();
    let proxy = Proxy::start(pg.port, ProxyMode::Reject).await;
    let pooler = Pooler::start(&config_at(
        proxy.port,
        "postgres",
        &format!(
            "server_login_retry = {}\nserver_unavailable_wait = 0",
            RETRY.as_millis()
        ),
    ))
    .await;
    let t0 = Instant::now();
    let (first, _) = failed_login(pooler.port(), "postgres", "postgres").await;
    assert_eq!(sqlstate(&first), "08001", "{first}");
    assert_eq!(proxy.accepted(), 1);

    let (second, took) = failed_login(pooler.port(), "postgres", "postgres").await;
    assert_eq!(sqlstate(&second), "08001", "{second}");
    // The same error (the replay may add the underlying cause to the message).
    assert!(
        db_message(&second).starts_with(&db_message(&first)),
        "not the same error: {second} / {first}"
    );
    assert!(took < Duration::from_secs(2), "not immediate: {took:?}");

    // The server is back, but the retry interval has not passed: still refused, still untried.
    proxy.set(ProxyMode::Forward);
    let (third, _) = failed_login(pooler.port(), "postgres", "postgres").await;
    let inside_window = t0.elapsed() < RETRY - Duration::from_millis(300);
    if inside_window {
        assert_eq!(sqlstate(&third), "08001", "{third}");
        assert_eq!(
            proxy.accepted(),
            1,
            "a login within server_login_retry tried the server"
        );
    } else {
        eprintln!(
            "machine too slow to check the retry window ({:?})",
            t0.elapsed()
        );
    }

    tokio::time::sleep((RETRY + Duration::from_millis(300)).saturating_sub(t0.elapsed())).await;
    let c = within(
        HANG,
        "login after server_login_retry",
        connect(pooler.port(), "postgres", None, "postgres"),
    )
    .await
    .unwrap_or_else(|e| panic!("login after the retry interval failed: {e}"));
    assert_eq!(select_one(&c).await, 1);
    assert!(proxy.accepted() >= 2);
}

/// The same with a real authentication failure: the server's own 28P01 is replayed without a
/// new attempt (the server logs one failure), and logins work again after the interval once
/// the password is fixed on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_login_retry_after_a_wrong_server_password() {
    const RETRY: Duration = Duration::from_millis(3000);
    let pg = Postgres::start_with(PgOptions {
        auth: "scram-sha-256",
        conf: String::new(),
    });
    pg.sql("postgres", "CREATE ROLE app LOGIN PASSWORD 'old-secret'");
    let toml = format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\nserver_login_retry = {}\n\n\
         [databases.postgres]\nhost = \"127.0.0.1\"\nport = {}\nuser = \"app\"\npassword = \"new-secret\"\n",
        RETRY.as_millis(),
        pg.port
    );
    let pooler = Pooler::start(&toml).await;
    let log = pg.dir.join("log");
    let failures = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("password authentication failed for user \"app\"")
            .count()
    };
    let t0 = Instant::now();
    let (first, _) = failed_login(pooler.port(), "app", "postgres").await;
    assert_eq!(sqlstate(&first), "28P01", "{first}");
    wait_until(Duration::from_secs(5), "server logs the failure", || {
        failures() >= 1
    })
    .await;

    let (second, took) = failed_login(pooler.port(), "app", "postgres").await;
    assert_eq!(sqlstate(&second), "28P01", "{second}");
    assert_eq!(
        db_message(&second),
        db_message(&first),
        "the server's own error, replayed"
    );
    assert!(took < Duration::from_secs(2), "not immediate: {took:?}");

    pg.sql("postgres", "ALTER ROLE app PASSWORD 'new-secret'");
    let (third, _) = failed_login(pooler.port(), "app", "postgres").await;
    if t0.elapsed() < RETRY - Duration::from_millis(300) {
        assert_eq!(
            sqlstate(&third),
            "28P01",
            "replayed within the interval: {third}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(failures(), 1, "the server saw a second login attempt");
    } else {
        eprintln!(
            "machine too slow to check the retry window ({:?})",
            t0.elapsed()
        );
    }

    tokio::time::sleep((RETRY + Duration::from_millis(300)).saturating_sub(t0.elapsed())).await;
    let c = within(
        HANG,
        "login",
        connect(pooler.port(), "app", None, "postgres"),
    )
    .await
    .unwrap_or_else(|e| panic!("login after the retry interval failed: {e}"));
    let user = scalar(&c, "SELECT current_user").await.unwrap();
    assert_eq!(user.as_deref(), Some("app"));
}

// ---------------------------------------------------------------------------------------------
// server_idle_timeout
// ---------------------------------------------------------------------------------------------

/// An idle server unused for server_idle_timeout is closed (min_pool_size 0), while its client
/// stays connected and gets a new server for its next query; without the timeout it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_idle_timeout_closes_unused_servers() {
    let pg = Postgres::start();
    pg.create_db("idle_db");
    let pooler = Pooler::start(&config(
        &pg,
        "idle_db",
        "pool_mode = \"transaction\"\nmin_pool_size = 0\nserver_idle_timeout = 500",
    ))
    .await;
    let c = pooler.connect("postgres", None, "idle_db").await;
    c.simple_query("BEGIN").await.unwrap();
    let pid = backend_pid(&c).await;
    assert_eq!(backends_on(&pg, "idle_db"), 1);
    c.simple_query("COMMIT").await.unwrap();
    wait_until(Duration::from_secs(6), "idle server closed", || {
        backends_on(&pg, "idle_db") == 0
    })
    .await;
    assert!(!c.is_closed(), "the client itself stays");
    let new_pid = backend_pid(&c).await;
    assert_ne!(new_pid, pid);

    // Control: with the default (10 minutes) the server stays.
    let pooler = Pooler::start(&config(&pg, "idle_db", "pool_mode = \"transaction\"")).await;
    wait_until(
        Duration::from_secs(6),
        "the first pooler's server closed",
        || backends_on(&pg, "idle_db") == 0,
    )
    .await;
    let c = pooler.connect("postgres", None, "idle_db").await;
    let pid = backend_pid(&c).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(backends_on(&pg, "idle_db"), 1);
    assert_eq!(backend_pid(&c).await, pid);
}

// ---------------------------------------------------------------------------------------------
// server_lifetime
// ---------------------------------------------------------------------------------------------

/// A server older than server_lifetime is replaced once idle (never in the middle of a
/// transaction); without a short lifetime the same server keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_lifetime_replaces_old_servers_when_idle() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(
        &pg,
        "postgres",
        "pool_mode = \"transaction\"\ndefault_pool_size = 1\nserver_lifetime = 1000",
    ))
    .await;
    let c = pooler.connect("postgres", None, "postgres").await;
    // Past its lifetime inside a transaction: kept until the transaction ends.
    c.simple_query("BEGIN").await.unwrap();
    let p1 = backend_pid(&c).await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(backend_pid(&c).await, p1, "server replaced mid-transaction");
    c.simple_query("COMMIT").await.unwrap();
    let p2 = backend_pid(&c).await;
    assert_ne!(p2, p1, "a server past its lifetime was reused");
    wait_until(Duration::from_secs(5), "old server closed", || {
        !backend_exists(&pg, p1)
    })
    .await;
    // Idle past its lifetime: replaced too.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let p3 = backend_pid(&c).await;
    assert_ne!(p3, p2, "an idle server past its lifetime was reused");

    // Control: the default lifetime (an hour) keeps the server.
    let pooler = Pooler::start(&config(
        &pg,
        "postgres",
        "pool_mode = \"transaction\"\ndefault_pool_size = 1",
    ))
    .await;
    let c = pooler.connect("postgres", None, "postgres").await;
    let p1 = backend_pid(&c).await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(backend_pid(&c).await, p1);
}

// ---------------------------------------------------------------------------------------------
// server_check_delay / server_check_query
// ---------------------------------------------------------------------------------------------

/// The check query runs on an idle server before reuse when it has been idle for
/// server_check_delay (0 = every time), and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_check_query_runs_before_reuse() {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE TABLE checks (n serial)");
    let count = || -> usize {
        pg.sql("postgres", "SELECT count(*) FROM checks")
            .parse()
            .unwrap()
    };
    let general = |delay: u64| {
        format!(
            "pool_mode = \"transaction\"\ndefault_pool_size = 1\nserver_check_delay = {delay}\n\
             server_check_query = \"INSERT INTO checks DEFAULT VALUES\""
        )
    };
    // Delay 0: every reuse is checked; the client's queries work and keep their server.
    let pooler = Pooler::start(&config(&pg, "postgres", &general(0))).await;
    let c = pooler.connect("postgres", None, "postgres").await;
    let before = count();
    let pid = backend_pid(&c).await;
    for _ in 0..4 {
        assert_eq!(
            backend_pid(&c).await,
            pid,
            "a passing check kept the server"
        );
    }
    assert!(
        count() >= before + 5,
        "5 reuses ran {} checks",
        count() - before
    );
    drop(c);
    drop(pooler);

    // A long delay: servers reused right away are not checked; one idle past it is.
    let pooler = Pooler::start(&config(&pg, "postgres", &general(1000))).await;
    let c = pooler.connect("postgres", None, "postgres").await;
    let before = count();
    for _ in 0..5 {
        assert_eq!(select_one(&c).await, 1);
    }
    assert_eq!(count(), before, "checked servers used moments ago");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(select_one(&c).await, 1);
    assert_eq!(count(), before + 1, "no check after server_check_delay");
}

/// `select 1` as the check with delay 0: queries work, on the same server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_check_query_select_1_keeps_servers() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(
        &pg,
        "postgres",
        "pool_mode = \"transaction\"\ndefault_pool_size = 1\nserver_check_delay = 0\n\
         server_check_query = \"select 1\"",
    ))
    .await;
    let c = pooler.connect("postgres", None, "postgres").await;
    // Session settings survive the check.
    c.simple_query("SET application_name = 'checked'")
        .await
        .unwrap();
    let pid = backend_pid(&c).await;
    for _ in 0..5 {
        assert_eq!(backend_pid(&c).await, pid);
    }
    let name = scalar(&c, "SHOW application_name").await.unwrap();
    assert_eq!(name.as_deref(), Some("checked"));
}

/// A check query that fails discards the server: the client's query is still answered, on a
/// fresh server, and discarded servers do not pile up on the server side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_check_query_failure_discards_the_server() {
    let pg = Postgres::start();
    pg.create_db("check_db");
    let pooler = Pooler::start(&config(
        &pg,
        "check_db",
        "pool_mode = \"transaction\"\ndefault_pool_size = 1\nserver_check_delay = 0\n\
         server_check_query = \"select 1/0\"",
    ))
    .await;
    let c = pooler.connect("postgres", None, "check_db").await;
    let mut pids = Vec::new();
    for _ in 0..4 {
        pids.push(backend_pid(&c).await);
    }
    assert_eq!(select_one(&c).await, 1);
    // The check did run (and failed) on the server.
    let log = std::fs::read_to_string(pg.dir.join("log")).unwrap_or_default();
    assert!(
        log.contains("division by zero"),
        "the check query never ran"
    );
    let mut distinct = pids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        pids.len(),
        "a server whose check query failed was reused: pids {pids:?}"
    );
    wait_until(Duration::from_secs(5), "discarded servers closed", || {
        backends_on(&pg, "check_db") <= 1
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// cancel_wait_timeout
// ---------------------------------------------------------------------------------------------

/// A cancel request whose server cannot be reached in time (the path to it stalls): the
/// requester's connection is closed after about cancel_wait_timeout instead of hanging, the
/// query runs on undisturbed, and its client keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_wait_timeout_bounds_a_stalled_cancel() {
    let pg = Postgres::start();
    let proxy = Proxy::start(pg.port, ProxyMode::Forward).await;
    let pooler = Pooler::start(&config_at(
        proxy.port,
        "postgres",
        "pool_mode = \"session\"\ndefault_pool_size = 2\ncancel_wait_timeout = 500",
    ))
    .await;
    let mut raw = within(
        HANG,
        "login",
        Raw::login(pooler.port(), "postgres", "postgres"),
    )
    .await
    .unwrap();
    let (pid, secret) = raw.key.expect("BackendKeyData");
    let marker = "/* stalled cancel */";
    let mut q = BytesMut::new();
    pgwire::encode::query(&mut q, &format!("SELECT pg_sleep(2) {marker}"));
    raw.send(&q).await;
    wait_until(Duration::from_secs(5), "query started", || {
        running(&pg, marker) == 1
    })
    .await;

    proxy.set(ProxyMode::Stall);
    let mut req = TcpStream::connect(pooler.addr).await.unwrap();
    let mut out = BytesMut::new();
    pgwire::encode::cancel_request(&mut out, pid, secret);
    let start = Instant::now();
    req.write_all(&out).await.unwrap();
    let mut buf = [0u8; 64];
    let n = within(HANG, "cancel requester closed", req.read(&mut buf))
        .await
        .unwrap_or(0);
    let took = start.elapsed();
    assert_eq!(n, 0, "a CancelRequest gets no answer, only a close");
    assert!(proxy.stalled() >= 1, "the cancel was never forwarded");
    // pgcorral's own give-up on a silent cancel peer is 5 s; cancel_wait_timeout is 500 ms.
    assert!(
        took < Duration::from_secs(4),
        "the requester waited {took:?}, not about cancel_wait_timeout"
    );

    // The cancel never arrived: the query finishes normally, and the session goes on.
    let mut rows = None;
    let mut err = None;
    loop {
        let (tag, body) = raw.read().await.expect("query answered");
        match tag {
            backend::DATA_ROW => rows = Some(body),
            backend::ERROR_RESPONSE => err = backend::ErrorFields::parse(&body),
            backend::READY_FOR_QUERY => break,
            _ => {}
        }
    }
    assert!(err.is_none(), "the query was disturbed: {err:?}");
    assert!(rows.is_some());
    let rows = raw.query("SELECT 7").await.unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("7"));
}
