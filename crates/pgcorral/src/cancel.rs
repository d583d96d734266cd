//! Query cancellation around the data path: each client registers the key it was given, points
//! it at the server it is using while attached, and a CancelRequest with that key is forwarded
//! to that server with the server's own key. A key of a peer process (`peer_id` in its low 16
//! bits) goes to that peer; other unknown keys are ignored, as PostgreSQL does.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use bytes::BytesMut;
use corral_rt::sock::{connect_tcp, connect_unix};
use corral_rt::stream::Stream;
use corral_rt::timer;
use parking_lot::Mutex;

use crate::config::{Config, PeerEntry};
use crate::logsafe;
use crate::server::connect::start_tls;
use crate::server::{CancelKey, CancelTls, ServerAddr};

/// Where a client's cancel goes right now.
#[derive(Default)]
pub struct CancelSlot {
    target: Mutex<Target>,
}

/// The servers a client is using.
#[derive(Default)]
enum Target {
    #[default]
    None,
    One(Arc<CancelKey>),
    /// A read asked of several shards: a server of each.
    Many(Arc<Vec<Arc<CancelKey>>>),
}

impl CancelSlot {
    #[inline]
    pub fn set(&self, key: Option<Arc<CancelKey>>) {
        *self.target.lock() = key.map_or(Target::None, Target::One);
    }

    /// Points the slot at several servers at once (`set(None)` detaches them all).
    pub fn set_many(&self, keys: Vec<Arc<CancelKey>>) {
        *self.target.lock() = Target::Many(Arc::new(keys));
    }

    /// The servers the client is using, each counted as having a cancel on its way until the
    /// returned guards drop. Counted under the slot's lock, which the client takes to detach
    /// (`set(None)`) before it releases the servers: each release sees its count.
    fn claim(&self) -> Vec<InFlight> {
        let target = self.target.lock();
        let keys: Vec<Arc<CancelKey>> = match &*target {
            Target::None => Vec::new(),
            Target::One(k) => vec![k.clone()],
            Target::Many(ks) => ks.iter().cloned().collect(),
        };
        keys.into_iter()
            .map(|key| {
                key.in_flight.start();
                InFlight(key)
            })
            .collect()
    }
}

/// A cancel request on its way to a server (see [`CancelKey::in_flight`]).
struct InFlight(Arc<CancelKey>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.land();
    }
}

/// Keys handed to clients → their slots.
#[derive(Default)]
pub struct CancelMap {
    map: Mutex<HashMap<(i32, i32), Arc<CancelSlot>>>,
}

impl CancelMap {
    /// Registers a client under `pid` and a fresh random secret; returns the secret. With
    /// peering (`peer_id` > 0) the secret's low 16 bits are `peer_id` (and only its high 16
    /// bits random), so that a peer can tell whose key it is.
    pub fn register(&self, pid: i32, slot: Arc<CancelSlot>, peer_id: u16) -> i32 {
        loop {
            let secret: i32 = match peer_id {
                0 => rand::random(),
                id => (rand::random::<i32>() & !0xffff) | i32::from(id),
            };
            if self.adopt(pid, secret, slot.clone()) {
                return secret;
            }
        }
    }

