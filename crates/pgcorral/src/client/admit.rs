//! A client's admission: startup packets, limits, authentication, its pool, its startup
//! parameters applied on a server, and the welcome (parameters, key, ReadyForQuery).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use corral_rt::timer;
use pgwire::backend::TxStatus;
use pgwire::encode;

use super::access::{self, Access};
use super::auth::Authenticated;
use super::startup::{self, Opening};
use super::{login_auth, params, replication, tenant, ClientConn, LoggedIn};
use crate::admin;
use crate::cancel::{self, CancelSlot};
use crate::clock;
use crate::cluster;
use crate::config;
use crate::config::{millis_opt, PoolMode};
use crate::connlog::{self, Who};
use crate::conns;
use crate::error::{Error, Kind, Result};
use crate::link::Link;
use crate::login_places::{self, Lane, Source};
use crate::logsafe::Esc;
use crate::net::peer::Peer;
use crate::pool::registry;
use crate::pool::{logins, Checkout, ClientWait, Pool};
use crate::route;
use crate::services::{ClientCount, LoginCount, Services, PRESSURE_LOGIN_TIMEOUT};
use crate::session::startup as session_startup;
use crate::session::{apply, Settings};
use crate::tls;

/// A client past login.
pub(super) enum Admitted {
    /// A client of a pool (boxed: its session is the largest by far, and moves between
    /// workers).
    Pool(Box<LoggedIn>),
    /// An admin console user, listed in SHOW CLIENTS (database `pgbouncer`, as PgBouncer).
    Console(admin::Role, conns::Listed),
    /// A replication client with its own server.
    Replication(Box<replication::Link>),
}

