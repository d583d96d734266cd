//! Reads and writes of the data path on plaintext sockets, straight from tokio's cached
//! readiness: a ready socket costs one readiness load and the system call, with no task budget
//! accounting or waker registration; only a socket that would block registers the task. The
//! relay applies its own budget ([`Budget`]) instead of tokio's.

use std::io;
use std::os::fd::AsFd;
use std::task::{ready, Context, Poll};

use bytes::BytesMut;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Reads once into `buf`'s spare room (the caller makes room). A read that does not fill the
/// room emptied the socket, so readiness is cleared with it and the next read waits for epoll
/// instead of wasting a system call on EAGAIN.
pub fn poll_read_tcp(
    s: &TcpStream,
    cx: &mut Context<'_>,
    buf: &mut BytesMut,
) -> Poll<io::Result<usize>> {
    loop {
        let mut short = 0;
        let r = s.try_io(Interest::READABLE, || {
            let room = buf.capacity() - buf.len();
            let n = recv_into(s, buf)?;
            if n > 0 && n < room {
                short = n;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match done(r, short) {
            Some(r) => return Poll::Ready(r),
            None => ready!(s.poll_read_ready(cx))?,
        }
    }
}

/// Writes once from `data`; a partial write means the socket's buffer is full, so readiness is
/// cleared with it.
pub fn poll_write_tcp(s: &TcpStream, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
    loop {
        let mut short = 0;
        let r = s.try_io(Interest::WRITABLE, || {
            let n = send(s, data)?;
            if n > 0 && n < data.len() {
                short = n;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match done(r, short) {
            Some(r) => return Poll::Ready(r),
            None => ready!(s.poll_write_ready(cx))?,
        }
    }
}

/// The outcome of one `try_io`: `None` when the socket would block (wait for readiness), else
/// the count, including a short one reported as WouldBlock to clear readiness.
pub(super) fn done(r: io::Result<usize>, short: usize) -> Option<io::Result<usize>> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => (short > 0).then_some(Ok(short)),
        r => Some(r),
    }
}

/// One `recv` into `buf`'s spare room, counted as filled. Into uninitialised memory: zeroing
/// the room first (the safe way) costs a memset of up to the whole buffer per read.
#[allow(unsafe_code)] // an exception to the workspace's deny(unsafe_code): see SAFETY
pub(super) fn recv_into(fd: impl AsFd, buf: &mut BytesMut) -> io::Result<usize> {
    let sock = socket2::SockRef::from(&fd);
    loop {
        match sock.recv(buf.spare_capacity_mut()) {
            Ok(n) => {
                // SAFETY: recv initialised the first `n` bytes of the spare room (socket2's
                // `recv` returns how many of the given bytes it wrote).
                unsafe { buf.set_len(buf.len() + n) };
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// One `recv` of at most one byte, to see whether an idle socket has anything to say.
pub fn probe(fd: impl AsFd) -> io::Result<usize> {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    socket2::SockRef::from(&fd).recv(&mut byte)
}

/// One `send` (MSG_NOSIGNAL: a closed peer is an error, not a signal).
pub(super) fn send(fd: impl AsFd, data: &[u8]) -> io::Result<usize> {
    let sock = socket2::SockRef::from(&fd);
    loop {
        match sock.send(data) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// The relay's share of the worker: tokio's own budget is not consulted on the direct path, so
/// a relay whose sockets never block (a long COPY from a fast client) yields after this many
/// events, letting the worker's other clients run.
pub struct Budget(u32);

impl Budget {
    const EVENTS: u32 = 128;

    pub fn new() -> Budget {
        Budget(Budget::EVENTS)
    }

    /// Counts one event; true when the relay should yield before the next.
    #[inline]
    pub fn spend(&mut self) -> bool {
        self.0 -= 1;
        if self.0 == 0 {
            self.0 = Budget::EVENTS;
            return true;
        }
        false
    }
}

impl Default for Budget {
    fn default() -> Budget {
        Budget::new()
    }
}
