//! What the ping-pong programs share: the socket pair, the two tasks, the round count, and the
//! epoll calls. Each program supplies its executor and its socket type.

use std::future::Future;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Rounds to run: the first argument, else 100,000.
pub fn rounds() -> usize {
    std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("a number of rounds"))
        .unwrap_or(100_000)
}

/// Two connected loopback TCP sockets, NODELAY and non-blocking.
pub fn pair() -> (TcpStream, TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    for s in [&a, &b] {
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
    }
    (a, b)
}

/// A socket as the ping-pong tasks use it.
pub trait Duplex {
    /// Reads what is there (at least one byte; 0 at the peer's close), waiting if nothing is.
    fn read(&mut self, buf: &mut [u8]) -> impl Future<Output = usize>;
    /// Writes all of `b` (small enough for the socket's buffer).
    fn write(&mut self, b: &[u8]);
}

/// Answers every message with the same bytes until the peer closes.
pub async fn echo<S: Duplex>(mut b: S) {
    let mut buf = [0u8; 64];
    loop {
        let k = b.read(&mut buf).await;
        if k == 0 {
            break;
        }
        b.write(&buf[..k]);
    }
}

/// Sends `n` 64-byte messages, each after the answer to the last, then closes.
pub async fn ping<S: Duplex>(mut a: S, n: usize) {
    let mut buf = [0u8; 64];
    for _ in 0..n {
        a.write(&[1u8; 64]);
        let mut got = 0;
        while got < 64 {
            got += a.read(&mut buf[got..]).await;
        }
    }
}

/// An epoll instance.
pub struct Epoll(i32);

impl Epoll {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Epoll {
        // SAFETY: a plain system call.
        Epoll(unsafe { libc::epoll_create1(0) })
    }

    /// Registers `fd` for edge-triggered readability under `token`.
    pub fn add(&self, fd: &impl AsRawFd, token: u64) {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: token,
        };
        // SAFETY: `ev` is valid for the call; the descriptors are the caller's, open.
        unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) };
    }

    /// Waits for events; returns the tokens that are ready.
    pub fn wait<'a>(&self, evs: &'a mut [libc::epoll_event]) -> impl Iterator<Item = u64> + 'a {
        // SAFETY: `evs` is valid for writes of its length.
        let k = unsafe { libc::epoll_wait(self.0, evs.as_mut_ptr(), evs.len() as i32, -1) };
        evs[..k.max(0) as usize].iter().map(|e| e.u64)
    }
}

/// An empty event buffer for [`Epoll::wait`].
pub fn events() -> [libc::epoll_event; 64] {
    [libc::epoll_event { events: 0, u64: 0 }; 64]
}