/// Startup packets, limits, authentication and the welcome. `None` when the client is done
/// (a cancel request, a probe, or a failure already reported to it). The connection holds its
/// place of the login budget (in `lane`) until it has authenticated (or this returns), and is
/// counted from then on against max_client_conn, by the returned guard.
pub(super) async fn admit(
    client: &mut ClientConn,
    services: &Services,
    lane: Lane,
) -> Option<(Admitted, ClientCount)> {
    let login_timeout = millis_opt(services.config.load().general.client_login_timeout)
        .unwrap_or(std::time::Duration::MAX);
    let limit = Limit {
        start: tokio::time::Instant::now(),
        deadline: tokio::time::Instant::now().checked_add(login_timeout),
        services,
        login: parking_lot::Mutex::new(Some(LoginCount::adopt(
            services,
            Source::of(client.peer.ip()),
            lane,
        ))),
        lane,
    };
    let timed_out = |short: bool| {
        let message = match short {
            true if lane == Lane::Console => format!(
                "login not completed within {} ms in a place kept for the console",
                limit.start.elapsed().as_millis()
            ),
            true => format!(
                "login not completed within {} ms while more than half of max_login_clients is in use",
                limit.start.elapsed().as_millis()
            ),
            false => format!(
                "client_login_timeout: login not completed within {} ms",
                login_timeout.as_millis()
            ),
        };
        Error::new(Kind::ClientIdle, message)
    };
    let tls = services.tls.load_full();
    // Over a Unix socket there is no TLS, and none is required (as PgBouncer and PostgreSQL).
    let unix = client.stream.is_unix();
    let side = tls.client.as_ref().filter(|_| !unix);
    let opening = match limit
        .run(startup::open(&mut client.stream, &mut client.buf, side))
        .await
    {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return fail(client, services, None, e).await,
        // Not authenticated: closed without a word, as PostgreSQL does.
        Err(short) => return out_of_time(client, timed_out(short)),
    };
    let (minor, params) = match opening {
        Opening::Closed => return None,
        Opening::Ended(e) => {
            tracing::info!(peer = %client.peer, error = %e, "client startup refused");
            return None;
        }
        Opening::Cancel { pid, secret } => {
            let config = services.config.load_full();
            let wait = millis_opt(config.general.cancel_wait_timeout);
            // A peer of the file's `[peers]`, else another node of the fleet.
            let peer = cancel::peer_of(&config, secret)
                .cloned()
                .or_else(|| services.tenants.get().and_then(|t| t.fleet.peer(secret)));
            services
                .cancel
                .cancel(pid, secret, wait, peer.as_ref())
                .await;
            return None;
        }
        Opening::Session { minor, params } => (minor, params),
    };
    if side.is_some_and(|t| t.mode.required()) && !client.stream.is_tls() {
        // Before any password is asked for.
        return fail(
            client,
            services,
            None,
            Error::new(Kind::Refused, "SSL required"),
        )
        .await;
    }
    let binding = match client.stream.is_tls() {
        true => tls.client.as_ref().and_then(|t| t.binding.clone()),
        false => None,
    };
    drop(tls);
    let mut taken = params::take(&params);
    if lane == Lane::Console && !admin::is_console(&taken.database.text) {
        // A place beyond the budget, kept for the console: others are refused as they would
        // have been at accept.
        return fail(client, services, None, login_places::refusal()).await;
    }
    if taken.user.text.is_empty() {
        let e = Error::new(
            Kind::UnknownUser,
            "no PostgreSQL user name specified in startup packet",
        );
        return fail(client, services, None, e).await;
    }
    // As sent: a tenant's login goes on under the tenant's names.
    let (sent_db, sent_user) = (taken.database.text.clone(), taken.user.text.clone());
    let names = Some((sent_db.as_str(), sent_user.as_str()));
    if services.shutdown.is_exiting() {
        let e = Error::new(Kind::Shutdown, "pgcorral is shutting down");
        return fail(client, services, names, e).await;
    }
    // What the login has for the client before its welcome (NegotiateProtocolVersion,
    // AuthenticationOk): a refusal after it is sent after it, as PostgreSQL sends its
    // post-authentication refusals (unknown database, no server, ...) after AuthenticationOk.
    let mut told = BytesMut::new();
    let login = limit
        .run(login(
            client, &mut told, &mut taken, minor, &params, binding, &limit,
        ))
        .await;
    match login {
        Ok(Ok(admitted)) => {
            let listed = match &admitted.0 {
                Admitted::Pool(s) => &s.listed,
                Admitted::Console(_, l) => l,
                Admitted::Replication(r) => &r.listed,
            };
            let g = services.config.load();
            connlog::login(
                g.general.conn_logging(),
                &Who::client(listed, &client.peer),
                listed.tls(),
            );
            Some(admitted)
        }
        Ok(Err(e)) => {
            // A name that was not UTF-8 is quoted as it was sent.
            let name = [&taken.user, &taken.database]
                .into_iter()
                .find_map(|n| n.raw.as_deref().map(|raw| (n.text.as_str(), raw)))
                .filter(|(text, _)| e.message().contains(&format!("\"{text}\"")));
            match name {
                Some((text, raw)) => {
                    log_failed(client, services, names, &e);
                    e.write_response_quoting(&mut told, "FATAL", text, raw);
                    let _ = client.stream.send(&told).await;
                    None
                }
                None => fail_after(client, services, names, e, told).await,
            }
        }
        Err(short) if !limit.is_authenticated() => out_of_time(client, timed_out(short)),
        // Authenticated, then waiting for a server or for its startup parameters to be
        // applied (PostgreSQL has no timeout there): told why.
        Err(short) => fail_after(client, services, names, timed_out(short), told).await,
    }
}

/// Ends a login that ran out of time before the client authenticated: logged, and closed
/// without a word to the client, as PostgreSQL's authentication_timeout does both while it
/// reads the startup packet (the backend exits at once) and during authentication (its FATAL
/// "canceling authentication due to timeout" goes to the log only, not to a client that has
/// not authenticated).
fn out_of_time<T>(client: &ClientConn, e: Error) -> Option<T> {
    tracing::info!(peer = %client.peer, error = %Esc(&e), sqlstate = e.sqlstate(), "client login timed out");
    None
}

/// How long a login may take: until client_login_timeout (`deadline`, `None` = no limit), and
/// while unauthenticated and more than half of the login budget is in use (or in a place kept
/// for the console, always), no longer than [`PRESSURE_LOGIN_TIMEOUT`] (checked every that long
/// from the connection's start).
struct Limit<'a> {
    start: tokio::time::Instant,
    deadline: Option<tokio::time::Instant>,
    services: &'a Services,
    /// The connection's place in the login budget, until it has authenticated.
    login: parking_lot::Mutex<Option<LoginCount>>,
    /// Which place of the login budget the connection holds.
    lane: Lane,
}

