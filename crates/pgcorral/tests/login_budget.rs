//! The login phase under attack: connections still logging in have their own budget
//! (`max_login_clients`, refused at accept beyond it, cut short under pressure, with places
//! beyond it kept for console logins over TCP; login_flood.rs shows its shares by source
//! address), max_client_conn counts logged-in clients only, admin users keep a few places on
//! the console, client-supplied names are escaped in the log; and DROP DATABASE (and its kin)
//! through pgcorral is not refused because of pgcorral's own idle servers.

mod support;

use std::time::{Duration, Instant};

use pgcorral::login_places::CONSOLE_RESERVE;
use support::flood::connect_from;
use support::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const ADMIN: &str = "admin_users = [\"postgres\"]";

/// `n` connections that send nothing, each accepted by the pooler (checked with SHOW LISTS
/// would need a login; a short pause lets the listener take them), each from an address of its
/// own (127.0.1.1, 127.0.1.2, ...), so that none is over its address's share of the budget.
async fn silent(port: u16, n: usize) -> Vec<TcpStream> {
    let mut v = Vec::new();
    for i in 0..n {
        let source = std::net::IpAddr::from([127, 0, 1, 1 + i as u8]);
        v.push(connect_from(source, port).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    v
}

/// The console over the pooler's Unix socket (`dir`), as `user`.
async fn console_unix(
    dir: &std::path::Path,
    port: u16,
    user: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host_path(dir).port(port).user(user).dbname("pgbouncer");
    cfg.connect_timeout(Duration::from_secs(10));
    let (client, conn) = cfg.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// The `items` of `list` in SHOW LISTS.
async fn listed(console: &tokio_postgres::Client, list: &str) -> i64 {
    for m in console.simple_query("SHOW LISTS").await.unwrap() {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            if r.get(0) == Some(list) {
                return r.get(1).unwrap().parse().unwrap();
            }
        }
    }
    panic!("no {list} in SHOW LISTS")
}

async fn login_and_select_one(
    port: u16,
    user: &str,
    db: &str,
) -> Result<(), tokio_postgres::Error> {
    let c = connect(port, user, None, db).await?;
    c.simple_query("SELECT 1").await.map(drop)
}

/// Whether the pooler closes `s` (or sends it something: a FATAL) within `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut b = [0u8; 256];
    tokio::time::timeout(limit, s.read(&mut b)).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_lock_out_neither_logins_nor_the_console() {
    let pg = Postgres::start();
    let general = format!("{ADMIN}\nmax_client_conn = 5\nmax_login_clients = 100");
    let pooler = Pooler::start(&config(&pg, "postgres", &general)).await;
    let _silent = silent(pooler.port(), 20).await;
    // psql, as an application would log in.
    let out = output({
        let mut c = psql_cmd(pooler.port(), "postgres", "postgres", None);
        c.args(["-Atc", "SELECT 41 + 1"]);
        c
    });
    assert!(out.status.success(), "psql: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "42");
    let console = within(
        Duration::from_secs(10),
        "console login",
        connect(pooler.port(), "postgres", None, "pgbouncer"),
    )
    .await
    .expect("console login");
    assert_eq!(listed(&console, "login_clients").await, 20);
    assert_eq!(listed(&console, "used_clients").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_login_budget_are_refused_at_once() {
    let pg = Postgres::start();
    let dir = socket_dir();
    let general = format!(
        "{ADMIN}\nmax_login_clients = 5\nmetrics_addr = \"127.0.0.1:0\"\nunix_socket_dir = \"{}\"",
        dir.display()
    );
    let pooler = Pooler::start(&config(&pg, "postgres", &general)).await;
    let port = pooler.port();
    // The budget, and the places kept for the console over TCP.
    let silent_ones = silent(port, 5 + CONSOLE_RESERVE).await;
    for _ in 0..3 {
        let start = Instant::now();
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut got)).await;
        assert!(read.is_ok(), "a connection beyond the budget was held");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        // FATAL 53300 when it arrives before the close.
        if !got.is_empty() {
            let text = String::from_utf8_lossy(&got);
            assert!(got[0] == b'E' && text.contains("53300"), "{text:?}");
        }
    }
    // The Unix socket keeps a few places: the console is reachable while TCP is full.
    let console = console_unix(&dir, port, "postgres")
        .await
        .expect("console over the Unix socket");
    assert_eq!(listed(&console, "login_clients").await, 13);
    let metrics = reqwest_metrics(pooler.metrics.unwrap()).await;
    assert!(
        metrics.contains("pgcorral_clients_login_refused_total 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("pgcorral_clients_logging_in 13"),
        "{metrics}"
    );
    // The budget is given back when the silent ones leave.
    drop(silent_ones);
    let start = Instant::now();
    while let Err(e) = login_and_select_one(port, "postgres", "postgres").await {
        assert!(start.elapsed() < Duration::from_secs(5), "{e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_keeps_places_over_tcp_when_the_budget_is_used_up() {
    let pg = Postgres::start();
    let general = format!("{ADMIN}\nmax_login_clients = 5");
    let pooler = Pooler::start(&config(&pg, "postgres", &general)).await;
    let port = pooler.port();
    let _silent = silent(port, 5).await;
    // A place kept for the console: an application's login is refused once it has named its
    // database, as it would have been at accept ...
    let err = connect(port, "postgres", None, "postgres").await.err();
    let err = err.expect("an application login beyond the budget");
    assert_eq!(sqlstate(&err), "53300", "{err}");
    assert!(db_message(&err).contains("max_login_clients"), "{err}");
    // ... a user who is neither an admin nor a stats user is refused by the console ...
    let err = connect(port, "nobody", None, "pgbouncer").await.err();
    let err = err.expect("a console login of a user who may not use it");
    assert!(db_message(&err).contains("not allowed"), "{err}");
    // ... and an admin user gets in, over TCP.
    let console = connect(port, "postgres", None, "pgbouncer")
        .await
        .expect("an admin on the console over TCP");
    assert_eq!(listed(&console, "login_clients").await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_budget_is_capped_by_the_open_files_limit() {
    let pg = Postgres::start();
    // 64 descriptors: at most 16 connections logging in (and the console's places), whatever
    // max_login_clients says.
    let toml = config(&pg, "postgres", "max_login_clients = 1000\nworkers = 1");
    let p = PoolerProcess::start_limited(&toml, "info", Some(64));
    let mut held = silent(p.port, 16 + CONSOLE_RESERVE).await;
    held.push(TcpStream::connect(("127.0.0.1", p.port)).await.unwrap());
    // Which connection is refused depends on when each was accepted (a silent one may be
    // refused before the last of them arrives, and the extra one then takes its place): what
    // the cap promises is that no more than that many are held.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut open = 0;
    for s in held.iter_mut() {
        if !closed_within(s, Duration::from_millis(20)).await {
            open += 1;
        }
    }
    assert!(
        open <= 16 + CONSOLE_RESERVE,
        "{open} connections held, more than a quarter of the open-files limit and the console's places:\n{}",
        p.log()
    );
    drop(held);
    let start = Instant::now();
    while let Err(e) = login_and_select_one(p.port, "postgres", "postgres").await {
        assert!(start.elapsed() < Duration::from_secs(5), "{e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(p.log().contains("max_login_clients"), "{}", p.log());
}

/// GET /metrics over a plain TCP connection.
async fn reqwest_metrics(addr: std::net::SocketAddr) -> String {
    use tokio::io::AsyncWriteExt;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    within(Duration::from_secs(10), "metrics", s.read_to_end(&mut out))
        .await
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_are_cut_short_while_half_the_budget_is_in_use() {
    let pg = Postgres::start();
    let general = "max_login_clients = 10\nclient_login_timeout = 60000";
    let pooler = Pooler::start(&config(&pg, "postgres", general)).await;
    // Four of ten: no pressure, they keep client_login_timeout.
    let mut calm = silent(pooler.port(), 4).await;
    assert!(!closed_within(&mut calm[0], Duration::from_secs(6)).await);
    // Ten of ten: logins older than 5 s are ended until no more than half the budget is used.
    let more = silent(pooler.port(), 6).await;
    let start = Instant::now();
    let waits: Vec<_> = calm
        .into_iter()
        .chain(more)
        .map(|mut s| {
            tokio::spawn(async move { closed_within(&mut s, Duration::from_secs(12)).await })
        })
        .collect();
    let mut closed = 0;
    for w in waits {
        closed += w.await.unwrap() as usize;
    }
    assert!(
        closed >= 5,
        "{closed} of 10 silent logins ended under pressure"
    );
    assert!(start.elapsed() < Duration::from_secs(14));
    login_and_select_one(pooler.port(), "postgres", "postgres")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_client_conn_counts_logged_in_clients_and_keeps_places_for_admins() {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE app LOGIN");
    let general = format!("{ADMIN}\nmax_client_conn = 2");
    let pooler = Pooler::start(&config(&pg, "postgres", &general)).await;
    let port = pooler.port();
    let _silent = silent(port, 10).await;
    let a = connect(port, "app", None, "postgres").await.expect("first");
    let b = connect(port, "app", None, "postgres")
        .await
        .expect("second");
    let err = connect(port, "app", None, "postgres").await.err().unwrap();
    assert_eq!(sqlstate(&err), "53300", "{err}");
    assert_eq!(
        db_message(&err),
        "no more connections allowed (max_client_conn)"
    );
    // Beyond max_client_conn an admin user still reaches the console, a few times over ...
    let mut consoles = Vec::new();
    for _ in 0..3 {
        let c = connect(port, "postgres", None, "pgbouncer")
            .await
            .expect("an admin on the console");
        assert_eq!(
            listed(&c, "used_clients").await,
            2 + consoles.len() as i64 + 1
        );
        consoles.push(c);
    }
    // ... but not to a database, and not without end.
    let err = connect(port, "postgres", None, "postgres")
        .await
        .err()
        .unwrap();
    assert_eq!(sqlstate(&err), "53300", "{err}");
    let err = connect(port, "postgres", None, "pgbouncer")
        .await
        .err()
        .unwrap();
    assert_eq!(sqlstate(&err), "53300", "{err}");
    a.simple_query("SELECT 1").await.unwrap();
    b.simple_query("SELECT 1").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_supplied_names_are_escaped_in_the_log() {
    let pg = Postgres::start();
    let p = PoolerProcess::start(&config(&pg, "postgres", ""));
    let forged = "FORGED-LINE pgcorral: client logged in";
    for (user, db) in [
        (format!("nobody\n{forged}"), "postgres".to_string()),
        ("postgres".to_string(), format!("nodb\r\n{forged}")),
        (format!("esc\u{1b}[2J\n{forged}"), format!("x\n{forged}")),
    ] {
        let mut s = TcpStream::connect(("127.0.0.1", p.port)).await.unwrap();
        use tokio::io::AsyncWriteExt;
        s.write_all(&pgwire_startup(&user, &db)).await.unwrap();
        let mut answer = Vec::new();
        within(
            Duration::from_secs(10),
            "refused login",
            s.read_to_end(&mut answer),
        )
        .await
        .unwrap();
        // Refused after authentication (trust), as PostgreSQL: AuthenticationOk, then the FATAL.
        let tags: Vec<u8> = support::wire::split(&answer)
            .iter()
            .map(|m| m.tag)
            .collect();
        assert_eq!(tags, b"RE", "{answer:?}");
    }
    let start = Instant::now();
    let log = loop {
        let log = p.log();
        if log.matches("pooler error: ").count() >= 3 || start.elapsed() > Duration::from_secs(5) {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(log.contains("nobody\\nFORGED-LINE"), "{log}");
    assert!(log.contains("nodb\\r\\nFORGED-LINE"), "{log}");
    assert!(!log.contains('\u{1b}'), "{log}");
    for line in log.lines() {
        assert!(!line.starts_with("FORGED-LINE"), "forged log line: {log}");
    }
}

/// A StartupMessage for `user` and `database`.
fn pgwire_startup(user: &str, database: &str) -> Vec<u8> {
    let mut out = bytes::BytesMut::new();
    pgwire::encode::startup(&mut out, &[("user", user), ("database", database)]);
    out.to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_commands_are_not_refused_for_pgcorrals_idle_servers() {
    let pg = Postgres::start();
    pg.create_db("victim");
    let toml = format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\n\n\
         [databases.postgres]\nhost = \"127.0.0.1\"\nport = {port}\n\
         [databases.sess]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\npool_mode = \"session\"\n\
         [databases.victim]\nhost = \"127.0.0.1\"\nport = {port}\n",
        port = pg.port
    );
    let pooler = Pooler::start(&toml).await;
    let port = pooler.port();
    // Leaves an idle pooled server connected to `victim`.
    let pg = &pg;
    let touch = move || async move {
        let c = connect(port, "postgres", None, "victim").await.unwrap();
        c.simple_query("SELECT 1").await.unwrap();
        drop(c);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let n = pg.sql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE datname = 'victim'",
        );
        assert_eq!(n, "1", "an idle pooled server to victim");
    };
    let tx = pooler.connect("postgres", None, "postgres").await;
    let session = pooler.connect("postgres", None, "sess").await;

    touch().await;
    tx.simple_query("CREATE DATABASE copy TEMPLATE victim")
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE ... TEMPLATE: {e}"));
    touch().await;
    session
        .simple_query("ALTER DATABASE victim RENAME TO renamed")
        .await
        .unwrap_or_else(|e| panic!("ALTER DATABASE ... RENAME: {e}"));
    pg.sql("postgres", "ALTER DATABASE renamed RENAME TO victim");
    touch().await;
    // Over the extended protocol (Parse) this time.
    tx.execute("DROP DATABASE victim", &[])
        .await
        .unwrap_or_else(|e| panic!("DROP DATABASE: {e}"));
    let left = pg.sql(
        "postgres",
        "SELECT count(*) FROM pg_database WHERE datname = 'victim'",
    );
    assert_eq!(left, "0");
}

/// Counting logins keeps nothing alive past shutdown: a pooler shut down leaves no server
/// connection behind (a guard once kept the services, and so every pool, forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_leaves_no_server_connection_behind() {
    let pg = Postgres::start();
    let backends = || {
        pg.sql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
             AND pid <> pg_backend_pid()",
        )
    };
    for _ in 0..5 {
        let pooler = Pooler::start(&config(&pg, "postgres", "default_pool_size = 1")).await;
        let c = pooler.connect("postgres", None, "postgres").await;
        c.simple_query("SELECT 1").await.unwrap();
        drop(c);
        pooler.shutdown().await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while backends() != "0" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(backends(), "0");
}
