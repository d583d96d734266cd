//! Where clients run. Each worker's load is the CPU time its thread used, and its delay the time
//! it was ready to run but waited for a CPU (both from the kernel's per-thread accounting,
//! sampled off the hot path); new clients are packed onto the lowest-numbered worker that is
//! neither busy nor kept waiting, and idle clients move, at a transaction boundary, off a busy
//! worker, or off a waiting one to a worker with fewer clients. A pooler that needs less than a
//! core on a machine with room therefore runs on one thread (no cross-thread sleeps and wakeups:
//! PgBouncer's cost profile); it spreads over every core once one is not enough, and also once
//! the other processes on its core keep it waiting, since then every client behind it waits too
//! while another core may idle (docs/performance.md, "Spread when kept waiting"); that up to
//! [`SPREAD_UP_TO`] clients per worker, above which clients are packed again. Where
//! per-thread accounting cannot be read, every load and delay reads 0 and all clients stay on
//! the first worker.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::exec::Handle;

/// A worker busier than this (‰ of wall time) gets no new clients while another is not.
const SPILL_ABOVE: u32 = 700;
/// Idle clients leave a worker busier than this...
const MOVE_FROM_ABOVE: u32 = 850;
/// ...for one less busy than this...
const MOVE_TO_BELOW: u32 = 500;
/// ...at most once per this interval per worker, so a load sample can catch up.
const MOVE_EVERY: Duration = Duration::from_millis(5);
/// A worker that waited for a CPU longer than this (‰ of wall time) while ready to run is kept
/// waiting: it gets no new clients while another is not, and its idle clients move to a worker
/// with at least two fewer.
const DELAYED_ABOVE: u32 = 200;
/// Clients per worker up to which a worker kept waiting spreads its clients. Beyond it, each
/// turn of a packed worker has so many writes to batch, and it sleeps so seldom, that a second
/// worker costs more than the waiting it saves (docs/performance.md, "Spread when kept
/// waiting"): clients are packed again, and those spread move back.
const SPREAD_UP_TO: u32 = 24;

#[derive(Default)]
struct WorkerLoad {
    /// The worker thread's id (0 until it has started).
    tid: AtomicU64,
    /// The thread's CPU time (ns) at the last sample.
    sampled_cpu: AtomicU64,
    /// Load over the last sample interval, in ‰.
    load: AtomicU32,
    /// The thread's time waiting for a CPU (ns) at the last sample.
    sampled_delay: AtomicU64,
    /// Time waiting for a CPU over the last sample interval, in ‰.
    delay: AtomicU32,
    /// Clients on the worker (see [`Seat`]).
    clients: AtomicU32,
    /// When a client last moved away (ns since `epoch`).
    last_move: AtomicU64,
    /// The worker has ended (see [`crate::workers`]): no client is placed or moved here.
    dead: AtomicBool,
}

impl WorkerLoad {
    fn busy(&self) -> bool {
        self.load.load(Relaxed) > SPILL_ABOVE
    }

    fn kept_waiting(&self) -> bool {
        self.delay.load(Relaxed) > DELAYED_ABOVE
    }

    fn alive(&self) -> bool {
        !self.dead.load(Relaxed)
    }
}

/// A client's place on a worker, counted while it lives (the client's task holds it). One
/// pointer, to the worker's load: every idle client holds one.
pub struct Seat(Option<Arc<WorkerLoad>>);

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(l) = &self.0 {
            l.clients.fetch_sub(1, Relaxed);
        }
    }
}

pub struct Balance {
    /// Each in an `Arc` of its own, which a [`Seat`] holds.
    loads: Box<[Arc<WorkerLoad>]>,
    handles: OnceLock<Vec<Handle>>,
    epoch: Instant,
    /// Clients moved between workers so far.
    moves: AtomicU64,
    /// Loads set by hand (tests); sampling leaves them alone.
    frozen: AtomicBool,
    /// Held by a sample and by `freeze_loads`, so a sample already under way cannot overwrite
    /// loads set by hand. Off the hot path: taken ten times a second.
    sampling: parking_lot::Mutex<()>,
}

impl Balance {
    pub fn new(workers: usize) -> Balance {
        Balance {
            loads: (0..workers.max(1)).map(|_| Arc::default()).collect(),
            handles: OnceLock::new(),
            epoch: Instant::now(),
            moves: AtomicU64::new(0),
            frozen: AtomicBool::new(false),
            sampling: parking_lot::Mutex::new(()),
        }
    }

