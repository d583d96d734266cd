//! Socket readiness for the data path: an epoll set per worker thread, each socket registered
//! in it once (edge-triggered), and the task waiting on a socket woken when epoll reports it.
//! The worker's executor ([`crate::exec`]) waits in [`Reactor::turn`]; on other threads (the
//! main thread, the timer thread, tests) sockets go to one background reactor thread instead.
//!
//! A socket's readiness is atomic and its waiters are [`AtomicWaker`]s, so a socket may be
//! polled from any thread: only the thread that runs its reactor's turns reports events.

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering, Ordering::*};
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll};

use atomic_waker::AtomicWaker;
use crossbeam_utils::atomic::AtomicCell;

use crate::batch;
use crate::direct::send;
use crate::grow;
use crate::sync;

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

// The bits of a readiness's `flags`: each changes a few times in a socket's life at most, so
// they share one byte. Each is read and changed with the ordering it had as an `AtomicBool` of
// its own (a store is now a `fetch_or` or `fetch_and`, which orders at least as much).
/// Registered for writability too (only once a write would have blocked: a Unix socket reports
/// writability every time its peer reads, which would wake the worker for nothing).
const WRITE_INTEREST: u8 = 1;
/// Bytes wait in `held` (read without its lock, by every write).
const HAS_HELD: u8 = 2;
/// The registration is gone and the descriptor may be another socket's by now.
const GONE: u8 = 4;

/// What epoll last said about one socket, and the tasks waiting to read and to write. One per
/// registered socket (a client's, a server's): at most 88 bytes, so that with its `Arc` counts
/// it takes a 112-byte block from glibc rather than a 128-byte one.
pub struct Readiness {
    /// [`READ`] | [`WRITE`], and above them a count of events.
    state: ReadyWord,
    reader: AtomicWaker,
    writer: AtomicWaker,
    /// The socket's descriptor, owned here: it closes when the last holder of this readiness
    /// lets go (the socket, a write in a batch), so no late write can reach a descriptor that
    /// another socket has been given since.
    fd: OwnedFd,
    key: u64,
    reactor: Weak<Reactor>,
    /// The socket has a write in this turn's batch ([`crate::batch`]). Not in `flags`: it is
    /// set and cleared with every batched write, a plain store here where a bit would take an
    /// atomic read-modify-write.
    pub(super) staged: AtomicBool,
    /// [`WRITE_INTEREST`], [`HAS_HELD`], [`GONE`].
    flags: AtomicU8,
    /// Bytes a batch took but the socket had no room for: they go before anything else, when
    /// the socket is writable again (then from [`Reactor::turn`] if no task writes first).
    /// Boxed: rarely any, and every socket's registration has the field (one word, not three).
    /// Read and changed only under `held_lock` ([`Readiness::lock_held`]), a lock of one byte
    /// that packs beside `flags`: the two take 9 bytes, where a mutex around the box takes 16
    /// (its one-byte lock padded to the box's alignment).
    held: AtomicCell<HeldBytes>,
    /// Taken to read or change `held`.
    held_lock: parking_lot::Mutex<()>,
}

impl Readiness {
    fn new(fd: OwnedFd, key: u64, reactor: Weak<Reactor>) -> Readiness {
        // Both ways assumed ready: the first read or write finds out (as epoll's first report
        // would).
        Readiness {
            state: ReadyWord::new(READ | WRITE),
            reader: AtomicWaker::new(),
            writer: AtomicWaker::new(),
            fd,
            key,
            reactor,
            staged: AtomicBool::new(false),
            flags: AtomicU8::new(0),
            held: AtomicCell::new(None),
            held_lock: parking_lot::Mutex::new(()),
        }
    }

    /// Whether `flag` (one of `flags`' bits) is set.
    #[inline]
    fn flag(&self, flag: u8, order: Ordering) -> bool {
        self.flags.load(order) & flag != 0
    }

    /// Sets `flag` (one of `flags`' bits) to `on`; whether it was set before.
    #[inline]
    fn set_flag(&self, flag: u8, on: bool, order: Ordering) -> bool {
        let before = if on {
            self.flags.fetch_or(flag, order)
        } else {
            self.flags.fetch_and(!flag, order)
        };
        before & flag != 0
    }

    /// The registration is gone and the descriptor may be another socket's by now.
    #[inline]
    pub(super) fn is_gone(&self) -> bool {
        self.flag(GONE, Relaxed)
    }

