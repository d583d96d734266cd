//! PgBouncer 1.24's caps on clients per database and per user (`max_db_client_connections`, `max_user_client_connections`), against a real PostgreSQL.

mod support;

use std::time::{Duration, Instant};

use support::*;

/// Connect error expected: returns it.
async fn refused(port: u16, db: &str) -> tokio_postgres::Error {
    match within(
        Duration::from_secs(10),
        "refused login",
        connect(port, "postgres", None, db),
    )
    .await
    {
        Ok(_) => panic!("login to {db} succeeded"),
        Err(e) => e,
    }
}

/// Asserts `e` is the refusal for the cap `key`, as PgBouncer words it.
fn assert_capped(e: &tokio_postgres::Error, key: &str) {
    assert_eq!(
        db_message(e),
        format!("client connections exceeded ({key})"),
        "{e}"
    );
    assert_eq!(sqlstate(e), "53300", "{e}");
}

/// The value of `column` in the row of the console's `SHOW what` whose `name` is `name`.
async fn shown(console: &tokio_postgres::Client, what: &str, name: &str, column: &str) -> String {
    let msgs = console.simple_query(&format!("SHOW {what}")).await.unwrap();
    msgs.into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) if r.get("name") == Some(name) => {
                Some(r.get(column).unwrap_or_default().to_string())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no row {name} with {column} in SHOW {what}"))
}

/// Waits until SHOW `what` shows `want` clients for `name` (a client's leaving is seen by
/// its task a moment later).
async fn wait_clients(console: &tokio_postgres::Client, what: &str, name: &str, want: &str) {
    let start = Instant::now();
    loop {
        let now = shown(console, what, name, "current_client_connections").await;
        if now == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "SHOW {what}: {name} has {now} clients, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_caps_per_database_and_per_user() {
    let pg = Postgres::start();
    let toml = format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\nadmin_users = [\"postgres\"]\n\
         max_db_client_connections = 5\n\n\
         [databases.a]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\n\
         max_db_client_connections = 2\n\n\
         [databases.b]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\n",
        port = pg.port
    );
    let pooler = Pooler::start(&toml).await;
    let port = pooler.port();
    // An admin user on the console: counted (as user postgres and under database pgbouncer),
    // never refused.
    let console = connect(port, "postgres", None, "pgbouncer").await.unwrap();
    assert_eq!(
        shown(&console, "DATABASES", "a", "max_client_connections").await,
        "2"
    );
    assert_eq!(
        shown(&console, "DATABASES", "b", "max_client_connections").await,
        "5"
    );
    assert_eq!(
        shown(
            &console,
            "DATABASES",
            "pgbouncer",
            "current_client_connections"
        )
        .await,
        "1"
    );

    // Database a's own cap (2) overrides [general]'s (5).
    let mut on_a = Vec::new();
    for _ in 0..2 {
        on_a.push(connect(port, "postgres", None, "a").await.unwrap());
    }
    wait_clients(&console, "DATABASES", "a", "2").await;
    for _ in 0..2 {
        assert_capped(&refused(port, "a").await, "max_db_client_connections");
    }
    // A refused client is not counted.
    assert_eq!(
        shown(&console, "DATABASES", "a", "current_client_connections").await,
        "2"
    );
    for c in &on_a {
        assert_eq!(select_one(c).await, 1);
    }
    // A client leaving frees its place.
    drop(on_a.pop());
    wait_clients(&console, "DATABASES", "a", "1").await;
    on_a.push(connect(port, "postgres", None, "a").await.unwrap());
    assert_eq!(select_one(&on_a[1]).await, 1);

    // The console's SET changes [general]'s cap for the next logins; a's own stays.
    console
        .simple_query("SET max_db_client_connections = 1")
        .await
        .unwrap();
    assert_eq!(
        shown(&console, "DATABASES", "b", "max_client_connections").await,
        "1"
    );
    let on_b = connect(port, "postgres", None, "b").await.unwrap();
    assert_capped(&refused(port, "b").await, "max_db_client_connections");
    assert_capped(&refused(port, "a").await, "max_db_client_connections");

    // The cap per user: the console, two clients on a and one on b are four as postgres.
    console
        .simple_query("SET max_db_client_connections = 0")
        .await
        .unwrap();
    console
        .simple_query("SET max_user_client_connections = 4")
        .await
        .unwrap();
    wait_clients(&console, "USERS", "postgres", "4").await;
    assert_eq!(
        shown(&console, "USERS", "postgres", "max_user_client_connections").await,
        "4"
    );
    let e = refused(port, "b").await;
    assert_capped(&e, "max_user_client_connections");
    // An admin user on the console is never refused (PgBouncer's exemption), but counted.
    let console2 = connect(port, "postgres", None, "pgbouncer").await.unwrap();
    wait_clients(&console, "USERS", "postgres", "5").await;
    drop(console2);
    drop(on_b);
    wait_clients(&console, "USERS", "postgres", "3").await;
    let again = connect(port, "postgres", None, "b").await.unwrap();
    assert_eq!(select_one(&again).await, 1);
    // Database a is full too; its cap is checked first, as PgBouncer does.
    assert_capped(&refused(port, "a").await, "max_db_client_connections");
    assert_capped(&refused(port, "b").await, "max_user_client_connections");

    // 0: no cap.
    console
        .simple_query("SET max_user_client_connections = 0")
        .await
        .unwrap();
    let more = connect(port, "postgres", None, "b").await.unwrap();
    assert_eq!(select_one(&more).await, 1);
}
