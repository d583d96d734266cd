//! The tenants this node serves now: each read from the registry when its first client comes,
//! kept with its configuration, pools and auth_query lookups, and brought in line with every
//! change the registry announces (as a reload: new logins see it, running transactions go on;
//! a disabled or deleted tenant's clients are closed).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use super::config::config_of;
use super::fleet::Fleet;
use super::model::Tenant;
use super::names::{first_label, Naming};
use super::store::{Change, Store, StoreError};
use crate::auth_query::Lookups;
use crate::config::{Config, General};
use crate::conns::{Entry, Killed};
use crate::logsafe::Esc;
use crate::pool::registry::Registry;
use crate::pool::shares::Shares;
use crate::pool::Pool;

/// How long what an SNI host name named (or that it named no tenant) is kept.
const SNI_KEPT: Duration = Duration::from_secs(5);
/// At most this many SNI names are kept (a client may send any).
const SNI_MAX: usize = 10_000;

/// The registry and the tenants loaded from it.
pub struct Tenants {
    store: Store,
    /// This node in the fleet.
    pub fleet: Arc<Fleet>,
    /// The main thread's runtime, where the registry's connections live.
    rt: Handle,
    loaded: Mutex<HashMap<String, Arc<Loaded>>>,
    /// One load at a time per tenant: a storm of its first clients reads it once.
    loading: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// What SNI host names named lately: an external id, or none.
    sni: Mutex<HashMap<String, (Instant, Option<String>)>>,
    /// Woken by a tenant pool whose client waits: the fleet's leases are renewed now.
    pub asked: Arc<Notify>,
}

/// A tenant being served.
pub struct Loaded {
    pub id: String,
    tenant: ArcSwap<Tenant>,
    config: ArcSwap<Config>,
    /// Its pools, listed with the file's, named `user.ID`.
    pub pools: Registry,
    /// Its auth_query lookups (cache and connections), apart from every other tenant's.
    pub lookups: Lookups,
    /// Its clients, to close them when it goes.
    clients: Mutex<Vec<Weak<Entry>>>,
    /// Closed: deleted or terminated; a client that finds it so logs in again from the
    /// registry.
    closed: AtomicBool,
}