impl Limit<'_> {
    /// The client has authenticated: it leaves the login budget (it is counted against
    /// max_client_conn now) and is no longer cut short by its pressure.
    fn authenticated(&self) {
        drop(self.login.lock().take());
    }

    /// Whether [`Limit::authenticated`] was called.
    fn is_authenticated(&self) -> bool {
        self.login.lock().is_none()
    }

    /// Runs `f` within the limit; `Err(short)` when it expired, `short` when it was cut
    /// short by the login budget's pressure.
    async fn run<T>(
        &self,
        f: impl std::future::Future<Output = T>,
    ) -> std::result::Result<T, bool> {
        let mut f = std::pin::pin!(f);
        let mut check = self.start;
        loop {
            check += PRESSURE_LOGIN_TIMEOUT;
            match self.deadline {
                Some(d) if d <= check => {
                    return timer::timeout_at(d, f).await.map_err(|_| false);
                }
                _ => {}
            }
            if let Ok(v) = timer::timeout_at(check, f.as_mut()).await {
                return Ok(v);
            }
            let pressed = self.lane == Lane::Console || self.services.login_pressure();
            if self.login.lock().is_some() && pressed {
                return Err(true);
            }
        }
    }
}

/// Names a client sent (database, user), when it got that far.
type Names<'a> = Option<(&'a str, &'a str)>;

/// Reports a startup/login failure as FATAL and logs it.
pub(super) async fn fail<T>(
    client: &mut ClientConn,
    services: &Services,
    names: Names<'_>,
    e: Error,
) -> Option<T> {
    fail_after(client, services, names, e, BytesMut::new()).await
}

/// [`fail`], the FATAL written after `told` (what the login had for the client), in one write.
async fn fail_after<T>(
    client: &mut ClientConn,
    services: &Services,
    names: Names<'_>,
    e: Error,
    mut told: BytesMut,
) -> Option<T> {
    log_failed(client, services, names, &e);
    e.write_response(&mut told, "FATAL");
    let _ = client.stream.send(&told).await;
    None
}

/// A refused login: why it was closed (log_disconnections) and the error it was sent
/// (log_pooler_errors), as PgBouncer logs both, with the SQLSTATE in pgcorral's format.
fn log_failed(client: &ClientConn, services: &Services, names: Names<'_>, e: &Error) {
    let (db, user) = names.unwrap_or(("(nodb)", "(nouser)"));
    let who = Who::arriving(&client.peer, db, user);
    let g = services.config.load();
    connlog::closing(g.general.conn_logging(), &who, &e.client_message());
    connlog::pooler_error(g.general.conn_logging(), &who, &e.client_message());
    tracing::debug!(peer = %client.peer, error = %Esc(e), sqlstate = e.sqlstate(), "client login failed");
}

