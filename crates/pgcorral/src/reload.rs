//! Live reload: SIGHUP and the console's RELOAD read the config file again, and SET changes one
//! `[general]` setting; a configuration that fails validation is refused and the running one
//! stays. Pools take their new settings in place (servers are replaced where what they connect
//! to changed), clients stay connected, and each client picks up the new timeouts at its next
//! transaction.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::config::{self, Config};
use crate::hba;
use crate::logsafe::Esc;
use crate::services::Services;
use crate::tls;

/// `[general]` settings read only at start: a reload keeps their running values.
pub const RESTART_ONLY: &[&str] = &[
    "listen_addr",
    "listen_port",
    "unix_socket_dir",
    "unix_socket_mode",
    "workers",
    "io_uring",
    "metrics_addr",
    "pidfile",
    "logfile",
    "so_reuseport",
    "peer_id",
    "log_format",
    "syslog",
    "syslog_ident",
    "syslog_facility",
];

/// What a reload did, for the log and the console.
#[derive(Debug, Default)]
pub struct Applied {
    /// Settings that changed in the file but need a restart (their running value is kept).
    pub kept: Vec<String>,
    /// Pools updated in place, and pools retired (their database or user is gone, or their
    /// shared caps changed).
    pub updated: usize,
    pub retired: usize,
}

/// Reads the config file again and applies it.
pub fn reload(services: &Services) -> Result<Applied, String> {
    let Some(path) = services.config_path.get() else {
        return Err("pgcorral was started without --config: there is no file to reload".into());
    };
    let new = config::load_file(path).map_err(|e| e.to_string())?;
    let applied = apply(services, new)?;
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
    if RESTART_ONLY.contains(&key) {
        return Err(format!("{key} cannot be changed without a restart"));
    }
    let current = services.config.load_full();
    if started_from_pgbouncer_ini(services) {
        // PgBouncer's names, units and values, as its own console takes them.
        let (general, warnings) = config::set_pgbouncer_key(&current.general, key, value)?;
        for w in &warnings {
            tracing::warn!(key, warning = %Esc(w), "SET of a key pgcorral does not honour");
        }
        let new = Config {
            general,
            ..(*current).clone()
        };
        config::validate(&new).map_err(|e| e.to_string())?;
        let applied = apply(services, new)?;
        tracing::info!(key, value = %Esc(value), "setting changed from the admin console");
        return Ok(applied);
    }
    let mut general = match toml::Value::try_from(&current.general) {
        Ok(toml::Value::Table(t)) => t,
        _ => return Err("cannot read the running configuration".into()),
    };
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
    let applied = apply(services, new)?;
    tracing::info!(key, value, "setting changed from the admin console");
    Ok(applied)
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
/// replaced under the same names); if they do not load, nothing changes.
fn apply(services: &Services, mut new: Config) -> Result<Applied, String> {
    let tls = tls::Tls::load(&new.general).map_err(|e| {
        tracing::error!(error = %e, "reload refused: TLS files do not load; the running certificates stay");
        format!("TLS: {e}")
    })?;
    let old = services.config.load_full();
    let mut applied = Applied::default();
    let (o, n) = (&old.general, &mut new.general);
    macro_rules! keep {
        ($($f:ident),*) => {$(
            if o.$f != n.$f {
                applied.kept.push(stringify!($f).to_string());
                n.$f = o.$f.clone();
            }
        )*};
    }
    keep!(
        listen_addr,
        listen_port,
        unix_socket_dir,
        unix_socket_mode,
        workers,
        io_uring,
        metrics_addr,
        pidfile,
        logfile,
        so_reuseport
    );
    for k in &applied.kept {
        tracing::warn!(setting = %k, "changed in the configuration, but needs a restart; the running value is kept");
    }
    let server_tls = |g: &config::General| {
        (
            g.server_tls_sslmode,
            g.server_tls_ca_file.clone(),
            g.server_tls_cert_file.clone(),
            g.server_tls_key_file.clone(),
            g.server_tls_protocols.clone(),
            g.server_tls_ciphers.clone(),
        )
    };
    let server_tls_changed = server_tls(&old.general) != server_tls(&new.general);
    let rules = hba::for_config(&new.general);
    services.config.store(Arc::new(new));
    services.tls.store(Arc::new(tls));
    services.hba.store(Arc::new(rules));
    if server_tls_changed {
        // Servers opened under the old TLS settings are replaced, as with RECONNECT.
        for pool in services.pools.all() {
            pool.reconnect();
        }
    }
    (applied.updated, applied.retired) = services.pools.reconfigure(&services.config.load());
    // auth_user, its password or its servers may have changed.
    services.auth_query.close_idle();
    services.config_gen.fetch_add(1, Ordering::Relaxed);
    Ok(applied)
}
