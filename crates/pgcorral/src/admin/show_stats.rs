//! SHOW STATS, STATS_TOTALS, STATS_AVERAGES and TOTALS (PgBouncer's columns), and pgcorral's
//! SHOW LATENCY: statistics per database from [`crate::pool::stats`].

use std::collections::BTreeMap;

use super::CONSOLE_DB;
use crate::pool::stats::{quantile, Averages, Totals};
use crate::rows::{Cell, Table, Ty};
use crate::services::Services;

/// Statistics per database (its pools summed), the console's as database `pgbouncer`:
/// totals since start, averages of the last stats_period.
fn per_database(services: &Services) -> BTreeMap<String, (Totals, Averages)> {
    let mut by_db: BTreeMap<String, (Totals, Averages)> = BTreeMap::new();
    by_db.insert(
        CONSOLE_DB.to_string(),
        (
            services.console_stats.totals(),
            services.console_stats.averages(),
        ),
    );
    for p in services.every_pool() {
        let e = by_db.entry(p.name().0.to_string()).or_default();
        e.0.add(&p.stats().totals());
        e.1.merge(&p.stats().averages());
    }
    by_db
}

/// PgBouncer 1.18's figures, in its order (bytes: received from clients, sent to them).
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

/// The counts PgBouncer added after 1.18, in its order: server assignments (checkouts), named
/// statements parsed by clients, statements parsed on servers for them, binds of named
/// statements, client logins.
const LATER: [&str; 5] = [
    "server_assignment_count",
    "client_parse_count",
    "server_parse_count",
    "bind_count",
    "client_login_count",
];

fn later_totals(t: &Totals) -> [Cell; 5] {
    [
        t.waits.into(),
        t.client_parses.into(),
        t.server_parses.into(),
        t.binds.into(),
        t.logins.into(),
    ]
}

fn later_averages(a: &Averages) -> [Cell; 5] {
    [
        a.server_assignment_count.into(),
        a.client_parse_count.into(),
        a.server_parse_count.into(),
        a.bind_count.into(),
        a.client_login_count.into(),
    ]
}

/// Integer columns named `names`, after `database`.
fn columns(names: impl IntoIterator<Item = &'static str>) -> Table {
    let mut cols = vec![("database", Ty::Text)];
    cols.extend(names.into_iter().map(|c| (c, Ty::Int)));
    Table::new(&cols)
}

pub fn stats(services: &Services) -> Table {
    let mut t = columns([
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
        // Later PgBouncer's, after 1.18's.
        "total_server_assignment_count",
        "total_client_parse_count",
        "total_server_parse_count",
        "total_bind_count",
        "total_client_login_count",
        "avg_server_assignment_count",
        "avg_client_parse_count",
        "avg_server_parse_count",
        "avg_bind_count",
        "avg_client_login_count",
    ]);
    for (db, (tot, avg)) in per_database(services) {
        let mut row = vec![Cell::from(db)];
        row.extend(totals_cells(&tot));
        row.extend(averages_cells(&avg));
        row.extend(later_totals(&tot));
        row.extend(later_averages(&avg));
        t.row(row);
    }
    t
}

/// SHOW STATS_TOTALS, or SHOW STATS_AVERAGES with `averages`.
pub fn stats_part(services: &Services, averages: bool) -> Table {
    let first = [
        "xact_count",
        "query_count",
        "bytes_received",
        "bytes_sent",
        "xact_time",
        "query_time",
        "wait_time",
    ];
    // PgBouncer names STATS_AVERAGES' later columns but the first with an avg_ prefix.
    let later = if averages {
        [
            "server_assignment_count",
            "avg_client_parse_count",
            "avg_server_parse_count",
            "avg_bind_count",
            "avg_client_login_count",
        ]
    } else {
        LATER
    };
    let mut t = columns(first.into_iter().chain(later));
    for (db, (tot, avg)) in per_database(services) {
        let mut row = vec![Cell::from(db)];
        if averages {
            row.extend(averages_cells(&avg));
            row.extend(later_averages(&avg));
        } else {
            row.extend(totals_cells(&tot));
            row.extend(later_totals(&tot));
        }
        t.row(row);
    }
    t
}

pub fn totals(services: &Services) -> Table {
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
    // Later PgBouncer's rows, as it spells them.
    let later = [
        "server_assignment_count",
        "ps_client_parse_count",
        "ps_server_parse_count",
        "ps_bind_count",
        "client_login_count",
    ];
    let totals = totals_cells(&tot).into_iter().chain(later_totals(&tot));
    for (name, v) in names.iter().chain(&later).zip(totals) {
        t.row(vec![format!("total_{name}").into(), v]);
    }
    let averages = averages_cells(&avg).into_iter().chain(later_averages(&avg));
    for (name, v) in names.iter().chain(&later).zip(averages) {
        t.row(vec![format!("avg_{name}").into(), v]);
    }
    t
}

/// pgcorral's own: percentiles of query time (one round trip to the server) and of the wait for
/// a server, per pool, in microseconds, since start (from histograms with buckets about 19%
/// wide, so each figure is a bucket's upper bound).
pub fn latency(services: &Services) -> Table {
    let mut cols = vec![("database", Ty::Text), ("user", Ty::Text)];
    cols.extend(
        [
            "queries",
            "query_p50_us",
            "query_p95_us",
            "query_p99_us",
            "waits",
            "wait_p50_us",
            "wait_p95_us",
            "wait_p99_us",
        ]
        .map(|c| (c, Ty::Int)),
    );
    let mut t = Table::new(&cols);
    let mut pools = services.every_pool();
    pools.sort_by(|a, b| a.name().cmp(&b.name()));
    for p in pools {
        let (db, user) = p.name();
        let mut row = vec![Cell::from(db), Cell::from(user)];
        for counts in [p.stats().query_hist.counts(), p.stats().wait_hist.counts()] {
            row.push(counts.iter().sum::<u64>().into());
            for q in [0.5, 0.95, 0.99] {
                row.push(quantile(&counts, q).into());
            }
        }
        t.row(row);
    }
    t
}
