// The same ping-pong as tokio_pp, as two async tasks on a minimal single-threaded executor with
// an edge-triggered epoll reactor of its own: what a data-path executor could cost per wake.
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io::{Read, Write};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

use wakecost::{Duplex, Epoll};

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

impl Duplex for Sock {
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
    let n = wakecost::rounds();
    let ep = Epoll::new();
    let mut slots = Vec::new();
    let mut socks = Vec::new();
    let (a, b) = wakecost::pair();
    for (i, s) in [a, b].into_iter().enumerate() {
        let slot = Rc::new(Slot {
            readable: Cell::new(false),
            waiter: RefCell::new(None),
        });
        ep.add(&s, i as u64);
        slots.push(slot.clone());
        socks.push(Sock { s, slot });
    }
    let b = socks.pop().unwrap();
    let a = socks.pop().unwrap();
    let mut tasks: Vec<Option<Pin<Box<dyn Future<Output = ()>>>>> = vec![
        Some(Box::pin(wakecost::echo(b))),
        Some(Box::pin(wakecost::ping(a, n))),
    ];
    READY.with(|r| r.borrow_mut().extend([0, 1]));
    let mut live = 2;
    let mut evs = wakecost::events();
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
        for token in ep.wait(&mut evs) {
            let slot = &slots[token as usize];
            slot.readable.set(true);
            if let Some(w) = slot.waiter.borrow_mut().take() {
                w.wake();
            }
        }
    }
}
