//! Socket readiness for the data path: an epoll set per worker thread, each socket registered
//! in it once (edge-triggered), and the task waiting on a socket woken when epoll reports it.
//! The worker's executor ([`super::exec`]) waits in [`Reactor::turn`]; on other threads (the
//! main thread, the timer thread, tests) sockets go to one background reactor thread instead.
//!
//! A socket's readiness is atomic and its waiters are [`AtomicWaker`]s, so a socket may be
//! polled from any thread: only the thread that runs its reactor's turns reports events.

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll};

use atomic_waker::AtomicWaker;

/// A read would find something: data, the peer's close or an error.
pub const READ: usize = 1;
/// A write would take something (or fail).
pub const WRITE: usize = 2;
/// The peer closed its side, or the socket failed: reads find that at the end, whatever a read
/// before found. Never cleared (edge-triggered epoll reports a close once).
const READ_CLOSED: usize = 4;
/// The socket hung up or failed: writes fail. Never cleared.
const WRITE_CLOSED: usize = 8;
const BITS: usize = READ | WRITE | READ_CLOSED | WRITE_CLOSED;
/// Added to a socket's state with every event, so that a clear based on an older look loses.
const TICK: usize = 16;

/// The bits that make `dir` ready: its own, or the close that way.
#[inline]
fn ready_bits(dir: usize) -> usize {
    if dir == READ {
        READ | READ_CLOSED
    } else {
        WRITE | WRITE_CLOSED
    }
}

/// The epoll key of the executor's wake-up descriptor; sockets' keys are slot and generation.
pub const WAKE_KEY: u64 = u64::MAX;

/// What epoll last said about one socket, and the tasks waiting to read and to write.
pub struct Readiness {
    /// [`READ`] | [`WRITE`], and above them a count of events.
    state: AtomicUsize,
    reader: AtomicWaker,
    writer: AtomicWaker,
    /// Registered for writability too (only once a write would have blocked: a Unix socket
    /// reports writability every time its peer reads, which would wake the worker for nothing).
    write_interest: AtomicBool,
    /// The registration (the socket's descriptor and its epoll key), for
    /// [`Readiness::want_write`], [`Readiness::drain_held`] and the batch.
    pub(super) fd: RawFd,
    key: u64,
    reactor: Weak<Reactor>,
    /// The socket has a write in this turn's batch ([`super::batch`]).
    pub(super) staged: AtomicBool,
    /// Bytes a batch took but the socket had no room for: they go before anything else, when
    /// the socket is writable again (then from [`Reactor::turn`] if no task writes first).
    held: parking_lot::Mutex<Vec<u8>>,
    has_held: AtomicBool,
    /// The registration is gone and the descriptor may be another socket's by now.
    pub(super) gone: AtomicBool,
}

impl Readiness {
    fn new(fd: RawFd, key: u64, reactor: Weak<Reactor>) -> Readiness {
        // Both ways assumed ready: the first read or write finds out (as epoll's first report
        // would).
        Readiness {
            state: AtomicUsize::new(READ | WRITE),
            reader: AtomicWaker::new(),
            writer: AtomicWaker::new(),
            write_interest: AtomicBool::new(false),
            fd,
            key,
            reactor,
            staged: AtomicBool::new(false),
            held: parking_lot::Mutex::new(Vec::new()),
            has_held: AtomicBool::new(false),
            gone: AtomicBool::new(false),
        }
    }

    /// Asks for writability events too, from now on (a write found the socket full). The
    /// change itself reports the socket if it is writable already.
    pub fn want_write(&self) -> io::Result<()> {
        if self.write_interest.swap(true, Relaxed) {
            return Ok(());
        }
        let Some(reactor) = self.reactor.upgrade() else {
            return Ok(());
        };
        let events = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        let r = reactor.ctl(libc::EPOLL_CTL_MOD, self.fd, events, self.key);
        if r.is_err() {
            self.write_interest.store(false, Relaxed);
        }
        r
    }

    /// Whether bytes a batch could not send wait for room ([`Readiness::hold`]).
    #[inline]
    pub fn has_held(&self) -> bool {
        self.has_held.load(Acquire)
    }

