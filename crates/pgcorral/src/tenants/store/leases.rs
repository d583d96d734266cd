//! The fleet's leases in the registry: each node's share of a tenant user's pool size on one
//! database, renewed together under one advisory lock per (tenant, database, user), so that
//! the shares of the live nodes never add up to more than the cap.

use std::collections::HashMap;
use std::time::Duration;

use super::{OpError, Store, StoreError};

/// The (tenant, database, user) keys of a renewal, from three text arrays `$1`, `$2`, `$3`,
/// as rows `k (t, d, u)`.
macro_rules! keys {
    () => {
        "ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]),
             pg_catalog.unnest($3::text[])) AS k (t, d, u)"
    };
}

/// What a node asks for one tenant user's servers on one database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub tenant: String,
    pub database: String,
    pub user: String,
    /// The user's pool size: what the shares of every node add up to at most.
    pub cap: u32,
    /// The servers it would use (see [`crate::pool::shares::Demand::wants`]).
    pub want: u32,
    /// The servers it may have open now (its pools' size, or more while they shrink): its
    /// share never goes below this.
    pub held: u32,
}

/// What the node is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Its share as written in the registry.
    pub share: u32,
    /// The size its pools are to have (at most the share: less while others wait for what
    /// it gives back).
    pub size: u32,
}

/// Another node's lease on the same servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Other {
    pub peer_id: u16,
    pub share: u32,
    pub want: u32,
}

impl Store {
    /// Renews this node's leases (`peer_id`), one per ask, in one transaction: leases are
    /// dropped first whose node has gone, that is, not renewed within `ttl` (counted from
    /// the registry's start when it restarted since: its nodes get that long to come back)
    /// and whose renewing session has left the registry (a node cut off from the registry
    /// keeps its share until the registry gives up on its connection, about 45 s); then each
    /// share is worked out from what the others hold and want ([`grant`]). An ask wanting
    /// and holding nothing gives its lease back. Within `limit`, on this handle's own
    /// connection.
    pub async fn lease(
        &self,
        peer_id: u16,
        asks: &[Ask],
        ttl: Duration,
        limit: Duration,
    ) -> Result<Vec<Grant>, StoreError> {
        if asks.is_empty() {
            return Ok(Vec::new());
        }
        let me = i32::from(peer_id);
        let ttl = ttl.as_secs_f64();
        let (tenants, databases, users) = columns(asks.iter());
        self.call_within("lease", limit, async |c| {
            let tx = c.transaction().await?;
            // The same order on every node: no deadlock between two nodes' renewals.
            tx.execute(
                concat!(
                    "SELECT pg_catalog.pg_advisory_xact_lock(h) FROM (
                     SELECT DISTINCT pg_catalog.hashtextextended(t || '/' || d || '/' || u, 7) AS h
                     FROM ",
                    keys!(),
                    " ORDER BY h) AS s"
                ),
                &[&tenants, &databases, &users],
            )
            .await?;
            // The registry notices this session is gone within about 45 s of its last
            // renewal, however it went (see the DELETE below).
            tx.batch_execute(
                "SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 5;
                 SET tcp_keepalives_count = 3",
            )
            .await?;
            tx.execute(
                concat!(
                    "DELETE FROM pgcorral.leases AS l USING ",
                    keys!(),
                    " WHERE l.tenant_external_id = k.t AND l.db_name = k.d AND l.db_user = k.u
                   AND GREATEST(l.heartbeat_at, pg_catalog.pg_postmaster_start_time())
                       < pg_catalog.now() - pg_catalog.make_interval(secs => $4)
                   AND NOT EXISTS (
                       SELECT FROM pg_catalog.pg_stat_activity AS a
                       WHERE a.pid = l.backend_pid
                         AND (a.backend_start = l.backend_start OR a.backend_start IS NULL))"
                ),
                &[&tenants, &databases, &users, &ttl],
            )
            .await?;
            let rows = tx
                .query(
                    concat!(
                        "SELECT l.tenant_external_id, l.db_name, l.db_user, l.peer_id, l.share,
                         l.want FROM pgcorral.leases AS l JOIN ",
                        keys!(),
                        " ON l.tenant_external_id = k.t AND l.db_name = k.d AND l.db_user = k.u
                         WHERE l.peer_id <> $4"
                    ),
                    &[&tenants, &databases, &users, &me],
                )
                .await?;
            let mut others: HashMap<(String, String, String), Vec<Other>> = HashMap::new();
            for r in &rows {
                let (peer, share, want): (i32, i32, i32) = (r.get(3), r.get(4), r.get(5));
                let other = Other {
                    peer_id: u16::try_from(peer).map_err(|_| OpError::Bad("peer id".into()))?,
                    share: u32::try_from(share).unwrap_or(0),
                    want: u32::try_from(want).unwrap_or(0),
                };
                others
                    .entry((r.get(0), r.get(1), r.get(2)))
                    .or_default()
                    .push(other);
            }
            let grants: Vec<Grant> = asks
                .iter()
                .map(|a| {
                    let key = (a.tenant.clone(), a.database.clone(), a.user.clone());
                    grant(peer_id, a, others.get(&key).map_or(&[][..], Vec::as_slice))
                })
                .collect();
            // Written in two statements whatever the number of leases: those given back, and
            // the others.
            let (kept, gone): (Vec<_>, Vec<_>) = asks
                .iter()
                .zip(&grants)
                .partition(|(a, g)| g.share > 0 || a.want > 0);
            let (t, d, u) = columns(gone.iter().map(|(a, _)| *a));
            tx.execute(
                concat!(
                    "DELETE FROM pgcorral.leases AS l USING ",
                    keys!(),
                    " WHERE l.tenant_external_id = k.t AND l.db_name = k.d AND l.db_user = k.u
                     AND l.peer_id = $4"
                ),
                &[&t, &d, &u, &me],
            )
            .await?;
            let (t, d, u) = columns(kept.iter().map(|(a, _)| *a));
            let shares: Vec<i32> = kept.iter().map(|(_, g)| to_i32(g.share)).collect();
            let wants: Vec<i32> = kept.iter().map(|(a, _)| to_i32(a.want)).collect();
            tx.execute(
                "INSERT INTO pgcorral.leases (tenant_external_id, db_name, db_user,
                     peer_id, share, want, backend_pid, backend_start)
                 SELECT k.t, k.d, k.u, $4, k.s, k.w, a.pid, a.backend_start
                 FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]),
                     pg_catalog.unnest($3::text[]), pg_catalog.unnest($5::int[]),
                     pg_catalog.unnest($6::int[])) AS k (t, d, u, s, w)
                 CROSS JOIN pg_catalog.pg_stat_activity AS a
                 WHERE a.pid = pg_catalog.pg_backend_pid()
                 ON CONFLICT (tenant_external_id, db_name, db_user, peer_id) DO UPDATE
                 SET share = EXCLUDED.share, want = EXCLUDED.want,
                     heartbeat_at = pg_catalog.now(),
                     backend_pid = EXCLUDED.backend_pid,
                     backend_start = EXCLUDED.backend_start",
                &[&t, &d, &u, &me, &shares, &wants],
            )
            .await?;
            tx.commit().await?;
            Ok(grants)
        })
        .await
    }
}

