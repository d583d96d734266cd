//! PgCat's configuration file (pgcat.toml) read as it is: converted to pgcorral's `Config`, with a warning naming each key pgcorral does not honour.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use toml::{Table, Value};

use super::pgcat_pool::{old_format, pool};
use super::validate::{listen_addr_ok, problems, RESERVED_DATABASES};
use super::{AuthType, Config, ConfigError, General, SslMode, User};

/// A key of a pgcat.toml that pgcorral does not honour, or honours differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The key as the file names it, e.g. `general.autoreload` or `pools.app.users.0.statement_timeout`.
    pub key: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Is this file PgCat's? Its name ends with `pgcat.toml`, or it has PgCat's top-level tables
/// (`[pools.NAME]`, or the old `[user]`, `[shards.N]`, `[query_router]`); never when it has
/// pgcorral's own `[databases]` or `[users]`.
pub fn is_pgcat(path: &Path, text: &str) -> bool {
    let Ok(t) = toml::from_str::<Table>(text) else {
        return path.to_string_lossy().ends_with("pgcat.toml");
    };
    if t.contains_key("databases") || t.contains_key("users") {
        return false;
    }
    path.to_string_lossy().ends_with("pgcat.toml")
        || ["pools", "user", "shards", "query_router"]
            .iter()
            .any(|k| t.contains_key(*k))
}

/// Converts and validates a pgcat.toml text: the configuration and the warnings, one per key
/// not honoured; or every error, one per line, each naming the key at fault.
pub fn from_pgcat_str(text: &str) -> Result<(Config, Vec<Warning>), ConfigError> {
    let file: Table = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
    let mut c = Conv::default();
    let cfg = convert(&mut c, &file);
    if c.errors.is_empty() {
        // What the conversion could not foresee, in pgcorral's key names.
        c.errors.extend(problems(&cfg));
    }
    if c.errors.is_empty() {
        Ok((cfg, c.warnings))
    } else {
        Err(ConfigError(c.errors.join("\n")))
    }
}

/// The conversion's findings so far.
#[derive(Default)]
pub(super) struct Conv {
    pub warnings: Vec<Warning>,
    pub errors: Vec<String>,
}

impl Conv {
    pub fn warn(&mut self, key: &str, message: impl Into<String>) {
        self.warnings.push(Warning {
            key: key.to_string(),
            message: message.into(),
        });
    }

    pub fn error(&mut self, key: &str, message: impl fmt::Display) {
        self.errors.push(format!("{key}: {message}"));
    }

    /// A key pgcorral does not honour: warned unless its value turns the feature off.
    pub fn unsupported(&mut self, key: &str, v: &Value, why: &str) {
        if !off(v) {
            self.warn(key, format!("not honoured: {why}"));
        }
    }

    pub fn unknown(&mut self, key: &str) {
        self.warn(key, "not a PgCat setting pgcorral knows; ignored");
    }

    pub fn uint(&mut self, key: &str, v: &Value) -> Option<u64> {
        let n = v.as_integer().and_then(|n| u64::try_from(n).ok());
        if n.is_none() {
            self.error(key, format!("must be a non-negative integer, got {v}"));
        }
        n
    }

    pub fn positive(&mut self, key: &str, v: &Value) -> Option<u64> {
        match self.uint(key, v)? {
            0 => {
                self.error(key, "must be greater than 0");
                None
            }
            n => Some(n),
        }
    }

    pub fn port(&mut self, key: &str, v: &Value) -> Option<u16> {
        let p = v
            .as_integer()
            .and_then(|n| u16::try_from(n).ok())
            .filter(|&p| p != 0);
        if p.is_none() {
            self.error(key, format!("must be a port number (1..65535), got {v}"));
        }
        p
    }

    pub fn boolean(&mut self, key: &str, v: &Value) -> Option<bool> {
        let b = v.as_bool();
        if b.is_none() {
            self.error(key, format!("must be true or false, got {v}"));
        }
        b
    }

    pub fn string<'v>(&mut self, key: &str, v: &'v Value) -> Option<&'v str> {
        let s = v.as_str();
        if s.is_none() {
            self.error(key, format!("must be a string, got {v}"));
        }
        s
    }

    pub fn table<'v>(&mut self, key: &str, v: &'v Value) -> Option<&'v Table> {
        let t = v.as_table();
        if t.is_none() {
            self.error(key, "must be a table");
        }
        t
    }
}

/// A value that turns its feature off: false, 0, "", [], or a table of such (a plugin with
/// `enabled = false`).
fn off(v: &Value) -> bool {
    match v {
        Value::Boolean(b) => !b,
        Value::Integer(n) => *n == 0,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Table(t) => t.get("enabled") == Some(&Value::Boolean(false)) || t.values().all(off),
        _ => false,
    }
}

/// `[general]` settings that take effect once the whole table is read.
struct Extra {
    host: String,
    prometheus: bool,
    prometheus_port: u16,
    tls_certificate: Option<String>,
    tls_private_key: Option<String>,
    server_tls: bool,
    verify_server_certificate: bool,
    admin_username: Option<String>,
    admin_password: Option<String>,
}

