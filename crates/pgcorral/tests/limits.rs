//! Limits and failures a user can hit: max_client_conn, unknown databases, dead or silent servers, servers dying, protocol garbage, the pool cap, and abandoned transactions.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use support::raw::{backends, Raw};
use support::*;

fn cfg(pg: &Postgres, general: &str) -> String {
    config(pg, "postgres", general)
}

/// Connect error expected: returns it.
async fn refused(port: u16, user: &str, db: &str) -> tokio_postgres::Error {
    match within(
        Duration::from_secs(10),
        "refused login",
        connect(port, user, None, db),
    )
    .await
    {
        Ok(_) => panic!("login to {db} as {user} succeeded"),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_client_conn_refuses_extra_clients() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "max_client_conn = 3")).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(pooler.connect("postgres", None, "postgres").await);
    }
    for _ in 0..2 {
        let err = refused(pooler.port(), "postgres", "postgres").await;
        assert_eq!(sqlstate(&err), "53300", "{err}");
        assert_eq!(err.as_db_error().unwrap().severity(), "FATAL");
    }
    let out = output({
        let mut c = psql_cmd(pooler.port(), "postgres", "postgres", None);
        c.args(["-c", "SELECT 1"]);
        c
    });
    assert!(!out.status.success());
    assert!(stderr(&out).contains("max_client_conn"), "{}", stderr(&out));
    for c in &clients {
        assert_eq!(select_one(c).await, 1);
    }
    // A place freed by a leaving client can be taken again.
    drop(clients.pop());
    let start = Instant::now();
    let c = loop {
        match connect(pooler.port(), "postgres", None, "postgres").await {
            Ok(c) => break c,
            Err(e) => {
                assert_eq!(sqlstate(&e), "53300", "{e}");
                assert!(start.elapsed() < Duration::from_secs(3), "place not freed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(select_one(&c).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_database_is_refused() {
    let pg = Postgres::start();
    pg.create_db("other");
    let pooler = Pooler::start(&cfg(&pg, "")).await;
    // "other" exists on the server, but not in pgcorral's configuration.
    for db in ["other", "nope"] {
        let err = refused(pooler.port(), "postgres", db).await;
        assert_eq!(sqlstate(&err), "3D000", "{err}");
        assert!(db_message(&err).contains(db), "{err}");
    }
    assert!(pooler
        .services
        .pools
        .all()
        .iter()
        .all(|p| p.counts().0 == 0));
    let c = pooler.connect("postgres", None, "postgres").await;
    assert_eq!(select_one(&c).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcard_routes_any_database_and_relays_the_servers_3d000() {
    let pg = Postgres::start();
    pg.create_db("other db");
    pg.create_db("third");
    let toml = format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\n\n[databases.\"*\"]\nhost = \"127.0.0.1\"\nport = {}\n",
        pg.port
    );
    for mode in ["transaction", "session"] {
        let pooler = Pooler::start(
            &toml.replace("auth_type", &format!("pool_mode = \"{mode}\"\nauth_type")),
        )
        .await;
        for db in ["other db", "third", "postgres"] {
            let c = pooler.connect("postgres", None, db).await;
            let name = scalar(&c, "SELECT current_database()").await.unwrap();
            assert_eq!(name.as_deref(), Some(db));
        }
        let err = refused(pooler.port(), "postgres", "doesnotexist").await;
        assert_eq!(sqlstate(&err), "3D000", "{err}");
        assert_eq!(
            db_message(&err),
            "database \"doesnotexist\" does not exist",
            "the server's own error"
        );
    }
}

/// A client of a database whose server cannot be reached gets 08001 promptly, every time.
async fn server_unreachable(port: u16, min: Duration) {
    for mode in ["transaction", "session"] {
        let toml = format!(
            "[general]\nlisten_port = 0\nauth_type = \"trust\"\nserver_connect_timeout = 1000\n\
             server_login_retry = 0\nserver_unavailable_wait = 0\npool_mode = \"{mode}\"\ndefault_pool_size = 1\n\n\
             [databases.postgres]\nhost = \"127.0.0.1\"\nport = {port}\n"
        );
        let pooler = Pooler::start(&toml).await;
        // Twice: a failed connect must give its pool slot back (pool_size = 1). With
        // server_login_retry = 0 each client really tries (tests/timeouts_server.rs covers the retry).
        for _ in 0..2 {
            let start = Instant::now();
            let err = refused(pooler.port(), "postgres", "postgres").await;
            let took = start.elapsed();
            assert!(took < Duration::from_secs(3), "{mode}: took {took:?}");
            assert!(took >= min, "{mode}: took {took:?}");
            assert_eq!(sqlstate(&err), "08001", "{mode}: {err}");
            assert!(
                db_message(&err).contains(&format!("127.0.0.1:{port}")),
                "names the server: {err}"
            );
        }
        assert!(pooler
            .services
            .pools
            .all()
            .iter()
            .all(|p| p.counts() == (0, 0, 0)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_refusing_connections_fails_fast() {
    server_unreachable(free_port(), Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_that_never_answers_fails_within_connect_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let n = accepted.clone();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            n.fetch_add(1, Ordering::SeqCst);
            held.push(s);
        }
    });
    server_unreachable(port, Duration::from_millis(900)).await;
    assert!(accepted.load(Ordering::SeqCst) >= 4, "TCP was accepted");
    silent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_dying_mid_query_is_reported_and_never_reused() {
    let pg = Postgres::start();
    let admin = direct(&pg).await;
    for mode in ["transaction", "session"] {
        let pooler = Pooler::start(&cfg(
            &pg,
            &format!("pool_mode = \"{mode}\"\ndefault_pool_size = 1"),
        ))
        .await;
        let victim = pooler.connect("postgres", None, "postgres").await;
        let pid = backend_pid(&victim).await;
        let query = tokio::spawn(async move { victim.simple_query("SELECT pg_sleep(30)").await });
        // Wait for the sleep to run on that server.
        let start = Instant::now();
        while admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query LIKE 'SELECT pg_sleep%'",
                &[&pid],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 0
        {
            assert!(start.elapsed() < Duration::from_secs(5));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        admin
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
        let err = within(Duration::from_secs(3), "killed query", query)
            .await
            .unwrap()
            .map(drop)
            .expect_err("query on a terminated server failed");
        assert_eq!(sqlstate(&err), "57P01", "{mode}: {err}");
        assert_eq!(
            db_message(&err),
            "terminating connection due to administrator command"
        );
        // pool_size = 1: the next client works, on a new server.
        let next = within(
            Duration::from_secs(5),
            "next client",
            pooler.connect("postgres", None, "postgres"),
        )
        .await;
        let new_pid = backend_pid(&next).await;
        assert_ne!(new_pid, pid, "{mode}: a terminated server was reused");
        assert_eq!(select_one(&next).await, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_while_idle_costs_a_transaction_mode_client_nothing() {
    let pg = Postgres::start();
    let admin = direct(&pg).await;
    let pooler = Pooler::start(&cfg(
        &pg,
        "pool_mode = \"transaction\"\ndefault_pool_size = 1",
    ))
    .await;
    let client = pooler.connect("postgres", None, "postgres").await;
    let mut pid = backend_pid(&client).await;
    for round in 0..3 {
        admin
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let new_pid: i32 = match scalar(&client, "SELECT pg_backend_pid()").await {
            Ok(pid) => pid.unwrap().parse().unwrap(),
            Err(e) => panic!("round {round}: a query after an idle server died failed: {e}"),
        };
        assert_ne!(new_pid, pid);
        pid = new_pid;
    }
}

/// Sends `bytes` after login (or as the startup packet when `login` is false) and expects a
/// 08P01 ErrorResponse and the connection closed; then a normal client must still work.
async fn garbage(pooler: &Pooler, login: bool, bytes: &[u8], what: &str) {
    let mut raw = if login {
        Raw::login(pooler.port(), "postgres", "postgres")
            .await
            .unwrap()
    } else {
        Raw::connect(pooler.port()).await
    };
    raw.send_lossy(bytes).await;
    let err = within(Duration::from_secs(5), what, raw.expect_error_and_close()).await;
    assert_eq!(err.code, "08P01", "{what}: {err:?}");
    assert_eq!(err.severity, "FATAL", "{what}");
    let c = pooler.connect("postgres", None, "postgres").await;
    assert_eq!(select_one(&c).await, 1, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_from_a_client_disconnects_only_that_client() {
    let pg = Postgres::start();
    for mode in ["transaction", "session"] {
        let pooler = Pooler::start(&cfg(
            &pg,
            &format!("pool_mode = \"{mode}\"\ndefault_pool_size = 2"),
        ))
        .await;
        // A bystander in the middle of a session is not disturbed.
        let bystander = pooler.connect("postgres", None, "postgres").await;
        bystander
            .batch_execute("CREATE TEMP TABLE IF NOT EXISTS x(i int)")
            .await
            .unwrap();

        let after_login: [(&[u8], &str); 5] = [
            (b"Q\0\0\0\x02", "length below 4"),
            (b"Q\xff\xff\xff\xff", "negative length"),
            (b"?\0\0\0\x04", "unknown message type"),
            (b"Q\x7f\xff\xff\xff", "2 GB length"),
            (b"Q\x80\0\0\0", "2^31 length"),
        ];
        for (bytes, what) in after_login {
            garbage(&pooler, true, bytes, &format!("{mode}: {what}")).await;
        }
        // Startup packets PostgreSQL closes on without a word (a bad length, an HTTP request)
        // or answers otherwise are in tests/startup.rs.
        let startup: [(&[u8], &str); 1] = [(
            b"\0\0\0\x0e\0\x03\0\0user\0x",
            "startup parameters without terminator",
        )];
        for (bytes, what) in startup {
            garbage(&pooler, false, bytes, &format!("{mode}: {what}")).await;
        }
        assert_eq!(select_one(&bystander).await, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_size_caps_server_connections_across_worker_threads() {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE app LOGIN");
    for mode in ["transaction", "session"] {
        let toml = cfg(
            &pg,
            &format!("pool_mode = \"{mode}\"\ndefault_pool_size = 3\nworkers = 4"),
        );
        let pooler = PoolerProcess::start(&toml);
        let port = pooler.port;
        let admin = direct(&pg).await;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let watcher = tokio::spawn(async move {
            let mut max = 0i64;
            while !flag.load(Ordering::SeqCst) {
                let n: i64 = admin
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' AND datname = 'postgres'",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                max = max.max(n);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            max
        });
        let start = Instant::now();
        let clients: Vec<_> = (0..20)
            .map(|i| {
                tokio::spawn(async move {
                    let c = connect(port, "app", None, "postgres")
                        .await
                        .unwrap_or_else(|e| panic!("client {i}: {e}"));
                    c.simple_query("SELECT pg_sleep(0.2)")
                        .await
                        .unwrap_or_else(|e| panic!("client {i}: {e}"));
                })
            })
            .collect();
        for c in clients {
            within(Duration::from_secs(10), "client", c).await.unwrap();
        }
        let took = start.elapsed();
        done.store(true, Ordering::SeqCst);
        let max = watcher.await.unwrap();
        assert!(max <= 3, "{mode}: server showed {max} backends for app");
        assert!(max >= 2, "{mode}: the watcher saw at most {max} backends");
        // 20 queries of 0.2 s on 3 connections need at least 7 rounds.
        assert!(took >= Duration::from_millis(1300), "{mode}: {took:?}");
        drop(pooler);
        // The killed pooler's server connections go away before the next round counts.
        let start = Instant::now();
        while backends(&pg, "app", "postgres") > 0 {
            assert!(start.elapsed() < Duration::from_secs(5));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A client leaves mid-transaction (with Terminate, or by just closing its socket when
/// `raw_close`): its insert is rolled back and the next client gets the same server, clean.
async fn abandoned_transaction(raw_close: bool) {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE TABLE t (i int)");
    for mode in ["transaction", "session"] {
        let pooler = Pooler::start(&cfg(
            &pg,
            &format!("pool_mode = \"{mode}\"\ndefault_pool_size = 1"),
        ))
        .await;
        let pid_before: i32 = if raw_close {
            let mut raw = Raw::login(pooler.port(), "postgres", "postgres")
                .await
                .unwrap();
            let rows = raw
                .query("BEGIN; INSERT INTO t VALUES (1); SELECT pg_backend_pid()")
                .await
                .unwrap();
            // Dropped without Terminate: the socket just closes.
            drop(raw);
            rows[0][0].as_deref().unwrap().parse().unwrap()
        } else {
            let a = pooler.connect("postgres", None, "postgres").await;
            a.batch_execute("BEGIN; INSERT INTO t VALUES (1)")
                .await
                .unwrap();
            let pid = backend_pid(&a).await;
            drop(a); // tokio-postgres sends Terminate
            pid
        };
        let b = within(
            Duration::from_secs(5),
            "next client",
            pooler.connect("postgres", None, "postgres"),
        )
        .await;
        let q = |sql: &'static str| {
            let b = &b;
            async move {
                within(Duration::from_secs(5), sql, scalar(b, sql))
                    .await
                    .unwrap()
            }
        };
        let count = q("SELECT count(*) FROM t").await;
        assert_eq!(count.as_deref(), Some("0"), "{mode}: the insert is visible");
        assert_eq!(
            q("SELECT txid_current_if_assigned()").await,
            None,
            "{mode}: still inside the abandoned transaction"
        );
        let pid = q("SELECT pg_backend_pid()").await;
        assert_eq!(
            pid,
            Some(pid_before.to_string()),
            "{mode}: the server was not reused"
        );
        let iso = q("SHOW transaction_isolation").await;
        assert_eq!(iso.as_deref(), Some("read committed"));
        assert_eq!(pg.sql("postgres", "SELECT count(*) FROM t"), "0");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_leaving_mid_transaction_with_terminate() {
    abandoned_transaction(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_vanishing_mid_transaction() {
    abandoned_transaction(true).await;
}

/// A client that vanishes while its query runs: pgcorral cancels the query before closing that
/// server connection, so the backend does not keep running it for nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_clients_query_is_cancelled() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "")).await;
    let mut raw = Raw::login(pooler.port(), "postgres", "postgres")
        .await
        .unwrap();
    let mut q = BytesMut::new();
    pgwire::encode::query(&mut q, "SELECT pg_sleep(60) /* vanishing */");
    raw.send(&q).await;
    let running = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%/* vanishing */' AND pid <> pg_backend_pid()";
    let start = Instant::now();
    while pg.sql("postgres", running) != "1" {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "query never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(raw);
    let start = Instant::now();
    while pg.sql("postgres", running) != "0" {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "the abandoned query is still running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// GSSENCRequest and SSLRequest are each declined with 'N' (no TLS yet), and the client may go
/// on with a plain StartupMessage on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encryption_requests_are_declined_then_startup_proceeds() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "")).await;
    let mut s = tokio::net::TcpStream::connect(pooler.addr).await.unwrap();
    for code in [
        pgwire::startup::GSSENC_REQUEST_CODE,
        pgwire::startup::SSL_REQUEST_CODE,
    ] {
        let mut req = 8i32.to_be_bytes().to_vec();
        req.extend_from_slice(&code.to_be_bytes());
        s.write_all(&req).await.unwrap();
        let mut answer = [0u8; 1];
        s.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"N");
    }
    let mut out = BytesMut::new();
    pgwire::encode::startup(&mut out, &[("user", "postgres"), ("database", "postgres")]);
    pgwire::encode::query(&mut out, "SELECT 1");
    s.write_all(&out).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"Z\0\0\0\x05I") || !got.windows(2).any(|w| w == b"C\0") {
        let n = within(Duration::from_secs(5), "reply", s.read(&mut buf))
            .await
            .unwrap();
        assert!(n > 0, "connection closed");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got[0], b'R', "first reply is AuthenticationOk");
}

/// One server, clients spread over several worker threads: the server moves to whichever
/// worker's client holds it, and every query still lands on that same backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_serves_clients_on_every_worker() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "workers = 4\ndefault_pool_size = 1")).await;
    assert_eq!(pooler.services.balance.len(), 4);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(pooler.connect("postgres", None, "postgres").await);
    }
    let first = backend_pid(&clients[0]).await;
    for round in 0..25 {
        for c in &clients {
            assert_eq!(backend_pid(c).await, first, "round {round}");
        }
    }
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|c| {
            tokio::spawn(async move {
                for _ in 0..50 {
                    select_one(&c).await;
                }
            })
        })
        .collect();
    for t in tasks {
        within(Duration::from_secs(20), "concurrent clients", t)
            .await
            .unwrap();
    }
    let others = pg.sql(
        "postgres",
        "SELECT count(*) FROM pg_stat_activity WHERE datname = 'postgres' \
         AND usename = 'postgres' AND pid <> pg_backend_pid()",
    );
    assert_eq!(others, "1", "more than the pool's one server");
}

/// Clients go to the lowest worker that is not busy; when it is busy, new clients go elsewhere
/// and idle ones move at a transaction boundary, taking nothing with them but their socket:
/// their queries keep working and land on the one pooled server, which follows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_move_off_a_busy_worker() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "workers = 2\ndefault_pool_size = 1")).await;
    let balance = &pooler.services.balance;
    balance.freeze_loads(&[0, 0]);
    assert_eq!(balance.pick(), Some(0));
    let a = pooler.connect("postgres", None, "postgres").await;
    let pid = backend_pid(&a).await;

    // Counted before the load changes: `a` may reach its transaction boundary (and move) only
    // after the freeze below, since its answer reaches this test before its task loops.
    let before = balance.moves();
    balance.freeze_loads(&[950, 0]);
    assert_eq!(balance.pick(), Some(1), "new clients avoid the busy worker");
    let b = pooler.connect("postgres", None, "postgres").await;
    for _ in 0..20 {
        assert_eq!(backend_pid(&a).await, pid);
        assert_eq!(backend_pid(&b).await, pid);
        tokio::time::sleep(Duration::from_millis(6)).await;
    }
    assert!(
        balance.moves() > before,
        "the idle client on the busy worker moved"
    );

    // Back and forth under concurrent use.
    balance.freeze_loads(&[0, 950]);
    let tasks: Vec<_> = [a, b]
        .into_iter()
        .map(|c| {
            tokio::spawn(async move {
                for _ in 0..100 {
                    select_one(&c).await;
                }
                c
            })
        })
        .collect();
    for t in tasks {
        let c = within(Duration::from_secs(20), "clients", t).await.unwrap();
        assert_eq!(backend_pid(&c).await, pid);
    }
}

/// A session-mode client moves off a busy worker together with its server, at an idle answer:
/// the session it had (backend, temporary table, setting, prepared statement) is all there on
/// the other worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_clients_move_with_their_server() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "workers = 2\npool_mode = \"session\"")).await;
    let balance = &pooler.services.balance;
    balance.freeze_loads(&[0, 0]);
    let a = pooler.connect("postgres", None, "postgres").await;
    let pid = backend_pid(&a).await;
    a.batch_execute(
        "CREATE TEMP TABLE kept (n int); INSERT INTO kept VALUES (41); \
         SET application_name = 'moved'",
    )
    .await
    .unwrap();
    let plus_one = a.prepare("SELECT n + $1 FROM kept").await.unwrap();

    let before = balance.moves();
    balance.freeze_loads(&[950, 0]);
    for _ in 0..20 {
        assert_eq!(backend_pid(&a).await, pid, "the same server after a move");
        tokio::time::sleep(Duration::from_millis(6)).await;
    }
    assert!(
        balance.moves() > before,
        "the session client on the busy worker moved"
    );
    let row = a.query_one(&plus_one, &[&1i32]).await.unwrap();
    assert_eq!(
        row.get::<_, i32>(0),
        42,
        "temp table and prepared statement kept"
    );
    assert_eq!(
        scalar(&a, "SHOW application_name")
            .await
            .unwrap()
            .as_deref(),
        Some("moved")
    );
}

/// Session-mode clients keep moving with their servers while they run queries, some pipelined
/// (the busy worker flips every 2 ms): every query gets its own answer from the client's own
/// backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_queries_survive_constant_migration() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "workers = 3\npool_mode = \"session\"")).await;
    let flipper = BusyFlipper::start(&pooler);
    let mut tasks = Vec::new();
    for n in 0..6i64 {
        let c = pooler.connect("postgres", None, "postgres").await;
        let pid = backend_pid(&c).await;
        tasks.push(tokio::spawn(async move {
            for i in 0..150i64 {
                pipelined_pair(&c, n * 1000 + i).await;
                if i % 10 == 0 {
                    assert_eq!(backend_pid(&c).await, pid);
                }
            }
        }));
    }
    for t in tasks {
        within(Duration::from_secs(60), "migrating session clients", t)
            .await
            .unwrap();
    }
    flipper.stop_after_moves(10).await;
}

/// Makes one of a pooler's three workers busy in turn, a new one every 2 ms, so that clients
/// keep moving.
struct BusyFlipper {
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
    services: pgcorral::Services,
}

impl BusyFlipper {
    fn start(pooler: &Pooler) -> BusyFlipper {
        let services = pooler.services.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = {
            let (stop, services) = (stop.clone(), services.clone());
            tokio::spawn(async move {
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let mut loads = [0u32; 3];
                    loads[i % 3] = 990;
                    services.balance.freeze_loads(&loads);
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        };
        BusyFlipper {
            stop,
            task,
            services,
        }
    }

    /// Stops flipping; the clients must have moved more than `min` times.
    async fn stop_after_moves(self, min: u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        let moves = self.services.balance.moves();
        assert!(moves > min, "only {moves} moves");
    }
}

/// Two statements pipelined in one Query: both answered, in order.
async fn pipelined_pair(c: &tokio_postgres::Client, want: i64) {
    let rows = c
        .simple_query(&format!("SELECT {want}; SELECT {want} + 1"))
        .await
        .unwrap();
    let vals: Vec<i64> = rows
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0)?.parse().ok(),
            _ => None,
        })
        .collect();
    assert_eq!(vals, vec![want, want + 1]);
}

/// Clients keep moving between workers (the busy worker flips every 2 ms) while they run
/// queries, some pipelined: every query still gets its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_survive_constant_migration() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "workers = 3\ndefault_pool_size = 2")).await;
    let flipper = BusyFlipper::start(&pooler);
    let mut tasks = Vec::new();
    for n in 0..8i64 {
        let c = pooler.connect("postgres", None, "postgres").await;
        tasks.push(tokio::spawn(async move {
            for i in 0..150i64 {
                pipelined_pair(&c, n * 1000 + i).await;
            }
        }));
    }
    for t in tasks {
        within(Duration::from_secs(60), "migrating clients", t)
            .await
            .unwrap();
    }
    flipper.stop_after_moves(10).await;
}

/// Answers small and large come out whole and in order whether the workers hand each turn's
/// writes to io_uring together (the default) or send each on its own (`io_uring = false`),
/// with several clients sharing a worker and its batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_whole_with_and_without_io_uring() {
    let pg = Postgres::start();
    for io_uring in [true, false] {
        let pooler = Pooler::start(&cfg(
            &pg,
            &format!("workers = 1\ndefault_pool_size = 4\nio_uring = {io_uring}"),
        ))
        .await;
        let mut tasks = Vec::new();
        for n in 0..8i64 {
            let c = pooler.connect("postgres", None, "postgres").await;
            tasks.push(tokio::spawn(async move {
                for i in 0..100i64 {
                    let want = n * 1000 + i;
                    pipelined_pair(&c, want).await;
                    if i % 25 == 0 {
                        // Larger than one batched write, and many rows of 1 kB.
                        let big: String = c
                            .query_one("SELECT repeat(md5($1::text), 20000)", &[&want.to_string()])
                            .await
                            .unwrap()
                            .get(0);
                        assert_eq!(big.len(), 640_000);
                        let rows = c
                            .query(
                                "SELECT g, repeat('y', 1000) FROM generate_series(1, 3000) g",
                                &[],
                            )
                            .await
                            .unwrap();
                        assert_eq!(rows.len(), 3000);
                        assert_eq!(rows[2999].get::<_, i32>(0), 3000);
                    }
                }
            }));
        }
        for t in tasks {
            within(Duration::from_secs(60), "clients", t).await.unwrap();
        }
    }
}
