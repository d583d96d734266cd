//! The fleet's nodes in the registry: each node takes a free peer id (the low 16 bits of its
//! clients' cancel keys) and says where it listens, keeps its row alive with heartbeats, and
//! reads the others' rows to forward cancel requests to the node that holds the client.

use std::time::Duration;

use super::{Store, StoreError};

/// The key of `pg_advisory_xact_lock` that serialises taking peer ids ("pgc-node").
const JOIN_LOCK: i64 = 0x7067_632d_6e6f_6465;

/// Another node of the fleet, as its row says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub peer_id: u16,
    pub host: String,
    pub port: u16,
}

impl Store {
    /// Joins the fleet as `host:port`: rows whose heartbeat is older than `ttl` are removed,
    /// and this node takes the smallest free peer id. Returns it.
    pub async fn join(&self, host: &str, port: u16, ttl: Duration) -> Result<u16, StoreError> {
        let ttl = ttl.as_secs_f64();
        let port = i32::from(port);
        self.call("join", async |c| {
            let tx = c.transaction().await?;
            tx.execute("SELECT pg_catalog.pg_advisory_xact_lock($1)", &[&JOIN_LOCK])
                .await?;
            tx.execute(
                "DELETE FROM pgcorral.nodes
                 WHERE heartbeat_at < pg_catalog.now() - pg_catalog.make_interval(secs => $1)",
                &[&ttl],
            )
            .await?;
            let row = tx
                .query_one(
                    "INSERT INTO pgcorral.nodes (peer_id, host, port)
                     SELECT min(id), $1, $2 FROM pg_catalog.generate_series(1, 65535) AS id
                     WHERE id NOT IN (SELECT peer_id FROM pgcorral.nodes)
                     RETURNING peer_id",
                    &[&host, &port],
                )
                .await?;
            tx.commit().await?;
            let id: i32 = row.get(0);
            Ok(u16::try_from(id).unwrap_or(0))
        })
        .await
    }

    /// Keeps this node's row alive (and says where it listens, should its row have expired
    /// meanwhile and been removed: it is written again).
    pub async fn heartbeat(&self, peer_id: u16, host: &str, port: u16) -> Result<(), StoreError> {
        let (id, port) = (i32::from(peer_id), i32::from(port));
        self.call("heartbeat", async |c| {
            c.execute(
                "INSERT INTO pgcorral.nodes (peer_id, host, port) VALUES ($1, $2, $3)
                 ON CONFLICT (peer_id) DO UPDATE
                 SET heartbeat_at = pg_catalog.now(), host = EXCLUDED.host, port = EXCLUDED.port",
                &[&id, &host, &port],
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// The nodes whose heartbeat is newer than `ttl`.
    pub async fn nodes(&self, ttl: Duration) -> Result<Vec<Node>, StoreError> {
        let ttl = ttl.as_secs_f64();
        self.call("nodes", async |c| {
            let rows = c
                .query(
                    "SELECT peer_id, host, port FROM pgcorral.nodes
                     WHERE heartbeat_at >= pg_catalog.now() - pg_catalog.make_interval(secs => $1)
                     ORDER BY peer_id",
                    &[&ttl],
                )
                .await?;
            Ok(rows
                .iter()
                .filter_map(|r| {
                    let (id, port): (i32, i32) = (r.get(0), r.get(2));
                    Some(Node {
                        peer_id: u16::try_from(id).ok()?,
                        host: r.get(1),
                        port: u16::try_from(port).ok()?,
                    })
                })
                .collect())
        })
        .await
    }

    /// Leaves the fleet (a clean stop): its row is removed.
    pub async fn leave(&self, peer_id: u16) -> Result<(), StoreError> {
        let id = i32::from(peer_id);
        self.call("leave", async |c| {
            c.execute("DELETE FROM pgcorral.nodes WHERE peer_id = $1", &[&id])
                .await?;
            Ok(())
        })
        .await
    }
}