impl Tenants {
    /// `rt`: the runtime the store's tasks run on (the main thread's).
    pub fn new(store: Store, fleet: Fleet, rt: Handle) -> Tenants {
        Tenants {
            store,
            fleet: Arc::new(fleet),
            rt,
            loaded: Mutex::default(),
            loading: Mutex::default(),
            sni: Mutex::default(),
            asked: Arc::default(),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The tenant `naming` names, loaded from the registry when it is not yet (`files`: the
    /// pools whose lists and TLS it shares; `general`: the file's settings). `None`: no such
    /// tenant (for SNI: the name names none).
    pub async fn find(
        &self,
        naming: &Naming,
        files: &Registry,
        general: &General,
    ) -> Result<Option<Arc<Loaded>>, StoreError> {
        let id = match naming {
            Naming::Id(id) => id.clone(),
            Naming::Sni(host) => match self.sni_names(host).await? {
                Some(id) => id,
                None => return Ok(None),
            },
        };
        if let Some(t) = self.loaded(&id) {
            return Ok(Some(t));
        }
        let gate = self.loading.lock().entry(id.clone()).or_default().clone();
        let _one = gate.lock().await;
        let found = match self.loaded(&id) {
            Some(t) => Some(t),
            None => self.load(&id, files, general).await?,
        };
        let mut loading = self.loading.lock();
        if Arc::strong_count(&gate) <= 2 {
            loading.remove(&id);
        }
        Ok(found)
    }

    /// The tenant `id`, when it is loaded and not closed.
    fn loaded(&self, id: &str) -> Option<Arc<Loaded>> {
        self.loaded
            .lock()
            .get(id)
            .filter(|t| !t.closed.load(Ordering::Relaxed))
            .cloned()
    }

    /// Reads the tenant `id` and keeps it.
    async fn load(
        &self,
        id: &str,
        files: &Registry,
        general: &General,
    ) -> Result<Option<Arc<Loaded>>, StoreError> {
        let Some(tenant) = self.read(id).await? else {
            return Ok(None);
        };
        let loaded = Arc::new(Loaded {
            id: id.to_string(),
            config: ArcSwap::from_pointee(config_of(&tenant, general)),
            tenant: ArcSwap::from_pointee(tenant),
            pools: files
                .sharing(&format!(".{id}"))
                .leased(Arc::new(Shares::new(self.asked.clone()))),
            lookups: Lookups::default(),
            clients: Mutex::default(),
            closed: AtomicBool::new(false),
        });
        tracing::info!(tenant = %Esc(id), "tenant loaded");
        self.loaded.lock().insert(id.to_string(), loaded.clone());
        Ok(Some(loaded))
    }

    /// The tenant `id` from the registry, read on the main runtime.
    async fn read(&self, id: &str) -> Result<Option<Tenant>, StoreError> {
        let (store, id) = (self.store.clone(), id.to_string());
        self.rt
            .spawn(async move { store.get(&id).await })
            .await
            .map_err(|e| StoreError::Unavailable(format!("lookup task: {e}")))?
    }

    /// The external id an SNI host name names: the tenant whose `sni_hostname` it is, else
    /// the one its first label names.
    async fn sni_names(&self, host: &str) -> Result<Option<String>, StoreError> {
        if let Some((at, id)) = self.sni.lock().get(host) {
            if at.elapsed() < SNI_KEPT {
                return Ok(id.clone());
            }
        }
        let (store, h) = (self.store.clone(), host.to_string());
        let found = self
            .rt
            .spawn(async move {
                if let Some(t) = store.by_sni(&h).await? {
                    return Ok(Some(t.external_id));
                }
                let label = first_label(&h);
                Ok(store.get(label).await?.map(|t| t.external_id))
            })
            .await
            .map_err(|e| StoreError::Unavailable(format!("lookup task: {e}")))??;
        let mut sni = self.sni.lock();
        if sni.len() >= SNI_MAX {
            sni.retain(|_, (at, _)| at.elapsed() < SNI_KEPT);
            if sni.len() >= SNI_MAX {
                sni.clear();
            }
        }
        sni.insert(host.to_string(), (Instant::now(), found.clone()));
        Ok(found)
    }

    /// Every loaded tenant.
    pub fn all(&self) -> Vec<Arc<Loaded>> {
        let mut v: Vec<_> = self.loaded.lock().values().cloned().collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Every loaded tenant's pools.
    pub fn pools(&self) -> Vec<Pool> {
        self.all().iter().flat_map(|t| t.pools.all()).collect()
    }

    /// Applies a change the registry announced (on the main runtime).
    pub async fn apply(&self, change: Change, general: &General) {
        match change {
            Change::Tenant(id) => self.reread(&id, general).await,
            Change::Terminate(id) => {
                let n = self.terminate_here(&id);
                tracing::info!(tenant = %Esc(&id), clients = n, "tenant terminated: its clients and servers closed");
            }
            Change::All => {
                self.sni.lock().clear();
                let ids: Vec<String> = self.loaded.lock().keys().cloned().collect();
                for id in ids {
                    self.reread(&id, general).await;
                }
            }
        }
    }

    /// Closes the tenant's clients and servers on this node (it is read again with its next
    /// login); returns how many clients.
    pub fn terminate_here(&self, id: &str) -> usize {
        let gone = self.loaded.lock().remove(id);
        gone.map_or(0, |t| t.close())
    }

    /// Reads a loaded tenant again and applies what it is now.
    async fn reread(&self, id: &str, general: &General) {
        self.sni.lock().clear();
        let Some(t) = self.loaded.lock().get(id).cloned() else {
            return;
        };
        match self.store.get(id).await {
            Err(e) => {
                // It goes on as it was; the next re-read tries again.
                tracing::warn!(tenant = %Esc(id), error = %Esc(&e), "tenant not read again");
            }
            Ok(None) => {
                self.loaded.lock().remove(id);
                let n = t.close();
                tracing::info!(tenant = %Esc(id), clients = n, "tenant deleted: its clients and servers closed");
            }
            Ok(Some(tenant)) => {
                let disabled = !tenant.enabled() && t.tenant().enabled();
                if **t.tenant.load() != tenant {
                    t.update(tenant, general);
                    tracing::info!(tenant = %Esc(id), "tenant changed");
                }
                if disabled {
                    let n = t.close_clients();
                    tracing::info!(tenant = %Esc(id), clients = n, "tenant disabled: its clients closed");
                }
            }
        }
    }

    /// The file's `[general]` changed (a reload): every tenant's configuration follows.
    pub fn regeneral(&self, general: &General) {
        for t in self.all() {
            let tenant = t.tenant();
            t.update((*tenant).clone(), general);
        }
    }

    /// Follows the registry's changes until `rx` ends; `general` gives the file's settings
    /// of the moment.
    pub async fn follow(
        &self,
        mut rx: tokio::sync::mpsc::Receiver<Change>,
        general: impl Fn() -> Arc<Config>,
    ) {
        while let Some(change) = rx.recv().await {
            self.apply(change, &general().general).await;
        }
    }
}

impl Loaded {
    /// The tenant as last read.
    pub fn tenant(&self) -> Arc<Tenant> {
        self.tenant.load_full()
    }

    /// Its configuration (see [`config_of`]).
    pub fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }

    /// Lists a client of the tenant (closed with it).
    pub fn track(&self, entry: &Arc<Entry>) {
        let mut clients = self.clients.lock();
        if clients.len() >= 64 && clients.len() == clients.capacity() {
            clients.retain(|c| c.strong_count() > 0);
        }
        clients.push(Arc::downgrade(entry));
    }

    /// Takes a new version of the tenant: its configuration, and its pools as a reload
    /// brings them in line.
    fn update(&self, tenant: Tenant, general: &General) {
        let config = config_of(&tenant, general);
        self.tenant.store(Arc::new(tenant));
        self.pools.reconfigure(&config);
        self.config.store(Arc::new(config));
    }

    /// Closes its clients; returns how many.
    fn close_clients(&self) -> usize {
        let clients = std::mem::take(&mut *self.clients.lock());
        let mut n = 0;
        for c in clients.iter().filter_map(Weak::upgrade) {
            c.kill_for(Killed::Tenant);
            n += 1;
        }
        n
    }

    /// Closes its clients and servers, for good.
    fn close(&self) -> usize {
        self.closed.store(true, Ordering::Relaxed);
        let n = self.close_clients();
        for p in self.pools.all() {
            p.reconnect();
        }
        n
    }
}
