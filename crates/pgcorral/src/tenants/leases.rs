//! This node's leases on its tenant users' server connections: renewed every [`RENEW`] and
//! whenever a client has to wait, and applied to the tenants' pools. While the registry
//! cannot be reached the shares stay as they are (nobody can change them); a node that cannot
//! renew for [`SHRINK_AFTER`] shrinks every leased pool to nothing, before the registry gives
//! up on its session and the others may take its shares.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::store::leases::Ask;
use super::store::Store;
use super::{Loaded, Tenants};
use crate::logsafe::Esc;

/// How often the leases are renewed when no client asks sooner.
pub const RENEW: Duration = Duration::from_secs(2);
/// A lease not renewed for this long is dropped by the next node that renews beside it.
pub const LEASE_TTL: Duration = Duration::from_secs(10);
/// Without a renewal for this long, leased pools shrink to nothing: before the registry,
/// whose keepalives give up on a silent session 45 s after its last renewal, lets the other
/// nodes take this one's shares.
pub const SHRINK_AFTER: Duration = Duration::from_secs(30);
/// How long one renewal may take.
const CALL_LIMIT: Duration = Duration::from_secs(2);
/// The least time between two renewals after one that changed a pool's size (a storm of
/// waiting clients asks once)...
const MIN_GAP: Duration = Duration::from_millis(20);
/// ...and after one that changed nothing (a pool full at its cap has clients waiting all the
/// time: they ask no more often than this).
const QUIET_GAP: Duration = Duration::from_millis(500);

/// (tenant, database, user).
type Key = (String, String, String);

/// What one round asks for a key, and whose pools it sizes.
#[derive(Default)]
struct Entry {
    cap: usize,
    want: usize,
    held: usize,
    /// The tenant as served now, whose pools get the share.
    current: Option<Arc<Loaded>>,
    /// Servers still open in versions of the tenant that were closed (deleted, terminated):
    /// they count in the share until they are gone.
    closing: usize,
}

/// Renews the leases for good (on the main thread's runtime), on `store`'s own connection;
/// `asked` is what leased pools wake when a client waits.
pub async fn run(tenants: Arc<Tenants>, store: Store, asked: Arc<Notify>) {
    let peer = tenants.fleet.peer_id;
    // Versions of tenants whose pools this loop has sized: kept while they have servers.
    let mut known: Vec<Arc<Loaded>> = Vec::new();
    let mut leased: HashSet<Key> = HashSet::new();
    // When the last renewal that went through was sent.
    let mut renewed: Option<Instant> = None;
    let mut shrunk = false;
    loop {
        tokio::select! {
            () = asked.notified() => {}
            () = tokio::time::sleep(RENEW) => {}
        }
        let sent = Instant::now();
        let entries = gather(&tenants, &mut known);
        // Each ask, and the entry whose pools its grant sizes (none for a lease given back).
        let (mut asks, mut sized): (Vec<Ask>, Vec<Option<&Entry>>) = entries
            .iter()
            .map(|(k, e)| (ask(k, e.cap, e.want, e.held), Some(e)))
            .unzip();
        // Leases of clusters gone since (idle pools dropped): given back.
        for k in leased.iter().filter(|k| !entries.contains_key(*k)) {
            asks.push(ask(k, 0, 0, 0));
            sized.push(None);
        }
        let limit = match renewed {
            Some(at) => (at + SHRINK_AFTER)
                .saturating_duration_since(sent)
                .clamp(Duration::from_millis(100), CALL_LIMIT),
            None => CALL_LIMIT,
        };
        let mut changed = false;
        match store.lease(peer, &asks, LEASE_TTL, limit).await {
            Ok(grants) => {
                renewed = Some(sent);
                if shrunk {
                    tracing::info!("fleet leases renewed again");
                    shrunk = false;
                }
                leased.clear();
                for ((a, e), g) in asks.iter().zip(&sized).zip(grants) {
                    if g.share > 0 || a.want > 0 {
                        leased.insert((a.tenant.clone(), a.database.clone(), a.user.clone()));
                    }
                    let Some(e) = e else { continue };
                    if let Some(t) = &e.current {
                        let size = (g.size as usize).saturating_sub(e.closing);
                        changed |= t.pools.set_share(&a.database, &a.user, size);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %Esc(&e), "fleet leases not renewed");
                let late = renewed.is_some_and(|at| at.elapsed() >= SHRINK_AFTER);
                if late && !shrunk && !known.is_empty() {
                    tracing::warn!(
                        "fleet leases not renewed for {SHRINK_AFTER:?}: tenant pools shrink to nothing until they are"
                    );
                    for t in &known {
                        for n in t.pools.demands() {
                            t.pools.set_share(&n.database, &n.user, 0);
                        }
                    }
                    shrunk = true;
                }
            }
        }
        tokio::time::sleep(if changed { MIN_GAP } else { QUIET_GAP }).await;
    }
}

fn ask(k: &Key, cap: usize, want: usize, held: usize) -> Ask {
    let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    Ask {
        tenant: k.0.clone(),
        database: k.1.clone(),
        user: k.2.clone(),
        cap: n(cap),
        want: n(want.min(cap)),
        held: n(held),
    }
}

/// What every leased cluster of the tenants served now, and of closed versions still holding
/// servers, needs; `known` is brought up to date.
fn gather(tenants: &Tenants, known: &mut Vec<Arc<Loaded>>) -> HashMap<Key, Entry> {
    let current = tenants.all();
    for t in &current {
        if !known.iter().any(|k| Arc::ptr_eq(k, t)) {
            known.push(t.clone());
        }
    }
    let mut entries: HashMap<Key, Entry> = HashMap::new();
    known.retain(|t| {
        let is_current = current.iter().any(|c| Arc::ptr_eq(c, t));
        let needs = t.pools.demands();
        let open: usize = needs.iter().map(|n| n.demand.open).sum();
        for n in needs {
            let key = (t.id.clone(), n.database.clone(), n.user.clone());
            let e = entries.entry(key).or_default();
            e.cap = e.cap.max(n.cap);
            e.held += n.size.max(n.demand.open);
            if is_current {
                e.want += n.demand.wants();
                e.current = Some(t.clone());
            } else {
                e.closing += n.demand.open;
                t.pools.set_share(&n.database, &n.user, 0);
            }
        }
        is_current || open > 0
    });
    entries
}
