//! A login's authentication for users of the configuration and users found by auth_query: looks the password up when it is needed, authenticates, forgets a cached lookup after a failed login, and gives a found password to the user's pools.

use std::collections::BTreeSet;

use bytes::BytesMut;

use super::auth::{self, Authenticated};
use super::params::Params;
use super::tenant::Scope;
use super::ClientConn;
use crate::admin;
use crate::auth_query::Looked;
use crate::config::AuthType;
use crate::error::{Error, Kind, Result};
use crate::services::Services;

/// [`auth::authenticate`] by `auth_type` (the configured method, or an hba rule's), with the
/// auth_query lookup first for a user that has no password in
/// the configuration (for the console's databases too, with `[general]`'s settings, as
/// PgBouncer; never for a name that is not text).
pub(super) async fn authenticate(
    client: &mut ClientConn,
    out: &mut BytesMut,
    services: &Services,
    scope: &Scope,
    auth_type: AuthType,
    taken: &Params,
    binding: Option<&[u8]>,
) -> Result<Authenticated> {
    let config = &*scope.config;
    let (user, database) = (taken.user.text.as_str(), taken.database.text.as_str());
    let named = taken.user.is_text() && taken.database.is_text();
    let console = admin::is_console(database);
    let looked = match named {
        true => {
            let disabled = |db: &str| services.control.is_disabled(db);
            scope
                .lookups(services)
                .lookup(
                    config,
                    &services.pools.tls,
                    database,
                    user,
                    client.worker,
                    disabled,
                )
                .await?
        }
        false => Looked::NotAsked,
    };
    let authed = auth::authenticate(
        &mut client.stream,
        &mut client.buf,
        out,
        config,
        auth_type,
        &services.scram_cache,
        user,
        taken.user.is_text(),
        binding,
        &looked,
    )
    .await;
    match (&authed, &looked) {
        (Err(_), Looked::Found(_)) => {
            scope.lookups(services).forget(database, user);
        }
        (Ok(_), Looked::Found(password)) if !console => {
            scope
                .pools(services)
                .set_looked_up(config, database, user, password.as_deref());
        }
        _ => {}
    }
    authed
}

/// The roles `taken`'s user is a member of, for hba's `+role` and `samerole` rules, asked on
/// the auth_user connection ([`crate::auth_query::Lookups::roles`]). A name that is not text
/// cannot be asked about: refused, as every login whose rules cannot be decided.
pub(super) async fn roles(
    client: &ClientConn,
    services: &Services,
    scope: &Scope,
    taken: &Params,
) -> Result<BTreeSet<String>> {
    let config = &*scope.config;
    if !(taken.user.is_text() && taken.database.is_text()) {
        return Err(Error::new(
            Kind::Refused,
            "the hba rules could not be decided for this name",
        ));
    }
    let disabled = |db: &str| services.control.is_disabled(db);
    scope
        .lookups(services)
        .roles(
            config,
            &services.pools.tls,
            taken.database.text.as_str(),
            taken.user.text.as_str(),
            client.worker,
            disabled,
        )
        .await
}
