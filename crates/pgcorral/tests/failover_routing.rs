//! Routing over a primary and streaming replicas, as a client sees it: where reads and writes go
//! for each combination of `SET SERVER ROLE`, `query_parser_enabled` and
//! `primary_reads_enabled` while every server is up (a write pipelined behind a read too), and
//! with a listed replica where nothing listens (requests move on, it is banned, the primary never
//! is). These tests share one cluster (`steady`), which none of them stops.
//!
//! Which server answered is read from `inet_server_port()`; bans from SHOW POOLS on the admin
//! console and pgcorral's routing state (support/failover.rs).

mod support;

use std::collections::BTreeSet;
use std::sync::OnceLock;

use support::failover::*;
use support::replicas::Replicated;
use support::*;
use tokio_postgres::Client;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// SQLSTATE read_only_sql_transaction: a write reached a replica.
const READ_ONLY: &str = "25006";

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

/// `SELECT inet_server_port()` through the extended protocol.
async fn answered_extended(c: &Client) -> Result<u16, tokio_postgres::Error> {
    let row = within(QUERY, "extended SELECT", c.query_one(PORT_SQL, &[])).await?;
    Ok(row.get::<_, i32>(0) as u16)
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
