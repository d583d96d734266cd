//! Per-pool statistics as PgBouncer keeps them: transactions, queries, bytes each way, and the
//! time spent in transactions, in queries and waiting for a server. Counters are sharded by
//! worker thread (each shard on its own cache line), so that recording one costs a few
//! uncontended atomic adds; readers sum the shards. Averages per second are taken over the last
//! full `stats_period`, as PgBouncer does.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pgwire::backend::TxStatus;

use crate::server::LinkState;

/// Shards (workers beyond this share them).
const SHARDS: usize = 16;

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
    /// Clients that waited for a server (the divisor of the average wait).
    pub waits: u64,
}

impl Totals {
    fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            xact_count: self.xact_count.saturating_sub(earlier.xact_count),
            query_count: self.query_count.saturating_sub(earlier.query_count),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            xact_time: self.xact_time.saturating_sub(earlier.xact_time),
            query_time: self.query_time.saturating_sub(earlier.query_time),
            wait_time: self.wait_time.saturating_sub(earlier.wait_time),
            waits: self.waits.saturating_sub(earlier.waits),
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
    }
}

/// Averages over one period, PgBouncer's way: counts and bytes per second, times per
/// transaction, query or wait (microseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Averages {
    pub xact_count: u64,
    pub query_count: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub xact_time: u64,
    pub query_time: u64,
    pub wait_time: u64,
}

impl Averages {
    /// Combines the averages of two pools: rates add up, times are weighted by their counts
    /// (waits by transactions, the nearest count kept).
    pub fn merge(&mut self, o: &Averages) {
        let w = |a: u64, na: u64, b: u64, nb: u64| {
            (a * na + b * nb).checked_div(na + nb).unwrap_or(a.max(b))
        };
        self.xact_time = w(self.xact_time, self.xact_count, o.xact_time, o.xact_count);
        self.query_time = w(
            self.query_time,
            self.query_count,
            o.query_time,
            o.query_count,
        );
        self.wait_time = w(self.wait_time, self.xact_count, o.wait_time, o.xact_count);
        self.xact_count += o.xact_count;
        self.query_count += o.query_count;
        self.bytes_received += o.bytes_received;
        self.bytes_sent += o.bytes_sent;
    }

    pub fn over(d: &Totals, period: Duration) -> Averages {
        let secs = period.as_secs_f64().max(1e-3);
        let per_s = |v: u64| (v as f64 / secs).round() as u64;
        let per = |v: u64, n: u64| v.checked_div(n).unwrap_or(0);
        Averages {
            xact_count: per_s(d.xact_count),
            query_count: per_s(d.query_count),
            bytes_received: per_s(d.bytes_received),
            bytes_sent: per_s(d.bytes_sent),
            xact_time: per(d.xact_time, d.xact_count),
            query_time: per(d.query_time, d.query_count),
            wait_time: per(d.wait_time, d.waits),
        }
    }
}

#[derive(Default)]
#[repr(align(128))]
struct Shard {
    xact_count: AtomicU64,
    query_count: AtomicU64,
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
    xact_time: AtomicU64,
    query_time: AtomicU64,
    wait_time: AtomicU64,
    waits: AtomicU64,
}

/// One pool's statistics.
pub struct Stats {
    shards: Box<[Shard]>,
    /// The totals at the start of the current period, and the averages of the last one.
    period: Mutex<(Instant, Totals, Averages)>,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            period: Mutex::new((Instant::now(), Totals::default(), Averages::default())),
        }
    }
}

impl Stats {
    /// Adds `d` to worker `w`'s shard.
    pub fn record(&self, w: usize, d: &Totals) {
        let s = &self.shards[w % SHARDS];
        for (a, v) in [
            (&s.xact_count, d.xact_count),
            (&s.query_count, d.query_count),
            (&s.bytes_received, d.bytes_received),
            (&s.bytes_sent, d.bytes_sent),
            (&s.xact_time, d.xact_time),
            (&s.query_time, d.query_time),
            (&s.wait_time, d.wait_time),
            (&s.waits, d.waits),
        ] {
            if v != 0 {
                a.fetch_add(v, Relaxed);
            }
        }
    }

