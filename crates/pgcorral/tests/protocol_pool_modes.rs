//! The pool modes with real clients: pgbench through transaction mode (simple and extended) and
//! session mode (prepared), and statement mode refusing transactions to psql and to BEGIN.

mod support;

use tokio_postgres::types::Type;

use support::protocol::*;
use support::wire::{tags, Wire};
use support::*;

// ---- 1. pool modes with psql and pgbench ---------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_transaction_mode_simple_and_extended() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 4").await;
    pgbench_init(p.port()).await;
    for proto in ["simple", "extended"] {
        let mut run = pgbench_cmd(p.port(), "postgres", "postgres", None);
        run.args(["-c", "8", "-j", "2", "-T", "3", "--protocol", proto]);
        let o = run_cmd(run).await;
        assert_pgbench_ok(proto, &o);
    }
    let (open, _, _) = p.services.pools.all()[0].counts();
    assert!(open <= 4, "pool opened {open} servers for a size of 4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_session_mode_prepared() {
    let pg = Postgres::start();
    let p = pooler(&pg, "pool_mode = \"session\"\ndefault_pool_size = 8").await;
    pgbench_init(p.port()).await;
    let mut run = pgbench_cmd(p.port(), "postgres", "postgres", None);
    run.args(["-c", "8", "-j", "2", "-T", "3", "--protocol", "prepared"]);
    let o = run_cmd(run).await;
    assert_pgbench_ok("prepared", &o);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_mode_refuses_transactions_with_psql() {
    let pg = Postgres::start();
    let p = pooler(&pg, "pool_mode = \"statement\"\ndefault_pool_size = 1").await;
    let mut psql = psql_cmd(p.port(), "postgres", "postgres", None);
    psql.args([
        "-At",
        "-v",
        "ON_ERROR_STOP=0",
        "-c",
        "\\set VERBOSITY verbose",
        "-c",
        "BEGIN",
        "-c",
        "SELECT 40 + 1",
        "-c",
        "SELECT 'multi-a'; SELECT 'multi-b'",
        "-c",
        "BEGIN; SELECT 'in-tx'; COMMIT",
        "-c",
        "SELECT 'last'",
    ]);
    let o = run_cmd(psql).await;
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(
        err.contains("ERROR:  0A000: transaction blocks are not allowed in statement pooling mode"),
        "stderr: {err}\nstdout: {out}"
    );
    assert_eq!(
        err.matches("ERROR").count(),
        1,
        "only BEGIN fails: stderr: {err}"
    );
    for want in ["41", "multi-b", "in-tx", "last"] {
        assert!(
            out.lines().any(|l| l == want),
            "{want} missing from stdout: {out}\nstderr: {err}"
        );
    }
    assert!(o.status.success(), "psql: {out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_mode_refuses_begin_and_rolls_back() {
    let pg = Postgres::start();
    let p = pooler(&pg, "pool_mode = \"statement\"\ndefault_pool_size = 1").await;
    let c = client(&p).await;
    let e = c.batch_execute("BEGIN").await.unwrap_err();
    assert_eq!(sqlstate(&e), "0A000", "{e}");
    // The server's transaction was rolled back: nothing is left idle in transaction.
    let d = direct(&pg).await;
    let stuck: i64 = d
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stuck, 0);

    // Single statements, simple and extended, work.
    let rows = simple_rows(&c.simple_query("SELECT 1").await.unwrap());
    assert_eq!(rows, [["1"]]);
    let r = c
        .query_typed_one("SELECT $1::int4 + 1", &[(&1i32, Type::INT4)])
        .await
        .unwrap();
    assert_eq!(r.get::<_, i32>(0), 2);
    // A multi-statement Query that ends idle is allowed, even with a transaction inside.
    let rows = simple_rows(
        &c.simple_query("SELECT 'a'; BEGIN; SELECT 'b'; COMMIT")
            .await
            .unwrap(),
    );
    assert_eq!(rows, [["a"], ["b"]]);
    // A write in a refused transaction does not persist.
    c.batch_execute("CREATE TABLE st (x int)").await.unwrap();
    let e = c
        .batch_execute("BEGIN; INSERT INTO st VALUES (1)")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "0A000");
    let rows = simple_rows(&c.simple_query("SELECT count(*) FROM st").await.unwrap());
    assert_eq!(rows, [["0"]]);
    // Raw wire: the refusal ends with ReadyForQuery idle.
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    let msgs = w.simple("BEGIN").await;
    assert_eq!(tags(&msgs), "CEZ", "{msgs:?}");
    assert_eq!(msgs[1].code(), "0A000");
    assert_eq!(msgs[2].body, b"I");
    assert_eq!(w.scalar("SELECT 'go on'").await, "go on");
}
