//! The tenant API as pgcorral nodes serve it (`api_listen`): tenants created, changed and
//! deleted through one node's API while clients run on two nodes; the OpenAPI document
//! parsed and checked by an OpenAPI 3.1 library; the Swagger UI page rendered by headless
//! Chromium, listing the tenant endpoints.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::tenants::{http, login_to, until, SECRET};
use support::{blocking, db_message, PgOptions, Pooler, Postgres};

/// A tenant database server checking passwords, with role alice.
fn tenant_server() -> Postgres {
    let pg = blocking(|| {
        Postgres::start_with(PgOptions {
            auth: "scram-sha-256",
            ..PgOptions::default()
        })
    });
    blocking(|| pg.sql("postgres", "CREATE ROLE alice LOGIN PASSWORD 'alice pw'"));
    pg
}

/// A node of the fleet: the registry's tenants, the API on a free port.
async fn node(registry: &Postgres) -> (Pooler, SocketAddr) {
    let api_port = support::free_port();
    let node = Pooler::start(&format!(
        "[general]\nlisten_port = 0\nauth_type = \"scram-sha-256\"\n\
         tenant_registry = \"host=127.0.0.1 port={} user=postgres dbname=postgres\"\n\
         api_listen = \"127.0.0.1:{api_port}\"\napi_jwt_secret = \"{SECRET}\"\n",
        registry.port
    ))
    .await;
    (node, SocketAddr::from(([127, 0, 0, 1], api_port)))
}

async fn login(node: &Pooler, user: &str, pw: &str) -> Result<tokio_postgres::Client, String> {
    login_to(node.port(), user, pw, "postgres", None).await
}

