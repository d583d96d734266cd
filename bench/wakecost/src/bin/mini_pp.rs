// The same ping-pong as tokio_pp, as two async tasks on a minimal single-threaded executor with
// an edge-triggered epoll reactor of its own: what a data-path executor could cost per wake.
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

thread_local! {
    static READY: RefCell<VecDeque<usize>> = RefCell::new(VecDeque::with_capacity(64));
}

fn vt_clone(p: *const ()) -> RawWaker {
    RawWaker::new(p, &VTABLE)
}
fn vt_wake(p: *const ()) {
    READY.with(|r| r.borrow_mut().push_back(p as usize))
}
fn vt_drop(_: *const ()) {}
static VTABLE: RawWakerVTable = RawWakerVTable::new(vt_clone, vt_wake, vt_wake, vt_drop);
fn waker(id: usize) -> Waker {
    // SAFETY: the vtable's functions treat the data pointer as a plain number (a task id)
    // and never dereference it; a waker is only woken on the thread that made it.
    unsafe { Waker::from_raw(RawWaker::new(id as *const (), &VTABLE)) }
}

/// A socket's readiness and the task waiting on it.
struct Slot {
    readable: Cell<bool>,
    waiter: RefCell<Option<Waker>>,
}

struct Sock {
    s: std::net::TcpStream,
    slot: Rc<Slot>,
}

impl Sock {
    async fn read(&mut self, buf: &mut [u8]) -> usize {
        poll_fn(|cx| {
            if self.slot.readable.get() {
                match self.s.read(buf) {
                    Ok(k) => {
                        if k < buf.len() {
                            self.slot.readable.set(false);
                        }
                        return Poll::Ready(k);
                    }
                    Err(_) => self.slot.readable.set(false),
                }
            }
            let mut w = self.slot.waiter.borrow_mut();
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }
    fn write(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(100_000);
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    // SAFETY: plain system calls on descriptors this program owns, with valid buffers.
    let ep = unsafe { libc::epoll_create1(0) };
    let mut slots = Vec::new();
    let mut socks = Vec::new();
    for (i, s) in [a, b].into_iter().enumerate() {
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
        let slot = Rc::new(Slot {
            readable: Cell::new(false),
            waiter: RefCell::new(None),
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
    let mut tasks: Vec<Option<Pin<Box<dyn Future<Output = ()>>>>> =
        vec![Some(Box::pin(echo)), Some(Box::pin(ping))];
    READY.with(|r| {
        r.borrow_mut().push_back(0);
        r.borrow_mut().push_back(1);
    });
    let mut live = 2;
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
    while live > 0 {
        while let Some(id) = READY.with(|r| r.borrow_mut().pop_front()) {
            let Some(t) = tasks[id].as_mut() else {
                continue;
            };
            let w = waker(id);
            if t.as_mut().poll(&mut Context::from_waker(&w)).is_ready() {
                tasks[id] = None;
                live -= 1;
            }
        }
        if live == 0 {
            break;
        }
        let k = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), 64, -1) };
        for e in &evs[..k.max(0) as usize] {
            let slot = &slots[e.u64 as usize];
            slot.readable.set(true);
            if let Some(w) = slot.waiter.borrow_mut().take() {
                w.wake();
            }
        }
    }
}
