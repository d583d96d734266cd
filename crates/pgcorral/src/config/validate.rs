//! Checks a parsed `Config` for values serde accepts but pgcorral cannot use; errors name the key.

use std::net::IpAddr;

use pgwire::auth::{md5, scram::ScramSecret};

use super::{AuthType, Config, ConfigError, Database, LagLimit, ServerEntry, ServerRole, User};
use crate::config;
use crate::tls;

/// Database names the admin console answers to; they cannot be `[databases.NAME]` keys.
pub const RESERVED_DATABASES: [&str; 2] = ["pgbouncer", "pgcorral"];

/// Smallest and largest accepted `general.max_packet_size`.
pub const MAX_PACKET_SIZE_RANGE: std::ops::RangeInclusive<u32> = 1024..=(1 << 30);

/// Refuses `cfg` with every problem found, one per line, each starting with the key at fault.
pub fn validate(cfg: &Config) -> Result<(), ConfigError> {
    let errs = problems(cfg);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ConfigError(errs.join("\n")))
    }
}

/// Every problem in `cfg`, each starting with the key at fault; empty when it is usable.
pub fn problems(cfg: &Config) -> Vec<String> {
    let mut errs = Vec::new();
    general(cfg, &mut errs);
    // Users whose passwords come from the auth_file or an auth_query need none here.
    let elsewhere = passwords_elsewhere(cfg);
    for (name, user) in &cfg.users {
        check_user(cfg.general.auth_type, name, user, elsewhere, &mut errs);
    }
    for (name, db) in &cfg.databases {
        check_database(name, db, &mut errs);
    }
    errs
}

fn auth_name(auth: AuthType) -> &'static str {
    match auth {
        AuthType::ScramSha256 => "scram-sha-256",
        AuthType::Md5 => "md5",
        AuthType::Trust => "trust",
        AuthType::Cert => "cert",
        AuthType::Hba => "hba",
    }
}

/// The tenant API needs the registry it serves and a secret for its tokens (an API that would
/// take any token is refused: it fails closed).
fn tenant_api(g: &config::General, errs: &mut Vec<String>) {
    if g.api_listen.is_empty() {
        return;
    }
    if g.api_listen.parse::<std::net::SocketAddr>().is_err() {
        errs.push(format!(
            "general.api_listen: {:?} is not an address:port",
            g.api_listen
        ));
    }
    if g.tenant_registry.is_empty() {
        errs.push("general.api_listen: the tenant API needs general.tenant_registry".into());
    }
    if g.api_jwt_secret.len() < 16 {
        errs.push(
            "general.api_jwt_secret: the tenant API needs a secret of at least 16 bytes for its \
             tokens (or PGCORRAL_API_JWT_SECRET)"
                .into(),
        );
    }
}

/// The socket mode in octal digits ("0777", "660"), when it is one.
pub fn socket_mode(mode: &str) -> Option<u32> {
    u32::from_str_radix(mode, 8).ok().filter(|m| *m <= 0o777)
}

fn unix_socket(g: &config::General, errs: &mut Vec<String>) {
    let dir = &g.unix_socket_dir;
    if !dir.is_empty() && !dir.starts_with('/') {
        errs.push(format!(
            "general.unix_socket_dir: {dir:?} is not an absolute directory (abstract sockets, \
             \"@name\", are not supported); empty turns the Unix-socket listener off"
        ));
    }
    // sun_path holds 108 bytes with its NUL. The takeover socket (`-R`) has a shorter name, so
    // it fits whenever this one does. Port 0 gets a port of the kernel's, of 5 digits.
    let port = match g.listen_port {
        0 => 65535,
        p => p,
    };
    let socket = format!("{}/.s.PGSQL.{port}", dir.trim_end_matches('/'));
    if !dir.is_empty() && socket.len() >= 108 {
        errs.push(format!(
            "general.unix_socket_dir: {dir:?} is too long: the socket path {socket:?} is {} \
             bytes, a Unix socket path has at most 107",
            socket.len()
        ));
    }
    if socket_mode(&g.unix_socket_mode).is_none() {
        errs.push(format!(
            "general.unix_socket_mode: {:?} is not a file mode in octal digits (e.g. \"0777\")",
            g.unix_socket_mode
        ));
    }
}