/// Authenticates, finds the pool, applies the startup parameters, and sends the welcome:
/// parameters, key, ReadyForQuery. `sent`: the parameters as sent, `taken` from them.
async fn login(
    client: &mut ClientConn,
    out: &mut BytesMut,
    taken: &mut params::Params,
    minor: u16,
    sent: &[(pgwire::startup::Param, pgwire::startup::Param)],
    binding: Option<Vec<u8>>,
    limit: &Limit<'_>,
) -> Result<(Admitted, ClientCount)> {
    let services = limit.services;
    // The client's id, before any server its login opens (SHOW CLIENTS, KILL_CLIENT).
    let id = services.pools.lists.reserve();
    let scope = tenant::scope(client, services, taken).await?;
    let taken = &*taken;
    let config = scope.config.clone();
    let (user, database) = (taken.user.text.as_str(), taken.database.text.as_str());
    out.reserve(512);
    startup::negotiate(out, minor, sent);
    let console = admin::is_console(database);
    let hba = services.hba.load();
    let access = match access::decide(client, &config, &hba, taken, console, None)? {
        Some(access) => access,
        None => {
            // A `+role` or `samerole` rule decides: the user's roles, from the server.
            let roles = login_auth::roles(client, services, &scope, taken).await?;
            access::decide(client, &config, &hba, taken, console, Some(&roles))?
                .ok_or_else(|| Error::new(Kind::Refused, "the hba rules could not be decided"))?
        }
    };
    let authed = match access {
        Access::Own => access::welcome_own(out),
        Access::Method(method) => {
            login_auth::authenticate(
                client,
                out,
                services,
                &scope,
                method,
                taken,
                binding.as_deref(),
            )
            .await?
        }
    };
    if !config.general.login_notify_message.is_empty() {
        // After AuthenticationOk, as PgBouncer sends it.
        let msg = &config.general.login_notify_message;
        encode::notice_response(out, "NOTICE", "00000", msg);
    }
    // A name that is not UTF-8 names none of pgcorral's users or databases, and cannot be
    // passed to a server: refused as PostgreSQL refuses a role that does not exist (the
    // authentication refused it already where pgcorral knows its users), or as pgcorral
    // refuses a database it does not know.
    if !taken.user.is_text() {
        let e = format!("role \"{user}\" does not exist");
        return Err(Error::new(Kind::UnknownUser, e));
    }
    if !taken.database.is_text() {
        return Err(registry::unknown_database(database));
    }
    // Counted from a successful authentication on; admin users on the console have a few
    // places more, so that it stays reachable when every other place is taken.
    let own = access == Access::Own;
    let admin = console && (own || config.general.admin_users.iter().any(|u| u == user));
    let Some(mut count) = services.admit_client(admin) else {
        return Err(Error::new(
            Kind::TooManyClients,
            "no more connections allowed (max_client_conn)",
        ));
    };
    limit.authenticated();
    if console {
        // Every console user counts under the console's database (whichever of its names it
        // asked for), capped by [general]'s max_db_client_connections only, as PgBouncer's.
        let caps = (
            config.general.max_db_client_connections,
            config.user_client_cap(user),
        );
        // Who may not use the console is told so, whatever the caps.
        let role = console_role(services, user, own)?;
        name_client(&mut count, admin::CONSOLE_DB, user, caps, admin)?;
        return console_login(client, services, user, database, role, out.split(), id)
            .await
            .map(|a| (a, count));
    }
    pool_login(
        client,
        services,
        scope,
        taken,
        (authed, &mut count),
        out,
        id,
    )
    .await
    .map(|a| (a, count))
}

