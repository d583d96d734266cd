//! Databases with replicas, against real streaming replication: query routing by PostgreSQL's
//! parser, hints and SET SERVER ROLE, load balancing, replica lag, automatic primary after a
//! promotion, and read-your-writes.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use support::replicas::{kill, pause_replay, promote, resume_replay, Replicated};
use support::{value, Pooler};
use tokio_postgres::{Client, SimpleQueryMessage};

/// A pgcorral config for database `app` over `r`'s servers, with `roles` (one per server,
/// primary first) and extra [general] / [databases.app] lines.
fn config(r: &Replicated, roles: &[&str], general: &str, db: &str) -> String {
    let ports: Vec<u16> = std::iter::once(r.primary.port)
        .chain(r.replicas.iter().map(|p| p.port))
        .collect();
    let servers: Vec<String> = ports
        .iter()
        .zip(roles)
        .map(|(p, role)| format!("{{ host = \"127.0.0.1\", port = {p}, role = \"{role}\" }}"))
        .collect();
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\nadmin_users = [\"postgres\"]\n\
         healthcheck_interval = 100\n{general}\n\n\
         [databases.app]\ndbname = \"postgres\"\nservers = [{}]\n{db}\n",
        servers.join(", ")
    )
}

/// The port of the server that ran `sql` (which must return `inet_server_port()` first).
async fn port(c: &Client, sql: &str) -> u16 {
    value(c, sql).await.parse().unwrap()
}

/// How many of `n` runs of `sql` each server answered.
async fn spread(c: &Client, sql: &str, n: usize) -> HashMap<u16, usize> {
    let mut seen = HashMap::new();
    for _ in 0..n {
        *seen.entry(port(c, sql).await).or_default() += 1;
    }
    seen
}

/// Polls `f` until it holds, for at most 20 s.
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut f: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `SHOW POOLS` rows of database `app` as (server port, role, status).
async fn pools(p: &Pooler) -> Vec<(u16, String, String)> {
    let admin = p.connect("postgres", None, "pgcorral").await;
    let msgs = admin.simple_query("SHOW POOLS").await.unwrap();
    let mut out = Vec::new();
    for m in msgs {
        if let SimpleQueryMessage::Row(r) = m {
            if r.get("database") == Some("app") {
                let server = r.get("server").unwrap();
                let port = server.rsplit(':').next().unwrap().parse().unwrap();
                out.push((
                    port,
                    r.get("role").unwrap().to_string(),
                    r.get("status").unwrap().to_string(),
                ));
            }
        }
    }
    out
}

