//! Per-pool statistics as PgBouncer keeps them: transactions, queries, bytes each way, and the
//! time spent in transactions, in queries and waiting for a server. Counters are sharded by
//! worker thread (each shard on its own cache line), and a worker is the only writer of its
//! shard, so recording is a plain load and store per counter (no atomic read-modify-write);
//! other threads add to a shared shard atomically. Readers sum the shards. Averages per second are taken over the last
//! full `stats_period`, as PgBouncer does. Beyond PgBouncer: histograms of query and wait times
//! (for percentiles and Prometheus) and errors counted by SQLSTATE class.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use crate::meter::{Done, Meter, Totals};

/// Shards owned by workers 0..SHARDS; one more is shared by every other thread.
const SHARDS: usize = 16;

thread_local! {
    /// The worker this thread is ([`own_shard`]); `usize::MAX` for other threads.
    static WORKER: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// Marks this thread as worker `w`, the only writer of shard `w` of every pool's statistics
/// (once, when the worker thread starts; each worker index belongs to one thread).
pub fn own_shard(w: usize) {
    WORKER.with(|c| c.set(w));
}

/// The shard a record by worker `w` goes to, out of `owned` owned ones plus a shared one (at
/// index `owned`), and whether this thread owns it.
#[inline]
fn shard_for(w: usize, owned: usize) -> (usize, bool) {
    if w < owned && WORKER.with(|c| c.get()) == w {
        (w, true)
    } else {
        (owned, false)
    }
}

/// Adds `v` to a counter: its only writer loads and stores; a shared counter adds atomically.
#[inline]
fn add(a: &AtomicU64, v: u64, owner: bool) {
    if owner {
        a.store(a.load(Relaxed).wrapping_add(v), Relaxed);
    } else {
        a.fetch_add(v, Relaxed);
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
    /// Per second, as the counts above.
    pub server_assignment_count: u64,
    pub client_parse_count: u64,
    pub server_parse_count: u64,
    pub bind_count: u64,
    pub client_login_count: u64,
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
        self.server_assignment_count += o.server_assignment_count;
        self.client_parse_count += o.client_parse_count;
        self.server_parse_count += o.server_parse_count;
        self.bind_count += o.bind_count;
        self.client_login_count += o.client_login_count;
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
            server_assignment_count: per_s(d.waits),
            client_parse_count: per_s(d.client_parses),
            server_parse_count: per_s(d.server_parses),
            bind_count: per_s(d.binds),
            client_login_count: per_s(d.logins),
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
    client_parses: AtomicU64,
    server_parses: AtomicU64,
    binds: AtomicU64,
    logins: AtomicU64,
}

/// Sub-buckets per power of two in a [`Histogram`] (about 19% wide each).
const SUB: u32 = 4;
/// Values below this many microseconds get a bucket each.
const LINEAR: u64 = 16;
/// Buckets: the linear ones, then `SUB` per power of two up to 2^40 µs (12 days).
pub const BUCKETS: usize = LINEAR as usize + (SUB as usize) * (40 - 4);
/// Histogram shards (fewer than counter shards: they are larger).
const HIST_SHARDS: usize = 8;

/// The bucket of a value in microseconds.
fn bucket(us: u64) -> usize {
    if us < LINEAR {
        return us as usize;
    }
    let exp = 63 - us.leading_zeros(); // >= 4
    let sub = ((us >> (exp - 2)) & (SUB as u64 - 1)) as usize;
    (LINEAR as usize + (exp as usize - 4) * SUB as usize + sub).min(BUCKETS - 1)
}

/// The largest value (µs) that falls in bucket `i`.
pub fn bucket_upper(i: usize) -> u64 {
    if i < LINEAR as usize {
        return i as u64;
    }
    let k = i - LINEAR as usize;
    let exp = (k / SUB as usize) as u32 + 4;
    let sub = (k % SUB as usize) as u64;
    ((SUB as u64 + sub + 1) << (exp - 2)) - 1
}

/// A latency histogram in microseconds, sharded like the counters. Its buckets (11 KiB) are
/// allocated at its first value: a pool that never serves a query (an idle tenant's) has none.
#[derive(Default)]
pub struct Histogram {
    shards: std::sync::OnceLock<Box<[HistShard]>>,
}

#[repr(align(128))]
struct HistShard([AtomicU64; BUCKETS]);

impl Histogram {
    pub fn record(&self, w: usize, us: u64) {
        self.record_n(w, us, 1);
    }

    /// Records `n` values of `us` at once.
    pub fn record_n(&self, w: usize, us: u64, n: u64) {
        if n == 0 {
            return;
        }
        let shards = self.shards.get_or_init(|| {
            (0..=HIST_SHARDS)
                .map(|_| HistShard(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect()
        });
        let (i, owner) = shard_for(w, HIST_SHARDS);
        add(&shards[i].0[bucket(us)], n, owner);
    }

    /// Counts per bucket (see [`bucket_upper`]), summed over shards.
    pub fn counts(&self) -> Vec<u64> {
        let mut c = vec![0u64; BUCKETS];
        for s in self.shards.get().into_iter().flatten() {
            for (i, b) in s.0.iter().enumerate() {
                c[i] += b.load(Relaxed);
            }
        }
        c
    }
}

/// The value (µs, a bucket's upper bound) below which fraction `q` of `counts` lie; 0 when
/// empty.
pub fn quantile(counts: &[u64], q: f64) -> u64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, &c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return bucket_upper(i);
        }
    }
    bucket_upper(counts.len() - 1)
}

/// One pool's statistics.
pub struct Stats {
    shards: Box<[Shard]>,
    /// Time of each query (round trip), and of each wait for a server.
    pub query_hist: Histogram,
    pub wait_hist: Histogram,
    /// Errors servers sent to clients, by SQLSTATE class (its first two characters).
    errors: Mutex<std::collections::BTreeMap<[u8; 2], u64>>,
    /// The totals at the start of the current period, and the averages of the last one.
    period: Mutex<(Instant, Totals, Averages)>,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            shards: (0..=SHARDS).map(|_| Shard::default()).collect(),
            query_hist: Histogram::default(),
            wait_hist: Histogram::default(),
            errors: Default::default(),
            period: Mutex::new((Instant::now(), Totals::default(), Averages::default())),
        }
    }
}

