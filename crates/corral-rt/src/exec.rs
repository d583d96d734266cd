//! The worker threads' executor, in place of a tokio runtime: a queue of woken tasks, run in
//! turn, and the worker's [`Reactor`] to wait in when none is left. A wake on the worker's own
//! thread (a socket event, one task waking another) is a push onto a local queue; a wake or a
//! spawn from another thread goes onto a shared queue and, if the worker sleeps, writes its
//! eventfd. Timers and tokio's I/O (connects) stay on the timer thread's runtime, whose
//! context the worker threads enter; their wakes arrive from there.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};

use crate::batch;
use crate::grow;
use crate::reactor::{Events, Reactor};
use crate::sync;

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Tasks run before the reactor is asked for events again, when tasks keep waking each other.
const RUN_BEFORE_LOOKING: usize = 128;

/// A task's slot before the worker has taken it in.
const NO_SLOT: usize = usize::MAX;

/// One worker's executor, as other threads see it: spawn onto it, stop it.
#[derive(Clone)]
pub struct Handle(Arc<Shared>);

struct Shared {
    /// Tasks spawned or woken from other threads.
    remote: parking_lot::Mutex<Remote>,
    /// Something is in `remote`, and whether the worker sleeps: a remote push writes `wake`
    /// when it must.
    bell: Doorbell,
    wake: OwnedFd,
    stop: AtomicBool,
}

#[derive(Default)]
struct Remote {
    jobs: Vec<Job>,
    /// The worker has stopped: jobs pushed now are dropped at once (no one would run them, and
    /// a task kept here would keep its worker's state alive through its own `home`).
    closed: bool,
}

/// The handshake between a worker about to wait in its reactor and a thread that gives it work
/// (a spawn, a wake, a stop): whoever comes second sees the other, so work is never left
/// queued while the worker sleeps (the loom model `loom_tests` checks every interleaving).
pub(crate) struct Doorbell {
    /// Work was queued since the worker last took the queue.
    pending: sync::AtomicBool,
    /// The worker waits, or is about to: the one who queues work must wake it.
    sleeping: sync::AtomicBool,
}

impl Doorbell {
    pub(crate) fn new() -> Doorbell {
        Doorbell {
            pending: sync::AtomicBool::new(false),
            sleeping: sync::AtomicBool::new(false),
        }
    }

    /// After work was queued: true when the worker must be woken (it waits or is about to).
    pub(crate) fn ring(&self) -> bool {
        self.pending.store(true, Relaxed);
        // Against the fence in `may_sleep`: of this store and the worker's store of
        // `sleeping`, at least one is seen by the other side's load after its fence.
        sync::fence(SeqCst);
        self.sleeping.swap(false, AcqRel)
    }

    /// The worker: whether work was queued, clearing the mark (it takes the queue next).
    pub(crate) fn take(&self) -> bool {
        if !self.pending.load(Relaxed) {
            return false;
        }
        self.pending.store(false, SeqCst);
        true
    }

    /// The worker, before it waits: false when work came meanwhile (then it must not wait).
    pub(crate) fn may_sleep(&self) -> bool {
        self.sleeping.store(true, Relaxed);
        sync::fence(SeqCst);
        if self.pending.load(Relaxed) {
            self.sleeping.store(false, Relaxed);
            return false;
        }
        true
    }

    /// The worker, after its wait.
    pub(crate) fn awake(&self) {
        self.sleeping.store(false, Relaxed);
    }
}

enum Job {
    Spawn(Arc<Task>, BoxFuture),
    Wake(Arc<Task>),
    /// Runs on the worker's loop, outside every task (tests: a panic there kills the worker).
    #[cfg(test)]
    OnLoop(Box<dyn FnOnce() + Send>),
}

struct Task {
    /// In a queue already: further wakes do nothing until it has run.
    queued: AtomicBool,
    home: Arc<Shared>,
    /// Where its future is, once its worker has taken it in.
    slot: AtomicUsize,
}

/// The executor's state on its own thread (one thread-local, so a wake looks it up once).
struct Local {
    /// The executor running on this thread (its address), to tell local wakes from remote.
    home: Cell<usize>,
    /// Tasks woken on this thread, to run next.
    queue: RefCell<VecDeque<Arc<Task>>>,
    /// Tasks spawned on this thread while a task ran.
    spawned: RefCell<Vec<(Arc<Task>, BoxFuture)>>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            home: Cell::new(0),
            queue: RefCell::new(VecDeque::new()),
            spawned: RefCell::new(Vec::new()),
        }
    };
}

impl Wake for Task {
    fn wake(self: Arc<Task>) {
        if !self.queued.swap(true, AcqRel) {
            schedule(self);
        }
    }

