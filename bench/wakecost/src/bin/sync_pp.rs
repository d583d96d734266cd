// The ping-pong of mini_pp on an executor with what a real worker needs: Send tasks, wakers that
// may be woken from any thread (an Arc per task, a `queued` flag, a shared queue and an eventfd
// for wakes from elsewhere), and socket readiness and waiters that other threads may touch.
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::ThreadId;

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

impl Sock {
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

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(100_000);
    HERE.with(|h| h.set(Some(std::thread::current().id())));
    // SAFETY (all the libc calls below): plain system calls on descriptors this program owns,
    // with valid buffers.
    let ep = unsafe { libc::epoll_create1(0) };
    let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
    let shared = Arc::new(Shared {
        owner: std::thread::current().id(),
        remote: Mutex::new(Vec::new()),
        eventfd: efd,
    });
    let mut ev = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLET) as u32,
        u64: u64::MAX,
    };
    unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, efd, &mut ev) };
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    let mut slots = Vec::new();
    let mut socks = Vec::new();
    for (i, s) in [a, b].into_iter().enumerate() {
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
        let slot = Arc::new(Slot {
            readable: AtomicBool::new(false),
            waiter: Mutex::new(None),
        });
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: i as u64,
        };
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, s.as_raw_fd(), &mut ev) };
        slots.push(slot.clone());
        socks.push(Sock { s, slot });
    }
    let mut b = socks.pop().unwrap();
    let mut a = socks.pop().unwrap();
    let echo = async move {
        let mut buf = [0u8; 64];
        loop {
            let k = b.read(&mut buf).await;
            if k == 0 {
                break;
            }
            b.write(&buf[..k]);
        }
    };
    let ping = async move {
        let mut buf = [0u8; 64];
        for _ in 0..n {
            a.write(&[1u8; 64]);
            let mut got = 0;
            while got < 64 {
                got += a.read(&mut buf[got..]).await;
            }
        }
        drop(a);
    };
    let mut tasks: Vec<Option<(BoxedTask, Arc<Task>, Waker)>> = Vec::new();
    for (id, f) in [Box::pin(echo) as BoxedTask, Box::pin(ping)]
        .into_iter()
        .enumerate()
    {
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
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
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
        let k = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), 64, -1) };
        for e in &evs[..k.max(0) as usize] {
            if e.u64 == u64::MAX {
                let mut v = 0u64;
                unsafe { libc::read(efd, (&mut v as *mut u64).cast(), 8) };
                let ids = std::mem::take(&mut *shared.remote.lock().unwrap());
                LOCAL.with(|q| q.borrow_mut().extend(ids));
                continue;
            }
            let slot = &slots[e.u64 as usize];
            slot.readable.store(true, Ordering::Release);
            if let Some(w) = slot.waiter.lock().unwrap().take() {
                w.wake();
            }
        }
    }
}
