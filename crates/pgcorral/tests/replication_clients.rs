//! Replication clients through pgcorral, against a real PostgreSQL: logical
//! (`replication=database`) and physical (`replication=true`) connections get a server of
//! their own, logged in with their startup parameters, relayed both ways (replication
//! commands, SQL, pg_basebackup's streams), counted in the pool's size (an idle server is
//! evicted for one), never pooled, and refused by the server in its own words.

mod support;

use std::time::{Duration, Instant};

use support::pools::*;
use support::raw::Raw;
use support::*;

/// Backends of `postgres` on `db`: walsenders included (pg_stat_activity's `backend_type`).
fn backends_of(pg: &Postgres, db: &str, kind: &str) -> usize {
    pg.sql(
        "postgres",
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = 'postgres' \
             AND backend_type = '{kind}' AND (datname = '{db}' OR datname IS NULL) \
             AND pid <> pg_backend_pid()"
        ),
    )
    .parse()
    .unwrap()
}

async fn login(port: u16, db: &str, replication: &str) -> Raw {
    let params = [
        ("user", "postgres"),
        ("database", db),
        ("replication", replication),
        ("application_name", "abc"),
        ("options", "-c enable_seqscan=off"),
    ];
    Raw::login_with(port, &params, None)
        .await
        .unwrap_or_else(|e| panic!("replication={replication} login: {e:?}"))
}

/// A logical replication connection runs replication commands and SQL on a server logged in
/// with the client's own parameters (application_name, options), shows as `logical` in SHOW
/// CLIENTS and SHOW SERVERS, and its server is closed, not pooled, when it leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logical_connection_gets_its_own_server() {
    let pg = replicating_server();
    pg.create_db("app");
    let pooler = Pooler::start(&toml(
        "pool_mode = \"transaction\"\nadmin_users = [\"postgres\"]",
        &db(&pg, "app", "pool_size = 2"),
    ))
    .await;
    let mut r = login(pooler.port(), "app", "database").await;
    let ident = r.query("IDENTIFY_SYSTEM").await.unwrap();
    assert_eq!(
        ident[0][3].as_deref(),
        Some("app"),
        "IDENTIFY_SYSTEM: {ident:?}"
    );
    let name = r.query("SHOW application_name").await.unwrap();
    assert_eq!(name[0][0].as_deref(), Some("abc"));
    let seqscan = r.query("SHOW enable_seqscan").await.unwrap();
    assert_eq!(seqscan[0][0].as_deref(), Some("off"));
    // A transaction on it stays its own (no pooling between statements).
    r.query("BEGIN").await.unwrap();
    r.query("SET LOCAL work_mem = '7MB'").await.unwrap();
    let wm = r.query("SHOW work_mem").await.unwrap();
    assert_eq!(wm[0][0].as_deref(), Some("7MB"));
    r.query("COMMIT").await.unwrap();

    let admin = pooler.connect("postgres", None, "pgbouncer").await;
    for what in ["CLIENTS", "SERVERS"] {
        let rows = admin.simple_query(&format!("SHOW {what}")).await.unwrap();
        let kinds: Vec<String> = rows
            .iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    Some(r.get("replication").unwrap().to_string())
                }
                _ => None,
            })
            .collect();
        assert!(
            kinds.iter().any(|k| k == "logical"),
            "SHOW {what}: {kinds:?}"
        );
    }
    assert_eq!(blocking(|| backends_of(&pg, "app", "walsender")), 1);

    r.send(b"X\0\0\0\x04").await;
    drop(r);
    let start = Instant::now();
    while blocking(|| backends_of(&pg, "app", "walsender")) > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the replication server stayed open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A normal client of the same pool is served as before.
    let c = pooler.connect("postgres", None, "app").await;
    assert_eq!(value(&c, "SELECT 1").await, "1");
}

