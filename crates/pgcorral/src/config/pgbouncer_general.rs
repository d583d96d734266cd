//! pgbouncer.ini's `[pgbouncer]` section converted to pgcorral's `[general]`, from PgBouncer's defaults; the keys themselves are listed in `pgbouncer_keys`.

use super::ini::At;
use super::pgbouncer::{invalid, warn};
use super::pgbouncer_keys::{lookup, parse, How, Val};
use super::pgcat::Conv;
use super::validate::listen_addr_ok;
use super::{AuthType, Config, General, LogFormat, PoolMode, SslMode};
use crate::tls;

/// pgcorral's `[general]` with PgBouncer's defaults where they differ: session mode, 100
/// clients, md5 logins, 15 s to connect to a server, and no wait for a server that is down
/// (PgBouncer fails the client at once). The listen address is set by [`finish`].
pub(super) fn pgbouncer_general() -> General {
    General {
        listen_addr: "127.0.0.1".into(),
        listen_port: 6432,
        pool_mode: PoolMode::Session,
        default_pool_size: 20,
        max_client_conn: 100,
        auth_type: AuthType::Md5,
        unix_socket_dir: "/tmp".into(),
        unix_socket_mode: "0777".into(),
        server_connect_timeout: 15_000,
        // PgBouncer keeps a client waiting while the server cannot be reached, until its
        // query_wait_timeout or query_timeout: no limit of pgcorral's own.
        server_unavailable_wait: super::MAX_MS,
        server_reset_query: "DISCARD ALL".into(),
        server_check_query: "<empty>".into(),
        log_format: LogFormat::Pgbouncer,
        syslog_ident: "pgbouncer".into(),
        query_wait_notify: 5_000,
        ..General::default()
    }
}

/// The `[pgbouncer]` settings that are decided once all are read.
#[derive(Default)]
pub(super) struct Extra {
    listen_addr: Option<(String, At)>,
    auth_type: Option<(String, At)>,
    /// Where `auth_file` is set (it is read after the conversion, by `userlist::merge`).
    pub auth_file: Option<At>,
}

impl Extra {
    /// `auth_type = any`: the client's user name is ignored; each database logs in as its user.
    pub fn any(&self) -> bool {
        self.auth_type.as_ref().is_some_and(|(a, _)| a == "any")
    }
}

/// pgcorral's method for PgBouncer's `auth_type` name (`any` as `trust`, `plain` as `md5`).
fn auth_type_of(name: &str) -> Option<AuthType> {
    Some(match name {
        "trust" | "any" => AuthType::Trust,
        "cert" => AuthType::Cert,
        "md5" | "plain" => AuthType::Md5,
        "scram-sha-256" => AuthType::ScramSha256,
        "hba" => AuthType::Hba,
        _ => return None,
    })
}

/// The admin console's `SET key = value` on a pooler started from a pgbouncer.ini: the key and
/// value as PgBouncer reads them in its `[pgbouncer]` section (its names, seconds for times,
/// `auth_type = plain`, `verbose`), applied to `general`. `Err`: the message for the client;
/// warnings: keys pgcorral does not honour, which change nothing.
pub fn set_key(
    general: &General,
    key: &str,
    value: &str,
) -> Result<(General, Vec<String>), String> {
    let mut c = Conv::default();
    let mut g = general.clone();
    let mut x = Extra::default();
    let at = At {
        file: "SET".into(),
        line: 0,
    };
    apply(&mut c, &mut g, &mut x, key, value, &at);
    if let Some((name, _)) = &x.auth_type {
        match auth_type_of(&name.to_ascii_lowercase()) {
            Some(a) => g.auth_type = a,
            None => c
                .errors
                .push(format!("auth_type = {name}: not supported by pgcorral")),
        }
    }
    if !c.errors.is_empty() {
        return Err(c.errors.join("; "));
    }
    Ok((g, c.warnings.into_iter().map(|w| w.message).collect()))
}

/// One `[pgbouncer]` key: an error naming it and its line when the value is wrong.
pub(super) fn apply(c: &mut Conv, g: &mut General, x: &mut Extra, key: &str, value: &str, at: &At) {
    let Some((ty, how)) = lookup(key) else {
        c.errors
            .push(format!("{at}: unknown parameter: pgbouncer/{key}"));
        return;
    };
    let v = match parse(ty, value) {
        Ok(v) => v,
        Err(why) => return invalid(c, at, key, value, why),
    };
    let off = matches!(&v, Val::Int(0) | Val::Ms(0)) || matches!(&v, Val::Str(s) if s.is_empty());
    let name = format!("pgbouncer.{key}");
    match how {
        How::Map => map(c, g, x, key, value, v, at),
        How::Warn(why) if !off => warn(c, at, &name, format!("not honoured: {why}")),
        How::Later(why) if !off => warn(c, at, &name, format!("not honoured yet: {why}")),
        How::Note(why) => warn(
            c,
            at,
            &name,
            format!("accepted, no effect in pgcorral: {why}"),
        ),
        How::Warn(_) | How::Later(_) => {}
    }
}

