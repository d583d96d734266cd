//! Session state that must not cross clients, whatever spelling changes it, and messages that
//! must reach their client while pgcorral talks to the server on its own (issue 34, items 2
//! and 3). A pool of one server in transaction mode makes clients take turns on one backend:
//! what one client leaves there shows up in the next.

mod support;

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client};

use support::*;

/// What a client sees of its session: who it is, its search_path, a custom setting. A custom
/// setting that a server's session once had reads as '' after the reset, not as NULL as on a
/// new connection: PostgreSQL keeps the placeholder (a documented pooling difference).
const VIEW: &str = "SELECT current_user, current_setting('search_path'), \
     coalesce(nullif(current_setting('app.tenant', true), ''), '<none>')";

/// The first row of `sql`'s last result, as text.
async fn first_row(c: &Client, sql: &str) -> Vec<String> {
    let msgs = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql:?} failed: {e}"));
    simple_rows(&msgs).last().cloned().unwrap_or_default()
}

fn setup(pg: &Postgres) {
    pg.sql(
        "postgres",
        "CREATE ROLE r; GRANT r TO postgres; CREATE SCHEMA leak; \
         CREATE FUNCTION leak_sql() RETURNS text LANGUAGE sql \
           AS $$ SELECT set_config('search_path', 'leak', false) $$; \
         CREATE FUNCTION leak_plpgsql() RETURNS void LANGUAGE plpgsql \
           AS $$ BEGIN SET ROLE r; END $$; \
         CREATE FUNCTION leak_custom(v text) RETURNS text LANGUAGE sql \
           AS $$ SELECT set_config('app.tenant', v, false) $$",
    );
}

/// One way to change the session, and what its client then sees (as it would on a connection
/// of its own).
struct Change {
    what: &'static str,
    /// Simple queries, one after another (each its own transaction).
    queries: &'static [&'static str],
    /// The client's own view afterwards: current_user, search_path, app.tenant.
    keeps: [&'static str; 3],
}

const DEFAULT: [&str; 3] = ["postgres", "\"$user\", public", "<none>"];
const ROLE_R: [&str; 3] = ["r", "\"$user\", public", "<none>"];
const PATH_LEAK: [&str; 3] = ["postgres", "leak", "<none>"];

const CHANGES: &[Change] = &[
    Change {
        what: "a quoted set_config",
        queries: &["select \"set_config\"('role', 'r', false)"],
        keeps: ROLE_R,
    },
    Change {
        what: "a qualified, quoted set_config",
        queries: &["select pg_catalog.\"set_config\"('search_path', 'leak', false)"],
        keeps: PATH_LEAK,
    },
    Change {
        what: "set_config spelled with Unicode escapes",
        queries: &["select U&\"set\\005fconfig\"('role', 'r', false)"],
        keeps: ROLE_R,
    },
    Change {
        what: "UPDATE pg_settings",
        queries: &["UPDATE pg_settings SET setting = 'leak' WHERE name = 'search_path'"],
        keeps: PATH_LEAK,
    },
    Change {
        what: "SQL PREPARE then EXECUTE",
        queries: &[
            "PREPARE p AS select set_config('role', 'r', false)",
            "EXECUTE p",
        ],
        keeps: ROLE_R,
    },
    Change {
        what: "a DO block calling set_config",
        queries: &["DO $$BEGIN PERFORM set_config('search_path', 'leak', false); END$$"],
        keeps: PATH_LEAK,
    },
    Change {
        what: "a DO block with SET ROLE",
        queries: &["DO $$BEGIN SET ROLE r; END$$"],
        keeps: ROLE_R,
    },
    Change {
        what: "a SQL function calling set_config",
        queries: &["select leak_sql()"],
        keeps: PATH_LEAK,
    },
    Change {
        what: "a plpgsql function with SET ROLE",
        queries: &["select leak_plpgsql()"],
        keeps: ROLE_R,
    },
    // A custom setting whose name is not in the client's text cannot be read back: the reset
    // keeps it from the next client, and its own client loses it too (documented, as the one
    // difference from a connection of its own).
    Change {
        what: "a function setting a custom setting whose name is not in the text",
        queries: &["select leak_custom('42')"],
        keeps: DEFAULT,
    },
    Change {
        what: "set_config with a name built by an expression",
        queries: &["select set_config('app.' || 'tenant', '7', false)"],
        keeps: DEFAULT,
    },
];

/// Each change, made by one client, stays with that client (as on a connection of its own)
/// and never reaches the next client of the one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_a_session_change_reaches_the_next_client() {
    let pg = Postgres::start();
    setup(&pg);
    let pooler = Pooler::start(&config(&pg, "postgres", "default_pool_size = 1")).await;
    let other = pooler.connect("postgres", None, "postgres").await;
    for change in CHANGES {
        let a = pooler.connect("postgres", None, "postgres").await;
        for q in change.queries {
            a.simple_query(q)
                .await
                .unwrap_or_else(|e| panic!("{}: {q:?} failed: {e}", change.what));
        }
        // The next client of the one server sees PostgreSQL's defaults.
        assert_eq!(
            first_row(&other, VIEW).await,
            DEFAULT,
            "{}: reached another client",
            change.what
        );
        // The client that made it still has it.
        assert_eq!(
            first_row(&a, VIEW).await,
            change.keeps,
            "{}: lost by its own client",
            change.what
        );
        assert_eq!(first_row(&other, VIEW).await, DEFAULT, "{}", change.what);
    }
}