    /// Number of workers.
    pub fn len(&self) -> usize {
        self.loads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.loads.is_empty()
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Called on worker `w`'s own thread when it starts: records its thread id.
    pub fn register_thread(&self, w: usize) {
        if let Some(tid) = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        {
            self.loads[w].tid.store(tid, Relaxed);
        }
    }

    /// Updates every worker's load: CPU time used over the `interval` since the last call.
    pub fn sample(&self, interval: Duration) {
        let _sampling = self.sampling.lock();
        if self.frozen.load(Relaxed) {
            return;
        }
        let span = interval.as_nanos().max(1) as u64;
        let per_mille = |delta: u64| (delta.saturating_mul(1000) / span).min(1000) as u32;
        for l in self.loads.iter() {
            let Some((cpu, delay)) = thread_sched_ns(l.tid.load(Relaxed)) else {
                continue;
            };
            let ran = cpu.saturating_sub(l.sampled_cpu.swap(cpu, Relaxed));
            l.load.store(per_mille(ran), Relaxed);
            let waited = delay.saturating_sub(l.sampled_delay.swap(delay, Relaxed));
            l.delay.store(per_mille(waited), Relaxed);
        }
    }

    /// Load of worker `w` in ‰ over the last sample.
    pub fn load(&self, w: usize) -> u32 {
        self.loads[w].load.load(Relaxed)
    }

    /// Clients on worker `w` now.
    #[cfg(test)]
    fn clients(&self, w: usize) -> u32 {
        self.loads[w].clients.load(Relaxed)
    }

    /// Counts a client on worker `w` until the seat is dropped.
    pub fn seat(&self, w: usize) -> Seat {
        let load = self.loads.get(w).cloned();
        if let Some(l) = &load {
            l.clients.fetch_add(1, Relaxed);
        }
        Seat(load)
    }

    /// Whether workers kept waiting spread their clients: while there are at most
    /// [`SPREAD_UP_TO`] clients per worker.
    fn spreading(&self) -> bool {
        let total: u32 = self.loads.iter().map(|l| l.clients.load(Relaxed)).sum();
        total <= SPREAD_UP_TO.saturating_mul(self.loads.len() as u32)
    }

    /// Marks worker `w` dead: it gets no new clients and no client moves to it.
    pub fn mark_dead(&self, w: usize) {
        if let Some(l) = self.loads.get(w) {
            l.dead.store(true, Relaxed);
        }
    }

    /// Whether worker `w` is still running (not [`Balance::mark_dead`]).
    pub fn is_alive(&self, w: usize) -> bool {
        self.loads.get(w).is_some_and(|l| l.alive())
    }

    /// The worker for a new client, of those alive: the lowest-numbered one that is neither
    /// busy nor (while clients spread) kept waiting; else, while clients spread, of those not
    /// busy the one with the fewest clients; else the least busy. `None` when every worker is
    /// dead.
    pub fn pick(&self) -> Option<usize> {
        let spread = self.spreading();
        let ls = || self.loads.iter().enumerate().filter(|(_, l)| l.alive());
        ls().find(|(_, l)| !(l.busy() || (spread && l.kept_waiting())))
            .or_else(|| {
                ls().filter(|(_, l)| spread && !l.busy())
                    .min_by_key(|(_, l)| l.clients.load(Relaxed))
            })
            .or_else(|| ls().min_by_key(|(_, l)| l.load.load(Relaxed)))
            .map(|(i, _)| i)
    }

    /// Where an idle client on worker `w` should move: off an overloaded worker to one with
    /// room; while clients spread, off one kept waiting to one with at least two fewer clients
    /// (so that clients even out and never go back and forth); else back to a lower-numbered
    /// worker with room (packed again). Cheap on the first worker while it is neither busy nor
    /// kept waiting: two relaxed loads.
    #[inline]
    pub fn move_target(&self, w: usize) -> Option<usize> {
        if self.settled(w) {
            return None;
        }
        self.move_target_slow(w)
    }

    /// True on the first worker while it is neither busy nor kept waiting: its clients stay
    /// (two relaxed loads, the common case).
    #[inline]
    fn settled(&self, w: usize) -> bool {
        let l = &self.loads[w];
        w == 0 && l.load.load(Relaxed) <= MOVE_FROM_ABOVE && !l.kept_waiting()
    }

    fn move_target_slow(&self, w: usize) -> Option<usize> {
        let (target, last) = self.wanted_move(w)?;
        let now = self.now().max(1);
        self.loads[w]
            .last_move
            .compare_exchange(last, now, Relaxed, Relaxed)
            .ok()?;
        self.moves.fetch_add(1, Relaxed);
        Some(target)
    }

    /// Whether [`move_target`](Self::move_target) would give a client on worker `w` somewhere
    /// to go now, without taking the move: what a session-mode relay asks at each idle answer,
    /// to stop there only when its client may move. As cheap as `move_target` on the first
    /// worker while it is neither busy nor kept waiting.
    #[inline]
    pub fn may_move(&self, w: usize) -> bool {
        !self.settled(w) && self.wanted_move(w).is_some()
    }

    /// Where a client on worker `w` should go, if the rate limit allows a move now, and when
    /// the last move away was (ns since `epoch`, 0: never), which taking the move replaces.
    fn wanted_move(&self, w: usize) -> Option<(usize, u64)> {
        let me = &self.loads[w];
        let others = || (self.loads.iter().enumerate()).filter(|&(i, l)| i != w && l.alive());
        let target = if me.load.load(Relaxed) > MOVE_FROM_ABOVE {
            others()
                .map(|(i, l)| (i, l.load.load(Relaxed)))
                .min_by_key(|&(_, l)| l)
                .filter(|&(_, l)| l < MOVE_TO_BELOW)
                .map(|(i, _)| i)
        } else if !self.spreading() {
            (self.loads[..w].iter()).position(|l| l.alive() && l.load.load(Relaxed) < MOVE_TO_BELOW)
        } else if me.kept_waiting() {
            let mine = me.clients.load(Relaxed);
            others()
                .filter(|(_, l)| !l.busy())
                .min_by_key(|(_, l)| l.clients.load(Relaxed))
                .filter(|(_, l)| l.clients.load(Relaxed).saturating_add(2) <= mine)
                .map(|(i, _)| i)
        } else {
            None
        };
        let target = target?;
        // Not before the workers run (and a move has somewhere to go).
        self.handles.get()?;
        let last = self.loads[w].last_move.load(Relaxed); // 0: never
        if last != 0 && self.now().saturating_sub(last) < MOVE_EVERY.as_nanos() as u64 {
            return None;
        }
        Some((target, last))
    }

    /// Clients moved between workers so far.
    pub fn moves(&self) -> u64 {
        self.moves.load(Relaxed)
    }

    /// Sets every worker's load (‰) and stops sampling from changing it: a hook for tests that
    /// need a busy worker on demand (the `test-hooks` feature, which the pooler's tests turn on);
    /// not in the product.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn freeze_loads(&self, loads: &[u32]) {
        let _sampling = self.sampling.lock();
        self.frozen.store(true, Relaxed);
        for (l, &v) in self.loads.iter().zip(loads) {
            l.load.store(v, Relaxed);
            l.delay.store(0, Relaxed);
        }
    }