/// A pool client's login once it is authenticated and counted (`count`, named here under its
/// database and user): its pool, its startup parameters applied (by a server, or as a login
/// with the same ones came out before), the welcome sent. A replication client, or one whose
/// server is a pooler's console, is linked to a server of its own instead.
async fn pool_login(
    client: &mut ClientConn,
    services: &Services,
    scope: tenant::Scope,
    taken: &params::Params,
    (authed, count): (Authenticated, &mut ClientCount),
    out: &mut BytesMut,
    id: u64,
) -> Result<Admitted> {
    let config = scope.config.clone();
    let (user, database) = (taken.user.text.as_str(), taken.database.text.as_str());
    if services.shutdown.is_stopping() {
        // A stop that waits keeps the Unix socket for the console only (as PgBouncer); others
        // are refused as PostgreSQL refuses logins while it shuts down (57P03).
        return Err(Error::new(Kind::Stopping, "pgcorral is shutting down"));
    }
    // Only an authenticated client learns whether the database exists, as with PostgreSQL.
    let cluster = scope.pools(services).get(&config, database, user)?;
    let caps = (config.db_client_cap(database), config.user_client_cap(user));
    // A tenant's client is counted under the name it sent (`alias.ID`).
    name_client(count, database, &scope.login, caps, false)?;
    let pool = cluster.home().clone();
    if services.control.is_disabled(database) {
        return Err(Error::new(
            Kind::Disabled,
            // PgBouncer's words.
            format!("database \"{database}\" is disabled"),
        ));
    }
    if let Some(key) = authed.client_key {
        cluster.learn_client_key(key);
    }
    if let Some(e) = &taken.unusable {
        return Err(e.replay());
    }
    let params = &taken.text;
    // A pooler's console as the server (see `replication::is_console`): known from the pool's
    // first server; on the pool's first login, found by the checkout below.
    let asked_replication = session_startup::replication(params);
    let console =
        asked_replication.is_none() && pool.params().is_some_and(|p| replication::is_console(&p));
    if asked_replication.is_some() || console {
        return replication::login(
            client,
            services,
            &pool,
            asked_replication,
            (user, params),
            out,
            id,
        )
        .await;
    }
    let startup_settings =
        session_startup::settings(params, &config.general.ignore_startup_parameters)?;
    let slot = Arc::new(CancelSlot::default());
    let wait = ClientWait::of_user(&config, user);
    let session_mode = pool.settings().mode == PoolMode::Session;
    let mut settings = Settings::default();
    let mut startup = Settings::default();
    let mut server = None;
    let mut server_params = pool.params();
    // A login with parameters sent before reuses what they came to: no server needed.
    let known = match (&server_params, session_mode || startup_settings.is_empty()) {
        (Some(_), false) => pool.logins().get(&startup_settings),
        _ => None,
    };
    if let Some(login) = known {
        settings = login.settings;
        startup = login.startup;
        server_params = Some(login.params);
    } else if session_mode || !startup_settings.is_empty() || server_params.is_none() {
        if services.control.is_paused(database) {
            services.control.wait_resumed(database).await;
        }
        match first_server(client, &cluster, startup_settings, wait).await? {
            None => {
                return replication::login(client, services, &pool, None, (user, params), out, id)
                    .await
            }
            Some(applied) => {
                (settings, startup, server_params) =
                    (applied.settings, applied.startup, Some(applied.params));
                server = applied.server;
            }
        }
    }
    let pid = match &server {
        Some(s) => {
            slot.set(Some(s.key.clone()));
            s.key.pid
        }
        None => rand::random::<i32>() & 0x7fff_ffff,
    };
    let server_params = server_params.unwrap_or_default();
    for (k, v) in server_params.iter() {
        encode::parameter_status(out, k, v);
    }
    let escapes = route::escapes(&server_params);
    let (secret, listed) = welcome(
        client,
        services,
        out.split(),
        &pool,
        (&scope.login, params),
        (pid, slot.clone()),
        id,
    )
    .await?;
    if let Some(t) = &scope.tenant {
        t.track(&listed.entry);
    }
    if let Some(l) = server.as_ref().and_then(|s| s.listed.as_ref()) {
        // Session mode: the login's server is the client's (SHOW CLIENTS/SERVERS `link`).
        l.set_link(listed.id);
        listed.set_link(l.id);
    }
    pool.client_joined();
    pool.stats().logged_in(client.worker);
    let session = Admitted::Pool(Box::new(LoggedIn {
        tenant: scope.tenant,
        pool,
        cluster,
        // Allocated where routing needs it; at once when strings take backslash escapes.
        route: escapes.then(|| {
            Box::new(route::ClientRoute {
                escapes,
                ..Default::default()
            })
        }),
        listed,
        link: server.map_or(Link::Free, Link::Pooled),
        slot,
        pid,
        secret,
        settings,
        startup,
        pinned: thin_vec::ThinVec::new(),
        wait,
        listening: None,
    }));
    Ok(session)
}

/// What a pool client's startup parameters came to on a server.
struct Applied {
    /// The client's settings, and those of them it sent at startup, as the server canonicalised
    /// them.
    settings: Settings,
    startup: Settings,
    /// The server's ParameterStatus values, for the client's welcome.
    params: Arc<Vec<(String, String)>>,
    /// The server, kept by a session-mode client.
    server: Option<Checkout>,
}