    /// The held bytes, with `held_lock` taken until the guard is dropped.
    fn lock_held(&self) -> HeldGuard<'_> {
        let lock = self.held_lock.lock();
        HeldGuard {
            bytes: self.held.take(),
            word: &self.held,
            _lock: lock,
        }
    }

    /// Asks for writability events too, from now on (a write found the socket full). The
    /// change itself reports the socket if it is writable already.
    pub fn want_write(&self) -> io::Result<()> {
        if self.set_flag(WRITE_INTEREST, true, Relaxed) {
            return Ok(());
        }
        let Some(reactor) = self.reactor.upgrade() else {
            return Ok(());
        };
        let events = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        let r = reactor.ctl(libc::EPOLL_CTL_MOD, self.fd.as_raw_fd(), events, self.key);
        if r.is_err() {
            self.set_flag(WRITE_INTEREST, false, Relaxed);
        }
        r
    }

    /// The socket's descriptor.
    #[inline]
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether bytes a batch could not send wait for room ([`Readiness::hold`]).
    #[inline]
    pub fn has_held(&self) -> bool {
        self.flag(HAS_HELD, Acquire)
    }

    /// Keeps `rest`, the part of a batched write the socket had no room for: writes wait (the
    /// socket reads as not writable) until it has gone out. `seen`: the state before the write.
    pub(super) fn hold(&self, rest: &[u8], seen: usize) {
        {
            let mut held = self.lock_held();
            held.get_or_insert_default().extend_from_slice(rest);
            self.set_flag(HAS_HELD, true, Release);
        }
        self.clear(seen, WRITE);
        if let Err(e) = self.want_write() {
            tracing::debug!(error = %e, "could not ask for writability");
        }
    }

    /// What is held, taken away (the socket moves to another reactor with it).
    pub(super) fn take_held(&self) -> Vec<u8> {
        let mut held = self.lock_held();
        self.set_flag(HAS_HELD, false, Release);
        held.take().map(|h| *h).unwrap_or_default()
    }

    /// Sends what is held; true when nothing is left. What stays is sent on the next
    /// writability event.
    pub(super) fn drain_held(&self) -> bool {
        if !self.has_held() {
            return true;
        }
        let mut slot = self.lock_held();
        let held = slot.get_or_insert_default();
        while !held.is_empty() {
            let seen = self.now();
            match send(self.fd(), held) {
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
        *slot = None;
        self.set_flag(HAS_HELD, false, Release);
        true
    }

    fn set(&self, bits: usize) {
        self.state.set(bits);
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
        let cur = self.state.now();
        if cur & want != 0 {
            return Poll::Ready(cur);
        }
        let waiter = if dir == READ {
            &self.reader
        } else {
            &self.writer
        };
        waiter.register(cx.waker());
        let cur = self.state.now();
        if cur & want != 0 {
            Poll::Ready(cur)
        } else {
            Poll::Pending
        }
    }

    /// The state now, without registering anything.
    #[inline]
    pub fn now(&self) -> usize {
        self.state.now()
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
        self.state.clear(seen, dir);
    }
}

/// What a readiness's `held` holds: a `Vec` boxed, so that a pointer to it fits one word
/// (`AtomicCell` of a word-sized type is a plain atomic word, no lock of its own).
#[allow(clippy::box_collection)]
type HeldBytes = Option<Box<Vec<u8>>>;

/// A readiness's held bytes, taken out of their word while its lock is held; put back when
/// this is dropped, before the lock is let go (fields are dropped after `drop`).
struct HeldGuard<'a> {
    bytes: HeldBytes,
    word: &'a AtomicCell<HeldBytes>,
    _lock: parking_lot::MutexGuard<'a, ()>,
}

impl std::ops::Deref for HeldGuard<'_> {
    type Target = HeldBytes;

    fn deref(&self) -> &Self::Target {
        &self.bytes
    }
}

impl std::ops::DerefMut for HeldGuard<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.bytes
    }
}

impl Drop for HeldGuard<'_> {
    fn drop(&mut self) {
        self.word.store(self.bytes.take());
    }
}

/// A socket's readiness bits and, above them, a count of the events that set them: an event
/// never loses to a clear made on an older look (the loom model `loom_tests` checks it).
struct ReadyWord(sync::AtomicUsize);

impl ReadyWord {
    fn new(bits: usize) -> ReadyWord {
        ReadyWord(sync::AtomicUsize::new(bits))
    }

