//! Prepared statements through a transaction-mode pool smaller than the number of clients, with
//! real drivers: pgbench `-M prepared` (200 clients over 10 servers; 64 for the TPC-B-like
//! script), and, 40 connections over 4 servers each, asyncpg with its statement cache on, psycopg 3 with `prepare_threshold=0`, and
//! node-postgres named queries. Each driver prepares named statements on the server its client
//! happens to hold and uses them again in later transactions, on other servers. Also
//! node-postgres' quick disconnect, which must get no error.
//!
//! The driver scripts are in tests/drivers/ (see the top of each): they check every result,
//! print one line `<driver> ok: ...` and exit 0, or print the errors and exit 1. Server
//! connections are counted on the PostgreSQL side (pg_stat_activity), sampled during the run,
//! never through pgcorral's own counters.
//!
//! The drivers are required, not optional: a missing one fails its test with the command that
//! installs it (`.ci/run` installs them all): `python3 -m pip install asyncpg 'psycopg[binary]'`
//! and `npm ci` in tests/drivers/. `PGCORRAL_TEST_PYTHON` and `PGCORRAL_TEST_NODE` name other
//! interpreters than `python3` and `node`.
//!
//! `PGCORRAL_DRIVERS_POOL_MODE=session` runs the same in session mode, with a pool as large as the
//! client count: a check of the harness itself, to tell a broken script from a pooler bug.

mod support;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::*;

/// tests/drivers/: the driver scripts, and node-postgres in node_modules/.
const DRIVERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/drivers");

// ---- helpers --------------------------------------------------------------------------------

/// How the pooler is set up for one test: transaction mode with `pool_size` servers for
/// `clients` clients, or (`PGCORRAL_DRIVERS_POOL_MODE=session`) session mode with a server per
/// client.
struct Setup {
    session: bool,
    pool_size: usize,
    clients: usize,
}

impl Setup {
    fn new(pool_size: usize, clients: usize) -> Setup {
        let session = match std::env::var("PGCORRAL_DRIVERS_POOL_MODE").as_deref() {
            Ok("session") => true,
            Ok("transaction") | Err(_) => false,
            Ok(other) => panic!("PGCORRAL_DRIVERS_POOL_MODE={other}: use session or transaction"),
        };
        if session {
            // A server per client; the test server allows 200 connections.
            let clients = clients.min(150);
            Setup {
                session,
                pool_size: clients,
                clients,
            }
        } else {
            assert!(pool_size < clients);
            Setup {
                session,
                pool_size,
                clients,
            }
        }
    }

    fn mode(&self) -> &'static str {
        if self.session {
            "session"
        } else {
            "transaction"
        }
    }

    /// The pooler's config: trust, one database `postgres`. No client should wait 30 s for a
    /// server here: a stuck run fails then instead of after the default two minutes.
    fn config(&self, pg: &Postgres) -> String {
        self.config_with(pg, "")
    }

    /// [`Setup::config`] with more `[general]` lines.
    fn config_with(&self, pg: &Postgres, general: &str) -> String {
        config(
            pg,
            "postgres",
            &format!(
                "pool_mode = \"{}\"\ndefault_pool_size = {}\nmax_client_conn = {}\n\
                 query_wait_timeout = 30000\n{general}",
                self.mode(),
                self.pool_size,
                self.clients + 100
            ),
        )
    }

    /// In transaction mode: at most `pool_size` servers were open at once (fewer than the
    /// clients), and `moved` clients (of the driver's own count) ran on more than one.
    fn assert_pooled(&self, what: &str, peak: i64, moved: Option<usize>) {
        if self.session {
            return;
        }
        assert!(
            (1..=self.pool_size as i64).contains(&peak),
            "{what}: {peak} server connections at once, for a pool of {}",
            self.pool_size
        );
        if let Some(moved) = moved {
            assert!(
                moved > 0,
                "{what}: no client ran on more than one server, so nothing was re-prepared"
            );
        }
    }
}

/// How often a [`Peak`] samples the server connections. Every client backend on the test's
/// PostgreSQL but the sampling one reaches it through the pooler, so the condition is "true".
const SAMPLE: Duration = Duration::from_millis(20);

fn python() -> String {
    std::env::var("PGCORRAL_TEST_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn node() -> String {
    std::env::var("PGCORRAL_TEST_NODE").unwrap_or_else(|_| "node".to_string())
}

/// Fails unless `python3 -c "import <module>"` works, saying how to install it.
fn require_python_module(module: &str, package: &str) {
    let py = python();
    let install = format!("{py} -m pip install '{package}'");
    let out = Command::new(&py)
        .args(["-c", &format!("import {module}")])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {py} ({e}): install Python 3 and pip, then `{install}` (.ci/run does this)")
        });
    assert!(
        out.status.success(),
        "the Python module {module} is not installed for {py}: run `{install}` (.ci/run does this)\n{}",
        stderr(&out)
    );
}