/// A statement prepared in one transaction and executed in a later one changes the session
/// when it runs, not when it is parsed: the run is what is looked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_statement_changes_the_session_when_it_runs() {
    let pg = Postgres::start();
    setup(&pg);
    let pooler = Pooler::start(&config(&pg, "postgres", "default_pool_size = 1")).await;
    let a = pooler.connect("postgres", None, "postgres").await;
    let other = pooler.connect("postgres", None, "postgres").await;
    let role = a.prepare("select leak_plpgsql()").await.unwrap();
    let custom = a.prepare("select set_config($1, $2, false)").await.unwrap();
    assert_eq!(first_row(&other, VIEW).await, DEFAULT);
    a.query(&role, &[]).await.unwrap();
    a.query(&custom, &[&"app.tenant", &"9"]).await.unwrap();
    assert_eq!(first_row(&other, VIEW).await, DEFAULT);
    // The custom setting named only by a parameter is not read back (see above).
    assert_eq!(first_row(&a, VIEW).await, ROLE_R);
}

/// A client's tiny statement_timeout applies to its own statements only: pgcorral's own
/// statements on its behalf (the read-back after a SET, the settings of the next client) are
/// never cancelled by it, so neither that client nor the next one is cut off, and the next
/// one runs without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_statement_timeout_cancels_only_its_clients_own_statements() {
    let pg = Postgres::start();
    // Long enough to be cancelled by 1 ms, short enough for the other client.
    pg.sql(
        "postgres",
        "CREATE FUNCTION slow() RETURNS bigint LANGUAGE sql \
           AS $$ SELECT count(*) FROM generate_series(1, 300000) $$",
    );
    let pooler = Pooler::start(&config(&pg, "postgres", "default_pool_size = 1")).await;
    let other = pooler.connect("postgres", None, "postgres").await;
    for round in 0..5 {
        let a = pooler.connect("postgres", None, "postgres").await;
        a.simple_query("SET statement_timeout = '1ms'")
            .await
            .unwrap();
        // Each of these is a read-back (a capture) or a settings sync on pgcorral's side.
        for q in [
            "SET TimeZone = 'UTC'",
            "SELECT pg_catalog.upper('x')",
            "SET DateStyle = 'German'",
        ] {
            match a.simple_query(q).await {
                Ok(_) => {}
                // Its own statement may be cancelled by its own timeout on a loaded machine.
                Err(e) => assert_eq!(
                    e.code().map(|c| c.code()),
                    Some("57014"),
                    "round {round}: {q:?}: {e}"
                ),
            }
        }
        let e = a.simple_query("SELECT slow()").await.unwrap_err();
        assert_eq!(e.code().map(|c| c.code()), Some("57014"), "{e}");
        assert!(!a.is_closed(), "round {round}: the client was cut off");
        assert_eq!(first_row(&a, "SHOW statement_timeout").await, ["1ms"]);
        // The next client of the one server: no timeout, its slow query runs.
        assert_eq!(first_row(&other, "SHOW statement_timeout").await, ["0"]);
        assert_eq!(first_row(&other, "SELECT slow()").await, ["300000"]);
    }
}

/// The payloads of the notifications that arrive within `wait`, stopping at `want`.
async fn payloads(
    rx: &mut mpsc::UnboundedReceiver<AsyncMessage>,
    want: usize,
    wait: Duration,
) -> Vec<String> {
    let mut got = Vec::new();
    let until = tokio::time::Instant::now() + wait;
    while got.len() < want {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(AsyncMessage::Notification(n))) => got.push(n.payload().to_string()),
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    got
}

/// LISTEN, then at once a NOTIFY from another client: the notification arrives while pgcorral
/// reads the listener's session back after its LISTEN, and must still reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_right_after_listen_is_delivered() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(&pg, "postgres", "default_pool_size = 30")).await;
    let notifier = pooler.connect("postgres", None, "postgres").await;
    let mut lost = Vec::new();
    for i in 0..20 {
        let (l, mut rx) = client_with_messages(pooler.port()).await;
        let chan = format!("ch{i}");
        let listen_sql = format!("LISTEN {chan}");
        let listen = l.simple_query(&listen_sql);
        let notify = async {
            // As soon as the LISTEN has reached the server.
            tokio::time::sleep(Duration::from_millis(1)).await;
            notifier
                .simple_query(&format!("NOTIFY {chan}, 'n{i}'"))
                .await
                .unwrap();
        };
        let (r, ()) = tokio::join!(listen, notify);
        r.unwrap();
        // The NOTIFY may have come first (then nothing is owed), so notify once more after.
        notifier
            .simple_query(&format!("NOTIFY {chan}, 'm{i}'"))
            .await
            .unwrap();
        let got = payloads(&mut rx, 2, Duration::from_secs(3)).await;
        if !got.contains(&format!("m{i}")) {
            lost.push((i, got));
        }
    }
    assert!(lost.is_empty(), "notifications lost: {lost:?}");
}

/// A pinned listener whose SET makes pgcorral read its session back: notifications sent
/// meanwhile reach it, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_during_a_session_capture_are_delivered_in_order() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(&pg, "postgres", "default_pool_size = 3")).await;
    let notifier = pooler.connect("postgres", None, "postgres").await;
    let (l, mut rx) = client_with_messages(pooler.port()).await;
    l.simple_query("LISTEN ch").await.unwrap();
    for i in 0..10 {
        let set = l.simple_query("SET search_path = public");
        let notify_sql = format!("NOTIFY ch, '{i}'");
        let notify = notifier.simple_query(&notify_sql);
        let (a, b) = tokio::join!(set, notify);
        a.unwrap();
        b.unwrap();
    }
    let got = payloads(&mut rx, 10, Duration::from_secs(5)).await;
    let want: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    assert_eq!(got, want);
}
