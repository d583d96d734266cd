//! PostgreSQL reached through its Unix socket (a database's `host` is a directory, as in
//! libpq): queries in both protocols, pgbench through a transaction pool, cancel requests sent
//! over the socket, SHOW SERVERS' "unix" address, TLS settings that do not apply to a socket,
//! and a missing socket reported to the client.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::*;

/// A server listening on a socket directory of its own (and on TCP, for the test's psql).
fn pg_on_socket() -> (Postgres, PathBuf) {
    let dir = socket_dir();
    let pg = Postgres::start_with(PgOptions {
        conf: format!("unix_socket_directories = '{}'", dir.display()),
        ..Default::default()
    });
    (pg, dir)
}

fn cfg(port: u16, dir: &Path, general: &str) -> String {
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\nadmin_users = [\"postgres\"]\n\
         {general}\n\n[databases.postgres]\nhost = \"{}\"\nport = {port}\n",
        dir.display()
    )
}

/// Queries reach the server over its socket (`inet_server_addr()` is NULL there), in the
/// simple and the extended protocol, with `server_tls_sslmode = "require"` not applying to a
/// socket (as libpq); SHOW SERVERS lists the connection as "unix" with the server's port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_go_over_the_servers_socket() {
    let (pg, dir) = pg_on_socket();
    let general = "pool_mode = \"transaction\"\ndefault_pool_size = 2\n\
                   server_tls_sslmode = \"require\"";
    let p = Pooler::start(&cfg(pg.port, &dir, general)).await;
    let c = p.connect("postgres", None, "postgres").await;
    let row = c
        .query_one(
            "SELECT inet_server_addr() IS NULL, current_setting('port')::int, $1::int + 1",
            &[&41i32],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "the server saw a TCP connection");
    assert_eq!(row.get::<_, i32>(1), pg.port as i32);
    assert_eq!(row.get::<_, i32>(2), 42);
    let simple = c
        .simple_query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .await
        .unwrap();
    let ssl = simple.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(ssl.as_deref(), Some("f"), "no TLS over a socket");

    let admin = p.connect("postgres", None, "pgbouncer").await;
    let msgs = admin.simple_query("SHOW SERVERS").await.unwrap();
    let servers: Vec<_> = msgs
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some((
                r.get("addr").unwrap_or_default().to_string(),
                r.get("port").unwrap_or_default().to_string(),
                r.get("local_addr").unwrap_or_default().to_string(),
            )),
            _ => None,
        })
        .collect();
    assert!(!servers.is_empty(), "no servers listed");
    for s in &servers {
        assert_eq!(
            s,
            &("unix".into(), pg.port.to_string(), "unix".into()),
            "{servers:?}"
        );
    }
}

/// pgbench in the simple and the extended protocol through a transaction pool of 2 servers on
/// the socket: every transaction succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_over_the_socket() {
    let (pg, dir) = pg_on_socket();
    let p = Pooler::start(&cfg(
        pg.port,
        &dir,
        "pool_mode = \"transaction\"\ndefault_pool_size = 2\nworkers = 2",
    ))
    .await;
    pgbench_init(p.port()).await;
    for proto in ["simple", "extended"] {
        let mut run = pgbench_cmd(p.port(), "postgres", "postgres", None);
        run.args(["-c", "8", "-j", "2", "-T", "2", "--protocol", proto]);
        let o = run_cmd(run).await;
        assert_pgbench_ok(proto, &o);
    }
}

/// A cancel request reaches the server over its socket: the running query ends with 57014.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_goes_over_the_socket() {
    let (pg, dir) = pg_on_socket();
    let p = Pooler::start(&cfg(pg.port, &dir, "pool_mode = \"session\"")).await;
    let client = std::sync::Arc::new(p.connect("postgres", None, "postgres").await);
    let token = client.cancel_token();
    let c = client.clone();
    let query = tokio::spawn(async move { c.simple_query("SELECT pg_sleep(60)").await });
    let start = Instant::now();
    while pg.sql(
        "postgres",
        "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' AND state = 'active'",
    ) == "0"
    {
        assert!(start.elapsed() < Duration::from_secs(10), "query never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let res = tokio::time::timeout(Duration::from_secs(5), query)
        .await
        .expect("the query was not cancelled within 5 s")
        .unwrap();
    let err = res.map(drop).expect_err("query was cancelled");
    assert_eq!(sqlstate(&err), "57014", "{err}");
}

/// A directory without the server's socket: the client gets a connection error (class 08)
/// naming the socket's directory and port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_socket_is_a_connection_error() {
    let dir = socket_dir();
    let p = Pooler::start(&cfg(
        free_port(),
        &dir,
        "pool_mode = \"session\"\nserver_connect_timeout = 2000\nserver_login_retry = 0",
    ))
    .await;
    let err = match connect(p.port(), "postgres", None, "postgres").await {
        Ok(c) => c.simple_query("SELECT 1").await.map(drop).unwrap_err(),
        Err(e) => e,
    };
    let code = sqlstate(&err);
    assert!(code.starts_with("08"), "{code}: {err}");
    let text = err
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default();
    assert!(
        text.contains(&dir.display().to_string()),
        "the message names the directory: {text}"
    );
}

/// 5 MB of queries sent while the server sleeps: pgcorral's writes to the socket block (far
/// more than a socket buffer), it waits for the socket to drain, and every query is answered
/// in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_that_block_wait_for_the_socket() {
    let (pg, dir) = pg_on_socket();
    let p = Pooler::start(&cfg(pg.port, &dir, "pool_mode = \"transaction\"")).await;
    let mut w = wire::Wire::connect(p.port(), "postgres", "postgres").await;
    let pad = "x".repeat(10_000);
    let mut batch = wire::query("SELECT pg_sleep(1)");
    for i in 0..500 {
        batch.extend(wire::query(&format!("SELECT {i}, length('{pad}')")));
    }
    let start = Instant::now();
    w.send(&batch).await;
    let msgs = w.until_ready_n(501).await;
    assert!(start.elapsed() >= Duration::from_secs(1));
    let rows: Vec<_> = msgs
        .iter()
        .filter(|m| m.tag == b'D')
        .map(|m| m.row())
        .collect();
    assert_eq!(rows.len(), 501);
    for (i, r) in rows[1..].iter().enumerate() {
        assert_eq!(r[0].as_deref(), Some(i.to_string().as_str()));
        assert_eq!(r[1].as_deref(), Some("10000"));
    }
    assert!(
        msgs.iter().all(|m| m.tag != b'E'),
        "errors in {} messages",
        msgs.len()
    );
}
