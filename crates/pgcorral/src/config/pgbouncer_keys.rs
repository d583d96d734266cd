//! The keys of pgbouncer.ini's `[pgbouncer]` section: PgBouncer 1.24's (and those added since), how each value is read, and whether pgcorral honours it, warns about it or notes it.

use super::pgbouncer::{seconds_ms, strtol};

/// How a value is read (PgBouncer's `CF_INT`, `CF_TIME_USEC`, `CF_STR`, `CF_LOOKUP`).
#[derive(Clone, Copy)]
pub(super) enum Ty {
    /// `strtol` base 0.
    Int,
    /// Seconds, `strtod`.
    Time,
    Str,
    /// One of these, any case.
    Lookup(&'static [&'static str]),
}

/// What pgcorral does with a key.
#[derive(Clone, Copy)]
pub(super) enum How {
    /// Honoured: mapped to pgcorral's setting (by `pgbouncer_general`).
    Map,
    /// Not honoured; warned unless the value is 0 or empty.
    Warn(&'static str),
    /// Not honoured yet (a later part of issue 37); warned unless the value is 0 or empty.
    Later(&'static str),
    /// Accepted; it has no meaning for pgcorral; noted whatever its value.
    Note(&'static str),
}

const SSLMODES: &[&str] = &[
    "disable",
    "allow",
    "prefer",
    "require",
    "verify-ca",
    "verify-full",
];
const POOL_MODES: &[&str] = &["session", "transaction", "statement"];
const AUTH_TYPES: &[&str] = &[
    "any",
    "trust",
    "plain",
    "md5",
    "cert",
    "hba",
    "pam",
    "scram-sha-256",
    "ldap",
];
const KEEPALIVE: &str = "pgcorral does not set TCP keepalives or TCP_USER_TIMEOUT on its sockets";
const NEWER: &str = "a key of PgBouncer after 1.24";

/// The keys of `[pgbouncer]`: PgBouncer 1.24's 93 (`bouncer_params` in src/main.c), then the
/// ones added since.
#[rustfmt::skip]
const KEYS: &[(&str, Ty, How)] = &[
    ("admin_users", Ty::Str, How::Map),
    ("application_name_add_host", Ty::Int, How::Warn("pgcorral does not add the client's address to application_name")),
    ("auth_dbname", Ty::Str, How::Map),
    ("auth_file", Ty::Str, How::Map),
    ("auth_hba_file", Ty::Str, How::Map),
    ("auth_ident_file", Ty::Str, How::Map),
    ("auth_query", Ty::Str, How::Map),
    ("auth_type", Ty::Lookup(AUTH_TYPES), How::Map),
    ("auth_user", Ty::Str, How::Map),
    ("autodb_idle_timeout", Ty::Time, How::Note("pgcorral keeps the pools of databases reached through \"*\" until a reload")),
    ("cancel_wait_timeout", Ty::Time, How::Map),
    ("client_idle_timeout", Ty::Time, How::Map),
    ("client_login_timeout", Ty::Time, How::Map),
    ("client_tls_ca_file", Ty::Str, How::Map),
    ("client_tls_cert_file", Ty::Str, How::Map),
    ("client_tls_ciphers", Ty::Str, How::Map),
    ("client_tls_dheparams", Ty::Str, How::Note("rustls has no DHE key exchange")),
    ("client_tls_ecdhcurve", Ty::Str, How::Note("rustls chooses among X25519, P-256 and P-384")),
    ("client_tls_key_file", Ty::Str, How::Map),
    ("client_tls_protocols", Ty::Str, How::Map),
    ("client_tls_sslmode", Ty::Lookup(SSLMODES), How::Map),
    ("conffile", Ty::Str, How::Note("pgcorral reads again the file it was started with")),
    ("default_pool_size", Ty::Int, How::Map),
    ("disable_pqexec", Ty::Int, How::Warn("pgcorral accepts simple-protocol queries")),
    ("dns_max_ttl", Ty::Time, How::Note("pgcorral resolves host names at each connection, with no cache")),
    ("dns_nxdomain_ttl", Ty::Time, How::Note("pgcorral resolves host names at each connection, with no cache")),
    ("dns_zone_check_period", Ty::Time, How::Note("pgcorral resolves host names at each connection, with no cache")),
    ("idle_transaction_timeout", Ty::Time, How::Map),
    ("ignore_startup_parameters", Ty::Str, How::Map),
    ("job_name", Ty::Str, How::Note("a Windows service name")),
    ("listen_addr", Ty::Str, How::Map),
    ("listen_backlog", Ty::Int, How::Note("pgcorral uses its own accept backlog")),
    ("listen_port", Ty::Int, How::Map),
    ("log_connections", Ty::Int, How::Map),
    ("log_disconnections", Ty::Int, How::Map),
    ("log_pooler_errors", Ty::Int, How::Map),
    ("log_stats", Ty::Int, How::Map),
    ("logfile", Ty::Str, How::Map),
    ("max_client_conn", Ty::Int, How::Map),
    ("max_db_client_connections", Ty::Int, How::Map),
    ("max_db_connections", Ty::Int, How::Map),
    ("max_packet_size", Ty::Int, How::Map),
    ("max_prepared_statements", Ty::Int, How::Map),
    ("max_user_client_connections", Ty::Int, How::Map),
    ("max_user_connections", Ty::Int, How::Map),
    ("min_pool_size", Ty::Int, How::Map),
    ("peer_id", Ty::Int, How::Map),
    ("pidfile", Ty::Str, How::Map),
    ("pkt_buf", Ty::Int, How::Note("pgcorral sizes its buffers itself")),
    ("pool_mode", Ty::Lookup(POOL_MODES), How::Map),
    ("query_timeout", Ty::Time, How::Map),
    ("query_wait_timeout", Ty::Time, How::Map),
    ("reserve_pool_size", Ty::Int, How::Map),
    ("reserve_pool_timeout", Ty::Time, How::Map),
    ("resolv_conf", Ty::Str, How::Warn("pgcorral resolves host names with the system's resolver")),
    ("sbuf_loopcnt", Ty::Int, How::Note("pgcorral's workers share their time in their own way")),
    ("server_check_delay", Ty::Time, How::Map),
    ("server_check_query", Ty::Str, How::Map),
    ("server_connect_timeout", Ty::Time, How::Map),
    ("server_fast_close", Ty::Int, How::Map),
    ("server_idle_timeout", Ty::Time, How::Map),
    ("server_lifetime", Ty::Time, How::Map),
    ("server_login_retry", Ty::Time, How::Map),
    ("server_reset_query", Ty::Str, How::Map),
    ("server_reset_query_always", Ty::Int, How::Warn("pgcorral runs server_reset_query in session mode only")),
    ("server_round_robin", Ty::Int, How::Warn("pgcorral's pools choose the idle server connection themselves")),
    ("server_tls_ca_file", Ty::Str, How::Map),
    ("server_tls_cert_file", Ty::Str, How::Map),
    ("server_tls_ciphers", Ty::Str, How::Map),
    ("server_tls_key_file", Ty::Str, How::Map),
    ("server_tls_protocols", Ty::Str, How::Map),
    ("server_tls_sslmode", Ty::Lookup(SSLMODES), How::Map),
    ("service_name", Ty::Str, How::Note("a Windows service name")),
    ("so_reuseport", Ty::Int, How::Map),
    ("stats_period", Ty::Int, How::Map),
    ("stats_users", Ty::Str, How::Map),
    ("suspend_timeout", Ty::Time, How::Note("pgcorral has no online restart (-R) yet")),
    ("syslog", Ty::Int, How::Map),
    ("syslog_facility", Ty::Str, How::Map),
    ("syslog_ident", Ty::Str, How::Map),
    ("tcp_defer_accept", Ty::Int, How::Note("pgcorral accepts connections at once")),
    ("tcp_keepalive", Ty::Int, How::Warn(KEEPALIVE)),
    ("tcp_keepcnt", Ty::Int, How::Warn(KEEPALIVE)),
    ("tcp_keepidle", Ty::Int, How::Warn(KEEPALIVE)),
    ("tcp_keepintvl", Ty::Int, How::Warn(KEEPALIVE)),
    ("tcp_socket_buffer", Ty::Int, How::Note("pgcorral leaves socket buffers to the kernel")),
    ("tcp_user_timeout", Ty::Int, How::Warn(KEEPALIVE)),
    ("track_extra_parameters", Ty::Str, How::Note("pgcorral tracks every setting of a client's session")),
    ("unix_socket_dir", Ty::Str, How::Map),
    ("unix_socket_group", Ty::Str, How::Warn("pgcorral does not change the socket's group")),
    ("unix_socket_mode", Ty::Int, How::Map),
    ("user", Ty::Str, How::Later("pgcorral does not change its OS user (issue 37 item 3)")),
    ("verbose", Ty::Int, How::Map),
    // After 1.24.
    ("auth_ldap_options", Ty::Str, How::Warn(NEWER)),
    ("client_tls13_ciphers", Ty::Str, How::Map),
    ("login_notify_message", Ty::Str, How::Map),
    ("pool_idle_timeout", Ty::Time, How::Map),
    ("query_wait_notify", Ty::Int, How::Map),
    ("scram_iterations", Ty::Int, How::Warn(NEWER)),
    ("server_tls13_ciphers", Ty::Str, How::Map),
    ("transaction_timeout", Ty::Time, How::Map),
    // pgcorral's own (PgBouncer refuses it): how long a looked-up password is reused.
    ("auth_query_cache_lifetime", Ty::Time, How::Map),
];

/// Is `key` a `[pgbouncer]` key? (PgBouncer refuses the whole file otherwise.)
pub(super) fn known(key: &str) -> bool {
    lookup(key).is_some()
}

/// How `key`'s value is read and what pgcorral does with it.
pub(super) fn lookup(key: &str) -> Option<(Ty, How)> {
    KEYS.iter()
        .find(|k| k.0 == key)
        .map(|&(_, ty, how)| (ty, how))
}

/// A parsed value.
pub(super) enum Val {
    Int(i64),
    Ms(u64),
    Str(String),
}

/// `v` read as a `ty`; why not otherwise.
pub(super) fn parse(ty: Ty, v: &str) -> Result<Val, String> {
    match ty {
        Ty::Int => strtol(v).map(Val::Int).ok_or_else(|| {
            "not an integer (C's strtol: decimal, 0x hex or 0 octal; flags are 0 or 1)".into()
        }),
        Ty::Time => seconds_ms(v)
            .map(Val::Ms)
            .ok_or_else(|| "not a number of seconds (e.g. 30 or 0.5; no unit)".into()),
        Ty::Str => Ok(Val::Str(v.into())),
        Ty::Lookup(names) => names
            .iter()
            .find(|n| n.eq_ignore_ascii_case(v))
            .map(|n| Val::Str(n.to_string()))
            .ok_or_else(|| format!("one of {}", names.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::KEYS;
    use crate::config::from_pgbouncer_str;

    fn read(text: &str) -> Vec<crate::config::Warning> {
        from_pgbouncer_str("pgbouncer.ini", text)
            .unwrap_or_else(|e| panic!("{text}\n{e}"))
            .1
    }

    #[test]
    fn every_key_of_pgbouncer_1_24_is_accepted() {
        // Each key with a value of its type: none is unknown, none is refused.
        let ints = [
            "application_name_add_host",
            "default_pool_size",
            "disable_pqexec",
            "listen_backlog",
            "listen_port",
            "log_connections",
            "log_disconnections",
            "log_pooler_errors",
            "log_stats",
            "max_client_conn",
            "max_db_connections",
            "max_db_client_connections",
            "max_prepared_statements",
            "max_user_connections",
            "max_user_client_connections",
            "min_pool_size",
            "peer_id",
            "pkt_buf",
            "reserve_pool_size",
            "sbuf_loopcnt",
            "server_fast_close",
            "server_reset_query_always",
            "server_round_robin",
            "so_reuseport",
            "stats_period",
            "syslog",
            "tcp_defer_accept",
            "tcp_keepalive",
            "tcp_keepcnt",
            "tcp_keepidle",
            "tcp_keepintvl",
            "tcp_socket_buffer",
            "tcp_user_timeout",
            "unix_socket_mode",
            "verbose",
        ];
        read("[pgbouncer]\nauth_type = trust\nmax_packet_size = 2147483647\n");
        let times = [
            "autodb_idle_timeout",
            "cancel_wait_timeout",
            "client_idle_timeout",
            "client_login_timeout",
            "dns_max_ttl",
            "dns_nxdomain_ttl",
            "dns_zone_check_period",
            "idle_transaction_timeout",
            "query_timeout",
            "query_wait_timeout",
            "reserve_pool_timeout",
            "server_check_delay",
            "server_connect_timeout",
            "server_idle_timeout",
            "server_lifetime",
            "server_login_retry",
            "suspend_timeout",
        ];
        let strs = [
            "admin_users",
            "auth_dbname",
            "auth_file",
            "auth_hba_file",
            "auth_ident_file",
            "auth_query",
            "auth_user",
            "client_tls_ca_file",
            "client_tls_cert_file",
            "client_tls_ciphers",
            "client_tls_dheparams",
            "client_tls_ecdhcurve",
            "client_tls_key_file",
            "client_tls_protocols",
            "conffile",
            "ignore_startup_parameters",
            "job_name",
            "listen_addr",
            "logfile",
            "pidfile",
            "resolv_conf",
            "server_check_query",
            "server_reset_query",
            "server_tls_ca_file",
            "server_tls_cert_file",
            "server_tls_ciphers",
            "server_tls_key_file",
            "server_tls_protocols",
            "service_name",
            "stats_users",
            "syslog_facility",
            "syslog_ident",
            "track_extra_parameters",
            "unix_socket_dir",
            "unix_socket_group",
            "user",
        ];
        let lookups = [
            ("auth_type", "trust"),
            ("client_tls_sslmode", "disable"),
            ("pool_mode", "session"),
            ("server_tls_sslmode", "prefer"),
        ];
        // With max_packet_size above: the 93 of src/main.c's bouncer_params.
        assert_eq!(
            ints.len() + times.len() + strs.len() + lookups.len() + 1,
            93
        );
        for (key, _, _) in KEYS.iter().take(93) {
            assert!(
                ints.contains(key)
                    || times.contains(key)
                    || strs.contains(key)
                    || lookups.iter().any(|l| l.0 == *key)
                    || *key == "max_packet_size",
                "{key}"
            );
        }
        for key in ints.iter().chain(&times) {
            let w = read(&format!("[pgbouncer]\nauth_type = trust\n{key} = 1\n"));
            assert!(w.iter().all(|w| !w.message.contains("unknown")), "{key}");
        }
        for key in strs {
            let v = match key {
                "listen_addr" => "127.0.0.1",
                "unix_socket_dir" => "/tmp",
                "client_tls_protocols" | "server_tls_protocols" => "secure",
                k if k.ends_with("_file") && k.contains("tls") => "",
                "syslog_facility" => "local0",
                _ => "default",
            };
            read(&format!("[pgbouncer]\nauth_type = trust\n{key} = {v}\n"));
        }
        for (key, v) in lookups {
            read(&format!("[pgbouncer]\nauth_type = trust\n{key} = {v}\n"));
        }
    }
}
