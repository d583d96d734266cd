//! The console's parts PgBouncer added after 1.18, against a real PostgreSQL: connection ids
//! (a client's before its login's server, SHOW SOCKETS), idle clients shown `idle`, KILL of
//! every database, KILL_CLIENT by id with PgBouncer's words, SHOW STATS' server assignments,
//! logins and prepared-statement counts (the console's own commands and logins as database
//! `pgbouncer`), SHOW USERS' pool columns, and the topics pgcorral keeps nothing for.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use support::wire::{column_names, Wire};
use support::*;

const ADMIN: &str = "admin_users = [\"postgres\"]";

async fn pooler(pg: &Postgres, general: &str) -> Pooler {
    Pooler::start(&config(pg, "postgres", &format!("{ADMIN}\n{general}"))).await
}

async fn console(p: &Pooler) -> Wire {
    Wire::connect(p.port(), "postgres", "pgbouncer").await
}

/// The answer to `sql`: its column names and its rows as (column → value, "" for NULL).
async fn rows(w: &mut Wire, sql: &str) -> (Vec<String>, Vec<HashMap<String, String>>) {
    let msgs = w.simple(sql).await;
    if let Some(e) = msgs.iter().find(|m| m.tag == b'E') {
        panic!("{sql}: {:?}", e.field(b'M'));
    }
    let cols = column_names(
        &msgs
            .iter()
            .find(|m| m.tag == b'T')
            .expect("RowDescription")
            .body,
    );
    let rows = msgs
        .iter()
        .filter(|m| m.tag == b'D')
        .map(|m| {
            cols.iter()
                .cloned()
                .zip(m.row().into_iter().map(Option::unwrap_or_default))
                .collect()
        })
        .collect();
    (cols, rows)
}

/// Runs a console command: Ok(command tag) or Err((SQLSTATE, message)).
async fn admin(w: &mut Wire, sql: &str) -> Result<String, (String, String)> {
    let msgs = w.simple(sql).await;
    if let Some(e) = msgs.iter().find(|m| m.tag == b'E') {
        return Err((e.code(), e.field(b'M').unwrap_or_default()));
    }
    Ok(msgs
        .iter()
        .find(|m| m.tag == b'C')
        .map(|m| m.text())
        .unwrap_or_default())
}

fn num(row: &HashMap<String, String>, col: &str) -> u64 {
    row.get(col)
        .unwrap_or_else(|| panic!("no {col} in {row:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{col} is not a number in {row:?}"))
}

fn ids(rows: &[HashMap<String, String>]) -> Vec<u64> {
    rows.iter().map(|r| num(r, "id")).collect()
}

/// In session mode a client's id comes before the id of the server its login opens, as
/// PgBouncer numbers them (its suite checks exactly this); SHOW SOCKETS lists both and the
/// console; `ptr` is the id in hex; a client holding no server is `idle`, one in a
/// transaction `active`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_follow_logins_and_idle_clients_are_idle() {
    let pg = Postgres::start();
    let p = pooler(&pg, "pool_mode = \"session\"").await;
    let mut w = console(&p).await;
    let (_, me) = rows(&mut w, "SHOW SOCKETS").await;
    assert_eq!(me.len(), 1, "the console alone: {me:?}");
    let first = num(&me[0], "id");
    assert_eq!(me[0]["state"], "cl_active");
    assert_eq!(me[0]["ptr"], format!("{first:#x}"));

    let c = p.connect("postgres", None, "postgres").await;
    c.simple_query("SELECT 1").await.unwrap();
    let (cols, all) = rows(&mut w, "SHOW SOCKETS").await;
    assert!(cols.ends_with(&["replication", "prepared_statements", "id"].map(String::from)));
    let mut got = ids(&all);
    got.sort();
    assert_eq!(got, vec![first, first + 1, first + 2], "{all:?}");
    let (_, servers) = rows(&mut w, "SHOW SERVERS").await;
    assert_eq!(
        ids(&servers),
        vec![first + 2],
        "the server after its client"
    );
    let (_, clients) = rows(&mut w, "SHOW CLIENTS").await;
    let client = clients
        .iter()
        .find(|r| r["database"] == "postgres")
        .unwrap();
    assert_eq!(num(client, "id"), first + 1);
    assert_eq!(
        client["state"], "active",
        "session mode: it holds its server"
    );
    assert_eq!(client["replication"], "none");
    let (_, active) = rows(&mut w, "SHOW ACTIVE_SOCKETS").await;
    assert_eq!(active.len(), 2, "the client and its server: {active:?}");
    drop(c);

    // Transaction mode: a client between transactions holds nothing.
    let t = pooler(&pg, "pool_mode = \"transaction\"").await;
    let mut w = console(&t).await;
    let c = t.connect("postgres", None, "postgres").await;
    c.simple_query("SELECT 1").await.unwrap();
    let state = |rows: &[HashMap<String, String>]| {
        rows.iter()
            .find(|r| r["database"] == "postgres")
            .map(|r| r["state"].clone())
    };
    let (_, clients) = rows(&mut w, "SHOW CLIENTS").await;
    assert_eq!(state(&clients).as_deref(), Some("idle"), "{clients:?}");
    c.simple_query("BEGIN").await.unwrap();
    let (_, clients) = rows(&mut w, "SHOW CLIENTS").await;
    assert_eq!(state(&clients).as_deref(), Some("active"), "{clients:?}");
}

