//! Which check a login must pass before [`super::auth`] runs: the console's own user on the
//! Unix socket (PgBouncer's rule: user `pgbouncer` from the pooler's own OS user, no password),
//! `auth_type`, or under `auth_type = "hba"` the first matching rule of `auth_hba_file`, whose
//! `reject` (or no rule) refuses with PostgreSQL's messages and whose `peer` is checked here.
//! A rule that needs the user's roles (`+role`, `samerole`) sends the caller to look them up;
//! one that cannot be decided refuses.

use std::collections::BTreeSet;

use bytes::BytesMut;
use corral_rt::stream::Stream;

use super::auth::Authenticated;
use super::params::Params;
use crate::client_conn::ClientConn;
use crate::config::{AuthType, Config};
use crate::error::{Error, Kind, Result};
use crate::hba::{Hba, Login, Machine, Method, Undecided};
use crate::logsafe::Esc;
use crate::net::os_user;
use crate::net::peer::Peer;
use crate::tls;

/// The console user let in without a password over the socket, as PgBouncer's.
pub const OWN_CONSOLE_USER: &str = "pgbouncer";

/// What the login goes on with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The console's own user: an admin, not authenticated further.
    Own,
    /// Authenticate with this method (never `Hba`).
    Method(AuthType),
}

/// The console's own user needs no authentication: AuthenticationOk is queued in `out`.
pub fn welcome_own(out: &mut BytesMut) -> Authenticated {
    pgwire::encode::auth_ok(out);
    Authenticated { client_key: None }
}

/// Decides how the login of `taken` (to the console when `console`) is checked (see the
/// module's comment). `Ok(None)`: a rule asks for the user's roles, which `roles` does not
/// have yet; decide again with them.
pub fn decide(
    client: &ClientConn,
    config: &Config,
    hba: &Hba,
    taken: &Params,
    console: bool,
    roles: Option<&BTreeSet<String>>,
) -> Result<Option<Access>> {
    let (stream, peer) = (&client.stream, &client.peer);
    let (user, database) = (taken.user.text.as_str(), taken.database.text.as_str());
    let uid = match peer {
        Peer::Unix { uid, .. } => *uid,
        Peer::Tcp(_) => None,
    };
    if console && user == OWN_CONSOLE_USER && uid == Some(os_user::uid()) {
        tracing::info!(%peer, "pgbouncer access from unix socket");
        return Ok(Some(Access::Own));
    }
    if config.general.auth_type != AuthType::Hba {
        return Ok(Some(Access::Method(config.general.auth_type)));
    }
    // An IPv4 client of an IPv6 listener (`::ffff:10.1.2.3`) is taken, and named, as IPv4.
    let from = match peer {
        Peer::Tcp(addr) => Some(addr.ip.to_canonical()),
        Peer::Unix { .. } => None,
    };
    // Physical replication (`replication=true`) matches only the `replication` keyword;
    // logical (`replication=database`) matches by database name, as in PostgreSQL.
    let replication = taken
        .text
        .iter()
        .rfind(|(k, _)| k == "replication")
        .is_some_and(|(_, v)| matches!(v.as_str(), "true" | "on" | "yes" | "1"));
    let login = Login {
        from,
        tls: stream.is_tls(),
        replication,
        database,
        user,
    };
    let rule = match hba.eval(&login, &Machine { roles }) {
        Ok(Some(rule)) => rule,
        Ok(None) => return Err(refusal(&login, false)),
        Err(Undecided::Roles) => return Ok(None),
        Err(Undecided::Interfaces(why)) => {
            // A samehost or samenet rule that cannot be decided: refused, never passed over.
            tracing::error!("{why}: the login is refused");
            return Err(refusal(&login, true));
        }
    };
    tracing::debug!(
        file = %rule.file,
        line = rule.line,
        method = rule.method.name(),
        "hba rule matched"
    );
    let method = match rule.method {
        Method::Reject => return Err(refusal(&login, true)),
        Method::Trust => AuthType::Trust,
        // PgBouncer's clear-text password is asked for as md5, as for auth_type = plain.
        Method::Md5 | Method::Password => AuthType::Md5,
        Method::ScramSha256 => AuthType::ScramSha256,
        Method::Peer => {
            peer_user(uid, hba, rule.map.as_deref(), user)?;
            AuthType::Trust
        }
        Method::Cert => match &rule.map {
            None => AuthType::Cert,
            Some(map) => {
                mapped_certificate(stream, hba, map, user)?;
                AuthType::Trust
            }
        },
    };
    Ok(Some(Access::Method(method)))
}