/// True for `"*"`, `"localhost"` or an IPv4/IPv6 address.
pub fn listen_addr_ok(addr: &str) -> bool {
    addr == "*" || addr == "localhost" || addr.parse::<IpAddr>().is_ok()
}

fn general(cfg: &Config, errs: &mut Vec<String>) {
    let g = &cfg.general;
    if !listen_addr_ok(&g.listen_addr) {
        errs.push(format!(
            "general.listen_addr: {:?} is not an IP address, \"*\" (all IPv4 addresses) or \"localhost\"",
            g.listen_addr
        ));
    }
    unix_socket(g, errs);
    tenant_api(g, errs);
    if g.default_pool_size < 1 {
        errs.push("general.default_pool_size: must be at least 1".into());
    }
    if g.max_client_conn < 1 {
        errs.push("general.max_client_conn: must be at least 1".into());
    }
    if g.max_login_clients < 1 {
        errs.push("general.max_login_clients: must be at least 1".into());
    }
    if !MAX_PACKET_SIZE_RANGE.contains(&g.max_packet_size) {
        errs.push(format!(
            "general.max_packet_size: must be {}..{} (bytes), got {}",
            MAX_PACKET_SIZE_RANGE.start(),
            MAX_PACKET_SIZE_RANGE.end(),
            g.max_packet_size
        ));
    }
    if g.server_connect_timeout == 0 {
        errs.push("general.server_connect_timeout: must be greater than 0 (milliseconds)".into());
    }
    if g.shutdown_timeout == 0 {
        errs.push("general.shutdown_timeout: must be greater than 0 (milliseconds)".into());
    }
    if let Err(e) = LagLimit::parse(&g.max_replica_lag) {
        errs.push(format!("general.max_replica_lag: {e}"));
    }
    if g.healthcheck_timeout == 0 {
        errs.push("general.healthcheck_timeout: must be greater than 0 (milliseconds)".into());
    }
    if g.healthcheck_interval == 0 {
        errs.push("general.healthcheck_interval: must be greater than 0 (milliseconds)".into());
    }
    for id in cfg.peers.keys() {
        if !id.parse::<u16>().is_ok_and(|n| n > 0) {
            errs.push(format!(
                "peers.{id}: ids of peers must be a number larger than 0 and at most 65535"
            ));
        }
    }
    if syslog_facility(&g.syslog_facility).is_none() {
        errs.push(format!(
            "general.syslog_facility: {:?} is not a syslog facility (auth, authpriv, daemon, user, local0 to local7)",
            g.syslog_facility
        ));
    }
    if g.log_level.trim().is_empty() {
        errs.push("general.log_level: must not be empty (use \"off\" to silence logging)".into());
    } else if let Err(e) = tracing_subscriber::EnvFilter::try_new(&g.log_level) {
        errs.push(format!(
            "general.log_level: {:?} is not a tracing filter ({e}); e.g. \"info\" or \"pgcorral=debug,warn\"",
            g.log_level
        ));
    }
    tls(g, errs);
    let auth = auth_name(g.auth_type);
    if g.auth_type == AuthType::Hba && g.auth_hba_file.is_empty() {
        errs.push("general.auth_hba_file: required with auth_type = \"hba\"".into());
    }
    auth_query(cfg, errs);
    // With hba, a user without a password can still log in by a trust, peer or cert rule.
    if !matches!(
        g.auth_type,
        AuthType::Trust | AuthType::Cert | AuthType::Hba
    ) && !passwords_elsewhere(cfg)
    {
        // The tenant registry's tenants bring their own users.
        if cfg.users.is_empty() && g.tenant_registry.is_empty() {
            errs.push(format!(
                "users: auth_type = \"{auth}\" needs at least one [users.NAME] entry with a password"
            ));
        }
        for (key, list) in [
            ("admin_users", &g.admin_users),
            ("stats_users", &g.stats_users),
        ] {
            for admin in list {
                if !cfg.users.contains_key(admin) {
                    errs.push(format!(
                        "general.{key}: {admin:?} is not a [users.NAME] entry (required with auth_type = \"{auth}\")"
                    ));
                }
            }
        }
    }
}

/// Passwords come from an `auth_file` or an `auth_query` (general or a database's).
fn passwords_elsewhere(cfg: &Config) -> bool {
    !cfg.general.auth_file.is_empty()
        || !cfg.general.auth_user.is_empty()
        || cfg.databases.values().any(|d| d.auth_user.is_some())
}