/// KILL without a name ends the clients of every database but the console's; KILL of an
/// unknown database and KILL_CLIENT of a non-number or an unknown id are refused in
/// PgBouncer's words (08P01); KILL_CLIENT takes SHOW CLIENTS' `id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_everything_and_kill_client_by_id() {
    let pg = Postgres::start();
    let p = pooler(&pg, "").await;
    let mut w = console(&p).await;
    let a = p.connect("postgres", None, "postgres").await;
    let b = p.connect("postgres", None, "postgres").await;
    let refused = |code: &str, msg: &str| Err((code.to_string(), msg.to_string()));
    assert_eq!(
        admin(&mut w, "KILL dne").await,
        refused("08P01", "no such database: dne")
    );
    assert_eq!(
        admin(&mut w, "KILL_CLIENT not_an_id").await,
        refused("08P01", "invalid client pointer supplied")
    );
    assert_eq!(
        admin(&mut w, "KILL_CLIENT 1000000").await,
        refused("08P01", "client not found")
    );
    let (_, clients) = rows(&mut w, "SHOW CLIENTS").await;
    let of_a = clients
        .iter()
        .filter(|r| r["database"] == "postgres")
        .map(|r| num(r, "id"))
        .min()
        .unwrap();
    assert_eq!(
        admin(&mut w, &format!("KILL_CLIENT {of_a}")).await,
        Ok("KILL_CLIENT".into())
    );
    let e = a.simple_query("SELECT 1").await.unwrap_err();
    assert!(e.is_closed() || e.as_db_error().is_some(), "{e}");
    assert_eq!(admin(&mut w, "KILL").await, Ok("KILL".into()));
    let e = b.simple_query("SELECT 1").await.unwrap_err();
    assert!(e.is_closed() || e.as_db_error().is_some(), "{e}");
    let (_, clients) = rows(&mut w, "SHOW CLIENTS").await;
    assert_eq!(clients.len(), 1, "the console is left: {clients:?}");
    assert_eq!(admin(&mut w, "RESUME").await, Ok("RESUME".into()));
}

