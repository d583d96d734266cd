//! The console's SHOW commands, with PgBouncer's column names in PgBouncer's order (1.18), so
//! that scripts and exporters written for PgBouncer read them unchanged.

use std::collections::BTreeMap;

use super::show_conns::{connections, sockets};
use super::show_shards;
use super::show_stats::{latency, stats, stats_part, totals};
use super::show_tenants;
use crate::cluster::topology;
use crate::config::{settings, Config, Database, General, LoadBalanceHosts, PoolMode};
use crate::conns::Kind;
use crate::rows::{Cell, Table, Ty};
use crate::server::hosts;
use crate::services::Services;

/// The console's own database, as PgBouncer lists it.
use super::CONSOLE_DB;

/// Every SHOW pgcorral answers, for SHOW HELP and errors.
pub const TOPICS: &str =
    "HELP|CONFIG|DATABASES|POOLS|CLIENTS|SERVERS|USERS|PEERS|PEER_POOLS|SOCKETS|ACTIVE_SOCKETS|LISTS|STATE|MEM|DNS_HOSTS|DNS_ZONES|VERSION|STATS|STATS_TOTALS|STATS_AVERAGES|TOTALS|LATENCY|SHARDS|TENANTS|CACHE";

/// The answer to `SHOW what`, or why there is none.
pub fn table(services: &Services, what: &str) -> Result<Table, String> {
    let config = services.config.load();
    Ok(match what {
        "VERSION" => version(),
        "CONFIG" => show_config(&config.general)?,
        "DATABASES" => databases(services, &config),
        "POOLS" => pools(services),
        "USERS" => users(services, &config),
        "LISTS" => lists(services, &config),
        "STATE" => state(services),
        "STATS" => stats(services),
        "STATS_TOTALS" => stats_part(services, false),
        "STATS_AVERAGES" => stats_part(services, true),
        "TOTALS" => totals(services),
        "LATENCY" => latency(services),
        "CLIENTS" => connections(services, Kind::Client),
        "SERVERS" => connections(services, Kind::Server),
        "SOCKETS" => sockets(services, false),
        "ACTIVE_SOCKETS" => sockets(services, true),
        "PEERS" | "PEER_POOLS" | "MEM" | "DNS_HOSTS" | "DNS_ZONES" => none_kept(what),
        "SHARDS" => show_shards::shards(services, &config),
        "TENANTS" => show_tenants::tenants(services),
        "CACHE" => show_cache(services),
        other => match fake_param(other) {
            Some((name, value)) => {
                let mut t = Table::text(&[name]);
                t.row(vec![value.into()]);
                t
            }
            None => return Err(format!("unknown SHOW topic '{what}': use SHOW {TOPICS}")),
        },
    })
}

/// Session settings some drivers read or set on every connection, console included: SHOW
/// answers them (with what the console announced at login) and SET ignores them, as
/// PgBouncer's console does.
const FAKE_PARAMS: [(&str, &str); 5] = [
    ("client_encoding", "UTF8"),
    ("default_transaction_isolation", "read committed"),
    ("standard_conforming_strings", "on"),
    ("datestyle", "ISO"),
    ("timezone", "UTC"),
];

/// The name and value of a setting of [`FAKE_PARAMS`], by name in any case.
pub fn fake_param(name: &str) -> Option<(&'static str, &'static str)> {
    FAKE_PARAMS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .copied()
}

fn mode_name(m: PoolMode) -> &'static str {
    match m {
        PoolMode::Session => "session",
        PoolMode::Transaction => "transaction",
        PoolMode::Statement => "statement",
    }
}

fn version() -> Table {
    let mut t = Table::text(&["version"]);
    // Tools that read PgBouncer's version to pick their queries find the one matched here.
    t.row(vec![super::VERSION.into()]);
    t
}

/// `[general]` settings as key, value, default, changeable (by RELOAD or SET). Settings that
/// cannot be written as TOML are a bug: logged, and the console told.
fn show_config(general: &General) -> Result<Table, String> {
    let flat = |g: &General| -> Result<Vec<(String, String)>, String> {
        let table = settings::as_table(g).inspect_err(|e| tracing::error!("SHOW CONFIG: {e}"))?;
        Ok(table
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    toml::Value::String(s) => s,
                    toml::Value::Array(a) => a
                        .iter()
                        .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                        .collect::<Vec<_>>()
                        .join(","),
                    other => other.to_string(),
                };
                // Secrets (a connection string may hold a password) are never shown.
                let v = match settings::SECRET.contains(&k.as_str()) && !v.is_empty() {
                    true => "(hidden)".to_string(),
                    false => v,
                };
                (k, v)
            })
            .collect())
    };
    let mut t = Table::text(&["key", "value", "default", "changeable"]);
    let defaults = flat(&General::default())?;
    for (k, v) in flat(general)? {
        let d = defaults
            .iter()
            .find(|(dk, _)| *dk == k)
            .map(|(_, dv)| dv.clone())
            .unwrap_or_default();
        let changeable = match settings::change(&k) {
            settings::Change::Live => "yes",
            settings::Change::Restart => "no",
        };
        t.row(vec![k.into(), v.into(), d.into(), changeable.into()]);
    }
    Ok(t)
}

