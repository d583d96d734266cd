//! The admin console's commands that act, against a real PostgreSQL: PAUSE holds new
//! transactions until RESUME (and `PAUSE; restart PostgreSQL; RESUME` under pgbench loses no
//! transaction), DISABLE/ENABLE, RECONNECT and WAIT_CLOSE, KILL and KILL_CLIENT, RELOAD (and
//! SIGHUP) with a refused bad file, and SET; the settings read only at start, refused by SET
//! and kept by RELOAD.

mod support;

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

/// The value of `column` in the row of SHOW `what` whose first column is `key`.
async fn shown(w: &mut Wire, what: &str, key: &str, column: &str) -> String {
    let msgs = w.simple(&format!("SHOW {what}")).await;
    let desc = msgs.iter().find(|m| m.tag == b'T').expect("RowDescription");
    let names = column_names(&desc.body);
    let i = names
        .iter()
        .position(|n| n == column)
        .unwrap_or_else(|| panic!("no column {column} in {names:?}"));
    msgs.iter()
        .filter(|m| m.tag == b'D')
        .map(|m| m.row())
        .find(|r| r[0].as_deref() == Some(key))
        .and_then(|r| r[i].clone())
        .unwrap_or_else(|| panic!("no row {key} in SHOW {what}"))
}

/// SHOW CLIENTS' column `i` (pinned) for every client, polled until `done` holds or 2.5 s
/// pass: the state is read back right after the client's answer, so allow it a moment.
async fn pinned_until(w: &mut Wire, i: usize, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let mut why = Vec::new();
    for _ in 0..50 {
        let msgs = w.simple("SHOW CLIENTS").await;
        why = msgs
            .iter()
            .filter(|m| m.tag == b'D')
            .map(|m| m.row()[i].clone().unwrap_or_default())
            .collect();
        if done(&why) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    why
}

/// pgbench (TPC-B-like) through the pooler with 50 clients for `secs`, started in the
/// background after initialising its tables.
async fn pgbench_load(port: u16, secs: &str) -> tokio::task::JoinHandle<std::process::Output> {
    pgbench_init(port).await;
    let mut run = pgbench_cmd(port, "postgres", "postgres", None);
    run.args(["-n", "-c", "50", "-j", "4", "-T", secs]);
    tokio::task::spawn_blocking(move || output(run))
}

/// PAUSE waits for the open transaction, then holds new ones; RESUME lets them through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_waits_for_transactions_and_holds_new_ones_until_resume() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 2").await;
    let a = p.connect("postgres", None, "postgres").await;
    let b = p.connect("postgres", None, "postgres").await;
    a.simple_query("BEGIN").await.unwrap();
    let mut w = console(&p).await;
    let pause = tokio::spawn(async move {
        let r = admin(&mut w, "PAUSE").await;
        (w, r)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !pause.is_finished(),
        "PAUSE returned while a transaction was open"
    );
    a.simple_query("COMMIT").await.unwrap();
    let (mut w, r) = tokio::time::timeout(Duration::from_secs(10), pause)
        .await
        .expect("PAUSE returns once the transaction ended")
        .unwrap();
    assert_eq!(r, Ok("PAUSE".into()));
    assert_eq!(shown(&mut w, "STATE", "paused", "value").await, "yes");

    let held = tokio::spawn(async move { value(&b, "SELECT 42").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "a query ran while paused");
    assert_eq!(admin(&mut w, "RESUME").await, Ok("RESUME".into()));
    let got = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .expect("RESUME releases it")
        .unwrap();
    assert_eq!(got, "42");
    assert!(admin(&mut w, "RESUME").await.is_err(), "nothing is paused");
}

/// PAUSE; restart PostgreSQL; RESUME under pgbench (50 clients, transaction mode): no
/// transaction fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_restart_resume_under_pgbench_fails_nothing() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 10\nmax_client_conn = 200").await;
    let bench = pgbench_load(p.port(), "8").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut w = console(&p).await;
    assert_eq!(admin(&mut w, "PAUSE").await, Ok("PAUSE".into()));
    let dir_pg = &pg;
    tokio::task::block_in_place(|| dir_pg.pg_ctl("restart"));
    assert_eq!(admin(&mut w, "RESUME").await, Ok("RESUME".into()));
    let o = bench.await.unwrap();
    let tx = assert_pgbench_ok("pgbench across PAUSE/restart/RESUME", &o);
    eprintln!("{tx} transactions, 0 failed, across a PostgreSQL restart");
}

/// DISABLE refuses new logins (57P03, in PgBouncer's words) while connected clients go on;
/// ENABLE lets them in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_refuses_new_logins_and_enable_admits_them() {
    let pg = Postgres::start();
    let p = pooler(&pg, "").await;
    let a = p.connect("postgres", None, "postgres").await;
    let mut w = console(&p).await;
    assert_eq!(
        admin(&mut w, "DISABLE postgres").await,
        Ok("DISABLE".into())
    );
    assert_eq!(
        shown(&mut w, "DATABASES", "postgres", "disabled").await,
        "1"
    );
    let e = connect(p.port(), "postgres", None, "postgres")
        .await
        .map(|_| ())
        .expect_err("login refused while disabled");
    assert_eq!(
        e.as_db_error().map(|d| d.code().code()),
        Some("57P03"),
        "{e}"
    );
    assert_eq!(
        e.as_db_error().map(|d| d.message()),
        Some("database \"postgres\" is disabled"),
        "{e}"
    );
    assert_eq!(value(&a, "SELECT 1").await, "1", "connected clients go on");
    assert_eq!(admin(&mut w, "ENABLE postgres").await, Ok("ENABLE".into()));
    let b = p.connect("postgres", None, "postgres").await;
    assert_eq!(value(&b, "SELECT 2").await, "2");
    assert_eq!(
        admin(&mut w, "DISABLE nosuchdb").await.unwrap_err().0,
        "08P01"
    );
}

