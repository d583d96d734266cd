// The ping-pong of mini_pp on an executor with what a real worker needs: Send tasks, wakers that
// may be woken from any thread (an Arc per task, a `queued` flag, a shared queue and an eventfd
// for wakes from elsewhere), and socket readiness and waiters that other threads may touch.
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io::{Read, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::ThreadId;

use wakecost::{Duplex, Epoll};

/// What other threads see of a worker: its queue for their wakes and the eventfd that wakes it.
struct Shared {
    owner: ThreadId,
    remote: Mutex<Vec<usize>>,
    eventfd: i32,
}

thread_local! {
    static LOCAL: RefCell<VecDeque<usize>> = RefCell::new(VecDeque::with_capacity(64));
    static HERE: Cell<Option<ThreadId>> = const { Cell::new(None) };
}

struct Task {
    id: usize,
    queued: AtomicBool,
    shared: Arc<Shared>,
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        if HERE.with(|h| h.get()) == Some(self.shared.owner) {
            LOCAL.with(|q| q.borrow_mut().push_back(self.id));
        } else {
            self.shared.remote.lock().unwrap().push(self.id);
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a valid u64 to an eventfd this program owns.
            unsafe { libc::write(self.shared.eventfd, (&one as *const u64).cast(), 8) };
        }
    }
}

/// A socket's readiness and the task waiting on it; any thread may look.
struct Slot {
    readable: AtomicBool,
    waiter: Mutex<Option<Waker>>,
}

struct Sock {
    s: std::net::TcpStream,
    slot: Arc<Slot>,
}

impl Duplex for Sock {
    async fn read(&mut self, buf: &mut [u8]) -> usize {
        poll_fn(|cx| {
            if self.slot.readable.load(Ordering::Acquire) {
                match self.s.read(buf) {
                    Ok(k) => {
                        if k < buf.len() {
                            self.slot.readable.store(false, Ordering::Release);
                        }
                        return Poll::Ready(k);
                    }
                    Err(_) => self.slot.readable.store(false, Ordering::Release),
                }
            }
            let mut w = self.slot.waiter.lock().unwrap();
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
            drop(w);
            // An event may have come between the read and the registration.
            if self.slot.readable.load(Ordering::Acquire) {
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        })
        .await
    }
    fn write(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }
}

type BoxedTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The eventfd's token.
const WAKES: u64 = u64::MAX;

fn main() {
    let n = wakecost::rounds();
    HERE.with(|h| h.set(Some(std::thread::current().id())));
    let ep = Epoll::new();
    // SAFETY: a plain system call.
    let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
    let shared = Arc::new(Shared {
        owner: std::thread::current().id(),
        remote: Mutex::new(Vec::new()),
        eventfd: efd,
    });
    ep.add(&efd, WAKES);
    let mut slots = Vec::new();
    let mut socks = Vec::new();
    let (a, b) = wakecost::pair();
    for (i, s) in [a, b].into_iter().enumerate() {
        let slot = Arc::new(Slot {
            readable: AtomicBool::new(false),
            waiter: Mutex::new(None),
        });
        ep.add(&s, i as u64);
        slots.push(slot.clone());
        socks.push(Sock { s, slot });
    }
    let b = socks.pop().unwrap();
    let a = socks.pop().unwrap();
    let mut tasks: Vec<Option<(BoxedTask, Arc<Task>, Waker)>> = Vec::new();
    let futures: [BoxedTask; 2] = [Box::pin(wakecost::echo(b)), Box::pin(wakecost::ping(a, n))];
    for (id, f) in futures.into_iter().enumerate() {
        let t = Arc::new(Task {
            id,
            queued: AtomicBool::new(true),
            shared: shared.clone(),
        });
        let w = Waker::from(t.clone());
        tasks.push(Some((f, t, w)));
        LOCAL.with(|q| q.borrow_mut().push_back(id));
    }
    let mut live = 2;
    let mut evs = wakecost::events();
    while live > 0 {
        while let Some(id) = LOCAL.with(|q| q.borrow_mut().pop_front()) {
            let Some((f, t, w)) = tasks[id].as_mut() else {
                continue;
            };
            t.queued.store(false, Ordering::Release);
            if f.as_mut().poll(&mut Context::from_waker(w)).is_ready() {
                tasks[id] = None;
                live -= 1;
            }
        }
        if live == 0 {
            break;
        }
        for token in ep.wait(&mut evs) {
            if token == WAKES {
                let mut v = 0u64;
                // SAFETY: reads 8 bytes into a valid u64 from the eventfd this program owns.
                unsafe { libc::read(efd, (&mut v as *mut u64).cast(), 8) };
                let ids = std::mem::take(&mut *shared.remote.lock().unwrap());
                LOCAL.with(|q| q.borrow_mut().extend(ids));
                continue;
            }
            let slot = &slots[token as usize];
            slot.readable.store(true, Ordering::Release);
            if let Some(w) = slot.waiter.lock().unwrap().take() {
                w.wake();
            }
        }
    }
}
