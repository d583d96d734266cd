//! The validated configuration model: `[general]`, `[users.NAME]`, `[databases.NAME]`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// When a server connection goes back to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    /// For the client's whole session.
    Session,
    /// After each transaction (ReadyForQuery 'I' with nothing in flight).
    Transaction,
    /// After each statement; multi-statement transactions are refused.
    Statement,
}

/// Statements that leave state bound to one server connection (LISTEN, session advisory locks,
/// temporary tables, WITH HOLD cursors, SQL PREPARE) in transaction and statement mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionPinning {
    /// Keep the client on its server until the state is gone.
    Pin,
    /// Refuse such statements (simple protocol) with an error.
    Refuse,
}

/// How clients prove who they are to pgcorral.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum AuthType {
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    #[serde(rename = "md5")]
    Md5,
    #[serde(rename = "trust")]
    Trust,
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub general: General,
    /// Who may connect; empty with `auth_type = "trust"` means any user name.
    #[serde(default)]
    pub users: BTreeMap<String, User>,
    /// Databases clients may name; the key `"*"` is a template for any other name.
    #[serde(default)]
    pub databases: BTreeMap<String, Database>,
}

/// `[general]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct General {
    pub listen_addr: String,
    pub listen_port: u16,
    pub pool_mode: PoolMode,
    pub default_pool_size: usize,
    pub max_client_conn: usize,
    pub auth_type: AuthType,
    pub admin_users: Vec<String>,
    /// Users who may connect to the admin console for SHOW commands only.
    pub stats_users: Vec<String>,
    /// Seconds over which SHOW STATS averages are taken.
    pub stats_period: u64,
    /// Milliseconds a client's transaction waits for a server that is down (refusing
    /// connections or starting up: a restart, a failover) before it fails.
    pub server_unavailable_wait: u64,
    /// `host:port` of the HTTP listener serving Prometheus `/metrics` and `/healthz`; empty
    /// (the default) turns it off.
    pub metrics_addr: String,
    pub workers: usize,
    pub server_reset_query: String,
    /// Idle servers kept open per pool, even when unused.
    pub min_pool_size: usize,
    /// Extra servers a pool may open once a client has waited `reserve_pool_timeout`.
    pub reserve_pool_size: usize,
    /// ms
    pub reserve_pool_timeout: u64,
    /// Servers per database across all its pools; 0 = no cap.
    pub max_db_connections: usize,
    /// Servers per user across all its pools; 0 = no cap.
    pub max_user_connections: usize,
    /// ms
    pub server_connect_timeout: u64,
    /// ms; after a failed server login, new logins to that pool fail at once for this long.
    pub server_login_retry: u64,
    /// ms
    pub shutdown_timeout: u64,
    /// ms; how long a client waits for a server before an error; 0 = forever.
    pub query_wait_timeout: u64,
    /// ms; a query running longer is cancelled and the client disconnected; 0 = off.
    pub query_timeout: u64,
    /// ms; a client idle (outside a transaction) longer is disconnected; 0 = off.
    pub client_idle_timeout: u64,
    /// ms; a client idle inside a transaction longer is disconnected; 0 = off.
    pub idle_transaction_timeout: u64,
    /// ms; from connecting to finishing login.
    pub client_login_timeout: u64,
    /// ms; an idle server unused for longer is closed (down to min_pool_size); 0 = never.
    pub server_idle_timeout: u64,
    /// ms; a server older than this is closed when next idle; 0 = never.
    pub server_lifetime: u64,
    /// ms; a server idle for longer runs `server_check_query` before reuse; 0 = always.
    pub server_check_delay: u64,
    /// Empty = no check.
    pub server_check_query: String,
    /// ms; how long forwarding a cancel request may take.
    pub cancel_wait_timeout: u64,
    /// What to do with statements whose state cannot move between servers in transaction mode.
    pub session_pinning: SessionPinning,
    /// Largest message accepted from a client or server, in bytes.
    pub max_packet_size: u32,
    /// Prepared statements kept on each server connection in transaction and statement mode
    /// (least recently used ones are closed beyond it); 0 = no limit.
    pub max_prepared_statements: usize,
    /// tracing filter, e.g. "info" or "pgcorral=debug"; RUST_LOG wins when set.
    pub log_level: String,
}

impl Default for General {
    fn default() -> Self {
        General {
            listen_addr: "127.0.0.1".into(),
            listen_port: 6432,
            pool_mode: PoolMode::Transaction,
            default_pool_size: 20,
            max_client_conn: 5000,
            auth_type: AuthType::ScramSha256,
            admin_users: Vec::new(),
            stats_users: Vec::new(),
            stats_period: 60,
            metrics_addr: String::new(),
            server_unavailable_wait: 15_000,
            workers: 0,
            server_reset_query: "DISCARD ALL".into(),
            min_pool_size: 0,
            reserve_pool_size: 0,
            reserve_pool_timeout: 5000,
            max_db_connections: 0,
            max_user_connections: 0,
            server_connect_timeout: 5000,
            server_login_retry: 15_000,
            shutdown_timeout: 30000,
            query_wait_timeout: 120_000,
            query_timeout: 0,
            client_idle_timeout: 0,
            idle_transaction_timeout: 0,
            client_login_timeout: 60_000,
            server_idle_timeout: 600_000,
            server_lifetime: 3_600_000,
            server_check_delay: 30_000,
            server_check_query: "select 1".into(),
            cancel_wait_timeout: 10_000,
            session_pinning: SessionPinning::Pin,
            max_packet_size: 1 << 30,
            max_prepared_statements: 200,
            log_level: "info".into(),
        }
    }
}

/// Milliseconds to a duration, with 0 meaning "off".
pub fn millis_opt(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

impl General {
    pub fn server_connect_timeout(&self) -> Duration {
        Duration::from_millis(self.server_connect_timeout)
    }
    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_millis(self.shutdown_timeout)
    }
    /// `None` means wait forever.
    pub fn query_wait_timeout(&self) -> Option<Duration> {
        millis_opt(self.query_wait_timeout)
    }
}

/// `[users.NAME]`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// Plaintext, `md5<32 hex>` or a `SCRAM-SHA-256$...` verifier.
    pub password: Option<String>,
    pub pool_size: Option<usize>,
    pub pool_mode: Option<PoolMode>,
    /// Servers for this user across all databases; overrides the general cap.
    pub max_user_connections: Option<usize>,
}

/// `[databases.NAME]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Database {
    #[serde(default = "default_host")]
    pub host: String,
    #[serde(default = "default_port")]
    pub port: u16,
    /// Server-side database name; defaults to the key (for `"*"`, to the name the client asked for).
    pub dbname: Option<String>,
    pub pool_size: Option<usize>,
    pub min_pool_size: Option<usize>,
    pub reserve_pool_size: Option<usize>,
    /// Servers for this database across all users; overrides the general cap.
    pub max_db_connections: Option<usize>,
    pub pool_mode: Option<PoolMode>,
    /// Fixed server login instead of the client's own.
    pub user: Option<String>,
    pub password: Option<String>,
}

fn default_host() -> String {
    "127.0.0.1".into()
}

fn default_port() -> u16 {
    5432
}
