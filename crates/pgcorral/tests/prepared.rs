//! Prepared statements in transaction mode against a real PostgreSQL: named and unnamed
//! statements follow their client to whatever server it gets, are shared on the server by text,
//! closed per client, bounded per server, and SQL PREPARE/EXECUTE/DEALLOCATE work without pinning.

mod support;

use support::protocol::pooler;
use support::wire::{tags, Msg, Param, Wire};
use support::*;

async fn wire(p: &Pooler) -> Wire {
    Wire::connect(p.port(), "postgres", "postgres").await
}

/// The first column of every DataRow.
fn values(msgs: &[Msg]) -> Vec<String> {
    msgs.iter()
        .filter(|m| m.tag == b'D')
        .map(|m| m.row()[0].clone().unwrap_or_default())
        .collect()
}

fn error_code(msgs: &[Msg]) -> Option<String> {
    msgs.iter().find(|m| m.tag == b'E').map(|m| m.code())
}

/// Runs the client's statement `stmt` with one text parameter: Bind, Execute, Sync.
async fn run(c: &mut Wire, stmt: &str, arg: &str) -> Vec<Msg> {
    c.send_all(&[
        wire::bind("", stmt, &[Param::Text(arg)], false),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    c.until_ready().await
}

async fn prepare(c: &mut Wire, name: &str, sql: &str) -> Vec<Msg> {
    c.send_all(&[wire::parse(name, sql, &[]), wire::sync()])
        .await;
    c.until_ready().await
}

/// Terminates every backend of database "postgres" but the caller's, so the pool must open new
/// servers; returns once they have exited (their sockets are closed, so pgcorral sees them
/// gone before it would hand them out).
fn kill_servers(pg: &Postgres) {
    pg.sql(
        "template1",
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = 'postgres' AND pid <> pg_backend_pid()",
    );
    for _ in 0..200 {
        let left = pg.sql(
            "template1",
            "SELECT count(*) FROM pg_stat_activity WHERE datname = 'postgres'",
        );
        if left == "0" {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("terminated backends did not exit within 2 s");
}

#[tokio::test]
async fn named_statements_follow_the_client_to_new_servers() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut a = wire(&p).await;
    let got = prepare(&mut a, "s1", "SELECT $1::int + 1").await;
    assert_eq!(tags(&got), "1Z");
    assert_eq!(values(&run(&mut a, "s1", "41").await), ["42"]);
    let first = a.scalar("SELECT pg_backend_pid()").await;
    kill_servers(&pg);
    // The next use lands on a new server, where pgcorral prepares it first.
    let got = run(&mut a, "s1", "1").await;
    assert_eq!(tags(&got), "2DCZ", "{got:?}");
    assert_eq!(values(&got), ["2"]);
    assert_ne!(a.scalar("SELECT pg_backend_pid()").await, first);
    // Describe of the statement on yet another server.
    kill_servers(&pg);
    a.send_all(&[wire::describe(b'S', "s1"), wire::sync()])
        .await;
    let got = a.until_ready().await;
    assert_eq!(tags(&got), "tTZ", "{got:?}");
}

#[tokio::test]
async fn clients_share_server_statements_and_close_only_their_own() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut a = wire(&p).await;
    let mut b = wire(&p).await;
    assert_eq!(
        tags(&prepare(&mut a, "q", "SELECT $1::text || '!'").await),
        "1Z"
    );
    assert_eq!(
        tags(&prepare(&mut b, "q", "SELECT $1::text || '!'").await),
        "1Z"
    );
    // Different names for the same text: each Parse reaches the server, and, resolved as the
    // first was, is settled onto the first's statement; its copy is closed before the next
    // prepare there (b's first copy was, before "other" was parsed).
    assert_eq!(
        tags(&prepare(&mut b, "other", "SELECT $1::text || '!'").await),
        "1Z"
    );
    let n = a
        .scalar("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'pgcorral%'")
        .await;
    assert_eq!(n, "2");
    assert_eq!(values(&run(&mut b, "other", "x").await), ["x!"]);

    a.send_all(&[wire::close(b'S', "q"), wire::sync()]).await;
    assert_eq!(tags(&a.until_ready().await), "3Z");
    let got = run(&mut a, "q", "a").await;
    assert_eq!(error_code(&got).as_deref(), Some("26000"), "{got:?}");
    assert_eq!(values(&run(&mut b, "q", "b").await), ["b!"]);

    // The client's names are its own: a reuses "q" for another text, b is unaffected.
    assert_eq!(tags(&prepare(&mut a, "q", "SELECT 'a:' || $1").await), "1Z");
    assert_eq!(values(&run(&mut a, "q", "1").await), ["a:1"]);
    assert_eq!(values(&run(&mut b, "q", "2").await), ["2!"]);
}

#[tokio::test]
async fn unnamed_statements_across_batches_and_mixed_pipelines() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut a = wire(&p).await;
    let mut b = wire(&p).await;
    // Parse and Describe in one batch, Bind and Execute in the next, with another client's
    // unnamed statement and a server restart in between.
    a.send_all(&[
        wire::parse("", "SELECT $1::int * 10", &[]),
        wire::describe(b'S', ""),
        wire::sync(),
    ])
    .await;
    assert_eq!(tags(&a.until_ready().await), "1tTZ");
    b.send_all(&[wire::parse("", "SELECT 'b'", &[]), wire::sync()])
        .await;
    assert_eq!(tags(&b.until_ready().await), "1Z");
    assert_eq!(values(&run(&mut a, "", "4").await), ["40"]);
    kill_servers(&pg);
    assert_eq!(values(&run(&mut a, "", "5").await), ["50"]);

    // Parse and Bind in different flushes of one batch.
    a.send_all(&[wire::parse("", "SELECT $1::int + 100", &[]), wire::flush()])
        .await;
    assert_eq!(a.recv().await.tag, b'1');
    let got = run(&mut a, "", "1").await;
    assert_eq!(values(&got), ["101"]);

    // One pipeline mixing named and unnamed statements.
    a.send_all(&[
        wire::parse("n1", "SELECT 'named ' || $1", &[]),
        wire::parse("", "SELECT 'unnamed ' || $1", &[]),
        wire::bind("", "", &[Param::Text("u")], false),
        wire::execute("", 0),
        wire::bind("", "n1", &[Param::Text("n")], false),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    let got = a.until_ready().await;
    assert_eq!(tags(&got), "112DC2DCZ", "{got:?}");
    assert_eq!(values(&got), ["unnamed u", "named n"]);
}

#[tokio::test]
async fn errors_leave_no_stale_names() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut a = wire(&p).await;
    // A Parse that fails: the name does not exist afterwards, and can be used again.
    let got = prepare(&mut a, "bad", "SELEC 1").await;
    assert_eq!(error_code(&got).as_deref(), Some("42601"));
    let got = run(&mut a, "bad", "1").await;
    assert_eq!(error_code(&got).as_deref(), Some("26000"));
    assert_eq!(tags(&prepare(&mut a, "bad", "SELECT $1::int").await), "1Z");
    assert_eq!(values(&run(&mut a, "bad", "7").await), ["7"]);
    // A name prepared twice: PostgreSQL's error, and the rest of the batch is skipped.
    a.send_all(&[
        wire::parse("bad", "SELECT 2", &[]),
        wire::bind("", "bad", &[Param::Text("1")], false),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    let got = a.until_ready().await;
    assert_eq!(tags(&got), "EZ", "{got:?}");
    assert_eq!(error_code(&got).as_deref(), Some("42P05"));
    assert_eq!(values(&run(&mut a, "bad", "8").await), ["8"]);
}

#[tokio::test]
async fn sql_prepare_execute_deallocate_without_pinning() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut a = wire(&p).await;
    let mut b = wire(&p).await;
    let got = a.simple("PREPARE p(int) AS SELECT $1 * 2").await;
    assert_eq!(tags(&got), "CZ");
    // Not pinned: the other client gets the only server.
    assert_eq!(b.scalar("SELECT 1").await, "1");
    assert_eq!(a.scalar("EXECUTE p(21)").await, "42");
    // b may use the same name for something else.
    assert_eq!(tags(&b.simple("PREPARE p AS SELECT 'b'").await), "CZ");
    assert_eq!(b.scalar("EXECUTE p").await, "b");
    kill_servers(&pg);
    assert_eq!(a.scalar("execute P (5)").await, "10");
    let got = a.simple("PREPARE p AS SELECT 1").await;
    assert_eq!(error_code(&got).as_deref(), Some("42P05"));
    assert_eq!(tags(&a.simple("DEALLOCATE p").await), "CZ");
    let got = a.simple("EXECUTE p(1)").await;
    assert_eq!(error_code(&got).as_deref(), Some("26000"));
    assert_eq!(b.scalar("EXECUTE p").await, "b");
    // A protocol-level statement can be run by SQL EXECUTE too.
    assert_eq!(
        tags(&prepare(&mut a, "proto", "SELECT 'proto'").await),
        "1Z"
    );
    assert_eq!(a.scalar("EXECUTE proto").await, "proto");
    assert_eq!(tags(&b.simple("DEALLOCATE ALL").await), "CZ");
    let got = b.simple("EXECUTE p").await;
    assert_eq!(error_code(&got).as_deref(), Some("26000"));
    assert_eq!(a.scalar("EXECUTE proto").await, "proto");
}

/// Sends the Query `sql` in two writes, the first ending `at` bytes into its text, with a pause
/// between so that pgcorral reads them apart; returns the answer.
async fn split_query(c: &mut Wire, sql: &str, at: usize) -> Vec<Msg> {
    let q = wire::query(sql);
    c.send(&q[..5 + at]).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    c.send(&q[5 + at..]).await;
    c.until_ready().await
}

/// PREPARE, EXECUTE and DEALLOCATE whose first word arrives in pieces are still handled by
/// pgcorral: decided on "PREP" alone, the PREPARE would reach the server under the client's name.
#[tokio::test]
async fn sql_commands_split_across_reads_are_still_rewritten() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut a = wire(&p).await;
    let mut b = wire(&p).await;
    for at in [0, 4] {
        let got = split_query(&mut a, "PREPARE p AS SELECT 'a'", at).await;
        assert_eq!(tags(&got), "CZ", "{got:?}");
        // The only server has it under pgcorral's name (made by this PREPARE), not the
        // client's.
        assert_eq!(
            b.scalar(
                "SELECT string_agg(name, ',') FROM pg_prepared_statements \
                 WHERE name = 'p' OR prepare_time = (SELECT max(prepare_time) \
                 FROM pg_prepared_statements)"
            )
            .await,
            ["pgcorral_1", "pgcorral_2"][usize::from(at > 0)]
        );
        kill_servers(&pg);
        // Run and dropped by pgcorral, on a server that never had it.
        let got = split_query(&mut a, "  EXECUTE p", at).await;
        assert_eq!(values(&got), ["a"], "{got:?}");
        assert_eq!(tags(&split_query(&mut a, "DEALLOCATE p", at).await), "CZ");
        let got = a.simple("EXECUTE p").await;
        assert_eq!(error_code(&got).as_deref(), Some("26000"));
    }
}

#[tokio::test]
async fn discard_all_clears_only_the_clients_statements() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut a = wire(&p).await;
    let mut b = wire(&p).await;
    for c in [&mut a, &mut b] {
        assert_eq!(tags(&prepare(c, "x", "SELECT $1::int - 1").await), "1Z");
        assert_eq!(tags(&c.simple("PREPARE y AS SELECT 'y'").await), "CZ");
    }
    assert_eq!(tags(&a.simple("DISCARD ALL").await), "CZ");
    let got = run(&mut a, "x", "1").await;
    assert_eq!(error_code(&got).as_deref(), Some("26000"));
    let got = a.simple("EXECUTE y").await;
    assert_eq!(error_code(&got).as_deref(), Some("26000"));
    // b's statements still work, though the server dropped them.
    assert_eq!(values(&run(&mut b, "x", "10").await), ["9"]);
    assert_eq!(b.scalar("EXECUTE y").await, "y");
}

#[tokio::test]
async fn max_prepared_statements_bounds_each_server() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1\nmax_prepared_statements = 2").await;
    let mut a = wire(&p).await;
    for i in 0..5 {
        let sql = format!("SELECT $1::int + {i}");
        assert_eq!(tags(&prepare(&mut a, &format!("s{i}"), &sql).await), "1Z");
    }
    let count = "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'pgcorral%'";
    assert_eq!(a.scalar(count).await, "2");
    for round in 0..2 {
        for i in 0..5 {
            let got = run(&mut a, &format!("s{i}"), "100").await;
            assert_eq!(values(&got), [format!("{}", 100 + i)], "round {round}");
        }
    }
    assert_eq!(a.scalar(count).await, "2");
}

