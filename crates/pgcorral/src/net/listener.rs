//! The accept loop: binds listen_addr:listen_port, spawns one task per client, and on shutdown
//! stops accepting, lets clients finish their transactions, and waits up to shutdown_timeout.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::services::Services;

/// A bound pooler, ready to run.
pub struct Server {
    listener: TcpListener,
    services: Services,
}

impl Server {
    /// Binds the configured address (port 0 picks a free port).
    pub async fn bind(config: Config) -> std::io::Result<Server> {
        let host = match config.general.listen_addr.as_str() {
            "*" => "0.0.0.0",
            "localhost" => "127.0.0.1",
            h => h,
        };
        let listener = TcpListener::bind((host, config.general.listen_port)).await?;
        Ok(Server {
            listener,
            services: Services::new(config),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound listener has an address")
    }

    /// The shared services, e.g. to trigger shutdown.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Accepts clients until `services().shutdown` fires, then drains for up to shutdown_timeout.
    pub async fn run(self) {
        let Server { listener, services } = self;
        let shutdown = services.shutdown.clone();
        let mut backoff = Duration::from_millis(5);
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = listener.accept() => r,
            };
            match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(5);
                    let _ = stream.set_nodelay(true);
                    let s = services.clone();
                    services.tasks.spawn(crate::client::serve(stream, peer, s));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
        drop(listener);
        let timeout = services.config.load().general.shutdown_timeout();
        tracing::info!(
            clients = services.clients.load(std::sync::atomic::Ordering::Relaxed),
            "shutting down: no new connections; waiting up to {} ms for transactions to finish",
            timeout.as_millis()
        );
        services.tasks.close();
        if tokio::time::timeout(timeout, services.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("shutdown_timeout reached; closing remaining connections");
        }
    }
}