/// Fails unless node runs and node-postgres is installed in tests/drivers/node_modules.
fn require_node_pg() {
    let node = node();
    let install = "cd crates/pgcorral/tests/drivers && npm ci";
    let out = Command::new(&node)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {node} ({e}): install Node.js and npm, then `{install}` (.ci/run does this)")
        });
    assert!(
        out.status.success(),
        "{node} --version failed: {}",
        stderr(&out)
    );
    assert!(
        std::path::Path::new(DRIVERS)
            .join("node_modules/pg/package.json")
            .exists(),
        "node-postgres (npm package pg) is not installed in {DRIVERS}/node_modules: run `{install}` \
         (.ci/run does this)"
    );
}

/// Runs a driver script from tests/drivers against the pooler with `setup.clients` clients;
/// returns its summary line (`<name> ok: ...`), after failing with its whole output unless it
/// exited 0 and printed one.
async fn run_driver(
    name: &str,
    program: String,
    script: &str,
    port: u16,
    setup: &Setup,
    rounds: usize,
) -> String {
    let mut c = Command::new(&program);
    c.current_dir(DRIVERS)
        .arg(script)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--user", "postgres", "--database", "postgres"])
        .args(["--clients", &setup.clients.to_string()])
        .args(["--rounds", &rounds.to_string(), "--timeout", "90"])
        .env_remove("PGPASSWORD")
        .stdin(Stdio::null());
    let out = run_cmd(c).await;
    let (o, e) = (stdout(&out), stderr(&out));
    let mode = setup.mode();
    assert!(
        out.status.success(),
        "{name} ({program} {script}) failed with {}, {mode} mode, pool {} for {} clients\n\
         --- stdout\n{o}--- stderr\n{e}",
        out.status,
        setup.pool_size,
        setup.clients
    );
    o.lines()
        .find(|l| l.starts_with(&format!("{name} ok: ")))
        .unwrap_or_else(|| panic!("{name}: no summary line\n--- stdout\n{o}--- stderr\n{e}"))
        .to_string()
}

/// `K` of "K/N ... on more than one" in a driver's summary line.
fn moved(summary: &str) -> usize {
    summary
        .rsplit(", ")
        .next()
        .and_then(|s| s.split('/').next())
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("no 'K/N ... on more than one' in {summary:?}"))
}

/// Runs one driver script through a fresh pooler: 40 connections over 4 servers.
async fn driver_through_small_pool(name: &str, program: String, script: &str) {
    let pg = Postgres::start();
    let setup = Setup::new(4, 40);
    let pooler = Pooler::start(&setup.config(&pg)).await;
    let peak = Peak::watch(&pg, "true".into(), SAMPLE).await;
    let summary = run_driver(name, program, script, pooler.port(), &setup, 30).await;
    let peak = peak.finish().await;
    eprintln!("{summary} ({} mode, peak {peak} servers)", setup.mode());
    setup.assert_pooled(name, peak, Some(moved(&summary)));
    pooler.shutdown().await;
}

// ---- pgbench -M prepared --------------------------------------------------------------------

/// pgbench `-M prepared`: select-only with 200 clients on 2 threads over 10 servers, then the
/// TPC-B-like script (BEGIN, three UPDATEs, a SELECT, an INSERT, END, every one of them
/// prepared) with 64 clients over the same 10 servers.
///
/// The TPC-B-like run has a thread per client (`-j` = `-c`) because pgbench prepares each
/// statement on its first use with a blocking PQprepare (Parse, Sync, wait): with many clients
/// per thread, a client preparing its BEGIN while every server is held by a transaction of
/// another client of the same thread blocks the thread that would finish those transactions.
/// That deadlock (until query_wait_timeout) would be pgbench's, not the pooler's, unless the
/// pooler answered a lone Parse without a server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_prepared_200_clients_over_10_servers() {
    let pg = Postgres::start();
    let setup = Setup::new(10, 200);
    let pooler = Pooler::start(&setup.config(&pg)).await;
    pgbench_init(pooler.port()).await;

    let all = setup.clients.to_string();
    let tpcb = setup.clients.min(64).to_string();
    for (what, clients, jobs, script) in [
        ("pgbench -M prepared -S", &all, "2", Some("-S")),
        ("pgbench -M prepared (tpcb-like)", &tpcb, &tpcb, None),
    ] {
        let peak = Peak::watch(&pg, "true".into(), SAMPLE).await;
        let mut run = pgbench_cmd(pooler.port(), "postgres", "postgres", None);
        run.args(["-n", "-c", clients, "-j", jobs, "-T", "5", "-M", "prepared"]);
        run.args(script);
        let o = run_cmd(run).await;
        let peak = peak.finish().await;
        let tx = assert_pgbench_ok(what, &o);
        eprintln!(
            "{what}: {tx} transactions, {clients} clients, {} mode, peak {peak} servers",
            setup.mode()
        );
        setup.assert_pooled(what, peak, None);
    }
    pooler.shutdown().await;
}