/// `auth_user`, `auth_query` and `auth_dbname`, general and per database.
fn auth_query(cfg: &Config, errs: &mut Vec<String>) {
    let g = &cfg.general;
    if !g.auth_user.is_empty() && g.auth_query.trim().is_empty() {
        errs.push("general.auth_query: must not be empty when auth_user is set".into());
    }
    for (name, db) in &cfg.databases {
        for (key, v) in [
            ("auth_user", &db.auth_user),
            ("auth_dbname", &db.auth_dbname),
            ("auth_query", &db.auth_query),
        ] {
            if v.as_deref().is_some_and(|v| v.trim().is_empty()) {
                errs.push(format!("databases.{name}.{key}: must not be empty"));
            }
        }
    }
    // Only [general]'s: a database's auth_dbname naming the console is taken, and its logins
    // are refused (`bouncer config error`, logged), as PgBouncer does.
    let v = g.auth_dbname.as_str();
    if RESERVED_DATABASES.contains(&v) {
        errs.push(format!(
            "general.auth_dbname: cannot use the reserved {v:?} database as an auth_dbname"
        ));
    }
}

/// The TLS settings' values. Which must go together, and the files, are checked by
/// [`crate::tls::Tls::load`] (at start, reload and SET), so that the console can change them
/// one at a time.
fn tls(g: &super::General, errs: &mut Vec<String>) {
    for (key, v) in [
        ("client_tls_protocols", &g.client_tls_protocols),
        ("server_tls_protocols", &g.server_tls_protocols),
    ] {
        if let Err(e) = tls::versions(v) {
            errs.push(format!("general.{key}: {e}"));
        }
    }
    for (key, v) in [
        ("client_tls_ciphers", &g.client_tls_ciphers),
        ("server_tls_ciphers", &g.server_tls_ciphers),
    ] {
        if let Err(e) = tls::provider(v) {
            errs.push(format!("general.{key}: {e}"));
        }
    }
    for (key, v) in [
        ("client_tls13_ciphers", &g.client_tls13_ciphers),
        ("server_tls13_ciphers", &g.server_tls13_ciphers),
    ] {
        if !v.trim().is_empty() {
            if let Err(e) = tls::tls13_suites(v) {
                errs.push(format!("general.{key}: {e}"));
            }
        }
    }
}

/// What a `password` value is.
enum Secret {
    Plain,
    Md5,
    Scram,
}

/// What a configured password is, as PostgreSQL's `get_password_type` decides: an MD5 hash
/// only in its exact form (`md5` and 32 lowercase hex digits), a SCRAM verifier only when it
/// parses as one, and anything else plaintext (`md5pass` is a plaintext password, as for
/// PostgreSQL and PgBouncer).
fn classify(password: &str) -> Secret {
    if md5::is_stored_hash(password) {
        Secret::Md5
    } else if ScramSecret::parse(password).is_some() {
        Secret::Scram
    } else {
        Secret::Plain
    }
}

/// Checks a stored secret; `key` is e.g. `users.app.password`. Any non-empty text is a
/// password of some form (see [`classify`]).
fn check_secret_form(key: &str, password: &str, errs: &mut Vec<String>) {
    if password.is_empty() {
        errs.push(format!("{key}: must not be empty"));
    }
}

fn check_user(auth: AuthType, name: &str, user: &User, elsewhere: bool, errs: &mut Vec<String>) {
    if name.is_empty() {
        errs.push("users: a user name must not be empty".into());
    }
    if user.pool_size == Some(0) {
        errs.push(format!("users.{name}.pool_size: must be at least 1"));
    }
    let key = format!("users.{name}.password");
    match &user.password {
        None if !matches!(auth, AuthType::Trust | AuthType::Cert | AuthType::Hba) && !elsewhere => {
            errs.push(format!(
                "{key}: required with auth_type = \"{}\"",
                auth_name(auth)
            ))
        }
        None => {}
        Some(pw) => {
            // An md5 hash with auth_type = "scram-sha-256" is not refused here: that user's
            // logins fail, as in PostgreSQL and PgBouncer (client::auth).
            check_secret_form(&key, pw, errs);
        }
    }
}

