//! Reads and writes of the data path on plaintext sockets, straight from tokio's cached
//! readiness: a ready socket costs one readiness load and the system call, with no task budget
//! accounting or waker registration; only a socket that would block registers the task. The
//! relay applies its own budget ([`Budget`]) instead of tokio's.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
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
        let mut got = None;
        let _ = s.try_io(Interest::READABLE, || {
            let room = buf.capacity() - buf.len();
            keep(&mut got, recv_into(s, buf), room)
        });
        if let Some(r) = got {
            return Poll::Ready(r);
        }
        ready!(s.poll_read_ready(cx))?;
    }
}

/// Writes once from `data`; a partial write means the socket's buffer is full, so readiness is
/// cleared with it.
pub fn poll_write_tcp(s: &TcpStream, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
    loop {
        if let Some(r) = try_write_tcp(s, data) {
            return Poll::Ready(r);
        }
        ready!(s.poll_write_ready(cx))?;
    }
}

/// Writes once from `data` if the cached readiness says the socket is writable; `None` when it
/// would block (poll with [`poll_write_tcp`] to wait). Registers nothing.
#[inline]
pub fn try_write_tcp(s: &TcpStream, data: &[u8]) -> Option<io::Result<usize>> {
    let mut got = None;
    let _ = s.try_io(Interest::WRITABLE, || {
        keep(&mut got, send(s, data), data.len())
    });
    got
}

/// Inside `try_io`: notes the outcome of a system call that had `room` bytes to fill or send
/// in `got`, unless the socket would block; asks `try_io` to clear readiness (WouldBlock) when
/// the socket has no more to give or take: it would block, or the count fell short of `room`.
/// `got` stays `None` only when the caller must wait for readiness.
#[inline]
pub(super) fn keep(
    got: &mut Option<io::Result<usize>>,
    r: io::Result<usize>,
    room: usize,
) -> io::Result<()> {
    match r {
        Ok(n) => {
            *got = Some(Ok(n));
            if n > 0 && n < room {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(e),
        Err(e) => {
            *got = Some(Err(e));
            Ok(())
        }
    }
}

/// One `recv` into `buf`'s spare room, counted as filled. Into uninitialised memory: zeroing
/// the room first (the safe way) costs a memset of up to the whole buffer per read.
#[allow(unsafe_code)] // an exception to the workspace's deny(unsafe_code): see SAFETY
pub(super) fn recv_into(fd: impl AsFd, buf: &mut BytesMut) -> io::Result<usize> {
    let n = recv_uninit(fd, buf.spare_capacity_mut())?;
    // SAFETY: recv initialised the first `n` bytes of the spare room.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// One `recv` into `room`, which may be uninitialised; the first `n` bytes returned are
/// initialised by it.
#[allow(unsafe_code)] // an exception to the workspace's deny(unsafe_code): see SAFETY
pub(super) fn recv_uninit(fd: impl AsFd, room: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    // SAFETY: `room` is valid for writes of `room.len()` bytes for the call's duration, and
    // recv only writes into it (nothing in it is de-initialised).
    unsafe {
        sys(
            libc::SYS_recvfrom,
            fd.as_fd(),
            room.as_mut_ptr().cast(),
            room.len(),
            0,
        )
    }
}

/// One `send` (MSG_NOSIGNAL: a closed peer is an error, not a signal).
#[allow(unsafe_code)] // an exception to the workspace's deny(unsafe_code): see SAFETY
pub(super) fn send(fd: impl AsFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is valid for reads of `data.len()` bytes for the call's duration; sendto
    // does not write through the pointer.
    unsafe {
        sys(
            libc::SYS_sendto,
            fd.as_fd(),
            data.as_ptr().cast_mut().cast(),
            data.len(),
            libc::MSG_NOSIGNAL,
        )
    }
}

/// recvfrom(2)/sendto(2) by system call number, without addresses, again when interrupted.
/// glibc's `recv` and `send` are thread-cancellation points and switch the thread's
/// cancellation state before and after the call (about 35 instructions a call); pgcorral never
/// cancels a thread, so the data path calls the kernel directly.
///
/// # Safety
/// `ptr` must be valid for `len` bytes: writable for recvfrom, readable for sendto.
#[allow(unsafe_code)]
unsafe fn sys(
    nr: libc::c_long,
    fd: BorrowedFd<'_>,
    ptr: *mut libc::c_void,
    len: usize,
    flags: libc::c_int,
) -> io::Result<usize> {
    let null = std::ptr::null_mut::<libc::c_void>();
    loop {
        // SAFETY: as the caller promises for `ptr`; the descriptor is open while borrowed, and
        // both calls take null address arguments.
        let n = unsafe { libc::syscall(nr, fd.as_raw_fd(), ptr, len, flags, null, null) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// One `recv` of at most one byte, to see whether an idle socket has anything to say.
pub fn probe(fd: impl AsFd) -> io::Result<usize> {
    recv_uninit(fd, &mut [MaybeUninit::uninit(); 1])
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_clears_readiness_only_when_the_socket_has_no_more() {
        let mut got = None;
        // A full read: the socket may hold more, readiness stays.
        assert!(keep(&mut got, Ok(4096), 4096).is_ok());
        assert_eq!(got.take().unwrap().unwrap(), 4096);
        // A short read emptied it: the count is kept and readiness cleared.
        let r = keep(&mut got, Ok(100), 4096);
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert_eq!(got.take().unwrap().unwrap(), 100);
        // The peer's close (0 bytes) is a result, and readiness stays for the next look.
        assert!(keep(&mut got, Ok(0), 4096).is_ok());
        assert_eq!(got.take().unwrap().unwrap(), 0);
        // Nothing there: wait for readiness.
        let r = keep(&mut got, Err(io::ErrorKind::WouldBlock.into()), 4096);
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert!(got.is_none());
        // Any other error is the result.
        assert!(keep(&mut got, Err(io::ErrorKind::ConnectionReset.into()), 4096).is_ok());
        assert_eq!(
            got.take().unwrap().unwrap_err().kind(),
            io::ErrorKind::ConnectionReset
        );
    }

    #[test]
    fn the_budget_runs_out_every_so_many_events() {
        let mut b = Budget::new();
        let spent: Vec<bool> = (0..Budget::EVENTS * 2).map(|_| b.spend()).collect();
        assert_eq!(spent.iter().filter(|&&y| y).count(), 2);
        assert!(spent[Budget::EVENTS as usize - 1]);
        assert!(!spent[0]);
    }

    #[tokio::test]
    async fn reads_and_writes_go_straight_and_wait_when_they_must() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (b, _) = listener.accept().await.unwrap();
        let mut buf = BytesMut::with_capacity(64);
        // Nothing sent yet: the read waits (and registers the task).
        let pending =
            std::future::poll_fn(|cx| Poll::Ready(poll_read_tcp(&b, cx, &mut buf).is_pending()))
                .await;
        assert!(pending);
        let n = std::future::poll_fn(|cx| poll_write_tcp(&a, cx, b"hello"))
            .await
            .unwrap();
        assert_eq!(n, 5);
        let n = std::future::poll_fn(|cx| poll_read_tcp(&b, cx, &mut buf))
            .await
            .unwrap();
        assert_eq!((n, &buf[..]), (5, &b"hello"[..]));
        // The short read cleared readiness: the next read waits without a system call.
        assert_eq!(
            b.try_io(Interest::READABLE, || Ok(())).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        drop(a);
        let n = std::future::poll_fn(|cx| poll_read_tcp(&b, cx, &mut buf))
            .await
            .unwrap();
        assert_eq!(n, 0, "the peer's close reads as 0 bytes");
    }
}
