//! The tenant REST API, in Supavisor's shapes: tenants in the registry, health, OpenAPI, Swagger UI.

mod auth;
mod check;
mod doc;
mod tenants;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{middleware, BoxError, Json, Router};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::timeout::error::Elapsed;
use tower::timeout::TimeoutLayer;
use tower::ServiceBuilder;
use utoipa_swagger_ui::SwaggerUi;

use crate::tenants::store::Store;

pub use doc::openapi;

/// Request bodies larger than this are refused (413).
const BODY_LIMIT: usize = 1 << 20;
/// How long one request may take (the registry included) before it is answered 503.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests handled at once; more wait for a turn (within [`REQUEST_TIMEOUT`]).
const IN_FLIGHT: usize = 64;
/// How long open connections get to finish once shutdown fires.
const DRAIN: Duration = Duration::from_secs(5);

/// What the API needs of the pooler on this node.
pub trait Node: Send + Sync + 'static {
    /// Closes the tenant's clients and servers on this node; returns how many clients.
    fn terminate(&self, external_id: &str) -> usize;
    /// Whether this node can serve (for /healthz and /api/health): Err(reasons) when not.
    fn health(&self) -> Result<(), Vec<String>>;
}

/// The API's state: the registry, the secret bearer JWTs are signed with, this node.
#[derive(Clone)]
pub struct Api {
    pub store: Store,
    /// HS256 key of the bearer tokens; empty refuses every token.
    pub jwt_secret: Arc<str>,
    pub node: Arc<dyn Node>,
}

/// Every route: `/api/tenants...` behind bearer JWTs; `/api/health`, `/healthz`,
/// `/api/openapi` and `/swaggerui` (which redirects to `/swaggerui/`) open.
pub fn router(api: Api) -> Router {
    let tenants = Router::new()
        .route("/api/tenants", get(tenants::list))
        .route(
            "/api/tenants/{external_id}",
            get(tenants::show)
                .put(tenants::put)
                .patch(tenants::patch)
                .delete(tenants::delete),
        )
        .route(
            "/api/tenants/{external_id}/terminate",
            get(tenants::terminate),
        )
        .route_layer(middleware::from_fn_with_state(
            api.jwt_secret.clone(),
            auth::require,
        ));
    let open = Router::new()
        .route("/api/health", get(tenants::health))
        .route("/healthz", get(tenants::healthz));
    tenants
        .merge(open)
        .with_state(api)
        .merge(docs())
        .fallback(not_found)
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(overloaded))
                .layer(TimeoutLayer::new(REQUEST_TIMEOUT))
                .layer(GlobalConcurrencyLimitLayer::new(IN_FLIGHT))
                .layer(DefaultBodyLimit::max(BODY_LIMIT)),
        )
}

/// `/api/openapi` (the document as JSON) and Swagger UI under `/swaggerui/`; the UI's files
/// are compiled into the binary. `/swaggerui` redirects (303) to `/swaggerui/`, where the page's
/// relative links to its scripts resolve.
fn docs() -> Router {
    SwaggerUi::new("/swaggerui")
        .url("/api/openapi", openapi())
        .into()
}

/// Serves the API until `shutdown`, then lets open connections finish for up to [`DRAIN`].
pub async fn serve(listener: TcpListener, api: Api, shutdown: CancellationToken) {
    let server = axum::serve(listener, router(api))
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .into_future();
    let drained = async {
        shutdown.cancelled().await;
        tokio::time::sleep(DRAIN).await;
    };
    tokio::select! {
        r = server => if let Err(e) = r {
            tracing::warn!(error = %e, "tenant API: server failed");
        },
        () = drained => tracing::warn!("tenant API: connections still open after the drain"),
    }
}

/// An answer `{"error": message}`.
fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not found")
}

/// A request that timed out (or a layer that failed): 503.
async fn overloaded(e: BoxError) -> Response {
    if e.is::<Elapsed>() {
        error(StatusCode::SERVICE_UNAVAILABLE, "request timed out")
    } else {
        error(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
    }
}

#[cfg(test)]
mod tests;
