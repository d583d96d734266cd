//! The tenant REST API over HTTP against a real registry: a tenant created, read (never with a
//! password), updated, listed a page at a time, banned and unbanned, terminated and deleted;
//! every invalid field named in a 422; malformed and oversized bodies; tokens refused with 403;
//! health with the node well and not; the OpenAPI document and Swagger UI; shutdown.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use jsonwebtoken::{crypto, encode, Algorithm, EncodingKey, Header};
use pgcorral::api::{self, Api, Node};
use pgcorral::tenants::store::Store;
use serde_json::{json, Value};
use support::{blocking, within, Postgres};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(20);
const SECRET: &str = "api-secret";
const PASSWORD: &str = "pw-never-shown";

/// This node, its health set by the test.
struct TestNode(AtomicBool);

impl Node for TestNode {
    fn terminate(&self, _external_id: &str) -> usize {
        0
    }
    fn health(&self) -> Result<(), Vec<String>> {
        match self.0.load(Ordering::SeqCst) {
            true => Ok(()),
            false => Err(vec!["listeners".into()]),
        }
    }
}

/// The API served on a port of its own, with its registry's server.
struct Server {
    addr: SocketAddr,
    node: Arc<TestNode>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    token: String,
    _pg: Postgres,
}

async fn start() -> Server {
    let pg = blocking(Postgres::start);
    let info = format!("host=127.0.0.1 port={} user=postgres", pg.port);
    let store = within(LIMIT, "open", Store::open(&info)).await;
    let store = store.expect("open the registry");
    let node = Arc::new(TestNode(AtomicBool::new(true)));
    let (jwt_secret, node_dyn) = (SECRET.into(), node.clone());
    let api = Api {
        store,
        jwt_secret,
        node: node_dyn,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(api::serve(listener, api, shutdown.clone()));
    let token = token(&json!({"exp": now() + 300, "role": "admin"}), SECRET);
    Server {
        addr,
        node,
        shutdown,
        task,
        token,
        _pg: pg,
    }
}

/// One HTTP answer.
struct Answer {
    status: u16,
    headers: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    fn header(&self, name_and_value: &str) -> bool {
        self.headers.to_ascii_lowercase().contains(name_and_value)
    }
    /// The fields a 422 names.
    fn fields(&self) -> Vec<String> {
        assert_eq!(self.status, 422, "{}", self.body);
        let errors = self.json()["errors"].clone();
        errors.as_object().unwrap().keys().cloned().collect()
    }
}

impl Server {
    async fn get(&self, path: &str) -> Answer {
        self.req("GET", path, None).await
    }
    async fn put(&self, id: &str, body: &Value) -> Answer {
        self.req("PUT", &format!("/api/tenants/{id}"), Some(body))
            .await
    }
    async fn patch(&self, id: &str, body: Value) -> Answer {
        self.req("PATCH", &format!("/api/tenants/{id}"), Some(&body))
            .await
    }
    /// The status of a request with a good token and no body.
    async fn status(&self, method: &str, path: &str) -> u16 {
        self.req(method, path, None).await.status
    }
    /// A request with a good token and a JSON body.
    async fn req(&self, method: &str, path: &str, body: Option<&Value>) -> Answer {
        let body = body.map(Value::to_string).unwrap_or_default();
        self.raw(method, path, Some(&self.token), body.as_bytes())
            .await
    }

    /// Sends one request over a fresh connection (`Connection: close`) and reads the answer
    /// (whose body has a Content-Length: the API's bodies are whole).
    async fn raw(&self, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> Answer {
        let addr = self.addr;
        let exchange = async {
            let mut s = TcpStream::connect(addr).await.expect("connect to the API");
            let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n"));
            let head = format!(
                "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{}\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                auth.unwrap_or_default(),
                body.len()
            );
            s.write_all(head.as_bytes()).await.unwrap();
            // Read while writing: an oversized body is refused before the server reads it all.
            let (mut r, mut w) = s.split();
            let mut raw = Vec::new();
            let _ = tokio::join!(w.write_all(body), r.read_to_end(&mut raw));
            raw
        };
        let raw = within(LIMIT, &format!("{method} {path}"), exchange).await;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (headers, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
        let status = headers[9..12].parse().unwrap();
        Answer {
            status,
            headers: headers.to_owned(),
            body: body.to_owned(),
        }
    }
}

fn now() -> u64 {
    UNIX_EPOCH.elapsed().unwrap().as_secs()
}

fn token(claims: &Value, secret: &str) -> String {
    let key = EncodingKey::from_secret(secret.as_bytes());
    encode(&Header::new(Algorithm::HS256), claims, &key).unwrap()
}

fn b64url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A token with header `alg`, signed with HMAC-SHA256 by the right secret.
fn forged(alg: &str) -> String {
    let header = json!({"alg": alg, "typ": "JWT"}).to_string();
    let claims = json!({"exp": now() + 60}).to_string();
    let (header, claims) = (b64url(header.as_bytes()), b64url(claims.as_bytes()));
    let msg = format!("{header}.{claims}");
    let key = EncodingKey::from_secret(SECRET.as_bytes());
    let signature = crypto::sign(msg.as_bytes(), &key, Algorithm::HS256).unwrap();
    format!("{msg}.{signature}")
}

/// A tenant whose users log in through auth_query as its manager, `postgres`.
fn tenant(sni: &str) -> Value {
    json!({"tenant": {
        "db_host": "127.0.0.1", "db_port": 5432, "db_database": "postgres", "require_user": false,
        "allow_list": ["10.0.0.0/8", "::/0"], "sni_hostname": sni, "unknown_field": [1, 2],
        "users": [
            {"db_user": "postgres", "db_password": PASSWORD, "pool_size": 5,
             "mode_type": "transaction", "is_manager": true},
            {"db_user": "app", "db_user_alias": "web", "db_password": PASSWORD, "pool_size": 2,
             "mode_type": "session", "max_clients": 50}
        ]
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_from_create_to_delete() {
    let s = start().await;
    let put = s.put("dev", &tenant("dev.example.com")).await;
    assert_eq!(put.status, 201, "{}", put.body);
    assert!(
        put.header("content-type: application/json"),
        "{}",
        put.headers
    );
    let got = s.get("/api/tenants/dev").await;
    assert_eq!(got.status, 200, "{}", got.body);
    for a in [&put, &got] {
        let shown = a.body.contains("db_password") || a.body.contains(PASSWORD);
        assert!(!shown, "{}", a.body);
    }
    let data = &got.json()["data"];
    assert_eq!(data["external_id"], "dev");
    assert_eq!(data["db_port"], 5432);
    assert_eq!(data["users"][1]["db_user_alias"], "web");
    assert!(data["inserted_at"].is_string(), "{data}");
    assert!(data["banned_at"].is_null(), "{data}");

    let up = s
        .put(
            "dev",
            &json!({"tenant": {"db_port": 6432, "external_id": "dev"}}),
        )
        .await;
    assert_eq!(up.status, 200, "{}", up.body);
    let data = &up.json()["data"];
    assert_eq!(data["db_port"], 6432);
    assert_eq!(data["users"].as_array().unwrap().len(), 2, "users kept");
    assert_eq!(data["sni_hostname"], "dev.example.com");

    let taken = s.put("t1", &tenant("DEV.example.com")).await;
    assert_eq!(taken.fields(), ["sni_hostname"], "dev's SNI host name");
    for id in ["t1", "t2", "t3", "t4"] {
        let put = s.put(id, &tenant(&format!("{id}.example.com"))).await;
        assert_eq!(put.status, 201, "{}", put.body);
    }
    let (mut seen, mut path) = (Vec::new(), "/api/tenants?limit=2".to_owned());
    loop {
        let page = s.get(&path).await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(!page.body.contains(PASSWORD));
        let page = page.json();
        let ids = page["data"].as_array().unwrap();
        assert!(ids.len() <= 2);
        seen.extend(ids.iter().map(|t| t["external_id"].clone()));
        match page["next"].as_str() {
            Some(next) => path = format!("/api/tenants?limit=2&after={next}"),
            None => break,
        }
    }
    assert_eq!(json!(seen), json!(["dev", "t1", "t2", "t3", "t4"]));
    let all = s.get("/api/tenants").await.json();
    assert_eq!(all["data"].as_array().unwrap().len(), 5);
    assert!(all["next"].is_null());

    let ban = json!({"banned": true, "ban_reason": "abuse"});
    let banned = s.patch("dev", ban.clone()).await;
    assert_eq!(banned.status, 200, "{}", banned.body);
    let data = &banned.json()["data"];
    assert!(data["banned_at"].is_string(), "{data}");
    assert_eq!(data["ban_reason"], "abuse");
    let no_reason = s.patch("dev", json!({"banned": true})).await;
    assert_eq!(no_reason.fields(), ["ban_reason"]);
    let unbanned = s.patch("dev", json!({"banned": false})).await;
    assert_eq!(unbanned.status, 200, "{}", unbanned.body);
    assert!(unbanned.json()["data"]["banned_at"].is_null());
    assert_eq!(s.patch("nobody", ban).await.status, 404);

    let term = s.get("/api/tenants/dev/terminate").await;
    assert_eq!((term.status, term.json()), (200, json!({"result": "ok"})));
    assert_eq!(s.status("GET", "/api/tenants/nobody/terminate").await, 404);

    let del = s.req("DELETE", "/api/tenants/dev", None).await;
    assert_eq!((del.status, del.body.as_str()), (204, ""));
    let gone = s.get("/api/tenants/dev").await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.json(), json!({"error": "not found"}));
    assert_eq!(s.status("DELETE", "/api/tenants/dev").await, 404);

    s.shutdown.cancel();
    within(LIMIT, "the API to stop", s.task).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_are_refused_naming_the_field() {
    let s = start().await;
    // JSON pointers into the tenant, the value put there, and the field named when it is not
    // the pointer's own (`/users/1/db_user` names `users[1].db_user`).
    let cases = [
        ("/db_host", Value::Null, None),
        ("/db_port", json!(65536), None),
        ("/db_port", json!("5432"), None),
        ("/db_database", json!(""), None),
        ("/require_user", Value::Null, None),
        ("/users", json!("all"), None),
        ("/users", json!([]), None),
        ("/users/1/db_user", Value::Null, None),
        ("/users/1/db_password", Value::Null, None),
        ("/users/1/pool_size", json!(0), None),
        ("/users/1/mode_type", json!("pipelined"), None),
        ("/users/1/db_user_alias", json!("postgres"), None),
        ("/users/1/is_manager", json!(true), Some("users")),
        ("/users/0/is_manager", json!(false), Some("users")),
        (
            "/allow_list",
            json!(["10.0.0.0/8", "::1"]),
            Some("allow_list[1]"),
        ),
        ("/sni_hostname", json!("bad host!"), None),
        ("/upstream_ssl", json!(true), None),
        ("/upstream_verify", json!("peer"), None),
        ("/external_id", json!("other"), None),
        ("/external_id", json!(7), None),
        (
            "/replicas",
            json!([{"host": "r"}]),
            Some("replicas[0].port"),
        ),
    ];
    for (pointer, value, field) in cases {
        let mut body = tenant("dev.example.com");
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        body["tenant"].pointer_mut(parent).unwrap()[key] = value;
        let a = s.put("dev", &body).await;
        let path = pointer[1..].replace("/1/", "[1].").replace("/0/", "[0].");
        assert_eq!(
            a.fields(),
            [field.unwrap_or(&path)],
            "{pointer}: {}",
            a.body
        );
        if key == "upstream_ssl" {
            assert!(a.body.contains("server_tls_sslmode"), "{}", a.body);
        }
    }
    let no_tenant = s.put("dev", &json!({"db_host": "x"})).await;
    assert_eq!(no_tenant.fields(), ["tenant"]);
    let mut create = tenant("dev.example.com");
    create["tenant"]
        .as_object_mut()
        .unwrap()
        .remove("require_user");
    assert_eq!(s.put("dev", &create).await.fields(), ["require_user"]);
    for id in ["x".repeat(64).as_str(), "a%20b", "tab%09"] {
        assert_eq!(s.put(id, &tenant("a.b")).await.fields(), ["external_id"]);
    }
    assert_eq!(
        s.status("GET", "/api/tenants/dev").await,
        404,
        "nothing stored"
    );

    let token = Some(s.token.as_str());
    let malformed = s
        .raw("PUT", "/api/tenants/dev", token, b"{\"tenant\": ")
        .await;
    assert_eq!(malformed.status, 400, "{}", malformed.body);
    assert!(malformed.json()["error"].is_string());
    let big = vec![b' '; 2 << 20];
    let too_big = s.raw("PUT", "/api/tenants/dev", token, &big).await;
    assert_eq!(too_big.status, 413, "{}", too_big.body);
    for q in ["limit=0", "limit=1001", "limit=x"] {
        let a = s.get(&format!("/api/tenants?{q}")).await;
        assert_eq!(a.fields(), ["limit"], "{q}");
    }
    s.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_health_and_documents() {
    let s = start().await;
    let unsigned = format!("{}.{}.", b64url(br#"{"alg":"none"}"#), b64url(b"{}"));
    let refused = [
        None,
        Some("garbage".to_owned()),
        Some(token(&json!({"exp": now() - 10}), SECRET)),
        Some(token(&json!({"exp": now() + 60}), "not-the-secret")),
        Some(unsigned),
        Some(forged("none")),
        Some(forged("RS256")),
        Some(forged("HS512")),
    ];
    let routes = [
        ("GET", "/api/tenants"),
        ("GET", "/api/tenants/dev"),
        ("PUT", "/api/tenants/dev"),
        ("PATCH", "/api/tenants/dev"),
        ("DELETE", "/api/tenants/dev"),
        ("GET", "/api/tenants/dev/terminate"),
    ];
    let body = tenant("dev.example.com").to_string();
    for tok in &refused {
        for (method, path) in routes {
            let a = s.raw(method, path, tok.as_deref(), body.as_bytes()).await;
            assert_eq!(a.status, 403, "{method} {path} with {tok:?}: {}", a.body);
            assert!(a.json()["error"].is_string());
        }
    }
    let no_exp = token(&json!({"iat": now()}), SECRET);
    let a = s.raw("GET", "/api/tenants/dev", Some(&no_exp), b"").await;
    assert_eq!(a.status, 404, "a token without exp is accepted");

    for path in ["/api/health", "/healthz"] {
        assert_eq!(s.raw("GET", path, None, b"").await.status, 204, "{path}");
    }
    s.node.0.store(false, Ordering::SeqCst);
    for path in ["/api/health", "/healthz"] {
        let a = s.raw("GET", path, None, b"").await;
        assert_eq!(a.status, 503, "{path}");
        let v = a.json();
        assert_eq!(v["status"], "unhealthy");
        assert_eq!(v["failed_checks"], json!(["listeners"]));
    }

    let doc = s.raw("GET", "/api/openapi", None, b"").await;
    assert!(doc.status == 200 && doc.header("content-type: application/json"));
    let doc = doc.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in ["", "/{external_id}", "/{external_id}/terminate"] {
        assert!(
            doc["paths"][format!("/api/tenants{path}")].is_object(),
            "{path}"
        );
    }
    let bare = s.raw("GET", "/swaggerui", None, b"").await;
    assert!((300..400).contains(&bare.status), "{}", bare.headers);
    assert!(bare.header("location: /swaggerui/"), "{}", bare.headers);
    let ui = s.raw("GET", "/swaggerui/", None, b"").await;
    assert!(
        ui.status == 200 && ui.header("content-type: text/html"),
        "{}",
        ui.headers
    );
    assert!(
        ui.body.to_ascii_lowercase().contains("swagger"),
        "{}",
        ui.body
    );
    let init = s
        .raw("GET", "/swaggerui/swagger-initializer.js", None, b"")
        .await;
    assert!(
        init.status == 200 && init.body.contains("/api/openapi"),
        "{}",
        init.body
    );
    assert_eq!(s.raw("GET", "/nowhere", None, b"").await.status, 404);

    s.shutdown.cancel();
    within(LIMIT, "the API to stop", s.task).await.unwrap();
    assert!(
        TcpStream::connect(s.addr).await.is_err(),
        "still listening after shutdown"
    );
}
