//! Every timeout in `[general]`, as a user sees it, against a real PostgreSQL: server connect and
//! login retry, waiting for a server, queries and clients that run or sit too long, slow
//! logins, server idle time, lifetime and health checks, and cancel forwarding that stalls.

mod support;

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use pgwire::backend;
use support::raw::Raw;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The most any single step may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// What a [`Proxy`] does with a connection it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum ProxyMode {
    /// Pass bytes both ways to the upstream server.
    Forward = 0,
    /// Accept and hold the connection: never read from it, never write, never close.
    Stall = 1,
    /// Accept and close at once.
    Reject = 2,
}

/// A TCP proxy in front of a PostgreSQL server whose behaviour for *new* connections can be
/// switched while the test runs; connections already forwarded keep working.
struct Proxy {
    port: u16,
    mode: Arc<AtomicU8>,
    accepted: Arc<AtomicUsize>,
    stalled: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to 127.0.0.1:`upstream` (unused unless some connection is forwarded).
    async fn start(upstream: u16, mode: ProxyMode) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode_flag = Arc::new(AtomicU8::new(mode as u8));
        let accepted = Arc::new(AtomicUsize::new(0));
        let stalled = Arc::new(AtomicUsize::new(0));
        let (m, a, s) = (mode_flag.clone(), accepted.clone(), stalled.clone());
        let task = tokio::spawn(async move {
            let mut held: Vec<TcpStream> = Vec::new();
            while let Ok((mut conn, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                match m.load(Ordering::SeqCst) {
                    0 => {
                        tokio::spawn(async move {
                            if let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)).await {
                                let _ = up.set_nodelay(true);
                                let _ = conn.set_nodelay(true);
                                let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
                            }
                        });
                    }
                    1 => {
                        s.fetch_add(1, Ordering::SeqCst);
                        held.push(conn);
                    }
                    _ => drop(conn),
                }
            }
        });
        Proxy {
            port,
            mode: mode_flag,
            accepted,
            stalled,
            task,
        }
    }

    /// A listener that accepts every connection and never answers.
    async fn silent() -> Proxy {
        Proxy::start(1, ProxyMode::Stall).await
    }

    fn set(&self, mode: ProxyMode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn stalled(&self) -> usize {
        self.stalled.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A config for database `db` served at 127.0.0.1:`port` (a server or a [`Proxy`]).
fn config_at(port: u16, db: &str, general: &str) -> String {
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\n{general}\n\n\
         [databases.{db}]\nhost = \"127.0.0.1\"\nport = {port}\n"
    )
}

/// A login through pgcorral that must fail: its error and how long it took.
async fn failed_login(port: u16, user: &str, db: &str) -> (tokio_postgres::Error, Duration) {
    let start = Instant::now();
    match within(HANG, "login", connect(port, user, None, db)).await {
        Ok(_) => panic!("login to {db} as {user} succeeded"),
        Err(e) => (e, start.elapsed()),
    }
}

/// Polls `cond` every 50 ms until it holds; fails the test after `limit`.
async fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
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

/// Backends currently running a query containing `marker`.
fn running(pg: &Postgres, marker: &str) -> usize {
    pg.sql(
        "postgres",
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%{marker}%' \
             AND state = 'active' AND pid <> pg_backend_pid()"
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

/// Waits for the connection to close (EOF); fails if it gets anything else but errors.
async fn expect_close(raw: &mut Raw, what: &str) -> Option<backend::ErrorFields> {
    let mut err = None;
    loop {
        match raw.read().await {
            None => return err,
            Some((backend::ERROR_RESPONSE, body)) => {
                err = backend::ErrorFields::parse(&body);
            }
            Some((tag, _)) => panic!("{what}: unexpected message {:?}", tag as char),
        }
    }
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
// query_wait_timeout
// ---------------------------------------------------------------------------------------------

/// Pool of one, held in a transaction: another client's query, and another client's login,
/// each fail with 57014 after about query_wait_timeout; once the holder commits, all is well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_wait_timeout_when_the_pool_is_busy() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(
        &pg,
        "postgres",
        "pool_mode = \"transaction\"\ndefault_pool_size = 1\nquery_wait_timeout = 500",
    ))
    .await;
    let a = pooler.connect("postgres", None, "postgres").await;
    let b = pooler.connect("postgres", None, "postgres").await;
    a.simple_query("BEGIN").await.unwrap();
    let start = Instant::now();
    let err = within(HANG, "waiting query", b.simple_query("SELECT 1"))
        .await
        .map(drop)
        .expect_err("no server was free");
    let took = start.elapsed();
    assert_eq!(sqlstate(&err), "57014", "{err}");
    assert!(db_message(&err).contains("query_wait_timeout"), "{err}");
    assert!(took >= Duration::from_millis(450), "{took:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    wait_until(
        Duration::from_secs(5),
        "waiting client disconnected",
        || b.is_closed(),
    )
    .await;

    // A login with startup parameters not seen before needs a server to apply them.
    let start = Instant::now();
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(pooler.port())
        .user("postgres")
        .dbname("postgres")
        .application_name("never seen");
    let err = within(HANG, "login", cfg.connect(tokio_postgres::NoTls))
        .await
        .map(drop)
        .expect_err("no server was free for the login");
    let took = start.elapsed();
    assert_eq!(sqlstate(&err), "57014", "{err}");
    assert!(took >= Duration::from_millis(450), "{took:?}");
    // One with the parameters an earlier login sent does not: their outcome is known.
    let known = pooler.connect("postgres", None, "postgres").await;
    drop(known);

    // The holder was never disturbed, and after it commits others get the server.
    let v = scalar(&a, "SELECT 41 + 1").await.unwrap();
    assert_eq!(v.as_deref(), Some("42"));
    a.simple_query("COMMIT").await.unwrap();
    let c = pooler.connect("postgres", None, "postgres").await;
    assert_eq!(select_one(&c).await, 1);
    assert_eq!(select_one(&a).await, 1);
}

// ---------------------------------------------------------------------------------------------
// query_timeout
// ---------------------------------------------------------------------------------------------

/// A query running past query_timeout: the client gets 57014 and is disconnected, the query is
/// cancelled on the server (its backend stops running it), and other clients go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_timeout_cancels_the_query_and_closes_the_client() {
    let pg = Postgres::start();
    for mode in ["transaction", "session"] {
        let pooler = Pooler::start(&config(
            &pg,
            "postgres",
            &format!("pool_mode = \"{mode}\"\ndefault_pool_size = 2\nquery_timeout = 500"),
        ))
        .await;
        let other = pooler.connect("postgres", None, "postgres").await;
        let a = pooler.connect("postgres", None, "postgres").await;
        // Shorter queries are untouched.
        a.simple_query("SELECT pg_sleep(0.1)").await.unwrap();
        let marker = format!("/* qt-{mode} */");
        let start = Instant::now();
        let err = within(
            HANG,
            "timed-out query",
            a.simple_query(&format!("SELECT pg_sleep(30) {marker}")),
        )
        .await
        .map(drop)
        .expect_err("query_timeout");
        let took = start.elapsed();
        assert_eq!(sqlstate(&err), "57014", "{mode}: {err}");
        assert!(db_message(&err).contains("query_timeout"), "{mode}: {err}");
        assert!(took >= Duration::from_millis(450), "{mode}: {took:?}");
        assert!(took < Duration::from_secs(8), "{mode}: {took:?}");
        wait_until(Duration::from_secs(5), "client disconnected", || {
            a.is_closed()
        })
        .await;
        wait_until(
            Duration::from_secs(5),
            &format!("{mode}: the timed-out query still runs on the server"),
            || running(&pg, &marker) == 0,
        )
        .await;
        assert_eq!(select_one(&other).await, 1);
        let c = pooler.connect("postgres", None, "postgres").await;
        assert_eq!(select_one(&c).await, 1);
    }
}

