//! A login's scope: the file's configuration and pools, or, for a login that names a tenant,
//! that tenant's (loaded from the registry with its first client), with the tenant's rules
//! checked (enabled, TLS, client networks) and the names the login goes on with.

use std::sync::Arc;

use super::params::Params;
use super::ClientConn;
use crate::admin;
use crate::auth_query::Lookups;
use crate::config::Config;
use crate::error::{Error, Kind, Result};
use crate::logsafe::Esc;
use crate::pool::registry::Registry;
use crate::services::Services;
use crate::tenants::names::{named, Naming};
use crate::tenants::Loaded;

/// Where a login belongs.
pub(super) struct Scope {
    pub config: Arc<Config>,
    /// The tenant it belongs to, if any.
    pub tenant: Option<Arc<Loaded>>,
    /// The name the client is listed, counted and logged under: the user name it sent, or
    /// for a tenant's client `alias.ID`.
    pub login: String,
}

impl Scope {
    /// Its pools.
    pub fn pools<'a>(&'a self, services: &'a Services) -> &'a Registry {
        self.tenant.as_ref().map_or(&services.pools, |t| &t.pools)
    }

    /// Its auth_query lookups.
    pub fn lookups<'a>(&'a self, services: &'a Services) -> &'a Lookups {
        self.tenant
            .as_ref()
            .map_or(&services.auth_query, |t| &t.lookups)
    }
}

/// The scope of a login that sent `taken`; a tenant's login has its user (and its database,
/// when it named none of its own) rewritten to the tenant's names, and `reference` taken out
/// of its `options`. Refused: a tenant that does not exist or is disabled, a client without
/// TLS where the tenant requires it, a client address outside the tenant's networks, and any
/// tenant login while the registry cannot be read.
pub(super) async fn scope(
    client: &ClientConn,
    services: &Services,
    taken: &mut Params,
) -> Result<Scope> {
    let config = services.config.load_full();
    let login = taken.user.text.clone();
    let file = |config| Scope {
        config,
        tenant: None,
        login: login.clone(),
    };
    let Some(tenants) = services.tenants.get() else {
        return Ok(file(config));
    };
    if !taken.user.is_text() || admin::is_console(&taken.database.text) {
        return Ok(file(config));
    }
    let opts = taken
        .text
        .iter()
        .rfind(|(k, _)| k == "options")
        .map(|(_, v)| v.as_str());
    let sni = client.stream.server_name();
    let file_user = config.users.contains_key(&login);
    let Some(n) = named(&login, opts, sni, file_user) else {
        return Ok(file(config));
    };
    let found = tenants
        .find(&n.by, &services.pools, &config.general)
        .await
        .map_err(|e| {
            tracing::warn!(error = %Esc(&e), "tenant login refused: the tenant registry could not be read");
            Error::new(
                Kind::Disabled,
                "the tenant registry is unavailable: try again later",
            )
        })?;
    let t = match (found, &n.by) {
        (Some(t), _) => t,
        // A host name that names no tenant: the file's databases serve it.
        (None, Naming::Sni(_)) => return Ok(file(config)),
        (None, Naming::Id(id)) => {
            return Err(Error::new(
                Kind::UnknownUser,
                format!("tenant or user not found: tenant \"{id}\" does not exist"),
            ))
        }
    };
    let tenant = t.tenant();
    if !tenant.enabled() {
        let why = tenant.ban_reason.as_deref().unwrap_or("no reason given");
        return Err(Error::new(
            Kind::Disabled,
            format!("tenant \"{}\" is disabled: {why}", t.id),
        ));
    }
    if tenant.enforce_ssl && !client.stream.is_tls() {
        return Err(Error::new(
            Kind::Refused,
            format!("tenant \"{}\" requires an SSL connection", t.id),
        ));
    }
    if let Some(ip) = client.peer.ip() {
        if !tenant.allows(ip) {
            return Err(Error::new(
                Kind::Refused,
                format!("address not allowed for tenant \"{}\"", t.id),
            ));
        }
    }
    // A user the tenant does not list logs in under its own name: auth_query (without
    // require_user) or authentication itself refuses it, as PostgreSQL refuses a role that
    // does not exist.
    let user = tenant
        .user(&n.alias)
        .map_or_else(|| n.alias.clone(), |u| u.db_user.clone());
    if taken.database.text == login || taken.database.text.is_empty() {
        // libpq's default database is the user name, here `alias.ID`.
        taken.database.text = tenant.db_database.clone();
    }
    taken.user.text = user;
    if let Some(rest) = n.options {
        taken.text.retain(|(k, _)| k != "options");
        if let Some(o) = rest {
            taken.text.push(("options".into(), o));
        }
    }
    Ok(Scope {
        config: t.config(),
        // However the tenant was named, its clients are listed, counted and logged as
        // `alias.ID`.
        login: format!("{}.{}", n.alias, t.id),
        tenant: Some(t),
    })
}
