//! The validated configuration model: `[general]`, `[users.NAME]`, `[databases.NAME]`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use super::sharding::{ShardEntry, ShardServers, ShardedTable};
use crate::shard::key::{Function, KeyType};

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

/// How a database with several hosts in `host` picks one for a new server connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadBalanceHosts {
    /// Each new connection starts at the host after the last one's (then tries the others).
    RoundRobin,
    /// Each new connection tries the hosts in their order.
    Disable,
}

/// How each log line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// tracing's lines: time, level, module, message, then the fields as `key=value`.
    Pgcorral,
    /// PgBouncer's: `2026-01-02 03:04:05.678 UTC [pid] LOG C-1: db/user@addr message`.
    Pgbouncer,
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
    /// A TLS client certificate (verified against `client_tls_ca_file`) whose subject CN is
    /// the user name.
    #[serde(rename = "cert")]
    Cert,
    /// Each login's method from the first matching rule of `auth_hba_file` (pg_hba.conf
    /// syntax, as PgBouncer's `auth_type = hba`).
    #[serde(rename = "hba")]
    Hba,
}

/// How much TLS a side of pgcorral asks for (libpq's `sslmode` values, as PgBouncer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    /// TLS is mandatory.
    pub fn required(self) -> bool {
        self >= SslMode::Require
    }
    /// The peer's certificate is checked against a CA.
    pub fn verifies(self) -> bool {
        self >= SslMode::VerifyCa
    }
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
    /// The other pgcorral processes sharing this one's port (PgBouncer's `[peers]`), by
    /// `peer_id` ("1" to "65535"): a cancel request for one of their clients is forwarded there.
    #[serde(default)]
    pub peers: BTreeMap<String, PeerEntry>,
}

/// A peer: where its clients' cancel requests go.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PeerEntry {
    /// An address, a host name, or a directory holding the peer's Unix socket (`/...`).
    pub host: String,
    #[serde(default = "default_peer_port")]
    pub port: u16,
}

fn default_peer_port() -> u16 {
    6432
}

