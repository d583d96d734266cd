//! `[general]` settings by name: their values as SHOW CONFIG and SET read them.

use super::General;

/// The longest time a setting holds, in milliseconds: TOML's largest integer (more is for ever
/// all the same). A pgbouncer.ini's larger values are cut to it.
pub const MAX_MS: u64 = i64::MAX as u64;

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
}
