//! The console's SHOW commands, with PgBouncer's column names in PgBouncer's order (1.18), so
//! that scripts and exporters written for PgBouncer read them unchanged.

use std::collections::BTreeMap;

use super::table::{Cell, Table, Ty};
use crate::config::{Config, General, PoolMode};
use crate::conns::{Kind, State};
use crate::pool::stats::{Averages, Totals};
use crate::services::Services;

/// The console's own database, as PgBouncer lists it.
const CONSOLE_DB: &str = "pgbouncer";

/// Every SHOW pgcorral answers, for SHOW HELP and errors.
pub const TOPICS: &str =
    "HELP|CONFIG|DATABASES|POOLS|CLIENTS|SERVERS|USERS|LISTS|STATE|VERSION|STATS|STATS_TOTALS|STATS_AVERAGES|TOTALS";

/// The answer to `SHOW what`, or why there is none.
pub fn table(services: &Services, what: &str) -> Result<Table, String> {
    let config = services.config.load();
    Ok(match what {
        "VERSION" => version(),
        "CONFIG" => show_config(&config.general),
        "DATABASES" => databases(services, &config),
        "POOLS" => pools(services),
        "USERS" => users(services, &config),
        "LISTS" => lists(services, &config),
        "STATE" => state(),
        "STATS" => stats(services),
        "STATS_TOTALS" => stats_part(services, false),
        "STATS_AVERAGES" => stats_part(services, true),
        "TOTALS" => totals(services),
        "CLIENTS" => connections(services, Kind::Client),
        "SERVERS" => connections(services, Kind::Server),
        _ => return Err(format!("unknown SHOW topic '{what}': use SHOW {TOPICS}")),
    })
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
    t.row(vec![format!(
        "pgcorral {} (PgBouncer 1.18.0 compatible)",
        env!("CARGO_PKG_VERSION")
    )
    .into()]);
    t
}

/// `[general]` settings as key, value, default, changeable (`no` until live reload exists).
fn show_config(general: &General) -> Table {
    let mut t = Table::text(&["key", "value", "default", "changeable"]);
    let flat = |g: &General| -> Vec<(String, String)> {
        match toml::Value::try_from(g) {
            Ok(toml::Value::Table(m)) => m
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
                    (k, v)
                })
                .collect(),
            _ => Vec::new(),
        }
    };
    let defaults = flat(&General::default());
    for (k, v) in flat(general) {
        let d = defaults
            .iter()
            .find(|(dk, _)| *dk == k)
            .map(|(_, dv)| dv.clone())
            .unwrap_or_default();
        t.row(vec![k.into(), v.into(), d.into(), "no".into()]);
    }
    t
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
    ]);
    let pools = services.pools.all();
    let g = &config.general;
    for (name, db) in &config.databases {
        let current: usize = pools
            .iter()
            .filter(|p| p.name().0 == name)
            .map(|p| p.snapshot().open)
            .sum();
        t.row(vec![
            name.as_str().into(),
            db.host.as_str().into(),
            db.port.into(),
            db.dbname.clone().unwrap_or_else(|| name.clone()).into(),
            db.user.clone().map_or(Cell::Null, Cell::from),
            db.pool_size.unwrap_or(g.default_pool_size).into(),
            db.min_pool_size.unwrap_or(g.min_pool_size).into(),
            db.reserve_pool_size.unwrap_or(g.reserve_pool_size).into(),
            db.pool_mode.map_or(Cell::Null, |m| mode_name(m).into()),
            db.max_db_connections.unwrap_or(g.max_db_connections).into(),
            current.into(),
            0u8.into(),
            0u8.into(),
        ]);
    }
    t.row(vec![
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
    ]);
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
    ]);
    let mut pools = services.pools.all();
    pools.sort_by(|a, b| a.name().cmp(&b.name()));
    for p in pools {
        let s = p.snapshot();
        let (db, user) = p.name();
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
        ]);
    }
    let consoles = services.consoles.load(std::sync::atomic::Ordering::Relaxed);
    let mut row: Vec<Cell> = vec![CONSOLE_DB.into(), CONSOLE_DB.into(), consoles.into()];
    row.extend((0..12).map(|_| Cell::from(0u8)));
    row.push("statement".into());
    t.row(row);
    t
}

