//! SHOW STATS, STATS_TOTALS, STATS_AVERAGES and TOTALS (PgBouncer's columns), and pgcorral's
//! SHOW LATENCY: statistics per database from [`crate::pool::stats`].

use std::collections::BTreeMap;

use crate::pool::stats::{quantile, Averages, Totals};
use crate::rows::{Cell, Table, Ty};
use crate::services::Services;

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

pub fn stats(services: &Services) -> Table {
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
pub fn stats_part(services: &Services, averages: bool) -> Table {
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
    for (name, v) in names.iter().zip(totals_cells(&tot)) {
        t.row(vec![format!("total_{name}").into(), v]);
    }
    for (name, v) in names.iter().zip(averages_cells(&avg)) {
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
    let mut pools = services.pools.all();
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