// ---------------------------------------------------------------------------------------------
// client_idle_timeout
// ---------------------------------------------------------------------------------------------

/// An idle client is disconnected with 57P05 after about client_idle_timeout, in transaction
/// and session mode; a client that keeps working, or runs a query longer than the timeout, is
/// not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_idle_timeout_disconnects_idle_clients_only() {
    let pg = Postgres::start();
    for mode in ["transaction", "session"] {
        let pooler = Pooler::start(&config(
            &pg,
            "postgres",
            &format!("pool_mode = \"{mode}\"\ndefault_pool_size = 4\nclient_idle_timeout = 500"),
        ))
        .await;
        // Timers start after the event measured from, so elapsed times are lower bounds.
        let start = Instant::now();
        let mut idle = within(
            HANG,
            "login",
            Raw::login(pooler.port(), "postgres", "postgres"),
        )
        .await
        .unwrap();
        let active = pooler.connect("postgres", None, "postgres").await;
        let worker = tokio::spawn(async move {
            let until = Instant::now() + Duration::from_millis(2000);
            while Instant::now() < until {
                assert_eq!(select_one(&active).await, 1);
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            // A query running longer than the idle timeout is activity, not idleness.
            active.simple_query("SELECT pg_sleep(1)").await.unwrap();
            assert_eq!(select_one(&active).await, 1);
            active
        });
        let err = idle.expect_error_and_close().await;
        let took = start.elapsed();
        assert_eq!(err.code, "57P05", "{mode}: {err:?}");
        assert_eq!(err.severity, "FATAL", "{mode}");
        assert!(took >= Duration::from_millis(450), "{mode}: {took:?}");
        let active = within(HANG, "active client", worker).await.unwrap();
        assert!(!active.is_closed(), "{mode}: the active client was closed");
        assert_eq!(select_one(&active).await, 1);
    }
}