fn users(services: &Services, config: &Config) -> Table {
    let mut t = Table::text(&["name", "pool_mode"]);
    let mut names: Vec<String> = config.users.keys().cloned().collect();
    names.extend(services.pools.all().iter().map(|p| p.name().1.to_string()));
    names.extend(config.general.admin_users.iter().cloned());
    names.extend(config.general.stats_users.iter().cloned());
    names.push(CONSOLE_DB.to_string());
    names.sort();
    names.dedup();
    for n in names {
        let mode = config.users.get(&n).and_then(|u| u.pool_mode);
        t.row(vec![
            n.into(),
            mode.map_or(Cell::Null, |m| mode_name(m).into()),
        ]);
    }
    t
}

fn lists(services: &Services, config: &Config) -> Table {
    let mut t = Table::new(&[("list", Ty::Text), ("items", Ty::Int)]);
    let pools = services.pools.all();
    let used_servers: usize = pools.iter().map(|p| p.snapshot().open).sum();
    let users = users(services, config).len();
    let clients = services.clients.load(std::sync::atomic::Ordering::Relaxed);
    // pgcorral keeps no free lists of client or server objects, and no DNS cache: those
    // entries are 0, as PgBouncer shows them when it has none.
    for (name, n) in [
        ("databases", config.databases.len() + 1),
        ("users", users),
        ("pools", pools.len() + 1),
        ("free_clients", 0),
        ("used_clients", clients),
        ("login_clients", 0),
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

fn state() -> Table {
    let mut t = Table::text(&["key", "value"]);
    for (k, v) in [("active", "yes"), ("paused", "no"), ("suspended", "no")] {
        t.row(vec![k.into(), v.into()]);
    }
    t
}

/// Statistics per database (its pools summed): totals since start, averages of the last
/// stats_period.
fn per_database(services: &Services) -> BTreeMap<String, (Totals, Averages)> {
    let mut by_db: BTreeMap<String, (Totals, Averages)> = BTreeMap::new();
    for p in services.pools.all() {
        let e = by_db.entry(p.name().0.to_string()).or_default();
        e.0.add(&p.stats().totals());
        e.1.merge(&p.stats().averages());
    }
    by_db
}

fn totals_cells(t: &Totals) -> [Cell; 7] {
    [
        t.xact_count.into(),
        t.query_count.into(),
        t.bytes_received.into(),
        t.bytes_sent.into(),
        t.xact_time.into(),
        t.query_time.into(),
        t.wait_time.into(),
    ]
}

fn averages_cells(a: &Averages) -> [Cell; 7] {
    [
        a.xact_count.into(),
        a.query_count.into(),
        a.bytes_received.into(),
        a.bytes_sent.into(),
        a.xact_time.into(),
        a.query_time.into(),
        a.wait_time.into(),
    ]
}

fn stats(services: &Services) -> Table {
    let mut cols = vec![("database", Ty::Text)];
    cols.extend(
        [
            "total_xact_count",
            "total_query_count",
            "total_received",
            "total_sent",
            "total_xact_time",
            "total_query_time",
            "total_wait_time",
            "avg_xact_count",
            "avg_query_count",
            "avg_recv",
            "avg_sent",
            "avg_xact_time",
            "avg_query_time",
            "avg_wait_time",
        ]
        .map(|c| (c, Ty::Int)),
    );
    let mut t = Table::new(&cols);
    for (db, (tot, avg)) in per_database(services) {
        let mut row = vec![Cell::from(db)];
        row.extend(totals_cells(&tot));
        row.extend(averages_cells(&avg));
        t.row(row);
    }
    t
}

/// SHOW STATS_TOTALS, or SHOW STATS_AVERAGES with `averages`.
fn stats_part(services: &Services, averages: bool) -> Table {
    let mut cols = vec![("database", Ty::Text)];
    cols.extend(
        [
            "xact_count",
            "query_count",
            "bytes_received",
            "bytes_sent",
            "xact_time",
            "query_time",
            "wait_time",
        ]
        .map(|c| (c, Ty::Int)),
    );
    let mut t = Table::new(&cols);
    for (db, (tot, avg)) in per_database(services) {
        let mut row = vec![Cell::from(db)];
        if averages {
            row.extend(averages_cells(&avg));
        } else {
            row.extend(totals_cells(&tot));
        }
        t.row(row);
    }
    t
}

fn totals(services: &Services) -> Table {
    let mut tot = Totals::default();
    let mut avg = Averages::default();
    for (t, a) in per_database(services).values() {
        tot.add(t);
        avg.merge(a);
    }
    let mut t = Table::new(&[("name", Ty::Text), ("value", Ty::Int)]);
    let names = [
        "xact_count",
        "query_count",
        "client_bytes",
        "server_bytes",
        "xact_time",
        "query_time",
        "wait_time",
    ];
    for (name, v) in names.iter().zip(totals_cells(&tot)) {
        t.row(vec![format!("total_{name}").into(), v]);
    }
    for (name, v) in names.iter().zip(averages_cells(&avg)) {
        t.row(vec![format!("avg_{name}").into(), v]);
    }
    t
}

/// SHOW CLIENTS or SHOW SERVERS: one row per connection, PgBouncer's columns. `ptr` is the
/// connection's id (in hex, as PgBouncer shows its pointers) and `link` the id of the
/// connection it is paired with.
fn connections(services: &Services, kind: Kind) -> Table {
    let mut t = Table::new(&[
        ("type", Ty::Text),
        ("user", Ty::Text),
        ("database", Ty::Text),
        ("state", Ty::Text),
        ("addr", Ty::Text),
        ("port", Ty::Int),
        ("local_addr", Ty::Text),
        ("local_port", Ty::Int),
        ("connect_time", Ty::Text),
        ("request_time", Ty::Text),
        ("wait", Ty::Int),
        ("wait_us", Ty::Int),
        ("close_needed", Ty::Int),
        ("ptr", Ty::Text),
        ("link", Ty::Text),
        ("remote_pid", Ty::Int),
        ("tls", Ty::Text),
        ("application_name", Ty::Text),
    ]);
    let now = std::time::SystemTime::now();
    for e in services.pools.lists.all(kind) {
        let state = e.state();
        let waited = if state == State::Waiting {
            now.duration_since(e.request_time()).unwrap_or_default()
        } else {
            std::time::Duration::ZERO
        };
        let link = e.link();
        t.row(vec![
            if kind == Kind::Client { "C" } else { "S" }.into(),
            e.user.as_str().into(),
            e.database.as_str().into(),
            state.name().into(),
            e.addr.ip().to_string().into(),
            e.addr.port().into(),
            e.local.ip().to_string().into(),
            e.local.port().into(),
            timestamp(e.connect_time).into(),
            timestamp(e.request_time()).into(),
            waited.as_secs().into(),
            waited.subsec_micros().into(),
            0u8.into(),
            format!("{:#x}", e.id).into(),
            if link == 0 {
                Cell::Text(String::new())
            } else {
                format!("{link:#x}").into()
            },
            e.remote_pid
                .load(std::sync::atomic::Ordering::Relaxed)
                .into(),
            Cell::Text(String::new()),
            e.application_name.as_str().into(),
        ]);
    }
    t
}

/// `YYYY-MM-DD HH:MM:SS UTC`, as PgBouncer prints times.
fn timestamp(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_utc_dates() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_337_437);
        assert_eq!(super::timestamp(t), "2026-11-22 08:50:37 UTC");
        assert_eq!(
            super::timestamp(std::time::UNIX_EPOCH),
            "1970-01-01 00:00:00 UTC"
        );
    }
}
