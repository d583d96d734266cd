//! `[general]` settings by name: their values as SHOW CONFIG and SET read them, and the one table of how each may change while pgcorral runs (RELOAD, SIGHUP, SET, or only a restart).

use super::General;

/// The longest time a setting holds, in milliseconds: TOML's largest integer (more is for ever
/// all the same). A pgbouncer.ini's larger values are cut to it.
pub const MAX_MS: u64 = i64::MAX as u64;

/// How a `[general]` setting takes a new value while pgcorral runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// RELOAD, SIGHUP and the console's SET put it in force (SHOW CONFIG: changeable `yes`).
    Live,
    /// Read only at start: a reload keeps the running value and says it needs a restart, SET
    /// refuses it (SHOW CONFIG: changeable `no`).
    Restart,
}

/// The table: the settings read only at start, as fields of [`General`] (so a name that is
/// not a setting does not compile); every other setting is [`Change::Live`].
macro_rules! restart_only {
    ($($field:ident),* $(,)?) => {
        /// The settings read only at start, by name.
        pub const RESTART_ONLY: &[&str] = &[$(stringify!($field)),*];

        /// Gives `new` the running value of each restart-only setting that `old` (running)
        /// and `new` (read again) disagree on; returns their names.
        pub fn keep_running(old: &General, new: &mut General) -> Vec<&'static str> {
            let mut kept = Vec::new();
            $(
                if old.$field != new.$field {
                    new.$field = old.$field.clone();
                    kept.push(stringify!($field));
                }
            )*
            kept
        }
    };
}

restart_only!(
    listen_addr,
    listen_port,
    unix_socket_dir,
    unix_socket_mode,
    so_reuseport,
    workers,
    io_uring,
    metrics_addr,
    tenant_registry,
    api_listen,
    api_jwt_secret,
    node_address,
    pidfile,
    logfile,
    log_level,
    log_format,
    syslog,
    syslog_ident,
    syslog_facility,
    peer_id,
);

/// Settings SHOW CONFIG shows as `(hidden)` when they are set.
pub const SECRET: &[&str] = &["tenant_registry", "api_jwt_secret"];

/// How the setting `key` changes (a name that is no setting counts as [`Change::Live`]: SET
/// refuses it as unknown).
pub fn change(key: &str) -> Change {
    if RESTART_ONLY.contains(&key) {
        Change::Restart
    } else {
        Change::Live
    }
}

/// `general` as a TOML table, one entry per setting. An error is a bug (a value TOML cannot
/// hold): callers report it, never take it for an empty table.
pub fn as_table(general: &General) -> Result<toml::Table, String> {
    match toml::Value::try_from(general) {
        Ok(toml::Value::Table(t)) => Ok(t),
        Ok(other) => Err(format!(
            "[general] is not a table in TOML but {}",
            other.type_str()
        )),
        Err(e) => Err(format!("[general] cannot be written as TOML: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting of a pgbouncer.ini is one TOML can hold, even the longest times.
    #[test]
    fn a_pgbouncer_ini_s_settings_are_a_table() {
        let ini = "[databases]\n* = host=127.0.0.1\n[pgbouncer]\nauth_type = trust\nquery_timeout = 1e300\n\
                   query_wait_notify = 9223372036854775807\nserver_lifetime = 99999999999999999\n";
        let (cfg, _) = crate::config::from_pgbouncer_str("pgbouncer.ini", ini).unwrap();
        let t = as_table(&cfg.general).unwrap();
        assert_eq!(t["query_timeout"].as_integer(), Some(i64::MAX));
        assert_eq!(t["server_unavailable_wait"].as_integer(), Some(i64::MAX));
        assert_eq!(t["query_wait_notify"].as_integer(), Some(i64::MAX));
    }

    /// Every setting is in the table's domain, and every name of the table is a setting.
    #[test]
    fn the_table_names_settings() {
        let all = as_table(&General::default()).unwrap();
        for k in RESTART_ONLY {
            assert!(all.contains_key(*k), "{k} is not a [general] setting");
            assert_eq!(change(k), Change::Restart);
        }
        assert_eq!(change("default_pool_size"), Change::Live);
    }

    #[test]
    fn a_reload_keeps_the_running_restart_only_values() {
        let old = General::default();
        let mut new = General {
            listen_port: old.listen_port + 1,
            peer_id: 7,
            syslog: !old.syslog,
            default_pool_size: old.default_pool_size + 1,
            ..old.clone()
        };
        let kept = keep_running(&old, &mut new);
        assert_eq!(kept, ["listen_port", "syslog", "peer_id"]);
        assert_eq!(new.listen_port, old.listen_port);
        assert_eq!(new.peer_id, old.peer_id);
        assert_eq!(new.default_pool_size, old.default_pool_size + 1);
    }

    /// docs/configuration.md lists the settings that need a restart between its
    /// `restart-only` markers: the same as the table, in its order.
    #[test]
    fn the_docs_list_the_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
        let text = std::fs::read_to_string(path).unwrap();
        let (_, rest) = text.split_once("<!-- restart-only:begin -->").unwrap();
        let (list, _) = rest.split_once("<!-- restart-only:end -->").unwrap();
        let named: Vec<&str> = list.split('`').skip(1).step_by(2).collect();
        assert_eq!(
            named, RESTART_ONLY,
            "docs/configuration.md's list of settings that need a restart"
        );
    }
}
