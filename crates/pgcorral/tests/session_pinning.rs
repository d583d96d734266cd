//! Server-bound state in transaction mode against a real PostgreSQL: advisory locks, temp
//! tables, WITH HOLD cursors and SQL PREPARE in a multi-statement query pin a client to its
//! server until released and never reach the next client; `session_pinning = "refuse"`;
//! and a pgbench run of bench/session_state.sql.
//!
//! Pools of one server force clients to take turns on the same backend (a leak of one client's
//! state shows up in the next one); `server_lifetime = 1` gives every transaction a brand-new
//! backend (a setting that is not replayed shows up as lost).

mod support;

use std::time::Duration;

use pgwire::backend;
use support::raw::Raw;
use tokio_postgres::SimpleQueryMessage;

use support::session::*;
use support::*;

// ---- 1. server-bound state pins the client --------------------------------------------------

/// What a server carries that could leak: temp relations, SQL prepared statements, cursors,
/// LISTEN channels, advisory locks held by this backend, and search_path.
const LEFTOVERS: &str = "SELECT \
    (SELECT count(*) FROM pg_catalog.pg_class WHERE relnamespace = pg_catalog.pg_my_temp_schema()), \
    (SELECT count(*) FROM pg_catalog.pg_prepared_statements WHERE name NOT LIKE 'pgcorral%'), \
    (SELECT count(*) FROM pg_catalog.pg_cursors), \
    (SELECT count(*) FROM pg_catalog.pg_listening_channels()), \
    (SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' \
        AND pid = pg_catalog.pg_backend_pid()), \
    current_setting('search_path')";

fn clean_server() -> Vec<String> {
    strings(&["0", "0", "0", "0", "0", "\"$user\", public"])
}

/// One kind of server-bound state: what the log calls it, how to create it, a query that only
/// works (with the expected answer, given the round) on the server that has it, and how to
/// release it.
struct Pin {
    kind: &'static str,
    create: &'static str,
    check: &'static str,
    expect: fn(usize) -> String,
    release: &'static str,
}

// LISTEN pins only where the database's hub cannot take it over (tests/listen_multiplex.rs).
const PINS: [Pin; 4] = [
    Pin {
        kind: "session advisory lock",
        create: "SELECT pg_advisory_lock(4242)",
        check:
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
        expect: |_| "1".into(),
        release: "SELECT pg_advisory_unlock(4242)",
    },
    Pin {
        kind: "temporary table",
        create: "CREATE TEMP TABLE pin_t AS SELECT 7 AS a",
        check: "SELECT a FROM pin_t",
        expect: |_| "7".into(),
        release: "DROP TABLE pin_t",
    },
    Pin {
        kind: "WITH HOLD cursor",
        create: "DECLARE pin_c CURSOR WITH HOLD FOR SELECT g FROM generate_series(1, 1000) g",
        check: "FETCH 1 FROM pin_c",
        expect: |round| (round + 1).to_string(),
        release: "CLOSE pin_c",
    },
    Pin {
        kind: "SQL PREPARE",
        // A PREPARE of its own is pgcorral's to move between servers; inside a
        // multi-statement query it is left to the server, and pins.
        create: "SELECT 1; PREPARE pin_p AS SELECT 42",
        check: "EXECUTE pin_p",
        expect: |_| "42".into(),
        release: "DEALLOCATE pin_p",
    },
];

/// `BEGIN` and the backend pid, as one request; the server stays with the client until COMMIT.
const BEGIN_PID: &str = "BEGIN; SELECT pg_backend_pid()";

