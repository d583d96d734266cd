//! pgbouncer.ini's `[databases]`, `[users]` and `[peers]` entries (connection strings of `key=value` pairs) converted to pgcorral's databases and users.

use super::ini::{connstr, At};
use super::pgbouncer::{count, warn};
use super::pgbouncer_general::Extra;
use super::pgcat::Conv;
use super::validate::RESERVED_DATABASES;
use super::{Database, General, LoadBalanceHosts, PeerEntry, PoolMode, User};

/// The pairs of an entry's connection string; an error naming the entry otherwise.
fn pairs(c: &mut Conv, at: &At, entry: &str, value: &str) -> Option<Vec<(String, String)>> {
    match connstr(value) {
        Ok(p) => Some(p),
        Err(e) => {
            c.errors.push(format!("{at}: {entry}: {e}"));
            None
        }
    }
}

/// A pair's value that is wrong: the error names the entry's key and the line.
fn bad(c: &mut Conv, at: &At, key: &str, value: &str, why: &str) {
    c.errors
        .push(format!("{at}: invalid value \"{value}\" for {key}: {why}"));
}

fn pool_mode(v: &str) -> Option<PoolMode> {
    match v.to_ascii_lowercase().as_str() {
        "session" => Some(PoolMode::Session),
        "transaction" => Some(PoolMode::Transaction),
        "statement" => Some(PoolMode::Statement),
        _ => None,
    }
}

/// A count (`pool_size=5`); PgBouncer's `atoi` would take `abc` as 0, pgcorral refuses it.
fn number(c: &mut Conv, at: &At, key: &str, v: &str) -> Option<usize> {
    count(v).map_err(|why| bad(c, at, key, v, why)).ok()
}

/// A `[databases]` or `[users]` timeout: whole seconds (PgBouncer reads them with `atoi`; a
/// fraction or a unit is refused here) as ms; `None` for -1, PgBouncer's "not set".
fn timeout(c: &mut Conv, at: &At, key: &str, v: &str) -> Option<u64> {
    if v.trim() == "-1" {
        return None;
    }
    number(c, at, key, v).and_then(|s| (s as u64).checked_mul(1000))
}

/// `name = connstr` of `[databases]` (`*` is the template for any other name).
pub(super) fn database(
    c: &mut Conv,
    g: &General,
    x: &Extra,
    name: &str,
    value: &str,
    at: &At,
) -> Option<Database> {
    let entry = format!("databases.{name}");
    if RESERVED_DATABASES.contains(&name) {
        c.errors.push(format!(
            "{at}: database name \"{name}\" is reserved for the admin console"
        ));
        return None;
    }
    let mut db = Database::default();
    let mut host = None;
    let mut password = None;
    for (k, v) in pairs(c, at, &entry, value)? {
        let key = format!("{entry}.{k}");
        let key = key.as_str();
        match k.as_str() {
            "dbname" => db.dbname = Some(v),
            "host" => host = Some(v),
            "port" => match v.parse::<u16>() {
                Ok(p) if p > 0 => db.port = p,
                _ => bad(c, at, key, &v, "not a port number (1..65535)"),
            },
            "user" => db.user = Some(v),
            "password" => password = Some(v),
            "pool_size" => match number(c, at, key, &v) {
                Some(0) => bad(c, at, key, &v, "pgcorral needs at least 1"),
                n => db.pool_size = n,
            },
            "min_pool_size" => db.min_pool_size = number(c, at, key, &v),
            "reserve_pool" | "reserve_pool_size" => db.reserve_pool_size = number(c, at, key, &v),
            // 0: the global cap, as PgBouncer.
            "max_db_connections" => {
                db.max_db_connections = number(c, at, key, &v).filter(|&n| n > 0)
            }
            "pool_mode" => match pool_mode(&v) {
                Some(m) => db.pool_mode = Some(m),
                None => bad(c, at, key, &v, "session, transaction or statement"),
            },
            // 0: the global cap, as PgBouncer.
            "max_db_client_connections" => {
                db.max_db_client_connections = number(c, at, key, &v).filter(|&n| n > 0)
            }
            // 0: [pgbouncer]'s, as PgBouncer.
            "server_lifetime" => db.server_lifetime = timeout(c, at, key, &v).filter(|&ms| ms > 0),
            // 0: wait forever; -1: [pgbouncer]'s (or the user's).
            "query_wait_timeout" => db.query_wait_timeout = timeout(c, at, key, &v),
            "load_balance_hosts" => match v.to_ascii_lowercase().as_str() {
                "disable" => db.load_balance_hosts = Some(LoadBalanceHosts::Disable),
                "round-robin" => db.load_balance_hosts = Some(LoadBalanceHosts::RoundRobin),
                _ => bad(c, at, key, &v, "disable or round-robin"),
            },
            "connect_query" => db.connect_query = Some(v),
            "client_encoding" | "datestyle" | "timezone" | "application_name" => {
                db.startup_parameters.insert(k.to_ascii_lowercase(), v);
            }
            "auth_user" => db.auth_user = Some(v),
            "auth_dbname" => db.auth_dbname = Some(v),
            "auth_query" => db.auth_query = Some(v),
            _ => c.errors.push(format!(
                "{at}: {entry}: unrecognized connection parameter: {k}"
            )),
        }
    }
    let host = match host {
        // PgBouncer: no host is the Unix socket in unix_socket_dir.
        None if g.unix_socket_dir.is_empty() => {
            c.errors.push(format!("{at}: {entry}: no host, and unix_socket_dir (where PgBouncer then looks for the server's socket) is empty"));
            return None;
        }
        None => g.unix_socket_dir.clone(),
        Some(h) if h.starts_with('@') => {
            bad(
                c,
                at,
                &format!("{entry}.host"),
                &h,
                "abstract Unix sockets are not supported by pgcorral",
            );
            return None;
        }
        Some(h) => h,
    };
    let hosts: Vec<&str> = host.split(',').map(str::trim).collect();
    if hosts.iter().any(|h| h.is_empty()) {
        bad(
            c,
            at,
            &format!("{entry}.host"),
            &host,
            "an empty host in the list",
        );
        return None;
    }
    // A list is kept as written (without spaces): each new server connection picks from it.
    db.host = hosts.join(",");
    if hosts.len() == 1 && db.load_balance_hosts.is_some() {
        warn(
            c,
            at,
            &format!("{entry}.load_balance_hosts"),
            "accepted, no effect with one host",
        );
    }
    match (&db.user, password) {
        (Some(_), p) => db.password = p,
        (None, Some(_)) => warn(
            c,
            at,
            &format!("{entry}.password"),
            "ignored without user=, as PgBouncer ignores it",
        ),
        (None, None) => {}
    }
    if x.any() && db.user.is_none() {
        warn(c, at, &entry, "auth_type = any needs user= (PgBouncer refuses its clients): pgcorral logs in to the server as the client's user name");
    }
    Some(db)
}

