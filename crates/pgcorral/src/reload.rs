//! Live reload: SIGHUP and the console's RELOAD read the config file again, and SET changes one
//! `[general]` setting; a configuration that fails validation is refused and the running one
//! stays. Pools take their new settings in place (servers are replaced where what they connect
//! to changed), clients stay connected, and each client picks up the new timeouts at its next
//! transaction.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::config::settings::{self, Change};
use crate::config::{self, Config};
use crate::hba;
use crate::logsafe::Esc;
use crate::services::Services;
use crate::tls;

/// What a reload did, for the log and the console.
#[derive(Debug, Default)]
pub struct Applied {
    /// Settings that changed in the file but need a restart (their running value is kept).
    pub kept: Vec<String>,
    /// Pools updated in place, and pools retired (their database or user is gone, or their
    /// shared caps changed).
    pub updated: usize,
    pub retired: usize,
    /// Why the TLS settings taken by a SET could not be put in force (the TLS in force stays
    /// until a set of settings that loads).
    pub tls_kept: Option<String>,
    /// Why the hba file could not be used: the rules in force stay, as PostgreSQL keeps its
    /// pg_hba.conf when a reload finds the file invalid.
    pub hba_kept: Option<String>,
}

/// What a change does when its TLS settings do not load.
#[derive(Clone, Copy, PartialEq)]
enum TlsFailure {
    /// The whole change is refused (a reload: the file is read again as a whole).
    Refuse,
    /// The settings are taken and the TLS in force stays (the console's SET, as PgBouncer:
    /// a key and its certificate are set one at a time).
    KeepRunning,
}

/// Reads the config file again and applies it.
pub fn reload(services: &Services) -> Result<Applied, String> {
    let Some(path) = services.config_path.get() else {
        return Err("pgcorral was started without --config: there is no file to reload".into());
    };
    let (new, warnings) = config::load_file_warnings(path).map_err(|e| e.to_string())?;
    // As at start: keys not honoured, auth_file's broken line (by file and line, never its
    // text).
    for w in &warnings {
        tracing::warn!(key = %Esc(&w.key), "{}", Esc(w));
    }
    let applied = apply(services, new, TlsFailure::Refuse)?;
    tracing::info!(
        path = %path.display(),
        updated = applied.updated,
        retired = applied.retired,
        kept = ?applied.kept,
        "configuration reloaded"
    );
    Ok(applied)
}

/// SET key = value: one `[general]` setting changed in the running configuration.
pub fn set(services: &Services, key: &str, value: &str) -> Result<Applied, String> {
    if settings::change(key) == Change::Restart {
        return Err(needs_restart(key));
    }
    let current = services.config.load_full();
    if started_from_pgbouncer_ini(services) {
        // PgBouncer's names, units and values, as its own console takes them.
        let (general, warnings) = config::set_pgbouncer_key(&current.general, key, value)?;
        for w in &warnings {
            tracing::warn!(key, warning = %Esc(w), "SET of a key pgcorral does not honour");
        }
        // A key of PgBouncer's that sets one read only at start (verbose: log_level).
        if !settings::keep_running(&current.general, &mut general.clone()).is_empty() {
            return Err(needs_restart(key));
        }
        let new = Config {
            general,
            ..(*current).clone()
        };
        config::validate(&new).map_err(|e| e.to_string())?;
        let applied = apply(services, new, TlsFailure::KeepRunning)?;
        tracing::info!(key, value = %Esc(value), "setting changed from the admin console");
        return Ok(applied);
    }
    let mut general = settings::as_table(&current.general).map_err(|e| {
        tracing::error!("SET: {e}");
        format!("cannot read the running configuration: {e}")
    })?;
    let Some(old) = general.get(key) else {
        return Err(format!("unknown setting: {key}"));
    };
    let parsed = match old {
        toml::Value::Integer(_) => value
            .parse::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| format!("{key}: {value:?} is not an integer"))?,
        toml::Value::Boolean(_) => match value.to_ascii_lowercase().as_str() {
            "1" | "on" | "true" | "yes" => toml::Value::Boolean(true),
            "0" | "off" | "false" | "no" => toml::Value::Boolean(false),
            _ => return Err(format!("{key}: {value:?} is not a boolean")),
        },
        toml::Value::Array(_) => toml::Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(|v| toml::Value::String(v.to_string()))
                .collect(),
        ),
        _ => toml::Value::String(value.to_string()),
    };
    general.insert(key.to_string(), parsed);
    let general: config::General = toml::Value::Table(general)
        .try_into()
        .map_err(|e| format!("{key}: {e}"))?;
    let new = Config {
        general,
        ..(*current).clone()
    };
    config::validate(&new).map_err(|e| e.to_string())?;
    let applied = apply(services, new, TlsFailure::KeepRunning)?;
    tracing::info!(key, value, "setting changed from the admin console");
    Ok(applied)
}