    /// Registers a key another process handed out (`-R`: its client moved here); false when
    /// the key is taken here already.
    pub fn adopt(&self, pid: i32, secret: i32, slot: Arc<CancelSlot>) -> bool {
        match self.map.lock().entry((pid, secret)) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(slot);
                true
            }
            std::collections::hash_map::Entry::Occupied(_) => false,
        }
    }

    pub fn unregister(&self, pid: i32, secret: i32) {
        self.map.lock().remove(&(pid, secret));
    }

    /// Forwards a client's CancelRequest to the server it is using, if any, giving up after
    /// `wait` (cancel_wait_timeout; `None` = no limit). A key this process did not hand out
    /// goes to `peer` when given: the peer whose id the key carries.
    pub async fn cancel(
        &self,
        pid: i32,
        secret: i32,
        wait: Option<std::time::Duration>,
        peer: Option<&PeerEntry>,
    ) {
        let (known, targets) = {
            let map = self.map.lock();
            let slot = map.get(&(pid, secret));
            (slot.is_some(), slot.map(|s| s.claim()).unwrap_or_default())
        };
        if targets.is_empty() {
            match (known, peer) {
                (false, Some(peer)) => forward_to_peer(peer, pid, secret, wait).await,
                _ => tracing::debug!(
                    pid,
                    "cancel request with an unknown key or an idle client; ignored"
                ),
            }
            return;
        }
        // One server almost always; a read across shards has one per shard, each sent its
        // cancel at once.
        if let [InFlight(one)] = &targets[..] {
            return forward(one, wait).await;
        }
        let mut sends: Vec<_> = targets
            .iter()
            .map(|InFlight(key)| Box::pin(forward(key, wait)))
            .collect();
        std::future::poll_fn(|cx| {
            sends.retain_mut(|f| f.as_mut().poll(cx).is_pending());
            match sends.is_empty() {
                true => std::task::Poll::Ready(()),
                false => std::task::Poll::Pending,
            }
        })
        .await;
    }
}

/// Sends a cancel to `key`'s server, giving up after `wait`; a failure is logged.
async fn forward(key: &CancelKey, wait: Option<std::time::Duration>) {
    let sent = within(wait, send_cancel(key)).await;
    match sent {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            tracing::info!(server = %key.addr, error = %logsafe::Esc(&e), "could not forward cancel request")
        }
        None => tracing::info!(
            server = %key.addr,
            "cancel_wait_timeout: the cancel request could not be forwarded in time; dropped"
        ),
    }
}

/// `f`, given up after `wait` (cancel_wait_timeout; `None` = no limit): `None` when it ran out.
async fn within<F: std::future::Future>(
    wait: Option<std::time::Duration>,
    f: F,
) -> Option<F::Output> {
    match wait {
        Some(w) => timer::timeout(w, f).await.ok(),
        None => Some(f.await),
    }
}

/// The peer a key belongs to, by the id in its secret's low 16 bits: `None` without peering,
/// for this process's own id, or an id `[peers]` does not list.
pub fn peer_of(config: &Config, secret: i32) -> Option<&PeerEntry> {
    let own = config.general.peer_id;
    let id = (secret & 0xffff) as u16;
    (own != 0 && id != own)
        .then(|| config.peers.get(&id.to_string()))
        .flatten()
}

/// Hands a CancelRequest on to the peer process that gave the client its key (over its Unix
/// socket when `host` is a directory, as PgBouncer's `[peers]`).
async fn forward_to_peer(
    peer: &PeerEntry,
    pid: i32,
    secret: i32,
    wait: Option<std::time::Duration>,
) {
    let send = async {
        let stream = match peer.host.starts_with('/') {
            true => {
                Stream::Unix(connect_unix(format!("{}/.s.PGSQL.{}", peer.host, peer.port)).await?)
            }
            false => Stream::Plain(connect_tcp((peer.host.as_str(), peer.port)).await?),
        };
        send_request(stream, pid, secret).await
    };
    let sent = within(wait, send).await;
    if !matches!(sent, Some(Ok(()))) {
        tracing::info!(peer = %logsafe::Esc(&peer.host), port = peer.port, "could not forward a cancel request to a peer");
    }
}

/// Sends a CancelRequest for `key` to its server and waits until the server hangs up. Over
/// TLS when the server connection is TLS (after an SSLRequest, as for a login): the request
/// carries the backend's secret key.
pub(crate) async fn send_cancel(key: &CancelKey) -> std::io::Result<()> {
    let stream = match &key.addr {
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
    send_request(stream, key.pid, key.secret).await
}

/// Sends a CancelRequest for (`pid`, `secret`) on `stream` and waits until the other end
/// hangs up.
async fn send_request(mut stream: Stream, pid: i32, secret: i32) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(16);
    pgwire::encode::cancel_request(&mut buf, pid, secret);
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