/// RECONNECT replaces every server once its client is done with it; WAIT_CLOSE returns when
/// the old ones are all closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_replaces_servers_and_wait_close_waits_for_it() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 2").await;
    let a = p.connect("postgres", None, "postgres").await;
    let b = p.connect("postgres", None, "postgres").await;
    a.simple_query("BEGIN").await.unwrap();
    b.simple_query("BEGIN").await.unwrap();
    let busy_pid = value(&a, "SELECT pg_backend_pid()").await;
    let idle_pid = value(&b, "SELECT pg_backend_pid()").await;
    b.simple_query("COMMIT").await.unwrap();
    assert_ne!(idle_pid, busy_pid);
    let mut w = console(&p).await;
    assert_eq!(
        admin(&mut w, "RECONNECT postgres").await,
        Ok("RECONNECT".into())
    );
    let mut w2 = console(&p).await;
    let wait = tokio::spawn(async move { admin(&mut w2, "WAIT_CLOSE").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !wait.is_finished(),
        "a server from before RECONNECT is still lent out"
    );
    // SHOW SERVERS says which servers are on their way out (pgcorral's extra columns).
    let health = shown(&mut w, "SERVERS", "S", "health").await;
    assert_eq!(
        health, "retiring",
        "the lent-out server from before RECONNECT"
    );
    assert_eq!(shown(&mut w, "SERVERS", "S", "role").await, "primary");
    // The transaction goes on on its old server.
    assert_eq!(value(&a, "SELECT pg_backend_pid()").await, busy_pid);
    a.simple_query("COMMIT").await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("WAIT_CLOSE returns once the old servers are closed")
        .unwrap();
    assert_eq!(r, Ok("WAIT_CLOSE".into()));
    for c in [&a, &b] {
        let pid = value(c, "SELECT pg_backend_pid()").await;
        assert!(pid != idle_pid && pid != busy_pid, "still on an old server");
    }
}

