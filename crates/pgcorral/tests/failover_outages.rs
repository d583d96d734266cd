//! Servers going down under pgcorral, each test on a cluster of its own (a primary and
//! streaming replicas): a stopped primary (requests that need it fail, it is never banned),
//! bans lifted when every replica is banned, the checkout-time health check of a frozen
//! replica, and a replica killed under pgbench load.
//!
//! Which server answered is read from `inet_server_port()`; bans from SHOW POOLS on the admin
//! console and pgcorral's routing state (support/failover.rs).

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use support::failover::*;
use support::replicas::{self, Replicated};
use support::*;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A cluster of our own (for tests that stop, kill or freeze servers), with table `t`.
fn own_cluster() -> Replicated {
    blocking(|| {
        let r = Replicated::start(2);
        r.primary.sql("postgres", "CREATE TABLE t (id int)");
        r.wait_caught_up();
        r
    })
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
