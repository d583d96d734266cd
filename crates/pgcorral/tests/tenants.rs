//! Tenants from a real registry, served by real pgcorral nodes to real tenant databases:
//! logins that name their tenant by user suffix and by `options`, an unknown tenant's FATAL,
//! changes heard by two nodes within a second without cutting unrelated transactions, a
//! disabled or deleted tenant's clients closed with a clear message, and a registry that goes
//! down costing only new tenants' first logins.

mod support;

use std::time::Duration;

use pgcorral::tenants::store::Store;
use pgcorral::tenants::Tenant;
use support::tenants::{login_to, until};
use support::{blocking, PgOptions, Pooler, Postgres};

/// A tenant database server checking passwords (SCRAM), with login roles alice and bob.
fn tenant_server() -> Postgres {
    let pg = blocking(|| {
        Postgres::start_with(PgOptions {
            auth: "scram-sha-256",
            ..PgOptions::default()
        })
    });
    blocking(|| {
        pg.sql(
            "postgres",
            "CREATE ROLE alice LOGIN PASSWORD 'alice pw';
             CREATE ROLE bob LOGIN PASSWORD 'bob pw';",
        );
        pg.sql("postgres", "CREATE DATABASE app OWNER alice");
    });
    pg
}

/// Tenant `id` on `pg`: users alice (listed, transaction mode) and bob (session mode).
fn tenant(id: &str, pg: &Postgres) -> Tenant {
    serde_json::from_value(serde_json::json!({
        "external_id": id,
        "db_host": "127.0.0.1",
        "db_port": pg.port,
        "db_database": "app",
        "require_user": true,
        "users": [
            {"db_user": "alice", "db_password": "alice pw", "pool_size": 2,
             "mode_type": "transaction"},
            {"db_user": "bob", "db_password": "bob pw", "pool_size": 2,
             "mode_type": "session"}
        ]
    }))
    .unwrap()
}

fn registry_conninfo(registry: &Postgres) -> String {
    format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        registry.port
    )
}

/// A node serving the registry's tenants (and no database of its own file).
async fn node(registry: &Postgres) -> Pooler {
    node_with(registry, "").await
}

/// [`node`], with `general` lines added to `[general]`.
async fn node_with(registry: &Postgres, general: &str) -> Pooler {
    Pooler::start(&format!(
        "[general]\nlisten_port = 0\nauth_type = \"scram-sha-256\"\ntenant_registry = \"{}\"\n{general}\n",
        registry_conninfo(registry)
    ))
    .await
}

/// The body of an HTTP GET of `path` at `addr`.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// Connects as `user` with `password` (and `options`), or the server's message.
async fn login(
    node: &Pooler,
    user: &str,
    password: &str,
    db: &str,
    options: Option<&str>,
) -> Result<tokio_postgres::Client, String> {
    login_to(node.port(), user, password, db, options).await
}

/// Tenant `id` as `node` has it loaded.
fn seen(node: &Pooler, id: &str) -> Option<std::sync::Arc<Tenant>> {
    let tenants = node.services.tenants.get()?;
    let loaded = tenants.all().into_iter().find(|t| t.id == id)?;
    Some(loaded.tenant())
}