fn check_database(name: &str, db: &Database, errs: &mut Vec<String>) {
    if name.is_empty() {
        errs.push("databases: a database name must not be empty (use \"*\" for any name)".into());
    }
    if RESERVED_DATABASES.contains(&name) {
        errs.push(format!(
            "databases.{name}: the name {name:?} is reserved for the admin console"
        ));
    }
    for key in db.startup_parameters.keys() {
        if matches!(key.as_str(), "user" | "database" | "replication") || key.is_empty() {
            errs.push(format!(
                "databases.{name}.startup_parameters: {key:?} is not a parameter a login may set here"
            ));
        }
    }
    if db.host.trim().is_empty() {
        errs.push(format!("databases.{name}.host: must not be empty"));
    }
    if db.port == 0 {
        errs.push(format!("databases.{name}.port: must be 1..65535"));
    }
    check_servers(name, db, errs);
    if db.pool_size == Some(0) {
        errs.push(format!("databases.{name}.pool_size: must be at least 1"));
    }
    if db.dbname.as_deref() == Some("") {
        errs.push(format!("databases.{name}.dbname: must not be empty"));
    }
    if db.user.as_deref() == Some("") {
        errs.push(format!("databases.{name}.user: must not be empty"));
    }
    if let Some(pw) = &db.password {
        let key = format!("databases.{name}.password");
        if matches!(classify(pw), Secret::Scram) {
            errs.push(format!(
                "{key}: a SCRAM verifier cannot log in to a server; give the plaintext password"
            ));
        } else {
            check_secret_form(&key, pw, errs);
        }
        if db.user.is_none() && md5::is_stored_hash(pw) {
            errs.push(format!(
                "{key}: an md5 hash is tied to one user name; set databases.{name}.user too"
            ));
        }
    }
}

/// `servers`, and the settings of a database with replicas.
fn check_servers(name: &str, db: &Database, errs: &mut Vec<String>) {
    if !db.servers.is_empty() && (db.host != "127.0.0.1" || db.port != 5432) {
        errs.push(format!(
            "databases.{name}.servers: give either servers or host/port, not both"
        ));
    }
    check_server_list(name, &db.servers, errs);
    super::sharding::check(name, db, errs);
    if let Some(Err(e)) = db.max_replica_lag.as_deref().map(LagLimit::parse) {
        errs.push(format!("databases.{name}.max_replica_lag: {e}"));
    }
    if db.healthcheck_timeout == Some(0) {
        errs.push(format!(
            "databases.{name}.healthcheck_timeout: must be greater than 0 (milliseconds)"
        ));
    }
    if db.healthcheck_interval == Some(0) {
        errs.push(format!(
            "databases.{name}.healthcheck_interval: must be greater than 0 (milliseconds)"
        ));
    }
}

