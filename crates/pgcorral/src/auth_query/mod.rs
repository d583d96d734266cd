//! auth_query: the password of a user pgcorral has none for, looked up on the server as auth_user (PgBouncer's auth_user, auth_query, auth_dbname), on connections whose startup parameters pgcorral fixes, with an opt-in cache.

pub mod exec;
pub mod roles;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Semaphore;

use crate::config::{millis_opt, Config, RESERVED_DATABASES};
use crate::error::{Error, Kind, Result};
use crate::logsafe::Esc;
use crate::pool::registry;
use crate::server::connect::{self, Secret, Target};
use crate::server::ServerConn;
use crate::tls;
use exec::{Answer, Failure};

/// Idle lookup connections kept per (server, database, auth_user).
const IDLE_PER_TARGET: usize = 2;
/// Lookups running at once per (server, database, auth_user), so a burst of logins opens no
/// more server connections than this; further logins wait (within client_login_timeout).
const BUSY_PER_TARGET: usize = 4;
/// Cached lookups kept at most (expired ones are dropped first).
const MAX_CACHED: usize = 10_000;

/// What the lookup said about a login.
#[derive(Debug, Clone, PartialEq)]
pub enum Looked {
    /// No lookup: the user has a password here, or no auth_user applies to the database.
    NotAsked,
    /// The role exists: its password (`None`: NULL, e.g. expired; no password login).
    Found(Option<String>),
    /// No row: no such role, or one that may not log in. Refused as an unknown user.
    NoRow,
}

/// Where and what to ask for a (database, user) login.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub auth_user: String,
    /// auth_dbname, or the client's own database.
    pub auth_db: String,
    pub query: String,
}

/// The lookup a login needs: `None` when the user has a password in the configuration (from
/// `[users]` or the auth_file), or when neither the database (or the `*` template) nor
/// `[general]` names an auth_user, as PgBouncer decides (a user whose password is empty is
/// looked up).
///
/// The console's database has no settings of its own: `[general]`'s auth_user, auth_query
/// and auth_dbname apply, and without an auth_dbname the lookup would run in the console
/// itself, which [`Lookups::lookup`] refuses (as PgBouncer does).
pub fn plan(config: &Config, database: &str, user: &str) -> Option<Plan> {
    if config.users.get(user).is_some_and(|u| u.password.is_some()) {
        return None;
    }
    plan_for(config, database)
}

/// Where and what to ask for a login to `database`, whoever the user: `None` when no
/// auth_user applies to the database (see [`plan`]).
fn plan_for(config: &Config, database: &str) -> Option<Plan> {
    let g = &config.general;
    if RESERVED_DATABASES.contains(&database) {
        let auth_db = match g.auth_dbname.is_empty() {
            true => database.to_string(),
            false => g.auth_dbname.clone(),
        };
        return (!g.auth_user.is_empty()).then(|| Plan {
            auth_user: g.auth_user.clone(),
            auth_db,
            query: g.auth_query.clone(),
        });
    }
    let db = config
        .databases
        .get(database)
        .or_else(|| config.databases.get("*"))?;
    let auth_user = db
        .auth_user
        .clone()
        .or_else(|| (!g.auth_user.is_empty()).then(|| g.auth_user.clone()))?;
    let auth_db = db
        .auth_dbname
        .clone()
        .or_else(|| (!g.auth_dbname.is_empty()).then(|| g.auth_dbname.clone()))
        .unwrap_or_else(|| database.to_string());
    let query = db
        .auth_query
        .clone()
        .unwrap_or_else(|| g.auth_query.clone());
    Some(Plan {
        auth_user,
        auth_db,
        query,
    })
}

/// A lookup's server: host, port, database, auth_user.
type TargetKey = (String, u16, String, String);
/// A found password and when it was found.
type Cached = (Instant, Option<String>);

/// Lookups shared by all clients: idle connections to run them on, and found passwords
/// (only with `auth_query_cache_lifetime`).
#[derive(Default)]
pub struct Lookups {
    cache: Mutex<HashMap<(String, String), Cached>>,
    idle: Mutex<HashMap<TargetKey, Vec<ServerConn>>>,
    /// Places for running lookups, per target (see [`BUSY_PER_TARGET`]).
    busy: Mutex<HashMap<TargetKey, Arc<Semaphore>>>,
}