fn first_pid(msgs: &[SimpleQueryMessage]) -> i32 {
    simple_rows(msgs)[0][0].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_bound_state_pins_the_client_until_released() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start_logging(&cfg(&pg, "default_pool_size = 2"), "info");
    let port = pooler.port;
    let o1 = connect(port, "postgres", None, "postgres").await.unwrap();
    let o2 = connect(port, "postgres", None, "postgres").await.unwrap();

    for pin in &PINS {
        let kind = pin.kind;
        let (p, _notes) = client_with_messages(port).await;
        exec(&p, pin.create).await;
        let pinned = backend_pid(&p).await;
        for round in 0..5 {
            // Others run on the other server and see none of it.
            let other = backend_pid(&o1).await;
            assert_ne!(
                other, pinned,
                "{kind}: o1 got the pinned server (round {round})"
            );
            assert_eq!(row(&o2, LEFTOVERS).await, clean_server(), "{kind}: o2");
            assert_eq!(
                backend_pid(&p).await,
                pinned,
                "{kind}: pinned client moved (round {round})"
            );
            assert_eq!(
                one(&p, pin.check).await,
                (pin.expect)(round),
                "{kind}: state on the pinned server (round {round})"
            );
        }
        // The pinned server is not in the pool: with o1 holding the other one, o2 waits...
        let held = first_pid(&o1.simple_query(BEGIN_PID).await.unwrap());
        assert_ne!(held, pinned);
        {
            let waiting = o2.simple_query(BEGIN_PID);
            tokio::pin!(waiting);
            assert!(
                tokio::time::timeout(Duration::from_millis(500), &mut waiting)
                    .await
                    .is_err(),
                "{kind}: o2 got a server while one was pinned and o1 held the other"
            );
            // ...while the pinned client goes on, needing no server from the pool.
            assert_eq!(backend_pid(&p).await, pinned, "{kind}");
            exec(&o1, "COMMIT").await;
            let got = within(Duration::from_secs(5), "o2 after o1's COMMIT", waiting)
                .await
                .unwrap();
            assert_eq!(first_pid(&got), held, "{kind}");
        }
        exec(&o2, "COMMIT").await;

        // Released: the client is unpinned and its server back in the pool.
        exec(&p, pin.release).await;
        let x = first_pid(&o1.simple_query(BEGIN_PID).await.unwrap());
        let y = first_pid(
            &within(
                Duration::from_secs(5),
                &format!("{kind}: a second server after release"),
                o2.simple_query(BEGIN_PID),
            )
            .await
            .unwrap(),
        );
        let mut got = [x, y];
        got.sort();
        let mut want = [pinned, held];
        want.sort();
        assert_eq!(got, want, "{kind}: both servers in the pool again");
        let (on_pinned, on_other) = if x == pinned { (&o1, &o2) } else { (&o2, &o1) };
        assert_eq!(
            row(on_pinned, LEFTOVERS).await,
            clean_server(),
            "{kind}: released"
        );
        exec(on_other, "COMMIT").await;
        // The formerly pinned client now takes whatever server is free.
        assert_eq!(
            backend_pid(&p).await,
            held,
            "{kind}: unpinned client got the free server"
        );
        exec(on_pinned, "COMMIT").await;
    }

    let log = pooler.log();
    for pin in &PINS {
        assert!(
            log.lines()
                .any(|l| l.contains("pinned") && l.contains(&format!("\"{}\"", pin.kind))),
            "the log does not say the client was pinned for {:?}:\n{log}",
            pin.kind
        );
    }
    assert!(
        log.lines().filter(|l| l.contains("unpinned")).count() >= PINS.len(),
        "the log does not say clients were unpinned:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_until_every_kind_is_released_or_discarded() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 2")).await;
    let p = pooler.connect("postgres", None, "postgres").await;
    let o = pooler.connect("postgres", None, "postgres").await;
    for pin in &PINS {
        exec(&p, pin.create).await;
    }
    let pinned = backend_pid(&p).await;
    // Releasing all but one keeps the client pinned.
    for pin in &PINS[..PINS.len() - 1] {
        exec(&p, pin.release).await;
        let held = first_pid(&o.simple_query(BEGIN_PID).await.unwrap());
        assert_ne!(held, pinned, "after releasing {}", pin.kind);
        assert_eq!(
            backend_pid(&p).await,
            pinned,
            "after releasing {}",
            pin.kind
        );
        exec(&o, "COMMIT").await;
    }
    // DISCARD ALL releases everything at once.
    for pin in &PINS[..PINS.len() - 1] {
        exec(&p, pin.create).await;
    }
    exec(&p, "DISCARD ALL").await;
    let held = first_pid(&o.simple_query(BEGIN_PID).await.unwrap());
    let now = within(
        Duration::from_secs(5),
        "unpinned after DISCARD ALL",
        backend_pid(&p),
    )
    .await;
    assert_ne!(now, held);
    exec(&o, "COMMIT").await;
    assert_eq!(row(&p, LEFTOVERS).await, clean_server());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_state_never_reaches_the_next_client() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 2")).await;
    let o1 = pooler.connect("postgres", None, "postgres").await;
    let o2 = pooler.connect("postgres", None, "postgres").await;
    for round in 0..2 {
        let p = pooler.connect("postgres", None, "postgres").await;
        exec(&p, "SET search_path = leaked, public").await;
        for pin in &PINS {
            exec(&p, pin.create).await;
        }
        let pinned = backend_pid(&p).await;
        drop(p);
        // Both servers, one of them the pinned client's, once it has been cleaned.
        let mut seen = Vec::new();
        let mut found = false;
        for _ in 0..50 {
            let x = first_pid(&o1.simple_query(BEGIN_PID).await.unwrap());
            let y = first_pid(&o2.simple_query(BEGIN_PID).await.unwrap());
            for (c, pid) in [(&o1, x), (&o2, y)] {
                assert_eq!(
                    row(c, LEFTOVERS).await,
                    clean_server(),
                    "round {round}: a client on server {pid} after the pinned client {pinned} left"
                );
            }
            exec(&o1, "COMMIT").await;
            exec(&o2, "COMMIT").await;
            seen.push((x, y));
            if x == pinned || y == pinned {
                found = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            found,
            "round {round}: the pinned client's server {pinned} never came back to the pool \
             (it should be cleaned with DISCARD ALL and reused): {seen:?}"
        );
        // Its advisory lock is free for anyone.
        assert_eq!(one(&o1, "SELECT pg_try_advisory_lock(4242)").await, "t");
        assert_eq!(one(&o1, "SELECT pg_advisory_unlock(4242)").await, "t");
    }
}

