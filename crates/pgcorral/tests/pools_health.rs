//! Server health as a user sees it, against a real PostgreSQL: idle servers that PostgreSQL
//! closed (terminated, idle_session_timeout) are never handed out, a failing check query
//! discards its server, and a PostgreSQL restart costs idle clients nothing.
//!
//! Server connections are counted on the PostgreSQL side (pg_stat_activity), never through
//! pgcorral's own counters.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use support::pools::*;
use support::*;
use tokio_postgres::Client;

// ---------------------------------------------------------------------------------------------
// 1. Server health
// ---------------------------------------------------------------------------------------------

/// Idle pooled servers that PostgreSQL terminated are never handed to a client: every client's
/// next query succeeds, on a new server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_idle_servers_are_never_handed_out() {
    let pg = Postgres::start();
    pg.create_user("app", "pw");
    let admin = direct(&pg).await;
    let cond = of("app", "postgres");
    let pooler = Pooler::start(&toml("default_pool_size = 3", &db(&pg, "postgres", ""))).await;
    let mut cs = clients(&pooler, "app", "postgres", 3).await;
    for round in 0..3 {
        let (back, old) = transactions(cs, 1, Duration::from_millis(200)).await;
        cs = back;
        assert_eq!(old.len(), 3);
        assert_eq!(count(&admin, &cond).await, 3);
        sql(
            &pg,
            "postgres",
            &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {cond}"),
        );
        wait_count(&admin, &cond, 0, Duration::from_secs(5), "terminated").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let tasks: Vec<_> = cs
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                tokio::spawn(async move {
                    match scalar(&c, "SELECT pg_backend_pid()").await {
                        Ok(p) => (c, p.unwrap().parse::<i32>().unwrap()),
                        Err(e) => panic!("round {round} client {i}: stale server: {e}"),
                    }
                })
            })
            .collect();
        cs = Vec::new();
        for t in tasks {
            let (c, p) = within(Duration::from_secs(10), "query after kill", t)
                .await
                .unwrap();
            assert!(!old.contains(&p), "a terminated server was reused");
            cs.push(c);
        }
    }
}

/// Servers PostgreSQL closes itself for idleness (idle_session_timeout) are never handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_closed_by_idle_session_timeout_are_never_handed_out() {
    let pg = Postgres::start();
    pg.create_user("app", "pw");
    pg.sql(
        "postgres",
        "ALTER ROLE app SET idle_session_timeout = '400ms'",
    );
    let pooler = Pooler::start(&toml("default_pool_size = 2", &db(&pg, "postgres", ""))).await;
    let cs = clients(&pooler, "app", "postgres", 2).await;
    let mut seen = HashSet::new();
    for round in 0..4 {
        for (i, c) in cs.iter().enumerate() {
            match within(
                Duration::from_secs(10),
                "query",
                scalar(c, "SELECT pg_backend_pid()"),
            )
            .await
            {
                Ok(p) => {
                    seen.insert(p.unwrap());
                }
                Err(e) => panic!("round {round} client {i}: {e}"),
            }
        }
        // Longer than idle_session_timeout: PostgreSQL closes the pooled servers meanwhile.
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
    assert!(seen.len() >= 4, "servers were replaced: {seen:?}");
}

/// `server_check_query` runs on servers idle longer than server_check_delay (0: always); a
/// server whose check fails is closed and the client served by another, with no error.
/// `check` fails when `health.v` is 0.
async fn failing_check_discards_the_server(check: &str) {
    let pg = Postgres::start();
    pg.create_user("app", "pw");
    pg.create_db("checked");
    pg.sql(
        "checked",
        "CREATE TABLE health (v int); INSERT INTO health VALUES (1)",
    );
    let admin = direct(&pg).await;
    let pooler = Pooler::start(&toml(
        &format!("default_pool_size = 1\nserver_check_delay = 0\nserver_check_query = \"{check}\""),
        &db(&pg, "checked", ""),
    ))
    .await;
    let c = pooler.connect("app", None, "checked").await;
    let first = backend_pid(&c).await;
    assert_eq!(
        backend_pid(&c).await,
        first,
        "a passing check keeps the server"
    );
    sql(&pg, "checked", "UPDATE health SET v = 0");
    let second = backend_pid(&c).await;
    assert_ne!(
        second, first,
        "a server whose server_check_query failed was handed out"
    );
    wait_count(
        &admin,
        &format!("pid = {first}"),
        0,
        Duration::from_secs(5),
        "the server that failed its check is closed",
    )
    .await;
    sql(&pg, "checked", "UPDATE health SET v = 1");
    let third = backend_pid(&c).await;
    assert_eq!(
        backend_pid(&c).await,
        third,
        "checks pass again: server reused"
    );
    assert_eq!(count(&admin, &of("app", "checked")).await, 1);
}

/// A check query that ends in an ERROR (division by zero) has failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_query_error_discards_the_server() {
    failing_check_discards_the_server("SELECT 1 / (SELECT v FROM health)").await;
}

/// A check query whose server goes away (FATAL) has failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_query_fatal_discards_the_server() {
    failing_check_discards_the_server(
        "SELECT CASE WHEN (SELECT v FROM health) = 0 THEN pg_terminate_backend(pg_backend_pid()) END",
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// 2. PostgreSQL restart
// ---------------------------------------------------------------------------------------------

/// PostgreSQL restarts while transaction-mode clients sit idle (their servers idle in the
/// pool): afterwards every client's next queries succeed, one at a time and all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_costs_idle_clients_nothing() {
    let pg = Postgres::start();
    pg.create_user("app", "pw");
    for min in [0, 2] {
        let pooler = Pooler::start(&toml(
            &format!(
                "default_pool_size = 3\nmin_pool_size = {min}\nserver_login_retry = 100\n\
                 pool_mode = \"transaction\""
            ),
            &db(&pg, "postgres", ""),
        ))
        .await;
        let cs = clients(&pooler, "app", "postgres", 4).await;
        let (cs, _) = transactions(cs, 1, Duration::from_millis(100)).await;
        let cs: Vec<Arc<Client>> = cs.into_iter().map(Arc::new).collect();
        for round in 0..3 {
            blocking(|| pg.pg_ctl("restart"));
            for (i, c) in cs.iter().enumerate() {
                for q in 0..3 {
                    let r = within(
                        Duration::from_secs(10),
                        "query after restart",
                        scalar(c, "SELECT 1"),
                    )
                    .await;
                    if let Err(e) = r {
                        panic!("min_pool_size {min}, restart {round}, client {i}, query {q}: {e}");
                    }
                }
            }
            blocking(|| pg.pg_ctl("restart"));
            let tasks: Vec<_> = cs
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let c = c.clone();
                    tokio::spawn(async move {
                        for q in 0..3 {
                            if let Err(e) = c.simple_query("SELECT 1").await {
                                panic!(
                                    "min_pool_size {min}, restart {round} (all at once), \
                                     client {i}, query {q}: {e}"
                                );
                            }
                        }
                    })
                })
                .collect();
            for t in tasks {
                within(Duration::from_secs(20), "clients after restart", t)
                    .await
                    .unwrap();
            }
        }
        // A new client too.
        let c = within(
            Duration::from_secs(10),
            "new client",
            pooler.connect("app", None, "postgres"),
        )
        .await;
        assert_eq!(value(&c, "SELECT 1").await, "1");
        drop((c, cs));
        pooler.shutdown().await;
    }
}