impl Lookups {
    /// Looks `user`'s password up for a login to `database` (see [`plan`]). An error is a
    /// lookup that could not be made: the login fails (never let in), and it is logged.
    /// `disabled` says whether a database is disabled (the console's DISABLE): a disabled
    /// authentication database refuses the login, as in PgBouncer.
    #[allow(clippy::too_many_arguments)]
    pub async fn lookup(
        &self,
        config: &Config,
        tls: &tls::Shared,
        database: &str,
        user: &str,
        worker: usize,
        disabled: impl Fn(&str) -> bool,
    ) -> Result<Looked> {
        let Some(plan) = plan(config, database, user) else {
            return Ok(Looked::NotAsked);
        };
        check_auth_db(&plan, &disabled)?;
        let key = (database.to_string(), user.to_string());
        let lifetime = millis_opt(config.general.auth_query_cache_lifetime);
        if let Some(lifetime) = lifetime {
            if let Some((at, pw)) = self.cache.lock().get(&key) {
                if at.elapsed() < lifetime {
                    return Ok(Looked::Found(pw.clone()));
                }
            }
        }
        let target = target(config, tls, &plan)?;
        let answer = match self.ask(&target, &plan.query, user, worker).await {
            Ok(a) => a,
            Err(failure) => {
                lookup_failed(&plan, database, user, &failure, "auth_query failed");
                return Err(client_error(&failure));
            }
        };
        let looked = match answer {
            Answer::Row { password, .. } => Looked::Found(password),
            Answer::NoRow => Looked::NoRow,
        };
        if let (Some(lifetime), Looked::Found(pw)) = (lifetime, &looked) {
            let mut cache = self.cache.lock();
            if cache.len() >= MAX_CACHED {
                cache.retain(|_, (at, _)| at.elapsed() < lifetime);
                if cache.len() >= MAX_CACHED {
                    cache.clear();
                }
            }
            cache.insert(key, (Instant::now(), pw.clone()));
        }
        Ok(looked)
    }

    /// The roles `user` is a member of, directly or not, itself included (see [`roles`]),
    /// asked as auth_user where auth_query would run for a login to `database`, whoever the
    /// user (for hba's `+role` and `samerole`). An error refuses the login: without an
    /// auth_user for the database, or when the question could not be asked or answered.
    pub async fn roles(
        &self,
        config: &Config,
        tls: &tls::Shared,
        database: &str,
        user: &str,
        worker: usize,
        disabled: impl Fn(&str) -> bool,
    ) -> Result<BTreeSet<String>> {
        let Some(mut plan) = plan_for(config, database) else {
            tracing::error!(
                database = %Esc(database),
                user = %Esc(user),
                "an hba rule names a role (+role, samerole), which needs an auth_user to ask the server; the login is refused"
            );
            return Err(config_error());
        };
        plan.query = roles::QUERY.to_string();
        check_auth_db(&plan, &disabled)?;
        let target = target(config, tls, &plan)?;
        let answer = self.ask(&target, &plan.query, user, worker).await;
        match answer
            .map_err(|e| e.to_string())
            .and_then(|a| roles::read(&a))
        {
            Ok(roles) => Ok(roles),
            Err(failure) => {
                lookup_failed(
                    &plan,
                    database,
                    user,
                    &failure,
                    "role lookup for hba failed; the login is refused",
                );
                Err(config_error())
            }
        }
    }

    /// A login failed: the next one asks the server again.
    pub fn forget(&self, database: &str, user: &str) {
        self.cache
            .lock()
            .remove(&(database.to_string(), user.to_string()));
    }

