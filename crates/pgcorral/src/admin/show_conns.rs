//! SHOW CLIENTS, SHOW SERVERS and SHOW SOCKETS: the connection lists of [`crate::conns`] with
//! PgBouncer 1.18's columns, then pgcorral's own (clients: `pinned`, why a client keeps its
//! server; servers: `role`, `health` and `shard`), then the columns PgBouncer added since.

use crate::cluster::topology;
use crate::conns;
use crate::conns::{Kind, State};
use crate::rows::{Cell, Table, Ty};
use crate::services::Services;

/// PgBouncer 1.18's columns of SHOW CLIENTS, SERVERS and SOCKETS.
const BASE: [(&str, Ty); 18] = [
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
];

/// Columns PgBouncer added after 1.18 (it has `replication` after `database`): appended last,
/// so that every earlier column keeps its place.
const LATER: [(&str, Ty); 3] = [
    ("replication", Ty::Text),
    ("prepared_statements", Ty::Int),
    ("id", Ty::Int),
];

/// SHOW SOCKETS' low-level buffer columns (PgBouncer's stream buffer positions). pgcorral's
/// buffers belong to each connection's task and are not shared with the console: 0.
const DEBUG: [&str; 7] = [
    "recv_pos",
    "pkt_pos",
    "pkt_remain",
    "send_pos",
    "send_remain",
    "pkt_avail",
    "send_avail",
];

/// SHOW CLIENTS or SHOW SERVERS: one row per connection, PgBouncer's columns. `ptr` is the
/// connection's id (in hex, as PgBouncer shows its pointers) and `link` the id of the
/// connection it is paired with; `id` is the id in decimal (what KILL_CLIENT takes).
pub fn connections(services: &Services, kind: Kind) -> Table {
    let mut cols = BASE.to_vec();
    // pgcorral's own, after PgBouncer 1.18's columns.
    match kind {
        Kind::Client => cols.push(("pinned", Ty::Text)),
        Kind::Server => cols.extend([("role", Ty::Text), ("health", Ty::Text), ("shard", Ty::Int)]),
    }
    cols.extend(LATER);
    let mut t = Table::new(&cols);
    let pools = services.every_pool();
    let now = std::time::SystemTime::now();
    for e in services.pools.lists.all(kind) {
        let state = e.state();
        // As PgBouncer: a logged-in client that holds no server is idle.
        let name = match state {
            State::Active if kind == Kind::Client && e.link() == 0 => "idle",
            s => s.name(),
        };
        let mut row = base_row(&e, kind, name, now);
        match kind {
            Kind::Client => row.push(e.pinned().into()),
            Kind::Server => {
                // The server's role as routing sees it now. A server from before RECONNECT
                // (or a changed address) is retiring: closed when its client is done with it.
                let node = pools
                    .iter()
                    .filter(|p| p.name().0 == &**e.database())
                    .filter_map(|p| p.node())
                    .find(|n| serves(n, e.addr()));
                let retiring = pools
                    .iter()
                    .any(|p| p.name().0 == &**e.database() && e.generation() < p.generation());
                row.push(node.map_or("primary", |n| n.role().name()).into());
                let health = match node.map(|n| topology::status(n)) {
                    _ if retiring => "retiring",
                    Some(s) => s,
                    None => "ok",
                };
                row.push(health.into());
                row.push(node.map_or(0, |n| n.shard).into());
            }
        }
        row.extend(later_cells(&e));
        t.row(row);
    }
    t
}

/// SHOW SOCKETS (every client and server connection) or SHOW ACTIVE_SOCKETS (`active`: the
/// clients holding or waiting for a server, and the servers lent to clients or logging in),
/// with PgBouncer's states (`cl_active`, `cl_waiting`, `sv_active`, `sv_idle`, `sv_login`).
pub fn sockets(services: &Services, active: bool) -> Table {
    let mut cols = BASE.to_vec();
    cols.extend(DEBUG.map(|c| (c, Ty::Int)));
    cols.extend(LATER);
    let mut t = Table::new(&cols);
    let now = std::time::SystemTime::now();
    for kind in [Kind::Client, Kind::Server] {
        for e in services.pools.lists.all(kind) {
            let state = e.state();
            let name = match (kind, state) {
                (Kind::Client, State::Waiting) => "cl_waiting",
                (Kind::Client, _) => "cl_active",
                (Kind::Server, State::Idle) => "sv_idle",
                (Kind::Server, State::Login) => "sv_login",
                (Kind::Server, _) => "sv_active",
            };
            let busy = match kind {
                Kind::Client => state == State::Waiting || e.link() != 0,
                Kind::Server => state != State::Idle,
            };
            if active && !busy {
                continue;
            }
            let mut row = base_row(&e, kind, name, now);
            row.extend(DEBUG.map(|_| Cell::from(0u8)));
            row.extend(later_cells(&e));
            t.row(row);
        }
    }
    t
}

/// PgBouncer 1.18's cells of a connection, its state shown as `state`.
fn base_row(e: &conns::Entry, kind: Kind, state: &str, now: std::time::SystemTime) -> Vec<Cell> {
    let waited = if e.state() == State::Waiting {
        now.duration_since(e.request_time()).unwrap_or_default()
    } else {
        std::time::Duration::ZERO
    };
    let link = e.link();
    vec![
        if kind == Kind::Client { "C" } else { "S" }.into(),
        (&**e.user()).into(),
        (&**e.database()).into(),
        state.into(),
        host(e, e.addr()).into(),
        e.addr().port().into(),
        host(e, e.local()).into(),
        e.local().port().into(),
        timestamp(e.connect_time()).into(),
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
        e.tls().into(),
        e.application_name().into(),
    ]
}

/// The cells of [`LATER`].
fn later_cells(e: &conns::Entry) -> [Cell; 3] {
    [e.replication().into(), e.prepared().into(), e.id.into()]
}

/// An address column: the IP, or "unix" for a connection over a Unix socket (as PgBouncer).
fn host(e: &conns::Entry, addr: std::net::SocketAddr) -> String {
    if e.unix() {
        "unix".into()
    } else {
        addr.ip().to_string()
    }
}

/// Whether a server connection to `addr` is one of `node`'s (by port, and address when the
/// node's host is written as one).
fn serves(node: &topology::Node, addr: std::net::SocketAddr) -> bool {
    node.port == addr.port()
        && node
            .host
            .parse::<std::net::IpAddr>()
            .map_or(true, |ip| ip == addr.ip())
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
