//! Unit tests of the API: validation, tokens, and the routes that need no registry.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use axum::{middleware, Router};
use http_body_util::BodyExt;
use jsonwebtoken::{crypto, encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use tower::Service;

use super::check::{self, cidr, host_name};
use super::{auth, docs, tenants};

const SECRET: &str = "s3cret";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn b64url(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn token(claims: &Value, secret: &str) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

/// A token with any header, signed HS256 with `SECRET` (what an algorithm confusion sends).
fn forged(header: &Value, claims: &Value) -> String {
    let msg = format!(
        "{}.{}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    );
    let sig = crypto::sign(
        msg.as_bytes(),
        &EncodingKey::from_secret(SECRET.as_bytes()),
        Algorithm::HS256,
    );
    format!("{msg}.{}", sig.unwrap())
}

#[test]
fn tokens() {
    let fresh = json!({"exp": now() + 60});
    assert_eq!(auth::verify(&token(&fresh, SECRET), SECRET), Ok(()));
    assert_eq!(
        auth::verify(&token(&json!({"iat": now()}), SECRET), SECRET),
        Ok(()),
        "no exp"
    );
    let aud = json!({"aud": "x", "role": "service"});
    assert_eq!(auth::verify(&token(&aud, SECRET), SECRET), Ok(()));
    let expired = token(&json!({"exp": now() - 5}), SECRET);
    assert_eq!(auth::verify(&expired, SECRET), Err("token expired"));
    assert!(
        auth::verify(&token(&json!({"exp": 1.5}), SECRET), SECRET).is_err(),
        "float past"
    );
    assert!(
        auth::verify(&token(&json!({"exp": -1}), SECRET), SECRET).is_err(),
        "negative"
    );
    assert!(auth::verify(&token(&json!({"exp": "never"}), SECRET), SECRET).is_err());
    assert!(auth::verify(&token(&json!({"nbf": now() + 600}), SECRET), SECRET).is_err());
    assert!(
        auth::verify(&token(&fresh, "other"), SECRET).is_err(),
        "wrong secret"
    );
    assert!(
        auth::verify(&token(&fresh, ""), "").is_err(),
        "empty secret"
    );
    assert!(auth::verify("garbage", SECRET).is_err());
    for alg in ["none", "RS256", "HS384", "HS512", "ES256"] {
        let t = forged(&json!({"alg": alg, "typ": "JWT"}), &fresh);
        assert!(auth::verify(&t, SECRET).is_err(), "{alg}");
    }
    let unsigned = format!(
        "{}.{}.",
        b64url(br#"{"alg":"none"}"#),
        b64url(br#"{"a":1}"#)
    );
    assert!(auth::verify(&unsigned, SECRET).is_err());
    let ok = forged(&json!({"alg": "HS256"}), &fresh);
    assert_eq!(
        auth::verify(&ok, SECRET),
        Ok(()),
        "the forging helper itself works"
    );
}

#[test]
fn cidrs_and_host_names() {
    for good in [
        "0.0.0.0/0",
        "::/0",
        "10.1.2.0/24",
        "10.1.2.3/32",
        "fe80::1/128",
        "10.0.0.1/8",
    ] {
        assert!(cidr(good), "{good}");
    }
    for bad in [
        "0.0.0.0",
        "10.0.0.0/33",
        "::/129",
        "foo",
        "10.0.0.0/",
        "10.0.0.0/+8",
        "/8",
        "1.2.3/8",
        "fe80::1%eth0/64",
    ] {
        assert!(!cidr(bad), "{bad}");
    }
    for good in ["db.example.com", "a", "x-1.example"] {
        assert!(host_name(good), "{good}");
    }
    for bad in [
        "",
        "a..b",
        "-a.com",
        "a-.com",
        "a b",
        "under_score.com",
        "1.2.3.4",
        "x.",
        &"a".repeat(64),
    ] {
        assert!(!host_name(bad), "{bad}");
    }
}

fn body() -> Value {
    json!({"tenant": {
        "db_host": "localhost", "db_port": 5432, "db_database": "postgres", "require_user": true,
        "users": [{"db_user": "u", "db_password": "p", "pool_size": 3, "mode_type": "session"}],
        "something_unknown": {"ignored": true},
    }})
}

/// The fields a body's errors name.
fn fields(id: &str, body: &Value) -> Vec<String> {
    check::put(id, body, None)
        .unwrap_err()
        .into_keys()
        .collect()
}

fn with(path: &[&str], value: Value) -> Value {
    let mut b = body();
    let mut at = &mut b["tenant"];
    for key in &path[..path.len() - 1] {
        at = match key.parse::<usize>() {
            Ok(i) => &mut at[i],
            Err(_) => &mut at[*key],
        };
    }
    at[path[path.len() - 1]] = value;
    b
}

#[test]
fn a_valid_create_gets_the_defaults() {
    let t = check::put("dev", &body(), None).unwrap();
    assert_eq!(
        (t.external_id.as_str(), t.db_port, t.default_pool_size),
        ("dev", 5432, 15)
    );
    assert_eq!(t.allow_list, ["0.0.0.0/0", "::/0"]);
    assert_eq!(t.users[0].db_user_alias, "u");
    assert_eq!(t.users[0].pool_checkout_timeout, 60_000);
    let view = tenants::view(&t);
    assert!(!view.to_string().contains("db_password"), "{view}");
}

#[test]
fn each_invalid_field_is_named() {
    let cases: Vec<(Value, &str)> = vec![
        (with(&["db_host"], Value::Null), "db_host"),
        (with(&["db_port"], json!(0)), "db_port"),
        (with(&["db_port"], json!(70000)), "db_port"),
        (with(&["db_port"], json!("5432")), "db_port"),
        (with(&["db_database"], json!(7)), "db_database"),
        (with(&["require_user"], Value::Null), "require_user"),
        (with(&["require_user"], json!("yes")), "require_user"),
        (with(&["users"], json!({})), "users"),
        (with(&["users"], json!([])), "users"),
        (
            with(&["users", "0", "db_password"], Value::Null),
            "users[0].db_password",
        ),
        (
            with(&["users", "0", "db_user"], json!("")),
            "users[0].db_user",
        ),
        (
            with(&["users", "0", "pool_size"], json!(0)),
            "users[0].pool_size",
        ),
        (
            with(&["users", "0", "mode_type"], json!("bogus")),
            "users[0].mode_type",
        ),
        (
            with(&["users", "0", "is_manager"], json!(1)),
            "users[0].is_manager",
        ),
        (
            with(&["allow_list"], json!(["10.0.0.0/8", "10.0.0.1"])),
            "allow_list[1]",
        ),
        (with(&["allow_list"], json!("0.0.0.0/0")), "allow_list"),
        (with(&["sni_hostname"], json!("not a host")), "sni_hostname"),
        (with(&["upstream_ssl"], json!(true)), "upstream_ssl"),
        (with(&["upstream_verify"], json!("peer")), "upstream_verify"),
        (with(&["ip_version"], json!("v5")), "ip_version"),
        (
            with(&["replicas"], json!([{"host": "r"}])),
            "replicas[0].port",
        ),
        (with(&["external_id"], json!("other")), "external_id"),
        (with(&["use_jit"], json!(true)), "use_jit"),
        (json!({"tenant": 5}), "tenant"),
        (json!({}), "tenant"),
    ];
    for (body, field) in cases {
        assert_eq!(fields("dev", &body), [field], "{body}");
    }
    let mut create = body();
    create["tenant"]
        .as_object_mut()
        .unwrap()
        .remove("require_user");
    assert_eq!(fields("dev", &create), ["require_user"]);
    for id in ["", "has space", "tab\t", &"x".repeat(64)] {
        assert_eq!(fields(id, &body()), ["external_id"], "{id:?}");
    }
    let msg = &check::put("dev", &with(&["upstream_ssl"], json!(true)), None).unwrap_err()
        ["upstream_ssl"];
    assert!(msg[0].contains("server_tls_sslmode"), "{msg:?}");
}

#[test]
fn managers() {
    let user = |name: &str, manager: bool| json!({"db_user": name, "db_password": "p", "pool_size": 1, "mode_type": "transaction", "is_manager": manager});
    let two = with(&["users"], json!([user("a", true), user("b", true)]));
    assert_eq!(fields("dev", &two), ["users"]);
    let none = with(&["require_user"], json!(false));
    assert_eq!(fields("dev", &none), ["users"]);
    let one = with(&["users"], json!([user("a", true), user("b", false)]));
    let mut one = one;
    one["tenant"]["require_user"] = json!(false);
    assert!(check::put("dev", &one, None).is_ok());
    let twice = with(&["users"], json!([user("a", false), user("a", false)]));
    assert_eq!(fields("dev", &twice), ["users[1].db_user_alias"]);
}

#[test]
fn an_update_keeps_what_it_leaves_out() {
    let mut old = check::put("dev", &body(), None).unwrap();
    old.banned_at = Some("2026-01-01T00:00:00Z".into());
    old.inserted_at = Some("2025-01-01T00:00:00Z".into());
    let t = check::put("dev", &json!({"tenant": {"db_port": 6432}}), Some(&old)).unwrap();
    assert_eq!(t.db_port, 6432);
    assert_eq!(
        (t.db_host.as_str(), &t.users, &t.banned_at),
        ("localhost", &old.users, &old.banned_at)
    );
    assert_eq!(t.inserted_at, old.inserted_at);
    let e = check::put(
        "dev",
        &json!({"tenant": {"require_user": false}}),
        Some(&old),
    );
    assert_eq!(e.unwrap_err().into_keys().collect::<Vec<_>>(), ["users"]);
}

#[test]
fn bans_and_limits() {
    assert_eq!(
        check::ban(&json!({"banned": true, "ban_reason": "abuse"})),
        Ok(Some("abuse".into()))
    );
    assert_eq!(check::ban(&json!({"banned": "false"})), Ok(None));
    let keys = |v: Value| check::ban(&v).unwrap_err().into_keys().collect::<Vec<_>>();
    assert_eq!(keys(json!({"banned": true})), ["ban_reason"]);
    assert_eq!(keys(json!({"banned": 1})), ["banned"]);
    assert_eq!(keys(json!({})), ["banned"]);
    assert_eq!(
        keys(json!({"banned": true, "ban_reason": "x", "banned_until": "2030-01-01"})),
        ["banned_until"]
    );
    assert_eq!(check::limit(None), Ok(100));
    assert_eq!(check::limit(Some("1000")), Ok(1000));
    for bad in ["0", "1001", "-1", "x", ""] {
        assert!(check::limit(Some(bad)).is_err(), "{bad}");
    }
}

async fn call(router: &mut Router, req: Request<Body>) -> (StatusCode, String) {
    let resp = router.call(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

fn get_req(path: &str, auth: Option<&str>) -> Request<Body> {
    let mut r = Request::get(path);
    if let Some(a) = auth {
        r = r.header("authorization", a);
    }
    r.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn the_middleware_refuses_with_403() {
    let secret: Arc<str> = SECRET.into();
    let mut r = Router::new()
        .route("/x", get(|| async { "in" }))
        .route_layer(middleware::from_fn_with_state(secret, auth::require));
    let good = format!("Bearer {}", token(&json!({"exp": now() + 60}), SECRET));
    assert_eq!(
        call(&mut r, get_req("/x", Some(&good))).await,
        (StatusCode::OK, "in".into())
    );
    let lower = good.replacen("Bearer", "bearer", 1);
    assert_eq!(
        call(&mut r, get_req("/x", Some(&lower))).await.0,
        StatusCode::OK
    );
    let expired = format!("Bearer {}", token(&json!({"exp": now() - 5}), SECRET));
    for bad in [
        None,
        Some("Bearer"),
        Some("Basic abc"),
        Some("Bearer garbage"),
        Some(expired.as_str()),
    ] {
        let (status, body) = call(&mut r, get_req("/x", bad)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{bad:?}");
        assert!(
            serde_json::from_str::<Value>(&body).unwrap()["error"].is_string(),
            "{body}"
        );
    }
}

#[tokio::test]
async fn openapi_and_swagger_ui() {
    let mut r = docs();
    let (status, body) = call(&mut r, get_req("/api/openapi", None)).await;
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3."),
        "{}",
        doc["openapi"]
    );
    for path in [
        "/api/tenants",
        "/api/tenants/{external_id}",
        "/api/tenants/{external_id}/terminate",
    ] {
        assert!(doc["paths"][path].is_object(), "{path}");
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert!(!doc["paths"]["/api/tenants/{external_id}"]["get"]["security"].is_null());
    let resp = r.call(get_req("/swaggerui", None)).await.unwrap();
    assert!(resp.status().is_redirection());
    assert_eq!(resp.headers()["location"], "/swaggerui/");
    let (status, body) = call(&mut r, get_req("/swaggerui/", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("swagger-ui"), "{body}");
    let (status, js) = call(&mut r, get_req("/swaggerui/swagger-initializer.js", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(js.contains("/api/openapi"), "{js}");
}
