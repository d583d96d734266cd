//! A database whose `host` is a list (PgBouncer's `host=a,b` with `load_balance_hosts`): a
//! host that does not answer is passed over; `disable` starts a new server connection at the
//! host that last let pgcorral in (the first until one fails), `round-robin` at the next one
//! each time; SHOW DATABASES and SHOW POOLS say which.

mod support;

use std::time::{Duration, Instant};

use support::{blocking, connect, free_port, socket_dir, PoolerProcess, Postgres};

fn ini(pg_port: u16, port: u16) -> String {
    // 127.0.0.3 is a loopback address PostgreSQL does not listen on: refused at once.
    format!(
        "[databases]\n\
         rr = host=127.0.0.3,127.0.0.1 port={pg_port} dbname=postgres\n\
         ordered = host=127.0.0.3,127.0.0.1 port={pg_port} dbname=postgres load_balance_hosts=disable\n\
         [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = {sockets}\n\
         auth_type = trust\npool_mode = transaction\nadmin_users = postgres\n",
        sockets = socket_dir().display(),
    )
}

/// Opens two server connections of `db` at once (two clients in a transaction each) and
/// returns how many hosts were passed over meanwhile.
async fn two_servers(pooler: &PoolerProcess, port: u16, db: &str) -> usize {
    let before = pooler
        .log()
        .matches("closing because: connect failed")
        .count();
    let a = connect(port, "postgres", None, db).await.unwrap();
    let b = connect(port, "postgres", None, db).await.unwrap();
    a.batch_execute("BEGIN; SELECT 1").await.unwrap();
    b.batch_execute("BEGIN; SELECT 1").await.unwrap();
    a.batch_execute("COMMIT").await.unwrap();
    b.batch_execute("COMMIT").await.unwrap();
    // The log is written by the pooler process: give it a moment.
    let start = Instant::now();
    loop {
        let n = pooler
            .log()
            .matches("closing because: connect failed")
            .count()
            - before;
        if n > 0 || start.elapsed() > Duration::from_secs(2) {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_list_is_walked_as_load_balance_hosts_says() {
    let pg = blocking(Postgres::start);
    let port = free_port();
    let pooler = blocking(|| PoolerProcess::start_file("pgbouncer.ini", &ini(pg.port, port), port));
    // disable: the first connection tries 127.0.0.3, then 127.0.0.1, where the second starts
    // (PgBouncer moves to the next host when one fails and stays there).
    assert_eq!(two_servers(&pooler, port, "ordered").await, 1);
    // round-robin: the first starts at 127.0.0.3, the second at 127.0.0.1.
    assert_eq!(two_servers(&pooler, port, "rr").await, 1);
    let log = pooler.log();
    assert!(
        log.contains(&format!("@127.0.0.1:{} new connection to server", pg.port)),
        "{log}"
    );

    let admin = connect(port, "postgres", None, "pgbouncer").await.unwrap();
    let rows = admin.simple_query("SHOW DATABASES").await.unwrap();
    let mut seen = Vec::new();
    for m in rows {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            let name = r.get("name").unwrap().to_string();
            if name == "rr" || name == "ordered" {
                seen.push((
                    name,
                    r.get("host").unwrap().to_string(),
                    r.get("load_balance_hosts").map(str::to_string),
                ));
            }
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (
                "ordered".into(),
                "127.0.0.3,127.0.0.1".into(),
                Some("disable".into())
            ),
            (
                "rr".into(),
                "127.0.0.3,127.0.0.1".into(),
                Some("round-robin".into())
            ),
        ]
    );
    // SHOW POOLS says it too, for each pool of such a database.
    let rows = admin.simple_query("SHOW POOLS").await.unwrap();
    let mut pools = Vec::new();
    for m in rows {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            let db = r.get("database").unwrap().to_string();
            if db == "rr" || db == "ordered" {
                pools.push((db, r.get("load_balance_hosts").map(str::to_string)));
            }
        }
    }
    pools.sort();
    pools.dedup();
    assert_eq!(
        pools,
        vec![
            ("ordered".into(), Some("disable".into())),
            ("rr".into(), Some("round-robin".into())),
        ]
    );
    drop(pooler);
}
