//! The handle every task gets: configuration, pools, the cancel map, client accounting and the
//! shutdown signal. Built once at start and passed down; cheap to clone.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cancel::CancelMap;
use crate::config::Config;
use crate::net::balance::Balance;
use crate::pool::registry::Registry;

pub struct Inner {
    pub config: ArcSwap<Config>,
    pub pools: Registry,
    pub cancel: CancelMap,
    /// SCRAM secrets derived from plaintext passwords, reused across logins.
    pub scram_cache: crate::client::auth::SecretCache,
    /// Clients connected now (counted against max_client_conn).
    pub clients: AtomicUsize,
    /// Fired on SIGINT/SIGTERM: stop accepting, finish transactions, close.
    pub shutdown: Arc<Shutdown>,
    /// Every client task, so shutdown can wait for them.
    pub tasks: TaskTracker,
    /// Worker threads: their load, runtimes, and where clients go.
    pub balance: Arc<Balance>,
    /// Prepared statements by text, shared by the clients that prepare the same one.
    pub statements: crate::prepared::Registry,
    /// Routing decisions by query text (databases with replicas).
    pub router: crate::route::classify::Cache,
    /// Admin console sessions open now.
    pub consoles: AtomicUsize,
    /// Paused and disabled databases (admin console).
    pub control: crate::control::Control,
    /// The file the configuration came from (RELOAD, SIGHUP), when there is one.
    pub config_path: std::sync::OnceLock<std::path::PathBuf>,
    /// Bumped when the configuration is replaced; clients re-read it at their next transaction.
    pub config_gen: std::sync::atomic::AtomicU64,
    /// TLS for clients and servers, from the configuration's files (replaced on reload); the
    /// same handle as the pools' targets hold.
    pub tls: crate::tls::Shared,
}

#[derive(Clone)]
pub struct Services(Arc<Inner>);

impl std::ops::Deref for Services {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Services {
    pub fn new(config: Config, workers: usize) -> Services {
        let pools = Registry::default();
        let tls = pools.tls.clone();
        let shutdown = Arc::new(Shutdown {
            fired: AtomicBool::new(false),
            token: CancellationToken::new(),
            lists: pools.lists.clone(),
        });
        Services(Arc::new(Inner {
            config: ArcSwap::from_pointee(config),
            pools,
            cancel: CancelMap::default(),
            scram_cache: Default::default(),
            clients: AtomicUsize::new(0),
            shutdown,
            tasks: TaskTracker::new(),
            balance: Arc::new(Balance::new(workers)),
            statements: Default::default(),
            router: Default::default(),
            consoles: AtomicUsize::new(0),
            control: Default::default(),
            config_path: Default::default(),
            config_gen: Default::default(),
            tls,
        }))
    }

    /// Counts a new client; the guard uncounts it. Also returns whether the client is over
    /// max_client_conn.
    pub fn admit_client(&self) -> (ClientCount, bool) {
        let max = self.config.load().general.max_client_conn;
        let n = self.clients.fetch_add(1, Ordering::AcqRel) + 1;
        (
            ClientCount {
                services: self.clone(),
            },
            n > max,
        )
    }
}

/// One counted client; uncounted on drop. A pointer: every client's task holds one.
pub struct ClientCount {
    services: Services,
}

impl Drop for ClientCount {
    fn drop(&mut self) {
        self.services.clients.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The shutdown signal. What runs per transaction reads one flag; a client waiting for its
/// next request is woken through its entry in the client list (it polls under
/// [`crate::conns::Entry::killable`]), so waiting registers with nothing shared by all
/// clients. Other tasks (listener, maintenance, metrics) await the token.
pub struct Shutdown {
    fired: AtomicBool,
    token: CancellationToken,
    lists: Arc<crate::conns::Lists>,
}

impl Shutdown {
    /// Fires it: sets the flag, cancels the token, wakes every listed client.
    pub fn cancel(&self) {
        self.fired.store(true, Ordering::SeqCst);
        self.token.cancel();
        self.lists.wake(crate::conns::Kind::Client);
    }

    /// True once fired. One atomic load.
    pub fn is_cancelled(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Completes once fired.
    pub fn cancelled(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.token.cancelled()
    }
}