fn databases(services: &Services, config: &Config) -> Table {
    let mut t = Table::new(&[
        ("name", Ty::Text),
        ("host", Ty::Text),
        ("port", Ty::Int),
        ("database", Ty::Text),
        ("force_user", Ty::Text),
        ("pool_size", Ty::Int),
        ("min_pool_size", Ty::Int),
        ("reserve_pool", Ty::Int),
        ("pool_mode", Ty::Text),
        ("max_connections", Ty::Int),
        ("current_connections", Ty::Int),
        ("paused", Ty::Int),
        ("disabled", Ty::Int),
        // PgBouncer 1.24's (before paused there): after 1.18's columns here.
        ("max_client_connections", Ty::Int),
        ("current_client_connections", Ty::Int),
        // Later PgBouncer's (1.18's reserve_pool renamed; server_lifetime and
        // load_balance_hosts after it): last.
        ("reserve_pool_size", Ty::Int),
        ("server_lifetime", Ty::Int),
        ("load_balance_hosts", Ty::Text),
    ]);
    let pools = services.every_pool();
    let g = &config.general;
    let lifetime_secs = g.server_lifetime / 1000;
    let mut listed: BTreeMap<&str, &Database> = (config.databases.iter())
        .filter(|(name, _)| name.as_str() != "*")
        .map(|(name, db)| (name.as_str(), db))
        .collect();
    if let Some(fallback) = config.databases.get("*") {
        // As PgBouncer: each database made from the `*` fallback for a client that named it
        // (while its pools last), not `*` itself.
        for p in &pools {
            listed.entry(p.name().0).or_insert(fallback);
        }
    }
    // By name, the console's among them, as PgBouncer sorts its list.
    let mut rows: Vec<(&str, Vec<Cell>)> = Vec::new();
    for (name, db) in listed {
        let current: usize = pools
            .iter()
            .filter(|p| p.name().0 == name)
            .map(|p| p.snapshot().open)
            .sum();
        // With several servers: the first listed (PgBouncer has one host per database).
        let first = db.server_list().swap_remove(0);
        rows.push((
            name,
            vec![
                name.into(),
                first.host.into(),
                first.port.into(),
                db.dbname.clone().unwrap_or_else(|| name.to_string()).into(),
                db.user.clone().map_or(Cell::Null, Cell::from),
                db.pool_size.unwrap_or(g.default_pool_size).into(),
                db.min_pool_size.unwrap_or(g.min_pool_size).into(),
                db.reserve_pool_size.unwrap_or(g.reserve_pool_size).into(),
                db.pool_mode.map_or(Cell::Null, |m| mode_name(m).into()),
                db.max_db_connections.unwrap_or(g.max_db_connections).into(),
                current.into(),
                services.control.is_paused(name).into(),
                services.control.is_disabled(name).into(),
                db.max_db_client_connections
                    .unwrap_or(g.max_db_client_connections)
                    .into(),
                services.clients_of_database(name).into(),
                db.reserve_pool_size.unwrap_or(g.reserve_pool_size).into(),
                (db.server_lifetime.unwrap_or(g.server_lifetime) / 1000).into(),
                load_balance_hosts(db),
            ],
        ));
    }
    rows.push((
        CONSOLE_DB,
        vec![
            CONSOLE_DB.into(),
            Cell::Null,
            g.listen_port.into(),
            CONSOLE_DB.into(),
            CONSOLE_DB.into(),
            2u8.into(),
            0u8.into(),
            0u8.into(),
            "statement".into(),
            0u8.into(),
            0u8.into(),
            0u8.into(),
            0u8.into(),
            g.max_db_client_connections.into(),
            services.clients_of_database(CONSOLE_DB).into(),
            0u8.into(),
            lifetime_secs.into(),
            Cell::Null,
        ],
    ));
    rows.sort_by(|a, b| a.0.cmp(b.0));
    for (_, row) in rows {
        t.row(row);
    }
    t
}

