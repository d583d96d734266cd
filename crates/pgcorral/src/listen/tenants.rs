//! The tenant registry at start (its schema opened, `Services::tenants` set), then beside the
//! accept loop: the follower of its changes and the tenant API.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::api::{self, Api, Node};
use crate::config::General;
use crate::services::Services;
use crate::tenants::fleet::Fleet;
use crate::tenants::leases;
use crate::tenants::store::Store;
use crate::tenants::Tenants;

/// How often every loaded tenant is read again, in case a notification was missed.
const REREAD: Duration = Duration::from_secs(30);

/// Opens the registry (creating or migrating its schema) and binds the API, when `general`
/// names them. A registry that cannot be opened stops the start: a node that cannot serve
/// its tenants must not look healthy. On the main thread's runtime, as the other listeners.
#[allow(clippy::disallowed_methods)]
pub(super) async fn open(
    general: &General,
    port: u16,
) -> std::io::Result<(Option<(Store, Fleet)>, Option<TcpListener>)> {
    if general.tenant_registry.is_empty() {
        return Ok((None, None));
    }
    let store = Store::open(&general.tenant_registry)
        .await
        .map_err(|e| std::io::Error::other(format!("cannot open the tenant registry: {e}")))?;
    let (host, port) = node_address(general, port)?;
    let fleet = Fleet::join(&store, &host, port)
        .await
        .map_err(|e| std::io::Error::other(format!("cannot join the fleet: {e}")))?;
    let api = match general.api_listen.as_str() {
        "" => None,
        addr => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|e| super::cannot_listen(addr, e))?,
        ),
    };
    Ok((Some((store, fleet)), api))
}

/// Where the fleet's other nodes reach this one: `node_address`, else `listen_addr` when it
/// is one address, else the machine's first address that is not loopback; `port` (the port
/// listened on) unless `node_address` gives one.
fn node_address(general: &General, port: u16) -> std::io::Result<(String, u16)> {
    if !general.node_address.is_empty() {
        let bad = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("node_address: {:?} is not host:port", general.node_address),
            )
        };
        let (host, p) = general.node_address.rsplit_once(':').ok_or_else(bad)?;
        let p: u16 = p.parse().map_err(|_| bad())?;
        return Ok((host.trim_matches(['[', ']']).to_string(), p));
    }
    let listen = general.listen_addr.as_str();
    if let Ok(ip) = listen.parse::<std::net::IpAddr>() {
        if !ip.is_unspecified() {
            return Ok((ip.to_string(), port));
        }
    }
    let ip = if_addrs::get_if_addrs()
        .ok()
        .and_then(|addrs| {
            addrs
                .into_iter()
                .find(|a| !a.is_loopback() && a.ip().is_ipv4())
                .map(|a| a.ip())
        })
        .map_or_else(|| "127.0.0.1".to_string(), |ip| ip.to_string());
    Ok((ip, port))
}

/// Follows the registry's changes, and serves the API on `api`, on the main thread's runtime.
#[allow(clippy::disallowed_methods)]
pub(super) fn start(services: &Services, api: Option<TcpListener>) {
    let Some(tenants) = services.tenants.get().cloned() else {
        return;
    };
    tokio::spawn(tenants.fleet.clone().run(tenants.store().clone()));
    tokio::spawn(leases::run(
        tenants.clone(),
        tenants.store().separate(),
        tenants.asked.clone(),
    ));
    let rx = tenants.store().watch(REREAD);
    let s = services.clone();
    tokio::spawn(async move { tenants.follow(rx, || s.config.load_full()).await });
    let Some(listener) = api else {
        return;
    };
    let Some(tenants) = services.tenants.get() else {
        return;
    };
    let api = Api {
        store: tenants.store().clone(),
        jwt_secret: Arc::from(services.config.load().general.api_jwt_secret.as_str()),
        node: Arc::new(Here(services.clone())),
    };
    tokio::spawn(api::serve(listener, api, services.shutdown.exiting_token()));
}

/// This node, as the API sees it.
struct Here(Services);

impl Node for Here {
    fn terminate(&self, external_id: &str) -> usize {
        let Some(t) = self.0.tenants.get() else {
            return 0;
        };
        t.terminate_here(external_id)
    }

    fn health(&self) -> Result<(), Vec<String>> {
        if self.0.shutdown.is_stopping() {
            return Err(vec!["stopping".into()]);
        }
        Ok(())
    }
}

/// The tenants of `store`, for [`Services::tenants`].
pub(super) fn tenants(store: Store, fleet: Fleet) -> Arc<Tenants> {
    Arc::new(Tenants::new(
        store,
        fleet,
        tokio::runtime::Handle::current(),
    ))
}
