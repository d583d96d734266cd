//! Where clients run. Each worker's load is the CPU time its thread used (from the kernel's
//! per-thread accounting, sampled off the hot path); new clients are packed onto the
//! lowest-numbered worker that is not busy, and idle clients move off a busy worker at a
//! transaction boundary. A pooler that needs less than a core therefore runs on one thread (no
//! cross-thread sleeps and wakeups: PgBouncer's cost profile), and spreads over every core once
//! one is not enough. Where per-thread CPU time cannot be read, every load reads 0 and all
//! clients stay on the first worker.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::exec::Handle;

/// A worker busier than this (‰ of wall time) gets no new clients while another is not.
const SPILL_ABOVE: u32 = 700;
/// Idle clients leave a worker busier than this...
const MOVE_FROM_ABOVE: u32 = 850;
/// ...for one less busy than this...
const MOVE_TO_BELOW: u32 = 500;
/// ...at most once per this interval per worker, so a load sample can catch up.
const MOVE_EVERY: Duration = Duration::from_millis(5);

#[derive(Default)]
struct WorkerLoad {
    /// The worker thread's id (0 until it has started).
    tid: AtomicU64,
    /// The thread's CPU time (ns) at the last sample.
    sampled_cpu: AtomicU64,
    /// Load over the last sample interval, in ‰.
    load: AtomicU32,
    /// When a client last moved away (ns since `epoch`).
    last_move: AtomicU64,
}

pub struct Balance {
    loads: Box<[WorkerLoad]>,
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
            loads: (0..workers.max(1)).map(|_| WorkerLoad::default()).collect(),
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
        for l in self.loads.iter() {
            let Some(cpu) = thread_cpu_ns(l.tid.load(Relaxed)) else {
                continue;
            };
            let delta = cpu.saturating_sub(l.sampled_cpu.swap(cpu, Relaxed));
            l.load.store(
                (delta.saturating_mul(1000) / span).min(1000) as u32,
                Relaxed,
            );
        }
    }

    /// Load of worker `w` in ‰ over the last sample.
    pub fn load(&self, w: usize) -> u32 {
        self.loads[w].load.load(Relaxed)
    }

    /// The worker for a new client: the lowest-numbered one that is not busy, else the least
    /// busy.
    pub fn pick(&self) -> usize {
        let loads = || self.loads.iter().map(|l| l.load.load(Relaxed)).enumerate();
        loads()
            .find(|&(_, l)| l <= SPILL_ABOVE)
            .or_else(|| loads().min_by_key(|&(_, l)| l))
            .map(|(i, _)| i)
            .unwrap_or(0)
    }

    /// Where an idle client on worker `w` should move, if `w` is overloaded and another worker
    /// has room. Cheap when `w` is not busy: one relaxed load.
    #[inline]
    pub fn move_target(&self, w: usize) -> Option<usize> {
        if self.loads[w].load.load(Relaxed) <= MOVE_FROM_ABOVE {
            return None;
        }
        self.move_target_slow(w)
    }

    fn move_target_slow(&self, w: usize) -> Option<usize> {
        let (target, load) = self
            .loads
            .iter()
            .map(|l| l.load.load(Relaxed))
            .enumerate()
            .filter(|&(i, _)| i != w)
            .min_by_key(|&(_, l)| l)?;
        if load >= MOVE_TO_BELOW || self.handles.get().is_none() {
            return None;
        }
        let now = self.now().max(1);
        let last = self.loads[w].last_move.load(Relaxed); // 0: never
        if last != 0 && now.saturating_sub(last) < MOVE_EVERY.as_nanos() as u64 {
            return None;
        }
        self.loads[w]
            .last_move
            .compare_exchange(last, now, Relaxed, Relaxed)
            .ok()?;
        self.moves.fetch_add(1, Relaxed);
        Some(target)
    }

    /// Clients moved between workers so far.
    pub fn moves(&self) -> u64 {
        self.moves.load(Relaxed)
    }

    /// Sets every worker's load (‰) and stops sampling from changing it: for tests that need a
    /// busy worker on demand.
    #[doc(hidden)]
    pub fn freeze_loads(&self, loads: &[u32]) {
        let _sampling = self.sampling.lock();
        self.frozen.store(true, Relaxed);
        for (l, &v) in self.loads.iter().zip(loads) {
            l.load.store(v, Relaxed);
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

/// CPU time (ns) a thread of this process has used, from /proc (Linux).
fn thread_cpu_ns(tid: u64) -> Option<u64> {
    if tid == 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
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
        assert_eq!(b.pick(), 0);
        set_load(&b, 0, 900);
        assert_eq!(b.pick(), 1);
        set_load(&b, 1, 950);
        set_load(&b, 2, 990);
        assert_eq!(b.pick(), 0, "all busy: least busy");
    }

    #[test]
    fn moves_only_from_busy_to_idle_and_not_too_often() {
        let b = Balance::new(2);
        assert_eq!(b.move_target(0), None);
        set_load(&b, 0, 950);
        set_load(&b, 1, 100);
        assert_eq!(b.move_target(0), None, "no runtimes yet");
        b.set_handles(Vec::new());
        assert_eq!(b.move_target(0), Some(1));
        assert_eq!(b.move_target(0), None, "rate limited");
        set_load(&b, 1, 600);
        std::thread::sleep(MOVE_EVERY);
        assert_eq!(b.move_target(0), None, "nowhere with room");
    }

    #[test]
    fn load_is_the_threads_cpu_time() {
        let b = Balance::new(1);
        b.register_thread(0);
        b.sample(Duration::from_millis(50));
        // Busy until this thread has used 50 ms of CPU (however long that takes on a loaded
        // machine), then sampled as if 50 ms had passed: the load is the CPU time measured.
        let tid = b.loads[0].tid.load(Relaxed);
        let start = thread_cpu_ns(tid).expect("schedstat");
        let mut x = 0u64;
        while thread_cpu_ns(tid).expect("schedstat") < start + 50_000_000 {
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