fn pools(services: &Services) -> Table {
    let mut t = Table::new(&[
        ("database", Ty::Text),
        ("user", Ty::Text),
        ("cl_active", Ty::Int),
        ("cl_waiting", Ty::Int),
        ("cl_active_cancel_req", Ty::Int),
        ("cl_waiting_cancel_req", Ty::Int),
        ("sv_active", Ty::Int),
        ("sv_active_cancel", Ty::Int),
        ("sv_being_canceled", Ty::Int),
        ("sv_idle", Ty::Int),
        ("sv_used", Ty::Int),
        ("sv_tested", Ty::Int),
        ("sv_login", Ty::Int),
        ("maxwait", Ty::Int),
        ("maxwait_us", Ty::Int),
        ("pool_mode", Ty::Text),
        // pgcorral's own: which server of the database the pool connects to, and how routing
        // sees it.
        ("server", Ty::Text),
        ("role", Ty::Text),
        ("status", Ty::Text),
        ("lag_bytes", Ty::Int),
        ("lag_ms", Ty::Int),
        ("shard", Ty::Int),
        // Later PgBouncer's: NULL unless the pool's database has a host list.
        ("load_balance_hosts", Ty::Text),
    ]);
    let config = services.config.load();
    let mut pools = services.every_pool();
    pools.sort_by(|a, b| a.name().cmp(&b.name()));
    for p in pools {
        let s = p.snapshot();
        let (db, user) = p.name();
        let node = p.node();
        let state = node.map(|n| n.state());
        let text = |v: Option<String>| v.map_or(Cell::Null, Cell::from);
        t.row(vec![
            db.into(),
            user.into(),
            s.clients.saturating_sub(s.waiting).into(),
            s.waiting.into(),
            0u8.into(),
            0u8.into(),
            s.open.saturating_sub(s.idle).into(),
            0u8.into(),
            0u8.into(),
            s.idle.into(),
            0u8.into(),
            0u8.into(),
            0u8.into(),
            s.max_wait.as_secs().into(),
            s.max_wait.subsec_micros().into(),
            mode_name(p.settings().mode).into(),
            text(node.map(|n| n.addr())),
            text(node.map(|n| n.role().name().to_string())),
            text(node.map(|n| topology::status(n).to_string())),
            text(
                state
                    .as_ref()
                    .and_then(|s| s.lag_bytes)
                    .map(|b| b.to_string()),
            ),
            text(
                state
                    .as_ref()
                    .and_then(|s| s.lag_time)
                    .map(|t| t.as_millis().to_string()),
            ),
            node.map_or(0, |n| n.shard).into(),
            config
                .databases
                .get(db)
                .or_else(|| config.databases.get("*"))
                .map_or(Cell::Null, load_balance_hosts),
        ]);
    }
    let consoles = services.consoles.load(std::sync::atomic::Ordering::Relaxed);
    let mut row: Vec<Cell> = vec![CONSOLE_DB.into(), CONSOLE_DB.into(), consoles.into()];
    row.extend((0..12).map(|_| Cell::from(0u8)));
    row.push("statement".into());
    row.extend((0..5).map(|_| Cell::Null));
    row.push(0u8.into());
    row.push(Cell::Null);
    t.row(row);
    t
}

/// A database's `load_balance_hosts`: only a database with a list of hosts has one.
fn load_balance_hosts(db: &Database) -> Cell {
    match (hosts::is_list(&db.host), db.load_balance_hosts) {
        (false, _) => Cell::Null,
        (true, Some(LoadBalanceHosts::Disable)) => "disable".into(),
        (true, _) => "round-robin".into(),
    }
}

fn users(services: &Services, config: &Config) -> Table {
    // PgBouncer 1.18's columns, then 1.24's client caps, then the rest of today's (1.24 has
    // pool_size, reserve_pool_size, max_user_connections and current_connections between
    // them).
    let mut t = Table::new(&[
        ("name", Ty::Text),
        ("pool_mode", Ty::Text),
        ("max_user_client_connections", Ty::Int),
        ("current_client_connections", Ty::Int),
        ("pool_size", Ty::Text),
        ("reserve_pool_size", Ty::Text),
        ("max_user_connections", Ty::Int),
        ("current_connections", Ty::Int),
    ]);
    let pools = services.every_pool();
    let mut names: Vec<String> = config.users.keys().cloned().collect();
    names.extend(pools.iter().map(|p| p.name().1.to_string()));
    names.extend(config.general.admin_users.iter().cloned());
    names.extend(config.general.stats_users.iter().cloned());
    names.push(CONSOLE_DB.to_string());
    names.sort();
    names.dedup();
    for n in names {
        let user = config.users.get(&n);
        let mode = user.and_then(|u| u.pool_mode);
        let cap = config.user_client_cap(&n);
        let current = services.clients_of_user(&n);
        // The user's own setting, as text, empty when it has none (as PgBouncer shows them).
        let pool_size = user
            .and_then(|u| u.pool_size)
            .map_or_else(String::new, |v| v.to_string());
        let servers: usize = pools
            .iter()
            .filter(|p| p.name().1 == n)
            .map(|p| p.snapshot().open)
            .sum();
        t.row(vec![
            n.as_str().into(),
            mode.map_or(Cell::Null, |m| mode_name(m).into()),
            cap.into(),
            current.into(),
            pool_size.into(),
            user.and_then(|u| u.reserve_pool_size)
                .map_or_else(String::new, |v| v.to_string())
                .into(),
            user.and_then(|u| u.max_user_connections)
                .unwrap_or(config.general.max_user_connections)
                .into(),
            servers.into(),
        ]);
    }
    t
}