/// SET's refusal of a setting read only at start: PgBouncer's words for a SET it does not
/// take first, then why.
fn needs_restart(key: &str) -> String {
    format!("SET failed: {key} cannot be changed without a restart")
}

/// The running configuration was read from a pgbouncer.ini (so the console's SET speaks
/// PgBouncer's keys).
fn started_from_pgbouncer_ini(services: &Services) -> bool {
    services.config_path.get().is_some_and(|path| {
        std::fs::read_to_string(path).is_ok_and(|text| config::is_pgbouncer(path, &text))
    })
}

/// Swaps in a validated configuration (restart-only settings keep their running values) and
/// brings the pools in line. Certificate and key files are read again (they may have been
/// replaced under the same names); if they do not load, `on_tls` says what happens. TLS is
/// never half changed: the TLS in force is replaced only by one that loaded whole.
fn apply(services: &Services, mut new: Config, on_tls: TlsFailure) -> Result<Applied, String> {
    let mut applied = Applied::default();
    let tls = match tls::Tls::load(&new.general) {
        Ok(tls) => Some(tls),
        Err(e) if on_tls == TlsFailure::Refuse => {
            // PgBouncer's words first, for the scripts that match them.
            tracing::error!(
                "TLS setup failed: {}; reload refused, the running configuration and certificates stay",
                Esc(&e)
            );
            return Err(format!("TLS: {e}"));
        }
        Err(e) => {
            tracing::error!(
                "TLS setup failed: {}; TLS settings could not be applied, still using the old TLS configuration",
                Esc(&e)
            );
            applied.tls_kept = Some(e);
            None
        }
    };
    let old = services.config.load_full();
    applied.kept = settings::keep_running(&old.general, &mut new.general)
        .into_iter()
        .map(String::from)
        .collect();
    for k in &applied.kept {
        tracing::warn!(setting = %k, "changed in the configuration, but needs a restart; the running value is kept");
    }
    let server_tls_changed = tls
        .as_ref()
        .is_some_and(|t| t.server_settings != services.tls.load().server_settings);
    let rules = match hba::for_config(&new.general) {
        Ok(rules) => Some(rules),
        Err(e) => {
            tracing::error!("{}; the running hba rules are kept", Esc(&e.to_string()));
            applied.hba_kept = Some(e.to_string());
            None
        }
    };
    services.cache.configure(&new.general);
    services.config.store(Arc::new(new));
    if let Some(tls) = tls {
        services.tls.store(Arc::new(tls));
    }
    if let Some(rules) = rules {
        services.hba.store(Arc::new(rules));
    }
    if server_tls_changed {
        // Servers opened under the old TLS settings are replaced, as with RECONNECT.
        for pool in services.every_pool() {
            let in_use = pool.active_servers();
            let closed = pool.reconnect();
            if closed + in_use > 0 {
                let (db, user) = pool.name();
                tracing::info!(
                    "{}/{}: closing because: obsolete connection (server TLS settings changed): {closed} idle closed now, {in_use} in use closed when released",
                    Esc(db),
                    Esc(user)
                );
            }
        }
    }
    (applied.updated, applied.retired) = services.pools.reconfigure(&services.config.load());
    services.pools.open_forced(&services.config.load());
    if let Some(tenants) = services.tenants.get() {
        // Each tenant's configuration is the file's [general] with the tenant's own.
        tenants.regeneral(&services.config.load().general);
    }
    // auth_user, its password or its servers may have changed.
    services.auth_query.close_idle();
    services.config_gen.fetch_add(1, Ordering::Relaxed);
    Ok(applied)
}
