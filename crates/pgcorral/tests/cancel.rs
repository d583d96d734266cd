//! Query cancellation through pgcorral: BackendKeyData, CancelRequest forwarding in session and transaction mode, psql Ctrl-C, and keys that must cancel nothing.

mod support;

use std::time::{Duration, Instant};

use support::raw::Raw;
use support::*;

fn cfg(pg: &Postgres, mode: &str, pool_size: usize) -> String {
    config(
        pg,
        "postgres",
        &format!("pool_mode = \"{mode}\"\ndefault_pool_size = {pool_size}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_backend_key_is_the_server_pid() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "session", 4)).await;
    let mut a = Raw::login(pooler.port(), "postgres", "postgres")
        .await
        .unwrap();
    let mut b = Raw::login(pooler.port(), "postgres", "postgres")
        .await
        .unwrap();
    for raw in [&mut a, &mut b] {
        let (pid, _) = raw.key.expect("BackendKeyData");
        let rows = raw.query("SELECT pg_backend_pid()").await.unwrap();
        assert_eq!(rows[0][0].as_deref(), Some(pid.to_string().as_str()));
    }
    assert_ne!(a.key.unwrap().0, b.key.unwrap().0);

    // Transaction mode hands out a key too (no server is attached while idle).
    let pooler = Pooler::start(&cfg(&pg, "transaction", 4)).await;
    let raw = Raw::login(pooler.port(), "postgres", "postgres")
        .await
        .unwrap();
    assert!(raw.key.is_some(), "no BackendKeyData in transaction mode");
}

async fn cancel_token_cancels(mode: &str) {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, mode, 2)).await;
    let client = pooler.connect("postgres", None, "postgres").await;
    let token = client.cancel_token();
    let client = std::sync::Arc::new(client);
    let c = client.clone();
    let query = tokio::spawn(async move { c.simple_query("SELECT pg_sleep(60)").await });
    wait_for_sleeping_query(&pg).await;
    let start = Instant::now();
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let res = within(Duration::from_secs(2), "cancelled query", query)
        .await
        .unwrap();
    let err = res.map(drop).expect_err("query was cancelled");
    assert_eq!(sqlstate(&err), "57014", "{err}");
    assert!(
        db_message(&err).contains("canceling statement due to user request"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(2));
    // The client goes on working.
    let seven = scalar(&client, "SELECT 7").await.unwrap();
    assert_eq!(seven.as_deref(), Some("7"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_token_session_mode() {
    cancel_token_cancels("session").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_token_transaction_mode() {
    cancel_token_cancels("transaction").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_ctrl_c_cancels_the_query() {
    let pg = Postgres::start();
    for mode in ["session", "transaction"] {
        let pooler = Pooler::start(&cfg(&pg, mode, 2)).await;
        let mut c = psql_cmd(pooler.port(), "postgres", "postgres", None);
        c.args(["-c", "SELECT pg_sleep(60)"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        wait_for_sleeping_query(&pg).await;
        let status = std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(3) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{mode}: psql still running 3 s after SIGINT");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("canceling statement due to user request"),
            "{mode}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_keys_cancel_nothing() {
    let pg = Postgres::start();
    for mode in ["session", "transaction"] {
        let pooler = Pooler::start(&cfg(&pg, mode, 2)).await;
        let client = pooler.connect("postgres", None, "postgres").await;
        let pid: i32 = scalar(&client, "SELECT pg_backend_pid()")
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        let query = tokio::spawn(async move {
            let r = client.simple_query("SELECT pg_sleep(1.5)").await;
            (r, client)
        });
        wait_for_sleeping_query(&pg).await;
        // A made-up key, and the real server pid (session mode's key pid) with a wrong secret.
        raw::cancel(pooler.port(), 0x1234_5678, 0x0bad_cafe).await;
        raw::cancel(pooler.port(), pid, 0x0bad_cafe).await;
        raw::cancel(pooler.port(), pid, 0).await;
        let (res, client) = within(Duration::from_secs(5), "sleeping query", query)
            .await
            .unwrap();
        res.unwrap_or_else(|e| panic!("{mode}: query was disturbed: {e}"));
        client.simple_query("SELECT 1").await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_client_key_does_not_cancel_another_clients_query() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "transaction", 1)).await;
    let a = pooler.connect("postgres", None, "postgres").await;
    // A has used the one server, and gone idle.
    a.simple_query("SELECT 1").await.unwrap();
    let b = pooler.connect("postgres", None, "postgres").await;
    let query = tokio::spawn(async move { b.simple_query("SELECT pg_sleep(2)").await });
    wait_for_sleeping_query(&pg).await;
    a.cancel_token()
        .cancel_query(tokio_postgres::NoTls)
        .await
        .unwrap();
    let res = within(Duration::from_secs(5), "B's query", query)
        .await
        .unwrap();
    res.unwrap_or_else(|e| panic!("A's cancel hit B's query: {e}"));
    a.simple_query("SELECT 1").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_key_of_a_departed_session_cancels_nothing() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "session", 1)).await;
    // A gets the one server, notes its key, and leaves; B gets the same server.
    let a = Raw::login(pooler.port(), "postgres", "postgres")
        .await
        .unwrap();
    let (pid_a, secret_a) = a.key.unwrap();
    drop(a);
    let b = within(
        Duration::from_secs(5),
        "B's login",
        pooler.connect("postgres", None, "postgres"),
    )
    .await;
    let pid_b = scalar(&b, "SELECT pg_backend_pid()").await.unwrap();
    assert_eq!(pid_b, Some(pid_a.to_string()), "B reuses A's server");
    let query = tokio::spawn(async move { b.simple_query("SELECT pg_sleep(1.5)").await });
    wait_for_sleeping_query(&pg).await;
    raw::cancel(pooler.port(), pid_a, secret_a).await;
    let res = within(Duration::from_secs(5), "B's query", query)
        .await
        .unwrap();
    res.unwrap_or_else(|e| panic!("A's old key cancelled B's query: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_works_when_max_client_conn_is_reached() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(&pg, "postgres", "max_client_conn = 1")).await;
    let client = pooler.connect("postgres", None, "postgres").await;
    let token = client.cancel_token();
    let query = tokio::spawn(async move { client.simple_query("SELECT pg_sleep(60)").await });
    wait_for_sleeping_query(&pg).await;
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let err = within(Duration::from_secs(2), "cancelled query", query)
        .await
        .unwrap()
        .map(drop)
        .expect_err("query was cancelled");
    assert_eq!(sqlstate(&err), "57014", "{err}");
}

/// A burst of cancels for one client's query while another waits for the same (only) server:
/// the first lands and cancels the query; the others, already on their way when the server is
/// released, must not cancel the next client's query on that server. pgcorral lends the server
/// again only once every cancel forwarded to it has landed (PgBouncer's suite:
/// `test_cancel_race`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_cancels_for_one_client_do_not_cancel_the_next_on_its_server() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "transaction", 1)).await;
    for round in 0..3 {
        let a = std::sync::Arc::new(pooler.connect("postgres", None, "postgres").await);
        let b = std::sync::Arc::new(pooler.connect("postgres", None, "postgres").await);
        let token = a.cancel_token();
        let first = {
            let a = a.clone();
            tokio::spawn(async move { a.simple_query("SELECT pg_sleep(5)").await })
        };
        wait_for_sleeping_query(&pg).await;
        let next = {
            let b = b.clone();
            tokio::spawn(async move { b.simple_query("SELECT pg_sleep(0.5)").await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let cancels: Vec<_> = (0..100)
            .map(|_| {
                let t = token.clone();
                tokio::spawn(async move { t.cancel_query(tokio_postgres::NoTls).await })
            })
            .collect();
        for c in cancels {
            let _ = c.await;
        }
        let err = within(Duration::from_secs(10), "first query", first)
            .await
            .unwrap()
            .map(drop)
            .expect_err("the first query is cancelled");
        assert_eq!(sqlstate(&err), "57014", "round {round}: {err}");
        within(Duration::from_secs(10), "next query", next)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: the next client's query: {e}"));
    }
}
