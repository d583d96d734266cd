//! This node in the fleet: the peer id it took in the registry (the low 16 bits of its
//! clients' cancel keys), its heartbeat, and the other nodes, where a cancel request for one
//! of their clients is forwarded.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use super::store::Store;
use crate::config::PeerEntry;
use crate::logsafe::Esc;

/// How often a node says it is alive, and reads the others.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// A node not heard of for this long is gone: its peer id may be taken again.
pub const NODE_TTL: Duration = Duration::from_secs(10);

/// This node and the others.
pub struct Fleet {
    pub peer_id: u16,
    /// Where the others reach this node (its PostgreSQL port).
    host: String,
    port: u16,
    peers: ArcSwap<BTreeMap<u16, PeerEntry>>,
}

impl Fleet {
    /// Joins the fleet of `store` as `host:port` (a peer id taken in the registry).
    pub async fn join(store: &Store, host: &str, port: u16) -> Result<Fleet, String> {
        let peer_id = store
            .join(host, port, NODE_TTL)
            .await
            .map_err(|e| e.to_string())?;
        if peer_id == 0 {
            return Err("no free peer id in the registry".into());
        }
        tracing::info!(peer_id, host = %Esc(host), port, "joined the fleet");
        Ok(Fleet {
            peer_id,
            host: host.to_string(),
            port,
            peers: ArcSwap::default(),
        })
    }

    /// The node that gave a client the cancel key with `secret`, when it is another node.
    pub fn peer(&self, secret: i32) -> Option<PeerEntry> {
        let id = (secret & 0xffff) as u16;
        (id != self.peer_id)
            .then(|| self.peers.load().get(&id).cloned())
            .flatten()
    }

    /// Heartbeats and reads the other nodes every [`HEARTBEAT`], for good (on the main
    /// thread's runtime). A registry that cannot be reached keeps the nodes last read.
    pub async fn run(self: Arc<Self>, store: Store) {
        let mut tick = tokio::time::interval(HEARTBEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = store.heartbeat(self.peer_id, &self.host, self.port).await {
                tracing::warn!(error = %Esc(&e), "fleet heartbeat failed");
                continue;
            }
            match store.nodes(NODE_TTL).await {
                Ok(nodes) => {
                    let peers = nodes
                        .into_iter()
                        .filter(|n| n.peer_id != self.peer_id)
                        .map(|n| {
                            let entry = PeerEntry {
                                host: n.host,
                                port: n.port,
                            };
                            (n.peer_id, entry)
                        })
                        .collect();
                    self.peers.store(Arc::new(peers));
                }
                Err(e) => tracing::warn!(error = %Esc(&e), "fleet nodes not read"),
            }
        }
    }
}
