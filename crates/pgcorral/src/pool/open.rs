//! Opening a server connection for a pool: room under the shared caps, the login (waiting out a
//! server that is down, remembering a failed login), the listing, and `connect_query`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_rt::timer;

use super::limits::{CapGrant, Room};
use super::{checkout, inner, Checkout, ClientWait, Open, Pool, PoolSettings};
use crate::config::PoolMode;
use crate::connlog::{self, Who};
use crate::conns;
use crate::error::{Error, Kind, Result};
use crate::logsafe;
use crate::server::connect::Target;
use crate::server::{Permit, ServerConn};
use crate::session;
use crate::tls;

/// Room under the shared caps for a new server, or a server of the pool that came back while
/// the client waited for room (taken instead).
enum Place {
    Room(Option<Room>),
    Came(Checkout),
}

impl Pool {
    /// Opens a server in `slot` for `how`; a client waits at most `wait` (or the pool's).
    pub(super) async fn open_for(
        &self,
        slot: inner::Slot,
        worker: usize,
        how: Open<'_>,
        wait: ClientWait,
    ) -> Result<Checkout> {
        let settings = self.0.settings.load_full();
        let for_client = matches!(how, Open::Client);
        if for_client {
            if let Some((when, e)) = &*self.0.login_failed.lock() {
                if when.elapsed() < settings.login_retry {
                    return Err(e.replay());
                }
            }
        }
        let room = match self.room(&settings, wait).await? {
            Place::Room(r) => r,
            Place::Came(mut c) => {
                // Give back the place we were going to fill.
                drop(slot);
                return if c.rehome(worker) {
                    Ok(c)
                } else {
                    Err(Error::new(
                        Kind::ServerIo,
                        "could not move a server connection between workers",
                    ))
                };
            }
        };
        let mut target = self.0.target.lock().clone();
        if let Open::Dedicated(extra) = how {
            // The client's parameters win over the database's.
            target
                .startup
                .retain(|(k, _)| !extra.iter().any(|(n, _)| n.eq_ignore_ascii_case(k)));
            target.startup.extend(extra.iter().cloned());
        }
        let mut server = self
            .log_in(&settings, &target, worker, (for_client, wait))
            .await?;
        *self.0.login_failed.lock() = None;
        server.permit = room.map(Permit::new);
        server.generation = self.generation();
        server.hooks = Some(self.0.hooks.clone());
        if settings.mode != PoolMode::Session && for_client {
            // The database's user code, before the first transaction is judged by it (unless
            // another server is reading it): otherwise the first transactions of a pool are
            // captured and reset. A server error leaves the map unknown.
            session::apply::read_hooks(&mut server).await?;
        }
        self.list(&settings, &mut server, &target);
        slot.fulfil();
        {
            let mut p = self.0.params.lock();
            if p.is_none() {
                *p = Some(server.params.clone());
            }
        }
        let mut c = Checkout::new(Box::new(server), self.clone());
        // A replication connection may not run SQL (physical), and is its client's alone.
        if !settings.connect_query.is_empty() && !matches!(how, Open::Dedicated(_)) {
            self.connect_query(&settings, &mut c).await?;
        }
        Ok(c)
    }

    /// Room for one more server under the shared caps (none to take when there are no caps),
    /// waited for at most as long as the client may wait.
    async fn room(&self, settings: &PoolSettings, wait: ClientWait) -> Result<Place> {
        let (Some(l), Some(k)) = (&self.0.limits, &settings.caps) else {
            return Ok(Place::Room(None));
        };
        let acquire = l.acquire(k, self);
        let grant = match settings.wait_timeout(wait) {
            None => acquire.await,
            Some(t) => timer::timeout(t, acquire).await.map_err(|_| {
                Error::new(
                    Kind::PoolTimeout,
                    format!(
                        "query_wait_timeout: no room under max_db_connections/max_user_connections within {} ms",
                        t.as_millis()
                    ),
                )
            })?,
        };
        match grant {
            CapGrant::Permit(p) => Ok(Place::Room(Some(p))),
            CapGrant::Shutdown => Err(Error::server_shutting_down()),
            CapGrant::Server(c) => Ok(Place::Came(c)),
        }
    }

