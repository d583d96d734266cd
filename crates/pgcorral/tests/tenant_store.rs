//! The tenant registry (`tenants::store`) against a real PostgreSQL server: its schema made and
//! migrated once however many nodes open it at once, tenants written and read back, bans, the
//! changes heard through LISTEN/NOTIFY (across a restart of the server too), and errors while
//! the server is down that end when it is back.

mod support;

use std::time::Duration;

use pgcorral::tenants::store::{Change, Put, Store, StoreError};
use pgcorral::tenants::{HostPort, Mode, Tenant, TenantUser};
use support::{blocking, within, Postgres};
use tokio::sync::mpsc::Receiver;

/// The registry's connection string for `pg` (with a password the server does not ask for,
/// to check that no error shows it).
fn conninfo(pg: &Postgres) -> String {
    format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres password=s3cr3t-pw",
        pg.port
    )
}

/// A tenant with one user per alias given.
fn tenant(id: &str, aliases: &[&str]) -> Tenant {
    Tenant {
        external_id: id.into(),
        db_host: "db.example".into(),
        db_port: 5432,
        db_database: "app".into(),
        replicas: vec![HostPort {
            host: "replica.example".into(),
            port: 6432,
        }],
        ip_version: "auto".into(),
        require_user: true,
        enforce_ssl: false,
        auth_query: None,
        default_pool_size: 15,
        default_max_clients: 1000,
        max_db_connections: 40,
        client_idle_timeout: 300,
        sni_hostname: None,
        allow_list: vec!["10.0.0.0/8".into(), "::/0".into()],
        upstream_ssl: false,
        upstream_verify: None,
        banned_at: None,
        ban_reason: None,
        users: aliases
            .iter()
            .map(|a| TenantUser {
                db_user_alias: a.to_string(),
                db_user: format!("role_{a}"),
                db_password: format!("pw of {a}"),
                pool_size: 5,
                mode_type: Mode::Transaction,
                max_clients: Some(100),
                pool_checkout_timeout: 60_000,
                is_manager: *a == "admin",
            })
            .collect(),
        inserted_at: None,
        updated_at: None,
    }
}

/// `t` as the registry gives it back: the registry's own fields taken from `got`.
fn as_stored(mut t: Tenant, got: &Tenant) -> Tenant {
    t.inserted_at.clone_from(&got.inserted_at);
    t.updated_at.clone_from(&got.updated_at);
    t.banned_at.clone_from(&got.banned_at);
    t.ban_reason.clone_from(&got.ban_reason);
    t.users
        .sort_by(|a, b| a.db_user_alias.cmp(&b.db_user_alias));
    t
}

/// The next change, within `limit`.
async fn next(rx: &mut Receiver<Change>, limit: Duration) -> Change {
    within(limit, "a change", rx.recv())
        .await
        .expect("the watch ended")
}

/// Skips changes until `want`, within `limit` in all.
async fn until(rx: &mut Receiver<Change>, want: Change, limit: Duration) {
    within(limit, &format!("{want:?}"), async {
        while let Some(c) = rx.recv().await {
            if c == want {
                return;
            }
        }
        panic!("the watch ended");
    })
    .await
}