    /// Keeps `rest`, the part of a batched write the socket had no room for: writes wait (the
    /// socket reads as not writable) until it has gone out. `seen`: the state before the write.
    pub(super) fn hold(&self, rest: &[u8], seen: usize) {
        {
            let mut held = self.held.lock();
            held.extend_from_slice(rest);
            self.has_held.store(true, Release);
        }
        self.clear(seen, WRITE);
        if let Err(e) = self.want_write() {
            tracing::debug!(error = %e, "could not ask for writability");
        }
    }

    /// What is held, taken away (the socket moves to another reactor with it).
    pub(super) fn take_held(&self) -> Vec<u8> {
        let mut held = self.held.lock();
        self.has_held.store(false, Release);
        std::mem::take(&mut *held)
    }

    /// Sends what is held; true when nothing is left. What stays is sent on the next
    /// writability event.
    pub(super) fn drain_held(&self) -> bool {
        if !self.has_held() {
            return true;
        }
        let mut held = self.held.lock();
        while !held.is_empty() {
            let seen = self.now();
            // SAFETY: the descriptor is the registered socket's, open while its registration
            // lives (the registration is dropped before the socket is closed), which it does
            // while anyone can reach this readiness to call this.
            #[allow(unsafe_code)]
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) };
            match super::direct::send(fd, &held) {
                Ok(n) if n > 0 => drop(held.drain(..n)),
                Ok(_) => held.clear(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.clear(seen, WRITE);
                    return false;
                }
                // The socket failed: its reader finds out; the bytes have nowhere to go.
                Err(_) => held.clear(),
            }
        }
        *held = Vec::new();
        self.has_held.store(false, Release);
        true
    }

    fn set(&self, bits: usize) {
        let mut cur = self.state.load(Relaxed);
        loop {
            let new = ((cur & !BITS).wrapping_add(TICK)) | (cur & BITS) | bits;
            match self.state.compare_exchange_weak(cur, new, AcqRel, Relaxed) {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
        if bits & (READ | READ_CLOSED) != 0 {
            self.reader.wake();
        }
        if bits & (WRITE | WRITE_CLOSED) != 0 {
            self.writer.wake();
        }
    }

    /// The state, when it says `dir` is ready; otherwise the task is registered to be woken
    /// by the next event that does.
    #[inline]
    pub fn poll(&self, cx: &mut Context<'_>, dir: usize) -> Poll<usize> {
        let want = ready_bits(dir);
        let cur = self.state.load(Acquire);
        if cur & want != 0 {
            return Poll::Ready(cur);
        }
        let waiter = if dir == READ {
            &self.reader
        } else {
            &self.writer
        };
        waiter.register(cx.waker());
        let cur = self.state.load(Acquire);
        if cur & want != 0 {
            Poll::Ready(cur)
        } else {
            Poll::Pending
        }
    }

    /// The state now, without registering anything.
    #[inline]
    pub fn now(&self) -> usize {
        self.state.load(Acquire)
    }

    /// Whether `state` (from [`Readiness::now`] or [`Readiness::poll`]) says `dir` is ready.
    #[inline]
    pub fn is_ready(state: usize, dir: usize) -> bool {
        state & ready_bits(dir) != 0
    }

    /// Clears `dir` (the socket would block that way) unless an event came since `seen` was
    /// read. A close stays.
    #[inline]
    pub fn clear(&self, seen: usize, dir: usize) {
        let _ = self
            .state
            .compare_exchange(seen, seen & !dir, AcqRel, Relaxed);
    }
}

struct Slot {
    generation: u32,
    ready: Option<Arc<Readiness>>,
}

#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

/// One epoll set and the sockets registered in it.
pub struct Reactor {
    epfd: OwnedFd,
    /// Locked once per turn to hand events out, and to register or deregister a socket.
    slots: parking_lot::Mutex<Slots>,
}

thread_local! {
    /// The reactor of the worker running on this thread.
    static CURRENT: RefCell<Option<Arc<Reactor>>> = const { RefCell::new(None) };
    /// Its address, for [`Registration::is_local`].
    static CURRENT_ADDR: Cell<usize> = const { Cell::new(0) };
}

/// The reactor for threads that run none: a thread of its own, started on first use (`None`
/// if it could not be started).
static BACKGROUND: OnceLock<Option<Arc<Reactor>>> = OnceLock::new();

impl Reactor {
    pub fn new() -> io::Result<Arc<Reactor>> {
        // SAFETY: epoll_create1 takes no pointers; a descriptor it returns is new and ours.
        #[allow(unsafe_code)]
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        #[allow(unsafe_code)]
        let epfd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Arc::new(Reactor {
            epfd,
            slots: parking_lot::Mutex::new(Slots::default()),
        }))
    }

    /// Makes `reactor` the one sockets created on this thread register with (a worker's).
    pub fn enter(reactor: Arc<Reactor>) {
        CURRENT_ADDR.with(|a| a.set(Arc::as_ptr(&reactor) as usize));
        CURRENT.with(|c| *c.borrow_mut() = Some(reactor));
    }

    /// Leaves this thread with no reactor of its own again.
    pub fn leave() {
        CURRENT_ADDR.with(|a| a.set(0));
        CURRENT.with(|c| c.borrow_mut().take());
    }

    /// The reactor for a socket made on this thread: the worker's, or the background one.
    pub fn current() -> io::Result<Arc<Reactor>> {
        if let Some(r) = CURRENT.with(|c| c.borrow().clone()) {
            return Ok(r);
        }
        BACKGROUND
            .get_or_init(|| Reactor::background().ok())
            .clone()
            .ok_or_else(|| io::Error::other("the background reactor thread could not start"))
    }

    fn background() -> io::Result<Arc<Reactor>> {
        let r = Reactor::new()?;
        let turns = r.clone();
        std::thread::Builder::new()
            .name("pgcorral-reactor".into())
            .spawn(move || {
                let mut events = Events::new();
                loop {
                    turns.turn(&mut events, -1);
                }
            })?;
        Ok(r)
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, key: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: key };
        // SAFETY: `ev` is a valid event for the call's duration; epoll_ctl reads it only.
        #[allow(unsafe_code)]
        let r = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Adds the executor's wake-up descriptor (reported as [`WAKE_KEY`]).
    pub fn add_wake_fd(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_ADD,
            fd,
            (libc::EPOLLIN | libc::EPOLLET) as u32,
            WAKE_KEY,
        )
    }

    /// Registers `fd` for readability, edge-triggered. The caller keeps `fd` open until the
    /// registration is dropped.
    pub fn register(self: &Arc<Reactor>, fd: RawFd) -> io::Result<Registration> {
        let (key, ready) = {
            let mut s = self.slots.lock();
            let idx = match s.free.pop() {
                Some(i) => i,
                None => {
                    s.slots.push(Slot {
                        generation: 0,
                        ready: None,
                    });
                    (s.slots.len() - 1) as u32
                }
            };
            let slot = &mut s.slots[idx as usize];
            slot.generation = slot.generation.wrapping_add(1);
            let key = (u64::from(slot.generation) << 32) | u64::from(idx);
            let ready = Arc::new(Readiness::new(fd, key, Arc::downgrade(self)));
            slot.ready = Some(ready.clone());
            (key, ready)
        };
        let events = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        if let Err(e) = self.ctl(libc::EPOLL_CTL_ADD, fd, events, key) {
            self.free(key);
            return Err(e);
        }
        Ok(Registration {
            reactor: self.clone(),
            ready,
        })
    }

    fn free(&self, key: u64) {
        let mut s = self.slots.lock();
        let idx = key as u32;
        if let Some(slot) = s.slots.get_mut(idx as usize) {
            if u64::from(slot.generation) == key >> 32 && slot.ready.take().is_some() {
                s.free.push(idx);
            }
        }
    }

    /// Waits up to `timeout_ms` (−1: until something happens, 0: not at all) for events and
    /// wakes the tasks waiting on them. True when the wake-up descriptor fired.
    pub fn turn(&self, events: &mut Events, timeout_ms: i32) -> bool {
        let buf = &mut events.0;
        // SAFETY: `buf` holds `buf.len()` initialised events for the kernel to overwrite; a null
        // signal mask makes epoll_pwait an epoll_wait. By system call number, as the data path's
        // reads and writes (`super::direct`): glibc's wrapper is a thread-cancellation point.
        #[allow(unsafe_code)]
        let n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait,
                self.epfd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len() as libc::c_int,
                timeout_ms,
                std::ptr::null::<libc::sigset_t>(),
                std::mem::size_of::<libc::sigset_t>(),
            )
        };
        if n <= 0 {
            return false;
        }
        let mut woke = false;
        let s = self.slots.lock();
        for ev in &buf[..n as usize] {
            let (key, flags) = (ev.u64, ev.events as libc::c_int);
            if key == WAKE_KEY {
                woke = true;
                continue;
            }
            let Some(slot) = s.slots.get(key as u32 as usize) else {
                continue;
            };
            if u64::from(slot.generation) != key >> 32 {
                continue;
            }
            let Some(ready) = &slot.ready else {
                continue;
            };
            let mut bits = 0;
            if flags & libc::EPOLLIN != 0 {
                bits |= READ;
            }
            if flags & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
                bits |= READ_CLOSED;
            }
            if flags & libc::EPOLLOUT != 0 {
                bits |= WRITE;
            }
            if flags & (libc::EPOLLHUP | libc::EPOLLERR) != 0 {
                bits |= WRITE_CLOSED;
            }
            ready.set(bits);
            if bits & WRITE != 0 && ready.has_held() {
                // Whether or not a task writes again, what a batch left goes out now.
                ready.drain_held();
            }
        }
        woke
    }
}