// ---- drivers --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asyncpg_statement_cache_40_connections_over_4_servers() {
    require_python_module("asyncpg", "asyncpg");
    driver_through_small_pool("asyncpg", python(), "asyncpg_check.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_prepare_threshold_0_40_connections_over_4_servers() {
    require_python_module("psycopg", "psycopg[binary]");
    driver_through_small_pool("psycopg", python(), "psycopg_check.py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_postgres_named_queries_40_clients_over_4_servers() {
    require_node_pg();
    driver_through_small_pool("node-postgres", node(), "pg_named.js").await;
}

/// node-postgres' quick disconnect (`connect()` then `end()` at once: a Terminate where the
/// StartupMessage belongs): pgcorral closes without a word, as PostgreSQL does, so the driver
/// sees no error (before, it got "invalid startup packet").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_postgres_quick_disconnect_gets_no_error() {
    require_node_pg();
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(&pg, "postgres", "")).await;
    let mut c = Command::new(node());
    c.current_dir(DRIVERS)
        .arg("pg_quick_disconnect.js")
        .args(["--host", "127.0.0.1", "--port", &pooler.port().to_string()])
        .args([
            "--user",
            "postgres",
            "--database",
            "postgres",
            "--rounds",
            "20",
        ])
        .env_remove("PGPASSWORD")
        .stdin(Stdio::null());
    let out = run_cmd(c).await;
    assert!(
        out.status.success() && stdout(&out).contains("quick disconnect ok"),
        "{}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        stdout(&out),
        stderr(&out)
    );
}

/// psycopg's pipeline mode and executemany end with Sync then Flush: afterwards the idle
/// connection holds no server, so another connection gets the pool's only server at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_pipeline_then_idle_frees_the_only_server() {
    require_python_module("psycopg", "psycopg[binary]");
    let pg = Postgres::start();
    let setup = Setup::new(1, 2);
    let pooler = Pooler::start(&setup.config(&pg)).await;
    let mut c = Command::new(python());
    c.current_dir(DRIVERS)
        .arg("psycopg_pipeline_idle.py")
        .args(["--host", "127.0.0.1", "--port", &pooler.port().to_string()])
        .env_remove("PGPASSWORD")
        .stdin(Stdio::null());
    let out = run_cmd(c).await;
    assert!(
        out.status.success() && stdout(&out).contains("psycopg-pipeline ok: "),
        "psycopg pipeline: {}\n{}{}",
        out.status,
        stdout(&out),
        stderr(&out)
    );
    eprintln!("{}", stdout(&out).trim());
    pooler.shutdown().await;
}

// ---- schema changes under prepared statements -----------------------------------------------

/// Runs `cmd` while table `t` of `pg` gains a column every 250 ms (directly on PostgreSQL),
/// so that statements prepared on it go stale ("cached plan must not change result type").
async fn while_columns_are_added(pg: &Postgres, cmd: Command, tag: &str) -> std::process::Output {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let admin = direct(pg).await;
    let tag = tag.to_string();
    let alter = tokio::spawn(async move {
        let mut n = 0;
        while !flag.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            n += 1;
            admin
                .batch_execute(&format!(
                    "ALTER TABLE t ADD COLUMN {tag}_{n} int DEFAULT {n}"
                ))
                .await
                .expect("ALTER TABLE");
        }
        n
    });
    let out = run_cmd(cmd).await;
    stop.store(true, Ordering::SeqCst);
    let altered = alter.await.unwrap();
    assert!(altered >= 2, "only {altered} ALTER TABLEs during the run");
    out
}

fn stale_plans(driver: &str, port: u16, seconds: u32) -> Command {
    let mut c = Command::new(python());
    c.current_dir(DRIVERS)
        .arg("stale_plans.py")
        .args(["--driver", driver, "--port", &port.to_string()])
        .args(["--clients", "8", "--seconds", &seconds.to_string()])
        .env_remove("PGPASSWORD")
        .stdin(Stdio::null());
    c
}

