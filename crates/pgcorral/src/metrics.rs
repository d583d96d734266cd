//! The Prometheus endpoint (`metrics_addr`): `/metrics` in the text exposition format and
//! `/healthz`.

use tokio::net::TcpListener;

use crate::services::Services;

/// Serves the endpoint until shutdown.
pub async fn serve(listener: TcpListener, services: Services) {
    // Placeholder while the endpoint is written: accept nothing until shutdown.
    let _ = &listener;
    services.shutdown.cancelled().await;
}