/// `[general]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct General {
    pub listen_addr: String,
    pub listen_port: u16,
    pub pool_mode: PoolMode,
    pub default_pool_size: usize,
    /// Most clients logged in at once (admin_users on the console have a few more).
    pub max_client_conn: usize,
    /// Most connections still logging in (startup and authentication) at once, a source
    /// address holding at most its share; further ones are refused at accept (beyond a few
    /// places kept for the console and the Unix socket: `login_places`). Also capped by a
    /// quarter of the open-files limit.
    pub max_login_clients: usize,
    pub auth_type: AuthType,
    /// PgBouncer's userlist.txt (`"user" "password"` lines) read at start and at each reload
    /// into `[users]`: a `[users]` entry's own password wins. Empty: none.
    pub auth_file: String,
    /// Role that runs `auth_query` for users with no password here; empty: no lookup.
    pub auth_user: String,
    /// Looks up a user's password on the server: `$1` is the user name; it returns the name
    /// and the password (plaintext, md5 or SCRAM verifier; NULL: no login).
    pub auth_query: String,
    /// Database the lookup runs in; empty: the client's own database.
    pub auth_dbname: String,
    /// ms a looked-up password is reused before asking the server again; a failed login
    /// forgets it at once. 0 (the default, as PgBouncer): every login asks.
    pub auth_query_cache_lifetime: u64,
    pub admin_users: Vec<String>,
    /// Startup parameters whose values are dropped, not applied (PgBouncer's
    /// `ignore_startup_parameters`; any case; sent directly or inside `options`).
    pub ignore_startup_parameters: Vec<String>,
    /// Users who may connect to the admin console for SHOW commands only.
    pub stats_users: Vec<String>,
    /// With `auth_type = "hba"`: the pg_hba.conf-syntax file of rules (read again on reload).
    pub auth_hba_file: String,
    /// The ident maps (pg_ident.conf syntax) that `map=` options of `auth_hba_file` name.
    pub auth_ident_file: String,
    /// Seconds over which SHOW STATS averages are taken.
    pub stats_period: u64,
    /// Milliseconds a client's transaction waits for a server that is down (refusing
    /// connections or starting up: a restart, a failover) before it fails; never longer than
    /// the client may wait for a server (query_wait_timeout, query_timeout).
    pub server_unavailable_wait: u64,
    /// `host:port` of the HTTP listener serving Prometheus `/metrics` and `/healthz`; empty
    /// (the default) turns it off.
    pub metrics_addr: String,
    /// The tenant registry: a libpq connection string to the PostgreSQL database that keeps
    /// the tenants (docs/tenants.md); empty (the default): none, pgcorral serves its file's
    /// databases only. `PGCORRAL_TENANT_REGISTRY` in the environment overrides it.
    pub tenant_registry: String,
    /// `host:port` of the tenant API (Supavisor's REST API, its OpenAPI document, Swagger UI,
    /// `/healthz`); empty (the default) turns it off. Needs `tenant_registry`.
    pub api_listen: String,
    /// The HS256 secret the API's bearer tokens are signed with; `PGCORRAL_API_JWT_SECRET` in
    /// the environment overrides it. Never shown by SHOW CONFIG.
    pub api_jwt_secret: String,
    /// `host:port` where the fleet's other nodes reach this one's PostgreSQL port, written in
    /// the registry (cancel requests are forwarded there); empty: `listen_addr` when it is one
    /// address, else the machine's first address that is not loopback, with the port listened
    /// on. `PGCORRAL_NODE_ADDRESS` in the environment overrides it.
    pub node_address: String,
    /// Directory of the Unix-socket listener `.s.PGSQL.<listen_port>`, as PgBouncer's; empty
    /// turns it off.
    pub unix_socket_dir: String,
    /// File mode of that socket, in octal digits ("0777").
    pub unix_socket_mode: String,
    pub workers: usize,
    /// Hand each worker turn's writes to the kernel in one io_uring submission (where the
    /// kernel allows io_uring); false: one `send` per write.
    pub io_uring: bool,
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
    /// Clients logged in per database; 0 = no cap (PgBouncer 1.24's key).
    pub max_db_client_connections: usize,
    /// Clients logged in per user; 0 = no cap (PgBouncer 1.24's key).
    pub max_user_client_connections: usize,
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
    /// ms; a client in a transaction (explicit, or one statement's) for longer is
    /// disconnected, whether a query runs or not; 0 = off (PgBouncer's key).
    pub transaction_timeout: u64,
    /// ms; from connecting to finishing login.
    pub client_login_timeout: u64,
    /// ms; an idle server unused for longer is closed (down to min_pool_size); 0 = never.
    pub server_idle_timeout: u64,
    /// ms; the pools of a (database, user) with no client and no server for longer are freed
    /// (with their statistics), unless they keep min_pool_size servers; 0 = never (PgBouncer's
    /// key).
    pub pool_idle_timeout: u64,
    /// ms; a server older than this is closed when next idle; 0 = never.
    pub server_lifetime: u64,
    /// ms; a server idle for longer runs `server_check_query` before reuse; 0 = always.
    pub server_check_delay: u64,
    /// Empty = no check; `<empty>` = an empty query ([`check_query`]).
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
    /// Transaction and statement mode: a batch that describes its portal, outside a
    /// transaction, whose statement a schema change made stale ("cached plan must not change
    /// result type") is prepared again and retried instead of failing as it would on
    /// PostgreSQL. Off by default: clients get PostgreSQL's answer.
    pub retry_stale_statements: bool,
    /// The most bytes the result cache holds, over every database whose `query_cache` is on
    /// (least recently used answers are dropped beyond it).
    pub query_cache_size: usize,
    /// An answer longer than this many bytes is not cached.
    pub query_cache_max_entry: usize,
    /// ms: the most time a change made anywhere may take to reach the cache; while pgcorral
    /// cannot show that every change older than this has reached it, nothing is served from
    /// the cache.
    pub query_cache_lag: u64,
    /// The publication (`CREATE PUBLICATION ... FOR ALL TABLES`) whose changes the cache
    /// follows through logical decoding.
    pub query_cache_publication: String,
    /// tracing filter, e.g. "info" or "pgcorral=debug"; RUST_LOG wins when set.
    pub log_level: String,
    /// The lines' format: pgcorral's (default) or PgBouncer's (default from a pgbouncer.ini).
    pub log_format: LogFormat,
    /// Log each client login (PgBouncer's `log_connections`).
    pub log_connections: bool,
    /// Log each client and server connection's close, with why (`log_disconnections`).
    pub log_disconnections: bool,
    /// Log each error pgcorral itself sends a client (`log_pooler_errors`).
    pub log_pooler_errors: bool,
    /// Log the totals' averages every `stats_period` (`log_stats`).
    pub log_stats: bool,
    /// This process's id among its peers (1..65535; 0 = no peering): it is in the low 16 bits
    /// of every cancel key this process hands out, so that a peer that gets the cancel request
    /// knows where to forward it.
    pub peer_id: u16,
    /// Milliseconds a client waits for a server before it is sent PgBouncer's NOTICE that it
    /// is queued (`query_wait_notify`, once per wait); 0 = never.
    pub query_wait_notify: u64,
    /// On RECONNECT or a changed server, close session-mode servers in use at once (their
    /// clients are ended) rather than when their clients leave (PgBouncer's
    /// `server_fast_close`).
    pub server_fast_close: bool,
    /// Sent to every client as a NOTICE once it has authenticated (PgBouncer 1.25's
    /// `login_notify_message`); empty = none.
    pub login_notify_message: String,
    /// Also log to syslog(3) (PgBouncer's `syslog`), as `syslog_ident` with `syslog_facility`.
    pub syslog: bool,
    pub syslog_ident: String,
    /// auth, authpriv, daemon, user, local0 to local7.
    pub syslog_facility: String,
    /// File the process id is written to (PgBouncer's `pidfile`): refused at start while the
    /// pid in it is alive, removed at exit; `-d` needs it. Empty: none.
    pub pidfile: String,
    /// File the log is appended to, besides stderr (PgBouncer's `logfile`). Empty: none.
    pub logfile: String,
    /// SO_REUSEPORT on the TCP listener, so several processes share listen_port (rolling
    /// restarts; PgBouncer's `so_reuseport`).
    pub so_reuseport: bool,
    /// Defaults for databases with several servers (each may be set per database).
    pub load_balancing: LoadBalancing,
    pub default_role: DefaultRole,
    pub query_parser_enabled: bool,
    pub primary_reads_enabled: bool,
    /// ms a health check (`SELECT 1`) may take before the server is banned.
    pub healthcheck_timeout: u64,
    /// ms; a server connection used within this long is not checked at checkout.
    pub healthcheck_delay: u64,
    /// ms between the background checks of every server (role, lag, liveness).
    pub healthcheck_interval: u64,
    /// ms a failed replica stays out of rotation.
    pub ban_time: u64,
    /// Replicas further behind leave rotation until they catch up: a size ("16MB"), a time
    /// ("10s"), or both ("16MB 10s"); empty = no limit.
    pub max_replica_lag: String,
    /// After a client's write commits, its reads go only to servers that have replayed it.
    pub read_your_writes: bool,
    /// Functions whose call makes a SELECT a write (routed to the primary).
    pub writing_functions: Vec<String>,
    /// TLS between clients and pgcorral.
    pub client_tls_sslmode: SslMode,
    /// PEM certificate chain pgcorral presents to clients.
    pub client_tls_cert_file: String,
    pub client_tls_key_file: String,
    /// PEM CA certificates that client certificates must chain to.
    pub client_tls_ca_file: String,
    /// "secure" (TLS 1.2 and 1.3), "all", or a list such as "tlsv1.3".
    pub client_tls_protocols: String,
    /// "default", or a colon-separated list of cipher suite names.
    pub client_tls_ciphers: String,
    /// TLS 1.3 suites (IANA names), replacing those `client_tls_ciphers` allows; empty: those.
    pub client_tls13_ciphers: String,
    /// TLS between pgcorral and PostgreSQL.
    pub server_tls_sslmode: SslMode,
    /// PEM CA certificates that servers' certificates must chain to (verify-ca, verify-full).
    pub server_tls_ca_file: String,
    /// PEM certificate and key pgcorral presents to servers (PostgreSQL's `cert` method).
    pub server_tls_cert_file: String,
    pub server_tls_key_file: String,
    pub server_tls_protocols: String,
    pub server_tls_ciphers: String,
    /// As `client_tls13_ciphers`, towards PostgreSQL.
    pub server_tls13_ciphers: String,
}