/// The tenants, databases and users of `asks`, as the three arrays `keys!` reads.
fn columns<'a>(asks: impl Iterator<Item = &'a Ask>) -> (Vec<&'a str>, Vec<&'a str>, Vec<&'a str>) {
    let (mut t, mut d, mut u) = (Vec::new(), Vec::new(), Vec::new());
    for a in asks {
        t.push(a.tenant.as_str());
        d.push(a.database.as_str());
        u.push(a.user.as_str());
    }
    (t, d, u)
}

fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The share and size node `me` is given for `ask`, the live `others` holding what they hold.
///
/// Its fair part is worked out by filling the nodes' wants level by level (each gets at most
/// what it wants, what one leaves goes to the others, and a division's remainder to those
/// that want the most), the same on every node. Its share is that part, but never more than
/// the cap leaves beside the others' shares (they give back what they hold beyond their own
/// parts when they renew), and never less than what it holds now (it gives that back once its
/// pools have shrunk). Its pools are sized to the smaller of the part and the share.
pub fn grant(me: u16, ask: &Ask, others: &[Other]) -> Grant {
    let mut wants: Vec<(u16, u32)> = others.iter().map(|o| (o.peer_id, o.want)).collect();
    wants.push((me, ask.want));
    let parts = fill(ask.cap, &wants);
    let part = parts.iter().find(|(p, _)| *p == me).map_or(0, |(_, n)| *n);
    let taken: u64 = others.iter().map(|o| u64::from(o.share)).sum();
    let free = u64::from(ask.cap).saturating_sub(taken);
    let free = u32::try_from(free).unwrap_or(u32::MAX);
    let share = part.min(free).max(ask.held);
    Grant {
        share,
        size: part.min(share),
    }
}