/// A server of `cluster` applies the client's `startup_settings`, so the client is told the
/// values as the server canonicalises them (and the first login to a pool learns its
/// parameters); what a transaction-mode login learned is kept for the next with the same
/// parameters. `None`: the server is a pooler's console (the client is linked to one of its
/// own instead).
async fn first_server(
    client: &ClientConn,
    cluster: &cluster::Cluster,
    startup_settings: Vec<(String, String)>,
    wait: ClientWait,
) -> Result<Option<Applied>> {
    let pool = cluster.home();
    let session_mode = pool.settings().mode == PoolMode::Session;
    let mut settings = Settings::default();
    let mut startup = Settings::default();
    // A server applies the startup parameters, so the client is told the values as the
    // server canonicalises them (and the first login to a pool learns its parameters).
    let asked = clock::now();
    let mut s = cluster
        .checkout(session_target(cluster), client.worker, 0, wait)
        .await?;
    if replication::is_console(&s.params) {
        s.state.broken = true;
        return Ok(None);
    }
    let got = clock::now();
    s.pool()
        .stats()
        .waited(client.worker, got.micros_since(asked));
    if let Some(l) = &s.listed {
        l.requested_at(got);
    }
    if startup_settings.is_empty() {
        apply::sync(&mut s, &settings).await?;
    } else {
        let login_user = pool.server_user();
        let captured = apply::login(&mut s, &settings, &startup_settings, &login_user).await?;
        settings = captured.settings;
        if session_mode {
            // The server stays the client's: its statement_timeout, turned off while
            // pgcorral read the settings back, is the client's again before its first
            // request.
            apply::reinstate(&mut s, &captured.on_server, &settings).await?;
        }
        startup = Arc::new(
            settings
                .iter()
                .filter(|(n, _)| {
                    startup_settings
                        .iter()
                        .any(|(k, _)| k.eq_ignore_ascii_case(n))
                })
                .cloned()
                .collect(),
        );
        if !session_mode {
            pool.logins().put(
                startup_settings,
                logins::Login {
                    settings: settings.clone(),
                    startup: startup.clone(),
                    params: s.params.clone(),
                },
            );
        }
    }
    Ok(Some(Applied {
        settings,
        startup,
        params: s.params.clone(),
        server: session_mode.then_some(s),
    }))
}

/// The end of a pool client's welcome: its cancel key (`pid`, and the slot that reaches its
/// server) registered and sent with ReadyForQuery after what `out` holds, and the client
/// listed for SHOW CLIENTS under its own login name `user` (under a forced user the pool is
/// that user's). Returns the key's secret and the listing; on failure the key is unregistered.
pub(super) async fn welcome(
    client: &mut ClientConn,
    services: &Services,
    mut out: BytesMut,
    pool: &Pool,
    (user, params): (&str, &[(String, String)]),
    (pid, slot): (i32, Arc<CancelSlot>),
    id: u64,
) -> Result<(i32, conns::Listed)> {
    let peer_id = services.config.load().general.peer_id;
    let secret = services.cancel.register(pid, slot, peer_id);
    encode::backend_key_data(&mut out, pid, secret);
    encode::ready_for_query(&mut out, TxStatus::Idle);
    if let Err(e) = client.stream.send(&out).await {
        services.cancel.unregister(pid, secret);
        return Err(Error::with_source(Kind::ClientIo, "write", e));
    }
    let application_name = params
        .iter()
        .rfind(|(k, _)| k == "application_name")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let (database, user) = listed_names(pool, user);
    match list_client(client, services, user, database, application_name, id) {
        Ok(listed) => Ok((secret, listed)),
        Err(e) => {
            services.cancel.unregister(pid, secret);
            Err(e)
        }
    }
}

/// Counts a client under its database and user, refused (with PgBouncer's words) when that
/// puts it over `max_db_client_connections` or `max_user_client_connections`; `exempt`: an
/// admin user on the console.
fn name_client(
    count: &mut ClientCount,
    database: &str,
    user: &str,
    caps: (usize, usize),
    exempt: bool,
) -> Result<()> {
    count.name(database, user, caps, exempt).map_err(|key| {
        Error::new(
            Kind::TooManyClients,
            format!("client connections exceeded ({key})"),
        )
    })
}

/// Where a server for the whole session (session mode), or for the login's parameters, comes
/// from: the database's default role (the query parser cannot route a whole session).
fn session_target(cluster: &cluster::Cluster) -> cluster::Target {
    use crate::cluster::{Target, Want};
    let want = match cluster.topology().settings().default_role {
        config::DefaultRole::Primary => Want::Primary,
        config::DefaultRole::Replica => Want::Replica,
        config::DefaultRole::Any => Want::Any,
    };
    Target::first_shard(want, false)
}

