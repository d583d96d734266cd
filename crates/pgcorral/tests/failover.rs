//! Failover with a primary and streaming replicas, as a client sees it: where reads and writes
//! go for each combination of `SET SERVER ROLE`, `query_parser_enabled` and
//! `primary_reads_enabled` while every server is up, what happens when a replica or the primary
//! is down (requests move on, a failed replica is banned, the primary never is, a request that
//! needs the primary fails), bans lifted when every replica is banned, the checkout-time health
//! check of a frozen replica, and a replica killed under pgbench load.
//!
//! Which server answered is read from `inet_server_port()`; bans from SHOW POOLS on the admin
//! console (and, to tell a banned server from one that is only reported down, from pgcorral's
//! routing state in this process).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::replicas::{self, Replicated};
use support::*;
use tokio_postgres::{Client, SimpleQueryMessage};

/// Which server ran the query.
const PORT_SQL: &str = "SELECT inet_server_port()";
/// A write that says which server ran it (table `t` exists on every server of the cluster).
const WRITE_SQL: &str = "INSERT INTO t VALUES (1) RETURNING inet_server_port()";
/// SQLSTATE read_only_sql_transaction: a write reached a replica.
const READ_ONLY: &str = "25006";
/// Generous bound for one login or query through pgcorral.
const QUERY: Duration = Duration::from_secs(10);
/// Generous bound for the monitor (every 200 ms here) to notice something.
const MONITOR: Duration = Duration::from_secs(15);
/// Queries per row: enough that a server that should answer and does not is no accident.
const ROUNDS: usize = 40;

const PARSER_OFF: &str = "query_parser_enabled = false\nprimary_reads_enabled = false";
const PARSER_ON: &str = "query_parser_enabled = true\nprimary_reads_enabled = false";
const PARSER_ON_PRIMARY_READS: &str = "query_parser_enabled = true\nprimary_reads_enabled = true";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A primary and two replicas that every test may use but none stops: the tests whose servers
/// stay up share it. Table `t` exists (and has reached the replicas). Never dropped: the
/// fixtures' watchdog stops it once the test process has exited.
fn steady() -> &'static Replicated {
    static STEADY: OnceLock<Replicated> = OnceLock::new();
    blocking(|| {
        STEADY.get_or_init(|| {
            let r = Replicated::start(2);
            r.primary.sql("postgres", "CREATE TABLE t (id int)");
            r.wait_caught_up();
            r
        })
    })
}

/// A cluster of our own (for tests that stop, kill or freeze servers), with table `t`.
fn own_cluster() -> Replicated {
    blocking(|| {
        let r = Replicated::start(2);
        r.primary.sql("postgres", "CREATE TABLE t (id int)");
        r.wait_caught_up();
        r
    })
}

/// `[general]`: trust, the console for user postgres, a quick monitor, long bans, and no
/// waiting for a primary that is down; then `extra` lines.
fn general(extra: &str) -> String {
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\nadmin_users = [\"postgres\"]\n\
         healthcheck_interval = 200\nban_time = 60000\nserver_unavailable_wait = 0\n{extra}\n\n"
    )
}

/// A `[databases.NAME]` section on server database `postgres` with `servers` as (port, role),
/// then `settings` lines.
fn database(name: &str, servers: &[(u16, &str)], settings: &str) -> String {
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

/// A port where nothing listens: bound (not listening) for as long as the returned socket
/// lives, so that no server started meanwhile can take it. Connecting to it is refused.
fn dead_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind");
    let port = socket.local_addr().expect("local address").port();
    (socket, port)
}

/// Every server of `r`: the primary, then its replicas.
fn all_servers(r: &Replicated) -> Vec<(u16, &'static str)> {
    let mut v = vec![(r.primary.port, "primary")];
    v.extend(r.replicas.iter().map(|x| (x.port, "replica")));
    v
}

fn replica_ports(r: &Replicated) -> BTreeSet<u16> {
    r.replicas.iter().map(|x| x.port).collect()
}

/// A client of database `db` through pgcorral, as postgres.
async fn client(p: &Pooler, db: &str) -> Client {
    within(
        QUERY,
        "login through pgcorral",
        connect(p.port(), "postgres", None, db),
    )
    .await
    .unwrap_or_else(|e| panic!("login to {db} through pgcorral: {e:?}"))
}

