//! The timeouts on the client's side, as a user sees them, against a real PostgreSQL:
//! query_wait_timeout (waiting for a server), query_timeout, client_idle_timeout,
//! idle_transaction_timeout, and client_login_timeout for logins that stall.

mod support;

use std::time::{Duration, Instant};

use bytes::BytesMut;
use pgwire::backend;
use support::raw::Raw;
use support::timeouts::*;
use support::*;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

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
        // Authenticated (trust): AuthenticationOk comes first, the refusal after it.
        let (tag, body) = raw.read().await.expect("AuthenticationOk");
        assert_eq!(tag, backend::AUTHENTICATION);
        assert_eq!(
            backend::authentication(&body).unwrap().0,
            0,
            "AuthenticationOk"
        );
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
