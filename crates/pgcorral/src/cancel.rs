//! Query cancellation around the data path: each client registers the key it was given, points
//! it at the server it is using while attached, and a CancelRequest with that key is forwarded
//! to that server with the server's own key. Unknown keys are ignored, as PostgreSQL does.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::BytesMut;
use corral_rt::sock::{connect_tcp, connect_unix};
use corral_rt::stream::Stream;
use corral_rt::timer;
use parking_lot::Mutex;

use crate::logsafe;
use crate::server::connect::start_tls;
use crate::server::{CancelKey, CancelTls, ServerAddr};

/// Where a client's cancel goes right now.
#[derive(Default)]
pub struct CancelSlot {
    target: Mutex<Option<CancelKey>>,
}

impl CancelSlot {
    #[inline]
    pub fn set(&self, key: Option<CancelKey>) {
        *self.target.lock() = key;
    }
}

/// Keys handed to clients → their slots.
#[derive(Default)]
pub struct CancelMap {
    map: Mutex<HashMap<(i32, i32), Arc<CancelSlot>>>,
}

impl CancelMap {
    /// Registers a client under `pid` and a fresh random secret; returns the secret.
    pub fn register(&self, pid: i32, slot: Arc<CancelSlot>) -> i32 {
        let mut map = self.map.lock();
        loop {
            let secret: i32 = rand::random();
            if let std::collections::hash_map::Entry::Vacant(e) = map.entry((pid, secret)) {
                e.insert(slot);
                return secret;
            }
        }
    }

    pub fn unregister(&self, pid: i32, secret: i32) {
        self.map.lock().remove(&(pid, secret));
    }

    /// Forwards a client's CancelRequest to the server it is using, if any, giving up after
    /// `wait` (cancel_wait_timeout; `None` = no limit).
    pub async fn cancel(&self, pid: i32, secret: i32, wait: Option<std::time::Duration>) {
        let target = {
            let map = self.map.lock();
            map.get(&(pid, secret))
                .and_then(|s| s.target.lock().clone())
        };
        let Some(key) = target else {
            tracing::debug!(
                pid,
                "cancel request with an unknown key or an idle client; ignored"
            );
            return;
        };
        let sent = match wait {
            Some(w) => timer::timeout(w, send_cancel(&key)).await,
            None => Ok(send_cancel(&key).await),
        };
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::info!(server = %key.addr, error = %logsafe::Esc(&e), "could not forward cancel request")
            }
            Err(_) => tracing::info!(
                server = %key.addr,
                "cancel_wait_timeout: the cancel request could not be forwarded in time; dropped"
            ),
        }
    }
}

/// Sends a CancelRequest for `key` to its server and waits until the server hangs up. Over
/// TLS when the server connection is TLS (after an SSLRequest, as for a login): the request
/// carries the backend's secret key.
pub(crate) async fn send_cancel(key: &CancelKey) -> std::io::Result<()> {
    let mut stream = match &key.addr {
        ServerAddr::Tcp(a) => {
            let tcp = connect_tcp(a).await?;
            match key.tls.as_deref() {
                Some(CancelTls {
                    host,
                    port,
                    tls: config,
                }) => match config.server.as_ref() {
                    Some(side) => start_tls(tcp, host, *port, side)
                        .await
                        .map_err(std::io::Error::other)?,
                    None => Stream::Plain(tcp),
                },
                None => Stream::Plain(tcp),
            }
        }
        ServerAddr::Unix(p) => Stream::Unix(connect_unix(&**p).await?),
    };
    let mut buf = BytesMut::with_capacity(16);
    pgwire::encode::cancel_request(&mut buf, key.pid, key.secret);
    stream.send(&buf).await?;
    // PostgreSQL closes the connection when done; wait for that so the cancel has landed.
    let mut sink = [0u8; 16];
    let _ = timer::timeout(
        std::time::Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut stream, &mut sink),
    )
    .await;
    Ok(())
}