/// A client of `db` whose `SET SERVER ROLE` is `role`.
async fn client_as(p: &Pooler, db: &str, role: &str) -> Client {
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

fn first_value(msgs: &[SimpleQueryMessage]) -> Option<String> {
    msgs.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    })
}

/// Runs `sql` (simple protocol), whose one value is a server port; returns that port.
async fn answered(c: &Client, sql: &str) -> Result<u16, tokio_postgres::Error> {
    let msgs = within(QUERY, sql, c.simple_query(sql)).await?;
    let v = first_value(&msgs).unwrap_or_else(|| panic!("{sql}: no row"));
    Ok(v.parse()
        .unwrap_or_else(|_| panic!("{sql}: {v:?} is not a port")))
}

/// `SELECT inet_server_port()` through the extended protocol.
async fn answered_extended(c: &Client) -> Result<u16, tokio_postgres::Error> {
    let row = within(QUERY, "extended SELECT", c.query_one(PORT_SQL, &[])).await?;
    Ok(row.get::<_, i32>(0) as u16)
}

/// Runs `sql` `n` times; how many times each port answered. Any error fails the test.
async fn spread(c: &Client, sql: &str, n: usize, row: &str) -> BTreeMap<u16, usize> {
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
fn describe(e: &tokio_postgres::Error) -> String {
    format!("SQLSTATE {:?}: {} ({e:?})", sqlstate(e), db_message(e))
}

fn ports(seen: &BTreeMap<u16, usize>) -> BTreeSet<u16> {
    seen.keys().copied().collect()
}

/// One pool's row of SHOW POOLS: pgcorral's columns.
#[derive(Debug, Clone)]
struct PoolRow {
    database: String,
    server: String,
    role: String,
    status: String,
    lag_bytes: Option<String>,
}

/// SHOW POOLS on the admin console (simple protocol).
async fn show_pools(p: &Pooler) -> Vec<PoolRow> {
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
async fn pool_row(p: &Pooler, db: &str, port: u16) -> PoolRow {
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
fn ban_in_force(p: &Pooler, db: &str, port: u16) -> bool {
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
async fn assert_banned(p: &Pooler, db: &str, port: u16, row: &str) -> String {
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
async fn assert_primary_not_banned(p: &Pooler, db: &str, port: u16, row: &str) -> String {
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

/// Waits until SHOW POOLS shows `want` for server `port` of `db`.
async fn wait_status(p: &Pooler, db: &str, port: u16, want: &str, what: &str) {
    let deadline = Instant::now() + MONITOR;
    loop {
        let r = pool_row(p, db, port).await;
        if r.status == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: SHOW POOLS does not say {want:?} for {port} of {db} after {MONITOR:?}: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An error a client gets when the server its request needs is down: connection trouble
/// (class 08) or a server shutting down (57P01..57P03). Returns the SQLSTATE.
fn assert_unavailable(e: &tokio_postgres::Error, row: &str) -> String {
    let code = sqlstate(e);
    println!("[{row}] error as expected: {}", describe(e));
    assert!(
        code.starts_with("08") || ["57P01", "57P02", "57P03"].contains(&code.as_str()),
        "[{row}] expected a connection error (class 08 or 57P0x), got {}",
        describe(e)
    );
    code
}

/// A server's processes stopped with SIGSTOP; SIGCONT on drop, so that a failing test leaves
/// no frozen server behind.
struct Frozen {
    pids: Vec<String>,
}

impl Frozen {
    /// Freezes the postmaster of `pg` (first, so it forks nothing meanwhile), then its children.
    fn freeze(pg: &Postgres) -> Frozen {
        let pidfile = std::fs::read_to_string(pg.dir.join("postmaster.pid"))
            .unwrap_or_else(|e| panic!("postmaster.pid of {}: {e}", pg.port));
        let postmaster = pidfile
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        assert!(
            postmaster.parse::<u32>().is_ok(),
            "postmaster.pid starts with {postmaster:?}"
        );
        let mut frozen = Frozen { pids: Vec::new() };
        frozen.pids.push(postmaster.clone());
        signal("STOP", &frozen.pids);
        let out = Command::new("pgrep")
            .args(["-P", &postmaster])
            .output()
            .expect("pgrep runs");
        let children: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        assert!(
            !children.is_empty(),
            "no children of postmaster {postmaster}"
        );
        frozen.pids.extend(children.iter().cloned());
        signal("STOP", &children);
        let state = std::fs::read_to_string(format!("/proc/{postmaster}/stat")).unwrap_or_default();
        assert!(
            state
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('T'),
            "postmaster {postmaster} is not stopped: {state}"
        );
        frozen
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal("CONT", &self.pids);
    }
}

fn signal(sig: &str, pids: &[String]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .args(pids)
        .status();
}

// ---------------------------------------------------------------------------------------------
// Every server up
// ---------------------------------------------------------------------------------------------

/// Parser off, role unset (default_role any): reads and writes go to any server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parser_off_sends_reads_and_writes_to_any_server() {
    let r = steady();
    let p = Pooler::start(&(general("") + &database("app", &all_servers(r), PARSER_OFF))).await;
    let every: BTreeSet<u16> = all_servers(r).iter().map(|(port, _)| *port).collect();

    let row = "read | unset | parser off | primary_reads off | up";
    let c = client(&p, "app").await;
    let seen = spread(&c, PORT_SQL, ROUNDS, row).await;
    println!("[{row}] answered by {seen:?}");
    assert_eq!(
        ports(&seen),
        every,
        "[{row}] the primary and both replicas should answer (primary {}): {seen:?}",
        r.primary.port
    );

    let row = "write | unset | parser off | primary_reads off | up";
    let (mut on_primary, mut refused) = (0, 0);
    for i in 0..ROUNDS {
        match answered(&c, WRITE_SQL).await {
            Ok(port) => {
                assert_eq!(
                    port, r.primary.port,
                    "[{row}] write {i} succeeded on a server that is not the primary"
                );
                on_primary += 1;
            }
            Err(e) => {
                assert_eq!(
                    sqlstate(&e),
                    READ_ONLY,
                    "[{row}] write {i}: only replicas may refuse it: {}",
                    describe(&e)
                );
                refused += 1;
            }
        }
    }
    println!("[{row}] {on_primary} writes on the primary, {refused} refused by a replica");
    assert!(on_primary > 0, "[{row}] no write reached the primary");
    assert!(refused > 0, "[{row}] no write reached a replica (25006)");
}

/// Parser off, `SET SERVER ROLE` replica or primary: every request goes where the role says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_server_role_pins_reads_and_writes() {
    let r = steady();
    let p = Pooler::start(&(general("") + &database("app", &all_servers(r), PARSER_OFF))).await;

    let row = "read | replica | parser off | primary_reads off | up";
    let c = client_as(&p, "app", "replica").await;
    let seen = spread(&c, PORT_SQL, ROUNDS, row).await;
    println!("[{row}] answered by {seen:?}");
    assert_eq!(
        ports(&seen),
        replica_ports(r),
        "[{row}] only (and both) replicas should answer: {seen:?}"
    );

    let row = "write | replica | parser off | primary_reads off | up";
    for i in 0..10 {
        let e = answered(&c, WRITE_SQL)
            .await
            .map(|port| panic!("[{row}] write {i} succeeded on {port}"))
            .unwrap_err();
        assert_eq!(
            sqlstate(&e),
            READ_ONLY,
            "[{row}] write {i}: {}",
            describe(&e)
        );
    }

    let row = "read | primary | parser off | primary_reads off | up";
    let c = client_as(&p, "app", "primary").await;
    let seen = spread(&c, PORT_SQL, ROUNDS, row).await;
    assert_eq!(
        ports(&seen),
        BTreeSet::from([r.primary.port]),
        "[{row}] only the primary should answer: {seen:?}"
    );

    let row = "write | primary | parser off | primary_reads off | up";
    let seen = spread(&c, WRITE_SQL, 10, row).await;
    assert_eq!(
        ports(&seen),
        BTreeSet::from([r.primary.port]),
        "[{row}] every write should run on the primary: {seen:?}"
    );
}

/// Parser on, primary reads off: plain SELECTs on the replicas only (simple and extended
/// protocol), writes on the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parser_on_without_primary_reads_reads_replicas_writes_primary() {
    let r = steady();
    let p = Pooler::start(&(general("") + &database("app", &all_servers(r), PARSER_ON))).await;
    let c = client(&p, "app").await;

    let row = "read | unset | parser on | primary_reads off | up";
    let seen = spread(&c, PORT_SQL, ROUNDS, row).await;
    println!("[{row}] answered by {seen:?}");
    assert_eq!(
        ports(&seen),
        replica_ports(r),
        "[{row}] only (and both) replicas should answer: {seen:?}"
    );
    let mut extended = BTreeSet::new();
    for i in 0..ROUNDS {
        let port = answered_extended(&c)
            .await
            .unwrap_or_else(|e| panic!("[{row}] extended read {i}: {}", describe(&e)));
        extended.insert(port);
    }
    assert_eq!(
        extended,
        replica_ports(r),
        "[{row}] extended protocol: only (and both) replicas should answer"
    );

    let row = "write | unset | parser on | primary_reads off | up";
    // A client of its own: see pipelined_write_after_a_read_goes_to_the_primary.
    let c = client(&p, "app").await;
    let seen = spread(&c, WRITE_SQL, 20, row).await;
    assert_eq!(
        ports(&seen),
        BTreeSet::from([r.primary.port]),
        "[{row}] every write should run on the primary: {seen:?}"
    );
}

/// Parser on, primary reads on: plain SELECTs on any server, writes on the primary; SHOW POOLS
/// shows each server's role, all `ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parser_on_with_primary_reads_reads_everywhere_writes_primary() {
    let r = steady();
    let p =
        Pooler::start(&(general("") + &database("app", &all_servers(r), PARSER_ON_PRIMARY_READS)))
            .await;
    let c = client(&p, "app").await;

    let row = "read | unset | parser on | primary_reads on | up";
    let seen = spread(&c, PORT_SQL, ROUNDS, row).await;
    println!("[{row}] answered by {seen:?}");
    let every: BTreeSet<u16> = all_servers(r).iter().map(|(port, _)| *port).collect();
    assert_eq!(
        ports(&seen),
        every,
        "[{row}] the primary and both replicas should answer (primary {}): {seen:?}",
        r.primary.port
    );

    let row = "write | unset | parser on | primary_reads on | up";
    // A client of its own: see pipelined_write_after_a_read_goes_to_the_primary.
    let c = client(&p, "app").await;
    let seen = spread(&c, WRITE_SQL, 20, row).await;
    assert_eq!(
        ports(&seen),
        BTreeSet::from([r.primary.port]),
        "[{row}] every write should run on the primary: {seen:?}"
    );

    for (port, role) in all_servers(r) {
        let shown = pool_row(&p, "app", port).await;
        assert_eq!(
            (shown.role.as_str(), shown.status.as_str()),
            (role, "ok"),
            "SHOW POOLS for {port} with every server up: {shown:?}"
        );
    }
}

/// Parser on: a write the client pipelines behind a read (sent before the read's answer came)
/// is a transaction of its own and goes to the primary. Two ways: two simple Queries in one
/// write on the raw protocol, and tokio-postgres, whose Close of a dropped statement (with its
/// Sync) goes out in the same write as the next query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_write_after_a_read_goes_to_the_primary() {
    let r = steady();
    let p = Pooler::start(&(general("") + &database("app", &all_servers(r), PARSER_ON))).await;

    let row = "pipelined simple queries: read then write";
    let mut raw = raw::Raw::login(p.port(), "postgres", "app")
        .await
        .unwrap_or_else(|e| panic!("[{row}] raw login: {e:?}"));
    let mut out = bytes::BytesMut::new();
    pgwire::encode::query(&mut out, PORT_SQL);
    pgwire::encode::query(&mut out, WRITE_SQL);
    raw.send(&out).await;
    // Per query: the port that answered, or the error's SQLSTATE.
    let mut answers = Vec::new();
    let mut this = None;
    while answers.len() < 2 {
        let (tag, body) = raw
            .read()
            .await
            .unwrap_or_else(|| panic!("[{row}] connection closed after {answers:?}"));
        match tag {
            pgwire::backend::DATA_ROW => {
                this = Some(wire::first_column(&body).unwrap_or_else(|| "NULL".into()))
            }
            pgwire::backend::ERROR_RESPONSE => {
                let e = pgwire::backend::ErrorFields::parse(&body).expect("error fields");
                this = Some(format!("SQLSTATE {} ({})", e.code, e.message));
            }
            pgwire::backend::READY_FOR_QUERY => answers.push(this.take().unwrap_or_default()),
            _ => {}
        }
    }
    println!("[{row}] answers {answers:?}");
    assert!(
        replica_ports(r)
            .iter()
            .any(|port| answers[0] == port.to_string()),
        "[{row}] the read should run on a replica: {answers:?}"
    );
    assert_eq!(
        answers[1],
        r.primary.port.to_string(),
        "[{row}] the pipelined write should run on the primary {}",
        r.primary.port
    );

    let row = "tokio-postgres: write after an extended-protocol read";
    let c = client(&p, "app").await;
    for i in 0..5 {
        let read = answered_extended(&c)
            .await
            .unwrap_or_else(|e| panic!("[{row}] read {i}: {}", describe(&e)));
        assert_ne!(read, r.primary.port, "[{row}] read {i} ran on the primary");
        let write = answered(&c, WRITE_SQL)
            .await
            .unwrap_or_else(|e| panic!("[{row}] write {i} after a read: {}", describe(&e)));
        assert_eq!(write, r.primary.port, "[{row}] write {i}");
    }
}

// ---------------------------------------------------------------------------------------------
// A replica down
// ---------------------------------------------------------------------------------------------

/// Parser off, a listed replica where nothing listens: reads (role unset or replica) all succeed
/// elsewhere and the dead replica is banned, the primary never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_replica_with_parser_off_is_banned_and_skipped() {
    let r = steady();
    let (_held, dead) = dead_port();
    let live = r.replicas[0].port;
    let servers = [
        (r.primary.port, "primary"),
        (live, "replica"),
        (dead, "replica"),
    ];

    let row = "read | unset | parser off | primary_reads off | down (dead replica listed)";
    let p = Pooler::start(&(general("") + &database("app", &servers, PARSER_OFF))).await;
    let c = client(&p, "app").await;
    let seen = spread(&c, PORT_SQL, ROUNDS, row).await;
    println!("[{row}] answered by {seen:?}");
    assert_eq!(
        ports(&seen),
        BTreeSet::from([r.primary.port, live]),
        "[{row}] the primary and the live replica should answer: {seen:?}"
    );
    let status = assert_banned(&p, "app", dead, row).await;
    println!("[{row}] dead replica {dead}: SHOW POOLS status {status:?}, banned");
    assert_primary_not_banned(&p, "app", r.primary.port, row).await;
    drop((c, p));

    let row = "read | replica | parser off | primary_reads off | down (dead replica listed)";
    let p = Pooler::start(&(general("") + &database("app", &servers, PARSER_OFF))).await;
    let c = client_as(&p, "app", "replica").await;
    let seen = spread(&c, PORT_SQL, ROUNDS, row).await;
    assert_eq!(
        ports(&seen),
        BTreeSet::from([live]),
        "[{row}] only the live replica should answer: {seen:?}"
    );
    let status = assert_banned(&p, "app", dead, row).await;
    println!("[{row}] dead replica {dead}: SHOW POOLS status {status:?}, banned");
    assert_primary_not_banned(&p, "app", r.primary.port, row).await;
}

/// Parser on, primary reads off, a listed replica where nothing listens: every read succeeds on
/// the live replica; the dead one is banned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_replica_with_parser_on_is_banned_and_skipped() {
    let r = steady();
    let (_held, dead) = dead_port();
    let live = r.replicas[1].port;
    let servers = [
        (r.primary.port, "primary"),
        (dead, "replica"),
        (live, "replica"),
    ];
    let p = Pooler::start(&(general("") + &database("app", &servers, PARSER_ON))).await;

    let row = "read | unset | parser on | primary_reads off | down (dead replica listed)";
    let c = client(&p, "app").await;
    let seen = spread(&c, PORT_SQL, ROUNDS, row).await;
    assert_eq!(
        ports(&seen),
        BTreeSet::from([live]),
        "[{row}] only the live replica should answer: {seen:?}"
    );
    let status = assert_banned(&p, "app", dead, row).await;
    println!("[{row}] dead replica {dead}: SHOW POOLS status {status:?}, banned");
    assert_primary_not_banned(&p, "app", r.primary.port, row).await;
}

// ---------------------------------------------------------------------------------------------
// The primary down
// ---------------------------------------------------------------------------------------------

/// The primary stopped: reads that may go to replicas still succeed; every request that needs
/// the primary fails with a connection error; the primary is never banned. One pgcorral, one
/// database per configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_primary_fails_primary_requests_and_is_never_banned() {
    let r = own_cluster();
    let all = all_servers(&r);
    let primary = r.primary.port;
    let toml = general("")
        + &database("on_on", &all, PARSER_ON_PRIMARY_READS)
        + &database("on_off", &all, PARSER_ON)
        + &database("off_off", &all, PARSER_OFF);
    let p = Pooler::start(&toml).await;
    let dbs = ["on_on", "on_off", "off_off"];
    // Every database's pools (and its monitor) exist before the primary stops.
    for db in dbs {
        let c = client(&p, db).await;
        answered(&c, PORT_SQL)
            .await
            .unwrap_or_else(|e| panic!("{db} before the stop: {}", describe(&e)));
    }
    blocking(|| replicas::stop(&r.primary));
    for db in dbs {
        wait_status(&p, db, primary, "down", "stopped primary").await;
    }

    let row = "read | unset | parser on | primary_reads on | down (primary stopped)";
    let c = client(&p, "on_on").await;
    let seen = spread(&c, PORT_SQL, ROUNDS, row).await;
    println!("[{row}] answered by {seen:?}");
    assert!(
        ports(&seen).is_subset(&replica_ports(&r)) && !seen.is_empty(),
        "[{row}] reads should succeed on the replicas: {seen:?}"
    );
    let status = assert_primary_not_banned(&p, "on_on", primary, row).await;
    println!("[{row}] primary status {status:?}");

    for (row, db, role, sql) in [
        (
            "read | primary | parser off | primary_reads off | down (primary stopped)",
            "off_off",
            Some("primary"),
            PORT_SQL,
        ),
        (
            "write | unset | parser on | primary_reads off | down (primary stopped)",
            "on_off",
            None,
            WRITE_SQL,
        ),
        (
            "write | unset | parser on | primary_reads on | down (primary stopped)",
            "on_on",
            None,
            WRITE_SQL,
        ),
        (
            "write | primary | parser off | primary_reads off | down (primary stopped)",
            "off_off",
            Some("primary"),
            WRITE_SQL,
        ),
    ] {
        let c = match role {
            Some(role) => client_as(&p, db, role).await,
            None => client(&p, db).await,
        };
        let e = answered(&c, sql)
            .await
            .map(|port| panic!("[{row}] succeeded on {port}"))
            .unwrap_err();
        assert_unavailable(&e, row);
        assert_primary_not_banned(&p, db, primary, row).await;
    }
    let row = "every request for the primary";
    for db in dbs {
        assert_primary_not_banned(&p, db, primary, row).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Bans
// ---------------------------------------------------------------------------------------------

/// Both replicas stopped: reads fall back to the primary and both replicas are banned. Started
/// again, they take reads at once, long before ban_time (60 s) is over: with every replica
/// banned, a read lifts the bans. With the default server_login_retry (15 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_banned_lifts_the_bans() {
    every_replica_banned(None).await;
}

/// The same with server_login_retry = 0 (no replayed login failure): what the lifting of
/// all-banned bans does by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_banned_lifts_the_bans_without_login_retry() {
    every_replica_banned(Some(0)).await;
}

