//! The validated configuration model: `[general]`, `[users.NAME]`, `[databases.NAME]`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// When a server connection goes back to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    /// For the client's whole session.
    Session,
    /// After each transaction (ReadyForQuery 'I' with nothing in flight).
    Transaction,
    /// After each statement; multi-statement transactions are refused.
    Statement,
}

/// How clients prove who they are to pgcorral.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct General {
    pub listen_addr: String,
    pub listen_port: u16,
    pub pool_mode: PoolMode,
    pub default_pool_size: usize,
    pub max_client_conn: usize,
    pub auth_type: AuthType,
    pub admin_users: Vec<String>,
    pub workers: usize,
    pub server_reset_query: String,
    /// ms
    pub server_connect_timeout: u64,
    /// ms
    pub shutdown_timeout: u64,
    /// ms; how long a client waits for a server before an error; 0 = forever.
    pub query_wait_timeout: u64,
    /// Largest message accepted from a client or server, in bytes.
    pub max_packet_size: u32,
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
            workers: 0,
            server_reset_query: "DISCARD ALL".into(),
            server_connect_timeout: 5000,
            shutdown_timeout: 30000,
            query_wait_timeout: 120_000,
            max_packet_size: 1 << 30,
            log_level: "info".into(),
        }
    }
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
        (self.query_wait_timeout > 0).then(|| Duration::from_millis(self.query_wait_timeout))
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