/// Columns in each DataRow.
fn widths(msgs: &[Msg]) -> Vec<usize> {
    msgs.iter()
        .filter(|m| m.tag == b'D')
        .map(|m| m.row().len())
        .collect()
}

/// Runs `stmt` as drivers that describe every execution do (psycopg, JDBC, node-postgres):
/// Bind, Describe portal, Execute, Sync.
async fn run_described(c: &mut Wire, stmt: &str, arg: &str) -> Vec<Msg> {
    c.send_all(&[
        wire::bind("", stmt, &[Param::Text(arg)], false),
        wire::describe(b'P', ""),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    c.until_ready().await
}

/// A table changed under a prepared statement ("cached plan must not change result type"):
/// with `retry_stale_statements`, outside a transaction, for a batch that describes its portal
/// (so the client learns the new row shape) pgcorral prepares the statement again and retries, for protocol-level named and
/// unnamed statements and SQL EXECUTE; a client sharing the statement on the same server is
/// retried too. A batch without Describe (the client may decode by a description it got
/// earlier), one with more pipelined behind it, and one inside a transaction get the error as
/// from PostgreSQL; the statement works again after it.
#[tokio::test]
async fn statements_made_stale_by_a_schema_change_are_prepared_again_and_retried() {
    let pg = Postgres::start();
    pg.sql(
        "postgres",
        "CREATE TABLE t (a int); INSERT INTO t VALUES (1)",
    );
    let p = pooler(&pg, "default_pool_size = 1\nretry_stale_statements = true").await;
    let mut a = wire(&p).await;
    let mut b = wire(&p).await;
    let all = "SELECT * FROM t WHERE $1::int IS NOT NULL";
    assert_eq!(tags(&prepare(&mut a, "s", all).await), "1Z");
    assert_eq!(tags(&prepare(&mut b, "s", all).await), "1Z");
    assert_eq!(widths(&run(&mut a, "s", "1").await), [1]);
    assert_eq!(widths(&run(&mut b, "s", "1").await), [1]);
    assert_eq!(tags(&a.simple("PREPARE q AS SELECT * FROM t").await), "CZ");
    assert_eq!(widths(&a.simple("EXECUTE q").await), [1]);
    // The unnamed statement, parsed in one batch and bound in the next.
    a.send_all(&[wire::parse("", all, &[]), wire::sync()]).await;
    assert_eq!(tags(&a.until_ready().await), "1Z");

    pg.sql("postgres", "ALTER TABLE t ADD COLUMN b int DEFAULT 7");
    let got = run_described(&mut a, "s", "1").await;
    assert_eq!(tags(&got), "2TDCZ", "retried: {got:?}");
    assert_eq!(widths(&got), [2]);
    // b shares the server statement, now prepared afresh: no error either.
    let got = run_described(&mut b, "s", "1").await;
    assert_eq!(tags(&got), "2TDCZ", "{got:?}");
    assert_eq!(widths(&got), [2]);

    pg.sql("postgres", "ALTER TABLE t ADD COLUMN c int DEFAULT 8");
    // (Before any simple Query, which drops the unnamed statement as on PostgreSQL.)
    let got = run_described(&mut a, "", "1").await;
    assert_eq!(tags(&got), "2TDCZ", "unnamed statement retried: {got:?}");
    assert_eq!(widths(&got), [3]);
    let got = a.simple("EXECUTE q").await;
    assert_eq!(error_code(&got), None, "{got:?}");
    assert_eq!(widths(&got), [3]);

    // No Describe in the batch: the client sees the error, every time, as from PostgreSQL
    // (the statement's result type is fixed); a batch that describes its portal is retried.
    pg.sql("postgres", "ALTER TABLE t ADD COLUMN d int DEFAULT 9");
    let got = run(&mut a, "s", "1").await;
    assert_eq!(error_code(&got).as_deref(), Some("0A000"), "{got:?}");
    let got = run(&mut a, "s", "1").await;
    assert_eq!(error_code(&got).as_deref(), Some("0A000"), "{got:?}");
    assert_eq!(widths(&run_described(&mut a, "s", "1").await), [4]);

    // Several requests in one pipeline before the answer: the error cannot be hidden without
    // reordering, so the client sees it; the next use works.
    pg.sql("postgres", "ALTER TABLE t ADD COLUMN e int DEFAULT 10");
    let one = [
        wire::bind("", "s", &[Param::Text("1")], false),
        wire::describe(b'P', ""),
        wire::execute("", 0),
        wire::sync(),
    ];
    a.send_all(&[one.clone(), one].concat()).await;
    let got = a.until_ready_n(2).await;
    assert_eq!(error_code(&got).as_deref(), Some("0A000"), "{got:?}");
    assert_eq!(widths(&run_described(&mut a, "s", "1").await), [5]);

    // Inside a transaction: no retry.
    assert_eq!(tags(&a.simple("BEGIN").await), "CZ");
    pg.sql("postgres", "ALTER TABLE t ADD COLUMN f int DEFAULT 11");
    let got = run_described(&mut a, "s", "1").await;
    assert_eq!(error_code(&got).as_deref(), Some("0A000"), "{got:?}");
    assert_eq!(tags(&a.simple("ROLLBACK").await), "CZ");
    let got = run_described(&mut a, "s", "1").await;
    assert_eq!(tags(&got), "2TDCZ", "{got:?}");
    assert_eq!(widths(&got), [6]);
}

/// By default a statement made stale by a schema change fails as on PostgreSQL, described or
/// not, protocol-level or SQL, every time, until the client prepares it again; inside or
/// outside a transaction.
#[tokio::test]
async fn stale_statements_fail_as_on_postgresql_by_default() {
    let pg = Postgres::start();
    pg.sql(
        "postgres",
        "CREATE TABLE t (a int); INSERT INTO t VALUES (1)",
    );
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut a = wire(&p).await;
    let all = "SELECT * FROM t WHERE $1::int IS NOT NULL";
    assert_eq!(tags(&prepare(&mut a, "s", all).await), "1Z");
    assert_eq!(widths(&run_described(&mut a, "s", "1").await), [1]);
    assert_eq!(tags(&a.simple("PREPARE q AS SELECT * FROM t").await), "CZ");
    pg.sql("postgres", "ALTER TABLE t ADD COLUMN b int DEFAULT 7");
    for _ in 0..2 {
        let got = run_described(&mut a, "s", "1").await;
        assert_eq!(error_code(&got).as_deref(), Some("0A000"), "{got:?}");
        let got = a.simple("EXECUTE q").await;
        assert_eq!(error_code(&got).as_deref(), Some("0A000"), "{got:?}");
    }
    assert_eq!(tags(&prepare(&mut a, "s2", all).await), "1Z");
    assert_eq!(widths(&run_described(&mut a, "s2", "1").await), [2]);
}

/// A statement whose description the client was given is checked where pgcorral prepares it
/// again: on a new server it is described first; unchanged, the client's Bind goes on; after
/// its table changed, the client gets PostgreSQL's "cached plan must not change result type"
/// (with the routine drivers recognise it by) rather than rows of another shape, and a new
/// Parse of the text gets the new shape.
#[tokio::test]
async fn a_described_statement_is_checked_where_it_is_prepared_again() {
    let pg = Postgres::start();
    pg.sql(
        "postgres",
        "CREATE TABLE t (a int); INSERT INTO t VALUES (1)",
    );
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut a = wire(&p).await;
    let all = "SELECT * FROM t WHERE $1::int IS NOT NULL";
    a.send_all(&[
        wire::parse("s", all, &[]),
        wire::describe(b'S', "s"),
        wire::sync(),
    ])
    .await;
    assert_eq!(tags(&a.until_ready().await), "1tTZ");

    kill_servers(&pg);
    let got = run(&mut a, "s", "1").await;
    assert_eq!(tags(&got), "2DCZ", "unchanged on the new server: {got:?}");
    assert_eq!(widths(&got), [1]);

    kill_servers(&pg);
    pg.sql("postgres", "ALTER TABLE t ADD COLUMN b int DEFAULT 7");
    let got = run(&mut a, "s", "1").await;
    assert_eq!(tags(&got), "EZ", "{got:?}");
    assert_eq!(got[0].code(), "0A000");
    assert_eq!(
        got[0].field(b'M').as_deref(),
        Some("cached plan must not change result type")
    );
    assert_eq!(got[0].field(b'R').as_deref(), Some("RevalidateCachedQuery"));
    // Still refused on the next try (the client still has the old description)...
    assert_eq!(
        error_code(&run(&mut a, "s", "1").await).as_deref(),
        Some("0A000")
    );
    // ...until it prepares the text again.
    a.send_all(&[
        wire::parse("s2", all, &[]),
        wire::describe(b'S', "s2"),
        wire::sync(),
    ])
    .await;
    let got = a.until_ready().await;
    assert_eq!(tags(&got), "1tTZ", "{got:?}");
    let got = run(&mut a, "s2", "1").await;
    assert_eq!(tags(&got), "2DCZ", "{got:?}");
    assert_eq!(widths(&got), [2]);
}

/// Two clients prepare the same text on two servers with a column added in between (what
/// drivers re-preparing after a schema change do at once). Client A was told one column; B's
/// Parse lands on the other server, where pgcorral's check shows two. A never gets rows of two
/// columns: wherever it runs the statement, it gets "cached plan must not change result type",
/// as from PostgreSQL; B runs it with the two columns it was told, on either server.
#[tokio::test]
async fn clients_told_different_shapes_of_one_text_each_get_their_own() {
    let pg = Postgres::start();
    pg.sql(
        "postgres",
        "CREATE TABLE t (a int); INSERT INTO t VALUES (1)",
    );
    let p = pooler(&pg, "default_pool_size = 2\npool_mode = \"transaction\"").await;
    let all = "SELECT * FROM t WHERE $1::int IS NOT NULL";
    let (mut a, mut b, mut c) = (wire(&p).await, wire(&p).await, wire(&p).await);
    let describe = |name: &str| {
        vec![
            wire::parse(name, all, &[]),
            wire::describe(b'S', name),
            wire::sync(),
        ]
    };
    // A prepares the text on the pool's first server.
    a.send_all(&describe("s")).await;
    let got = a.until_ready().await;
    assert_eq!(tags(&got), "1tTZ", "{got:?}");
    assert_eq!(fields(&got), 1);

    pg.sql("postgres", "ALTER TABLE t ADD COLUMN b int DEFAULT 7");
    // C holds that server, so B's Parse of the same text goes to a second one.
    c.send_all(&[wire::query("BEGIN; SELECT 1")]).await;
    c.until_ready().await;
    b.send_all(&describe("s")).await;
    let got = b.until_ready().await;
    assert_eq!(tags(&got), "1tTZ", "{got:?}");
    assert_eq!(fields(&got), 2);
    c.send_all(&[wire::query("COMMIT")]).await;
    c.until_ready().await;
    let (open, _, _) = p.services.pools.all()[0].counts();
    assert_eq!(open, 2, "B had a server of its own");

    // Each on either server: C holds the other one, or not.
    for (who, hold) in [("A", false), ("A", true), ("B", false), ("B", true)] {
        if hold {
            c.send_all(&[wire::query("BEGIN; SELECT 1")]).await;
            c.until_ready().await;
        }
        let got = run(if who == "A" { &mut a } else { &mut b }, "s", "1").await;
        if who == "A" {
            assert_eq!(tags(&got), "EZ", "A (C holding a server: {hold}): {got:?}");
            assert_eq!(got[0].code(), "0A000");
        } else {
            assert_eq!(
                tags(&got),
                "2DCZ",
                "B (C holding a server: {hold}): {got:?}"
            );
            assert_eq!(widths(&got), [2]);
        }
        if hold {
            c.send_all(&[wire::query("COMMIT")]).await;
            c.until_ready().await;
        }
    }
}

/// Columns of the RowDescription among `msgs`.
fn fields(msgs: &[Msg]) -> usize {
    let t = msgs
        .iter()
        .find(|m| m.tag == b'T')
        .expect("a RowDescription");
    u16::from_be_bytes([t.body[0], t.body[1]]) as usize
}
