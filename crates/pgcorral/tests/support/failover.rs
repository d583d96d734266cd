//! Helpers for the failover tests (failover_*.rs), over a primary and streaming replicas: the
//! queries and settings they share, configs listing the servers with their roles, clients with a
//! server role, which server answered (`inet_server_port()`), and bans as SHOW POOLS and
//! pgcorral's routing state tell them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, SimpleQueryMessage};

use super::replicas::Replicated;
use super::*;

/// Which server ran the query.
pub const PORT_SQL: &str = "SELECT inet_server_port()";

/// A write that says which server ran it (table `t` exists on every server of the cluster).
pub const WRITE_SQL: &str = "INSERT INTO t VALUES (1) RETURNING inet_server_port()";

/// Generous bound for one login or query through pgcorral.
pub const QUERY: Duration = Duration::from_secs(10);

/// Generous bound for the monitor (every 200 ms here) to notice something.
pub const MONITOR: Duration = Duration::from_secs(15);

/// Queries per row: enough that a server that should answer and does not is no accident.
pub const ROUNDS: usize = 40;

/// The parser settings the tests combine.
pub const PARSER_OFF: &str = "query_parser_enabled = false\nprimary_reads_enabled = false";
pub const PARSER_ON: &str = "query_parser_enabled = true\nprimary_reads_enabled = false";
pub const PARSER_ON_PRIMARY_READS: &str =
    "query_parser_enabled = true\nprimary_reads_enabled = true";

/// `[general]`: trust, the console for user postgres, a quick monitor, long bans, and no
/// waiting for a primary that is down; then `extra` lines.
pub fn general(extra: &str) -> String {
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\nadmin_users = [\"postgres\"]\n\
         healthcheck_interval = 200\nban_time = 60000\nserver_unavailable_wait = 0\n{extra}\n\n"
    )
}

/// A `[databases.NAME]` section on server database `postgres` with `servers` as (port, role),
/// then `settings` lines.
pub fn database(name: &str, servers: &[(u16, &str)], settings: &str) -> String {
    let list: Vec<String> = servers
        .iter()
        .map(|(port, role)| {
            format!("  {{ host = \"127.0.0.1\", port = {port}, role = \"{role}\" }},")
        })
        .collect();
    format!(
        "[databases.{name}]\ndbname = \"postgres\"\nservers = [\n{}\n]\n{settings}\n\n",
        list.join("\n")
    )
}

/// Every server of `r`: the primary, then its replicas.
pub fn all_servers(r: &Replicated) -> Vec<(u16, &'static str)> {
    let mut v = vec![(r.primary.port, "primary")];
    v.extend(r.replicas.iter().map(|x| (x.port, "replica")));
    v
}

/// The ports of `r`'s replicas.
pub fn replica_ports(r: &Replicated) -> BTreeSet<u16> {
    r.replicas.iter().map(|x| x.port).collect()
}

/// A client of database `db` through pgcorral, as postgres.
pub async fn client(p: &Pooler, db: &str) -> Client {
    within(
        QUERY,
        "login through pgcorral",
        connect(p.port(), "postgres", None, db),
    )
    .await
    .unwrap_or_else(|e| panic!("login to {db} through pgcorral: {e:?}"))
}

/// A client of `db` whose `SET SERVER ROLE` is `role`.
pub async fn client_as(p: &Pooler, db: &str, role: &str) -> Client {
    let c = client(p, db).await;
    let set = format!("SET SERVER ROLE TO '{role}'");
    within(QUERY, &set, c.simple_query(&set))
        .await
        .unwrap_or_else(|e| panic!("{set}: {e:?}"));
    let shown = first_value(
        &within(
            QUERY,
            "SHOW SERVER ROLE",
            c.simple_query("SHOW SERVER ROLE"),
        )
        .await
        .unwrap_or_else(|e| panic!("SHOW SERVER ROLE: {e:?}")),
    );
    assert_eq!(shown.as_deref(), Some(role), "SHOW SERVER ROLE after {set}");
    c
}

/// The first value of the first row of a simple query's answer (`None` for NULL or no row).
pub fn first_value(msgs: &[SimpleQueryMessage]) -> Option<String> {
    msgs.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    })
}

/// Runs `sql` (simple protocol), whose one value is a server port; returns that port.
pub async fn answered(c: &Client, sql: &str) -> Result<u16, tokio_postgres::Error> {
    let msgs = within(QUERY, sql, c.simple_query(sql)).await?;
    let v = first_value(&msgs).unwrap_or_else(|| panic!("{sql}: no row"));
    Ok(v.parse()
        .unwrap_or_else(|_| panic!("{sql}: {v:?} is not a port")))
}