/// Fills `cap` with the `wants` of each peer, level by level (smallest wants first, each
/// taking at most an even split of what is left): `(peer, part)` for each, by peer id.
fn fill(cap: u32, wants: &[(u16, u32)]) -> Vec<(u16, u32)> {
    let mut order: Vec<(u16, u32)> = wants.to_vec();
    order.sort_by_key(|&(peer, want)| (want, peer));
    let mut left = cap;
    let mut parts: Vec<(u16, u32)> = Vec::with_capacity(order.len());
    for (i, &(peer, want)) in order.iter().enumerate() {
        let n = u32::try_from(order.len() - i).unwrap_or(u32::MAX);
        let part = want.min(left / n);
        left -= part;
        parts.push((peer, part));
    }
    // Whatever is left, every want was met.
    parts.sort_by_key(|&(peer, _)| peer);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(cap: u32, want: u32, held: u32) -> Ask {
        Ask {
            tenant: "t".into(),
            database: "d".into(),
            user: "u".into(),
            cap,
            want,
            held,
        }
    }

    fn other(peer_id: u16, share: u32, want: u32) -> Other {
        Other {
            peer_id,
            share,
            want,
        }
    }

    #[test]
    fn the_cap_is_filled_level_by_level() {
        assert_eq!(fill(10, &[(1, 10), (2, 1)]), vec![(1, 9), (2, 1)]);
        assert_eq!(
            fill(10, &[(1, 10), (2, 10), (3, 10)]),
            vec![(1, 3), (2, 3), (3, 4)]
        );
        assert_eq!(fill(10, &[(1, 2), (2, 3)]), vec![(1, 2), (2, 3)]);
        assert_eq!(fill(0, &[(1, 2)]), vec![(1, 0)]);
        assert_eq!(
            fill(3, &[(5, 0), (2, 7), (9, 7)]),
            vec![(2, 1), (5, 0), (9, 2)]
        );
    }

    /// Alone, a node gets what it wants up to the cap.
    #[test]
    fn alone_a_node_gets_what_it_wants() {
        assert_eq!(grant(1, &ask(10, 4, 0), &[]), Grant { share: 4, size: 4 });
        assert_eq!(
            grant(1, &ask(10, 40, 0), &[]),
            Grant {
                share: 10,
                size: 10
            }
        );
    }

    /// A node that comes while another holds the whole cap gets nothing until the other gives
    /// back; the other is told to shrink, and keeps its share until it has.
    #[test]
    fn a_share_moves_only_once_given_back() {
        let a = grant(1, &ask(10, 10, 10), &[other(2, 0, 5)]);
        assert_eq!(a, Grant { share: 10, size: 5 });
        let b = grant(2, &ask(10, 5, 0), &[other(1, 10, 10)]);
        assert_eq!(b, Grant { share: 0, size: 0 });
        // Node 1's pools shrank to 5: it holds 5.
        let a = grant(1, &ask(10, 10, 5), &[other(2, 0, 5)]);
        assert_eq!(a, Grant { share: 5, size: 5 });
        let b = grant(2, &ask(10, 5, 0), &[other(1, 5, 10)]);
        assert_eq!(b, Grant { share: 5, size: 5 });
    }

    /// Whatever the nodes ask and hold, the shares written never add up to more than the cap
    /// when each starts from a state within it.
    #[test]
    fn shares_never_exceed_the_cap() {
        let mut shares = [0u32; 3];
        let wants = [[7, 2, 9], [0, 9, 9], [3, 3, 3], [10, 0, 1], [1, 1, 1]];
        for (round, w) in wants.iter().cycle().take(40).enumerate() {
            let me = round % 3;
            let others: Vec<Other> = (0..3)
                .filter(|&i| i != me)
                .map(|i| other(i as u16 + 1, shares[i], w[i]))
                .collect();
            // It holds its share (its pools are full), or less once they shrank.
            let held = if round % 2 == 0 {
                shares[me]
            } else {
                shares[me].min(w[me])
            };
            let g = grant(me as u16 + 1, &ask(8, w[me], held), &others);
            assert!(g.size <= g.share);
            shares[me] = g.share;
            assert!(shares.iter().sum::<u32>() <= 8, "round {round}: {shares:?}");
        }
    }
}