/// pgcorral's defaults with PgCat's where they differ: listen on 0.0.0.0:5432 (PgCat's code;
/// its CONFIG.md says 6432), TCP only, wait 1 s for a server (connect_timeout), 60 s shutdown,
/// md5 logins. md5, not scram-sha-256: PgCat checks its clients with md5 against the users'
/// passwords, so md5 is what every client of a PgCat already speaks (drivers without SCRAM too).
fn pgcat_general() -> General {
    General {
        listen_addr: "0.0.0.0".into(),
        listen_port: 5432,
        unix_socket_dir: String::new(),
        auth_type: AuthType::Md5,
        server_connect_timeout: 1000,
        query_wait_timeout: 1000,
        shutdown_timeout: 60_000,
        server_tls_sslmode: SslMode::Disable,
        ..General::default()
    }
}

fn convert(c: &mut Conv, file: &Table) -> Config {
    let mut cfg = Config {
        general: pgcat_general(),
        users: BTreeMap::new(),
        databases: BTreeMap::new(),
        peers: BTreeMap::new(),
    };
    let old = !file.contains_key("pools")
        && ["user", "shards", "query_router"]
            .iter()
            .any(|k| file.contains_key(*k));
    let mut x = Extra {
        host: "0.0.0.0".into(),
        prometheus: false,
        prometheus_port: 9930,
        tls_certificate: None,
        tls_private_key: None,
        server_tls: false,
        verify_server_certificate: false,
        admin_username: None,
        admin_password: None,
    };
    if let Some(v) = file.get("general") {
        if let Some(t) = c.table("general", v) {
            general(c, t, &mut cfg.general, &mut x, old);
        }
    }
    for (k, v) in file {
        match k.as_str() {
            "general" => {}
            "pools" => {
                let Some(pools) = c.table("pools", v) else {
                    continue;
                };
                for (name, p) in pools {
                    let at = format!("pools.{name}");
                    if RESERVED_DATABASES.contains(&name.as_str()) {
                        c.error(
                            &at,
                            format!("the name {name:?} is pgcorral's admin console"),
                        );
                    } else if let Some(p) = c.table(&at, p) {
                        pool(c, &mut cfg, name, p, &|k: &str| format!("{at}.{k}"));
                    }
                }
            }
            "plugins" => c.unsupported(k, v, "pgcorral has no plugins"),
            "user" | "shards" | "query_router" if old => {}
            _ => c.unknown(k),
        }
    }
    if old {
        old_format(c, &mut cfg, file);
    }
    finish_general(c, &mut cfg, x);
    cfg
}

fn general(c: &mut Conv, t: &Table, g: &mut General, x: &mut Extra, old: bool) {
    for (k, v) in t {
        let key = format!("general.{k}");
        let key = key.as_str();
        match k.as_str() {
            "host" => match c.string(key, v) {
                Some(h) if listen_addr_ok(h) => {
                    g.listen_addr = h.into();
                    x.host = h.into();
                }
                Some(h) => c.error(key, format!("{h:?} is not an IP address to listen on")),
                None => {}
            },
            "port" => g.listen_port = c.port(key, v).unwrap_or(g.listen_port),
            // PgCat waits this long for a server connection, new or pooled.
            "connect_timeout" => {
                if let Some(ms) = c.positive(key, v) {
                    g.server_connect_timeout = ms;
                    g.query_wait_timeout = ms;
                }
            }
            "idle_timeout" => g.server_idle_timeout = c.uint(key, v).unwrap_or(0),
            "server_lifetime" => g.server_lifetime = c.uint(key, v).unwrap_or(0),
            "idle_client_in_transaction_timeout" => {
                g.idle_transaction_timeout = c.uint(key, v).unwrap_or(0)
            }
            "healthcheck_timeout" => g.healthcheck_timeout = c.positive(key, v).unwrap_or(1),
            "healthcheck_delay" => g.healthcheck_delay = c.uint(key, v).unwrap_or(0),
            "shutdown_timeout" => g.shutdown_timeout = c.positive(key, v).unwrap_or(1),
            "ban_time" => match c.uint(key, v).and_then(|s| s.checked_mul(1000)) {
                Some(ms) => g.ban_time = ms,
                None => c.error(key, "must be a number of seconds"),
            },
            "worker_threads" => {
                let n = c.positive(key, v).and_then(|n| usize::try_from(n).ok());
                g.workers = n.unwrap_or(1);
            }
            "admin_username" => x.admin_username = c.string(key, v).map(String::from),
            "admin_password" => x.admin_password = c.string(key, v).map(String::from),
            "admin_auth_type" => match c.string(key, v) {
                Some("md5" | "MD5") | None => {}
                Some("trust" | "Trust") => c.warn(key, "not honoured: pgcorral asks the admin for its password (md5) like every user"),
                Some(o) => c.error(key, format!("{o:?} is not \"md5\" or \"trust\"")),
            },
            "tls_certificate" => x.tls_certificate = c.string(key, v).map(String::from),
            "tls_private_key" => x.tls_private_key = c.string(key, v).map(String::from),
            "server_tls" => x.server_tls = c.boolean(key, v).unwrap_or(false),
            "verify_server_certificate" => {
                x.verify_server_certificate = c.boolean(key, v).unwrap_or(false)
            }
            "enable_prometheus_exporter" => x.prometheus = c.boolean(key, v).unwrap_or(false),
            "prometheus_exporter_port" => x.prometheus_port = c.port(key, v).unwrap_or(9930),
            "autoreload" => c.unsupported(key, v, "pgcorral reads its file again on SIGHUP (or RELOAD on the admin console), not on a timer"),
            "validate_config" | "verify_config" => {
                if v.as_bool() == Some(false) {
                    c.warn(key, "not honoured: pgcorral always validates its configuration");
                }
            }
            "log_client_connections" | "log_client_disconnections" => {
                c.unsupported(key, v, "pgcorral has no such log switch; ignored")
            }
            "tcp_keepalives_idle" | "tcp_keepalives_count" | "tcp_keepalives_interval"
            | "tcp_user_timeout" => c.unsupported(
                key,
                v,
                "pgcorral does not set TCP keepalives or TCP_USER_TIMEOUT on its sockets",
            ),
            "dns_cache_enabled" | "dns_max_ttl" => {
                c.unsupported(key, v, "pgcorral has no DNS cache")
            }
            "server_round_robin" => c.unsupported(key, v, "pgcorral's pools choose the idle server connection themselves"),
            "auth_query" | "auth_query_user" | "auth_query_password" => c.unsupported(
                key,
                v,
                "pgcorral has no auth_query: every user needs its password in the file",
            ),
            "prepared_statements" | "prepared_statements_cache_size" => c.unsupported(
                key,
                v,
                "pgcorral always keeps clients' prepared statements (up to general.max_prepared_statements = 200 per server connection)",
            ),
            "pool_size" | "pool_mode" if old => {}
            _ => c.unknown(key),
        }
    }
}

