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

use super::{auth, docs};

const SECRET: &str = "s3cret";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn b64url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
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
