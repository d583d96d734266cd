//! A pool of server connections for one (database, user): checkout with a FIFO queue of waiting
//! clients, a global size cap shared by every worker thread, and release through the
//! [`Checkout`] guard.

mod checkout;
mod inner;
pub mod registry;

use std::sync::Arc;
use std::time::Duration;

pub use checkout::Checkout;

use inner::{Grant, Inner};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::config::PoolMode;
use crate::error::{Error, Kind, Result};
use crate::server::connect::{connect, Secret, Target};
use crate::server::{ServerConn, ServerParams};

/// Rolls back an open transaction on a checked-out server; true when it ends idle within the
/// cleanup timeout (otherwise the caller should treat the server as broken).
pub async fn rollback(server: &mut Checkout) -> bool {
    tokio::time::timeout(
        checkout::CLEANUP_TIMEOUT,
        checkout::clean(server, true, None),
    )
    .await
    .unwrap_or(false)
}

/// Settings fixed when the pool is built.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub size: usize,
    pub mode: PoolMode,
    /// Run when a session-mode client leaves; empty = none.
    pub reset_query: String,
    /// How long a client waits for a server; `None` = forever.
    pub wait_timeout: Option<Duration>,
}

struct Shared {
    /// (database as the client named it, user).
    name: (String, String),
    settings: PoolSettings,
    target: Mutex<Target>,
    inner: Mutex<Inner>,
    /// Parameters reported by the first server: what clients are told at startup.
    params: Mutex<Option<ServerParams>>,
}

/// A cheap-to-clone handle on one pool.
#[derive(Clone)]
pub struct Pool(Arc<Shared>);

impl Pool {
    pub fn new(name: (String, String), target: Target, settings: PoolSettings) -> Pool {
        Pool(Arc::new(Shared {
            name,
            settings,
            target: Mutex::new(target),
            inner: Mutex::new(Inner::default()),
            params: Mutex::new(None),
        }))
    }

    pub fn name(&self) -> (&str, &str) {
        (&self.0.name.0, &self.0.name.1)
    }

    pub fn settings(&self) -> &PoolSettings {
        &self.0.settings
    }

    /// Server parameters clients are told at startup, once any server has been connected.
    pub fn params(&self) -> Option<ServerParams> {
        self.0.params.lock().clone()
    }

    /// Records the ClientKey a SCRAM client revealed, so pgcorral can log in to a server that
    /// holds the same verifier.
    pub fn learn_client_key(&self, key: [u8; 32]) {
        if let Secret::Scram { client_key, .. } = &mut self.0.target.lock().secret {
            *client_key = Some(key);
        }
    }

    /// (open, idle, waiting) counts.
    pub fn counts(&self) -> (usize, usize, usize) {
        let i = self.0.inner.lock();
        (i.open, i.idle.len(), i.waiters.len())
    }

    /// Hands out a server to a client on `worker`: an idle one (preferring one already on that
    /// worker), a new one if under the cap, else the first to come back (first come, first
    /// served), waiting at most the pool's wait timeout. The server ends up registered with
    /// the worker's reactor.
    pub async fn checkout(&self, worker: usize) -> Result<Checkout> {
        // The common case completes without awaiting; the rest is boxed so that every client's
        // future stays small.
        match self.checkout_idle(worker) {
            Some(c) => Ok(c),
            None => Box::pin(self.checkout_slow(worker)).await,
        }
    }

    /// An idle server, healthy and moved to `worker`, if there is one.
    fn checkout_idle(&self, worker: usize) -> Option<Checkout> {
        loop {
            let mut server = self.0.inner.lock().pop_idle(worker)?;
            if server.is_closed_while_idle() {
                tracing::info!(pool = ?self.0.name, pid = server.key.pid, "idle server connection was closed by the server; discarding");
                drop(server);
                self.release_slot();
                continue;
            }
            let mut checkout = Checkout::new(server, self.clone());
            if checkout.rehome(worker) {
                return Some(checkout);
            }
        }
    }

    async fn checkout_slow(&self, worker: usize) -> Result<Checkout> {
        loop {
            if let Some(c) = self.checkout_idle(worker) {
                return Ok(c);
            }
            let rx = {
                let mut inner = self.0.inner.lock();
                if !inner.idle.is_empty() {
                    continue;
                }
                if inner.open < self.0.settings.size {
                    inner.open += 1;
                    None
                } else {
                    let (tx, rx) = oneshot::channel();
                    inner.waiters.push_back(tx);
                    Some(rx)
                }
            };
            let mut checkout = match rx {
                None => return self.open(inner::Slot::new(self.clone()), worker).await,
                Some(rx) => match self.wait(rx).await? {
                    Grant::Server(checkout) => checkout,
                    Grant::Slot(slot) => return self.open(slot, worker).await,
                },
            };
            if checkout.rehome(worker) {
                return Ok(checkout);
            }
        }
    }

    async fn wait(&self, rx: oneshot::Receiver<Grant>) -> Result<Grant> {
        let timeout = self.0.settings.wait_timeout;
        let res = match timeout {
            Some(t) => tokio::time::timeout(t, rx).await.map_err(|_| {
                Error::new(
                    Kind::PoolTimeout,
                    format!(
                        "query_wait_timeout: no server connection became free within {} ms",
                        t.as_millis()
                    ),
                )
            })?,
            None => rx.await,
        };
        res.map_err(|_| Error::new(Kind::Shutdown, "pool closed"))
    }

    async fn open(&self, slot: inner::Slot, worker: usize) -> Result<Checkout> {
        let target = self.0.target.lock().clone();
        let server = connect(&target, worker).await?; // on error the slot drops and is released
        slot.fulfil();
        tracing::debug!(pool = ?self.0.name, pid = server.key.pid, "opened server connection");
        {
            let mut p = self.0.params.lock();
            if p.is_none() {
                *p = Some(server.params.clone());
            }
        }
        Ok(Checkout::new(Box::new(server), self.clone()))
    }

    /// Adds an open, idle connection to the pool, counted against its size; when the pool is
    /// full the connection is closed and `false` returned. For moving idle connections between
    /// pools, and benchmarks.
    pub fn adopt(&self, server: ServerConn) -> bool {
        {
            let mut inner = self.0.inner.lock();
            if inner.open >= self.0.settings.size {
                return false;
            }
            inner.open += 1;
        }
        self.checkin(Box::new(server));
        true
    }

    /// Puts a clean server back: to the first waiter, else on the idle list.
    fn checkin(&self, server: Box<ServerConn>) {
        let mut server = server;
        let mut inner = self.0.inner.lock();
        while let Some(w) = inner.waiters.pop_front() {
            match w.send(Grant::Server(Checkout::new(server, self.clone()))) {
                Ok(()) => return,
                Err(Grant::Server(mut c)) => server = c.take(),
                Err(Grant::Slot(_)) => unreachable!("sent a server"),
            }
        }
        inner.idle.push(server);
    }

    /// Gives up a server's place in the pool: a waiter may open a new one in its stead.
    fn release_slot(&self) {
        let mut inner = self.0.inner.lock();
        while let Some(w) = inner.waiters.pop_front() {
            match w.send(Grant::Slot(inner::Slot::new(self.clone()))) {
                Ok(()) => return,
                Err(Grant::Slot(s)) => s.fulfil(),
                Err(Grant::Server(_)) => unreachable!("sent a slot"),
            }
        }
        inner.open -= 1;
    }
}