/// server_fast_close (set from the console): in session mode, RECONNECT closes the servers
/// clients hold at once: such a client is ended with an error saying why, its server closed
/// (not pooled again); new clients get new servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_fast_close_ends_sessions_on_reconnect() {
    let pg = Postgres::start();
    let p = pooler(&pg, "pool_mode = \"session\"").await;
    let mut w = console(&p).await;
    assert_eq!(
        admin(&mut w, "SET server_fast_close = 1").await,
        Ok("SET".into())
    );
    let mut a = support::raw::Raw::login(p.port(), "postgres", "postgres")
        .await
        .unwrap();
    a.query("BEGIN").await.unwrap();
    let old_pid = a.query("SELECT pg_backend_pid()").await.unwrap()[0][0]
        .clone()
        .unwrap();
    assert_eq!(
        admin(&mut w, "RECONNECT postgres").await,
        Ok("RECONNECT".into())
    );
    // Told at once, while idle in its transaction, then closed.
    let e = within(
        Duration::from_secs(10),
        "the ended session",
        a.expect_error_and_close(),
    )
    .await;
    assert!(
        e.message.starts_with("database configuration changed"),
        "{e:?}"
    );
    let b = p.connect("postgres", None, "postgres").await;
    assert_ne!(value(&b, "SELECT pg_backend_pid()").await, old_pid);
    let gone = format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {old_pid}");
    within(Duration::from_secs(10), "the old server closed", async {
        while blocking(|| pg.sql("postgres", &gone)) != "0" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// SHOW CLIENTS' rows of database `db`: their `ptr` column.
async fn client_ptrs(w: &mut Wire, db: &str) -> Vec<String> {
    let msgs = w.simple("SHOW CLIENTS").await;
    msgs.iter()
        .filter(|m| m.tag == b'D' && m.row()[2].as_deref() == Some(db))
        .map(|m| m.row()[13].clone().unwrap())
        .collect()
}

/// KILL_CLIENT ends one client with 57P01, a console client too (SHOW CLIENTS lists them,
/// database `pgbouncer`, as PgBouncer); KILL ends every client of the database and holds new
/// transactions until RESUME.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_client_and_kill_database() {
    let pg = Postgres::start();
    let p = pooler(&pg, "").await;
    let mut a = Wire::connect(p.port(), "postgres", "postgres").await;
    let b = p.connect("postgres", None, "postgres").await;
    let mut w = console(&p).await;
    let ptrs = client_ptrs(&mut w, "postgres").await;
    assert_eq!(ptrs.len(), 2, "{ptrs:?}");
    assert_eq!(
        client_ptrs(&mut w, "pgbouncer").await.len(),
        1,
        "the console itself"
    );
    let mut w2 = console(&p).await;
    let consoles = client_ptrs(&mut w, "pgbouncer").await;
    assert_eq!(consoles.len(), 2, "{consoles:?}");
    assert_eq!(
        admin(&mut w, &format!("KILL_CLIENT {}", consoles[1])).await,
        Ok("KILL_CLIENT".into())
    );
    let fatal = w2.recv().await;
    assert_eq!((fatal.tag, fatal.code()), (b'E', "57P01".to_string()));
    w2.expect_closed().await;
    assert_eq!(client_ptrs(&mut w, "pgbouncer").await.len(), 1);
    assert_eq!(
        admin(&mut w, &format!("KILL_CLIENT {}", ptrs[0])).await,
        Ok("KILL_CLIENT".into())
    );
    let fatal = a.recv().await;
    assert_eq!((fatal.tag, fatal.code()), (b'E', "57P01".to_string()));
    a.expect_closed().await;
    assert_eq!(value(&b, "SELECT 1").await, "1", "the other client goes on");
    assert!(admin(&mut w, "KILL_CLIENT 0xfffff").await.is_err());

    assert_eq!(admin(&mut w, "KILL postgres").await, Ok("KILL".into()));
    let e = b.simple_query("SELECT 1").await.unwrap_err();
    assert!(e.is_closed() || e.as_db_error().is_some(), "{e}");
    // New clients (their login needs a server for its parameters) and their transactions
    // wait for RESUME, as in PgBouncer.
    let port = p.port();
    let held = tokio::spawn(async move {
        let c = connect(port, "postgres", None, "postgres").await.unwrap();
        value(&c, "SELECT 3").await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "new transactions wait after KILL");
    assert_eq!(admin(&mut w, "RESUME postgres").await, Ok("RESUME".into()));
    assert_eq!(held.await.unwrap(), "3");
}

/// RELOAD applies a changed file to connected clients' pools (pool size grows, timeouts),
/// refuses a bad file keeping the running configuration, and reports restart-only settings.
/// SET changes one setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_and_set_change_the_running_configuration() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgcorral.toml");
    let write = |general: &str| {
        std::fs::write(
            &path,
            config(&pg, "postgres", &format!("{ADMIN}\n{general}")),
        )
        .unwrap()
    };
    write("default_pool_size = 1");
    let p = pooler(&pg, "default_pool_size = 1").await;
    p.services.config_path.set(path.clone()).unwrap();
    let a = p.connect("postgres", None, "postgres").await;
    let b = p.connect("postgres", None, "postgres").await;
    a.simple_query("BEGIN").await.unwrap();
    let waiting = tokio::spawn(async move {
        let v = value(&b, "SELECT 7").await;
        (b, v)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "pool of 1 is held");

    let mut w = console(&p).await;
    write("default_pool_size = 2\nquery_timeout = 500");
    assert_eq!(admin(&mut w, "RELOAD").await, Ok("RELOAD".into()));
    let (b, v) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the pool grew at RELOAD")
        .unwrap();
    assert_eq!(v, "7");
    assert_eq!(
        shown(&mut w, "CONFIG", "default_pool_size", "value").await,
        "2"
    );
    // The new query_timeout reaches a client that was connected before.
    let e = b.simple_query("SELECT pg_sleep(3)").await.unwrap_err();
    let why = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default();
    assert!(why.contains("query_timeout") || e.is_closed(), "{e:?}");
    a.simple_query("COMMIT").await.unwrap();

    // A bad file is refused and the running configuration stays.
    std::fs::write(&path, "[general]\ndefault_pool_size = \"many\"\n").unwrap();
    let err = admin(&mut w, "RELOAD").await.unwrap_err();
    assert!(err.1.contains("default_pool_size"), "{err:?}");
    assert_eq!(
        shown(&mut w, "CONFIG", "default_pool_size", "value").await,
        "2"
    );
    assert_eq!(value(&a, "SELECT 8").await, "8");

    // Restart-only settings keep their running value.
    write("default_pool_size = 2\nworkers = 3");
    let msgs = w.simple("RELOAD").await;
    let notice = msgs.iter().find(|m| m.tag == b'N').expect("a notice");
    assert!(
        notice.field(b'M').unwrap().contains("workers"),
        "{notice:?}"
    );
    assert_eq!(
        shown(&mut w, "CONFIG", "listen_port", "changeable").await,
        "no"
    );

    assert_eq!(
        admin(&mut w, "SET query_timeout = 0").await,
        Ok("SET".into())
    );
    assert_eq!(shown(&mut w, "CONFIG", "query_timeout", "value").await, "0");
    assert_eq!(
        admin(&mut w, "SET default_pool_size = lots")
            .await
            .unwrap_err()
            .0,
        "22023"
    );
    assert!(admin(&mut w, "SET listen_port = 7").await.is_err());
    assert!(admin(&mut w, "SET no_such_key = 1").await.is_err());
}

/// The settings read only at start are one table (`config::settings`): SET refuses each of
/// them in PgBouncer's words (`SET failed`) and says why, SHOW CONFIG's changeable column is
/// `no` for them and `yes` for every other, and a RELOAD of a file that changes them (peer_id,
/// log_level, syslog_ident: a reload had taken peer_id) keeps the running values, logs that
/// each needs a restart and says so in its notice, while taking the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_read_only_at_start_are_refused_and_kept() {
    use pgcorral::config::settings::RESTART_ONLY;
    let pg = Postgres::start();
    let toml = config(&pg, "postgres", &format!("{ADMIN}\ndefault_pool_size = 3"));
    let p = blocking(|| PoolerProcess::start(&toml));
    let mut w = Wire::connect(p.port, "postgres", "pgbouncer").await;
    for key in RESTART_ONLY {
        assert_eq!(
            admin(&mut w, &format!("SET {key} = 1")).await,
            Err((
                "22023".into(),
                format!("SET failed: {key} cannot be changed without a restart")
            ))
        );
    }
    let msgs = w.simple("SHOW CONFIG").await;
    let rows: Vec<Vec<Option<String>>> = msgs
        .iter()
        .filter(|m| m.tag == b'D')
        .map(|m| m.row())
        .collect();
    for key in RESTART_ONLY {
        assert!(
            rows.iter().any(|r| r[0].as_deref() == Some(key)),
            "{key} not in SHOW CONFIG"
        );
    }
    for r in &rows {
        let key = r[0].clone().unwrap();
        let want = if RESTART_ONLY.contains(&key.as_str()) {
            "no"
        } else {
            "yes"
        };
        assert_eq!(r[3].as_deref(), Some(want), "changeable of {key}");
    }

    let path = p.log.parent().unwrap().join("pgcorral.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace(
            "default_pool_size = 3",
            "default_pool_size = 4\npeer_id = 5\nlog_level = \"debug\"\nsyslog_ident = \"other\"",
        ),
    )
    .unwrap();
    let msgs = w.simple("RELOAD").await;
    let notice = msgs.iter().find(|m| m.tag == b'N').expect("a notice");
    let said = notice.field(b'M').unwrap();
    for key in ["peer_id", "log_level", "syslog_ident"] {
        assert!(said.contains(key), "{key} not in {said:?}");
        let log = p.log();
        assert!(
            log.lines()
                .any(|l| l.contains("needs a restart") && l.contains(key)),
            "no log line says {key} needs a restart:\n{log}"
        );
    }
    assert_eq!(shown(&mut w, "CONFIG", "peer_id", "value").await, "0");
    assert_eq!(shown(&mut w, "CONFIG", "log_level", "value").await, "info");
    assert_eq!(
        shown(&mut w, "CONFIG", "syslog_ident", "value").await,
        "pgcorral"
    );
    assert_eq!(
        shown(&mut w, "CONFIG", "default_pool_size", "value").await,
        "4"
    );
}

