//! The wire protocol through pgcorral against a real PostgreSQL, message type by message type.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use futures_util::{SinkExt, StreamExt};
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client, SimpleQueryMessage};

use support::wire::{tags, Msg, Param, Wire};
use support::*;

// ---- helpers --------------------------------------------------------------------------------

/// A config for database "postgres" with `general` lines (transaction mode unless they say not).
fn cfg(pg: &Postgres, general: &str) -> String {
    config(pg, "postgres", general)
}

async fn pooler(pg: &Postgres, general: &str) -> Pooler {
    Pooler::start(&cfg(pg, general)).await
}

async fn client(p: &Pooler) -> Client {
    p.connect("postgres", None, "postgres").await
}

/// Rows in table `xc` as another client of the same pooler sees them: proves the server a
/// COPY ran on went back to the pool in frame.
async fn rows_in_xc(other: &mut Wire, what: &str) -> String {
    within(
        Duration::from_secs(5),
        what,
        other.scalar("SELECT count(*) FROM xc"),
    )
    .await
}

fn i32_be(v: i32) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

// ---- 1. simple query ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_query_multi_statement_returns_every_result_set() {
    let pg = Postgres::start();
    let p = pooler(&pg, "").await;
    let c = client(&p).await;
    let msgs = c
        .simple_query(
            "SELECT 1 AS a; SELECT 2 AS b, 'x' AS c; SELECT g FROM generate_series(1,3) g",
        )
        .await
        .unwrap();
    let shape: Vec<String> = msgs
        .iter()
        .map(|m| match m {
            SimpleQueryMessage::RowDescription(cols) => {
                format!(
                    "T[{}]",
                    cols.iter().map(|c| c.name()).collect::<Vec<_>>().join(",")
                )
            }
            SimpleQueryMessage::Row(r) => format!(
                "D[{}]",
                (0..r.len())
                    .map(|i| r.get(i).unwrap())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            SimpleQueryMessage::CommandComplete(n) => format!("C{n}"),
            _ => "?".into(),
        })
        .collect();
    assert_eq!(
        shape,
        ["T[a]", "D[1]", "C1", "T[b,c]", "D[2,x]", "C1", "T[g]", "D[1]", "D[2]", "D[3]", "C3"]
    );

    // The same on the wire: three result sets, one ReadyForQuery, idle.
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    let msgs = w.simple("SELECT 1; SELECT 2; SELECT 3").await;
    assert_eq!(tags(&msgs), "TDCTDCTDCZ", "{msgs:?}");
    let vals: Vec<_> = msgs
        .iter()
        .filter(|m| m.tag == b'D')
        .map(|m| m.row()[0].clone().unwrap())
        .collect();
    assert_eq!(vals, ["1", "2", "3"]);
    assert_eq!(msgs.last().unwrap().body, b"I");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_query_gets_empty_query_response() {
    let pg = Postgres::start();
    let p = pooler(&pg, "").await;
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    for sql in ["", "   ", ";"] {
        let msgs = w.simple(sql).await;
        assert_eq!(tags(&msgs), "IZ", "query {sql:?}: {msgs:?}");
        assert_eq!(msgs[1].body, b"I");
    }
    // And the connection goes on working.
    assert_eq!(w.scalar("SELECT 5").await, "5");
    // tokio-postgres maps EmptyQueryResponse to CommandComplete(0).
    let c = client(&p).await;
    let msgs = c.simple_query("").await.unwrap();
    assert!(
        matches!(msgs[..], [SimpleQueryMessage::CommandComplete(0)]),
        "{msgs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_outside_transaction_ends_the_query_and_the_connection_goes_on() {
    let pg = Postgres::start();
    let p = pooler(&pg, "").await;
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    // An error in the middle of a multi-statement Query: earlier results arrive, later
    // statements do not run, the implicit transaction ends, the session is idle.
    let msgs = w.simple("SELECT 1; SELECT 1/0; SELECT 3").await;
    assert_eq!(tags(&msgs), "TDCEZ", "{msgs:?}");
    assert_eq!(msgs[3].code(), "22012");
    assert_eq!(msgs[3].field(b'S').as_deref(), Some("ERROR"));
    assert_eq!(msgs[4].body, b"I");
    assert_eq!(w.scalar("SELECT 'after'").await, "after");

    let c = client(&p).await;
    let e = c
        .simple_query("SELECT * FROM no_such_table")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42P01");
    let e = c.query("SELECT $1::int4 / 0", &[&1i32]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "22012");
    let row = c.query_one("SELECT 6 * 7", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_in_transaction_fails_until_rollback_and_server_returns_to_pool() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let a = client(&p).await;
    let b = client(&p).await;

    a.batch_execute("BEGIN").await.unwrap();
    let a_pid = backend_pid(&a).await;
    let e = a.batch_execute("SELECT 1/0").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22012");
    for _ in 0..2 {
        let e = a.simple_query("SELECT 1").await.unwrap_err();
        assert_eq!(sqlstate(&e), "25P02", "{e}");
    }
    let e = a.query("SELECT $1::int4", &[&1i32]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "25P02", "{e}");

    // The failed transaction keeps the only server: b waits.
    let waiting = tokio::spawn(async move {
        let pid = backend_pid(&b).await;
        (b, pid)
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !waiting.is_finished(),
        "b got a server while a's failed transaction held the only one"
    );

    let msgs = a.simple_query("ROLLBACK").await.unwrap();
    assert!(matches!(msgs[..], [SimpleQueryMessage::CommandComplete(0)]));
    // After ROLLBACK the server goes back to the pool, and b gets it.
    let (b, b_pid) = within(Duration::from_secs(5), "b after ROLLBACK", waiting)
        .await
        .unwrap();
    assert_eq!(b_pid, a_pid, "one server, so b must get the same backend");
    assert_eq!(
        a.query_one("SELECT 1 + 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        2
    );
    assert_eq!(backend_pid(&b).await, a_pid);

    // Raw wire: the ReadyForQuery statuses are passed through as the server sent them.
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    assert_eq!(w.simple("BEGIN").await.last().unwrap().body, b"T");
    let msgs = w.simple("SELECT 1/0").await;
    assert_eq!(tags(&msgs), "EZ");
    assert_eq!(msgs[1].body, b"E");
    let msgs = w.simple("SELECT 1").await;
    assert_eq!(
        (tags(&msgs).as_str(), msgs[0].code()),
        ("EZ", "25P02".into())
    );
    assert_eq!(w.simple("ROLLBACK").await.last().unwrap().body, b"I");
    assert_eq!(w.scalar("SELECT 'ok'").await, "ok");
}

// ---- 2. extended query ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_pipelines_through_the_pooler() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let a = client(&p).await;
    let b = client(&p).await;

    // Unnamed statements, one round trip each, all sent before any answer is read; two clients
    // interleave on the one server.
    let (a_ref, b_ref) = (&a, &b);
    let qa = (0..60).map(|i: i32| async move {
        a_ref
            .query_typed("SELECT $1::int4 * 2", &[(&i, Type::INT4)])
            .await
    });
    let qb = (0..60).map(|i: i32| async move {
        let v = format!("v{i}");
        b_ref
            .query_typed(
                "SELECT $1::text || '-b', $2::int4",
                &[(&v, Type::TEXT), (&i, Type::INT4)],
            )
            .await
    });
    let (ra, rb) = within(
        Duration::from_secs(15),
        "pipelined queries",
        futures_util::future::join(join_all(qa), join_all(qb)),
    )
    .await;
    for (i, r) in ra.into_iter().enumerate() {
        let rows = r.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].get::<_, i32>(0), i as i32 * 2);
    }
    for (i, r) in rb.into_iter().enumerate() {
        let rows = r.unwrap();
        assert_eq!(rows[0].get::<_, String>(0), format!("v{i}-b"));
        assert_eq!(rows[0].get::<_, i32>(1), i as i32);
    }

    // Named prepared statements (Parse/Describe/Sync, then Bind/Execute/Sync), pipelined.
    let (x, y, z) = tokio::join!(
        a.query_one("SELECT $1::int4 + 1", &[&41i32]),
        a.query_one("SELECT $1::text || 'yz'", &[&"x"]),
        a.query("SELECT g FROM generate_series(1, 500) g", &[]),
    );
    assert_eq!(x.unwrap().get::<_, i32>(0), 42);
    assert_eq!(y.unwrap().get::<_, String>(0), "xyz");
    let z = z.unwrap();
    assert_eq!(z.len(), 500);
    assert_eq!(z.iter().map(|r| r.get::<_, i32>(0)).sum::<i32>(), 125_250);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_pipeline_many_messages_before_one_sync() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;

    let mut batch = vec![wire::parse("dbl", "SELECT $1::int4 * 2 AS v", &[23])];
    for i in 0..25 {
        let s = i.to_string();
        batch.push(wire::bind("", "dbl", &[Param::Text(&s)], false));
        batch.push(wire::describe(b'P', ""));
        batch.push(wire::execute("", 0));
    }
    batch.push(wire::sync());
    // A second batch that fails at Bind: the rest of it is skipped up to its Sync.
    batch.push(wire::bind("", "dbl", &[Param::Text("oops")], false));
    batch.push(wire::execute("", 0));
    batch.push(wire::describe(b'S', "dbl"));
    batch.push(wire::sync());
    // A third batch, binary in and out, still on the named statement.
    batch.push(wire::bind("", "dbl", &[Param::Binary(i32_be(21))], true));
    batch.push(wire::execute("", 0));
    batch.push(wire::close(b'S', "dbl"));
    batch.push(wire::sync());
    w.send_all(&batch).await;

    let first = w.until_ready().await;
    assert_eq!(tags(&first), format!("1{}Z", "2TDC".repeat(25)));
    let vals: Vec<i32> = first
        .iter()
        .filter(|m| m.tag == b'D')
        .map(|m| m.row()[0].as_ref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(vals, (0..25).map(|i| i * 2).collect::<Vec<_>>());
    assert_eq!(first.last().unwrap().body, b"I");

    let second = w.until_ready().await;
    assert_eq!(tags(&second), "EZ", "{second:?}");
    assert_eq!(second[0].code(), "22P02");

    let third = w.until_ready().await;
    assert_eq!(tags(&third), "2DC3Z", "{third:?}");
    // Binary int4 result: 00 01 | 00 00 00 04 | 00 00 00 2a.
    assert_eq!(third[1].body, [0, 1, 0, 0, 0, 4, 0, 0, 0, 42]);
    assert_eq!(third[2].text(), "SELECT 1");
    assert!(w.silent_for(Duration::from_millis(200)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_row_limit_suspends_portal_inside_transaction() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    assert_eq!(w.simple("BEGIN").await.last().unwrap().body, b"T");
    w.send_all(&[
        wire::parse("", "SELECT g FROM generate_series(1, 5) g", &[]),
        wire::bind("cur", "", &[], false),
        wire::execute("cur", 2),
        wire::flush(),
    ])
    .await;
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(w.recv().await);
    }
    assert_eq!(tags(&got), "12DDs", "{got:?}");
    assert_eq!(got[2].row(), [Some("1".into())]);
    assert_eq!(got[3].row(), [Some("2".into())]);
    assert!(w.silent_for(Duration::from_millis(200)).await);

    // A second client waits: the transaction holds the only server.
    let port = p.port();
    let other = tokio::spawn(async move {
        let mut o = Wire::connect(port, "postgres", "postgres").await;
        o.scalar("SELECT 'other'").await
    });

    w.send_all(&[wire::execute("cur", 2), wire::flush()]).await;
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(w.recv().await);
    }
    assert_eq!(tags(&got), "DDs", "{got:?}");
    assert_eq!(got[0].row(), [Some("3".into())]);
    assert_eq!(got[1].row(), [Some("4".into())]);

    w.send_all(&[wire::execute("cur", 0), wire::sync()]).await;
    let rest = w.until_ready().await;
    assert_eq!(tags(&rest), "DCZ", "{rest:?}");
    assert_eq!(rest[0].row(), [Some("5".into())]);
    assert!(rest[1].text().starts_with("SELECT"), "{rest:?}");
    assert_eq!(rest[2].body, b"T");
    assert!(!other.is_finished());
    assert_eq!(w.simple("COMMIT").await.last().unwrap().body, b"I");
    assert_eq!(
        within(Duration::from_secs(5), "other client", other)
            .await
            .unwrap(),
        "other"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_row_limit_on_unnamed_portal_in_one_batch() {
    let pg = Postgres::start();
    let p = pooler(&pg, "").await;
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    w.send_all(&[
        wire::parse("", "SELECT g FROM generate_series(1, 5) g", &[]),
        wire::bind("", "", &[], false),
        wire::execute("", 2),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    let msgs = w.until_ready().await;
    assert_eq!(tags(&msgs), "12DDsDDDCZ", "{msgs:?}");
    let vals: Vec<_> = msgs
        .iter()
        .filter(|m| m.tag == b'D')
        .map(|m| m.row()[0].clone().unwrap())
        .collect();
    assert_eq!(vals, ["1", "2", "3", "4", "5"]);
    assert_eq!(msgs.last().unwrap().body, b"I");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_without_sync_keeps_the_server() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    // Learn a's backend while nothing is pending.
    let a_pid: i32 = w.scalar("SELECT pg_backend_pid()").await.parse().unwrap();
    let b = client(&p).await;

    w.send_all(&[
        wire::parse("plus", "SELECT $1::int4 + 100 AS r, pg_backend_pid()", &[]),
        wire::describe(b'S', "plus"),
        wire::flush(),
    ])
    .await;
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(w.recv().await);
    }
    assert_eq!(tags(&got), "1tT", "{got:?}");
    // ParameterDescription: one parameter, int4.
    assert_eq!(got[1].body, [0, 1, 0, 0, 0, 23]);
    assert!(w.silent_for(Duration::from_millis(200)).await);

    // b wants the only server; a has not synced, so b must wait.
    let waiting = tokio::spawn(async move {
        let pid = backend_pid(&b).await;
        (b, pid)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "b got a server while a had unsynced extended messages"
    );

    // a's statement is still there: same server.
    w.send_all(&[
        wire::bind("", "plus", &[Param::Text("5")], false),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    let msgs = w.until_ready().await;
    assert_eq!(tags(&msgs), "2DCZ", "{msgs:?}");
    assert_eq!(msgs[1].row(), [Some("105".into()), Some(a_pid.to_string())]);
    let (_b, b_pid) = within(Duration::from_secs(5), "b after Sync", waiting)
        .await
        .unwrap();
    assert_eq!(b_pid, a_pid);
}

/// A Flush that arrives on its own after a Sync's ReadyForQuery (psycopg ends a pipeline with
/// Sync then Flush, and under load the two can arrive apart) asks for nothing: the client keeps
/// no server, so another client gets the pool's only one at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_after_sync_holds_no_server() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1\nquery_wait_timeout = 20000").await;
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    let b = client(&p).await;
    for round in 0..3 {
        w.send_all(&[
            wire::parse("", "SELECT 1", &[]),
            wire::bind("", "", &[], false),
            wire::execute("", 0),
            wire::sync(),
        ])
        .await;
        assert_eq!(tags(&w.until_ready().await), "12DCZ");
        // One Flush, then two in one write.
        let flushes = if round == 0 { 1 } else { 2 };
        w.send_all(&vec![wire::flush(); flushes]).await;
        assert!(w.silent_for(Duration::from_millis(200)).await);
        let got: i32 = within(Duration::from_secs(5), "b after a's Flush", async {
            b.query_one("SELECT 41 + 1", &[]).await.unwrap().get(0)
        })
        .await;
        assert_eq!(got, 42);
    }
    // a goes on as before.
    assert_eq!(w.scalar("SELECT 7").await, "7");
}

// ---- 3. byte-exact relay --------------------------------------------------------------------

/// A fixed sequence of frontend requests, each with the number of ReadyForQuery it earns
/// (0: a COPY FROM STDIN that waits for data after its CopyInResponse).
fn exact_script(int4pl: u32) -> Vec<(Vec<u8>, usize)> {
    use support::wire::*;
    let int = |v: i32| Param::Binary(v.to_be_bytes().to_vec());
    let q = |sql: &str| (query(sql), 1);
    let mut s = vec![
        q("SELECT 1 AS one, 'two'::text AS two; \
           SELECT g, repeat('x', g) FROM generate_series(1, 50) g"),
        q("SELECT 1/0"),
        q("SELECT 1; SELECT nosuchcol FROM pg_class; SELECT 2"),
        q("DO $$ BEGIN RAISE NOTICE 'hello %', 42; RAISE WARNING 'careful'; END $$"),
        q("DROP TABLE IF EXISTS no_such_table"),
        q(""),
        q("SELECT repeat('abcdefgh', 40000) AS big"),
        q("SELECT g, md5(g::text) FROM generate_series(1, 3000) g"),
        q("BEGIN"),
        q("SELECT 1/0"),
        q("SELECT 1"),
        q("ROLLBACK"),
        q("SET application_name = 'exact'"),
        q("RESET application_name"),
    ];
    // An extended batch: named statement, binary and text parameters, two portals, closes.
    s.push((
        [
            parse("s_add", "SELECT $1::int4 + $2::int4 AS sum", &[23, 23]),
            describe(b'S', "s_add"),
            bind("", "s_add", &[int(2), int(40)], true),
            describe(b'P', ""),
            execute("", 0),
            bind("p2", "s_add", &[Param::Text("7"), Param::Null], false),
            execute("p2", 0),
            close(b'P', "p2"),
            close(b'S', "s_add"),
            sync(),
        ]
        .concat(),
        1,
    ));
    // Flush mid-batch and a row limit.
    s.push((
        [
            parse("", "SELECT g FROM generate_series(1, 7) g", &[]),
            flush(),
            bind("", "", &[], false),
            execute("", 3),
            execute("", 0),
            sync(),
        ]
        .concat(),
        1,
    ));
    // An error in an extended batch.
    s.push((
        [
            parse("", "SELECT * FROM no_such_table", &[]),
            bind("", "", &[], false),
            execute("", 0),
            sync(),
        ]
        .concat(),
        1,
    ));
    s.push(q(
        "COPY (SELECT g, g * 2 FROM generate_series(1, 100) g) TO STDOUT",
    ));
    s.push((
        [
            query("COPY relay_copy FROM STDIN"),
            copy_data(b"1\tone\n2\ttwo\n"),
            copy_data(b"3\tthree\n"),
            copy_done(),
        ]
        .concat(),
        1,
    ));
    // COPY IN in a multi-statement Query, then the client gives up.
    s.push((query("COPY relay_copy FROM STDIN; SELECT 1"), 0));
    s.push((copy_fail("client says no"), 1));
    // Extended COPY IN with Sync right after Execute, as libpq and tokio-postgres send it.
    s.push((
        [
            parse("", "COPY relay_copy FROM STDIN", &[]),
            bind("", "", &[], false),
            execute("", 0),
            sync(),
        ]
        .concat(),
        0,
    ));
    s.push(([copy_data(b"4\tfour\n"), copy_done(), sync()].concat(), 1));
    // The same, all in one go.
    s.push((
        [
            parse("", "COPY relay_copy FROM STDIN", &[]),
            bind("", "", &[], false),
            execute("", 0),
            sync(),
            copy_data(b"5\tfive\n"),
            copy_done(),
            sync(),
        ]
        .concat(),
        1,
    ));
    s.push(q("DELETE FROM relay_copy"));
    s.push((
        function_call(
            int4pl,
            &[Some(&2i32.to_be_bytes()), Some(&3i32.to_be_bytes())],
        ),
        1,
    ));
    s.push((function_call(int4pl, &[Some(&1i32.to_be_bytes())]), 1));
    s.push(q("BEGIN; SELECT 1; COMMIT"));
    s
}

/// Runs the script on a fresh raw connection: each request alone, then all in one write.
async fn run_exact(port: u16, script: &[(Vec<u8>, usize)]) -> (Vec<u8>, Vec<u8>) {
    let mut w = Wire::connect(port, "postgres", "postgres").await;
    let mut one_by_one = Vec::new();
    for (req, zs) in script {
        w.send(req).await;
        if *zs > 0 {
            one_by_one.extend(w.raw_until_ready_n(*zs).await);
        } else {
            // COPY FROM STDIN waits for data: take its CopyInResponse before going on.
            one_by_one.extend(w.raw_until(b'G', 1).await);
        }
    }
    let all: Vec<u8> = script.iter().flat_map(|(r, _)| r.clone()).collect();
    let total: usize = script.iter().map(|(_, z)| z).sum();
    w.send(&all).await;
    let at_once = w.raw_until_ready_n(total).await;
    assert!(w.silent_for(Duration::from_millis(200)).await);
    (one_by_one, at_once)
}

fn same_bytes(what: &str, direct: &[u8], pooled: &[u8]) {
    if direct != pooled {
        let d = wire::split(direct);
        let p = wire::split(pooled);
        let first = d.iter().zip(&p).position(|(a, b)| a != b);
        panic!(
            "{what}: pgcorral's bytes differ from PostgreSQL's ({} vs {} bytes, {} vs {} \
             messages); first differing message #{first:?}: direct {:?} pooled {:?}",
            direct.len(),
            pooled.len(),
            d.len(),
            p.len(),
            first.map(|i| &d[i]),
            first.map(|i| &p[i]),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_is_byte_exact() {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE TABLE relay_copy (a int, b text)");
    let int4pl: u32 = pg
        .sql("postgres", "SELECT 'int4pl'::regproc::oid")
        .parse()
        .unwrap();
    let script = exact_script(int4pl);

    let (d1, d2) = run_exact(pg.port, &script).await;
    // Sanity: the script exercised what it should.
    let msgs = wire::split(&d1);
    let t = tags(&msgs);
    for (tag, what) in [
        ('E', "errors"),
        ('N', "notices"),
        ('I', "empty query"),
        ('S', "parameter status"),
        ('s', "portal suspended"),
        ('H', "copy out"),
        ('G', "copy in"),
        ('V', "function call"),
        ('t', "parameter description"),
    ] {
        assert!(t.contains(tag), "script lacks {what}: {t}");
    }
    assert_eq!(d1, d2, "PostgreSQL itself answers the same both ways");

    // (Statement mode refuses the script's BEGIN, so it cannot run it.)
    for mode in ["transaction", "session"] {
        let p = pooler(
            &pg,
            &format!("pool_mode = \"{mode}\"\ndefault_pool_size = 2"),
        )
        .await;
        let (p1, p2) = run_exact(p.port(), &script).await;
        same_bytes(&format!("{mode} mode, one request at a time"), &d1, &p1);
        same_bytes(&format!("{mode} mode, all requests in one write"), &d2, &p2);
    }
}

// ---- 4. COPY --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_and_out_round_trip() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let c = client(&p).await;
    let other = client(&p).await;
    c.batch_execute("CREATE TABLE t (id int PRIMARY KEY, name text, note text)")
        .await
        .unwrap();

    const ROWS: usize = 20_000;
    let mut input = Vec::new();
    for i in 1..=ROWS {
        let note = if i % 7 == 0 {
            "\\N".to_string()
        } else {
            format!("n\\t{}", i * 31 % 1000)
        };
        input.extend(format!("{i}\tname-{i:05}-{}\t{note}\n", "é".repeat(i % 5)).into_bytes());
    }
    let mut input_hash = 0xcbf2_9ce4_8422_2325u64;
    fnv(&mut input_hash, &input);

    let sink = c.copy_in("COPY t FROM STDIN").await.unwrap();
    futures_util::pin_mut!(sink);
    // Uneven chunks, some splitting rows, some bigger than tokio-postgres's 4 KiB buffer.
    let mut rest = &input[..];
    let mut k = 0;
    while !rest.is_empty() {
        let n = [100, 5000, 777, 65536, 1][k % 5].min(rest.len());
        sink.send(Bytes::copy_from_slice(&rest[..n])).await.unwrap();
        rest = &rest[n..];
        k += 1;
    }
    assert_eq!(sink.finish().await.unwrap(), ROWS as u64);
    // The COPY is over, so the only server is free for another client.
    assert_eq!(
        within(
            Duration::from_secs(5),
            "other client after COPY IN",
            backend_pid(&other)
        )
        .await,
        backend_pid(&c).await
    );

    let row = c
        .query_one(
            "SELECT count(*), sum(id)::int8, count(note), sum(length(name))::int8 FROM t",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), ROWS as i64);
    assert_eq!(row.get::<_, i64>(1), (ROWS * (ROWS + 1) / 2) as i64);
    assert_eq!(row.get::<_, i64>(2), (ROWS - ROWS / 7) as i64);
    let name_chars: i64 = (1..=ROWS).map(|i| 11 + (i % 5) as i64).sum();
    assert_eq!(row.get::<_, i64>(3), name_chars);

    // COPY OUT gives back exactly the bytes that went in.
    let stream = c
        .copy_out("COPY (SELECT * FROM t ORDER BY id) TO STDOUT")
        .await
        .unwrap();
    futures_util::pin_mut!(stream);
    let mut out_hash = 0xcbf2_9ce4_8422_2325u64;
    let mut out_len = 0usize;
    let mut out_rows = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        fnv(&mut out_hash, &chunk);
        out_len += chunk.len();
        out_rows += chunk.iter().filter(|&&b| b == b'\n').count();
    }
    assert_eq!(out_rows, ROWS);
    assert_eq!(out_len, input.len());
    assert_eq!(
        out_hash, input_hash,
        "COPY OUT checksum differs from COPY IN's"
    );

    // And the connection is fine afterwards.
    assert_eq!(
        c.query_one("SELECT 1", &[]).await.unwrap().get::<_, i32>(0),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_copy_in_releases_the_server() {
    // Clients that use the extended protocol send Sync right after Execute, before they know
    // the statement is a COPY FROM STDIN; PostgreSQL ignores Syncs in copy-in mode, so that
    // batch earns one ReadyForQuery, after CopyDone + Sync.
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    pg.sql("postgres", "CREATE TABLE xc (id int, name text)");
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    let mut other = Wire::connect(p.port(), "postgres", "postgres").await;

    // libpq / tokio-postgres style: wait for CopyInResponse, then send the data.
    w.send_all(&[
        wire::parse("", "COPY xc FROM STDIN", &[]),
        wire::bind("", "", &[], false),
        wire::describe(b'P', ""),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(w.recv().await);
    }
    assert_eq!(tags(&got), "12nG", "{got:?}");
    w.send_all(&[
        wire::copy_data(b"1\tone\n2\ttwo\n"),
        wire::copy_done(),
        wire::sync(),
    ])
    .await;
    let msgs = w.until_ready().await;
    assert_eq!(tags(&msgs), "CZ", "{msgs:?}");
    assert_eq!(msgs[0].text(), "COPY 2");
    assert!(w.silent_for(Duration::from_millis(200)).await);
    assert_eq!(
        rows_in_xc(&mut other, "other after extended COPY").await,
        "2"
    );

    // Everything in one write, with a Flush and an extra Sync after Execute.
    w.send_all(&[
        wire::parse("", "COPY xc FROM STDIN", &[]),
        wire::bind("", "", &[], false),
        wire::execute("", 0),
        wire::flush(),
        wire::sync(),
        wire::sync(),
        wire::copy_data(b"3\tthree\n"),
        wire::copy_done(),
        wire::sync(),
        wire::query("SELECT count(*) FROM xc"),
    ])
    .await;
    let msgs = w.until_ready_n(2).await;
    assert_eq!(tags(&msgs), "12GCZTDCZ", "{msgs:?}");
    assert_eq!(msgs[6].row(), [Some("3".into())]);
    assert!(w.silent_for(Duration::from_millis(200)).await);
    assert_eq!(
        rows_in_xc(&mut other, "other after pipelined COPY").await,
        "3"
    );

    // A COPY that fails on bad data: the server skips to the Sync after CopyDone.
    w.send_all(&[
        wire::parse("", "COPY xc FROM STDIN", &[]),
        wire::bind("", "", &[], false),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(w.recv().await);
    }
    assert_eq!(tags(&got), "12G", "{got:?}");
    w.send(&wire::copy_data(b"x\tbad\n")).await;
    let e = w.recv().await;
    assert_eq!((e.tag, e.code()), (b'E', "22P02".into()), "{e:?}");
    assert!(w.silent_for(Duration::from_millis(200)).await);
    w.send_all(&[
        wire::copy_data(b"4\tfour\n"),
        wire::copy_done(),
        wire::sync(),
    ])
    .await;
    let msgs = w.until_ready().await;
    assert_eq!(tags(&msgs), "Z", "{msgs:?}");
    assert_eq!(msgs[0].body, b"I");
    assert_eq!(rows_in_xc(&mut other, "other after failed COPY").await, "3");
    assert_eq!(w.scalar("SELECT 'w ok'").await, "w ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_bad_data_is_an_error_and_the_connection_survives() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let c = client(&p).await;
    c.batch_execute("CREATE TABLE ci (id int, name text)")
        .await
        .unwrap();

    let sink = c.copy_in("COPY ci FROM STDIN").await.unwrap();
    futures_util::pin_mut!(sink);
    sink.send(Bytes::from_static(b"1\tone\n2\ttwo\nnot-a-number\tthree\n"))
        .await
        .unwrap();
    let e = sink.finish().await.unwrap_err();
    assert_eq!(sqlstate(&e), "22P02", "{e}");

    assert_eq!(
        c.query_one("SELECT count(*) FROM ci", &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        0,
        "the failed COPY inserted nothing"
    );
    // The only server went back to the pool: another client can use it.
    let other = client(&p).await;
    assert_eq!(backend_pid(&other).await, backend_pid(&c).await);

    // CopyFail from the client: the server aborts the COPY with 57014.
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    w.send(&wire::query("COPY ci FROM STDIN")).await;
    assert_eq!(w.recv().await.tag, b'G');
    w.send_all(&[
        wire::copy_data(b"5\tfive\n"),
        wire::copy_fail("client gave up"),
    ])
    .await;
    let msgs = w.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    assert_eq!(msgs[0].code(), "57014");
    assert!(msgs[0].field(b'M').unwrap().contains("client gave up"));
    assert_eq!(w.scalar("SELECT count(*) FROM ci").await, "0");
    assert_eq!(backend_pid(&other).await, backend_pid(&c).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_error_with_data_still_in_flight_keeps_both_clients_in_frame() {
    // The server rejects a row and answers ErrorResponse + ReadyForQuery while the client is
    // still in the middle of sending a large CopyData. The rest of that message must not reach
    // whichever client gets the server next, and must not confuse this client.
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    pg.sql("postgres", "CREATE TABLE ce (id int, pad text)");
    let mut a = Wire::connect(p.port(), "postgres", "postgres").await;
    let mut b = Wire::connect(p.port(), "postgres", "postgres").await;

    a.send(&wire::query("COPY ce FROM STDIN")).await;
    assert_eq!(a.recv().await.tag, b'G');
    // One CopyData with the bad row first, then a big second CopyData of which only the first
    // half is sent for now.
    let mut big = Vec::new();
    while big.len() < 200_000 {
        big.extend_from_slice(b"7\tpadpadpadpadpadpadpadpadpadpadpadpad\n");
    }
    let big = wire::copy_data(&big);
    let half = big.len() / 2;
    a.send_all(&[wire::copy_data(b"oops\tbad\n"), big[..half].to_vec()])
        .await;
    let msgs = a.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    assert_eq!(msgs[0].code(), "22P02");
    assert_eq!(msgs[1].body, b"I");
    tokio::time::sleep(Duration::from_millis(200)).await;

    // b asks for the only server meanwhile (it may have to wait for a's message to end).
    let b_task = tokio::spawn(async move {
        let v = b.scalar("SELECT 'b ok'").await;
        (b, v)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    // a finishes its stray message and a CopyDone, then goes on normally.
    a.send_all(&[big[half..].to_vec(), wire::copy_done()]).await;
    let msgs = within(
        Duration::from_secs(5),
        "a's query",
        a.simple("SELECT 'a ok'"),
    )
    .await;
    assert_eq!(tags(&msgs), "TDCZ", "{msgs:?}");
    assert_eq!(msgs[1].row(), [Some("a ok".into())]);
    let (mut b, v) = within(Duration::from_secs(5), "b's query", b_task)
        .await
        .unwrap();
    assert_eq!(v, "b ok");
    assert_eq!(
        within(
            Duration::from_secs(5),
            "b again",
            b.scalar("SELECT count(*) FROM ce")
        )
        .await,
        "0"
    );
    assert_eq!(
        within(
            Duration::from_secs(5),
            "a again",
            a.scalar("SELECT 'a again'")
        )
        .await,
        "a again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_leaving_mid_copy_data_after_an_error_does_not_poison_the_server() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    pg.sql("postgres", "CREATE TABLE cg (id int)");
    let mut a = Wire::connect(p.port(), "postgres", "postgres").await;
    let mut b = Wire::connect(p.port(), "postgres", "postgres").await;
    a.send(&wire::query("COPY cg FROM STDIN")).await;
    assert_eq!(a.recv().await.tag, b'G');
    let big = wire::copy_data(&b"1\n".repeat(50_000));
    a.send_all(&[wire::copy_data(b"bad\n"), big[..big.len() / 3].to_vec()])
        .await;
    let msgs = a.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    drop(a);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let msgs = within(
        Duration::from_secs(5),
        "b's query",
        b.simple("SELECT 'b ok'"),
    )
    .await;
    assert_eq!(tags(&msgs), "TDCZ", "{msgs:?}");
    assert_eq!(msgs[1].row(), [Some("b ok".into())]);
    assert_eq!(b.scalar("SELECT count(*) FROM cg").await, "0");
}

/// Bytes per generated COPY row in the big test.
const BIG_ROW: usize = 1024;

fn big_row(id: u64, pad: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("{id:012}\t").as_bytes());
    out.extend_from_slice(pad);
    out.push(b'\n');
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_copy_streams_in_bounded_memory() {
    let big: u64 = std::env::var("PGCORRAL_TEST_COPY_BYTES")
        .ok()
        .map(|v| v.parse().expect("PGCORRAL_TEST_COPY_BYTES is a byte count"))
        .unwrap_or(1 << 30);
    let rows = big.div_ceil(BIG_ROW as u64).max(1);
    let pg = Postgres::start();
    pg.sql(
        "postgres",
        "CREATE UNLOGGED TABLE big (id text, pad text) WITH (autovacuum_enabled = off)",
    );
    let proc = PoolerProcess::start(&cfg(&pg, "log_level = \"warn\""));
    let c = connect(proc.port, "postgres", None, "postgres")
        .await
        .unwrap();
    let pad: Vec<u8> = (0..BIG_ROW - 14).map(|i| b'a' + (i % 26) as u8).collect();

    let start = Instant::now();
    let sink = c.copy_in("COPY big FROM STDIN").await.unwrap();
    futures_util::pin_mut!(sink);
    const PER_CHUNK: u64 = 256; // 256 KiB CopyData messages, made as they are sent
    let mut id = 1;
    while id <= rows {
        let mut chunk = Vec::with_capacity(PER_CHUNK as usize * BIG_ROW);
        while id <= rows && chunk.len() < PER_CHUNK as usize * BIG_ROW {
            big_row(id, &pad, &mut chunk);
            id += 1;
        }
        sink.feed(Bytes::from(chunk)).await.unwrap();
    }
    assert_eq!(sink.finish().await.unwrap(), rows);
    let copy_in = start.elapsed();

    let start = Instant::now();
    let stream = c.copy_out("COPY big TO STDOUT").await.unwrap();
    futures_util::pin_mut!(stream);
    let (mut bytes, mut n, mut sum, mut sum_sq) = (0u64, 0u64, 0u128, 0u128);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        bytes += chunk.len() as u64;
        // One CopyData per row.
        assert_eq!(chunk.len(), BIG_ROW, "row {n}");
        let id: u64 = std::str::from_utf8(&chunk[..12]).unwrap().parse().unwrap();
        assert!((1..=rows).contains(&id));
        assert_eq!(chunk[12], b'\t');
        assert!(chunk[13..BIG_ROW - 1] == pad[..], "row {id} corrupted");
        n += 1;
        sum += id as u128;
        sum_sq += (id as u128) * (id as u128);
    }
    let copy_out = start.elapsed();
    assert_eq!(n, rows);
    assert_eq!(bytes, rows * BIG_ROW as u64);
    let r = rows as u128;
    assert_eq!(sum, r * (r + 1) / 2, "ids differ");
    assert_eq!(sum_sq, r * (r + 1) * (2 * r + 1) / 6, "ids differ");

    let status = std::fs::read_to_string(format!("/proc/{}/status", proc.child.id())).unwrap();
    let hwm_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    eprintln!(
        "big COPY: {} MiB in {copy_in:.1?}, out in {copy_out:.1?}; pgcorral peak RSS {} KiB",
        bytes >> 20,
        hwm_kib
    );
    assert!(
        hwm_kib < 64 * 1024,
        "pgcorral's peak RSS {hwm_kib} KiB is over 64 MiB after streaming {bytes} bytes"
    );
}

// ---- 5. asynchronous messages, FunctionCall, Terminate -------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notice_reaches_the_client() {
    let pg = Postgres::start();
    let p = pooler(&pg, "").await;
    let (c, mut rx) = client_with_messages(p.port()).await;
    c.batch_execute("DO $$ BEGIN RAISE NOTICE 'hi'; END $$")
        .await
        .unwrap();
    let m = within(Duration::from_secs(5), "notice", rx.recv())
        .await
        .unwrap();
    match m {
        AsyncMessage::Notice(n) => {
            assert_eq!(n.message(), "hi");
            assert_eq!(n.severity(), "NOTICE");
            assert_eq!(n.code().code(), "00000");
        }
        other => panic!("expected a notice, got {other:?}"),
    }
    // A notice from an ordinary statement too, and the statement still completes.
    c.batch_execute("DROP TABLE IF EXISTS not_there")
        .await
        .unwrap();
    match within(Duration::from_secs(5), "notice", rx.recv())
        .await
        .unwrap()
    {
        AsyncMessage::Notice(n) => {
            assert_eq!(n.code().code(), "00000");
            assert!(n.message().contains("not_there"), "{}", n.message());
        }
        other => panic!("expected a notice, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notification_reaches_listener_in_session_mode() {
    let pg = Postgres::start();
    let p = pooler(&pg, "pool_mode = \"session\"").await;
    let (listener, mut rx) = client_with_messages(p.port()).await;
    listener.batch_execute("LISTEN chan_one").await.unwrap();
    let notifier = client(&p).await;
    let notifier_pid = backend_pid(&notifier).await;
    assert_ne!(notifier_pid, backend_pid(&listener).await);

    notifier
        .batch_execute("NOTIFY chan_one, 'payload one'")
        .await
        .unwrap();
    // The listener is idle: the notification arrives without it sending anything.
    match within(Duration::from_secs(5), "notification", rx.recv())
        .await
        .unwrap()
    {
        AsyncMessage::Notification(n) => {
            assert_eq!(n.channel(), "chan_one");
            assert_eq!(n.payload(), "payload one");
            assert_eq!(n.process_id(), notifier_pid);
        }
        other => panic!("expected a notification, got {other:?}"),
    }
    // One sent from inside a transaction arrives at COMMIT.
    notifier
        .batch_execute("BEGIN; SELECT pg_notify('chan_one', 'two'); COMMIT")
        .await
        .unwrap();
    match within(Duration::from_secs(5), "notification", rx.recv())
        .await
        .unwrap()
    {
        AsyncMessage::Notification(n) => {
            assert_eq!((n.channel(), n.payload()), ("chan_one", "two"));
            assert_eq!(n.process_id(), notifier_pid);
        }
        other => panic!("expected a notification, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_reports_parameter_status() {
    let pg = Postgres::start();
    let p = pooler(&pg, "").await;
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    let msgs = w.simple("SET application_name = 'x'").await;
    assert_eq!(msgs.last().unwrap().tag, b'Z');
    let params: Vec<_> = msgs
        .iter()
        .filter(|m| m.tag == b'S')
        .map(Msg::parameter)
        .collect();
    assert_eq!(
        params,
        [("application_name".to_string(), "x".to_string())],
        "{msgs:?}"
    );
    assert!(msgs.iter().any(|m| m.tag == b'C' && m.text() == "SET"));
    let msgs = w.simple("SET DateStyle = 'German'").await;
    let params: Vec<_> = msgs
        .iter()
        .filter(|m| m.tag == b'S')
        .map(Msg::parameter)
        .collect();
    assert_eq!(
        params,
        [("DateStyle".to_string(), "German, DMY".to_string())],
        "{msgs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_call_int4pl() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    let oid: u32 = w
        .scalar("SELECT 'int4pl'::regproc::oid")
        .await
        .parse()
        .unwrap();

    w.send(&wire::function_call(
        oid,
        &[Some(&i32_be(20)), Some(&i32_be(22))],
    ))
    .await;
    let msgs = w.until_ready().await;
    assert_eq!(tags(&msgs), "VZ", "{msgs:?}");
    assert_eq!(msgs[0].body, [0, 0, 0, 4, 0, 0, 0, 42]);
    assert_eq!(msgs[1].body, b"I");

    // A NULL argument to a strict function gives a NULL result (length -1).
    w.send(&wire::function_call(oid, &[Some(&i32_be(1)), None]))
        .await;
    let msgs = w.until_ready().await;
    assert_eq!(tags(&msgs), "VZ", "{msgs:?}");
    assert_eq!(msgs[0].body, [0xff, 0xff, 0xff, 0xff]);

    // A bad call is an error, and the connection goes on.
    w.send(&wire::function_call(oid, &[Some(&i32_be(1))])).await;
    let msgs = w.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    assert_eq!(msgs[0].code(), "08P01");
    w.send(&wire::function_call(
        oid,
        &[Some(&i32_be(i32::MAX)), Some(&i32_be(1))],
    ))
    .await;
    let msgs = w.until_ready().await;
    assert_eq!(
        (tags(&msgs).as_str(), msgs[0].code()),
        ("EZ", "22003".into())
    );
    assert_eq!(w.scalar("SELECT 'still fine'").await, "still fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_is_not_passed_to_the_server() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    let first: i32 = w.scalar("SELECT pg_backend_pid()").await.parse().unwrap();
    w.send(&wire::terminate()).await;
    within(
        Duration::from_secs(5),
        "close after Terminate",
        w.expect_closed(),
    )
    .await;

    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    assert_eq!(w.scalar("SELECT pg_backend_pid()").await, first.to_string());
    // Terminate in the middle of a transaction: the server is rolled back and reused.
    w.simple("BEGIN").await;
    w.simple("CREATE TABLE left_behind (x int)").await;
    w.send(&wire::terminate()).await;
    within(
        Duration::from_secs(5),
        "close after Terminate",
        w.expect_closed(),
    )
    .await;

    let c = client(&p).await;
    assert_eq!(backend_pid(&c).await, first);
    let e = c
        .simple_query("SELECT * FROM left_behind")
        .await
        .unwrap_err();
    assert_eq!(
        sqlstate(&e),
        "42P01",
        "the open transaction was rolled back"
    );
    // tokio-postgres sends Terminate when dropped.
    drop(c);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let c = client(&p).await;
    assert_eq!(backend_pid(&c).await, first);
    // The backend never went away.
    let d = direct(&pg).await;
    let n: i64 = d
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
            &[&first],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

// ---- 6. pool modes with psql and pgbench ---------------------------------------------------

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