    /// An event: adds `bits` and counts one more event.
    fn set(&self, bits: usize) {
        let mut cur = self.0.load(Relaxed);
        loop {
            let new = ((cur & !BITS).wrapping_add(TICK)) | (cur & BITS) | bits;
            match self.0.compare_exchange_weak(cur, new, AcqRel, Relaxed) {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
    }

    #[inline]
    fn now(&self) -> usize {
        self.0.load(Acquire)
    }

    /// Clears `dir` unless the word changed since `seen` was read from it.
    #[inline]
    fn clear(&self, seen: usize, dir: usize) {
        let _ = self.0.compare_exchange(seen, seen & !dir, AcqRel, Relaxed);
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

    /// Registers `fd` for readability, edge-triggered; the registration's readiness owns it.
    pub fn register(self: &Arc<Reactor>, fd: OwnedFd) -> io::Result<Registration> {
        let raw = fd.as_raw_fd();
        let (key, ready) = {
            let mut s = self.slots.lock();
            let idx = match s.free.pop() {
                Some(i) => i,
                None => grow::push(
                    &mut s.slots,
                    Slot {
                        generation: 0,
                        ready: None,
                    },
                ) as u32,
            };
            let slot = &mut s.slots[idx as usize];
            slot.generation = slot.generation.wrapping_add(1);
            let key = (u64::from(slot.generation) << 32) | u64::from(idx);
            let ready = Arc::new(Readiness::new(fd, key, Arc::downgrade(self)));
            slot.ready = Some(ready.clone());
            (key, ready)
        };
        let events = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        if let Err(e) = self.ctl(libc::EPOLL_CTL_ADD, raw, events, key) {
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
        // reads and writes (`crate::direct`): glibc's wrapper is a thread-cancellation point.
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

/// A socket's place in a reactor, and through its readiness the socket's descriptor; dropping
/// it takes the socket out of the epoll set, and closes it once no batch holds a write of it.
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
        self.ready.flag(WRITE_INTEREST, Relaxed)
    }

    /// Leaves the reactor and gives the descriptor back (to register it with another). Fails
    /// only if something else still holds the readiness.
    pub fn into_fd(self) -> io::Result<OwnedFd> {
        let ready = self.ready.clone();
        drop(self);
        Arc::try_unwrap(ready)
            .map(|r| r.fd)
            .map_err(|_| io::Error::other("the socket's readiness is still held"))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // A write in this thread's batch goes out before the socket leaves (it was taken as
        // written); then a flush anywhere skips it, and what the socket held has a last try.
        if self.ready.staged.load(Relaxed) {
            batch::flush();
        }
        self.ready.set_flag(GONE, true, Relaxed);
        self.ready.drain_held();
        let _ = (self.reactor).ctl(libc::EPOLL_CTL_DEL, self.ready.fd.as_raw_fd(), 0, 0);
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
        let reg = r.register(a.into()).unwrap();
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

    /// One per registered socket (a client's, a server's). 88 bytes and the `Arc`'s two counts
    /// take a 112-byte block from glibc; 89 would take 128. Raise the bound only knowingly.
    #[test]
    fn a_readiness_stays_small() {
        let size = std::mem::size_of::<Readiness>();
        assert!(size <= 88, "Readiness: {size} bytes");
    }

    #[test]
    fn held_bytes_add_up_until_taken_or_sent() {
        let r = Reactor::new().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        let reg = r.register(a.into()).unwrap();
        let ready = reg.readiness();
        assert!(!ready.has_held());
        ready.hold(b"ab", ready.now());
        ready.hold(b"cd", ready.now());
        assert!(ready.has_held());
        assert_eq!(ready.take_held(), b"abcd");
        assert!(!ready.has_held());
        assert!(ready.take_held().is_empty());
        // Sent when the socket has room, and nothing is left.
        ready.hold(b"ef", ready.now());
        assert!(ready.drain_held());
        assert!(!ready.has_held());
        let mut got = [0u8; 2];
        std::io::Read::read_exact(&mut &b, &mut got).unwrap();
        assert_eq!(&got, b"ef");
        assert!(reg.wants_write(), "holding asked for writability");
    }
}

/// Every interleaving of an event with a task's look, failed read and clear, and of two events:
/// an event after the look survives the clear, and no event's bits are lost. Run with
/// `RUSTFLAGS="--cfg corral_loom"` (see the crate's README).
#[cfg(all(test, corral_loom))]
mod loom_tests {
    use super::{ReadyWord, BITS, READ, WRITE};
    use loom::sync::Arc;

    #[test]
    fn an_event_after_the_look_survives_the_clear() {
        loom::model(|| {
            let word = Arc::new(ReadyWord::new(0));
            let event = {
                let word = word.clone();
                loom::thread::spawn(move || word.set(READ))
            };
            // A task looks, its read finds nothing, and it clears what it saw.
            let seen = word.now();
            word.clear(seen, READ);
            event.join().unwrap();
            let event_seen = seen & !BITS != 0;
            assert!(
                word.now() & READ != 0 || event_seen,
                "an event after the look was lost"
            );
        });
    }

    #[test]
    fn concurrent_events_keep_all_their_bits() {
        loom::model(|| {
            let word = Arc::new(ReadyWord::new(0));
            let other = {
                let word = word.clone();
                loom::thread::spawn(move || word.set(WRITE))
            };
            word.set(READ);
            other.join().unwrap();
            assert_eq!(word.now() & (READ | WRITE), READ | WRITE);
        });
    }
}