/// SIGHUP reloads the file of a running pgcorral process.
#[test]
fn sighup_reloads_the_config_file() {
    let pg = Postgres::start();
    let toml = config(&pg, "postgres", &format!("{ADMIN}\ndefault_pool_size = 3"));
    let p = PoolerProcess::start(&toml);
    let path = p.log.parent().unwrap().join("pgcorral.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("default_pool_size = 3", "default_pool_size = 5"),
    )
    .unwrap();
    let pid = p.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut value = String::new();
    for _ in 0..50 {
        value = rt.block_on(async {
            let mut w = Wire::connect(p.port, "postgres", "pgbouncer").await;
            shown(&mut w, "CONFIG", "default_pool_size", "value").await
        });
        if value == "5" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(value, "5");
}

/// PostgreSQL restarted under pgbench (50 clients over 10 servers, transaction mode) without
/// PAUSE: clients whose transaction was on a server at that instant may fail (pgbench aborts
/// them), at most one per server; every other client waits for PostgreSQL to come back
/// (server_unavailable_wait) and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_pause_fails_only_transactions_on_a_server() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 10\nmax_client_conn = 200").await;
    let bench = pgbench_load(p.port(), "10").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restarted = std::time::Instant::now();
    tokio::task::block_in_place(|| pg.pg_ctl("restart"));
    eprintln!("PostgreSQL restarted in {:?}", restarted.elapsed());
    let o = bench.await.unwrap();
    let (out, err) = (stdout(&o), stderr(&o));
    let aborted = err
        .lines()
        .filter(|l| l.contains("pgbench: error: client ") && l.contains(" aborted "))
        .count();
    eprintln!("{aborted} clients aborted\n{out}");
    assert!(
        aborted <= 10,
        "{aborted} clients failed, more than the 10 servers that could have been mid-transaction\n{err}"
    );
    let tx =
        pgbench_transactions(&out).unwrap_or_else(|| panic!("no transaction count\n{out}\n{err}"));
    assert!(tx > 0, "{out}\n{err}");
    // The clients that went on ran transactions after the restart too.
    let c = p.connect("postgres", None, "postgres").await;
    assert_eq!(value(&c, "SELECT 1").await, "1");
}