/// SHOW topics of what pgcorral keeps none of: peers (pgcorral does not peer yet) and their
/// pools, PgBouncer's memory slabs, its DNS cache. PgBouncer's columns, no rows.
fn none_kept(what: &str) -> Table {
    use Ty::{Int, Text};
    Table::new(match what {
        "PEERS" => &[
            ("peer_id", Int),
            ("host", Text),
            ("port", Int),
            ("pool_size", Int),
        ],
        "PEER_POOLS" => &[
            ("database", Text),
            ("cl_active_cancel_req", Int),
            ("cl_waiting_cancel_req", Int),
            ("sv_active_cancel", Int),
            ("sv_login", Int),
        ],
        "MEM" => &[
            ("name", Text),
            ("size", Int),
            ("used", Int),
            ("free", Int),
            ("memtotal", Int),
        ],
        "DNS_HOSTS" => &[("hostname", Text), ("ttl", Int), ("addrs", Text)],
        _ => &[("zonename", Text), ("serial", Int), ("count", Int)],
    })
}

fn lists(services: &Services, config: &Config) -> Table {
    let mut t = Table::new(&[("list", Ty::Text), ("items", Ty::Int)]);
    let pools = services.every_pool();
    let used_servers: usize = pools.iter().map(|p| p.snapshot().open).sum();
    let users = users(services, config).len();
    let clients = services.clients.load(std::sync::atomic::Ordering::Relaxed);
    // pgcorral keeps no free lists of client or server objects, and no DNS cache: those
    // entries are 0, as PgBouncer shows them when it has none.
    for (name, n) in [
        ("databases", config.databases.len() + 1),
        ("users", users),
        ("peers", 0),
        ("pools", pools.len() + 1),
        ("peer_pools", 0),
        ("free_clients", 0),
        ("used_clients", clients),
        ("login_clients", services.logins.in_use()),
        ("free_servers", 0),
        ("used_servers", used_servers),
        ("dns_names", 0),
        ("dns_zones", 0),
        ("dns_queries", 0),
        ("dns_pending", 0),
    ] {
        t.row(vec![name.into(), n.into()]);
    }
    t
}

/// The result cache: a first line of totals (database and table `*`), then one per table it
/// holds answers of or has dropped answers of.
fn show_cache(services: &Services) -> Table {
    let mut t = Table::new(&[
        ("database", Ty::Text),
        ("table", Ty::Text),
        ("entries", Ty::Int),
        ("bytes", Ty::Int),
        ("hits", Ty::Int),
        ("misses", Ty::Int),
        ("invalidations", Ty::Int),
    ]);
    let s = services.cache.show();
    let invalidations: u64 = s.tables.iter().map(|t| t.invalidations).sum();
    t.row(vec![
        "*".into(),
        "*".into(),
        s.entries.into(),
        s.bytes.into(),
        s.counts.hits.into(),
        s.counts.misses.into(),
        invalidations.into(),
    ]);
    for row in s.tables {
        t.row(vec![
            row.database.into(),
            row.table.into(),
            row.entries.into(),
            0usize.into(),
            0u64.into(),
            0u64.into(),
            row.invalidations.into(),
        ]);
    }
    t
}

fn state(services: &Services) -> Table {
    let mut t = Table::text(&["key", "value"]);
    let paused = services.control.all_paused();
    let yes = |b: bool| if b { "yes" } else { "no" };
    for (k, v) in [
        ("active", yes(!paused)),
        ("paused", yes(paused)),
        ("suspended", yes(services.control.is_suspended())),
    ] {
        t.row(vec![k.into(), v.into()]);
    }
    t
}