/// The honoured keys.
fn map(c: &mut Conv, g: &mut General, x: &mut Extra, key: &str, value: &str, v: Val, at: &At) {
    let mut bad = |c: &mut Conv, why: &str| invalid(c, at, key, value, why);
    match v {
        Val::Ms(ms) => {
            let slot = match key {
                "cancel_wait_timeout" => &mut g.cancel_wait_timeout,
                "client_idle_timeout" => &mut g.client_idle_timeout,
                "client_login_timeout" => &mut g.client_login_timeout,
                "idle_transaction_timeout" => &mut g.idle_transaction_timeout,
                "query_timeout" => &mut g.query_timeout,
                "query_wait_timeout" => &mut g.query_wait_timeout,
                "transaction_timeout" => &mut g.transaction_timeout,
                "pool_idle_timeout" => &mut g.pool_idle_timeout,
                "reserve_pool_timeout" => &mut g.reserve_pool_timeout,
                "server_check_delay" => &mut g.server_check_delay,
                "server_connect_timeout" => &mut g.server_connect_timeout,
                "server_idle_timeout" => &mut g.server_idle_timeout,
                "server_lifetime" => &mut g.server_lifetime,
                "server_login_retry" => &mut g.server_login_retry,
                "auth_query_cache_lifetime" => &mut g.auth_query_cache_lifetime,
                _ => unreachable!("{key} is not a time pgcorral maps"),
            };
            *slot = ms;
            if key == "server_lifetime" && ms == 0 {
                // PgBouncer: 0 = each server is used once. 1 ms closes it when next idle.
                g.server_lifetime = 1;
                warn(c, at, "pgbouncer.server_lifetime", "0 (use each server connection once): pgcorral closes a server when it is next idle, after its first use");
            }
            if key == "server_connect_timeout" && ms == 0 {
                bad(c, "pgcorral needs a limit greater than 0");
            }
        }
        Val::Int(n) => int(c, g, key, n, &mut bad, at),
        Val::Str(s) => match key {
            "admin_users" | "stats_users" => {
                let list = s
                    .split([',', ' ', '\t'])
                    .filter(|u| !u.is_empty())
                    .map(String::from)
                    .collect();
                if key == "admin_users" {
                    g.admin_users = list
                } else {
                    g.stats_users = list
                }
            }
            "ignore_startup_parameters" => {
                g.ignore_startup_parameters = s
                    .split([',', ' ', '\t'])
                    .filter(|p| !p.is_empty())
                    .map(String::from)
                    .collect()
            }
            "auth_type" => x.auth_type = Some((s, at.clone())),
            "auth_hba_file" => g.auth_hba_file = s,
            "auth_ident_file" => g.auth_ident_file = s,
            "auth_file" if s.is_empty() => x.auth_file = None,
            "auth_file" => {
                x.auth_file = Some(at.clone());
                g.auth_file = s;
            }
            "auth_user" => g.auth_user = s,
            "auth_query" => g.auth_query = s,
            "auth_dbname" => g.auth_dbname = s,
            "listen_addr" => x.listen_addr = Some((s, at.clone())),
            "pidfile" => g.pidfile = s,
            "logfile" => g.logfile = s,
            "pool_mode" => {
                g.pool_mode = match s.as_str() {
                    "session" => PoolMode::Session,
                    "transaction" => PoolMode::Transaction,
                    _ => PoolMode::Statement,
                }
            }
            "client_tls_sslmode" => g.client_tls_sslmode = sslmode(&s),
            "server_tls_sslmode" => g.server_tls_sslmode = sslmode(&s),
            "client_tls_ca_file" => g.client_tls_ca_file = s,
            "client_tls_cert_file" => g.client_tls_cert_file = s,
            "client_tls_key_file" => g.client_tls_key_file = s,
            "server_tls_ca_file" => g.server_tls_ca_file = s,
            "server_tls_cert_file" => g.server_tls_cert_file = s,
            "server_tls_key_file" => g.server_tls_key_file = s,
            "client_tls_protocols" | "server_tls_protocols" => {
                let slot = if key == "client_tls_protocols" {
                    &mut g.client_tls_protocols
                } else {
                    &mut g.server_tls_protocols
                };
                match tls::versions(&s) {
                    Ok(_) => *slot = s,
                    Err(e) => {
                        // TLS 1.0 and 1.1 (which rustls lacks) are dropped; what the value asked
                        // for is kept in its spelling, so that changing it is a change (servers
                        // opened under it are replaced, as in PgBouncer).
                        let old = ["tlsv1", "tlsv1.0", "tlsv1.1"];
                        let words: Vec<&str> = s
                            .split([',', ':', ' '])
                            .map(str::trim)
                            .filter(|w| !w.is_empty())
                            .collect();
                        let rest: Vec<&str> = words
                            .iter()
                            .copied()
                            .filter(|w| !old.contains(&w.to_ascii_lowercase().as_str()))
                            .collect();
                        let used = if !words.is_empty() && rest.is_empty() {
                            Some("legacy".to_string())
                        } else {
                            Some(rest.join(",")).filter(|r| tls::versions(r).is_ok())
                        };
                        let what = match &used {
                            Some(u) => format!("\"{u}\""),
                            None => "\"secure\" (TLS 1.2 and 1.3)".into(),
                        };
                        if let Some(u) = used {
                            *slot = u;
                        }
                        warn(
                            c,
                            at,
                            &format!("pgbouncer.{key}"),
                            format!("not honoured: {e}; pgcorral uses {what}"),
                        )
                    }
                }
            }
            "client_tls_ciphers" | "server_tls_ciphers" => {
                let slot = if key == "client_tls_ciphers" {
                    &mut g.client_tls_ciphers
                } else {
                    &mut g.server_tls_ciphers
                };
                match tls::provider(&s) {
                    Ok(_) => *slot = s,
                    Err(e) => warn(
                        c,
                        at,
                        &format!("pgbouncer.{key}"),
                        format!("not honoured: {e}; pgcorral uses rustls's default suites"),
                    ),
                }
            }
            "client_tls13_ciphers" | "server_tls13_ciphers" => {
                let slot = if key == "client_tls13_ciphers" {
                    &mut g.client_tls13_ciphers
                } else {
                    &mut g.server_tls13_ciphers
                };
                if s.trim().is_empty() {
                    slot.clear();
                } else {
                    match tls::tls13_suites(&s) {
                        Ok(_) => *slot = s,
                        Err(e) => warn(
                            c,
                            at,
                            &format!("pgbouncer.{key}"),
                            format!("not honoured: {e}; the TLS 1.3 suites stay as they were"),
                        ),
                    }
                }
            }
            "unix_socket_dir" if s.starts_with('@') => {
                bad(c, "abstract Unix sockets are not supported by pgcorral")
            }
            "unix_socket_dir" => g.unix_socket_dir = s,
            "server_check_query" => g.server_check_query = s,
            "server_reset_query" => g.server_reset_query = s,
            "syslog_ident" => g.syslog_ident = s,
            "login_notify_message" => g.login_notify_message = s,
            "syslog_facility" if super::syslog_facility(&s).is_none() => bad(
                c,
                "not a syslog facility (auth, authpriv, daemon, user, local0 to local7)",
            ),
            "syslog_facility" => g.syslog_facility = s,
            _ => unreachable!("{key} is not a string pgcorral maps"),
        },
    }
}