/// A client that already ran a query is disconnected once idle, in both modes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_idle_timeout_after_a_query() {
    let pg = Postgres::start();
    for mode in ["transaction", "session"] {
        let pooler = Pooler::start(&config(
            &pg,
            "postgres",
            &format!("pool_mode = \"{mode}\"\nclient_idle_timeout = 500"),
        ))
        .await;
        let mut raw = within(
            HANG,
            "login",
            Raw::login(pooler.port(), "postgres", "postgres"),
        )
        .await
        .unwrap();
        let start = Instant::now();
        raw.query("SELECT 1").await.unwrap();
        let err = raw.expect_error_and_close().await;
        assert_eq!(err.code, "57P05", "{mode}: {err:?}");
        assert!(start.elapsed() >= Duration::from_millis(450), "{mode}");
    }
}

// ---------------------------------------------------------------------------------------------
// idle_transaction_timeout
// ---------------------------------------------------------------------------------------------

/// A client idle inside a transaction is disconnected with 25P03; its transaction is rolled
/// back, and its server connection serves the next client, clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_transaction_timeout_rolls_back_and_reuses_the_server() {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE TABLE t (i int)");
    for mode in ["transaction", "session"] {
        let pooler = Pooler::start(&config(
            &pg,
            "postgres",
            &format!(
                "pool_mode = \"{mode}\"\ndefault_pool_size = 1\nidle_transaction_timeout = 500"
            ),
        ))
        .await;
        let mut raw = within(
            HANG,
            "login",
            Raw::login(pooler.port(), "postgres", "postgres"),
        )
        .await
        .unwrap();
        let start = Instant::now();
        let rows = raw
            .query("BEGIN; INSERT INTO t VALUES (1); SELECT pg_backend_pid()")
            .await
            .unwrap();
        let pid: i32 = rows[0][0].as_deref().unwrap().parse().unwrap();
        let err = raw.expect_error_and_close().await;
        let took = start.elapsed();
        assert_eq!(err.code, "25P03", "{mode}: {err:?}");
        assert_eq!(err.severity, "FATAL", "{mode}");
        assert!(took >= Duration::from_millis(450), "{mode}: {took:?}");
        assert!(took < Duration::from_secs(8), "{mode}: {took:?}");

        wait_until(
            Duration::from_secs(5),
            &format!("{mode}: backend left idle in transaction"),
            || {
                pg.sql(
                    "postgres",
                    &format!(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid} \
                         AND state LIKE 'idle in transaction%'"
                    ),
                ) == "0"
            },
        )
        .await;
        assert_eq!(pg.sql("postgres", "SELECT count(*) FROM t"), "0");

        let next = within(
            HANG,
            "next client",
            pooler.connect("postgres", None, "postgres"),
        )
        .await;
        assert_eq!(
            backend_pid(&next).await,
            pid,
            "{mode}: the server was not reused"
        );
        let txid = scalar(&next, "SELECT txid_current_if_assigned()")
            .await
            .unwrap();
        assert_eq!(txid, None, "{mode}: still inside the abandoned transaction");
        let n = scalar(&next, "SELECT count(*) FROM t").await.unwrap();
        assert_eq!(n.as_deref(), Some("0"), "{mode}");
        // A transaction that keeps working is not idle.
        next.simple_query("BEGIN").await.unwrap();
        for _ in 0..6 {
            assert_eq!(select_one(&next).await, 1);
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        next.simple_query("INSERT INTO t VALUES (2); COMMIT")
            .await
            .unwrap();
        assert_eq!(pg.sql("postgres", "SELECT count(*) FROM t"), "1");
        pg.sql("postgres", "TRUNCATE t");
    }
}

