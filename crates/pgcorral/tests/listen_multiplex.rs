//! LISTEN/NOTIFY in transaction mode against a real PostgreSQL: clients' LISTENs answered by
//! pgcorral and served by one listening connection per database, so that listening clients
//! hold no server; notifications reach exactly their channel's listeners, in order, between
//! their transactions, with the sender's pid; a server restart ends the listening clients as
//! it would end their own connections; session mode is unchanged.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_postgres::{AsyncMessage, Client};

use support::session::*;
use support::*;

/// A notification or how the connection ended, as the client saw them.
#[derive(Debug)]
enum Seen {
    Note {
        pid: i32,
        channel: String,
        payload: String,
    },
    Ended(String),
}

/// A client through `port` whose notifications (and the error that ends it) arrive on the
/// receiver.
async fn listening_client(port: u16) -> (Client, UnboundedReceiver<Seen>) {
    let (client, mut conn) = pg_config(port, "postgres", "postgres")
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    let _ = tx.send(Seen::Note {
                        pid: n.process_id(),
                        channel: n.channel().to_string(),
                        payload: n.payload().to_string(),
                    });
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    let _ = tx.send(Seen::Ended(sqlstate(&e)));
                    return;
                }
                None => {
                    let _ = tx.send(Seen::Ended(String::new()));
                    return;
                }
            }
        }
    });
    (client, rx)
}

/// The next thing `rx` sees, within 10 s.
async fn next_seen(rx: &mut UnboundedReceiver<Seen>) -> Seen {
    within(Duration::from_secs(10), "a notification", rx.recv())
        .await
        .expect("client task ended")
}

/// The next notification's payload on `channel`.
async fn next_payload(rx: &mut UnboundedReceiver<Seen>, channel: &str) -> String {
    match next_seen(rx).await {
        Seen::Note {
            channel: c,
            payload,
            ..
        } => {
            assert_eq!(c, channel);
            payload
        }
        other => panic!("expected a notification on {channel}, got {other:?}"),
    }
}

/// Nothing arrives on `rx` within `wait`.
async fn nothing(rx: &mut UnboundedReceiver<Seen>, wait: Duration, what: &str) {
    tokio::time::sleep(wait).await;
    if let Ok(m) = rx.try_recv() {
        panic!("{what}: got {m:?}");
    }
}

