//! Asynchronous messages (notices, notifications, ParameterStatus), FunctionCall and Terminate
//! through pgcorral against a real PostgreSQL.

mod support;

use std::time::Duration;

use tokio_postgres::AsyncMessage;

use support::protocol::*;
use support::wire::{tags, Msg, Wire};
use support::*;

// ---- 1. asynchronous messages, FunctionCall, Terminate -------------------------------------

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