/// PostgreSQL's FATAL (28000) for `reject` or for no matching rule, in its words.
fn refusal(login: &Login<'_>, rejected: bool) -> Error {
    let host = login
        .from
        .map_or_else(|| "[local]".to_string(), |ip| ip.to_string());
    let encryption = match login.tls {
        true => "SSL encryption",
        false => "no encryption",
    };
    let (user, database) = (login.user, login.database);
    let message = match (rejected, login.replication) {
        (true, false) => format!("pg_hba.conf rejects connection for host \"{host}\", user \"{user}\", database \"{database}\", {encryption}"),
        (true, true) => format!("pg_hba.conf rejects replication connection for host \"{host}\", user \"{user}\", {encryption}"),
        (false, false) => format!("no pg_hba.conf entry for host \"{host}\", user \"{user}\", database \"{database}\", {encryption}"),
        (false, true) => format!("no pg_hba.conf entry for replication connection from host \"{host}\", user \"{user}\", {encryption}"),
    };
    Error::new(Kind::Refused, message)
}

/// `peer`: the socket peer's OS user name must be `user`, or be mapped to it by `map`.
fn peer_user(uid: Option<u32>, hba: &Hba, map: Option<&str>, user: &str) -> Result<()> {
    let failed = || {
        Error::new(
            Kind::Refused,
            format!("Peer authentication failed for user \"{user}\""),
        )
    };
    let Some(uid) = uid else {
        // Over TCP (a `host … peer` rule), or the kernel did not say.
        tracing::info!(user = %Esc(user), "peer authentication is only supported on local sockets");
        return Err(failed());
    };
    let Some(system) = os_user::name(uid) else {
        tracing::info!(uid, "local user with ID {uid} does not exist");
        return Err(failed());
    };
    let allowed = match map {
        Some(map) => hba.ident.allows(map, &system, user),
        None => system == user,
    };
    if !allowed {
        tracing::info!(
            user = %Esc(user),
            system = %Esc(&system),
            map = map.unwrap_or(""),
            "provided user name and authenticated user name do not match"
        );
        return Err(failed());
    }
    Ok(())
}

/// `cert` with `map=`: the certificate's CN is the system name the map must take to `user`.
fn mapped_certificate(stream: &Stream, hba: &Hba, map: &str, user: &str) -> Result<()> {
    let Some(cert) = stream.peer_certificates().and_then(|c| c.first()) else {
        return Err(Error::new(
            Kind::Refused,
            "connection requires a valid client certificate",
        ));
    };
    let cn = tls::common_name(cert).unwrap_or_default();
    if !hba.ident.allows(map, &cn, user) {
        tracing::info!(user = %Esc(user), cn = %Esc(&cn), map, "ident map does not match the certificate");
        return Err(Error::new(
            Kind::Refused,
            format!("certificate authentication failed for user \"{user}\""),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_in_postgresqls_words() {
        let login = |from: Option<&str>, tls, replication| Login {
            from: from.map(|f| f.parse().unwrap()),
            tls,
            replication,
            database: "shop",
            user: "app",
        };
        let e = refusal(&login(Some("127.0.0.1"), false, false), true);
        assert_eq!(e.sqlstate(), "28000");
        assert_eq!(
            e.message(),
            "pg_hba.conf rejects connection for host \"127.0.0.1\", user \"app\", database \"shop\", no encryption"
        );
        assert_eq!(
            refusal(&login(None, false, false), false).message(),
            "no pg_hba.conf entry for host \"[local]\", user \"app\", database \"shop\", no encryption"
        );
        assert_eq!(
            refusal(&login(Some("::1"), true, false), false).message(),
            "no pg_hba.conf entry for host \"::1\", user \"app\", database \"shop\", SSL encryption"
        );
        assert_eq!(
            refusal(&login(Some("::1"), false, true), true).message(),
            "pg_hba.conf rejects replication connection for host \"::1\", user \"app\", no encryption"
        );
    }

    #[test]
    fn peer_names_the_os_user_or_maps_it() {
        let hba = Hba::default();
        assert!(peer_user(Some(0), &hba, None, "root").is_ok());
        let e = peer_user(Some(0), &hba, None, "app").unwrap_err();
        assert_eq!(e.message(), "Peer authentication failed for user \"app\"");
        assert_eq!(e.sqlstate(), "28000");
        assert!(peer_user(None, &hba, None, "root").is_err());
        let (ident, _) = crate::hba::Ident::parse("ident", "ops root app\n");
        let (hba, _) = Hba::parse(
            std::path::Path::new("hba"),
            "",
            ident,
            &mut |_: &std::path::Path| Ok(String::new()),
        )
        .unwrap();
        assert!(peer_user(Some(0), &hba, Some("ops"), "app").is_ok());
        assert!(peer_user(Some(0), &hba, Some("ops"), "root").is_err());
    }
}