/// The honoured integer keys.
fn int(
    c: &mut Conv,
    g: &mut General,
    key: &str,
    n: i64,
    bad: &mut dyn FnMut(&mut Conv, &str),
    at: &At,
) {
    let Ok(u) = usize::try_from(n) else {
        return bad(c, "must not be negative");
    };
    match key {
        "default_pool_size" | "max_client_conn" | "stats_period" if u == 0 => {
            bad(c, "pgcorral needs at least 1")
        }
        "default_pool_size" => g.default_pool_size = u,
        "max_client_conn" => g.max_client_conn = u,
        "stats_period" => g.stats_period = u as u64,
        // Whole seconds (PgBouncer's CF_INT).
        "query_wait_notify" => {
            g.query_wait_notify = (u as u64).saturating_mul(1000).min(super::MAX_MS)
        }
        "max_db_connections" => g.max_db_connections = u,
        "max_user_connections" => g.max_user_connections = u,
        "max_db_client_connections" => g.max_db_client_connections = u,
        "max_user_client_connections" => g.max_user_client_connections = u,
        "min_pool_size" => g.min_pool_size = u,
        "reserve_pool_size" => g.reserve_pool_size = u,
        "listen_port" => match u16::try_from(u) {
            Ok(p) if p > 0 => g.listen_port = p,
            _ => bad(c, "not a port number (1..65535)"),
        },
        "unix_socket_mode" if u > 0o777 => {
            bad(c, "not a file mode (0 to 0777; a leading 0 makes it octal)")
        }
        "unix_socket_mode" => g.unix_socket_mode = format!("0{u:o}"),
        "max_packet_size" if u < 1024 => bad(c, "pgcorral needs at least 1024 (bytes)"),
        "max_packet_size" => {
            g.max_packet_size = u.min(1 << 30) as u32;
            if u > 1 << 30 {
                warn(
                    c,
                    at,
                    "pgbouncer.max_packet_size",
                    "pgcorral takes at most 1073741824 bytes (PostgreSQL's own limit on a message)",
                );
            }
        }
        "max_prepared_statements" if u == 0 => {
            g.max_prepared_statements = 200;
            warn(c, at, "pgbouncer.max_prepared_statements", "0 (not tracked): pgcorral always keeps clients' prepared statements, here up to 200 per server connection");
        }
        "max_prepared_statements" => g.max_prepared_statements = u,
        "so_reuseport" => g.so_reuseport = u != 0,
        "log_connections" => g.log_connections = u != 0,
        "log_disconnections" => g.log_disconnections = u != 0,
        "log_pooler_errors" => g.log_pooler_errors = u != 0,
        "log_stats" => g.log_stats = u != 0,
        "syslog" => g.syslog = u != 0,
        "server_fast_close" => g.server_fast_close = u != 0,
        "peer_id" => match u16::try_from(u) {
            Ok(id) => g.peer_id = id,
            Err(_) => bad(c, "not a peer id (0 to 65535)"),
        },
        "verbose" => {
            g.log_level = match u {
                0 => "info",
                1 => "debug",
                _ => "trace",
            }
            .into()
        }
        _ => unreachable!("{key} is not an integer pgcorral maps"),
    }
}

