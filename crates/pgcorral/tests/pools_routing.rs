//! Which pool a client gets, against a real PostgreSQL: databases and users, the wildcard
//! database, and pool modes set per database and per user.
//!
//! Server connections are counted on the PostgreSQL side (pg_stat_activity), never through
//! pgcorral's own counters.

mod support;

use std::time::Duration;

use support::pools::*;
use support::*;

// ---------------------------------------------------------------------------------------------
// 1. Databases, users, wildcard and pool modes
// ---------------------------------------------------------------------------------------------

/// Several databases and users: named entries, an entry with another server-side dbname, the
/// `"*"` wildcard (any other name, same name on the server), and pool_mode per database and per
/// user (the user's wins).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn databases_users_wildcard_and_pool_modes() {
    let pg = Postgres::start();
    for d in ["alpha", "gamma", "delta"] {
        pg.create_db(d);
    }
    for u in ["alice", "bob", "sess"] {
        pg.create_user(u, "pw");
    }
    let rest = db(&pg, "alpha", "")
        + &db(&pg, "alias", "dbname = \"alpha\"")
        + &db(
            &pg,
            "sessdb",
            "dbname = \"alpha\"\npool_mode = \"session\"\npool_size = 2",
        )
        + &db(&pg, "stmt", "dbname = \"alpha\"\npool_mode = \"statement\"")
        + &db(&pg, "\"*\"", "")
        + &user("alice", "")
        + &user("bob", "")
        + &user("sess", "pool_mode = \"session\"\npool_size = 3");
    let pooler = Pooler::start(&toml(
        "default_pool_size = 1\npool_mode = \"transaction\"",
        &rest,
    ))
    .await;

    // Routing.
    for (u, client_db, server_db) in [
        ("alice", "alpha", "alpha"),
        ("bob", "alias", "alpha"),
        ("alice", "gamma", "gamma"),
        ("bob", "delta", "delta"),
        ("bob", "gamma", "gamma"),
        ("sess", "postgres", "postgres"),
    ] {
        let c = pooler.connect(u, None, client_db).await;
        assert_eq!(
            value(&c, "SELECT current_database()").await,
            server_db,
            "{u}@{client_db}"
        );
        assert_eq!(value(&c, "SELECT current_user").await, u, "{u}@{client_db}");
    }

    // Transaction mode (general): alice's two clients share her pool's one server; bob's pool
    // on the same database is another.
    let a = clients(&pooler, "alice", "alpha", 2).await;
    let b = pooler.connect("bob", None, "alpha").await;
    let shared = backend_pid(&a[0]).await;
    for _ in 0..3 {
        for c in &a {
            assert_eq!(
                backend_pid(c).await,
                shared,
                "alice's transaction-mode clients"
            );
        }
    }
    assert_ne!(backend_pid(&b).await, shared, "bob has his own pool");
    // The wildcard's pools are transaction mode too.
    let g = clients(&pooler, "alice", "gamma", 2).await;
    let gp = backend_pid(&g[0]).await;
    assert_eq!(
        backend_pid(&g[1]).await,
        gp,
        "wildcard pool of size 1, shared"
    );

    // Session mode by database: each client keeps its own server.
    let s = clients(&pooler, "alice", "sessdb", 2).await;
    let (s0, s1) = (backend_pid(&s[0]).await, backend_pid(&s[1]).await);
    assert_ne!(s0, s1, "session-mode clients share a server");
    for _ in 0..3 {
        assert_eq!(backend_pid(&s[0]).await, s0);
        assert_eq!(backend_pid(&s[1]).await, s1);
        assert_eq!(backend_pid(&a[0]).await, shared);
    }

    // Session mode by user, over the general transaction mode.
    let u = clients(&pooler, "sess", "alpha", 2).await;
    let (u0, u1) = (backend_pid(&u[0]).await, backend_pid(&u[1]).await);
    assert_ne!(u0, u1, "user-level session mode");
    u[0].batch_execute("SET application_name = 'mine'")
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(backend_pid(&u[0]).await, u0);
        assert_eq!(backend_pid(&u[1]).await, u1);
    }
    assert_eq!(value(&u[0], "SHOW application_name").await, "mine");

    // Statement mode by database: single statements work, transaction blocks are refused.
    let st = pooler.connect("alice", None, "stmt").await;
    assert_eq!(value(&st, "SELECT current_database()").await, "alpha");
    let err = within(Duration::from_secs(10), "BEGIN", st.simple_query("BEGIN"))
        .await
        .map(drop)
        .expect_err("BEGIN in statement mode");
    assert_eq!(sqlstate(&err), "0A000", "{err}");
    assert_eq!(
        value(&st, "SELECT 2").await,
        "2",
        "usable after the refusal"
    );
    assert_eq!(
        value(&st, "SELECT txid_current_if_assigned() IS NULL").await,
        "t",
        "no transaction left open"
    );
    // ... but a user in session mode on that database may use transactions (user wins).
    let us = pooler.connect("sess", None, "stmt").await;
    let p = backend_pid(&us).await;
    us.batch_execute("BEGIN").await.unwrap();
    assert_eq!(backend_pid(&us).await, p);
    us.batch_execute("COMMIT").await.unwrap();
    assert_eq!(backend_pid(&us).await, p);
}