/// Columns added to a table while 8 connections over 2 servers keep running a prepared
/// `SELECT *` of it: through pgcorral with `retry_stale_statements` every row matches its
/// description, no psycopg query fails (pgcorral retries its described executions itself), and asyncpg (which gets the
/// error, as its executions are not described, and prepares again once on its own) fails only
/// where another column landed between its re-prepare and the execution, as it would directly
/// (at most 1 in 1,000; it happened on a loaded machine). Directly against PostgreSQL the same
/// psycopg run fails: the check that the test bites.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_survive_columns_added_under_them() {
    require_python_module("psycopg", "psycopg[binary]");
    require_python_module("asyncpg", "asyncpg");
    let pg = Postgres::start();
    pg.sql(
        "postgres",
        "CREATE TABLE t (a int); INSERT INTO t SELECT generate_series(1, 10)",
    );
    let setup = Setup::new(2, 8);
    let pooler = Pooler::start(&setup.config_with(&pg, "retry_stale_statements = true")).await;
    for driver in ["psycopg", "asyncpg"] {
        let out = while_columns_are_added(&pg, stale_plans(driver, pooler.port(), 4), driver).await;
        let (o, e) = (stdout(&out), stderr(&out));
        assert!(
            out.status.success() && o.contains("stale-plans ok: "),
            "{driver} through pgcorral: {}\n{o}{e}",
            out.status
        );
        eprintln!("{}", o.trim());
    }

    let direct = while_columns_are_added(&pg, stale_plans("psycopg", pg.port, 2), "direct").await;
    let text = format!("{}{}", stdout(&direct), stderr(&direct));
    assert!(
        !direct.status.success() && text.contains("cached plan must not change result type"),
        "directly against PostgreSQL the run was expected to fail:\n{text}"
    );
    pooler.shutdown().await;
}

/// asyncpg with two connections through a pool of one server, and directly: a table made
/// again with an int column between the two connections' prepares of one INSERT (asyncpg
/// encodes by the parameter type the Parse resolved: 1.5 becomes 1 for an int, 2 as numeric
/// from a stale statement), and SQL `EXECUTE` of an SQL-prepared statement, which asyncpg
/// sends as a Parse. Every line of the script's output is the same both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asyncpg_sees_no_stale_statement_and_runs_sql_execute() {
    require_python_module("asyncpg", "asyncpg");
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(
        &pg,
        "postgres",
        "default_pool_size = 1\npool_mode = \"transaction\"",
    ))
    .await;
    let run = |port: u16| {
        let mut c = Command::new(python());
        c.current_dir(DRIVERS)
            .arg("asyncpg_stale.py")
            .args(["--port", &port.to_string()])
            .env_remove("PGPASSWORD")
            .stdin(Stdio::null());
        c
    };
    let direct = run_cmd(run(pg.port)).await;
    let pooled = run_cmd(run(pooler.port())).await;
    for (what, out) in [("directly", &direct), ("through pgcorral", &pooled)] {
        assert!(
            out.status.success(),
            "asyncpg_stale.py {what}: {}\n{}{}",
            out.status,
            stdout(out),
            stderr(out)
        );
    }
    let direct = stdout(&direct);
    assert!(
        direct.contains("rows: [<Record v=1>, <Record v=2>]"),
        "{direct}"
    );
    assert!(direct.contains("execute: 42"), "{direct}");
    assert_eq!(stdout(&pooled), direct);
    pooler.shutdown().await;
}

// ---- LISTEN through the hub -----------------------------------------------------------------

/// asyncpg's `add_listener` (the extended protocol), psycopg's `notifies()` and node-postgres'
/// 'notification' events, 10 listeners each through a pool of one in transaction mode: every
/// listener hears exactly its channel, and no listener holds the server (the pool plus the
/// listening connection at most).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_of_asyncpg_psycopg_and_node_postgres_hold_no_server() {
    require_python_module("asyncpg", "asyncpg");
    require_python_module("psycopg", "psycopg[binary]");
    require_node_pg();
    let pg = Postgres::start();
    let setup = Setup::new(1, 10);
    let pooler = Pooler::start(&setup.config(&pg)).await;
    let port = pooler.port().to_string();
    let peak = Peak::watch(&pg, "true".into(), SAMPLE).await;
    let runs: [(&str, String, &[&str]); 3] = [
        (
            "asyncpg",
            python(),
            &["listeners.py", "--driver", "asyncpg"],
        ),
        (
            "psycopg",
            python(),
            &["listeners.py", "--driver", "psycopg"],
        ),
        ("node-postgres", node(), &["pg_listeners.js"]),
    ];
    for (name, program, args) in runs {
        let mut c = Command::new(&program);
        c.current_dir(DRIVERS)
            .args(args)
            .args(["--host", "127.0.0.1", "--port", &port, "--clients", "10"])
            .env_remove("PGPASSWORD")
            .stdin(Stdio::null());
        let out = run_cmd(c).await;
        assert!(
            out.status.success() && stdout(&out).contains(&format!("{name} listeners ok: ")),
            "{name} listeners: {}\n{}{}",
            out.status,
            stdout(&out),
            stderr(&out)
        );
        eprintln!("{}", stdout(&out).trim());
    }
    let peak = peak.finish().await;
    assert!(peak <= 2, "{peak} server connections for a pool of one");
    pooler.shutdown().await;
}