/// `name = key=value ...` of `[users]`.
pub(super) fn user(c: &mut Conv, name: &str, value: &str, at: &At) -> Option<User> {
    let entry = format!("users.{name}");
    let mut u = User::default();
    for (k, v) in pairs(c, at, &entry, value)? {
        let key = format!("{entry}.{k}");
        let key = key.as_str();
        match k.as_str() {
            "pool_mode" => match pool_mode(&v) {
                Some(m) => u.pool_mode = Some(m),
                None => bad(c, at, key, &v, "session, transaction or statement"),
            },
            "pool_size" => match number(c, at, key, &v) {
                Some(0) => bad(c, at, key, &v, "pgcorral needs at least 1"),
                n => u.pool_size = n,
            },
            "max_user_connections" => {
                u.max_user_connections = number(c, at, key, &v).filter(|&n| n > 0)
            }
            "reserve_pool_size" => u.reserve_pool_size = number(c, at, key, &v),
            // 0: the global cap, as PgBouncer.
            "max_user_client_connections" => {
                u.max_user_client_connections = number(c, at, key, &v).filter(|&n| n > 0)
            }
            // 0 (or -1): [pgbouncer]'s, as PgBouncer.
            "query_timeout" => u.query_timeout = timeout(c, at, key, &v).filter(|&ms| ms > 0),
            "idle_transaction_timeout" => {
                u.idle_transaction_timeout = timeout(c, at, key, &v).filter(|&ms| ms > 0)
            }
            "transaction_timeout" => {
                u.transaction_timeout = timeout(c, at, key, &v).filter(|&ms| ms > 0)
            }
            "client_idle_timeout" => {
                u.client_idle_timeout = timeout(c, at, key, &v).filter(|&ms| ms > 0)
            }
            // 0: wait forever; -1: the database's or [pgbouncer]'s.
            "query_wait_timeout" => u.query_wait_timeout = timeout(c, at, key, &v),
            _ => c
                .errors
                .push(format!("{at}: {entry}: unrecognized user parameter: {k}")),
        }
    }
    Some(u)
}

/// `N = host=... [port=...] [pool_size=...]` of `[peers]`, checked as PgBouncer checks it.
/// `pool_size` (PgBouncer's limit on connections to the peer) is read and not used: pgcorral
/// opens one connection per forwarded cancel request.
pub(super) fn peer(c: &mut Conv, id: &str, value: &str, at: &At) -> Option<(u16, PeerEntry)> {
    let entry = format!("peers.{id}");
    let Some(n) = id.parse::<u16>().ok().filter(|&n| n > 0) else {
        c.errors.push(format!(
            "{at}: {entry}: ids of peers must be a number larger than 0 and at most 65535"
        ));
        return None;
    };
    let pairs = pairs(c, at, &entry, value)?;
    let (mut host, mut port) = (None, 6432);
    for (k, v) in pairs {
        let key = format!("{entry}.{k}");
        match k.as_str() {
            "host" => host = Some(v),
            "port" => match v.parse::<u16>() {
                Ok(p) if p > 0 => port = p,
                _ => bad(c, at, &key, &v, "not a port number (1..65535)"),
            },
            "pool_size" => {
                number(c, at, &key, &v);
            }
            _ => c
                .errors
                .push(format!("{at}: {entry}: unrecognized peer parameter: {k}")),
        }
    }
    let Some(host) = host else {
        c.errors.push(format!(
            "{at}: {entry}: host was not provided for peer {id}"
        ));
        return None;
    };
    Some((n, PeerEntry { host, port }))
}
