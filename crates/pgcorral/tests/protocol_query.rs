//! The simple and extended query protocol through pgcorral against a real PostgreSQL: result
//! sets, errors in and out of transactions, pipelines, row limits and portals, Flush, and a
//! script of every message type relayed byte for byte as PostgreSQL sends it.

mod support;

use std::time::Duration;

use futures_util::future::join_all;
use tokio_postgres::types::Type;
use tokio_postgres::SimpleQueryMessage;

use support::protocol::*;
use support::wire::{tags, Param, Wire};
use support::*;

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