/// How reads are spread over the servers that may take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalancing {
    /// Weighted random choice.
    Random,
    /// Weighted round robin.
    RoundRobin,
    /// The server with the fewest connections checked out, relative to its weight.
    LeastOutstanding,
}

/// Where a client's queries go when neither the parser, a hint nor `SET SERVER ROLE` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DefaultRole {
    /// Any server: the query parser (when enabled) sends reads to replicas, the rest to the
    /// primary; without it, every server takes turns.
    Any,
    Primary,
    Replica,
}

/// A server's role in a database's `servers` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerRole {
    Primary,
    Replica,
    /// Detected with `pg_is_in_recovery()` by the health checks.
    Auto,
}

/// One server of a database with replicas.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    pub host: String,
    #[serde(default = "default_port")]
    pub port: u16,
    #[serde(default = "default_role")]
    pub role: ServerRole,
    /// Share of reads relative to the other servers.
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_role() -> ServerRole {
    ServerRole::Auto
}

fn default_weight() -> u32 {
    1
}

/// The functions that write although called from a SELECT, by default.
pub fn default_writing_functions() -> Vec<String> {
    [
        "nextval",
        "setval",
        "pg_advisory_lock",
        "pg_advisory_xact_lock",
        "pg_try_advisory_lock",
        "pg_try_advisory_xact_lock",
        "pg_advisory_lock_shared",
        "pg_advisory_xact_lock_shared",
        "pg_try_advisory_lock_shared",
        "pg_try_advisory_xact_lock_shared",
        "pg_advisory_unlock",
        "pg_advisory_unlock_shared",
        "pg_advisory_unlock_all",
        "lo_create",
        "lo_import",
        "lo_unlink",
        "lo_put",
        "lo_from_bytea",
        "pg_notify",
        "set_config",
        "txid_current",
        "pg_current_xact_id",
        "pg_switch_wal",
        "pg_create_restore_point",
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_reload_conf",
        "pg_logical_emit_message",
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

impl Default for General {
    fn default() -> Self {
        General {
            listen_addr: "127.0.0.1".into(),
            listen_port: 6432,
            pool_mode: PoolMode::Transaction,
            default_pool_size: 20,
            max_client_conn: 5000,
            max_login_clients: 1000,
            auth_type: AuthType::ScramSha256,
            auth_file: String::new(),
            auth_user: String::new(),
            auth_query: DEFAULT_AUTH_QUERY.into(),
            auth_dbname: String::new(),
            auth_query_cache_lifetime: 0,
            admin_users: Vec::new(),
            ignore_startup_parameters: Vec::new(),
            stats_users: Vec::new(),
            auth_hba_file: String::new(),
            auth_ident_file: String::new(),
            stats_period: 60,
            metrics_addr: String::new(),
            tenant_registry: String::new(),
            api_listen: String::new(),
            api_jwt_secret: String::new(),
            node_address: String::new(),
            unix_socket_dir: "/tmp".into(),
            unix_socket_mode: "0777".into(),
            server_unavailable_wait: 15_000,
            workers: 0,
            io_uring: true,
            server_reset_query: "DISCARD ALL".into(),
            min_pool_size: 0,
            reserve_pool_size: 0,
            reserve_pool_timeout: 5000,
            max_db_connections: 0,
            max_user_connections: 0,
            max_db_client_connections: 0,
            max_user_client_connections: 0,
            server_connect_timeout: 5000,
            server_login_retry: 15_000,
            shutdown_timeout: 30000,
            query_wait_timeout: 120_000,
            query_timeout: 0,
            client_idle_timeout: 0,
            idle_transaction_timeout: 0,
            transaction_timeout: 0,
            client_login_timeout: 60_000,
            server_idle_timeout: 600_000,
            pool_idle_timeout: 0,
            server_lifetime: 3_600_000,
            server_check_delay: 30_000,
            server_check_query: "select 1".into(),
            cancel_wait_timeout: 10_000,
            session_pinning: SessionPinning::Pin,
            max_packet_size: 1 << 30,
            max_prepared_statements: 200,
            retry_stale_statements: false,
            query_cache_size: 64 << 20,
            query_cache_max_entry: 1 << 20,
            query_cache_lag: 1_000,
            query_cache_publication: "pgcorral_cache".into(),
            log_level: "info".into(),
            log_format: LogFormat::Pgcorral,
            log_connections: true,
            log_disconnections: true,
            log_pooler_errors: true,
            log_stats: true,
            peer_id: 0,
            syslog: false,
            syslog_ident: "pgcorral".into(),
            login_notify_message: String::new(),
            query_wait_notify: 0,
            server_fast_close: false,
            syslog_facility: "daemon".into(),
            pidfile: String::new(),
            logfile: String::new(),
            so_reuseport: false,
            load_balancing: LoadBalancing::Random,
            default_role: DefaultRole::Any,
            query_parser_enabled: true,
            primary_reads_enabled: true,
            healthcheck_timeout: 1000,
            healthcheck_delay: 30_000,
            healthcheck_interval: 1000,
            ban_time: 60_000,
            max_replica_lag: String::new(),
            read_your_writes: false,
            writing_functions: default_writing_functions(),
            client_tls_sslmode: SslMode::Disable,
            client_tls_cert_file: String::new(),
            client_tls_key_file: String::new(),
            client_tls_ca_file: String::new(),
            client_tls_protocols: "secure".into(),
            client_tls_ciphers: "default".into(),
            client_tls13_ciphers: String::new(),
            server_tls_sslmode: SslMode::Prefer,
            server_tls_ca_file: String::new(),
            server_tls_cert_file: String::new(),
            server_tls_key_file: String::new(),
            server_tls_protocols: "secure".into(),
            server_tls_ciphers: "default".into(),
            server_tls13_ciphers: String::new(),
        }
    }
}

/// PgBouncer's default `auth_query` (1.24.1 and later: an expired password is NULL), its
/// catalog and function named with their schema, so that nothing a database's owner creates
/// (a `public.pg_authid`, a `now()`) can stand in for them; the lookup's session also has a
/// fixed `search_path` (`auth_query::LOOKUP_SEARCH_PATH`).
pub const DEFAULT_AUTH_QUERY: &str = "SELECT rolname, CASE WHEN rolvaliduntil < pg_catalog.now() THEN NULL ELSE rolpassword END FROM pg_catalog.pg_authid WHERE rolname=$1 AND rolcanlogin";

/// Milliseconds to a duration, with 0 meaning "off".
pub fn millis_opt(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

impl Config {
    /// The cap on clients logged in at once to `database` (`max_db_client_connections`; 0 =
    /// none): the database's (or the `"*"` template's) own, else `[general]`'s.
    pub fn db_client_cap(&self, database: &str) -> usize {
        self.databases
            .get(database)
            .or_else(|| self.databases.get("*"))
            .and_then(|d| d.max_db_client_connections)
            .unwrap_or(self.general.max_db_client_connections)
    }

    /// The cap on clients logged in at once as `user` (`max_user_client_connections`; 0 =
    /// none): the user's own, else `[general]`'s.
    pub fn user_client_cap(&self, user: &str) -> usize {
        self.users
            .get(user)
            .and_then(|u| u.max_user_client_connections)
            .unwrap_or(self.general.max_user_client_connections)
    }
}

/// Which connection lines are logged: `General`'s log_connections, log_disconnections and
/// log_pooler_errors, as the places that log them read them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnLogging {
    pub connections: bool,
    pub disconnections: bool,
    pub pooler_errors: bool,
}

impl General {
    /// The connection lines to log.
    pub fn conn_logging(&self) -> ConnLogging {
        ConnLogging {
            connections: self.log_connections,
            disconnections: self.log_disconnections,
            pooler_errors: self.log_pooler_errors,
        }
    }

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
    /// Settings only (a pgbouncer.ini's `[users]` entry): the user may log in under `trust`
    /// only if also listed in `auth_file` (or as an admin or stats user), as in PgBouncer.
    #[serde(skip)]
    pub settings_only: bool,
    pub pool_size: Option<usize>,
    /// Extra servers of this user's pools for clients that waited `reserve_pool_timeout`;
    /// wins over the database's and the general one.
    pub reserve_pool_size: Option<usize>,
    pub pool_mode: Option<PoolMode>,
    /// Servers for this user across all databases; overrides the general cap.
    pub max_user_connections: Option<usize>,
    /// Clients of this user logged in at once; overrides the general cap.
    pub max_user_client_connections: Option<usize>,
    /// This user's own timeouts (ms; 0 = off), instead of `[general]`'s (see
    /// `config::overrides`).
    pub query_timeout: Option<u64>,
    pub idle_transaction_timeout: Option<u64>,
    pub transaction_timeout: Option<u64>,
    pub client_idle_timeout: Option<u64>,
    /// Wins over the database's `query_wait_timeout` too.
    pub query_wait_timeout: Option<u64>,
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
    /// Clients of this database logged in at once; overrides the general cap.
    pub max_db_client_connections: Option<usize>,
    /// ms; this database's own (a user's wins over it); 0 = wait forever.
    pub query_wait_timeout: Option<u64>,
    /// ms; this database's servers' own lifetime, instead of `[general]`'s.
    pub server_lifetime: Option<u64>,
    pub pool_mode: Option<PoolMode>,
    /// Fixed server login instead of the client's own.
    pub user: Option<String>,
    pub password: Option<String>,
    /// With a list of hosts in `host` (`"a,b"`), how each new server connection picks one
    /// (PgBouncer's `load_balance_hosts`): `round-robin` (default) or `disable`.
    pub load_balance_hosts: Option<LoadBalanceHosts>,
    /// Startup parameters of this database's server logins (PgBouncer's per-database
    /// `client_encoding`, `datestyle`, `timezone`, `application_name`): the sessions' defaults,
    /// under clients' own.
    #[serde(default)]
    pub startup_parameters: BTreeMap<String, String>,
    /// Run on each new server connection of this database once logged in (PgBouncer's
    /// `connect_query`): its SETs are the server's starting state for every client.
    pub connect_query: Option<String>,
    /// This database's `auth_user`, `auth_dbname` and `auth_query` instead of `[general]`'s.
    pub auth_user: Option<String>,
    pub auth_dbname: Option<String>,
    pub auth_query: Option<String>,
    /// A primary and its replicas, instead of `host` and `port`.
    #[serde(default)]
    pub servers: Vec<ServerEntry>,
    pub load_balancing: Option<LoadBalancing>,
    pub default_role: Option<DefaultRole>,
    pub query_parser_enabled: Option<bool>,
    pub primary_reads_enabled: Option<bool>,
    pub healthcheck_timeout: Option<u64>,
    pub healthcheck_delay: Option<u64>,
    pub healthcheck_interval: Option<u64>,
    pub ban_time: Option<u64>,
    pub max_replica_lag: Option<String>,
    pub read_your_writes: Option<bool>,
    /// Shards, each a server or a primary and its replicas, instead of `host`/`port`/`servers`:
    /// the database is one logical database over them (see `config::sharding`).
    #[serde(default)]
    pub shards: Vec<ShardEntry>,
    /// Tables whose rows are spread over the shards by their key.
    #[serde(default)]
    pub sharded_tables: Vec<ShardedTable>,
    /// Tables that are the same on every shard: reads go to any one shard.
    #[serde(default)]
    pub omnisharded_tables: Vec<String>,
    /// Where a query that names no shard goes; unset: such a query is refused.
    pub default_shard: Option<usize>,
    pub sharding_function: Option<Function>,
    /// The type of a key given by `SET SHARDING KEY` (see [`Database::key_types`]).
    pub sharding_key_type: Option<KeyType>,
    /// The shards' hash-partitioned tables (`PARTITION BY HASH`, read from shard 0's catalog
    /// at first use) are sharded tables too, by their partition key.
    pub sharded_tables_from_catalog: Option<bool>,
    /// The most groups (or distinct rows) a read across shards merges in memory (default
    /// 100,000); more fail with SQLSTATE 54000.
    pub max_gather_groups: Option<usize>,
    /// Answers of this database's cacheable reads are kept and served again until a change
    /// reaches them (see docs/architecture/cache.md); off by default.
    pub query_cache: Option<bool>,
    /// With `query_cache`: only reads of these tables (by the name the query uses) are cached;
    /// unset or empty, every cacheable read.
    pub query_cache_tables: Option<Vec<String>>,
}

impl Default for Database {
    fn default() -> Self {
        Database {
            host: default_host(),
            port: default_port(),
            dbname: None,
            pool_size: None,
            min_pool_size: None,
            reserve_pool_size: None,
            max_db_connections: None,
            max_db_client_connections: None,
            query_wait_timeout: None,
            server_lifetime: None,
            pool_mode: None,
            user: None,
            password: None,
            load_balance_hosts: None,
            startup_parameters: BTreeMap::new(),
            connect_query: None,
            auth_user: None,
            auth_dbname: None,
            auth_query: None,
            servers: Vec::new(),
            load_balancing: None,
            default_role: None,
            query_parser_enabled: None,
            primary_reads_enabled: None,
            healthcheck_timeout: None,
            healthcheck_delay: None,
            healthcheck_interval: None,
            ban_time: None,
            max_replica_lag: None,
            read_your_writes: None,
            shards: Vec::new(),
            sharded_tables: Vec::new(),
            omnisharded_tables: Vec::new(),
            default_shard: None,
            sharding_function: None,
            sharding_key_type: None,
            sharded_tables_from_catalog: None,
            max_gather_groups: None,
            query_cache: None,
            query_cache_tables: None,
        }
    }
}

impl Database {
    /// The server login's extra startup parameters, by PostgreSQL's names.
    pub fn startup_params(&self) -> Vec<(String, String)> {
        self.startup_parameters
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The servers clients of this database reach: `servers`, or the one at `host`/`port`
    /// (a primary).
    pub fn server_list(&self) -> Vec<ServerEntry> {
        server_list(&self.servers, &self.host, self.port)
    }
}

/// `servers`, or the one at `host`/`port` (a primary) when the list is empty.
pub(super) fn server_list(servers: &[ServerEntry], host: &str, port: u16) -> Vec<ServerEntry> {
    if servers.is_empty() {
        vec![ServerEntry {
            host: host.to_string(),
            port,
            role: ServerRole::Primary,
            weight: 1,
        }]
    } else {
        servers.to_vec()
    }
}

/// `max_replica_lag` parsed: bytes of WAL and/or time behind the primary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LagLimit {
    pub bytes: Option<u64>,
    pub time: Option<Duration>,
}

impl LagLimit {
    /// Parses "16MB", "10s", "16MB 10s" (also comma-separated); empty = no limit. Sizes take
    /// B, kB, MB, GB, TB (powers of 1024, as PostgreSQL's); times ms, s, min, h.
    pub fn parse(text: &str) -> Result<LagLimit, String> {
        let mut limit = LagLimit::default();
        for part in text.split([',', ' ']).filter(|p| !p.is_empty()) {
            let digits = part
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(part.len());
            let (num, unit) = part.split_at(digits);
            let n: u64 = num
                .parse()
                .map_err(|_| format!("{part:?} does not start with a number"))?;
            let bytes = |m: u64| {
                n.checked_mul(m)
                    .ok_or_else(|| format!("{part:?} is too large"))
            };
            match unit.trim() {
                "B" => limit.bytes = Some(n),
                "kB" | "KB" => limit.bytes = Some(bytes(1 << 10)?),
                "MB" => limit.bytes = Some(bytes(1 << 20)?),
                "GB" => limit.bytes = Some(bytes(1 << 30)?),
                "TB" => limit.bytes = Some(bytes(1 << 40)?),
                "ms" => limit.time = Some(Duration::from_millis(n)),
                "s" => limit.time = Some(Duration::from_secs(n)),
                "min" => limit.time = Some(Duration::from_secs(n * 60)),
                "h" => limit.time = Some(Duration::from_secs(n * 3600)),
                u => {
                    return Err(format!(
                        "unknown unit {u:?} in {part:?} (sizes: B, kB, MB, GB, TB; times: ms, s, min, h)"
                    ))
                }
            }
        }
        Ok(limit)
    }
}

pub(super) fn default_host() -> String {
    "127.0.0.1".into()
}

pub(super) fn default_port() -> u16 {
    5432
}

/// The query a long-idle server runs before reuse, from `server_check_query`: none for an
/// empty value, an empty query for PgBouncer's `<empty>` (its default since 1.23: the cheapest
/// round trip, answered by EmptyQueryResponse).
pub fn check_query(value: &str) -> Option<String> {
    match value.trim() {
        "" => None,
        v if v.eq_ignore_ascii_case("<empty>") => Some(String::new()),
        _ => Some(value.to_string()),
    }
}

#[cfg(test)]
mod check_query_tests {
    #[test]
    fn empty_is_none_and_the_empty_token_an_empty_query() {
        assert_eq!(super::check_query(""), None);
        assert_eq!(super::check_query("  "), None);
        assert_eq!(super::check_query("<empty>"), Some(String::new()));
        assert_eq!(super::check_query("<EMPTY>"), Some(String::new()));
        assert_eq!(super::check_query("select 1"), Some("select 1".into()));
    }
}