fn tx_cfg(pg: &Postgres, general: &str) -> String {
    cfg(pg, &format!("pool_mode = \"transaction\"\n{general}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_listeners_share_one_server_while_pgbench_runs() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start(&tx_cfg(
        &pg,
        "default_pool_size = 5\nmax_client_conn = 2000",
    ));
    let port = pooler.port;
    pgbench_init(port).await;
    let peak = Peak::watch(
        &pg,
        "datname = 'postgres'".into(),
        Duration::from_millis(20),
    )
    .await;

    // 1,000 clients listening on 10 channels through a pool of 5.
    let mut listeners = Vec::new();
    for chunk in 0..20 {
        let batch = (0..50).map(|i| {
            let n = chunk * 50 + i;
            async move {
                let (c, rx) = listening_client(port).await;
                c.batch_execute(&format!("LISTEN ch{}", n % 10))
                    .await
                    .unwrap();
                (n % 10, c, rx)
            }
        });
        listeners.extend(join_all(batch).await);
    }

    // pgbench through the same pool meanwhile.
    let mut bench = pgbench_cmd(port, "postgres", "postgres", None);
    bench.args(["-n", "-c", "8", "-j", "2", "-T", "4"]);
    let bench = tokio::spawn(run_cmd(bench));

    // 200 notifications, 20 per channel, from one sender; each with its server's pid.
    let sender = connect(port, "postgres", None, "postgres").await.unwrap();
    let mut sent: HashMap<usize, Vec<(i32, String)>> = HashMap::new();
    for k in 0..200 {
        let ch = k % 10;
        let payload = format!("n{k}");
        let msgs = sender
            .simple_query(&format!(
                "SELECT pg_backend_pid(); NOTIFY ch{ch}, '{payload}'"
            ))
            .await
            .unwrap();
        let pid: i32 = simple_rows(&msgs)[0][0].parse().unwrap();
        sent.entry(ch).or_default().push((pid, payload));
    }

    // Every listener gets exactly its channel's, in order, with the sender's pid.
    for (ch, _c, rx) in &mut listeners {
        for (pid, payload) in &sent[ch] {
            match next_seen(rx).await {
                Seen::Note {
                    pid: p,
                    channel,
                    payload: got,
                } => {
                    assert_eq!(
                        (channel.as_str(), got.as_str(), p),
                        (format!("ch{ch}").as_str(), payload.as_str(), *pid)
                    );
                }
                other => panic!("listener on ch{ch}: {other:?}"),
            }
        }
    }
    let o = bench.await.unwrap();
    assert_pgbench_ok("pgbench beside 1,000 listeners", &o);
    for (ch, _c, rx) in &mut listeners {
        if let Ok(m) = rx.try_recv() {
            panic!("listener on ch{ch} got more: {m:?}");
        }
    }
    let most = peak.finish().await;
    assert!(
        most <= 6,
        "server connections peaked at {most}: more than the pool of 5 plus the listening one"
    );
    // Every listening client still works.
    assert_eq!(one(&listeners[999].1, "SELECT 1").await, "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_come_between_transactions_as_postgres_sends_them() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start(&tx_cfg(&pg, "default_pool_size = 2"));
    let port = pooler.port;
    let (a, mut rx) = listening_client(port).await;
    let b = connect(port, "postgres", None, "postgres").await.unwrap();
    exec(&a, "LISTEN x").await;
    // LISTEN twice: one delivery per NOTIFY.
    exec(&a, "LISTEN x").await;
    // No server held by the listener: pg_listening_channels() of any server is empty.
    assert_eq!(
        one(&b, "SELECT count(*) FROM pg_listening_channels()").await,
        "0"
    );

    // NOTIFY in a transaction: sent at COMMIT, lost at ROLLBACK.
    exec(&b, "BEGIN").await;
    exec(&b, "NOTIFY x, 'in'").await;
    nothing(&mut rx, Duration::from_millis(300), "before COMMIT").await;
    exec(&b, "COMMIT").await;
    assert_eq!(next_payload(&mut rx, "x").await, "in");
    exec(&b, "BEGIN; NOTIFY x, 'lost'; ROLLBACK").await;
    exec(&b, "SELECT pg_notify('x', 'kept')").await;
    assert_eq!(next_payload(&mut rx, "x").await, "kept");

    // The listener in a transaction gets nothing until it ends.
    exec(&a, "BEGIN").await;
    exec(&b, "NOTIFY x, 'while'").await;
    nothing(&mut rx, Duration::from_millis(300), "inside a transaction").await;
    assert_eq!(one(&a, "SELECT 1").await, "1");
    nothing(&mut rx, Duration::from_millis(100), "inside a transaction").await;
    exec(&a, "COMMIT").await;
    assert_eq!(next_payload(&mut rx, "x").await, "while");

    // Its own notification reaches it too (with its server's pid).
    exec(&a, "NOTIFY x, 'self'").await;
    assert_eq!(next_payload(&mut rx, "x").await, "self");

    // Many in a row: none lost, in order.
    for i in 0..500 {
        exec(&b, &format!("NOTIFY x, '{i}'")).await;
    }
    for i in 0..500 {
        assert_eq!(next_payload(&mut rx, "x").await, i.to_string());
    }

    // UNLISTEN, UNLISTEN *, DISCARD ALL end it.
    exec(&a, "UNLISTEN x").await;
    exec(&b, "NOTIFY x, 'gone'").await;
    nothing(&mut rx, Duration::from_millis(300), "after UNLISTEN").await;
    exec(&a, "LISTEN x").await;
    exec(&a, "LISTEN y").await;
    exec(&a, "UNLISTEN *").await;
    exec(&b, "NOTIFY x, 'gone'; NOTIFY y, 'gone'").await;
    nothing(&mut rx, Duration::from_millis(300), "after UNLISTEN *").await;
    exec(&a, "LISTEN x").await;
    exec(&a, "DISCARD ALL").await;
    exec(&b, "NOTIFY x, 'gone'").await;
    nothing(&mut rx, Duration::from_millis(300), "after DISCARD ALL").await;
    // UNLISTEN of a channel not listened on is answered as PostgreSQL does.
    exec(&a, "UNLISTEN nothing_here").await;
}

/// A LISTEN the server ran (in a transaction block, with the extended protocol) is taken over
/// by the hub: the client is not pinned (a pool of one serves another client at once), its
/// server listens on nothing, and it hears its channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_listen_is_taken_over_by_the_hub() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start(&tx_cfg(&pg, "default_pool_size = 1"));
    let port = pooler.port;
    let (a, mut rx) = listening_client(port).await;
    let b = connect(port, "postgres", None, "postgres").await.unwrap();
    exec(&a, "BEGIN; LISTEN z; COMMIT").await;
    // Extended protocol (Parse, Bind, Execute, Sync).
    a.execute("LISTEN e", &[]).await.unwrap();
    assert_eq!(
        within(
            Duration::from_secs(5),
            "another client on a pool of one",
            one(&b, "SELECT count(*) FROM pg_listening_channels()")
        )
        .await,
        "0"
    );
    assert_eq!(
        one(&a, "SELECT count(*) FROM pg_listening_channels()").await,
        "0"
    );
    exec(&b, "NOTIFY z, 'one'; NOTIFY e, 'two'").await;
    assert_eq!(next_payload(&mut rx, "z").await, "one");
    assert_eq!(next_payload(&mut rx, "e").await, "two");
    // UNLISTEN with the extended protocol (asyncpg's remove_listener, JDBC) ends it too.
    a.execute("UNLISTEN e", &[]).await.unwrap();
    exec(&b, "NOTIFY e, 'gone'; NOTIFY z, 'three'").await;
    assert_eq!(next_payload(&mut rx, "z").await, "three");
    nothing(&mut rx, Duration::from_millis(300), "after UNLISTEN e").await;
}