/// Runs `sql` `n` times; how many times each port answered. Any error fails the test.
pub async fn spread(c: &Client, sql: &str, n: usize, row: &str) -> BTreeMap<u16, usize> {
    let mut seen = BTreeMap::new();
    for i in 0..n {
        let port = answered(c, sql)
            .await
            .unwrap_or_else(|e| panic!("[{row}] query {i} ({sql}) failed: {}", describe(&e)));
        *seen.entry(port).or_default() += 1;
    }
    seen
}

/// SQLSTATE and message of an error, for assertion messages.
pub fn describe(e: &tokio_postgres::Error) -> String {
    format!("SQLSTATE {:?}: {} ({e:?})", sqlstate(e), db_message(e))
}

/// The ports that answered, from a [`spread`] count.
pub fn ports(seen: &BTreeMap<u16, usize>) -> BTreeSet<u16> {
    seen.keys().copied().collect()
}

/// One pool's row of SHOW POOLS: pgcorral's columns.
#[derive(Debug, Clone)]
pub struct PoolRow {
    pub database: String,
    pub server: String,
    pub role: String,
    pub status: String,
    pub lag_bytes: Option<String>,
}

/// SHOW POOLS on the admin console (simple protocol).
pub async fn show_pools(p: &Pooler) -> Vec<PoolRow> {
    let c = within(
        QUERY,
        "console login",
        connect(p.port(), "postgres", None, "pgcorral"),
    )
    .await
    .unwrap_or_else(|e| panic!("console login: {e:?}"));
    let msgs = within(QUERY, "SHOW POOLS", c.simple_query("SHOW POOLS"))
        .await
        .unwrap_or_else(|e| panic!("SHOW POOLS: {e:?}"));
    let text = |r: &tokio_postgres::SimpleQueryRow, col: &str| {
        r.try_get(col)
            .unwrap_or_else(|e| panic!("SHOW POOLS has no column {col}: {e}"))
            .map(str::to_string)
    };
    msgs.iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(PoolRow {
                database: text(r, "database").unwrap_or_default(),
                server: text(r, "server").unwrap_or_default(),
                role: text(r, "role").unwrap_or_default(),
                status: text(r, "status").unwrap_or_default(),
                lag_bytes: text(r, "lag_bytes"),
            }),
            _ => None,
        })
        .collect()
}

/// The SHOW POOLS row of server `port` in database `db`.
pub async fn pool_row(p: &Pooler, db: &str, port: u16) -> PoolRow {
    let rows = show_pools(p).await;
    let server = format!("127.0.0.1:{port}");
    rows.iter()
        .find(|r| r.database == db && r.server == server)
        .cloned()
        .unwrap_or_else(|| panic!("no SHOW POOLS row for {db} on {server}: {rows:?}"))
}

/// Whether pgcorral's routing holds a ban in force on server `port` of database `db`. SHOW POOLS
/// says `down` rather than `banned` for a replica the monitor finds unreachable, though it is
/// banned as well; this tells the two apart.
pub fn ban_in_force(p: &Pooler, db: &str, port: u16) -> bool {
    let now = Instant::now();
    p.services
        .pools
        .topologies()
        .iter()
        .filter(|t| t.database == db)
        .flat_map(|t| t.nodes.iter())
        .filter(|n| n.port == port)
        .any(|n| n.state().banned_until.is_some_and(|until| until > now))
}

/// Waits until server `port` of `db` is out of rotation: banned, and SHOW POOLS says `banned`
/// (or `down`, once the monitor also found it unreachable: a replica that fails its check is
/// banned by it). Returns the status shown.
pub async fn assert_banned(p: &Pooler, db: &str, port: u16, row: &str) -> String {
    let deadline = Instant::now() + MONITOR;
    loop {
        let r = pool_row(p, db, port).await;
        let banned = ban_in_force(p, db, port);
        if banned && (r.status == "banned" || r.status == "down") {
            assert_eq!(r.role, "replica", "[{row}] role of {port}");
            return r.status;
        }
        assert!(
            Instant::now() < deadline,
            "[{row}] server {port} of {db} is not out of rotation after {MONITOR:?}: \
             SHOW POOLS says {r:?}, ban in force: {banned}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The primary of `db` is not banned, by SHOW POOLS or by routing.
pub async fn assert_primary_not_banned(p: &Pooler, db: &str, port: u16, row: &str) -> String {
    let r = pool_row(p, db, port).await;
    assert_eq!(
        r.role, "primary",
        "[{row}] role of the primary in SHOW POOLS"
    );
    assert!(
        r.status == "ok" || r.status == "down",
        "[{row}] the primary must never be banned: SHOW POOLS says {r:?}"
    );
    assert!(
        !ban_in_force(p, db, port),
        "[{row}] pgcorral holds a ban on the primary {port}"
    );
    r.status
}
