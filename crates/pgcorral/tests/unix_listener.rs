//! Clients over pgcorral's own Unix socket (`unix_socket_dir`, as PgBouncer's): queries, psql
//! and pgbench through it, cancel requests over it, SHOW CLIENTS' "unix" address with the
//! client's process id, no TLS there (SSLRequest answered 'N', client_tls_sslmode "require"
//! not applied), the socket file's mode, a stale file replaced, a live one refused, and the file
//! removed at shutdown.

mod support;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use support::tls::Certs;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn cfg(pg: &Postgres, dir: &Path, general: &str) -> String {
    config(
        pg,
        "postgres",
        &format!(
            "unix_socket_dir = \"{}\"\nadmin_users = [\"postgres\"]\n{general}",
            dir.display()
        ),
    )
}

fn socket_file(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

/// tokio-postgres through the socket in `dir` for `port`.
async fn connect_unix(dir: &Path, port: u16, db: &str) -> tokio_postgres::Client {
    let mut c = tokio_postgres::Config::new();
    c.host_path(dir).port(port).user("postgres").dbname(db);
    c.connect_timeout(Duration::from_secs(10));
    let (client, conn) = c
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect over {}: {e:?}", dir.display()));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

fn rows(msgs: &[tokio_postgres::SimpleQueryMessage]) -> Vec<&tokio_postgres::SimpleQueryRow> {
    msgs.iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// A client on the socket runs queries and is shown in SHOW CLIENTS as PgBouncer shows it:
/// `addr` and `local_addr` "unix", the listen port, and the client's process id (this test's).
/// The socket file has `unix_socket_mode`. client_tls_sslmode "require" refuses a plaintext
/// TCP client but not a socket client (as PgBouncer: no TLS over a Unix socket), and an
/// SSLRequest there is answered 'N'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_connect_over_the_socket() {
    let pg = Postgres::start();
    let dir = socket_dir();
    let certs = Certs::new();
    let general = format!(
        "unix_socket_mode = \"0660\"\nclient_tls_sslmode = \"require\"\n\
         client_tls_cert_file = \"{}\"\nclient_tls_key_file = \"{}\"",
        certs.server.cert.display(),
        certs.server.key.display()
    );
    let p = Pooler::start(&cfg(&pg, &dir, &general)).await;
    let path = socket_file(&dir, p.port());
    let meta = std::fs::metadata(&path).expect("the socket file exists");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);

    let c = connect_unix(&dir, p.port(), "postgres").await;
    let row = c.query_one("SELECT $1::int + 1", &[&41i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);

    // Plaintext over TCP is refused: TLS is required there.
    let err = connect(p.port(), "postgres", None, "postgres")
        .await
        .map(drop)
        .expect_err("plaintext TCP with client_tls_sslmode require");
    assert!(format!("{err:?}").contains("SSL required"), "{err:?}");

    // The console, over the socket as well.
    let console = connect_unix(&dir, p.port(), "pgbouncer").await;
    let msgs = console.simple_query("SHOW CLIENTS").await.unwrap();
    let clients = rows(&msgs);
    assert_eq!(clients.len(), 2, "the pool client and the console client");
    let me = std::process::id().to_string();
    for r in clients {
        assert_eq!(r.get("addr"), Some("unix"));
        assert_eq!(r.get("local_addr"), Some("unix"));
        assert_eq!(r.get("port"), Some(p.port().to_string().as_str()));
        assert_eq!(r.get("local_port"), Some(p.port().to_string().as_str()));
        assert_eq!(r.get("remote_pid"), Some(me.as_str()));
        assert_eq!(r.get("tls"), Some(""));
    }

    // An SSLRequest on the socket: 'N', then the session goes on in plaintext.
    let mut raw = tokio::net::UnixStream::connect(&path).await.unwrap();
    raw.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
        .await
        .unwrap();
    let mut answer = [0u8; 1];
    raw.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"N");
}

/// psql and pgbench (transaction mode, extended protocol) through the socket, and a cancel
/// request sent over it ends a running query with 57014.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_pgbench_and_cancel_over_the_socket() {
    let pg = Postgres::start();
    let dir = socket_dir();
    let p = Pooler::start(&cfg(&pg, &dir, "pool_mode = \"transaction\"")).await;
    let port = p.port().to_string();
    // psql and pgbench given the socket's directory as host, as libpq takes it.
    let over_socket = |program: &str| {
        let mut c = std::process::Command::new(program);
        c.arg("-h").arg(&dir).args(["-p", &port, "-U", "postgres"]);
        c.env_remove("PGPASSWORD")
            .env("PGSSLMODE", "require")
            .stdin(std::process::Stdio::null());
        c
    };
    // sslmode require does not apply to a socket (libpq sends no SSLRequest there).
    let mut psql = over_socket("psql");
    psql.args(["-X", "-d", "postgres", "-tA", "-c"])
        .arg("SELECT inet_client_addr() IS NOT NULL, 6 * 7");
    let o = run_cmd(psql).await;
    // The pooler reaches PostgreSQL over TCP whatever the client used.
    assert_eq!(stdout(&o).trim(), "t|42", "{}", stderr(&o));

    let mut init = over_socket("pgbench");
    init.args(["-i", "-q", "-s", "1", "postgres"]);
    let o = run_cmd(init).await;
    assert!(o.status.success(), "pgbench -i: {}", stderr(&o));
    let mut run = over_socket("pgbench");
    run.args([
        "-n", "-S", "-M", "extended", "-c", "4", "-j", "2", "-t", "200",
    ])
    .arg("postgres");
    let o = run_cmd(run).await;
    assert_eq!(assert_pgbench_ok("pgbench over the socket", &o), 800);

    let c = connect_unix(&dir, p.port(), "postgres").await;
    let token = c.cancel_token();
    let sleeping = tokio::spawn(async move { c.simple_query("SELECT pg_sleep(30)").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    token
        .cancel_query(tokio_postgres::NoTls)
        .await
        .expect("the cancel request goes over the socket");
    let err = tokio::time::timeout(Duration::from_secs(10), sleeping)
        .await
        .expect("the query is cancelled")
        .unwrap()
        .expect_err("a cancelled query fails");
    assert_eq!(err.code().map(|c| c.code()), Some("57014"), "{err:?}");
}

/// A socket file that nothing answers on (a pooler killed without removing it) is replaced; one
/// that answers, or a file that is not a socket, makes a second pooler fail to start, naming it;
/// shutdown removes the file; an empty unix_socket_dir creates none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_file_is_replaced_refused_and_removed() {
    let pg = Postgres::start();
    let dir = socket_dir();
    let port = free_port();
    let path = socket_file(&dir, port);
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists(), "a stale socket file");

    let mut config = pgcorral::config::from_toml_str(&cfg(&pg, &dir, "")).unwrap();
    config.general.listen_port = port;
    let server = pgcorral::Pooler::bind(config.clone())
        .await
        .expect("a stale socket file is replaced");
    assert_eq!(server.unix_path(), Some(path.as_path()));
    let services = server.services().clone();
    let running = tokio::spawn(server.run());
    let c = connect_unix(&dir, port, "postgres").await;
    assert_eq!(
        c.simple_query("SELECT 1").await.unwrap().len(),
        3,
        "row description, row, command complete"
    );

    // The same port on another loopback address, and the same socket file.
    let mut second = config.clone();
    second.general.listen_addr = "127.0.0.2".into();
    let err = match pgcorral::Pooler::bind(second).await {
        Ok(_) => panic!("a live socket file must not be taken over"),
        Err(e) => e,
    };
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert!(path.exists(), "the running pooler's socket stays");

    // A file there that is not a socket is left alone.
    let other = free_port();
    let plain = socket_file(&dir, other);
    std::fs::write(&plain, "not a socket").unwrap();
    let mut third = config.clone();
    third.general.listen_port = other;
    let err = match pgcorral::Pooler::bind(third).await {
        Ok(_) => panic!("a file that is not a socket must not be replaced"),
        Err(e) => e,
    };
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&plain).unwrap(), "not a socket");
    std::fs::remove_file(&plain).unwrap();

    drop(c);
    services.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("shutdown finishes")
        .unwrap();
    assert!(!path.exists(), "shutdown removes the socket file");

    let off = Pooler::start(&cfg(&pg, &dir, "").replace(
        &format!("unix_socket_dir = \"{}\"", dir.display()),
        "unix_socket_dir = \"\"",
    ))
    .await;
    assert!(off
        .services
        .config
        .load()
        .general
        .unix_socket_dir
        .is_empty());
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(files.is_empty(), "no socket file: {files:?}");
}

/// A socket client moves off a busy worker like a TCP client: its socket is registered with
/// the other worker's reactor and its queries go on, back and forth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_clients_move_between_workers() {
    let pg = Postgres::start();
    let dir = socket_dir();
    let p = Pooler::start(&cfg(&pg, &dir, "workers = 2\ndefault_pool_size = 1")).await;
    let balance = &p.services.balance;
    balance.freeze_loads(&[0, 0]);
    let c = connect_unix(&dir, p.port(), "postgres").await;
    let mut moves = balance.moves();
    for (round, loads) in [[950, 0], [0, 950], [950, 0]].iter().enumerate() {
        balance.freeze_loads(loads);
        for i in 0..20 {
            let row = c.query_one("SELECT $1::int * 2", &[&i]).await.unwrap();
            assert_eq!(row.get::<_, i32>(0), i * 2, "round {round}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let now = balance.moves();
        assert!(
            now > moves,
            "round {round}: the client moved off the busy worker"
        );
        moves = now;
    }
}