/// The console role of an authenticated user (the console's `own` user is an admin); refused
/// when the user is neither an admin nor a stats user.
fn console_role(services: &Services, user: &str, own: bool) -> Result<admin::Role> {
    let role = match own {
        true => Some(admin::Role::Admin),
        false => admin::role(services, user),
    };
    role.ok_or_else(|| {
        Error::new(
            Kind::UnknownUser,
            format!("not allowed: user \"{user}\" is in neither admin_users nor stats_users"),
        )
    })
}

/// Welcomes an authenticated admin or stats user (or the console's `own` user, an admin) to
/// the console, without a server.
async fn console_login(
    client: &mut ClientConn,
    services: &Services,
    user: &str,
    database: &str,
    role: admin::Role,
    mut out: BytesMut,
    id: u64,
) -> Result<Admitted> {
    for (k, v) in [
        (
            "server_version",
            concat!(env!("CARGO_PKG_VERSION"), "/pgcorral"),
        ),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO"),
        ("TimeZone", "UTC"),
        ("standard_conforming_strings", "on"),
        ("integer_datetimes", "on"),
        ("application_name", ""),
    ] {
        encode::parameter_status(&mut out, k, v);
    }
    encode::backend_key_data(
        &mut out,
        rand::random::<i32>() & 0x7fff_ffff,
        rand::random(),
    );
    encode::ready_for_query(&mut out, TxStatus::Idle);
    client
        .stream
        .send(&out)
        .await
        .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))?;
    let listed = list_client(
        client,
        services,
        user.into(),
        database.into(),
        String::new(),
        id,
    )?;
    services.console_stats.logged_in(client.worker);
    Ok(Admitted::Console(role, listed))
}

/// The names a pool client is listed under in SHOW CLIENTS: its pool's database, and its own
/// login name `user` (under a forced user the pool is that user's).
pub(super) fn listed_names(pool: &Pool, user: &str) -> (Arc<str>, Arc<str>) {
    let (database, pool_user) = pool.listed_names();
    let user = match *pool_user == *user {
        true => pool_user,
        false => Arc::from(user),
    };
    (database, user)
}

/// Lists a logged-in client for SHOW CLIENTS (and KILL_CLIENT) under `id`.
pub(super) fn list_client(
    client: &ClientConn,
    services: &Services,
    user: Arc<str>,
    database: Arc<str>,
    application_name: String,
    id: u64,
) -> Result<conns::Listed> {
    let local = match client.peer {
        Peer::Unix { .. } => None,
        Peer::Tcp(_) => {
            let (Ok(_), Ok(local)) = (client.stream.peer_addr(), client.stream.local_addr()) else {
                return Err(Error::new(
                    Kind::ClientIo,
                    "client connection closed during login",
                ));
            };
            Some(local)
        }
    };
    let tls = client.stream.tls().map(tls::describe).unwrap_or_default();
    let names = (user, database);
    Ok(list_at(
        services,
        id,
        client.peer,
        local,
        names,
        application_name,
        tls,
    ))
}

/// Lists a client that connected from `peer` (over TCP, to `local`) for SHOW CLIENTS under
/// `id`, as `names` (user, database).
pub(super) fn list_at(
    services: &Services,
    id: u64,
    peer: Peer,
    local: Option<SocketAddr>,
    (user, database): (Arc<str>, Arc<str>),
    application_name: String,
    tls: String,
) -> conns::Listed {
    let (addr, local, remote_pid) = match peer {
        // As PgBouncer: "unix" and the listen port; the process id is known only here.
        Peer::Unix { port, pid, .. } => (Peer::unix_addr(port), Peer::unix_addr(port), pid),
        Peer::Tcp(addr) => {
            let local = local.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
            (addr.socket_addr(), local, 0)
        }
    };
    services.pools.lists.add_as(
        conns::Kind::Client,
        id,
        conns::New {
            user,
            database,
            addr,
            local,
            unix: matches!(peer, Peer::Unix { .. }),
            application_name,
            state: conns::State::Active,
            remote_pid,
            tls,
            generation: 0,
        },
    )
}