    /// Runs the query on an idle connection, or a new one; a reused connection that turns out
    /// to be broken is replaced once.
    async fn ask(
        &self,
        target: &Target,
        query: &str,
        user: &str,
        worker: usize,
    ) -> Result<Answer, LookupError> {
        let key: TargetKey = (
            target.host.clone(),
            target.port,
            target.database.clone(),
            target.user.clone(),
        );
        let places = self
            .busy
            .lock()
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(BUSY_PER_TARGET)))
            .clone();
        let _place = places
            .acquire_owned()
            .await
            .map_err(|_| LookupError::Query(Failure::Broken("lookups closed".into())))?;
        for reused in [true, false] {
            let mut server = match reused {
                true => match self.take_idle(&key, worker) {
                    Some(s) => s,
                    None => continue,
                },
                false => connect::connect(target, worker)
                    .await
                    .map_err(LookupError::Connect)?,
            };
            match exec::run(&mut server, query, user).await {
                Err(Failure::Broken(_)) if reused => continue,
                Err(f @ Failure::Broken(_)) => return Err(LookupError::Query(f)),
                outcome => {
                    self.put_idle(key, server);
                    return outcome.map_err(LookupError::Query);
                }
            }
        }
        Err(LookupError::Query(Failure::Broken("no connection".into())))
    }

    fn take_idle(&self, key: &TargetKey, worker: usize) -> Option<ServerConn> {
        loop {
            let mut server = self.idle.lock().get_mut(key)?.pop()?;
            if server.is_closed_while_idle() {
                continue;
            }
            if server.home == worker {
                return Some(server);
            }
            if let Ok(s) = server.rehome(worker) {
                return Some(s);
            }
        }
    }

    fn put_idle(&self, key: TargetKey, server: ServerConn) {
        let mut idle = self.idle.lock();
        let list = idle.entry(key).or_default();
        if list.len() < IDLE_PER_TARGET {
            list.push(server);
        }
    }

    /// Closes the idle lookup connections (reload: the servers or auth_user may have changed).
    pub fn close_idle(&self) {
        self.idle.lock().clear();
    }
}

/// Why a lookup could not be made.
#[derive(Debug)]
enum LookupError {
    /// auth_user could not log in to the server.
    Connect(Error),
    Query(Failure),
}

impl std::fmt::Display for LookupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LookupError::Connect(e) => write!(f, "auth_user could not log in: {e}"),
            LookupError::Query(q) => write!(f, "{q}"),
        }
    }
}

/// What the client is told when the lookup failed: PgBouncer's `bouncer config error` (its
/// words for a lookup that could not be made; PostgreSQL has no such case), never the server's
/// text (the client has not authenticated). The log has the reason.
fn client_error(_e: &LookupError) -> Error {
    config_error()
}

/// PgBouncer's message to a client whose login the pooler's configuration cannot serve.
fn config_error() -> Error {
    Error::new(Kind::ServerConnect, "bouncer config error")
}

/// Logs a lookup that failed as auth_user (the password's or the roles'), with whom it was for;
/// every name escaped.
fn lookup_failed(
    plan: &Plan,
    database: &str,
    user: &str,
    failure: &dyn std::fmt::Display,
    what: &str,
) {
    tracing::warn!(
        database = %Esc(database),
        user = %Esc(user),
        auth_user = %Esc(&plan.auth_user),
        auth_dbname = %Esc(&plan.auth_db),
        error = %Esc(failure),
        "{what}"
    );
}

/// The authentication database must not be the console, nor disabled (PgBouncer's
/// `prepare_auth_database`, with its log line and messages).
fn check_auth_db(plan: &Plan, disabled: &dyn Fn(&str) -> bool) -> Result<()> {
    if RESERVED_DATABASES.contains(&plan.auth_db.as_str()) {
        tracing::error!(
            "cannot use the reserved \"{}\" database as an auth_dbname",
            Esc(&plan.auth_db)
        );
        return Err(config_error());
    }
    if disabled(&plan.auth_db) {
        return Err(Error::new(
            Kind::Disabled,
            format!("authentication database \"{}\" is disabled", plan.auth_db),
        ));
    }
    Ok(())
}

/// The lookup session's `search_path`, sent in its startup packet: the catalog first and the
/// session's own temporary schema last, nothing else. A startup parameter outranks what the
/// database's owner may set (`ALTER DATABASE … SET search_path`, and `ALTER ROLE` for roles
/// they administer), so no table, view, function or operator they create in `public` (or any
/// schema) can stand in for the catalog's in the query, the default one or the user's own.
pub const LOOKUP_SEARCH_PATH: &str = "pg_catalog, pg_temp";

