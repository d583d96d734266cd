//! The Prometheus endpoint (`metrics_addr`): `/metrics` in the OpenMetrics text format and
//! `/healthz`, served over HTTP/1.1 with one task per connection until shutdown.

mod buckets;
mod collect;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use corral_rt::timer;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::logsafe;
use crate::services::Services;

/// The content type of `/metrics` (what `prometheus_client::encoding::text` writes).
pub const CONTENT_TYPE_METRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long a connection may take to send a request's headers (hyper's default, made explicit).
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long in-flight requests get to finish once shutdown fires.
const DRAIN: Duration = Duration::from_secs(1);

/// Serves the endpoint until shutdown, on the main thread's runtime (a task per request).
#[allow(clippy::disallowed_methods)]
pub async fn serve(listener: TcpListener, services: Services) {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collect::Pgcorral(services.clone())));
    let registry = Arc::new(registry);
    let shutdown = services.shutdown.clone();
    let mut backoff = Duration::from_millis(5);
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = listener.accept() => r,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: accept failed");
                timer::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        backoff = Duration::from_millis(5);
        let (registry, services) = (registry.clone(), services.clone());
        tokio::spawn(async move {
            let shutdown = services.shutdown.clone();
            let svc = service_fn(move |req| {
                let r = respond(&req, &registry, &services);
                async move { Ok::<_, Infallible>(r) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            let done = tokio::select! {
                r = conn.as_mut() => Some(r),
                _ = shutdown.cancelled() => None,
            };
            let r = match done {
                Some(r) => r,
                None => {
                    conn.as_mut().graceful_shutdown();
                    match timer::timeout(DRAIN, conn).await {
                        Ok(r) => r,
                        Err(_) => return,
                    }
                }
            };
            if let Err(e) = r {
                tracing::debug!(error = %logsafe::Esc(&e), "metrics: connection ended");
            }
        });
    }
}

/// Answers one request.
fn respond(
    req: &Request<Incoming>,
    registry: &Registry,
    services: &Services,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz") {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found\n",
        );
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "method not allowed\n",
        );
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if path == "/healthz" {
        return if services.shutdown.is_stopping() {
            reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                "shutting down\n",
            )
        } else {
            reply(StatusCode::OK, "text/plain; charset=utf-8", "ok\n")
        };
    }
    let mut body = String::with_capacity(16 * 1024);
    match prometheus_client::encoding::text::encode(&mut body, registry) {
        Ok(()) => reply(StatusCode::OK, CONTENT_TYPE_METRICS, body),
        Err(_) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            "could not encode metrics\n",
        ),
    }
}

fn reply(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}
