//! The handlers: tenants shown, put, banned, deleted, terminated and listed; health.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::check::{self, Errors};
use super::doc::{
    ErrorBody, TenantCreate, TenantData, TenantList, Terminated, ToggleTenantBan, Unhealthy,
    ValidationErrors,
};
use super::{error, Api};
use crate::logsafe::Esc;
use crate::tenants::model::Tenant;
use crate::tenants::store::{Put, StoreError};

/// How long the health check waits for the registry.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// A tenant as the API shows it: every field but the users' `db_password`.
pub fn view(tenant: &Tenant) -> Value {
    let mut v = serde_json::to_value(tenant).unwrap_or_default();
    if let Some(users) = v.get_mut("users").and_then(Value::as_array_mut) {
        for user in users.iter_mut().filter_map(Value::as_object_mut) {
            user.remove("db_password");
        }
    }
    v
}

fn data(status: StatusCode, tenant: &Tenant) -> Response {
    (status, Json(json!({ "data": view(tenant) }))).into_response()
}

fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not found")
}

fn invalid(errors: Errors) -> Response {
    let body = json!({ "errors": errors });
    (StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response()
}

/// The registry failed: 503, its reason logged (the store's messages are safe to log).
fn unavailable(e: StoreError) -> Response {
    tracing::warn!(error = %e, "tenant API: registry request failed");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "tenant registry unavailable",
    )
}

/// A JSON request body, or why not: 413 past the size limit, 400 when malformed.
fn parse(body: Result<Bytes, BytesRejection>) -> Result<Value, (StatusCode, String)> {
    let bytes = body.map_err(|r| (r.status(), r.body_text()))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("malformed JSON: {e}")))
}

/// Fetch a tenant.
#[utoipa::path(get, path = "/api/tenants/{external_id}", tag = "tenants",
    params(("external_id" = String, Path, description = "The tenant's external id")),
    responses(
        (status = 200, description = "The tenant", body = TenantData),
        (status = 403, description = "No valid bearer token", body = ErrorBody),
        (status = 404, description = "No such tenant", body = ErrorBody),
    ),
    security(("bearer" = [])))]
pub async fn show(State(api): State<Api>, Path(id): Path<String>) -> Response {
    match api.store.get(&id).await {
        Ok(Some(t)) => data(StatusCode::OK, &t),
        Ok(None) => not_found(),
        Err(e) => unavailable(e),
    }
}

/// Create or update a tenant. On update, fields left out keep their values; `users`, when
/// given, replaces every user (each with its `db_password`).
#[utoipa::path(put, path = "/api/tenants/{external_id}", tag = "tenants",
    params(("external_id" = String, Path, description = "The tenant's external id")),
    request_body = TenantCreate,
    responses(
        (status = 200, description = "Updated", body = TenantData),
        (status = 201, description = "Created", body = TenantData),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 403, description = "No valid bearer token", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 422, description = "Invalid fields", body = ValidationErrors),
    ),
    security(("bearer" = [])))]
pub async fn put(
    State(api): State<Api>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match parse(body) {
        Ok(v) => v,
        Err((status, why)) => return error(status, &why),
    };
    if !check::external_id_errors(&id).is_empty() {
        // Checked before the registry is asked about it.
        return invalid(check::put(&id, &body, None).err().unwrap_or_default());
    }
    let old = match api.store.get(&id).await {
        Ok(old) => old,
        Err(e) => return unavailable(e),
    };
    let tenant = match check::put(&id, &body, old.as_ref()) {
        Ok(t) => t,
        Err(errors) => return invalid(errors),
    };
    if let Some(host) = &tenant.sni_hostname {
        // The registry keeps SNI host names unique (case-insensitive): say which field.
        match api.store.by_sni(host).await {
            Ok(Some(other)) if other.external_id != id => {
                let field = (
                    "sni_hostname".to_owned(),
                    vec!["has already been taken".into()],
                );
                return invalid(Errors::from([field]));
            }
            Ok(_) => {}
            Err(e) => return unavailable(e),
        }
    }
    let status = match api.store.put(&tenant).await {
        Ok(Put::Created) => StatusCode::CREATED,
        Ok(Put::Updated) => StatusCode::OK,
        Err(e) => return unavailable(e),
    };
    let what = if status == StatusCode::CREATED {
        "created"
    } else {
        "updated"
    };
    tracing::info!(tenant = %Esc(&id), "tenant API: tenant {what}");
    match api.store.get(&id).await {
        Ok(Some(stored)) => data(status, &stored),
        Ok(None) | Err(_) => data(status, &tenant),
    }
}

/// Ban or unban a tenant: `banned` true (with `ban_reason`) closes its clients and refuses new
/// ones; false lifts the ban.
#[utoipa::path(patch, path = "/api/tenants/{external_id}", tag = "tenants",
    params(("external_id" = String, Path, description = "The tenant's external id")),
    request_body = ToggleTenantBan,
    responses(
        (status = 200, description = "The tenant", body = TenantData),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 403, description = "No valid bearer token", body = ErrorBody),
        (status = 404, description = "No such tenant", body = ErrorBody),
        (status = 422, description = "Invalid fields", body = ValidationErrors),
    ),
    security(("bearer" = [])))]