/// Room for the events of one turn.
pub struct Events(Vec<libc::epoll_event>);

impl Events {
    pub fn new() -> Events {
        Events(vec![libc::epoll_event { events: 0, u64: 0 }; 256])
    }
}

impl Default for Events {
    fn default() -> Events {
        Events::new()
    }
}

/// A socket's place in a reactor; dropping it takes the socket out of the epoll set (drop it
/// before closing the socket).
pub struct Registration {
    reactor: Arc<Reactor>,
    /// Also the socket's descriptor and key.
    ready: Arc<Readiness>,
}

impl Registration {
    #[inline]
    pub fn readiness(&self) -> &Arc<Readiness> {
        &self.ready
    }

    /// Asks for writability events too, from now on (the caller found the socket full).
    pub fn want_write(&self) -> io::Result<()> {
        self.ready.want_write()
    }

    /// Whether this thread runs the reactor the socket is in: then no event can come between a
    /// task's registration and its look at the readiness, so a read that found nothing leaves
    /// the task registered until the next event (elsewhere a wake racing the registration may
    /// consume it early).
    #[inline]
    pub fn is_local(&self) -> bool {
        CURRENT_ADDR.with(Cell::get) == Arc::as_ptr(&self.reactor) as usize
    }

    /// Whether writability events are asked for already.
    #[inline]
    pub fn wants_write(&self) -> bool {
        self.ready.write_interest.load(Relaxed)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // A write in this thread's batch goes out while the descriptor is still the socket's;
        // then a flush anywhere skips it, and what the socket held has a last try.
        if self.ready.staged.load(Relaxed) {
            super::batch::flush();
        }
        self.ready.gone.store(true, Relaxed);
        self.ready.drain_held();
        let _ = self.reactor.ctl(libc::EPOLL_CTL_DEL, self.ready.fd, 0, 0);
        self.reactor.free(self.ready.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use std::task::Waker;

    #[test]
    fn events_set_readiness_and_a_stale_clear_loses() {
        let r = Reactor::new().unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        let reg = r.register(a.as_raw_fd()).unwrap();
        let ready = reg.readiness();
        let mut events = Events::new();
        // Assumed ready at first; a read that would block clears it.
        let seen = ready.now();
        assert_eq!(seen & BITS, READ | WRITE);
        ready.clear(seen, READ);
        assert_eq!(ready.now() & READ, 0);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(ready.poll(&mut cx, READ).is_pending());
        // An event between a look and its clear wins over the clear.
        b.write_all(b"x").unwrap();
        let before = ready.now();
        r.turn(&mut events, 1000);
        assert_eq!(ready.now() & READ, READ);
        ready.clear(before, READ);
        assert_eq!(
            ready.now() & READ,
            READ,
            "a clear from before the event is dropped"
        );
        assert!(ready.poll(&mut cx, READ).is_ready());
        drop(reg);
        assert!(r.slots.lock().free.contains(&0));
    }
}