/// `login_retry`: server_login_retry in ms, or the default.
async fn every_replica_banned(login_retry: Option<u64>) {
    let r = own_cluster();
    let extra = login_retry.map_or(String::new(), |ms| format!("server_login_retry = {ms}"));
    let p = Pooler::start(&(general(&extra) + &database("app", &all_servers(&r), PARSER_ON))).await;
    let c = client(&p, "app").await;
    let standbys = replica_ports(&r);

    let seen = spread(&c, PORT_SQL, 20, "before the stop").await;
    assert!(
        ports(&seen).is_subset(&standbys),
        "reads before the stop should go to the replicas: {seen:?}"
    );

    blocking(|| r.replicas.iter().for_each(replicas::stop));
    let row = "every replica stopped";
    let seen = spread(&c, PORT_SQL, 20, row).await;
    assert_eq!(
        ports(&seen),
        BTreeSet::from([r.primary.port]),
        "[{row}] reads should fall back to the primary: {seen:?}"
    );
    for &port in &standbys {
        let status = assert_banned(&p, "app", port, row).await;
        println!("[{row}] replica {port}: SHOW POOLS status {status:?}, banned");
    }
    assert_primary_not_banned(&p, "app", r.primary.port, row).await;

    blocking(|| r.replicas.iter().for_each(replicas::start));
    let started = Instant::now();
    let row = "every replica started again, still banned";
    // Once the monitor has found them up they are shown banned (the bans run for 60 s).
    for &port in &standbys {
        wait_status(&p, "app", port, "banned", row).await;
        assert!(ban_in_force(&p, "app", port), "[{row}] {port} not banned");
    }
    println!("[{row}] monitor saw both up after {:?}", started.elapsed());
    let seen = spread(&c, PORT_SQL, 20, row).await;
    println!(
        "[{row}] answered by {seen:?}, {:?} after the start",
        started.elapsed()
    );
    assert!(
        ports(&seen).is_subset(&standbys),
        "[{row}] with every replica banned the bans should be lifted and the reads reach the \
         replicas at once, not the primary {}: {seen:?}",
        r.primary.port
    );
}