/// While notifications flow, a LISTEN the server ran is taken over with none lost and none
/// twice: the listener hears every one from some point on, each once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_loses_nothing_while_notifications_flow() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start(&tx_cfg(&pg, "default_pool_size = 3"));
    let port = pooler.port;
    let b = connect(port, "postgres", None, "postgres").await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let sender = tokio::spawn(async move {
        let mut n = 0u32;
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            b.simple_query(&format!("NOTIFY flow, '{n}'"))
                .await
                .unwrap();
            n += 1;
        }
        n
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut listeners = Vec::new();
    for _ in 0..5 {
        let (a, rx) = listening_client(port).await;
        exec(&a, "BEGIN; LISTEN flow; COMMIT").await;
        listeners.push((a, rx));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let sent = sender.await.unwrap();
    for (i, (_a, rx)) in listeners.iter_mut().enumerate() {
        let first: u32 = next_payload(rx, "flow").await.parse().unwrap();
        for want in first + 1..sent {
            let got: u32 = next_payload(rx, "flow").await.parse().unwrap();
            assert_eq!(got, want, "listener {i}: after {first}");
        }
        nothing(rx, Duration::from_millis(200), "after the last").await;
    }
}

/// A client whose encoding is not UTF-8 keeps its LISTEN on its own server, pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latin1_listener_is_pinned_to_its_server() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start(&tx_cfg(&pg, "default_pool_size = 2"));
    let mut a = support::raw::Raw::login(pooler.port, "postgres", "postgres")
        .await
        .unwrap();
    a.query("SET client_encoding = 'LATIN1'").await.unwrap();
    a.query("LISTEN z").await.unwrap();
    let rows = a
        .query("SELECT string_agg(c, ',') FROM pg_listening_channels() c")
        .await
        .unwrap();
    assert_eq!(rows, [[Some("z".to_string())]]);
    assert!(
        pooler.log().contains("reasons=[\"LISTEN\"]"),
        "{}",
        pooler.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_ends_listeners_and_listening_starts_again() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start(&tx_cfg(&pg, "default_pool_size = 2"));
    let port = pooler.port;
    let (a, mut rx) = listening_client(port).await;
    exec(&a, "LISTEN r").await;
    blocking(|| pg.pg_ctl("restart"));
    // As its own connection would be: told the server's reason, and closed.
    match next_seen(&mut rx).await {
        Seen::Ended(code) => assert_eq!(code, "57P01"),
        other => panic!("expected the end, got {other:?}"),
    }
    // A new listener is served by a new listening connection.
    let (c, mut rx) = listening_client(port).await;
    let b = connect(port, "postgres", None, "postgres").await.unwrap();
    exec(&c, "LISTEN r").await;
    exec(&b, "NOTIFY r, 'again'").await;
    assert_eq!(next_payload(&mut rx, "r").await, "again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_listens_on_the_clients_own_server() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start(&cfg(&pg, "pool_mode = \"session\"\ndefault_pool_size = 2"));
    let port = pooler.port;
    let (a, mut rx) = listening_client(port).await;
    exec(&a, "LISTEN s").await;
    assert_eq!(
        one(
            &a,
            "SELECT string_agg(c, ',') FROM pg_listening_channels() c"
        )
        .await,
        "s"
    );
    let b = connect(port, "postgres", None, "postgres").await.unwrap();
    exec(&b, "NOTIFY s, 'own'").await;
    assert_eq!(next_payload(&mut rx, "s").await, "own");
}