async fn one(c: &tokio_postgres::Client, sql: &str) -> String {
    let rows = c.simple_query(sql).await.unwrap();
    rows.iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_name_their_tenant_by_user_suffix_and_options() {
    let registry = blocking(Postgres::start);
    let pg = tenant_server();
    let store = Store::open(&registry_conninfo(&registry)).await.unwrap();
    store.put(&tenant("acme", &pg)).await.unwrap();
    let node = node_with(&registry, "metrics_addr = \"127.0.0.1:0\"").await;

    let c = login(&node, "alice.acme", "alice pw", "app", None)
        .await
        .unwrap();
    assert_eq!(
        one(&c, "SELECT current_user || '@' || current_database()").await,
        "alice@app"
    );
    // libpq's default database (the user name): the tenant's database.
    let c = login(&node, "alice.acme", "alice pw", "alice.acme", None)
        .await
        .unwrap();
    assert_eq!(one(&c, "SELECT current_database()").await, "app");
    // Named in options; its other settings still reach the server.
    let c = login(
        &node,
        "bob",
        "bob pw",
        "app",
        Some("-c reference=acme -c application_name=by\\ options"),
    )
    .await
    .unwrap();
    assert_eq!(
        one(
            &c,
            "SELECT current_user || '/' || current_setting('application_name')"
        )
        .await,
        "bob/by options"
    );
    // A wrong password, a user the tenant does not list, a tenant that does not exist.
    let e = login(&node, "alice.acme", "wrong", "app", None)
        .await
        .unwrap_err();
    assert!(e.contains("password authentication failed"), "{e}");
    let e = login(&node, "carol.acme", "x", "app", None)
        .await
        .unwrap_err();
    assert!(e.contains("password authentication failed"), "{e}");
    let e = login(&node, "alice.nosuch", "alice pw", "app", None)
        .await
        .unwrap_err();
    assert!(e.contains("tenant \"nosuch\" does not exist"), "{e}");
    // The tenant's pools carry its label in the metrics.
    let body = http_get(node.metrics.unwrap(), "/metrics").await;
    let line = body
        .lines()
        .find(|l| l.starts_with("pgcorral_pool_size{") && l.contains("tenant=\"acme\""))
        .unwrap_or_else(|| panic!("no tenant pool in\n{body}"));
    assert!(line.contains("user=\"alice.acme\""), "{line}");
    assert!(
        body.contains("pgcorral_tenant_pools_unreported 0"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_reach_two_nodes_within_a_second_and_disabled_tenants_are_closed() {
    let registry = blocking(Postgres::start);
    let pg = tenant_server();
    let store = Store::open(&registry_conninfo(&registry)).await.unwrap();
    store.put(&tenant("acme", &pg)).await.unwrap();
    store.put(&tenant("other", &pg)).await.unwrap();
    let (a, b) = (node(&registry).await, node(&registry).await);
    let on_a = login(&a, "bob.acme", "bob pw", "app", None).await.unwrap();
    let on_b = login(&b, "bob.acme", "bob pw", "app", None).await.unwrap();
    // An unrelated tenant's transaction, open across every change below.
    let other = login(&b, "bob.other", "bob pw", "app", None).await.unwrap();
    other.batch_execute("BEGIN; SELECT 1").await.unwrap();

    // A changed password: new logins on both nodes take it within a second; the sessions
    // already logged in go on.
    blocking(|| pg.sql("postgres", "ALTER ROLE alice PASSWORD 'new pw'"));
    let mut changed = tenant("acme", &pg);
    changed.users[0].db_password = "new pw".into();
    store.put(&changed).await.unwrap();
    for node in [&a, &b] {
        let took = until("the new password", Duration::from_secs(1), || async {
            seen(node, "acme").is_some_and(|t| t.users[0].db_password == "new pw")
        })
        .await;
        eprintln!("the change reached a node after {took:?}");
        login(node, "alice.acme", "new pw", "app", None)
            .await
            .unwrap();
    }
    assert_eq!(one(&on_a, "SELECT 1").await, "1");

    // Banned: both nodes close its clients with a clear message and refuse new ones.
    store.set_ban("acme", Some("unpaid")).await.unwrap();
    for c in [&on_a, &on_b] {
        until(
            "the tenant's client closed",
            Duration::from_secs(1),
            || async { c.simple_query("SELECT 1").await.is_err() },
        )
        .await;
    }
    let e = login(&a, "alice.acme", "new pw", "app", None)
        .await
        .unwrap_err();
    assert!(e.contains("tenant \"acme\" is disabled: unpaid"), "{e}");
    // The other tenant's transaction was not cut.
    assert_eq!(one(&other, "SELECT 2").await, "2");
    other.batch_execute("COMMIT").await.unwrap();

    // Back, then deleted.
    store.set_ban("acme", None).await.unwrap();
    until("unbanned", Duration::from_secs(1), || async {
        login(&b, "bob.acme", "bob pw", "app", None).await.is_ok()
    })
    .await;
    let c = login(&b, "bob.acme", "bob pw", "app", None).await.unwrap();
    assert!(store.delete("acme").await.unwrap());
    until(
        "the deleted tenant's client closed",
        Duration::from_secs(1),
        || async { c.simple_query("SELECT 1").await.is_err() },
    )
    .await;
    let e = login(&b, "bob.acme", "bob pw", "app", None)
        .await
        .unwrap_err();
    assert!(e.contains("does not exist"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_is_down_costs_only_new_tenants_first_logins() {
    let registry = blocking(Postgres::start);
    let pg = tenant_server();
    let store = Store::open(&registry_conninfo(&registry)).await.unwrap();
    store.put(&tenant("acme", &pg)).await.unwrap();
    store.put(&tenant("later", &pg)).await.unwrap();
    let node = node(&registry).await;
    let running = login(&node, "bob.acme", "bob pw", "app", None)
        .await
        .unwrap();
    running.batch_execute("BEGIN").await.unwrap();
    // alice has a client (and so a lease) on this node before the registry goes.
    let earlier = login(&node, "alice.acme", "alice pw", "app", None)
        .await
        .unwrap();
    assert_eq!(one(&earlier, "SELECT 1").await, "1");

    blocking(|| registry.pg_ctl("stop"));
    // Running clients go on, past several failed lease renewals too (the fleet's shares stay
    // as they are while nobody can change them); the loaded tenant takes new logins of a
    // user this node holds a lease for (within its share: alice's one server, shared in
    // transaction mode).
    assert_eq!(one(&running, "SELECT 3").await, "3");
    running.batch_execute("COMMIT").await.unwrap();
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(one(&running, "SELECT 4").await, "4");
    assert_eq!(one(&earlier, "SELECT 5").await, "5");
    let c = login(&node, "alice.acme", "alice pw", "app", None)
        .await
        .unwrap();
    assert_eq!(one(&c, "SELECT current_user").await, "alice");
    // A tenant not loaded yet cannot be read.
    let e = login(&node, "alice.later", "alice pw", "app", None)
        .await
        .unwrap_err();
    assert!(e.contains("tenant registry is unavailable"), "{e}");

    blocking(|| registry.pg_ctl("start"));
    until("the registry back", Duration::from_secs(10), || async {
        login(&node, "alice.later", "alice pw", "app", None)
            .await
            .is_ok()
    })
    .await;
}

/// psql over TLS to `node` under the host name `host` (sent as SNI; the address is
/// 127.0.0.1), or without TLS when `tls` is false; what the query printed, or its error.
async fn psql_as(
    node: &Pooler,
    host: &str,
    user: &str,
    pw: &str,
    tls: bool,
) -> Result<String, String> {
    let conn = format!(
        "host={host} hostaddr=127.0.0.1 port={} user={user} dbname=app password='{pw}' sslmode={}",
        node.port(),
        if tls { "require" } else { "disable" }
    );
    let mut c = std::process::Command::new("psql");
    c.args([&conn, "-Atq", "-c", "SELECT current_user"]);
    c.env_remove("PGSSLROOTCERT")
        .env("PGSSLCERT", "/nonexistent/none.crt");
    let out = tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap();
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_server_names_name_tenants_and_tenants_rules_are_kept() {
    let registry = blocking(Postgres::start);
    let pg = tenant_server();
    let store = Store::open(&registry_conninfo(&registry)).await.unwrap();
    store.put(&tenant("acme", &pg)).await.unwrap();
    let mut named = tenant("named", &pg);
    named.sni_hostname = Some("db.example.org".into());
    named.enforce_ssl = true;
    store.put(&named).await.unwrap();
    let mut fenced = tenant("fenced", &pg);
    fenced.allow_list = vec!["10.0.0.0/8".into()];
    store.put(&fenced).await.unwrap();
    let certs = support::tls::Certs::new();
    let node = Pooler::start(&format!(
        "[general]\nlisten_port = 0\nauth_type = \"scram-sha-256\"\ntenant_registry = \"{}\"\n\
         client_tls_sslmode = \"allow\"\nclient_tls_cert_file = \"{}\"\nclient_tls_key_file = \"{}\"\n",
        registry_conninfo(&registry),
        certs.server.cert.display(),
        certs.server.key.display()
    ))
    .await;

    // The first label of the server name, or a tenant's own sni_hostname.
    let got = psql_as(&node, "acme.tenants.test", "alice", "alice pw", true).await;
    assert_eq!(got.as_deref(), Ok("alice"));
    let got = psql_as(&node, "db.example.org", "bob", "bob pw", true).await;
    assert_eq!(got.as_deref(), Ok("bob"));
    // A server name that names no tenant: the file's databases (none here).
    let e = psql_as(&node, "nobody.tenants.test", "alice", "alice pw", true)
        .await
        .unwrap_err();
    assert!(!e.contains("tenant"), "{e}");
    // enforce_ssl: the same login without TLS is refused.
    let e = psql_as(&node, "x", "bob.named", "bob pw", false)
        .await
        .unwrap_err();
    assert!(
        e.contains("tenant \"named\" requires an SSL connection"),
        "{e}"
    );
    // allow_list: 127.0.0.1 is not in 10.0.0.0/8.
    let e = psql_as(&node, "x", "bob.fenced", "bob pw", false)
        .await
        .unwrap_err();
    assert!(
        e.contains("address not allowed for tenant \"fenced\""),
        "{e}"
    );
}