/// A list of servers (a database's or a shard's `servers`); `at` names it after `databases.`.
pub(super) fn check_server_list(at: &str, servers: &[ServerEntry], errs: &mut Vec<String>) {
    for (i, s) in servers.iter().enumerate() {
        if s.host.trim().is_empty() {
            errs.push(format!(
                "databases.{at}.servers[{i}].host: must not be empty"
            ));
        }
        if s.port == 0 {
            errs.push(format!(
                "databases.{at}.servers[{i}].port: must be 1..65535"
            ));
        }
        if s.weight == 0 && s.role != ServerRole::Primary {
            errs.push(format!(
                "databases.{at}.servers[{i}].weight: must be at least 1"
            ));
        }
    }
    let primaries = servers
        .iter()
        .filter(|s| s.role == ServerRole::Primary)
        .count();
    if primaries > 1 {
        errs.push(format!(
            "databases.{at}.servers: at most one server may have role = \"primary\" (use \"auto\" to follow failovers)"
        ));
    }
    if !servers.is_empty() && servers.iter().all(|s| s.role == ServerRole::Replica) {
        errs.push(format!(
            "databases.{at}.servers: writes need a server with role = \"primary\" or \"auto\""
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for s in servers {
        if !seen.insert((&s.host, s.port)) {
            errs.push(format!(
                "databases.{at}.servers: {}:{} is listed twice",
                s.host, s.port
            ));
        }
    }
}

/// The facilities PgBouncer accepts, by name.
const FACILITIES: &[(&str, libc::c_int)] = &[
    ("auth", libc::LOG_AUTH),
    ("authpriv", libc::LOG_AUTHPRIV),
    ("daemon", libc::LOG_DAEMON),
    ("user", libc::LOG_USER),
    ("local0", libc::LOG_LOCAL0),
    ("local1", libc::LOG_LOCAL1),
    ("local2", libc::LOG_LOCAL2),
    ("local3", libc::LOG_LOCAL3),
    ("local4", libc::LOG_LOCAL4),
    ("local5", libc::LOG_LOCAL5),
    ("local6", libc::LOG_LOCAL6),
    ("local7", libc::LOG_LOCAL7),
];

/// The syslog facility `name` names (any case), if it is one PgBouncer accepts.
pub fn syslog_facility(name: &str) -> Option<libc::c_int> {
    FACILITIES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(_, f)| f)
}

#[cfg(test)]
mod tests {
    use super::super::from_toml_str;
    use super::{classify, ScramSecret, Secret};

    /// Asserts `toml` is refused with a message containing every one of `needles`.
    fn refused(toml: &str, needles: &[&str]) {
        let err = from_toml_str(toml).expect_err(toml).to_string();
        for n in needles {
            assert!(err.contains(n), "error {err:?} does not contain {n:?}");
        }
    }

    const USERS: &str = "[users.app]\npassword = \"app-secret\"\n";

    fn general(line: &str) -> String {
        format!("[general]\n{line}\n{USERS}")
    }

    #[test]
    fn bad_general_values() {
        let cases = [
            ("listen_addr = \"nowhere\"", "general.listen_addr:"),
            ("listen_addr = \"\"", "general.listen_addr:"),
            (
                "default_pool_size = 0",
                "general.default_pool_size: must be at least 1",
            ),
            (
                "max_client_conn = 0",
                "general.max_client_conn: must be at least 1",
            ),
            (
                "max_login_clients = 0",
                "general.max_login_clients: must be at least 1",
            ),
            (
                "max_packet_size = 1023",
                "general.max_packet_size: must be 1024..1073741824",
            ),
            ("max_packet_size = 1073741825", "general.max_packet_size:"),
            (
                "shutdown_timeout = 0",
                "general.shutdown_timeout: must be greater than 0",
            ),
            (
                "server_connect_timeout = 0",
                "general.server_connect_timeout:",
            ),
            ("log_level = \"pgcorral=loud\"", "general.log_level:"),
            ("log_level = \"\"", "general.log_level:"),
            ("admin_users = [\"root\"]", "general.admin_users: \"root\""),
            ("unix_socket_dir = \"tmp\"", "general.unix_socket_dir:"),
            (
                "unix_socket_dir = \"@pgcorral\"",
                "general.unix_socket_dir:",
            ),
            ("unix_socket_mode = \"0999\"", "general.unix_socket_mode:"),
            ("unix_socket_mode = \"1777\"", "general.unix_socket_mode:"),
            ("unix_socket_mode = \"rw\"", "general.unix_socket_mode:"),
        ];
        for (line, needle) in cases {
            refused(&general(line), &[needle]);
        }
    }

    /// The client socket's path may have 107 bytes, counted with the port's own digits (PgBouncer
    /// starts there); the takeover socket's shorter name needs no more.
    #[test]
    fn the_socket_path_may_have_107_bytes() {
        // "/.s.PGSQL.6432" is 14 bytes.
        let dir = format!("/{}", "d".repeat(92));
        let at = |dir: &str, port: u16| {
            format!("[general]\nlisten_port = {port}\nunix_socket_dir = \"{dir}\"\n{USERS}")
        };
        for ok in [at(&dir, 6432), at(&format!("{dir}/"), 6432)] {
            from_toml_str(&ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        refused(&at(&format!("{dir}d"), 6432), &["is 108 bytes"]);
        // Port 0: the kernel's port has 5 digits.
        refused(&at(&dir, 0), &["is 108 bytes"]);
    }

    #[test]
    fn good_general_values() {
        for line in [
            "listen_addr = \"*\"",
            "listen_addr = \"localhost\"",
            "listen_addr = \"::1\"",
            "listen_addr = \"0.0.0.0\"",
            "server_reset_query = \"\"",
            "log_level = \"pgcorral=debug,warn\"",
            "max_packet_size = 1024",
            "query_wait_timeout = 0",
            "admin_users = [\"app\"]",
            "unix_socket_dir = \"\"",
            "unix_socket_dir = \"/var/run/pgcorral\"",
            "unix_socket_mode = \"660\"",
        ] {
            from_toml_str(&general(line)).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }

    #[test]
    fn servers_lists() {
        let db = |servers: &str, extra: &str| {
            format!(
                "[general]\nauth_type = \"trust\"\n[databases.app]\nservers = [{servers}]\n{extra}"
            )
        };
        let p = "{ host = \"10.0.0.1\", role = \"primary\" }";
        let r = "{ host = \"10.0.0.2\", port = 5433, role = \"replica\", weight = 2 }";
        let cfg =
            from_toml_str(&db(&format!("{p}, {r}"), "max_replica_lag = \"16MB 10s\"")).unwrap();
        let list = cfg.databases["app"].server_list();
        assert_eq!(list.len(), 2);
        assert_eq!((list[1].port, list[1].weight), (5433, 2));
        assert_eq!(list[0].port, 5432);
        refused(
            &db(&format!("{p}, {p}"), ""),
            &["servers: at most one server", "listed twice"],
        );
        refused(&db(r, ""), &["writes need a server"]);
        refused(
            &db(&format!("{p}, {r}"), "host = \"db\""),
            &["either servers or host/port"],
        );
        refused(
            &db(p, "max_replica_lag = \"16 parsecs\""),
            &["databases.app.max_replica_lag: unknown unit"],
        );
        refused(&db("{ host = \"x\", role = \"leader\" }", ""), &["role"]);
        refused(
            &general("healthcheck_timeout = 0"),
            &["general.healthcheck_timeout"],
        );
    }

    #[test]
    fn lag_limits() {
        use super::LagLimit;
        use std::time::Duration;
        assert_eq!(LagLimit::parse("").unwrap(), LagLimit::default());
        let l = LagLimit::parse("16MB, 1500ms").unwrap();
        assert_eq!(l.bytes, Some(16 << 20));
        assert_eq!(l.time, Some(Duration::from_millis(1500)));
        assert_eq!(
            LagLimit::parse("2min").unwrap().time,
            Some(Duration::from_secs(120))
        );
        assert_eq!(LagLimit::parse("100B").unwrap().bytes, Some(100));
        assert!(LagLimit::parse("MB").is_err());
    }

    #[test]
    fn out_of_range_types_are_refused_by_serde_with_the_key() {
        refused("[databases.bench]\nport = 70000\n", &["port", "line 2"]);
        refused(
            &general("pool_mode = \"sometimes\""),
            &["pool_mode", "line 2"],
        );
        refused(&general("auth_type = \"password\""), &["auth_type"]);
    }

    #[test]
    fn users_need_passwords_unless_trust() {
        refused(
            "[general]\nauth_type = \"scram-sha-256\"\n",
            &["users: auth_type = \"scram-sha-256\" needs at least one [users.NAME] entry with a password"],
        );
        refused("", &["users: auth_type = \"scram-sha-256\""]);
        refused(
            "[general]\nauth_type = \"md5\"\n",
            &["users: auth_type = \"md5\""],
        );
        refused(
            "[general]\nauth_type = \"md5\"\n[users.app]\npool_size = 3\n",
            &["users.app.password: required with auth_type = \"md5\""],
        );
        let trust =
            from_toml_str("[general]\nauth_type = \"trust\"\nadmin_users = [\"x\"]\n[users.app]\n")
                .unwrap();
        assert_eq!(trust.users["app"].password, None);
        from_toml_str("[general]\nauth_type = \"trust\"\n").unwrap();
    }

    #[test]
    fn password_forms() {
        let md5 = pgwire::auth::md5::stored_hash("app", "secret");
        let user = |pw: &str, auth: &str| {
            format!("[general]\nauth_type = \"{auth}\"\n[users.app]\npassword = \"{pw}\"\n")
        };
        from_toml_str(&user(&md5, "md5")).unwrap();
        from_toml_str(&user(&md5, "trust")).unwrap();
        // Accepted: that user's SCRAM logins fail (tests/auth.rs), as in PostgreSQL.
        from_toml_str(&user(&md5, "scram-sha-256")).unwrap();
        // Not a hash's exact form: a plaintext password, as for PostgreSQL and PgBouncer.
        for plain in [
            "md5pass",
            "md5nothex",
            &md5.to_uppercase().replace("MD5", "md5"),
        ] {
            for auth in ["md5", "scram-sha-256"] {
                let c = from_toml_str(&user(plain, auth)).unwrap();
                assert!(matches!(classify(plain), Secret::Plain), "{plain}");
                assert_eq!(c.users["app"].password.as_deref(), Some(plain));
            }
        }
        refused(&user("", "md5"), &["users.app.password: must not be empty"]);
        refused(
            "[users.app]\npassword = \"x\"\npool_size = 0\n",
            &["users.app.pool_size: must be at least 1"],
        );
    }

    #[test]
    fn bad_database_values() {
        let db = |body: &str| format!("{USERS}[databases.bench]\n{body}\n");
        refused(&db("port = 0"), &["databases.bench.port: must be 1..65535"]);
        refused(
            &db("host = \"\""),
            &["databases.bench.host: must not be empty"],
        );
        refused(
            &db("pool_size = 0"),
            &["databases.bench.pool_size: must be at least 1"],
        );
        refused(
            &db("dbname = \"\""),
            &["databases.bench.dbname: must not be empty"],
        );
        refused(
            &db("user = \"\""),
            &["databases.bench.user: must not be empty"],
        );
        let md5 = pgwire::auth::md5::stored_hash("u", "pw");
        refused(
            &db(&format!("password = \"{md5}\"")),
            &["databases.bench.password: an md5 hash is tied to one user name"],
        );
        from_toml_str(&db(&format!("user = \"u\"\npassword = \"{md5}\""))).unwrap();
        from_toml_str(&db("password = \"shared\"")).unwrap();
        from_toml_str(&db("user = \"u\"\npassword = \"md5zz\"")).unwrap();
        from_toml_str(&db(
            "user = \"u\"\npassword = \"SCRAM-SHA-256$4096:c2FsdA==$a:b\"",
        ))
        .unwrap();
        let verifier = ScramSecret::from_password("pw", b"0123456789abcdef", 4096).to_verifier();
        refused(
            &db(&format!("user = \"u\"\npassword = \"{verifier}\"")),
            &["databases.bench.password: a SCRAM verifier cannot log in"],
        );
        for reserved in ["pgbouncer", "pgcorral"] {
            refused(
                &format!("{USERS}[databases.{reserved}]\n"),
                &[&format!(
                    "databases.{reserved}: the name \"{reserved}\" is reserved"
                )],
            );
        }
        let ok = from_toml_str(&format!(
            "{USERS}[databases.\"*\"]\nuser = \"u\"\npassword = \"pw\"\n"
        ))
        .unwrap();
        assert_eq!(ok.databases["*"].port, 5432);
    }

    #[test]
    fn every_problem_is_reported() {
        let err = from_toml_str("[general]\ndefault_pool_size = 0\nmax_client_conn = 0\n")
            .unwrap_err()
            .to_string();
        assert_eq!(err.lines().count(), 3, "{err}");
    }

    #[test]
    fn scram_verifier_passwords() {
        // A well-formed verifier: 4096 iterations, 16-byte salt, two 32-byte keys.
        let good = "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$\
                    WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:\
                    wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=";
        let user = |pw: &str, auth: &str| {
            format!("[general]\nauth_type = \"{auth}\"\n[users.app]\npassword = \"{pw}\"\n")
        };
        let derived = ScramSecret::from_password("app-secret", b"0123456789abcdef", 4096);
        for pw in [good, &derived.to_verifier()] {
            for auth in ["scram-sha-256", "md5", "trust"] {
                from_toml_str(&user(pw, auth)).unwrap_or_else(|e| panic!("{auth}: {e}"));
            }
        }
        for bad in [
            "SCRAM-SHA-256$",
            "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$short:short",
            "SCRAM-SHA-256$many:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
        ] {
            // Not a verifier's exact form: a plaintext password, as for PostgreSQL.
            from_toml_str(&user(bad, "scram-sha-256")).unwrap();
            assert!(matches!(classify(bad), Secret::Plain), "{bad}");
        }
    }
}