/// The `[general]` settings that combine several keys: admin, TLS, the Prometheus listener.
fn finish_general(c: &mut Conv, cfg: &mut Config, x: Extra) {
    let g = &mut cfg.general;
    match (x.admin_username, x.admin_password) {
        (Some(name), Some(password)) => {
            match cfg.users.get(&name) {
                Some(u) if u.password.as_deref() != Some(password.as_str()) => c.error(
                    "general.admin_password",
                    format!("{name:?} is also a pool's user with another password; pgcorral has one password per user"),
                ),
                Some(_) => {}
                None => {
                    let user = User {
                        password: Some(password),
                        ..User::default()
                    };
                    cfg.users.insert(name.clone(), user);
                }
            }
            g.admin_users = vec![name];
        }
        (Some(_), None) => c.error("general.admin_password", "required with admin_username"),
        (None, Some(_)) => c.error("general.admin_username", "required with admin_password"),
        (None, None) => {}
    }
    match (x.tls_certificate, x.tls_private_key) {
        (Some(cert), Some(key)) => {
            // PgCat takes TLS from clients that ask and plain connections from the rest.
            g.client_tls_sslmode = SslMode::Prefer;
            g.client_tls_cert_file = cert;
            g.client_tls_key_file = key;
        }
        (Some(_), None) => c.error("general.tls_private_key", "required with tls_certificate"),
        (None, Some(_)) => c.error("general.tls_certificate", "required with tls_private_key"),
        (None, None) => {}
    }
    if x.server_tls {
        // PgCat asks servers for TLS and goes on in plain text when they decline.
        g.server_tls_sslmode = SslMode::Prefer;
        if x.verify_server_certificate {
            const BUNDLES: [&str; 3] = [
                "/etc/ssl/certs/ca-certificates.crt",
                "/etc/pki/tls/certs/ca-bundle.crt",
                "/etc/ssl/cert.pem",
            ];
            let key = "general.verify_server_certificate";
            match BUNDLES.iter().find(|p| Path::new(p).exists()) {
                Some(bundle) => {
                    g.server_tls_sslmode = SslMode::VerifyFull;
                    g.server_tls_ca_file = (*bundle).to_string();
                    c.warn(key, format!("pgcorral verifies servers against {bundle} (PgCat: its built-in web roots) and requires TLS (server_tls_sslmode = \"verify-full\")"));
                }
                None => c.error(key, format!("pgcorral verifies against a CA file and found none of {BUNDLES:?}; write the configuration in pgcorral's format with server_tls_ca_file")),
            }
        }
    }
    if x.prometheus {
        let host = if x.host.contains(':') {
            format!("[{}]", x.host)
        } else {
            x.host.clone()
        };
        g.metrics_addr = format!("{host}:{}", x.prometheus_port);
        c.warn(
            "general.enable_prometheus_exporter",
            format!(
                "served at http://{}/metrics with pgcorral's metric names, not PgCat's",
                g.metrics_addr
            ),
        );
    }
}