    fn wake_by_ref(self: &Arc<Task>) {
        if !self.queued.swap(true, AcqRel) {
            schedule(self.clone());
        }
    }
}

fn schedule(task: Arc<Task>) {
    let home = Arc::as_ptr(&task.home) as usize;
    let mut task = Some(task);
    // `try_with`: a wake may come while this thread's locals are being destroyed (a runtime
    // ending on another thread); it then goes the remote way.
    let _ = LOCAL.try_with(|l| {
        if l.home.get() == home {
            if let Some(t) = task.take() {
                l.queue.borrow_mut().push_back(t);
            }
        }
    });
    if let Some(task) = task {
        let home = task.home.clone();
        home.push(Job::Wake(task));
    }
}

impl Shared {
    fn push(&self, job: Job) {
        {
            let mut remote = self.remote.lock();
            if remote.closed {
                drop(remote);
                drop(job);
                return;
            }
            remote.jobs.push(job);
        }
        if self.bell.ring() {
            self.notify();
        }
    }

    fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one`, valid for the call's duration, to our eventfd.
        #[allow(unsafe_code)]
        let r = unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if r < 0 {
            // The counter is full (never read: edge-triggered, every write is an event). Empty
            // it and write again.
            let mut n: u64 = 0;
            // SAFETY: reads 8 bytes into `n`, valid for the call's duration.
            #[allow(unsafe_code)]
            unsafe {
                libc::read(
                    self.wake.as_raw_fd(),
                    (&mut n as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                );
                libc::write(
                    self.wake.as_raw_fd(),
                    (&one as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                );
            }
        }
    }
}

impl Handle {
    pub fn new() -> io::Result<Handle> {
        // SAFETY: eventfd takes no pointers; a descriptor it returns is new and ours.
        #[allow(unsafe_code)]
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        #[allow(unsafe_code)]
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Handle(Arc::new(Shared {
            remote: parking_lot::Mutex::new(Remote::default()),
            bell: Doorbell::new(),
            wake,
            stop: AtomicBool::new(false),
        })))
    }

    /// Runs `future` on this executor's worker.
    pub fn spawn<F: Future<Output = ()> + Send + 'static>(&self, future: F) {
        let task = self.task();
        if LOCAL.with(|l| l.home.get()) == Arc::as_ptr(&self.0) as usize {
            LOCAL.with(|l| l.spawned.borrow_mut().push((task, Box::pin(future))));
        } else {
            self.0.push(Job::Spawn(task, Box::pin(future)));
        }
    }

    fn task(&self) -> Arc<Task> {
        Arc::new(Task {
            queued: AtomicBool::new(true),
            home: self.0.clone(),
            slot: AtomicUsize::new(NO_SLOT),
        })
    }

    /// Closes the queue: what is queued and what is spawned from now on is dropped. For a
    /// worker that has ended without [`Handle::run`] closing it (a panic in the loop itself).
    pub fn close(&self) {
        let jobs = {
            let mut remote = self.0.remote.lock();
            remote.closed = true;
            std::mem::take(&mut remote.jobs)
        };
        drop(jobs);
    }

    /// Runs `f` on the worker's loop itself, outside every task's `catch_unwind`.
    #[cfg(test)]
    pub(crate) fn on_loop(&self, f: impl FnOnce() + Send + 'static) {
        self.0.push(Job::OnLoop(Box::new(f)));
    }

    /// Makes [`Handle::run`] return; its tasks are dropped.
    pub fn stop(&self) {
        self.0.stop.store(true, SeqCst);
        if self.0.bell.ring() {
            self.0.notify();
        }
    }

    /// Runs the executor on this thread until [`Handle::stop`], then drops every task left
    /// (with the reactor still in place, so their sockets deregister).
    pub fn run(&self) -> io::Result<()> {
        let reactor = Reactor::new()?;
        reactor.add_wake_fd(self.0.wake.as_raw_fd())?;
        Reactor::enter(reactor.clone());
        LOCAL.with(|l| l.home.set(Arc::as_ptr(&self.0) as usize));
        let mut tasks = Tasks::default();
        let mut events = Events::new();
        let mut incoming = Vec::new();
        loop {
            if self.0.bell.take() {
                std::mem::swap(&mut incoming, &mut self.0.remote.lock().jobs);
                if self.0.stop.load(SeqCst) {
                    break;
                }
                for job in incoming.drain(..) {
                    match job {
                        Job::Spawn(task, future) => tasks.take_in(task, future),
                        Job::Wake(task) => LOCAL.with(|l| l.queue.borrow_mut().push_back(task)),
                        #[cfg(test)]
                        Job::OnLoop(f) => f(),
                    }
                }
            }
            let mut ran = 0;
            while ran < RUN_BEFORE_LOOKING {
                let Some(task) = LOCAL.with(|l| l.queue.borrow_mut().pop_front()) else {
                    break;
                };
                tasks.run(task);
                ran += 1;
                tasks.take_in_spawned();
            }
            if ran == RUN_BEFORE_LOOKING || LOCAL.with(|l| !l.queue.borrow().is_empty()) {
                batch::flush();
                reactor.turn(&mut events, 0);
                continue;
            }
            // The turn's writes go out before the worker looks for events (and maybe sleeps).
            batch::flush();
            if !self.0.bell.may_sleep() {
                continue;
            }
            reactor.turn(&mut events, -1);
            self.0.bell.awake();
        }
        // Dropped here, with this thread still the worker's: a drop that spawns or wakes
        // stays local, and `drop_all` drops what it spawns.
        self.close();
        drop(incoming);
        tasks.drop_all();
        LOCAL.with(|l| l.queue.borrow_mut().clear());
        LOCAL.with(|l| l.spawned.borrow_mut().clear());
        LOCAL.with(|l| l.home.set(0));
        Reactor::leave();
        Ok(())
    }
}

/// The futures of a worker's tasks, by slot.
#[derive(Default)]
struct Tasks {
    /// Grown by a step ([`grow::push`]): 24 bytes a slot, one slot a task.
    slots: Vec<Option<(Arc<Task>, Option<BoxFuture>)>>,
    free: Vec<usize>,
}

impl Tasks {
    fn take_in(&mut self, task: Arc<Task>, future: BoxFuture) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => grow::push(&mut self.slots, None),
        };
        task.slot.store(slot, Relaxed);
        self.slots[slot] = Some((task.clone(), Some(future)));
        // Spawned queued: it runs once.
        LOCAL.with(|l| l.queue.borrow_mut().push_back(task));
    }

    fn take_in_spawned(&mut self) {
        while let Some((task, future)) = LOCAL.with(|l| l.spawned.borrow_mut().pop()) {
            self.take_in(task, future);
        }
    }

    fn run(&mut self, task: Arc<Task>) {
        let slot = task.slot.load(Relaxed);
        let Some(Some((owner, future))) = self.slots.get_mut(slot) else {
            return;
        };
        // A wake of a task that has ended (its slot empty, or another task's now).
        if !Arc::ptr_eq(owner, &task) {
            return;
        }
        let Some(mut fut) = future.take() else {
            return;
        };
        task.queued.store(false, Release);
        let waker = Waker::from(task);
        // A task that panics ends alone (as under tokio): the worker and its other clients go
        // on. The panic hook has printed the message.
        let polled = catch_unwind(AssertUnwindSafe(|| {
            fut.as_mut().poll(&mut Context::from_waker(&waker))
        }));
        let done = match polled {
            Ok(p) => p.is_ready(),
            Err(_) => {
                tracing::error!("a task panicked; it is dropped");
                true
            }
        };
        if done {
            self.slots[slot] = None;
            self.free.push(slot);
            if catch_unwind(AssertUnwindSafe(move || drop(fut))).is_err() {
                tracing::error!("a task panicked while dropped");
            }
        } else if let Some(Some((_, f))) = self.slots.get_mut(slot) {
            *f = Some(fut);
        }
    }

    /// Drops every task's future (some wake others as they go, which then do nothing).
    fn drop_all(&mut self) {
        loop {
            self.take_in_spawned();
            let mut any = false;
            for s in self.slots.iter_mut() {
                if let Some((_, f)) = s.take() {
                    any = true;
                    drop(f);
                }
            }
            if !any && LOCAL.with(|l| l.spawned.borrow().is_empty()) {
                break;
            }
        }
        self.free.clear();
    }
}

/// Runs `future` on this thread's worker, or else on the current tokio runtime; gives it back
/// when there is neither.
pub fn spawn_here<F: Future<Output = ()> + Send + 'static>(future: F) -> Result<(), F> {
    if let Some(h) = LOCAL_HANDLE.with(|h| h.borrow().clone()) {
        h.spawn(future);
        return Ok(());
    }
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(future);
            Ok(())
        }
        Err(_) => Err(future),
    }
}

thread_local! {
    /// This thread's worker executor, for [`spawn_here`].
    static LOCAL_HANDLE: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

/// Runs `handle`'s executor on this thread (see [`Handle::run`]), with [`spawn_here`] spawning
/// onto it; `batch`: hand each turn's writes to the kernel together ([`crate::batch`]) if
/// io_uring allows.
pub fn run_worker(handle: &Handle, batch: bool) -> io::Result<()> {
    LOCAL_HANDLE.with(|h| *h.borrow_mut() = Some(handle.clone()));
    if batch {
        batch::enable();
    }
    let r = handle.run();
    batch::disable();
    LOCAL_HANDLE.with(|h| h.borrow_mut().take());
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A worker thread running a new executor.
    fn worker() -> (Handle, std::thread::JoinHandle<()>) {
        let h = Handle::new().unwrap();
        let runner = {
            let h = h.clone();
            std::thread::spawn(move || run_worker(&h, true).unwrap())
        };
        (h, runner)
    }

    #[test]
    fn runs_spawned_tasks_and_wakes_from_other_threads() {
        let (h, runner) = worker();
        let (tx, rx) = std::sync::mpsc::channel();
        let (otx, orx) = tokio::sync::oneshot::channel::<u32>();
        // Waits on a channel filled from another thread (a remote wake), spawns a task of its
        // own (a local spawn), and reports.
        h.spawn(async move {
            let v = orx.await.unwrap();
            let (itx, irx) = tokio::sync::oneshot::channel::<u32>();
            let _ = spawn_here(async move {
                let _ = itx.send(v + 1);
            });
            tx.send(irx.await.unwrap()).unwrap();
        });
        std::thread::sleep(Duration::from_millis(20));
        otx.send(41).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 42);
        // Stopping drops a task that still waits, and the thread ends.
        let (dtx, drx) = tokio::sync::oneshot::channel::<()>();
        h.spawn(async move {
            std::future::pending::<()>().await;
            drop(dtx);
        });
        h.stop();
        runner.join().unwrap();
        assert!(drx.blocking_recv().is_err(), "the waiting task was dropped");
    }

    #[test]
    fn a_panicking_task_ends_alone_and_jobs_after_stop_are_dropped() {
        let (h, runner) = worker();
        h.spawn(async { panic!("a task's bug") });
        let (tx, rx) = std::sync::mpsc::channel();
        h.spawn(async move { tx.send(7).unwrap() });
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 7);
        h.stop();
        runner.join().unwrap();
        // Spawned onto a stopped worker: dropped at once, not kept.
        let (dtx, drx) = tokio::sync::oneshot::channel::<()>();
        h.spawn(async move {
            let _ = dtx.send(());
        });
        assert!(drx.blocking_recv().is_err(), "the future was dropped unrun");
    }

    #[test]
    fn sockets_on_a_worker_wake_their_task() {
        use std::io::{Read, Write};
        let (h, runner) = worker();
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        h.spawn(async move {
            let s = crate::sock::Socket::new(a).unwrap();
            let mut buf = bytes::BytesMut::with_capacity(64);
            let n = std::future::poll_fn(|cx| s.poll_read_into(cx, &mut buf))
                .await
                .unwrap();
            let _ = std::future::poll_fn(|cx| s.poll_write(cx, &buf[..n])).await;
            tx.send(n).unwrap();
        });
        std::thread::sleep(Duration::from_millis(20));
        b.write_all(b"ping").unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 4);
        let mut back = [0u8; 4];
        b.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"ping");
        h.stop();
        runner.join().unwrap();
    }
}

/// Every interleaving of a push from another thread with a worker going to sleep: the worker
/// either takes the work or is woken for it. Run with `RUSTFLAGS="--cfg corral_loom"` (see the
/// crate's README).
#[cfg(all(test, corral_loom))]
mod loom_tests {
    use super::Doorbell;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::{Arc, Mutex};
    use std::sync::atomic::Ordering::SeqCst;

    #[test]
    fn queued_work_is_taken_or_the_sleeper_is_woken() {
        loom::model(|| {
            let bell = Arc::new(Doorbell::new());
            let queue = Arc::new(Mutex::new(Vec::new()));
            let woken = Arc::new(AtomicBool::new(false));
            let pusher = {
                let (bell, queue, woken) = (bell.clone(), queue.clone(), woken.clone());
                loom::thread::spawn(move || {
                    queue.lock().unwrap().push(1);
                    if bell.ring() {
                        woken.store(true, SeqCst);
                    }
                })
            };
            // The worker's loop: take what was announced, then wait unless more came.
            let mut taken = 0;
            loop {
                if bell.take() {
                    taken += queue.lock().unwrap().drain(..).count();
                }
                if bell.may_sleep() {
                    break;
                }
            }
            pusher.join().unwrap();
            assert!(
                taken == 1 || woken.load(SeqCst),
                "asleep with work queued and no wake-up"
            );
        });
    }
}
