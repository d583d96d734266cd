//! What a server link measures as the relay runs (queries, transactions and their times, bytes,
//! waits), and the totals pools add it to: plain data below the server connection, prepared
//! statements and the pool's statistics.

use pgwire::backend::TxStatus;

use crate::clock::{self, Tick};
use crate::link_state::LinkState;

/// Totals since start, or changes over a period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub xact_count: u64,
    pub query_count: u64,
    /// Bytes received from clients.
    pub bytes_received: u64,
    /// Bytes sent to clients.
    pub bytes_sent: u64,
    /// Microseconds.
    pub xact_time: u64,
    pub query_time: u64,
    pub wait_time: u64,
    /// Clients that waited for a server (the divisor of the average wait): one per checkout,
    /// PgBouncer's server assignments.
    pub waits: u64,
    /// Named prepared statements clients parsed (transaction and statement mode).
    pub client_parses: u64,
    /// Statements pgcorral prepared on servers for clients' named statements.
    pub server_parses: u64,
    /// Binds of clients' named statements.
    pub binds: u64,
    /// Successful client logins.
    pub logins: u64,
}

impl Totals {
    /// The counts made between `earlier` and these.
    pub fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            xact_count: self.xact_count.saturating_sub(earlier.xact_count),
            query_count: self.query_count.saturating_sub(earlier.query_count),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            xact_time: self.xact_time.saturating_sub(earlier.xact_time),
            query_time: self.query_time.saturating_sub(earlier.query_time),
            wait_time: self.wait_time.saturating_sub(earlier.wait_time),
            waits: self.waits.saturating_sub(earlier.waits),
            client_parses: self.client_parses.saturating_sub(earlier.client_parses),
            server_parses: self.server_parses.saturating_sub(earlier.server_parses),
            binds: self.binds.saturating_sub(earlier.binds),
            logins: self.logins.saturating_sub(earlier.logins),
        }
    }

    pub fn add(&mut self, o: &Totals) {
        self.xact_count += o.xact_count;
        self.query_count += o.query_count;
        self.bytes_received += o.bytes_received;
        self.bytes_sent += o.bytes_sent;
        self.xact_time += o.xact_time;
        self.query_time += o.query_time;
        self.wait_time += o.wait_time;
        self.waits += o.waits;
        self.client_parses += o.client_parses;
        self.server_parses += o.server_parses;
        self.binds += o.binds;
        self.logins += o.logins;
    }
}

/// What the ReadyForQuery messages of one scan of a server's bytes ended: one query each
/// (a simple Query, a Sync of the extended protocol, a FunctionCall), and one transaction
/// each that reports the server idle outside a transaction.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub queries: u32,
    pub transactions: u32,
}

/// What one relay measures, handed to [`Stats::record`] as queries end. Every ReadyForQuery
/// passed to the client ends a query, so pipelined queries count one each. A query's time
/// runs from the first request sent while nothing was outstanding, or from the end of the
/// query before it if more were outstanding, to its ReadyForQuery (queries ending in one scan
/// share that time); a transaction's from its first query to the ReadyForQuery that reports
/// the server idle outside a transaction.
#[derive(Debug, Default)]
pub struct Meter {
    query_start: Option<Tick>,
    xact_start: Option<Tick>,
    pub delta: Totals,
    /// The time of each query that just ended (µs), when [`Meter::observe`] returns true.
    pub last_query: u64,
}

impl Meter {
    /// A client waited `us` microseconds for this server: counted with the rest of `delta`.
    #[inline]
    pub fn waited(&mut self, us: u64) {
        self.delta.wait_time += us;
        self.delta.waits += 1;
    }

    /// Looks at the link after a scan that ended `done`; true when `delta` should be recorded
    /// now.
    #[inline]
    pub fn observe(&mut self, st: &LinkState, done: Done) -> bool {
        let busy = st.pending > 0 || st.unsynced;
        if done.queries == 0 {
            if busy && self.query_start.is_none() {
                let now = clock::now();
                self.query_start = Some(now);
                self.xact_start.get_or_insert(now);
            }
            return false;
        }
        let now = clock::now();
        let span = self.query_start.map_or(0, |s| now.micros_since(s));
        self.query_start = busy.then_some(now);
        self.last_query = span / u64::from(done.queries);
        self.delta.query_count += u64::from(done.queries);
        self.delta.query_time += span;
        if done.transactions > 0 {
            if let Some(x) = self.xact_start.take() {
                self.delta.xact_time += now.micros_since(x);
            }
            self.delta.xact_count += u64::from(done.transactions);
            if busy || st.tx != TxStatus::Idle {
                // The next transaction is under way already (pipelined).
                self.xact_start = Some(now);
            }
        } else if self.xact_start.is_none() {
            self.xact_start = Some(now);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meter_counts_queries_and_transactions() {
        let none = Done::default();
        let one = |transactions| Done {
            queries: 1,
            transactions,
        };
        let mut m = Meter::default();
        let mut st = LinkState {
            pending: 1,
            ..Default::default()
        };
        assert!(!m.observe(&st, none));
        st.pending = 0;
        st.tx = TxStatus::InTransaction;
        assert!(m.observe(&st, one(0)), "BEGIN answered");
        st.pending = 1;
        assert!(!m.observe(&st, none));
        st.pending = 0;
        st.tx = TxStatus::Idle;
        assert!(m.observe(&st, one(1)), "COMMIT answered");
        assert_eq!((m.delta.query_count, m.delta.xact_count), (2, 1));
    }

    #[test]
    fn meter_counts_pipelined_queries_one_each() {
        // `SELECT 1/0` then `BEGIN` before the first is answered (a driver that returns on
        // ErrorResponse), answered separately, then COMMIT.
        let mut m = Meter::default();
        let mut st = LinkState {
            pending: 1,
            ..Default::default()
        };
        assert!(!m.observe(&st, Done::default()));
        st.pending = 2;
        assert!(!m.observe(&st, Done::default()));
        st.pending = 1;
        let ended = |queries, transactions| Done {
            queries,
            transactions,
        };
        assert!(m.observe(&st, ended(1, 1)), "SELECT 1/0 answered");
        st.pending = 0;
        st.tx = TxStatus::InTransaction;
        assert!(m.observe(&st, ended(1, 0)), "BEGIN answered");
        st.pending = 1;
        assert!(!m.observe(&st, Done::default()));
        st.pending = 0;
        st.tx = TxStatus::Idle;
        assert!(m.observe(&st, ended(1, 1)), "COMMIT answered");
        assert_eq!((m.delta.query_count, m.delta.xact_count), (3, 2));
        // Both answers in one read: two queries and one transaction, the other open.
        let mut m = Meter::default();
        st.pending = 2;
        assert!(!m.observe(&st, Done::default()));
        st.pending = 0;
        st.tx = TxStatus::InTransaction;
        assert!(m.observe(&st, ended(2, 1)));
        assert_eq!((m.delta.query_count, m.delta.xact_count), (2, 1));
        assert!(m.xact_start.is_some(), "the BEGIN's transaction goes on");
    }
}