pub async fn patch(
    State(api): State<Api>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let reason = match parse(body).map(|b| check::ban(&b)) {
        Ok(Ok(reason)) => reason,
        Ok(Err(errors)) => return invalid(errors),
        Err((status, why)) => return error(status, &why),
    };
    match api.store.set_ban(&id, reason.as_deref()).await {
        Ok(Some(t)) => {
            let what = if reason.is_some() {
                "banned"
            } else {
                "unbanned"
            };
            tracing::info!(tenant = %Esc(&id), "tenant API: tenant {what}");
            data(StatusCode::OK, &t)
        }
        Ok(None) => not_found(),
        Err(e) => unavailable(e),
    }
}

/// Delete a tenant.
#[utoipa::path(delete, path = "/api/tenants/{external_id}", tag = "tenants",
    params(("external_id" = String, Path, description = "The tenant's external id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "No valid bearer token", body = ErrorBody),
        (status = 404, description = "No such tenant", body = ErrorBody),
    ),
    security(("bearer" = [])))]
pub async fn delete(State(api): State<Api>, Path(id): Path<String>) -> Response {
    match api.store.delete(&id).await {
        Ok(true) => {
            tracing::info!(tenant = %Esc(&id), "tenant API: tenant deleted");
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(false) => not_found(),
        Err(e) => unavailable(e),
    }
}

/// Close the tenant's clients and servers on every node (through the registry).
#[utoipa::path(get, path = "/api/tenants/{external_id}/terminate", tag = "tenants",
    params(("external_id" = String, Path, description = "The tenant's external id")),
    responses(
        (status = 200, description = "Every node was asked to close them", body = Terminated),
        (status = 403, description = "No valid bearer token", body = ErrorBody),
        (status = 404, description = "No such tenant", body = ErrorBody),
    ),
    security(("bearer" = [])))]
pub async fn terminate(State(api): State<Api>, Path(id): Path<String>) -> Response {
    match api.store.get(&id).await {
        Ok(Some(_)) => {}
        Ok(None) => return not_found(),
        Err(e) => return unavailable(e),
    }
    if let Err(e) = api.store.terminate(&id).await {
        return unavailable(e);
    }
    tracing::warn!(tenant = %Esc(&id), "tenant API: tenant terminated");
    Json(json!({ "result": "ok" })).into_response()
}

/// List tenants by external id, a page at a time: pass a page's `next` as `after` for the
/// following one (`next` is null on the last page).
#[utoipa::path(get, path = "/api/tenants", tag = "tenants",
    params(
        ("limit" = Option<u32>, Query, description = "Tenants per page: 1 to 1000 (100)"),
        ("after" = Option<String>, Query, description = "List after this external id"),
    ),
    responses(
        (status = 200, description = "A page of tenants", body = TenantList),
        (status = 403, description = "No valid bearer token", body = ErrorBody),
        (status = 422, description = "Invalid limit", body = ValidationErrors),
    ),
    security(("bearer" = [])))]
pub async fn list(
    State(api): State<Api>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(q) => q,
        Err(r) => return error(StatusCode::BAD_REQUEST, &r.body_text()),
    };
    let limit = match check::limit(query.get("limit").map(String::as_str)) {
        Ok(n) => n,
        Err(errors) => return invalid(errors),
    };
    let after = query
        .get("after")
        .map(String::as_str)
        .filter(|a| !a.is_empty());
    let mut page = match api.store.list(after, limit + 1).await {
        Ok(page) => page,
        Err(e) => return unavailable(e),
    };
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        page.last().map(|t| t.external_id.clone())
    });
    let tenants: Vec<Value> = page.iter().map(view).collect();
    Json(json!({ "data": tenants, "next": next.flatten() })).into_response()
}

/// Supavisor's health check: 204, else 503 with the failed checks (`tenant_registry` when the
/// registry does not answer). Served at `/api/health`, without a token.
#[utoipa::path(get, path = "/api/health", tag = "health",
    responses(
        (status = 204, description = "Healthy"),
        (status = 503, description = "Unhealthy", body = Unhealthy),
    ))]
pub async fn health(State(api): State<Api>) -> Response {
    let mut failed = api.node.health().err().unwrap_or_default();
    match tokio::time::timeout(PING_TIMEOUT, api.store.ping()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "tenant API: health: registry failed");
            failed.push("tenant_registry".into());
        }
        Err(_) => failed.push("tenant_registry".into()),
    }
    unhealthy(failed)
}

/// `/healthz`, for load balancers and Kubernetes: whether this node serves (not stopping),
/// whatever the registry: a registry that is down costs new tenants' first logins only, so a
/// node stays in rotation for the clients of tenants it has loaded and of the file's
/// databases.
pub async fn healthz(State(api): State<Api>) -> Response {
    unhealthy(api.node.health().err().unwrap_or_default())
}

/// 204 without failed checks, else 503 naming them.
fn unhealthy(failed: Vec<String>) -> Response {
    if failed.is_empty() {
        return StatusCode::NO_CONTENT.into_response();
    }
    let timestamp = OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_default();
    let body = json!({ "status": "unhealthy", "timestamp": timestamp, "failed_checks": failed });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}