/// pg_basebackup through pgcorral (physical replication: BASE_BACKUP, and a second connection
/// streaming WAL) copies the cluster. Physical replication clients send the database name
/// `replication` (libpq's default for them), so the pool is the database of that name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_basebackup_through_pgcorral() {
    let pg = replicating_server();
    let replication = db(&pg, "replication", "dbname = \"postgres\"\npool_size = 3");
    let pooler = Pooler::start(&toml("", &replication)).await;
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("backup");
    let mut c = std::process::Command::new(pg_bindir().join("pg_basebackup"));
    c.arg("--dbname")
        .arg(format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            pooler.port()
        ))
        .arg("--checkpoint=fast")
        .arg("--pgdata")
        .arg(&target);
    let out = run_cmd(c).await;
    assert!(out.status.success(), "pg_basebackup: {}", stderr(&out));
    assert!(target.join("PG_VERSION").exists());
    assert!(target.join("global/pg_control").exists());
}

/// A replication connection takes a place in its pool: in a full pool an idle server is
/// evicted for it, and with every place busy it waits for one, as a checkout waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_connection_counts_in_the_pool_size() {
    let pg = replicating_server();
    pg.create_db("app");
    let pooler = Pooler::start(&toml(
        "pool_mode = \"transaction\"",
        &db(&pg, "app", "pool_size = 1"),
    ))
    .await;
    // The one place holds an idle server after this.
    let c = pooler.connect("postgres", None, "app").await;
    assert_eq!(value(&c, "SELECT 1").await, "1");
    assert_eq!(blocking(|| backends_of(&pg, "app", "client backend")), 1);
    let mut r = login(pooler.port(), "app", "database").await;
    r.query("SELECT 1").await.unwrap();
    assert_eq!(
        blocking(|| backends_of(&pg, "app", "client backend")),
        0,
        "the idle server was evicted for the replication client"
    );
    // The place is the replication client's until it leaves: the normal client waits.
    let port = pooler.port();
    let waiting = tokio::spawn(async move {
        let start = Instant::now();
        let c = connect(port, "postgres", None, "app").await.unwrap();
        value(&c, "SELECT 2").await;
        start.elapsed()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    r.send(b"X\0\0\0\x04").await;
    drop(r);
    let waited = within(Duration::from_secs(10), "the waiting client", waiting)
        .await
        .unwrap();
    assert!(waited >= Duration::from_millis(400), "waited {waited:?}");
    drop(c);
}

/// A replication login the server refuses reaches the client in the server's words
/// (PostgreSQL's FATAL), and does not turn normal clients away afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_replication_login_gets_the_servers_error() {
    // No `replication` line in pg_hba.conf: physical replication is refused.
    let pg = Postgres::start();
    let pooler = Pooler::start(&toml("", &db(&pg, "postgres", ""))).await;
    let e = Raw::login_with(
        pooler.port(),
        &[
            ("user", "postgres"),
            ("database", "postgres"),
            ("replication", "true"),
        ],
        None,
    )
    .await
    .err()
    .expect("physical replication is refused by the server");
    assert_eq!(e.code, "28000", "{e:?}");
    assert!(
        e.message
            .starts_with("no pg_hba.conf entry for replication connection from host \"127.0.0.1\""),
        "{e:?}"
    );
    let e = Raw::login_with(
        pooler.port(),
        &[
            ("user", "postgres"),
            ("database", "postgres"),
            ("replication", "maybe"),
        ],
        None,
    )
    .await
    .err()
    .expect("a bad value is refused by the server");
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        (
            "22023",
            "invalid value for parameter \"replication\": \"maybe\""
        )
    );
    let c = pooler.connect("postgres", None, "postgres").await;
    assert_eq!(value(&c, "SELECT 1").await, "1");
    // `replication=off` is a normal client.
    let mut r = Raw::login_with(
        pooler.port(),
        &[
            ("user", "postgres"),
            ("database", "postgres"),
            ("replication", "off"),
        ],
        None,
    )
    .await
    .unwrap();
    let one = r.query("SELECT 1").await.unwrap();
    assert_eq!(one[0][0].as_deref(), Some("1"));
}