/// SHOW STATS counts server assignments (one per checkout), client logins, clients' named
/// Parses, the Parses pgcorral sent to servers for them and Binds of named statements; the
/// console's commands and logins are database `pgbouncer`'s, as PgBouncer's admin pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_assignments_logins_and_prepared_statements() {
    let pg = Postgres::start();
    let p = pooler(&pg, "pool_mode = \"transaction\"").await;
    let c = p.connect("postgres", None, "postgres").await;
    let stmt = c.prepare("SELECT $1::int4").await.unwrap();
    for i in 0..3 {
        let row = c.query_one(&stmt, &[&i]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), i);
    }
    c.simple_query("SELECT 1").await.unwrap();
    // The last transaction's counts are recorded as its relay ends.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut w = console(&p).await;
    let (cols, stats) = rows(&mut w, "SHOW STATS").await;
    assert!(cols.contains(&"total_server_assignment_count".to_string()));
    let s = stats.iter().find(|r| r["database"] == "postgres").unwrap();
    assert_eq!(num(s, "total_client_login_count"), 1, "{s:?}");
    assert_eq!(num(s, "total_client_parse_count"), 1, "{s:?}");
    assert_eq!(num(s, "total_bind_count"), 3, "{s:?}");
    assert!(num(s, "total_server_parse_count") >= 1, "{s:?}");
    // The prepare, three queries and a simple query: a checkout each (and the login's).
    assert!(num(s, "total_server_assignment_count") >= 5, "{s:?}");
    let console_row = stats.iter().find(|r| r["database"] == "pgbouncer").unwrap();
    assert_eq!(num(console_row, "total_client_login_count"), 1);
    assert_eq!(num(console_row, "total_xact_count"), 1, "SHOW STATS itself");
    assert_eq!(num(console_row, "total_query_count"), 1);

    let (_, totals) = rows(&mut w, "SHOW STATS_TOTALS").await;
    let t = totals.iter().find(|r| r["database"] == "postgres").unwrap();
    assert_eq!(num(t, "client_login_count"), 1);
    assert_eq!(num(t, "bind_count"), 3);
    let (cols, _) = rows(&mut w, "SHOW STATS_AVERAGES").await;
    assert!(
        cols.contains(&"avg_client_login_count".to_string()),
        "{cols:?}"
    );
    let (_, totals) = rows(&mut w, "SHOW TOTALS").await;
    let total = |name: &str| {
        totals
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| num(r, "value"))
            .unwrap_or_else(|| panic!("no {name} in {totals:?}"))
    };
    assert_eq!(
        total("total_client_login_count"),
        2,
        "the client and the console"
    );
    assert_eq!(total("total_ps_bind_count"), 3);
}

/// SHOW USERS has PgBouncer's pool columns (a user's own pool_size as text, empty when it
/// has none; its servers open now); SHOW DATABASES its server_lifetime; the topics pgcorral
/// keeps nothing for answer with PgBouncer's columns and no rows; SHOW LISTS counts peers;
/// the session settings drivers read and set are answered and ignored, as PgBouncer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_databases_and_empty_topics() {
    let pg = Postgres::start();
    let toml = format!(
        "{}\n[users.postgres]\npool_size = 7\n",
        config(&pg, "postgres", &format!("{ADMIN}\nserver_lifetime = 5000"))
    );
    let p = Pooler::start(&toml).await;
    let c = p.connect("postgres", None, "postgres").await;
    c.simple_query("SELECT 1").await.unwrap();
    let mut w = console(&p).await;
    let (_, users) = rows(&mut w, "SHOW USERS").await;
    let u = users.iter().find(|r| r["name"] == "postgres").unwrap();
    assert_eq!(u["pool_size"], "7");
    assert_eq!(u["reserve_pool_size"], "");
    assert_eq!(num(u, "current_connections"), 1, "{u:?}");
    let console_user = users.iter().find(|r| r["name"] == "pgbouncer").unwrap();
    assert_eq!(console_user["pool_size"], "");
    assert_eq!(num(console_user, "current_connections"), 0);

    let (_, dbs) = rows(&mut w, "SHOW DATABASES").await;
    let d = dbs.iter().find(|r| r["name"] == "postgres").unwrap();
    assert_eq!(num(d, "server_lifetime"), 5);
    assert_eq!(d["load_balance_hosts"], "");

    for (topic, first) in [
        ("PEERS", "peer_id"),
        ("PEER_POOLS", "database"),
        ("MEM", "name"),
        ("DNS_HOSTS", "hostname"),
        ("DNS_ZONES", "zonename"),
    ] {
        let (cols, rows) = rows(&mut w, &format!("SHOW {topic}")).await;
        assert_eq!(cols[0], first, "SHOW {topic}");
        assert!(rows.is_empty(), "SHOW {topic}: {rows:?}");
    }
    let (_, lists) = rows(&mut w, "SHOW LISTS").await;
    assert!(lists.iter().any(|r| r["list"] == "peers"), "{lists:?}");

    // Session settings drivers touch: SHOW answers, SET is ignored with a notice.
    let (cols, enc) = rows(&mut w, "SHOW client_encoding").await;
    assert_eq!(
        (cols[0].as_str(), enc[0]["client_encoding"].as_str()),
        ("client_encoding", "UTF8")
    );
    let msgs = w.simple("SET TimeZone = 'Europe/Paris'").await;
    let notice = msgs.iter().find(|m| m.tag == b'N').expect("a notice");
    assert_eq!(notice.field(b'M').as_deref(), Some("SET ignored"));
    assert_eq!(admin(&mut w, "SHOW timezone").await, Ok("SHOW".into()));
}