// ---------------------------------------------------------------------------------------------
// client_login_timeout
// ---------------------------------------------------------------------------------------------

/// Connects and sends `bytes` (maybe nothing), then waits: pgcorral must close the connection
/// after about client_login_timeout. Returns how long it took and any error it sent.
async fn stalled_login(port: u16, bytes: &[u8]) -> (Duration, Option<backend::ErrorFields>) {
    let start = Instant::now();
    let mut raw = Raw::connect(port).await;
    if !bytes.is_empty() {
        raw.send(bytes).await;
    }
    let err = expect_close(&mut raw, "stalled login").await;
    (start.elapsed(), err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_login_timeout_closes_stalled_logins() {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE app LOGIN");
    const LOGIN: u64 = 1500;
    let general = format!("client_login_timeout = {LOGIN}");
    let trusting = Pooler::start(&config(&pg, "postgres", &general)).await;
    let scram = Pooler::start(&format!(
        "{}\n[users.app]\npassword = \"app-secret\"\n",
        config(&pg, "postgres", &general).replace("\"trust\"", "\"scram-sha-256\"")
    ))
    .await;

    // Half a startup packet: says 40 bytes, sends 10.
    let half = b"\0\0\0\x28\0\x03\0\0us".to_vec();
    let nothing = async { stalled_login(trusting.port(), b"").await };
    let partial = async { stalled_login(trusting.port(), &half).await };
    // Stops answering once the server asked for a SCRAM exchange.
    let mid_auth = async {
        let start = Instant::now();
        let mut raw = Raw::connect(scram.port()).await;
        let mut out = BytesMut::new();
        pgwire::encode::startup(&mut out, &[("user", "app"), ("database", "postgres")]);
        raw.send(&out).await;
        let (tag, body) = raw.read().await.expect("an authentication request");
        assert_eq!(tag, backend::AUTHENTICATION);
        let (code, _) = backend::authentication(&body).unwrap();
        assert_eq!(code, 10, "AuthenticationSASL");
        let err = expect_close(&mut raw, "stalled SCRAM login").await;
        (start.elapsed(), err)
    };
    // Authenticated, then waiting for a server that never answers its login.
    let silent = Proxy::silent().await;
    let waiting = Pooler::start(&config_at(silent.port, "postgres", &general)).await;
    let no_server = async {
        let start = Instant::now();
        let mut raw = Raw::connect(waiting.port()).await;
        let mut out = BytesMut::new();
        pgwire::encode::startup(&mut out, &[("user", "postgres"), ("database", "postgres")]);
        raw.send(&out).await;
        let err = expect_close(&mut raw, "login waiting for a server").await;
        (start.elapsed(), err)
    };
    let results = tokio::join!(nothing, partial, mid_auth, no_server);
    // Before the client has authenticated, PostgreSQL's authentication_timeout closes the
    // connection without a word; after, only pgcorral has a timeout, and says so.
    for (what, (took, err), told) in [
        ("nothing sent", results.0, false),
        ("half a startup packet", results.1, false),
        ("stalled SCRAM exchange", results.2, false),
        ("authenticated, no server", results.3, true),
    ] {
        assert!(
            took >= Duration::from_millis(LOGIN - 50),
            "{what}: closed before the timeout: {took:?}"
        );
        assert!(took < Duration::from_secs(9), "{what}: {took:?}");
        match err {
            Some(e) if told => {
                assert_eq!((e.severity.as_str(), e.code.as_str()), ("FATAL", "57P05"));
                assert!(e.message.contains("client_login_timeout"), "{what}: {e:?}");
            }
            None if !told => {}
            other => panic!("{what}: {other:?}"),
        }
    }
    // Logins that complete in time are unaffected.
    let c = trusting.connect("postgres", None, "postgres").await;
    assert_eq!(select_one(&c).await, 1);
    let c = scram.connect("app", Some("app-secret"), "postgres").await;
    assert_eq!(select_one(&c).await, 1);
    // A logged-in client idle for longer than client_login_timeout stays connected.
    tokio::time::sleep(Duration::from_millis(LOGIN + 300)).await;
    assert_eq!(select_one(&c).await, 1);
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