/// Checks that a future is Send (the API's handlers run on a multi-threaded runtime).
fn send<T: Send>(t: T) -> T {
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_is_made_once_by_concurrent_opens() {
    let pg = blocking(Postgres::start);
    let info = conninfo(&pg);
    let (a, b, c) = tokio::join!(Store::open(&info), Store::open(&info), Store::open(&info));
    for s in [a, b, c] {
        s.expect("open");
    }
    Store::open(&info).await.expect("open again");
    let versions = blocking(|| pg.sql("postgres", "SELECT version FROM pgcorral.schema_version"));
    // One row, at the latest migration (3: the fleet's leases).
    assert_eq!(versions, "3");
    let tables = blocking(|| {
        pg.sql(
            "postgres",
            "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables \
             WHERE schemaname = 'pgcorral'",
        )
    });
    assert_eq!(tables, "leases,nodes,schema_version,tenant_users,tenants");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_require_is_refused() {
    let err = Store::open("host=127.0.0.1 port=1 user=postgres sslmode=require")
        .await
        .expect_err("refused");
    let StoreError::Unavailable(msg) = err;
    assert!(msg.contains("sslmode"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_written_read_listed_and_deleted() {
    let pg = blocking(Postgres::start);
    let store = Store::open(&format!(
        "postgres://postgres:pw@127.0.0.1:{}/postgres",
        pg.port
    ))
    .await
    .expect("open");

    let mut t = tenant("acme", &["bob", "admin"]);
    t.sni_hostname = Some("db.acme.example".into());
    assert_eq!(send(store.put(&t)).await.unwrap(), Put::Created);
    let got = send(store.get("acme")).await.unwrap().expect("acme");
    assert_eq!(got, as_stored(t.clone(), &got));
    assert_eq!(got.users[0].db_user_alias, "admin", "users by alias");
    let inserted = got.inserted_at.clone().expect("inserted_at");
    assert!(
        inserted.len() == 27 && inserted.ends_with('Z') && inserted.as_bytes()[10] == b'T',
        "RFC 3339: {inserted}"
    );

    // Updated: fields and users replaced, version bumped.
    t.db_port = 6543;
    t.auth_query = Some("SELECT usename, passwd FROM pg_shadow WHERE usename = $1".into());
    t.users = tenant("acme", &["carol"]).users;
    t.users[0].max_clients = None;
    t.users[0].mode_type = Mode::Session;
    assert_eq!(store.put(&t).await.unwrap(), Put::Updated);
    let got = store.get("acme").await.unwrap().expect("acme");
    assert_eq!(got, as_stored(t.clone(), &got));
    assert_eq!(got.inserted_at.as_deref(), Some(inserted.as_str()));
    let row = blocking(|| {
        pg.sql(
            "postgres",
            "SELECT version, (SELECT count(*) FROM pgcorral.tenant_users) \
             FROM pgcorral.tenants WHERE external_id = 'acme'",
        )
    });
    assert_eq!(row, "2|1");

    assert_eq!(send(store.get("nobody")).await.unwrap(), None);
    let by_sni = send(store.by_sni("DB.Acme.Example")).await.unwrap();
    assert_eq!(by_sni.map(|t| t.external_id).as_deref(), Some("acme"));
    assert_eq!(store.by_sni("other.example").await.unwrap(), None);
    // Another tenant cannot take the name.
    let mut dup = tenant("dup", &[]);
    dup.sni_hostname = Some("db.acme.example".into());
    assert!(store.put(&dup).await.is_err());

    // Listing pages in byte order.
    for id in ["b", "a", "c", "B", "we\"ird, {id}\n"] {
        store.put(&tenant(id, &["u"])).await.unwrap();
    }
    let ids = |v: Vec<Tenant>| v.into_iter().map(|t| t.external_id).collect::<Vec<_>>();
    let all = ids(send(store.list(None, 100)).await.unwrap());
    assert_eq!(all, ["B", "a", "acme", "b", "c", "we\"ird, {id}\n"]);
    assert_eq!(ids(store.list(None, 2).await.unwrap()), ["B", "a"]);
    assert_eq!(ids(store.list(Some("a"), 2).await.unwrap()), ["acme", "b"]);
    assert_eq!(ids(store.list(Some("c"), 10).await.unwrap()).len(), 1);
    assert!(store.list(Some("z"), 10).await.unwrap().is_empty());
    assert!(store.list(None, 0).await.unwrap().is_empty());

    assert!(send(store.delete("acme")).await.unwrap());
    assert!(!store.delete("acme").await.unwrap());
    assert_eq!(store.get("acme").await.unwrap(), None);
    let users = blocking(|| {
        pg.sql(
            "postgres",
            "SELECT count(*) FROM pgcorral.tenant_users WHERE tenant_external_id = 'acme'",
        )
    });
    assert_eq!(users, "0");
    send(store.ping()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bans_are_set_and_lifted() {
    let pg = blocking(Postgres::start);
    let store = Store::open(&conninfo(&pg)).await.expect("open");
    store.put(&tenant("acme", &["bob"])).await.unwrap();

    let banned = send(store.set_ban("acme", Some("unpaid")))
        .await
        .unwrap()
        .expect("acme");
    assert!(!banned.enabled());
    assert!(banned.banned_at.is_some());
    assert_eq!(banned.ban_reason.as_deref(), Some("unpaid"));
    assert_eq!(store.get("acme").await.unwrap().as_ref(), Some(&banned));
    // A put leaves the ban alone.
    store.put(&tenant("acme", &["bob"])).await.unwrap();
    assert!(!store.get("acme").await.unwrap().unwrap().enabled());

    let lifted = store.set_ban("acme", None).await.unwrap().expect("acme");
    assert!(lifted.enabled());
    assert_eq!(lifted.ban_reason, None);
    assert_eq!(store.set_ban("nobody", Some("x")).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_hears_changes_and_restarts() {
    let pg = blocking(Postgres::start);
    let info = conninfo(&pg);
    let listener = Store::open(&info).await.expect("open");
    let writer = Store::open(&info).await.expect("open");
    let mut rx = listener.watch(Duration::from_secs(3600));
    assert_eq!(next(&mut rx, Duration::from_secs(10)).await, Change::All);

    let odd = "we\"ird, {\"terminate\": 1}\n";
    for id in ["acme", odd] {
        writer.put(&tenant(id, &["bob"])).await.unwrap();
        let got = next(&mut rx, Duration::from_secs(1)).await;
        assert_eq!(got, Change::Tenant(id.into()));
    }
    writer.terminate(odd).await.unwrap();
    let got = next(&mut rx, Duration::from_secs(1)).await;
    assert_eq!(got, Change::Terminate(odd.into()));
    writer.set_ban("acme", Some("x")).await.unwrap();
    let got = next(&mut rx, Duration::from_secs(1)).await;
    assert_eq!(got, Change::Tenant("acme".into()));
    assert!(writer.delete("acme").await.unwrap());
    let got = next(&mut rx, Duration::from_secs(1)).await;
    assert_eq!(got, Change::Tenant("acme".into()));

    // Lost and back: All (notifications may have been missed), then changes again.
    blocking(|| pg.pg_ctl("restart"));
    until(&mut rx, Change::All, Duration::from_secs(20)).await;
    writer
        .put(&tenant("after", &[]))
        .await
        .expect("put after restart");
    until(
        &mut rx,
        Change::Tenant("after".into()),
        Duration::from_secs(5),
    )
    .await;

    // The periodic re-read.
    let mut often = listener.watch(Duration::from_millis(200));
    assert_eq!(next(&mut often, Duration::from_secs(10)).await, Change::All);
    assert_eq!(next(&mut often, Duration::from_secs(2)).await, Change::All);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_while_the_server_is_down() {
    let pg = blocking(Postgres::start);
    let store = Store::open(&conninfo(&pg)).await.expect("open");
    store.put(&tenant("acme", &[])).await.unwrap();

    blocking(|| pg.pg_ctl("stop"));
    for _ in 0..2 {
        let err = store.get("acme").await.expect_err("an error while down");
        let StoreError::Unavailable(msg) = err;
        assert!(!msg.contains("s3cr3t"), "{msg}");
    }
    assert!(store.ping().await.is_err());
    let err = Store::open(&conninfo(&pg)).await.expect_err("no open");
    assert!(!err.to_string().contains("s3cr3t"), "{err}");

    blocking(|| pg.pg_ctl("start"));
    let got = store.get("acme").await.expect("back").expect("acme");
    assert_eq!(got.external_id, "acme");
    store.ping().await.unwrap();
}

/// The fleet's leases in a real registry: three nodes renewing at once, over and over, with
/// wants that change, never hold shares adding up to more than the cap; a node that stops
/// renewing keeps its share until its lease is older than the TTL and its registry session
/// is gone, then the others take it; a node that wants and holds nothing gives its lease
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_never_add_up_to_more_than_the_cap() {
    use pgcorral::tenants::store::leases::{Ask, Grant};
    let pg = blocking(Postgres::start);
    let store = Store::open(&conninfo(&pg)).await.unwrap();
    let ask = |want: u32, held: u32| Ask {
        tenant: "acme".into(),
        database: "app".into(),
        user: "alice".into(),
        cap: 6,
        want,
        held,
    };
    let (ttl, limit) = (Duration::from_secs(2), Duration::from_secs(5));
    // Each node on a connection of its own, renewing 30 times with wants that vary; a node
    // holds what its last grant sized its pools to.
    let nodes = (1..=3u16).map(|peer| {
        let store = store.separate();
        tokio::spawn(async move {
            let mut held = 0;
            for round in 0..30u32 {
                let want = (round * u32::from(peer)) % 7;
                let g = store
                    .lease(peer, &[ask(want, held)], ttl, limit)
                    .await
                    .unwrap();
                assert!(g[0].size <= g[0].share);
                held = g[0].size;
            }
        })
    });
    let sums = tokio::spawn({
        let pg_port = pg.port;
        async move {
            let c = support::connect(pg_port, "postgres", None, "postgres")
                .await
                .unwrap();
            let mut peak = 0i64;
            for _ in 0..200 {
                let n: i64 = c
                    .query_one("SELECT coalesce(sum(share), 0) FROM pgcorral.leases", &[])
                    .await
                    .unwrap()
                    .get(0);
                peak = peak.max(n);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            peak
        }
    });
    for n in nodes {
        n.await.unwrap();
    }
    let peak = sums.await.unwrap();
    assert!(peak <= 6, "shares added up to {peak}");

    // Node 1 holds 6; node 2 gets nothing while node 1's lease lives, all of it after.
    let (one, two) = (store.separate(), store.separate());
    blocking(|| pg.sql("postgres", "DELETE FROM pgcorral.leases"));
    assert_eq!(
        one.lease(1, &[ask(6, 0)], ttl, limit).await.unwrap(),
        vec![Grant { share: 6, size: 6 }]
    );
    assert_eq!(
        two.lease(2, &[ask(6, 0)], ttl, limit).await.unwrap(),
        vec![Grant { share: 0, size: 0 }]
    );
    // Node 1's lease outlives its TTL while its session is in the registry (it may be cut off
    // and still hold servers); once the session is gone too, its share is taken.
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    assert_eq!(
        two.lease(2, &[ask(6, 0)], ttl, limit).await.unwrap(),
        vec![Grant { share: 0, size: 0 }]
    );
    drop(one);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        two.lease(2, &[ask(6, 0)], ttl, limit).await.unwrap(),
        vec![Grant { share: 6, size: 6 }]
    );
    // Wanting and holding nothing: the lease is given back (its row goes).
    two.lease(2, &[ask(0, 0)], ttl, limit).await.unwrap();
    let rows = blocking(|| pg.sql("postgres", "SELECT count(*) FROM pgcorral.leases"));
    assert_eq!(rows, "0");
}