    /// A client on worker `w` waited `waited` for a server.
    pub fn waited(&self, w: usize, waited: Duration) {
        let s = &self.shards[w % SHARDS];
        s.wait_time.fetch_add(waited.as_micros() as u64, Relaxed);
        s.waits.fetch_add(1, Relaxed);
    }

    /// Totals since start.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for s in self.shards.iter() {
            t.add(&Totals {
                xact_count: s.xact_count.load(Relaxed),
                query_count: s.query_count.load(Relaxed),
                bytes_received: s.bytes_received.load(Relaxed),
                bytes_sent: s.bytes_sent.load(Relaxed),
                xact_time: s.xact_time.load(Relaxed),
                query_time: s.query_time.load(Relaxed),
                wait_time: s.wait_time.load(Relaxed),
                waits: s.waits.load(Relaxed),
            });
        }
        t
    }

    /// Ends the period when `period` has passed since it began: its averages become the
    /// ones shown.
    pub fn roll(&self, period: Duration) {
        let mut p = self.period.lock();
        let elapsed = p.0.elapsed();
        if elapsed < period {
            return;
        }
        let now = self.totals();
        p.2 = Averages::over(&now.since(&p.1), elapsed);
        p.0 = Instant::now();
        p.1 = now;
    }

    /// The averages of the last full period.
    pub fn averages(&self) -> Averages {
        self.period.lock().2
    }
}

/// What one relay measures, handed to [`Stats::record`] when the server is idle again:
/// a query runs from the first request sent while nothing was outstanding until nothing is
/// outstanding; a transaction from then until the server is idle outside a transaction.
#[derive(Debug, Default)]
pub struct Meter {
    query_start: Option<Instant>,
    xact_start: Option<Instant>,
    pub delta: Totals,
}

impl Meter {
    /// Looks at the link after a scan; true when `delta` should be recorded now.
    #[inline]
    pub fn observe(&mut self, st: &LinkState) -> bool {
        let busy = st.pending > 0 || st.unsynced;
        match self.query_start {
            None if busy => {
                let now = Instant::now();
                self.query_start = Some(now);
                self.xact_start.get_or_insert(now);
                false
            }
            Some(start) if !busy => {
                let now = Instant::now();
                self.query_start = None;
                self.delta.query_count += 1;
                self.delta.query_time += micros(now - start);
                if st.tx == TxStatus::Idle {
                    if let Some(x) = self.xact_start.take() {
                        self.delta.xact_count += 1;
                        self.delta.xact_time += micros(now - x);
                    }
                }
                true
            }
            _ => false,
        }
    }
}

fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meter_counts_queries_and_transactions() {
        let mut m = Meter::default();
        let mut st = LinkState {
            pending: 1,
            ..Default::default()
        };
        assert!(!m.observe(&st));
        st.pending = 0;
        st.tx = TxStatus::InTransaction;
        assert!(m.observe(&st), "BEGIN answered");
        st.pending = 1;
        assert!(!m.observe(&st));
        st.pending = 0;
        st.tx = TxStatus::Idle;
        assert!(m.observe(&st), "COMMIT answered");
        assert_eq!((m.delta.query_count, m.delta.xact_count), (2, 1));
    }

    #[test]
    fn shards_sum_and_periods_average() {
        let s = Stats::default();
        let d = Totals {
            xact_count: 10,
            query_count: 20,
            xact_time: 1000,
            query_time: 1000,
            ..Default::default()
        };
        s.record(0, &d);
        s.record(17, &d);
        s.waited(3, Duration::from_micros(40));
        let t = s.totals();
        assert_eq!(
            (t.xact_count, t.query_count, t.wait_time, t.waits),
            (20, 40, 40, 1)
        );
        let a = Averages::over(&t, Duration::from_secs(2));
        assert_eq!(
            (
                a.xact_count,
                a.query_count,
                a.xact_time,
                a.query_time,
                a.wait_time
            ),
            (10, 20, 100, 50, 40)
        );
    }
}