impl Stats {
    /// Adds `d` to worker `w`'s shard.
    pub fn record(&self, w: usize, d: &Totals) {
        let (i, owner) = shard_for(w, SHARDS);
        let s = &self.shards[i];
        for (a, v) in [
            (&s.xact_count, d.xact_count),
            (&s.query_count, d.query_count),
            (&s.bytes_received, d.bytes_received),
            (&s.bytes_sent, d.bytes_sent),
            (&s.xact_time, d.xact_time),
            (&s.query_time, d.query_time),
            (&s.wait_time, d.wait_time),
            (&s.waits, d.waits),
            (&s.client_parses, d.client_parses),
            (&s.server_parses, d.server_parses),
            (&s.binds, d.binds),
            (&s.logins, d.logins),
        ] {
            if v != 0 {
                add(a, v, owner);
            }
        }
    }

    /// A client on worker `w` waited `us` microseconds for a server.
    pub fn waited(&self, w: usize, us: u64) {
        let (i, owner) = shard_for(w, SHARDS);
        let s = &self.shards[i];
        add(&s.wait_time, us, owner);
        add(&s.waits, 1, owner);
        self.wait_hist.record(w, us);
    }

    /// A client on worker `w` logged in.
    pub fn logged_in(&self, w: usize) {
        let (i, owner) = shard_for(w, SHARDS);
        add(&self.shards[i].logins, 1, owner);
    }

    /// A server sent a client an error of SQLSTATE class `class`.
    pub fn error(&self, class: [u8; 2]) {
        *self.errors.lock().entry(class).or_default() += 1;
    }

    /// Errors by SQLSTATE class so far.
    pub fn errors(&self) -> Vec<([u8; 2], u64)> {
        self.errors.lock().iter().map(|(k, v)| (*k, *v)).collect()
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
                client_parses: s.client_parses.load(Relaxed),
                server_parses: s.server_parses.load(Relaxed),
                binds: s.binds.load(Relaxed),
                logins: s.logins.load(Relaxed),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_and_other_threads_lose_no_counts() {
        let stats = std::sync::Arc::new(Stats::default());
        let one = Totals {
            xact_count: 1,
            query_count: 2,
            ..Totals::default()
        };
        // Workers 0..3 own their shards; two more threads claim no shard but record as
        // worker 0 and 1 (they go to the shared shard, atomically).
        let threads: Vec<_> = (0..5)
            .map(|t| {
                let stats = stats.clone();
                std::thread::spawn(move || {
                    if t < 3 {
                        own_shard(t);
                    }
                    for _ in 0..20_000 {
                        stats.record(t % 3, &one);
                        stats.query_hist.record(t % 3, 5);
                        stats.waited(t % 3, 1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let t = stats.totals();
        assert_eq!((t.xact_count, t.query_count), (100_000, 200_000));
        assert_eq!((t.waits, t.wait_time), (100_000, 100_000));
        assert_eq!(stats.query_hist.counts().iter().sum::<u64>(), 100_000);
    }

    #[test]
    fn buckets_cover_values_in_order() {
        let mut last = 0;
        for v in [
            0u64,
            1,
            15,
            16,
            17,
            19,
            20,
            31,
            32,
            100,
            1000,
            12_345,
            1 << 30,
        ] {
            let b = bucket(v);
            assert!(b >= last, "{v}");
            assert!(
                bucket_upper(b) >= v,
                "{v} in bucket {b} up to {}",
                bucket_upper(b)
            );
            if b > 0 {
                assert!(
                    bucket_upper(b - 1) < v,
                    "{v}: bucket {b} is the first that holds it"
                );
            }
            last = b;
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_from_counts() {
        let h = Histogram::default();
        for v in 1..=100u64 {
            h.record(v as usize, v * 10);
        }
        let c = h.counts();
        let p50 = quantile(&c, 0.5);
        assert!((500..=600).contains(&p50), "{p50}");
        let p99 = quantile(&c, 0.99);
        assert!((990..=1200).contains(&p99), "{p99}");
        assert_eq!(quantile(&vec![0; BUCKETS], 0.5), 0);
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
        s.waited(3, 40);
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