/// healthcheck_delay = 0: a pooled connection is checked (SELECT 1, healthcheck_timeout =
/// 300 ms) before each use. A replica frozen with SIGSTOP fails that check: it is banned and the
/// read goes elsewhere without waiting long. The monitor runs once only (a long
/// healthcheck_interval), so the ban is the checkout's doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkout_health_check_bans_a_frozen_replica() {
    let r = own_cluster();
    let x = &r.replicas[0];
    let settings = format!(
        "{PARSER_ON_PRIMARY_READS}\nload_balancing = \"round_robin\"\nhealthcheck_delay = 0\n\
         healthcheck_timeout = 300\nhealthcheck_interval = 60000"
    );
    let p = Pooler::start(&(general("") + &database("app", &all_servers(&r), &settings))).await;
    let c = client(&p, "app").await;

    // A read on X leaves an idle connection to X in its pool.
    let mut reached = false;
    for _ in 0..30 {
        if answered(&c, PORT_SQL)
            .await
            .expect("read before the freeze")
            == x.port
        {
            reached = true;
            break;
        }
    }
    assert!(
        reached,
        "no read reached replica {} before the freeze",
        x.port
    );
    // The monitor's one round is over (it fills in the lag), so it cannot be what bans X.
    let deadline = Instant::now() + MONITOR;
    while pool_row(&p, "app", x.port).await.lag_bytes.is_none() {
        assert!(
            Instant::now() < deadline,
            "the monitor never checked {}",
            x.port
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let frozen = blocking(|| Frozen::freeze(x));
    let row = "frozen replica, health check at checkout";
    let deadline = Instant::now() + MONITOR;
    let mut reads = 0;
    let mut slowest = Duration::ZERO;
    while !ban_in_force(&p, "app", x.port) {
        assert!(
            Instant::now() < deadline,
            "[{row}] replica {} not banned after {reads} reads",
            x.port
        );
        let t = Instant::now();
        let port = within(
            Duration::from_secs(3),
            "read with X frozen",
            answered(&c, PORT_SQL),
        )
        .await
        .unwrap_or_else(|e| panic!("[{row}] read {reads} failed: {}", describe(&e)));
        slowest = slowest.max(t.elapsed());
        assert_ne!(port, x.port, "[{row}] the frozen replica answered");
        reads += 1;
    }
    println!("[{row}] banned after {reads} reads; slowest read {slowest:?}");
    let shown = pool_row(&p, "app", x.port).await;
    assert_eq!(shown.status, "banned", "[{row}] SHOW POOLS for {}", x.port);
    for i in 0..10 {
        let port = within(
            Duration::from_secs(3),
            "read after the ban",
            answered(&c, PORT_SQL),
        )
        .await
        .unwrap_or_else(|e| panic!("[{row}] read {i} after the ban: {}", describe(&e)));
        assert_ne!(port, x.port, "[{row}] the banned replica answered");
    }
    assert_primary_not_banned(&p, "app", r.primary.port, row).await;
    drop(frozen);
}

// ---------------------------------------------------------------------------------------------
// Under load
// ---------------------------------------------------------------------------------------------

/// pgbench -S (8 clients, extended protocol, 6 s) over a primary and two replicas; replica 1 is
/// killed (immediate shutdown) after 2 s. Transactions go on afterwards, at most the clients
/// with a transaction on the killed replica abort, and it ends up banned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_killed_under_pgbench_load() {
    let r = own_cluster();
    blocking(|| {
        let mut init = pgbench_cmd(r.primary.port, "postgres", "postgres", None);
        init.args(["-i", "-q", "-s", "1"]);
        let o = output(init);
        assert!(o.status.success(), "pgbench -i: {}", stderr(&o));
        r.wait_caught_up();
    });
    let p =
        Pooler::start(&(general("") + &database("app", &all_servers(&r), PARSER_ON_PRIMARY_READS)))
            .await;
    let killed = &r.replicas[1];

    let mut bench = pgbench_cmd(p.port(), "postgres", "app", None);
    // One pgbench thread: progress is reported by thread 0 only, which stops reporting once its
    // own clients have all aborted (with `-j 2`, the four of thread 0 could all have had their
    // transaction on the killed replica while the other four went on).
    bench.args([
        "-n", "-S", "-M", "extended", "-c", "8", "-j", "1", "-T", "6", "-P", "1",
    ]);
    let start = Instant::now();
    let run = tokio::task::spawn_blocking(move || output(bench));
    tokio::time::sleep(Duration::from_secs(2)).await;
    // pgcorral's connections to the replica (and the monitor's) just before the kill: no more
    // clients than that can have had a transaction there.
    let open: usize = blocking(|| {
        killed.sql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
             AND pid <> pg_backend_pid()",
        )
    })
    .parse()
    .unwrap();
    blocking(|| replicas::kill(killed));
    let killed_at = start.elapsed();
    let o = run.await.unwrap();
    let (out, err) = (stdout(&o), stderr(&o));
    println!("pgbench ({}):\n{out}\n{err}", o.status);

    let tx = pgbench_transactions(&out)
        .unwrap_or_else(|| panic!("no transaction count in\n{out}\n{err}"));
    let aborted = err.matches("aborted in command").count();
    // "progress: 4.0 s, 812.3 tps, lat ..." per second.
    let progress: Vec<(f64, f64)> = err
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("progress: ")?;
            let (secs, rest) = rest.split_once(" s, ")?;
            let (tps, _) = rest.split_once(" tps")?;
            Some((secs.parse().ok()?, tps.parse().ok()?))
        })
        .collect();
    let after: Vec<&(f64, f64)> = progress
        .iter()
        .filter(|(t, _)| *t >= killed_at.as_secs_f64() + 1.0)
        .collect();
    println!(
        "killed replica {} at {killed_at:?} with {open} connections open; {tx} transactions, \
         {aborted} clients aborted; progress after the kill: {after:?}",
        killed.port
    );
    assert!(tx > 0, "no transactions\n{out}\n{err}");
    assert!(
        !after.is_empty(),
        "no progress report a second after the kill ({killed_at:?}): {progress:?}\n{err}"
    );
    assert!(
        after.iter().any(|(_, tps)| *tps > 0.0),
        "no transactions after the kill: {progress:?}\n{out}\n{err}"
    );
    assert!(
        aborted < 8 && aborted <= open,
        "{aborted} of 8 clients aborted, with {open} connections open on the killed replica\n{err}"
    );
    let status = assert_banned(&p, "app", killed.port, "replica killed under load").await;
    println!(
        "killed replica {}: SHOW POOLS status {status:?}, banned",
        killed.port
    );
    assert_primary_not_banned(&p, "app", r.primary.port, "replica killed under load").await;
}