// ---- 2. session_pinning = "refuse" ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_mode_answers_pinning_statements_with_0a000() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(
        &pg,
        "default_pool_size = 2\nsession_pinning = \"refuse\"",
    ))
    .await;
    let c = pooler.connect("postgres", None, "postgres").await;
    for sql in [
        "BEGIN; LISTEN x; COMMIT",
        "SELECT pg_advisory_lock(4242)",
        "CREATE TEMP TABLE refused_t (a int)",
        "DECLARE refused_c CURSOR WITH HOLD FOR SELECT 1",
        "SELECT 1; PREPARE refused_p AS SELECT 1",
    ] {
        let e = try_rows(&c, sql)
            .await
            .expect_err(&format!("{sql:?} was allowed"));
        assert_eq!(sqlstate(&e), "0A000", "{sql:?}: {e}");
        assert_eq!(
            one(&c, "SELECT 1").await,
            "1",
            "client usable after {sql:?}"
        );
    }
    // Nothing of it reached a server.
    let d = direct(&pg).await;
    assert_eq!(
        one(
            &d,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
        )
        .await,
        "0"
    );
    let e = try_rows(&c, "EXECUTE refused_p").await.unwrap_err();
    assert_eq!(sqlstate(&e), "26000", "{e}");
    assert_eq!(row(&c, LEFTOVERS).await, clean_server());
    // A LISTEN of its own pins nothing (the hub serves it): allowed.
    exec(&c, "LISTEN x").await;
    assert_eq!(row(&c, LEFTOVERS).await, clean_server());
    exec(&c, "UNLISTEN x").await;

    // In a transaction: refused too, and the client can roll back and go on.
    exec(&c, "BEGIN").await;
    let e = try_rows(&c, "LISTEN x").await.unwrap_err();
    assert_eq!(sqlstate(&e), "0A000", "{e}");
    exec(&c, "ROLLBACK").await;
    assert_eq!(one(&c, "SELECT 1").await, "1");

    // Plain session settings are still allowed and followed.
    exec(&c, "SET search_path = refuse_ok").await;
    let other = pooler.connect("postgres", None, "postgres").await;
    exec(&other, "BEGIN").await;
    assert_eq!(one(&c, "SHOW search_path").await, "refuse_ok");
    exec(&other, "COMMIT").await;
    assert_eq!(one(&other, "SHOW search_path").await, "\"$user\", public");
}

/// A refused Query that arrives in several reads is refused all the same: nothing of it
/// reaches a server (it was forwarded, and ran, when its start came before its text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_mode_refuses_a_query_split_across_writes() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(
        &pg,
        "default_pool_size = 1\nsession_pinning = \"refuse\"",
    ))
    .await;
    let mut c = Raw::login(pooler.port(), "postgres", "postgres")
        .await
        .unwrap();
    c.stream.set_nodelay(true).unwrap();
    let mut q = bytes::BytesMut::new();
    pgwire::encode::query(&mut q, "CREATE TEMP TABLE split_x (a int)");
    // In writes of 3 and 1 bytes, as the fuzzer's reads.
    let mut at = 0;
    for n in [3, 1].into_iter().cycle() {
        let end = (at + n).min(q.len());
        c.send(&q[at..end]).await;
        at = end;
        if at == q.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let mut error = None;
    loop {
        let (tag, body) = c.read().await.expect("an answer");
        match tag {
            backend::ERROR_RESPONSE => error = backend::ErrorFields::parse(&body),
            backend::READY_FOR_QUERY => break,
            other => panic!("the refused CREATE TEMP got {:?}", other as char),
        }
    }
    let e = error.expect("an ErrorResponse");
    assert_eq!(e.code, "0A000", "{e:?}");
    assert_eq!(c.query("SELECT 1").await.unwrap(), [[Some("1".into())]]);
    let d = direct(&pg).await;
    assert_eq!(
        one(
            &d,
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CREATE TEMP%'"
        )
        .await,
        "0"
    );
}

// ---- 3. pgbench: bench/session_state.sql ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_session_state_script_has_no_failures() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 5")).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/session_state.sql");
    let mut c = pgbench_cmd(pooler.port(), "postgres", "postgres", None);
    c.args([
        "-n",
        "-c",
        "50",
        "-j",
        "2",
        "-T",
        "10",
        "--protocol",
        "simple",
        "-f",
        script,
    ]);
    let out = run_cmd(c).await;
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "pgbench failed:\n{o}\n{e}");
    assert!(!e.contains("aborted"), "{o}\n{e}");
    let processed =
        pgbench_transactions(&o).unwrap_or_else(|| panic!("no transaction count in:\n{o}"));
    assert!(processed > 50, "{o}");
    assert!(
        o.contains("number of failed transactions: 0 "),
        "failures:\n{o}\n{e}"
    );
}