/// A client that listens through the hub and is then pinned (a temporary table): it hears its
/// channel while idle between transactions, and nothing inside one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_listener_hears_between_its_transactions() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start(&tx_cfg(&pg, "default_pool_size = 2"));
    let port = pooler.port;
    let (a, mut rx) = listening_client(port).await;
    let b = connect(port, "postgres", None, "postgres").await.unwrap();
    exec(&a, "LISTEN p").await;
    exec(&a, "CREATE TEMP TABLE pinned_here(x int)").await;
    exec(&b, "NOTIFY p, 'idle'").await;
    assert_eq!(next_payload(&mut rx, "p").await, "idle");
    exec(&a, "BEGIN").await;
    exec(&b, "NOTIFY p, 'inside'").await;
    nothing(
        &mut rx,
        Duration::from_millis(300),
        "inside a pinned transaction",
    )
    .await;
    exec(&a, "SELECT 1").await;
    nothing(
        &mut rx,
        Duration::from_millis(100),
        "inside a pinned transaction",
    )
    .await;
    exec(&a, "COMMIT").await;
    assert_eq!(next_payload(&mut rx, "p").await, "inside");
    // Its UNLISTEN goes to its server, and ends the hub's listening for it too.
    exec(&a, "UNLISTEN p").await;
    exec(&b, "NOTIFY p, 'after'").await;
    nothing(
        &mut rx,
        Duration::from_millis(300),
        "after a pinned UNLISTEN",
    )
    .await;
}

/// A LISTEN hears what is committed after it and not before; an UNLISTEN, what was committed
/// before it and not after: the hub's server catches up before either is answered, while
/// another client keeps the channel listened on. Many rounds, as a notification on its way to
/// the hub is a matter of timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_and_unlisten_hear_exactly_what_was_committed_between_them() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start(&tx_cfg(&pg, "default_pool_size = 2"));
    let port = pooler.port;
    let (a, mut rx) = listening_client(port).await;
    let (keeper, mut kept) = listening_client(port).await;
    let b = connect(port, "postgres", None, "postgres").await.unwrap();
    exec(&keeper, "LISTEN race").await;
    for i in 0..200 {
        exec(&b, &format!("SELECT pg_notify('race', 'before {i}')")).await;
        exec(&a, "LISTEN race").await;
        exec(&b, &format!("SELECT pg_notify('race', 'between {i}')")).await;
        exec(&a, "UNLISTEN race").await;
        // Written before the UNLISTEN's answer, so here by now.
        match rx.try_recv() {
            Ok(Seen::Note { payload, .. }) => assert_eq!(payload, format!("between {i}")),
            other => panic!("round {i}: expected 'between {i}' by the UNLISTEN, got {other:?}"),
        }
        if let Ok(m) = rx.try_recv() {
            panic!("round {i}: more than was committed while listening: {m:?}");
        }
    }
    exec(&b, "SELECT pg_notify('race', 'after')").await;
    nothing(
        &mut rx,
        Duration::from_millis(300),
        "after the last UNLISTEN",
    )
    .await;
    for i in 0..200 {
        assert_eq!(next_payload(&mut kept, "race").await, format!("before {i}"));
        assert_eq!(
            next_payload(&mut kept, "race").await,
            format!("between {i}")
        );
    }
    assert_eq!(next_payload(&mut kept, "race").await, "after");
}