/// A registry, a tenant server and two nodes, with tenant `acme` created through the first
/// node's API (user alice, pool size 2).
async fn fleet_with_acme() -> (Postgres, Postgres, Pooler, SocketAddr, Pooler) {
    let registry = blocking(Postgres::start);
    let pg = tenant_server();
    let (a, api_a) = node(&registry).await;
    let (b, _) = node(&registry).await;
    let (status, body) = http(
        api_a,
        "PUT",
        "/api/tenants/acme",
        Some(&tenant_json(&pg, 2)),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert!(!body.contains("alice pw"), "{body}");
    (registry, pg, a, api_a, b)
}

fn tenant_json(pg: &Postgres, pool_size: u32) -> String {
    serde_json::json!({"tenant": {
        "db_host": "127.0.0.1", "db_port": pg.port, "db_database": "postgres",
        "require_user": true,
        "users": [{"db_user": "alice", "db_password": "alice pw", "pool_size": pool_size,
                   "mode_type": "transaction"}]
    }})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_created_changed_and_deleted_through_the_api_reach_both_nodes() {
    let (_registry, pg, a, api_a, b) = fleet_with_acme().await;
    let on_a = login(&a, "alice.acme", "alice pw").await.unwrap();
    let on_b = login(&b, "alice.acme", "alice pw").await.unwrap();
    // A transaction open on each node across the change below.
    on_a.batch_execute("BEGIN; SELECT 1").await.unwrap();
    on_b.batch_execute("BEGIN; SELECT 1").await.unwrap();

    // Changed (pool size 2 → 3): both nodes' pools take it within a second, and the open
    // transactions go on.
    let (status, body) = http(
        api_a,
        "PUT",
        "/api/tenants/acme",
        Some(&tenant_json(&pg, 3)),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    for node in [&a, &b] {
        let took = until("the new pool size", Duration::from_secs(1), || async {
            // The configured size: the cap of the node's lease (its pools are as large as
            // its share, here what its one client uses).
            let tenants = node.services.tenants.get().unwrap();
            tenants
                .all()
                .iter()
                .flat_map(|t| t.pools.demands())
                .any(|n| n.user == "alice" && n.cap == 3)
        })
        .await;
        eprintln!("the change reached a node after {took:?}");
    }
    for c in [&on_a, &on_b] {
        c.batch_execute("SELECT 2; COMMIT").await.unwrap();
    }

    // Banned through the API: both nodes close the tenant's clients.
    let (status, body) = http(
        api_a,
        "PATCH",
        "/api/tenants/acme",
        Some(r#"{"banned": true, "ban_reason": "maintenance"}"#),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    for c in [&on_a, &on_b] {
        until("the client closed", Duration::from_secs(1), || async {
            c.simple_query("SELECT 1").await.is_err()
        })
        .await;
    }
    let e = login(&b, "alice.acme", "alice pw").await.unwrap_err();
    assert!(e.contains("is disabled: maintenance"), "{e}");

    // Unbanned, then terminated (clients closed, the tenant stays), then deleted.
    let (status, _) = http(
        api_a,
        "PATCH",
        "/api/tenants/acme",
        Some(r#"{"banned": false}"#),
    )
    .await;
    assert_eq!(status, 200);
    let c = until("unbanned", Duration::from_secs(1), || async {
        login(&b, "alice.acme", "alice pw").await.is_ok()
    })
    .await;
    eprintln!("unbanned after {c:?}");
    let c = login(&b, "alice.acme", "alice pw").await.unwrap();
    let (status, body) = http(api_a, "GET", "/api/tenants/acme/terminate", None).await;
    assert_eq!(status, 200, "{body}");
    until("terminated", Duration::from_secs(1), || async {
        c.simple_query("SELECT 1").await.is_err()
    })
    .await;
    login(&b, "alice.acme", "alice pw").await.unwrap();
    let (status, _) = http(api_a, "DELETE", "/api/tenants/acme", None).await;
    assert_eq!(status, 204);
    let (status, _) = http(api_a, "GET", "/api/tenants/acme", None).await;
    assert_eq!(status, 404);
    until("deleted", Duration::from_secs(1), || async {
        login(&b, "alice.acme", "alice pw")
            .await
            .is_err_and(|e| e.contains("does not exist"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_valid_and_swagger_ui_lists_the_tenant_endpoints() {
    let registry = blocking(Postgres::start);
    let (_node, api) = node(&registry).await;
    let (status, doc) = http(api, "GET", "/api/openapi", None).await;
    assert_eq!(status, 200, "{doc}");
    let spec = oas3::from_json(&doc).unwrap_or_else(|e| panic!("not OpenAPI 3.1: {e}\n{doc}"));
    assert!(spec.openapi.starts_with("3.1"), "{}", spec.openapi);
    let paths: Vec<String> = spec.paths.as_ref().unwrap().keys().cloned().collect();
    for p in ["/api/tenants/{external_id}", "/api/tenants", "/api/health"] {
        assert!(paths.iter().any(|k| k == p), "{p} missing from {paths:?}");
    }
    // Every operation's request body and responses resolve (no dangling $ref).
    for (path, method, op) in spec.operations() {
        if let Some(body) = &op.request_body {
            body.resolve(&spec)
                .unwrap_or_else(|e| panic!("{method} {path}: request body: {e}"));
        }
        for (code, r) in &op.responses(&spec) {
            for (ty, media) in &r.content {
                if let Some(s) = &media.schema {
                    s.resolve(&spec)
                        .unwrap_or_else(|e| panic!("{method} {path} {code} {ty}: {e}"));
                }
            }
        }
    }

    // Swagger UI, rendered by a real browser: the page lists the tenant endpoints.
    let url = format!("http://{api}/swaggerui/");
    let out = blocking(|| {
        std::process::Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--virtual-time-budget=15000",
                "--dump-dom",
                &url,
            ])
            .output()
            .expect("chromium (Debian's package) runs")
    });
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("/api/tenants/{external_id}") && dom.contains("opblock"),
        "Swagger UI did not list the tenant endpoints: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        &dom[..dom.len().min(4000)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_sent_to_the_wrong_node_cancels_the_right_query() {
    let (_registry, _pg, a, _, b) = fleet_with_acme().await;
    // Each node took its own peer id in the registry.
    let ids = [&a, &b].map(|n| n.services.tenants.get().unwrap().fleet.peer_id);
    assert!(ids[0] != 0 && ids[0] != ids[1], "{ids:?}");

    let c = login(&a, "alice.acme", "alice pw").await.unwrap();
    let token = c.cancel_token();
    let query = tokio::spawn(async move { c.simple_query("SELECT pg_sleep(30)").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Sent to node b, which learns of node a from the registry within a heartbeat or two.
    let start = Instant::now();
    while !query.is_finished() {
        assert!(start.elapsed() < Duration::from_secs(15), "not cancelled");
        let to_b = tokio::net::TcpStream::connect(("127.0.0.1", b.port()))
            .await
            .unwrap();
        token
            .cancel_query_raw(to_b, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let e = query.await.unwrap().unwrap_err();
    assert!(
        db_message(&e).contains("canceling statement due to user request"),
        "{e}"
    );
}