fn setup_table(r: &Replicated) {
    r.primary.sql(
        "postgres",
        "CREATE TABLE t (id serial PRIMARY KEY, v int); CREATE SEQUENCE s;",
    );
    r.wait_caught_up();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parser_sends_reads_to_replicas_and_the_rest_to_the_primary() {
    let r = Replicated::start(2);
    setup_table(&r);
    let p = Pooler::start(&config(
        &r,
        &["primary", "replica", "replica"],
        "",
        "primary_reads_enabled = false",
    ))
    .await;
    let c = p.connect("postgres", None, "app").await;
    let primary = r.primary.port;
    let replicas = [r.replicas[0].port, r.replicas[1].port];

    let seen = spread(&c, "SELECT inet_server_port()", 40).await;
    assert!(
        seen.keys().all(|p| replicas.contains(p)) && seen.len() == 2,
        "simple-protocol reads on both replicas only: {seen:?}"
    );
    // Extended protocol, a named statement prepared once and executed many times.
    let stmt = c.prepare("SELECT inet_server_port()").await.unwrap();
    let mut ext = HashMap::<u16, usize>::new();
    for _ in 0..20 {
        let port: i32 = c.query_one(&stmt, &[]).await.unwrap().get(0);
        *ext.entry(port as u16).or_default() += 1;
    }
    assert!(
        ext.keys().all(|p| replicas.contains(p)),
        "prepared reads on replicas: {ext:?}"
    );

    // SQL PREPARE / EXECUTE: routed by what the executed statement does. (One PREPARE per
    // Query: inside a multi-statement Query it would pin the client.)
    for sql in [
        "PREPARE rd AS SELECT inet_server_port()",
        "PREPARE rd_arg (bigint) AS SELECT inet_server_port(), $1",
        "PREPARE wr (int) AS INSERT INTO t (v) VALUES ($1) RETURNING inet_server_port()",
    ] {
        c.simple_query(sql).await.unwrap();
    }
    let seen = spread(&c, "EXECUTE rd", 10).await;
    assert!(
        seen.keys().all(|p| replicas.contains(p)),
        "EXECUTE of a read on replicas: {seen:?}"
    );
    let seen = spread(&c, "EXECUTE rd_arg(7)", 10).await;
    assert!(
        seen.keys().all(|p| replicas.contains(p)),
        "EXECUTE of a read with an argument on replicas: {seen:?}"
    );

    for (what, sql) in [
        ("EXECUTE of an insert", "EXECUTE wr(9)"),
        (
            "EXECUTE of a read with a writing argument",
            "EXECUTE rd_arg(nextval('s'))",
        ),
        (
            "insert",
            "INSERT INTO t (v) VALUES (1) RETURNING inet_server_port()",
        ),
        ("for update", "SELECT inet_server_port() FROM t FOR UPDATE"),
        ("nextval", "SELECT inet_server_port(), nextval('s')"),
        (
            "writing CTE",
            "WITH w AS (INSERT INTO t (v) VALUES (2) RETURNING v) SELECT inet_server_port() FROM w",
        ),
        (
            "hint",
            "/* pgcorral: role=primary */ SELECT inet_server_port()",
        ),
        (
            "pgpool hint",
            "/*NO LOAD BALANCE*/ SELECT inet_server_port()",
        ),
    ] {
        assert_eq!(port(&c, sql).await, primary, "{what} goes to the primary");
    }
    let hinted = port(&c, "/* pgcorral: role=replica */ SELECT inet_server_port()").await;
    assert!(replicas.contains(&hinted));

    // Transactions: a plain BEGIN goes to the primary for all of it (it may write later);
    // BEGIN READ ONLY may go to a replica.
    c.simple_query("BEGIN").await.unwrap();
    assert_eq!(port(&c, "SELECT inet_server_port()").await, primary);
    c.simple_query("INSERT INTO t (v) VALUES (3)")
        .await
        .unwrap();
    assert_eq!(port(&c, "SELECT inet_server_port()").await, primary);
    c.simple_query("COMMIT").await.unwrap();
    c.simple_query("BEGIN READ ONLY").await.unwrap();
    let ro = port(&c, "SELECT inet_server_port()").await;
    assert!(replicas.contains(&ro), "BEGIN READ ONLY on a replica");
    assert_eq!(
        port(&c, "SELECT inet_server_port()").await,
        ro,
        "one server per transaction"
    );
    c.simple_query("COMMIT").await.unwrap();

    // SET SERVER ROLE / SHOW SERVER ROLE, answered by pgcorral.
    assert_eq!(value(&c, "SHOW SERVER ROLE").await, "auto");
    c.simple_query("SET SERVER ROLE TO 'primary'")
        .await
        .unwrap();
    assert_eq!(value(&c, "SHOW SERVER ROLE").await, "primary");
    let seen = spread(&c, "SELECT inet_server_port()", 10).await;
    assert_eq!(seen.keys().copied().collect::<Vec<_>>(), vec![primary]);
    c.simple_query("SET SERVER ROLE TO 'replica'")
        .await
        .unwrap();
    let write = c
        .simple_query("INSERT INTO t (v) VALUES (4)")
        .await
        .unwrap_err();
    assert_eq!(
        write.code().map(|c| c.code()),
        Some("25006"),
        "a write sent to a replica by SET SERVER ROLE fails there: {write}"
    );
    c.simple_query("SET SERVER ROLE TO default").await.unwrap();
    assert_eq!(value(&c, "SHOW SERVER ROLE").await, "auto");
    let bad = c
        .simple_query("SET SERVER ROLE TO 'leader'")
        .await
        .unwrap_err();
    assert_eq!(bad.code().map(|c| c.code()), Some("22023"), "{bad}");

    // The console shows each server's role: per pool, and per server connection.
    let admin = p.connect("postgres", None, "pgcorral").await;
    let mut by_port = HashMap::new();
    for m in admin.simple_query("SHOW SERVERS").await.unwrap() {
        if let SimpleQueryMessage::Row(r) = m {
            let port: u16 = r.get("port").unwrap().parse().unwrap();
            by_port.insert(
                port,
                (
                    r.get("role").unwrap().to_string(),
                    r.get("health").unwrap().to_string(),
                ),
            );
        }
    }
    assert_eq!(
        by_port.get(&primary),
        Some(&("primary".to_string(), "ok".to_string())),
        "{by_port:?}"
    );
    for r in replicas {
        assert_eq!(
            by_port.get(&r),
            Some(&("replica".to_string(), "ok".to_string())),
            "{by_port:?}"
        );
    }
    let rows = pools(&p).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    for (port, role, status) in rows {
        let want = if port == primary {
            "primary"
        } else {
            "replica"
        };
        assert_eq!(
            (role.as_str(), status.as_str()),
            (want, "ok"),
            "server {port}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancing_follows_weights_and_load() {
    let r = Replicated::start(2);
    let cfg = config(&r, &["primary", "replica", "replica"], "", "").replace(
        &format!("port = {}, role = \"replica\" }}", r.replicas[0].port),
        &format!(
            "port = {}, role = \"replica\", weight = 3 }}",
            r.replicas[0].port
        ),
    ) + "load_balancing = \"round_robin\"\nprimary_reads_enabled = false\n";
    let p = Pooler::start(&cfg).await;
    let c = p.connect("postgres", None, "app").await;
    let seen = spread(&c, "SELECT inet_server_port()", 40).await;
    assert_eq!(
        seen.get(&r.replicas[0].port),
        Some(&30),
        "weight 3: {seen:?}"
    );
    assert_eq!(
        seen.get(&r.replicas[1].port),
        Some(&10),
        "weight 1: {seen:?}"
    );

    // least_outstanding: with a transaction open on one replica, reads go to the other.
    let cfg = config(&r, &["primary", "replica", "replica"], "", "")
        + "load_balancing = \"least_outstanding\"\nprimary_reads_enabled = false\n";
    let p = Pooler::start(&cfg).await;
    let busy = p.connect("postgres", None, "app").await;
    busy.simple_query("BEGIN READ ONLY").await.unwrap();
    let held = port(&busy, "SELECT inet_server_port()").await;
    let c = p.connect("postgres", None, "app").await;
    let seen = spread(&c, "SELECT inet_server_port()", 20).await;
    assert!(
        !seen.contains_key(&held) && seen.len() == 1,
        "reads avoid the replica with a transaction open ({held}): {seen:?}"
    );
    busy.simple_query("COMMIT").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_replica_leaves_rotation_until_it_catches_up() {
    let r = Replicated::start(2);
    setup_table(&r);
    let p = Pooler::start(&config(
        &r,
        &["primary", "replica", "replica"],
        "max_replica_lag = \"64kB\"",
        "primary_reads_enabled = false",
    ))
    .await;
    let c = p.connect("postgres", None, "app").await;
    let (slow, fast) = (r.replicas[0].port, r.replicas[1].port);
    pause_replay(&r.replicas[0]);
    r.primary.sql(
        "postgres",
        "INSERT INTO t (v) SELECT g FROM generate_series(1, 20000) g",
    );
    // The other replica may lag for a moment too, while it replays the insert.
    eventually(
        "the paused replica is lagging and the other is not",
        || async {
            let rows = pools(&p).await;
            rows.iter()
                .any(|(port, _, status)| *port == slow && status == "lagging")
                && rows
                    .iter()
                    .any(|(port, _, status)| *port == fast && status == "ok")
        },
    )
    .await;
    let seen = spread(&c, "SELECT inet_server_port(), count(*) FROM t", 20).await;
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        vec![fast],
        "reads only on the replica that keeps up"
    );
    resume_replay(&r.replicas[0]);
    eventually("the replica is back in rotation", || async {
        pools(&p)
            .await
            .iter()
            .any(|(port, _, status)| *port == slow && status == "ok")
    })
    .await;
    let seen = spread(&c, "SELECT inet_server_port()", 30).await;
    assert!(
        seen.contains_key(&slow),
        "caught up, it serves reads again: {seen:?}"
    );
}

/// What one writer of the promotion test saw: (when the write was sent, when it was answered,
/// the port that took it) or an error.
type Outcomes = Vec<(Instant, Instant, Result<u16, String>)>;

/// Inserts in a loop until `stop`, reconnecting after an error, as an application would.
async fn writer(port: u16, stop: Instant) -> Outcomes {
    let insert = "INSERT INTO t (v) VALUES (1) RETURNING inet_server_port()";
    let mut seen = Vec::new();
    let mut c = None;
    while Instant::now() < stop {
        // A connection closed already (its server died under pgcorral's read-back after its
        // last write, which succeeded) is not written to: a write sent there would fail at
        // once, for what happened before it was sent.
        if c.as_ref().is_some_and(Client::is_closed) {
            c = None;
        }
        if c.is_none() {
            match support::connect(port, "postgres", None, "app").await {
                Ok(client) => c = Some(client),
                Err(e) => {
                    let now = Instant::now();
                    seen.push((now, now, Err(format!("connect: {e:?}"))));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let client = c.as_ref().expect("connected");
        let sent = Instant::now();
        match client.simple_query(insert).await {
            Ok(msgs) => {
                let port = msgs.iter().find_map(|m| match m {
                    SimpleQueryMessage::Row(r) => r.get(0).map(|v| v.parse().unwrap()),
                    _ => None,
                });
                seen.push((sent, Instant::now(), Ok(port.expect("a row"))));
            }
            Err(e) => {
                seen.push((sent, Instant::now(), Err(format!("{e:?}"))));
                c = None;
            }
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_follow_a_promoted_replica_with_role_auto_under_load() {
    let r = Replicated::start(1);
    setup_table(&r);
    let p = Pooler::start(&config(
        &r,
        &["auto", "auto"],
        "server_unavailable_wait = 15000",
        "",
    ))
    .await;
    // The pools (and the checks of their servers) start with the first login.
    let _first = p.connect("postgres", None, "app").await;
    eventually("roles detected", || async {
        let rows = pools(&p).await;
        rows.contains(&(r.primary.port, "primary".into(), "ok".into()))
            && rows.contains(&(r.replicas[0].port, "replica".into(), "ok".into()))
    })
    .await;

    // 8 clients writing in a loop; the primary is killed at 1 s and the replica promoted
    // 0.3 s later; the writers go on until 4 s.
    let stop = Instant::now() + Duration::from_secs(4);
    let writers: Vec<_> = (0..8)
        .map(|_| tokio::spawn(writer(p.port(), stop)))
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    kill(&r.primary);
    // Writes may complete while pg_ctl stops it; none once it has returned.
    let killed_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let promoted_at = Instant::now();
    promote(&r.replicas[0]);
    let (old, new) = (r.primary.port, r.replicas[0].port);
    let mut first_on_new: Option<Instant> = None;
    for (i, w) in writers.into_iter().enumerate() {
        let seen = w.await.unwrap();
        // Writes sent while the primary's backends were being killed may fail (a writer that
        // reconnects at once may send more than one then); none sent after: they wait for the
        // promotion.
        let late: Vec<_> = (seen.iter())
            .filter(|(sent, _, r)| r.is_err() && *sent >= killed_at)
            .collect();
        assert!(
            late.is_empty(),
            "writer {i}: only writes sent while the primary died fail: {late:?}"
        );
        assert!(
            seen.iter()
                .any(|(sent, _, r)| *sent < killed_at && r == &Ok(old)),
            "writer {i} wrote to the old primary before it was killed"
        );
        let last = seen.iter().rev().find_map(|(_, _, r)| r.as_ref().ok());
        assert_eq!(last, Some(&new), "writer {i} ends on the new primary");
        // By when each write was sent: a writer task on a loaded machine may read an answer
        // that arrived before the kill only after it.
        assert!(
            seen.iter()
                .all(|(sent, _, r)| *sent < killed_at || r != &Ok(old)),
            "writer {i}: no write sent after the kill reached the old primary"
        );
        if let Some(at) = (seen.iter())
            .find(|(_, _, r)| r == &Ok(new))
            .map(|(_, at, _)| *at)
        {
            first_on_new = Some(first_on_new.map_or(at, |f: Instant| f.min(at)));
        }
    }
    let reached = first_on_new.expect("writes reached the new primary") - promoted_at;
    eprintln!("writes reached the new primary {reached:?} after pg_ctl promote returned");
    // healthcheck_interval is 100 ms; generous for a loaded machine.
    assert!(
        reached < Duration::from_secs(3),
        "writes reached the new primary {reached:?} after the promotion"
    );
    let roles = pools(&p).await;
    assert!(
        roles.contains(&(new, "primary".into(), "ok".into())),
        "{roles:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_your_writes_never_reads_older_than_the_clients_own_write() {
    let r = Replicated::start(2);
    setup_table(&r);
    let roles = ["primary", "replica", "replica"];
    let db = "primary_reads_enabled = false\nread_your_writes = true";
    let p = Pooler::start(&config(&r, &roles, "", db)).await;
    // Replay paused on one replica: without read-your-writes, reads that land there miss the
    // client's own rows.
    pause_replay(&r.replicas[0]);
    let c = p.connect("postgres", None, "app").await;
    for i in 0..20 {
        let id = value(&c, &format!("INSERT INTO t (v) VALUES ({i}) RETURNING id")).await;
        let found = value(&c, &format!("SELECT count(*) FROM t WHERE id = {id}")).await;
        assert_eq!(found, "1", "read {i} after the client's write sees it");
    }
    let seen = spread(&c, "SELECT inet_server_port()", 20).await;
    assert!(
        !seen.contains_key(&r.replicas[0].port),
        "the paused replica serves none of this client's reads: {seen:?}"
    );
    // Another client that wrote nothing reads from either replica.
    let other = p.connect("postgres", None, "app").await;
    let seen = spread(&other, "SELECT inet_server_port()", 30).await;
    assert!(seen.contains_key(&r.replicas[0].port), "{seen:?}");

    // The same without read-your-writes misses some of its own writes: the test can tell.
    let p2 = Pooler::start(&config(&r, &roles, "", "primary_reads_enabled = false")).await;
    let c = p2.connect("postgres", None, "app").await;
    let mut missed = 0;
    for i in 0..20 {
        let id = value(&c, &format!("INSERT INTO t (v) VALUES ({i}) RETURNING id")).await;
        if value(&c, &format!("SELECT count(*) FROM t WHERE id = {id}")).await == "0" {
            missed += 1;
        }
    }
    assert!(
        missed > 0,
        "without read_your_writes some reads miss the write"
    );
    resume_replay(&r.replicas[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_adds_replicas_and_changes_routing_live() {
    let r = Replicated::start(1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgcorral.toml");
    let single = format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\nadmin_users = [\"postgres\"]\n\
         healthcheck_interval = 100\n\n[databases.app]\ndbname = \"postgres\"\n\
         host = \"127.0.0.1\"\nport = {}\n",
        r.primary.port
    );
    std::fs::write(&path, &single).unwrap();
    let p = Pooler::start(&single).await;
    p.services.config_path.set(path.clone()).unwrap();
    let c = p.connect("postgres", None, "app").await;
    let seen = spread(&c, "SELECT inet_server_port()", 10).await;
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        vec![r.primary.port]
    );

    // RELOAD with a replica added: new logins get the new pools and read from the replica.
    let both = config(
        &r,
        &["primary", "replica"],
        "",
        "primary_reads_enabled = false",
    );
    std::fs::write(&path, &both).unwrap();
    let admin = p.connect("postgres", None, "pgcorral").await;
    admin.simple_query("RELOAD").await.unwrap();
    let c2 = p.connect("postgres", None, "app").await;
    let seen = spread(&c2, "SELECT inet_server_port()", 10).await;
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        vec![r.replicas[0].port],
        "after RELOAD, reads go to the new replica"
    );

    // A routing setting changes for connected clients at once.
    std::fs::write(
        &path,
        both.replace(
            "primary_reads_enabled = false",
            "default_role = \"primary\"",
        ),
    )
    .unwrap();
    admin.simple_query("RELOAD").await.unwrap();
    let seen = spread(&c2, "SELECT inet_server_port()", 10).await;
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        vec![r.primary.port],
        "default_role = primary applies to a connected client"
    );
    drop(c);
}