fn sslmode(s: &str) -> SslMode {
    match s {
        "disable" => SslMode::Disable,
        "allow" => SslMode::Allow,
        "prefer" => SslMode::Prefer,
        "require" => SslMode::Require,
        "verify-ca" => SslMode::VerifyCa,
        _ => SslMode::VerifyFull,
    }
}

/// The settings that depend on others: the listen address and the login method.
pub(super) fn finish(c: &mut Conv, cfg: &mut Config, x: &Extra, name: &str) {
    let g = &mut cfg.general;
    match &x.listen_addr {
        Some((v, at)) if !v.trim().is_empty() => {
            let addrs: Vec<&str> = v
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .collect();
            if !listen_addr_ok(addrs[0]) {
                invalid(
                    c,
                    at,
                    "listen_addr",
                    v,
                    "pgcorral listens on an IP address, * or localhost (not a host name)",
                );
            }
            g.listen_addr = addrs[0].into();
            if addrs.len() > 1 {
                warn(
                    c,
                    at,
                    "pgbouncer.listen_addr",
                    format!(
                        "not honoured: pgcorral listens on one address, the first: {}",
                        addrs[0]
                    ),
                );
            }
            if addrs[0] == "*" {
                warn(
                    c,
                    at,
                    "pgbouncer.listen_addr",
                    "* is every IPv4 address for pgcorral (PgBouncer's includes IPv6)",
                );
            }
        }
        _ => {
            g.listen_addr = "127.0.0.1".into();
            c.warn("pgbouncer.listen_addr", format!("not honoured: unset, PgBouncer listens only on its Unix socket; pgcorral cannot turn TCP off and listens on 127.0.0.1:{} too ({name})", g.listen_port));
        }
    }
    let (auth, at) = match &x.auth_type {
        Some((a, at)) => (a.as_str(), at.to_string()),
        None => ("md5", format!("{name}: auth_type (PgBouncer's default)")),
    };
    g.auth_type = match auth_type_of(auth) {
        Some(a) => a,
        None => {
            c.errors.push(format!("{at}: auth_type = {auth}: not supported by pgcorral; pgcorral reads this file with auth_type trust, any, cert, hba, md5 or scram-sha-256"));
            return;
        }
    };
    if auth == "plain" {
        c.warn("pgbouncer.auth_type", format!("plain: pgcorral asks clients for an md5 password instead of a clear-text one ({at})"));
    }
    if matches!(g.auth_type, AuthType::Trust | AuthType::Hba)
        && x.auth_file.is_none()
        && !cfg.users.is_empty()
    {
        // Without auth_file, admins are let in as PgBouncer lets in its admins listed in it.
        for u in g.admin_users.iter().chain(&g.stats_users) {
            cfg.users.entry(u.clone()).or_default().settings_only = false;
        }
    }
    let lookup = !g.auth_user.is_empty() || cfg.databases.values().any(|d| d.auth_user.is_some());
    if matches!(g.auth_type, AuthType::Md5 | AuthType::ScramSha256)
        && x.auth_file.is_none()
        && !lookup
    {
        c.errors.push(format!(
            "{at}: auth_type = {auth} needs the users' passwords: set auth_file (userlist.txt) or auth_user (auth_query)"
        ));
    }
}