/// The connection a plan's query runs on: the auth database's first server, logged in as
/// auth_user with its password from the configuration (auth_file or `[users]`); its startup
/// packet carries `user`, `database` and [`LOOKUP_SEARCH_PATH`], never a client's parameters
/// nor the database's (its `client_encoding` and the like do not matter to the lookup).
fn target(config: &Config, tls: &tls::Shared, plan: &Plan) -> Result<Target> {
    let resolved =
        registry::resolve(config, &plan.auth_db, &plan.auth_user, tls, None).map_err(|_| {
            tracing::error!(
                "authentication database \"{}\" is not configured",
                Esc(&plan.auth_db)
            );
            config_error()
        })?;
    let mut target = resolved
        .shards
        .into_iter()
        .next()
        .and_then(|(_, targets)| targets.into_iter().next())
        .ok_or_else(|| {
            Error::new(
                Kind::ServerConnect,
                "the authentication database has no server",
            )
        })?;
    let password = config
        .users
        .get(&plan.auth_user)
        .and_then(|u| u.password.clone());
    if password.is_some() || target.user != plan.auth_user {
        target.secret = Secret::from_config(password.as_deref());
    }
    target.user = plan.auth_user.clone();
    target.startup = vec![("search_path".into(), LOOKUP_SEARCH_PATH.into())];
    // A lookup waits no longer than a server login.
    target.connect_timeout = target.connect_timeout.min(Duration::from_secs(60));
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn plan_as_pgbouncer_decides() {
        let cfg = config(concat!(
            "[general]\nauth_user = \"pgb\"\n",
            "[users.known]\npassword = \"pw\"\n[users.empty]\npool_size = 2\n",
            "[databases.app]\n[databases.other]\nauth_user = \"other_auth\"\nauth_dbname = \"meta\"\nauth_query = \"SELECT u, p FROM f($1)\"\n",
        ));
        assert_eq!(plan(&cfg, "app", "known"), None);
        let p = plan(&cfg, "app", "empty").unwrap();
        assert_eq!((p.auth_user.as_str(), p.auth_db.as_str()), ("pgb", "app"));
        assert_eq!(p.query, crate::config::DEFAULT_AUTH_QUERY);
        let p = plan(&cfg, "other", "new").unwrap();
        assert_eq!(
            (p.auth_user.as_str(), p.auth_db.as_str(), p.query.as_str()),
            ("other_auth", "meta", "SELECT u, p FROM f($1)")
        );
        // A database pgcorral does not serve: no lookup (the login fails as an unknown user).
        assert_eq!(plan(&cfg, "nope", "new"), None);
        // No auth_user anywhere: no lookup.
        let cfg = config("[general]\nauth_dbname = \"meta\"\n[databases.\"*\"]\n");
        assert_eq!(plan(&cfg, "any", "new"), None);
        let cfg =
            config("[general]\nauth_user = \"a\"\nauth_dbname = \"meta\"\n[databases.\"*\"]\n");
        assert_eq!(plan(&cfg, "any", "new").unwrap().auth_db, "meta");
        // The console: [general]'s settings only (not the `*` template's), and without an
        // auth_dbname the console itself, which the lookup refuses.
        let cfg = config(concat!(
            "[general]\nauth_user = \"a\"\n",
            "[databases.\"*\"]\nauth_user = \"b\"\nauth_dbname = \"meta\"\n",
        ));
        let p = plan(&cfg, "pgbouncer", "new").unwrap();
        assert_eq!(
            (p.auth_user.as_str(), p.auth_db.as_str()),
            ("a", "pgbouncer")
        );
        assert!(check_auth_db(&p, &|_| false).is_err());
        let cfg = config("[general]\nauth_user = \"a\"\nauth_dbname = \"meta\"\n");
        let p = plan(&cfg, "pgbouncer", "new").unwrap();
        assert_eq!(p.auth_db, "meta");
        assert!(check_auth_db(&p, &|_| false).is_ok());
        let e = check_auth_db(&p, &|db| db == "meta").unwrap_err();
        assert_eq!(
            e.client_message(),
            "authentication database \"meta\" is disabled"
        );
        // No auth_user in [general]: the console's logins are not looked up.
        let cfg = config("[databases.\"*\"]\nauth_user = \"b\"\n");
        assert_eq!(plan(&cfg, "pgbouncer", "new"), None);
    }
}