/// SUSPEND pauses everything and stops accepting connections; RESUME ends both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_stops_accepting_until_resume() {
    let pg = Postgres::start();
    let p = pooler(&pg, "").await;
    let a = p.connect("postgres", None, "postgres").await;
    let mut w = console(&p).await;
    assert_eq!(admin(&mut w, "SUSPEND").await, Ok("SUSPEND".into()));
    assert_eq!(shown(&mut w, "STATE", "suspended", "value").await, "yes");
    let port = p.port();
    // A raw login needs no server: only not being accepted keeps it waiting.
    let raw = tokio::spawn(async move { Wire::connect(port, "postgres", "postgres").await });
    let late = tokio::spawn(async move {
        let c = connect(port, "postgres", None, "postgres").await.unwrap();
        value(&c, "SELECT 5").await
    });
    let held = tokio::spawn(async move { value(&a, "SELECT 6").await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !late.is_finished(),
        "a connection was served while suspended"
    );
    assert!(!held.is_finished(), "a transaction ran while suspended");
    assert!(
        !raw.is_finished(),
        "a connection was accepted while suspended"
    );
    assert_eq!(admin(&mut w, "RESUME").await, Ok("RESUME".into()));
    assert_eq!(shown(&mut w, "STATE", "suspended", "value").await, "no");
    assert_eq!(held.await.unwrap(), "6");
    assert_eq!(late.await.unwrap(), "5");
    let mut raw = raw.await.unwrap();
    assert_eq!(raw.scalar("SELECT 9").await, "9");
}

/// SHOW CLIENTS says why a client keeps its server (pgcorral's extra column).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_clients_says_why_a_client_is_pinned() {
    let pg = Postgres::start();
    let p = pooler(&pg, "").await;
    let a = p.connect("postgres", None, "postgres").await;
    a.batch_execute("SELECT pg_advisory_lock(42)")
        .await
        .unwrap();
    let mut w = console(&p).await;
    let msgs = w.simple("SHOW CLIENTS").await;
    let desc = msgs.iter().find(|m| m.tag == b'T').unwrap();
    let names = column_names(&desc.body);
    let i = names
        .iter()
        .position(|n| n == "pinned")
        .expect("pinned column");
    assert_eq!(
        names[i - 1],
        "application_name",
        "after PgBouncer's columns"
    );
    let why = pinned_until(&mut w, i, |why| why.iter().any(|w| !w.is_empty())).await;
    assert!(why.iter().any(|w| w.contains("advisory lock")), "{why:?}");
    a.batch_execute("SELECT pg_advisory_unlock(42)")
        .await
        .unwrap();
    let why = pinned_until(&mut w, i, |why| why.iter().all(|w| w.is_empty())).await;
    assert!(why.iter().all(|w| w.is_empty()), "unpinned: {why:?}");
}
