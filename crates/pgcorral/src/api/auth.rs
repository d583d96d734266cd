//! Bearer JWTs for the tenant routes: HS256 signed with the API's secret, `exp` honoured.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use super::error;

/// Middleware: runs the request only with `Authorization: Bearer <token>` that [`verify`]
/// accepts; otherwise 403 `{"error": ...}`, as Supavisor answers. The token is never logged.
pub async fn require(State(secret): State<Arc<str>>, req: Request, next: Next) -> Response {
    match bearer(req.headers()).and_then(|token| verify(token, &secret)) {
        Ok(()) => next.run(req).await,
        Err(why) => {
            tracing::debug!(why, "tenant API: request refused");
            error(StatusCode::FORBIDDEN, why)
        }
    }
}

/// The token of the one `Authorization: Bearer` header (the scheme in any case).
fn bearer(headers: &HeaderMap) -> Result<&str, &'static str> {
    const MISSING: &str = "missing bearer token (Authorization: Bearer <JWT>)";
    let mut all = headers.get_all(AUTHORIZATION).iter();
    let (Some(value), None) = (all.next(), all.next()) else {
        return Err(MISSING);
    };
    let value = value.to_str().map_err(|_| MISSING)?;
    match value.trim().split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(token.trim())
        }
        _ => Err(MISSING),
    }
}

/// Checks a token: its signature must be HS256 with `secret` (any other algorithm, `none`
/// included, is refused, and an empty secret refuses every token); `exp`, when present, must be
/// a number in the future and `nbf` one in the past, with no leeway.
///
/// A token without `exp` is accepted, as Supavisor accepts it (its documented example token
/// carries only `iat`): the secret is the credential, and changing it revokes every token.
/// Issue tokens with `exp` to bound their lives. `aud` and other claims are not checked.
pub fn verify(token: &str, secret: &str) -> Result<(), &'static str> {
    const INVALID: &str = "invalid token";
    if secret.is_empty() {
        return Err("the API's JWT secret is not set: no token is accepted");
    }
    let mut rules = Validation::new(Algorithm::HS256);
    rules.required_spec_claims.clear();
    rules.leeway = 0;
    rules.validate_exp = true;
    rules.validate_nbf = true;
    rules.validate_aud = false;
    let key = DecodingKey::from_secret(secret.as_bytes());
    let data = decode::<Map<String, Value>>(token, &key, &rules).map_err(|e| match e.kind() {
        ErrorKind::ExpiredSignature => "token expired",
        ErrorKind::ImmatureSignature => "token not yet valid (nbf)",
        _ => INVALID,
    })?;
    // jsonwebtoken skips an `exp` or `nbf` that is not an unsigned integer: check them here.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let claim = |name| match data.claims.get(name) {
        None => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or(INVALID),
    };
    if claim("exp")?.is_some_and(|exp| exp <= now) {
        return Err("token expired");
    }
    if claim("nbf")?.is_some_and(|nbf| nbf > now) {
        return Err("token not yet valid (nbf)");
    }
    Ok(())
}