    /// Records the worker executors (once, when they start).
    pub fn set_handles(&self, handles: Vec<Handle>) {
        let _ = self.handles.set(handles);
    }

    /// Worker `w`'s executor, once the workers run.
    pub fn handle(&self, w: usize) -> Option<&Handle> {
        self.handles.get().and_then(|h| h.get(w))
    }
}

/// CPU time and time spent waiting for a CPU while ready to run (ns) of a thread of this
/// process, from /proc (Linux).
fn thread_sched_ns(tid: u64) -> Option<(u64, u64)> {
    if tid == 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse().ok());
    Some((fields.next()??, fields.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_load(b: &Balance, w: usize, l: u32) {
        b.loads[w].load.store(l, Relaxed);
    }

    #[test]
    fn packs_then_spills() {
        let b = Balance::new(3);
        assert_eq!(b.pick().unwrap(), 0);
        set_load(&b, 0, 900);
        assert_eq!(b.pick().unwrap(), 1);
        set_load(&b, 1, 950);
        set_load(&b, 2, 990);
        assert_eq!(b.pick().unwrap(), 0, "all busy: least busy");
    }

    #[test]
    fn dead_workers_get_no_clients_and_no_moves() {
        let b = Balance::new(3);
        b.set_handles(Vec::new());
        b.mark_dead(0);
        assert!(!b.is_alive(0) && b.is_alive(1));
        assert_eq!(b.pick(), Some(1), "the first live worker");
        set_load(&b, 1, 900);
        assert_eq!(b.pick(), Some(2));
        set_load(&b, 2, 990);
        assert_eq!(
            b.pick(),
            Some(1),
            "all live ones busy: the least busy of them"
        );
        // A busy worker's clients move to a live worker only.
        set_load(&b, 2, 950);
        set_load(&b, 1, 100);
        assert_eq!(b.move_target(2), Some(1));
        b.mark_dead(1);
        assert_eq!(b.move_target(2), None, "nowhere alive to go");
        b.mark_dead(2);
        assert_eq!(b.pick(), None, "every worker dead");
    }

    #[test]
    fn moves_only_from_busy_to_idle_and_not_too_often() {
        let b = Balance::new(2);
        assert_eq!(b.move_target(0), None);
        assert!(!b.may_move(0));
        set_load(&b, 0, 950);
        set_load(&b, 1, 100);
        assert_eq!(b.move_target(0), None, "no runtimes yet");
        b.set_handles(Vec::new());
        assert!(b.may_move(0));
        assert!(b.may_move(0), "asking takes no move");
        assert_eq!(b.moves(), 0);
        assert_eq!(b.move_target(0), Some(1));
        assert_eq!(b.moves(), 1);
        assert!(!b.may_move(0), "rate limited");
        assert_eq!(b.move_target(0), None, "rate limited");
        set_load(&b, 1, 600);
        std::thread::sleep(MOVE_EVERY);
        assert_eq!(b.move_target(0), None, "nowhere with room");
    }

    fn set_delay(b: &Balance, w: usize, d: u32) {
        b.loads[w].delay.store(d, Relaxed);
    }

    #[test]
    fn a_worker_kept_waiting_gets_no_new_clients_and_the_rest_spread_by_count() {
        let b = Arc::new(Balance::new(3));
        let seats: Vec<Seat> = (0..4).map(|_| b.seat(b.pick().unwrap())).collect();
        assert_eq!(b.clients(0), 4, "packed while nothing waits");
        set_delay(&b, 0, 700);
        assert_eq!(
            b.pick().unwrap(),
            1,
            "the next worker that is not kept waiting"
        );
        set_delay(&b, 1, 700);
        set_delay(&b, 2, 700);
        let more: Vec<Seat> = (0..4).map(|_| b.seat(b.pick().unwrap())).collect();
        assert_eq!(
            (b.clients(0), b.clients(1), b.clients(2)),
            (4, 2, 2),
            "by count"
        );
        drop(seats);
        drop(more);
        assert_eq!(
            (b.clients(0), b.clients(1), b.clients(2)),
            (0, 0, 0),
            "seats give back"
        );
    }

    #[test]
    fn idle_clients_leave_a_waiting_worker_until_counts_are_within_one() {
        let b = Arc::new(Balance::new(2));
        b.set_handles(Vec::new());
        let mut on0: Vec<Seat> = (0..5).map(|_| b.seat(0)).collect();
        let mut on1: Vec<Seat> = vec![b.seat(1)];
        assert_eq!(b.move_target(0), None, "not kept waiting");
        set_delay(&b, 0, 700);
        set_delay(&b, 1, 700);
        let mut moved = 0;
        for _ in 0..10 {
            if let Some(t) = b.move_target(0) {
                assert_eq!(t, 1);
                on0.pop();
                on1.push(b.seat(1));
                moved += 1;
            }
            assert_eq!(b.move_target(1), None, "never back");
            std::thread::sleep(MOVE_EVERY);
        }
        assert_eq!((moved, b.clients(0), b.clients(1)), (2, 3, 3));
        // One client alone does not go back and forth.
        drop(on0);
        drop(on1.split_off(1));
        assert_eq!(b.move_target(1), None);
        assert_eq!(b.move_target(0), None);
        // A busy worker is no place to go.
        let _more: Vec<Seat> = (0..3).map(|_| b.seat(0)).collect();
        set_load(&b, 1, 800);
        assert_eq!(b.move_target(0), None);
    }

    #[test]
    fn crowded_workers_pack_again_and_spread_clients_move_back() {
        let b = Arc::new(Balance::new(2));
        b.set_handles(Vec::new());
        set_delay(&b, 0, 700);
        set_delay(&b, 1, 700);
        let mut seats: Vec<Seat> = (0..2 * SPREAD_UP_TO)
            .map(|_| b.seat(b.pick().unwrap()))
            .collect();
        assert_eq!((b.clients(0), b.clients(1)), (SPREAD_UP_TO, SPREAD_UP_TO));
        assert_eq!(b.move_target(1), None, "spread, and even");
        // One more client than spreading allows: packed onto the first worker, and clients of
        // the second move back to it while it has room.
        seats.push(b.seat(b.pick().unwrap()));
        assert_eq!(b.clients(0), SPREAD_UP_TO + 1);
        assert_eq!(b.move_target(1), Some(0));
        assert_eq!(b.move_target(0), None, "the first worker keeps its clients");
        std::thread::sleep(MOVE_EVERY);
        set_load(&b, 0, 600);
        assert_eq!(b.move_target(1), None, "no room on the first worker");
    }

    #[test]
    fn load_is_the_threads_cpu_time() {
        let b = Balance::new(1);
        b.register_thread(0);
        b.sample(Duration::from_millis(50));
        // Busy until this thread has used 50 ms of CPU (however long that takes on a loaded
        // machine), then sampled as if 50 ms had passed: the load is the CPU time measured.
        let tid = b.loads[0].tid.load(Relaxed);
        let start = thread_sched_ns(tid).expect("schedstat").0;
        let mut x = 0u64;
        while thread_sched_ns(tid).expect("schedstat").0 < start + 50_000_000 {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        b.sample(Duration::from_millis(50));
        assert!(b.load(0) >= 500, "busy loop load {}", b.load(0));
        std::thread::sleep(Duration::from_millis(50));
        b.sample(Duration::from_millis(50));
        assert!(b.load(0) <= 200, "sleeping load {}", b.load(0));
    }
}