    /// Logs in to the server. A server that is down (restarting, failing over) is waited for,
    /// up to server_unavailable_wait, so that clients whose transaction has not started see no
    /// error; anything else fails at once. The wait ends sooner when the client may wait no
    /// longer (query_wait_timeout, query_timeout): it is then told that, as PgBouncer's waiting
    /// clients are. A client's failed login is remembered for server_login_retry.
    pub(super) async fn log_in(
        &self,
        settings: &PoolSettings,
        target: &Target,
        worker: usize,
        (for_client, wait): (bool, ClientWait),
    ) -> Result<ServerConn> {
        let started = Instant::now();
        let unavailable_end = started.checked_add(settings.unavailable_wait);
        let wait_end = settings
            .wait_limit(wait)
            .and_then(|l| started.checked_add(l));
        let mut pause = Duration::from_millis(50);
        let waited_too_long = || settings.waited_too_long(started.elapsed(), wait);
        loop {
            let attempt = self
                .0
                .hosts
                .connect(target, worker, settings.round_robin_hosts);
            let attempt = match (for_client, wait_end) {
                (true, Some(end)) => match timer::timeout_at(end.into(), attempt).await {
                    Ok(r) => r,
                    Err(_) => return Err(waited_too_long()),
                },
                _ => attempt.await,
            };
            match attempt {
                Ok(s) => return Ok(s),
                Err(e)
                    if for_client
                        && e.server_unavailable()
                        && unavailable_end.is_none_or(|t| Instant::now() < t) =>
                {
                    tracing::debug!(pool = ?self.0.name, error = %logsafe::Esc(&e), "server unavailable; waiting for it");
                    let now = Instant::now();
                    let next = [unavailable_end, wait_end]
                        .into_iter()
                        .flatten()
                        .map(|t| t.saturating_duration_since(now))
                        .fold(pause, Duration::min);
                    timer::sleep(next).await;
                    if wait_end.is_some_and(|t| Instant::now() >= t) {
                        return Err(waited_too_long());
                    }
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(e) => {
                    if e.kind() == Kind::ServerError {
                        tracing::warn!(db = %logsafe::Esc(&self.0.name.0), user = %logsafe::Esc(&self.0.name.1),
                            "server login failed: FATAL {}", logsafe::Esc(e.client_message()));
                        // And the server's own line, with the server's words as the reason,
                        // as PgBouncer closes a server whose login the server refused.
                        let addr = format!("{}:{}", target.host, target.port);
                        let who = Who::unlisted_server(&addr, &self.0.listed_names.0, &target.user);
                        connlog::closing(settings.log, &who, &e.client_message());
                    }
                    // Replayed to new logins for server_login_retry (for a server that is
                    // down: once a client has waited server_unavailable_wait for it in vain).
                    if for_client && !settings.login_retry.is_zero() {
                        *self.0.login_failed.lock() = Some((Instant::now(), e.replay()));
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Lists the new server (SHOW SERVERS) and logs its connection.
    fn list(&self, settings: &PoolSettings, server: &mut ServerConn, target: &Target) {
        let unix = server.stream.is_unix();
        let addrs = if unix {
            // Shown as "unix" with the server's port, as PgBouncer does.
            let a = std::net::SocketAddr::from(([0, 0, 0, 0], target.port));
            Ok((a, a))
        } else {
            server
                .stream
                .peer_addr()
                .and_then(|a| Ok((a, server.stream.local_addr()?)))
        };
        if let Ok((addr, local)) = addrs {
            server.listed = Some(self.0.lists.add(
                conns::Kind::Server,
                conns::New {
                    user: Arc::from(target.user.as_str()),
                    database: self.0.listed_names.0.clone(),
                    addr,
                    local,
                    unix,
                    application_name: String::new(),
                    state: conns::State::Active,
                    remote_pid: server.key.pid,
                    generation: server.generation,
                    tls: server.stream.tls().map(tls::describe).unwrap_or_default(),
                },
            ));
        }
        if let Some(l) = &server.listed {
            let local = l.local();
            let from: &dyn std::fmt::Display = match unix {
                true => &"unix socket",
                false => &local,
            };
            connlog::new_server(settings.log, &Who::server(l), from);
        }
    }

    /// Runs `connect_query` on a new server. Its settings are the server's starting state: what
    /// clients' settings are applied over (not a state to reset away), so the fresh server's
    /// bookkeeping is kept.
    async fn connect_query(&self, settings: &PoolSettings, c: &mut Checkout) -> Result<()> {
        let fresh = c.applied.clone();
        let query = Some(settings.connect_query.clone());
        let ran = timer::timeout(checkout::CLEANUP_TIMEOUT, checkout::clean(c, false, query));
        if !ran.await.unwrap_or(false) {
            self.closing(c, &"connect_query failed");
            c.state.broken = true;
            return Err(Error::new(
                Kind::ServerConnect,
                format!(
                    "connect_query {:?} failed on a new server connection",
                    settings.connect_query
                ),
            ));
        }
        c.applied = fresh;
        Ok(())
    }
}
