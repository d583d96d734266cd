//! Session settings in transaction mode against a real PostgreSQL: SET / RESET / SET ROLE /
//! SET SESSION AUTHORIZATION / set_config followed per client whatever server it gets (a shared
//! server, new servers, statement mode), custom settings, and superuser settings made before a
//! SET ROLE.
//!
//! Pools of one server force clients to take turns on the same backend (a leak of one client's
//! state shows up in the next one); `server_lifetime = 1` gives every transaction a brand-new
//! backend (a setting that is not replayed shows up as lost).

mod support;

use std::sync::Arc;

use support::session::*;
use support::*;

// ---- 1. SET, RESET, SET ROLE, SET SESSION AUTHORIZATION, set_config -------------------------

/// search_path, TimeZone, current_user, session_user.
const VIEW: &str = "SELECT current_setting('search_path'), current_setting('TimeZone'), \
                    current_user::text, session_user::text";

fn setup_roles(pg: &Postgres) {
    pg.sql(
        "postgres",
        "CREATE ROLE alice; CREATE ROLE bob; CREATE SCHEMA sa; CREATE SCHEMA sb; \
         GRANT USAGE ON SCHEMA sa TO alice; GRANT USAGE ON SCHEMA sb TO bob",
    );
}

/// Three clients take turns on a pool of one server: `a` SETs, `b` uses set_config and SET
/// SESSION AUTHORIZATION, `c` (raw) changes nothing and must never hear a ParameterStatus.
async fn settings_follow_each_client(general: &str, fresh_servers: bool) {
    let pg = Postgres::start();
    setup_roles(&pg);
    let defaults = row(&direct(&pg).await, VIEW).await;
    assert_eq!(defaults[2..], ["postgres", "postgres"]);
    let pooler = Pooler::start(&cfg(&pg, general)).await;
    let a = Arc::new(pooler.connect("postgres", None, "postgres").await);
    let b = Arc::new(pooler.connect("postgres", None, "postgres").await);
    let mut c = RawClient::login(
        pooler.port(),
        &[("user", "postgres"), ("database", "postgres")],
    )
    .await
    .unwrap();

    exec(
        &a,
        "SET search_path = sa, public; SET TimeZone = 'Asia/Tokyo'; SET ROLE alice",
    )
    .await;
    exec(
        &b,
        "SELECT set_config('search_path', 'sb', false); SET TIME ZONE 'America/New_York'",
    )
    .await;
    exec(&b, "SET SESSION AUTHORIZATION bob").await;
    let want_a = strings(&["sa, public", "Asia/Tokyo", "alice", "postgres"]);
    let want_b = strings(&["sb", "America/New_York", "bob", "bob"]);

    let mut a_pids = Vec::new();
    for i in 0..15 {
        let q = if i % 3 == 1 {
            format!("BEGIN; {VIEW}; COMMIT")
        } else {
            VIEW.to_string()
        };
        // Rotate who goes first.
        for k in 0..3 {
            match (i + k) % 3 {
                0 => {
                    if fresh_servers {
                        // Its server reaches server_lifetime (1 ms) before it is checked in,
                        // however fast the machine: the next query needs a new one.
                        exec(&a, "SELECT pg_sleep(0.002)").await;
                    }
                    assert_eq!(row(&a, &q).await, want_a, "a, round {i}");
                    a_pids.push(backend_pid(&a).await);
                }
                1 => assert_eq!(row(&b, &q).await, want_b, "b, round {i}"),
                _ => {
                    let (got, params) = c.row(&q).await;
                    assert_eq!(got, defaults, "c, round {i}");
                    assert!(params.is_empty(), "c was sent {params:?}, round {i}");
                }
            }
        }
    }
    if fresh_servers {
        a_pids.dedup();
        assert!(
            a_pids.len() > 10,
            "server_lifetime = 1 should give new servers: {a_pids:?}"
        );
    } else {
        a_pids.dedup();
        assert_eq!(a_pids.len(), 1, "one server for all: {a_pids:?}");
    }

    // All three at once.
    let ta = tokio::spawn({
        let (a, want) = (a.clone(), want_a.clone());
        async move {
            for i in 0..30 {
                assert_eq!(row(&a, VIEW).await, want, "a, concurrent round {i}");
            }
        }
    });
    let tb = tokio::spawn({
        let (b, want) = (b.clone(), want_b.clone());
        async move {
            for i in 0..30 {
                assert_eq!(row(&b, VIEW).await, want, "b, concurrent round {i}");
            }
        }
    });
    let tc = tokio::spawn({
        let defaults = defaults.clone();
        async move {
            for i in 0..30 {
                let (got, params) = c.row(VIEW).await;
                assert_eq!(got, defaults, "c, concurrent round {i}");
                assert!(params.is_empty(), "c was sent {params:?}");
            }
            c
        }
    });
    ta.await.unwrap();
    tb.await.unwrap();
    let mut c = tc.await.unwrap();

    // SET LOCAL lasts until the end of its transaction.
    let got = rows(
        &a,
        "BEGIN; SET LOCAL search_path = tmp; SELECT current_setting('search_path'); COMMIT",
    )
    .await;
    assert_eq!(got, [["tmp"]]);
    assert_eq!(row(&b, VIEW).await, want_b);
    assert_eq!(row(&a, VIEW).await, want_a, "after SET LOCAL");

    // A SET in a transaction that is rolled back does not stick...
    exec(&a, "BEGIN; SET TimeZone = 'UTC'; SET ROLE NONE; ROLLBACK").await;
    assert_eq!(c.row(VIEW).await.0, defaults);
    assert_eq!(row(&a, VIEW).await, want_a, "after a rolled-back SET");
    // ...nor one in a transaction that failed, implicit or explicit.
    let e = try_rows(&a, "SET search_path = zzz; SELECT 1/0")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22012");
    assert_eq!(row(&b, VIEW).await, want_b);
    assert_eq!(
        row(&a, VIEW).await,
        want_a,
        "after a failed implicit transaction"
    );
    exec(&a, "BEGIN; SET TimeZone = 'Europe/Paris'").await;
    let e = try_rows(&a, "SELECT 1/0").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22012");
    exec(&a, "ROLLBACK").await;
    assert_eq!(c.row(VIEW).await.0, defaults);
    assert_eq!(
        row(&a, VIEW).await,
        want_a,
        "after a failed explicit transaction"
    );

    // A SET that commits inside an explicit transaction does.
    exec(&a, "BEGIN; SET TimeZone = 'Europe/Paris'; COMMIT").await;
    let want_a = strings(&["sa, public", "Europe/Paris", "alice", "postgres"]);
    assert_eq!(row(&b, VIEW).await, want_b);
    assert_eq!(row(&a, VIEW).await, want_a);

    // The raw client hears about its own change once, and about nothing else.
    let (_, params) = c.row("SET TimeZone = 'Australia/Sydney'; SELECT 1").await;
    assert_eq!(
        params,
        [(String::from("TimeZone"), String::from("Australia/Sydney"))]
    );
    assert_eq!(row(&a, VIEW).await, want_a);
    assert_eq!(row(&b, VIEW).await, want_b);
    let (got, params) = c.row(VIEW).await;
    assert_eq!(got[1], "Australia/Sydney");
    assert!(params.is_empty(), "{params:?}");
    let (_, params) = c.row("RESET TimeZone; SELECT 1").await;
    assert_eq!(params, [(String::from("TimeZone"), defaults[1].clone())]);
    assert_eq!(c.row(VIEW).await.0, defaults);

    // DISCARD ALL clears only the state of the client that sends it.
    exec(&a, "DISCARD ALL").await;
    assert_eq!(row(&b, VIEW).await, want_b);
    assert_eq!(row(&a, VIEW).await, defaults, "a after DISCARD ALL");
    assert_eq!(row(&b, VIEW).await, want_b, "b after a's DISCARD ALL");

    // RESET ALL: settings back to the defaults, but (as in PostgreSQL) not the session user.
    exec(&b, "RESET ALL").await;
    assert_eq!(row(&a, VIEW).await, defaults);
    assert_eq!(
        row(&b, VIEW).await,
        strings(&[defaults[0].as_str(), defaults[1].as_str(), "bob", "bob"]),
        "b after RESET ALL"
    );
    exec(&b, "RESET SESSION AUTHORIZATION").await;
    assert_eq!(row(&a, VIEW).await, defaults);
    assert_eq!(
        row(&b, VIEW).await,
        defaults,
        "b after RESET SESSION AUTHORIZATION"
    );

    // SET ROLE, then RESET ROLE.
    exec(&a, "SET ROLE bob").await;
    assert_eq!(row(&b, VIEW).await, defaults);
    assert_eq!(row(&a, VIEW).await[2..], ["bob", "postgres"]);
    exec(&a, "RESET ROLE").await;
    assert_eq!(row(&b, VIEW).await, defaults);
    assert_eq!(row(&a, VIEW).await, defaults);
    assert_eq!(c.row(VIEW).await.0, defaults);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_follow_each_client_on_a_shared_server() {
    settings_follow_each_client("default_pool_size = 1", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_follow_each_client_onto_new_servers() {
    settings_follow_each_client("default_pool_size = 1\nserver_lifetime = 1", true).await;
}

/// Custom (`x.y`) settings made with SET or set_config follow their client and reach no one else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_settings_from_set_follow_their_client() {
    let pg = Postgres::start();
    const Q: &str = "SELECT coalesce(current_setting('myapp.tenant', true), '<unset>')";
    for (general, what) in [
        ("default_pool_size = 1", "shared server"),
        ("default_pool_size = 1\nserver_lifetime = 1", "new servers"),
    ] {
        let pooler = Pooler::start(&cfg(&pg, general)).await;
        let a = pooler.connect("postgres", None, "postgres").await;
        let b = pooler.connect("postgres", None, "postgres").await;
        let c = pooler.connect("postgres", None, "postgres").await;
        exec(&a, "SET myapp.tenant = 'acme'").await;
        exec(&b, "SELECT set_config('myapp.tenant', 'globex', false)").await;
        let mut seen_by_c = Vec::new();
        for i in 0..5 {
            assert_eq!(one(&a, Q).await, "acme", "{what}: a, round {i}");
            seen_by_c.push(one(&c, Q).await);
            assert_eq!(one(&b, Q).await, "globex", "{what}: b, round {i}");
            seen_by_c.push(one(&c, Q).await);
        }
        assert!(
            seen_by_c.iter().all(|v| v == "<unset>" || v.is_empty()),
            "{what}: c saw other clients' values: {seen_by_c:?}"
        );
        pooler.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_follow_each_client_in_statement_mode() {
    let pg = Postgres::start();
    setup_roles(&pg);
    let defaults = row(&direct(&pg).await, VIEW).await;
    let pooler = Pooler::start(&cfg(
        &pg,
        "default_pool_size = 1\npool_mode = \"statement\"",
    ))
    .await;
    let a = pooler.connect("postgres", None, "postgres").await;
    let b = pooler.connect("postgres", None, "postgres").await;
    let c = pooler.connect("postgres", None, "postgres").await;
    exec(&a, "SET search_path = sa, public").await;
    exec(&a, "SET TimeZone = 'Asia/Tokyo'").await;
    exec(&a, "SET ROLE alice").await;
    exec(
        &b,
        "SELECT set_config('TimeZone', 'America/New_York', false)",
    )
    .await;
    exec(&b, "SET SESSION AUTHORIZATION bob").await;
    let want_a = strings(&["sa, public", "Asia/Tokyo", "alice", "postgres"]);
    let want_b = strings(&[&defaults[0], "America/New_York", "bob", "bob"]);
    for i in 0..10 {
        assert_eq!(row(&a, VIEW).await, want_a, "a, round {i}");
        assert_eq!(row(&c, VIEW).await, defaults, "c, round {i}");
        assert_eq!(row(&b, VIEW).await, want_b, "b, round {i}");
    }
    exec(&a, "RESET ALL").await;
    exec(&b, "RESET SESSION AUTHORIZATION").await;
    assert_eq!(row(&a, VIEW).await[..2], defaults[..2]);
    assert_eq!(row(&a, VIEW).await[2], "alice");
    assert_eq!(
        row(&b, VIEW).await[..],
        [&defaults[0], "America/New_York", "postgres", "postgres"]
    );
    assert_eq!(row(&c, VIEW).await, defaults);
}

/// A superuser changes a superuser-only setting, then drops its privileges with SET ROLE (or
/// SET SESSION AUTHORIZATION): legal in PostgreSQL, and must replay on another server too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superuser_settings_made_before_set_role_are_replayed() {
    let pg = Postgres::start();
    setup_roles(&pg);
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 1")).await;
    const Q: &str =
        "SELECT current_setting('session_replication_role'), current_user::text, session_user::text";
    for (switch, user, session_user) in [
        ("SET ROLE alice", "alice", "postgres"),
        ("SET SESSION AUTHORIZATION bob", "bob", "bob"),
    ] {
        let a = pooler.connect("postgres", None, "postgres").await;
        let b = pooler.connect("postgres", None, "postgres").await;
        exec(&a, "SET session_replication_role = replica").await;
        exec(&a, switch).await;
        let want = strings(&["replica", user, session_user]);
        assert_eq!(row(&a, Q).await, want, "{switch}");
        for i in 0..3 {
            // b makes the server's settings differ, so a's are replayed.
            exec(&b, "SET TimeZone = 'Asia/Tokyo'").await;
            assert_eq!(
                row(&b, Q).await,
                ["origin", "postgres", "postgres"],
                "{switch}: b, round {i}"
            );
            let got = try_rows(&a, Q).await;
            assert!(
                matches!(&got, Ok(r) if r[0] == want),
                "{switch}: a, round {i}: {got:?}"
            );
        }
    }
}

/// A client idle past the upkeep's look (1 s) gives up its request loop's state and waits
/// without it (`client::slim`); its session goes on as it was, each time it comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_slimmed_down_while_idle_keeps_its_session() {
    let pg = Postgres::start();
    const Q: &str = "SELECT coalesce(current_setting('myapp.tenant', true), '<unset>')";
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 1")).await;
    let a = pooler.connect("postgres", None, "postgres").await;
    exec(&a, "SET myapp.tenant = 'acme'").await;
    for round in 0..2 {
        tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
        assert_eq!(one(&a, Q).await, "acme", "round {round}");
    }
    pooler.shutdown().await;
}
