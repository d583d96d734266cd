//! A TCP or Unix socket registered with a [`Reactor`], read and written straight with system
//! calls: a ready socket costs one readiness load and the call; only one that would block
//! registers the task. Reads go into a buffer's uninitialised room ([`crate::direct`]); writes on
//! a worker go into its turn's batch ([`crate::batch`]).

use std::io;
use std::marker::PhantomData;
use std::net::Shutdown;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{ready, Context, Poll};

use bytes::BytesMut;
use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::batch;
use crate::direct::{probe, recv_into, recv_uninit, send};
use crate::reactor::{Reactor, Readiness, Registration, READ, WRITE};

/// A socket type [`Socket`] can hold: it gives its descriptor to the socket's readiness, and
/// takes it back when the socket moves to another reactor.
pub trait Fd: From<OwnedFd> + Into<OwnedFd> {
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
}

impl Fd for std::net::TcpStream {
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        std::net::TcpStream::set_nonblocking(self, on)
    }
}

impl Fd for std::os::unix::net::UnixStream {
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_nonblocking(self, on)
    }
}

/// A socket in a reactor's epoll set. Its descriptor is owned by its readiness, shared with any
/// write of it in a batch (see [`crate::reactor::Readiness::fd`]).
pub struct Socket<S: Fd> {
    reg: Registration,
    kind: PhantomData<fn() -> S>,
}

pub type TcpSocket = Socket<std::net::TcpStream>;
pub type UnixSocket = Socket<std::os::unix::net::UnixStream>;

impl<S: Fd> Socket<S> {
    /// Registers `io` (made non-blocking) with this thread's reactor.
    pub fn new(io: S) -> io::Result<Socket<S>> {
        io.set_nonblocking(true)?;
        Socket::register(io)
    }

    /// Registers `io`, non-blocking already, with this thread's reactor.
    fn register(io: S) -> io::Result<Socket<S>> {
        let reg = Reactor::current()?.register(io.into())?;
        Ok(Socket {
            reg,
            kind: PhantomData,
        })
    }

    #[inline]
    fn fd(&self) -> BorrowedFd<'_> {
        self.reg.readiness().fd()
    }

    /// Registers `io` and `held`, from [`Socket::into_inner`] on another reactor (so `io` is
    /// non-blocking already: no system call to make it so), with `held` to go out before
    /// anything written here.
    pub fn new_holding(io: S, held: Vec<u8>) -> io::Result<Socket<S>> {
        let s = Socket::register(io)?;
        if !held.is_empty() {
            let ready = s.reg.readiness();
            ready.hold(&held, ready.now());
        }
        Ok(s)
    }

    /// The socket, out of the epoll set (to register it with another, with
    /// [`Socket::new_holding`]), and the bytes written that it had no room for yet.
    pub fn into_inner(self) -> io::Result<(S, Vec<u8>)> {
        self.flush_batched();
        let ready = self.reg.readiness();
        let held = if ready.drain_held() {
            Vec::new()
        } else {
            ready.take_held()
        };
        Ok((S::from(self.reg.into_fd()?), held))
    }

    /// Whether bytes already written wait for room in the socket ([`batch`]).
    #[cfg(test)]
    pub fn holds_unsent(&self) -> bool {
        let ready = self.reg.readiness();
        ready.staged.load(Relaxed) || ready.has_held()
    }

    /// The socket's readiness, which owns its descriptor.
    #[cfg(test)]
    pub(crate) fn readiness(&self) -> &std::sync::Arc<Readiness> {
        self.reg.readiness()
    }

    /// Sends this worker's batch if it has a write of this socket.
    #[inline]
    pub fn flush_batched(&self) {
        if self.reg.readiness().staged.load(Relaxed) {
            batch::flush();
        }
    }

    /// Ready when a read would not wait; readiness is kept for the read that follows.
    #[inline]
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.reg.readiness().poll(cx, READ).map(|_| Ok(()))
    }

    /// One read into `buf`'s spare room (the caller makes room). A read that does not fill the
    /// room emptied the socket, so readiness is cleared with it and the next read waits for
    /// epoll instead of wasting a system call on EAGAIN.
    #[inline]
    pub fn poll_read_into(
        &self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        self.poll_recv(cx, |io| {
            let room = buf.capacity() - buf.len();
            recv_into(io, buf).map(|n| (n, room))
        })
    }

    /// One read into `buf`'s spare room now, whatever the readiness says (it is refreshed only
    /// when the worker looks for events, which a relay kept busy by the other side may not let
    /// it do for a while); `None` when the socket has nothing. Registers nothing and leaves the
    /// readiness as it is.
    #[inline]
    pub fn try_read_now(&self, buf: &mut BytesMut) -> Option<io::Result<usize>> {
        match recv_into(self.fd(), buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            r => Some(r),
        }
    }

    /// Waits for readability, then reads once with `recv`, which returns the count and the room
    /// it had; readiness is cleared as [`Socket::poll_read_into`] says.
    #[inline]
    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        mut recv: impl FnMut(BorrowedFd<'_>) -> io::Result<(usize, usize)>,
    ) -> Poll<io::Result<usize>> {
        let ready = self.reg.readiness();
        loop {
            let seen = ready!(ready.poll(cx, READ));
            match recv(self.fd()) {
                Ok((n, room)) => {
                    if n > 0 && n < room {
                        ready.clear(seen, READ);
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.clear(seen, READ),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// One write from `data`; a partial write means the socket's buffer is full, so readiness
    /// is cleared with it.
    #[inline]
    pub fn poll_write(&self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            if let Some(r) = self.try_write(data) {
                return Poll::Ready(r);
            }
            if !self.reg.wants_write() {
                self.reg.want_write()?;
            }
            ready!(self.reg.readiness().poll(cx, WRITE));
        }
    }

    /// One write from `data` if the socket was not found full since its last event; `None` when
    /// it would block (poll with [`Socket::poll_write`] to wait). Registers nothing. On a
    /// worker that batches, a write up to [`batch::MAX_STAGED`] goes into the turn's batch and
    /// counts as done; bytes held from an earlier batch go first.
    #[inline]
    pub fn try_write(&self, data: &[u8]) -> Option<io::Result<usize>> {
        let ready = self.reg.readiness();
        let mut seen = ready.now();
        if !Readiness::is_ready(seen, WRITE) {
            return None;
        }
        if ready.has_held() || ready.staged.load(Relaxed) {
            // Order: this socket's earlier bytes go first.
            self.flush_batched();
            if !ready.drain_held() {
                return None;
            }
            seen = ready.now();
            if !Readiness::is_ready(seen, WRITE) {
                return None;
            }
        }
        if data.len() <= batch::MAX_STAGED && batch::stage(self.reg.readiness(), data) {
            return Some(Ok(data.len()));
        }
        match send(self.fd(), data) {
            Ok(n) => {
                if n < data.len() {
                    ready.clear(seen, WRITE);
                }
                Some(Ok(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                ready.clear(seen, WRITE);
                None
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// Whether a read that returned `Pending` left the task registered until the socket's next
    /// event (see [`Registration::is_local`]).
    #[inline]
    pub fn keeps_registration(&self) -> bool {
        self.reg.is_local()
    }

    /// Whether the last event says a read would find something (data, the peer's close or an
    /// error), without registering for it.
    #[inline]
    pub fn readable_now(&self) -> bool {
        Readiness::is_ready(self.reg.readiness().now(), READ)
    }

    /// For an idle connection: WouldBlock unless the socket is readable and a one-byte read
    /// finds something (data, the peer's close or an error); no task is registered.
    pub fn probe(&self) -> io::Result<usize> {
        let ready = self.reg.readiness();
        let seen = ready.now();
        if !Readiness::is_ready(seen, READ) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let r = probe(self.fd());
        if matches!(&r, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
            ready.clear(seen, READ);
        }
        r
    }
}

impl<S: Fd> AsFd for Socket<S> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

impl<S: Fd> AsyncRead for Socket<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut()
            .poll_recv(cx, |io| {
                let room = buf.remaining();
                // SAFETY: recv writes at most the unfilled part's length into it and never
                // reads it; nothing in it is de-initialised.
                #[allow(unsafe_code)]
                let n = recv_uninit(io, unsafe { buf.unfilled_mut() })?;
                // SAFETY: recv initialised the first `n` bytes of the unfilled part.
                #[allow(unsafe_code)]
                unsafe {
                    buf.assume_init(n)
                };
                buf.advance(n);
                Ok((n, room))
            })
            .map_ok(drop)
    }
}

impl<S: Fd> AsyncWrite for Socket<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Socket::poll_write(self.get_mut(), cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // What was written goes out before the end of the stream.
        self.flush_batched();
        let ready = self.reg.readiness();
        while !ready.drain_held() {
            ready!(ready.poll(cx, WRITE));
        }
        Poll::Ready(SockRef::from(&self.fd()).shutdown(Shutdown::Write))
    }
}

impl TcpSocket {
    pub fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        inet(SockRef::from(&self.fd()).peer_addr()?)
    }

    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        inet(SockRef::from(&self.fd()).local_addr()?)
    }
}

fn inet(addr: socket2::SockAddr) -> io::Result<std::net::SocketAddr> {
    addr.as_socket()
        .ok_or_else(|| io::Error::other("not an internet address"))
}

/// Connects over TCP (through tokio, whose runtime the caller's thread must be in: a worker
/// is in the timer thread's), then registers the socket with this thread's reactor.
// On the timer thread's runtime by design: the connect (and its name lookup) waits there.
#[allow(clippy::disallowed_methods)]
pub async fn connect_tcp(addr: impl tokio::net::ToSocketAddrs) -> io::Result<TcpSocket> {
    let s = tokio::net::TcpStream::connect(addr).await?;
    let _ = s.set_nodelay(true);
    Socket::new(s.into_std()?)
}

/// Connects to a Unix socket, as [`connect_tcp`].
#[allow(clippy::disallowed_methods)]
pub async fn connect_unix(path: impl AsRef<std::path::Path>) -> io::Result<UnixSocket> {
    let s = tokio::net::UnixStream::connect(path).await?;
    Socket::new(s.into_std()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    #[tokio::test]
    async fn reads_and_writes_go_straight_and_wait_when_they_must() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Socket::new(std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap())
            .unwrap();
        let b = Socket::new(listener.accept().unwrap().0).unwrap();
        let mut buf = BytesMut::with_capacity(64);
        // Nothing sent yet: the read waits (and registers the task).
        let pending = poll_fn(|cx| Poll::Ready(b.poll_read_into(cx, &mut buf).is_pending())).await;
        assert!(pending);
        assert!(!b.readable_now());
        let n = poll_fn(|cx| a.poll_write(cx, b"hello")).await.unwrap();
        assert_eq!(n, 5);
        let n = poll_fn(|cx| b.poll_read_into(cx, &mut buf)).await.unwrap();
        assert_eq!((n, &buf[..]), (5, &b"hello"[..]));
        // The short read cleared readiness: the next read waits without a system call.
        assert!(!b.readable_now());
        drop(a);
        let n = poll_fn(|cx| b.poll_read_into(cx, &mut buf)).await.unwrap();
        assert_eq!(n, 0, "the peer's close reads as 0 bytes");
    }

    /// Data and the peer's close can come in one event: the short read that takes the data
    /// must not leave the close unseen.
    #[tokio::test]
    async fn a_close_behind_data_is_read_after_it() {
        use std::io::Write;
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let a = Socket::new(a).unwrap();
        let mut buf = BytesMut::with_capacity(64);
        assert!(poll_fn(|cx| Poll::Ready(a.poll_read_into(cx, &mut buf).is_pending())).await);
        b.write_all(b"bye").unwrap();
        drop(b);
        // Give the reactor thread time to see both in one go.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let n = poll_fn(|cx| a.poll_read_into(cx, &mut buf)).await.unwrap();
        assert_eq!(n, 3);
        let n = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            poll_fn(|cx| a.poll_read_into(cx, &mut buf)),
        )
        .await
        .expect("the close is seen")
        .unwrap();
        assert_eq!(n, 0);
    }

    #[tokio::test]
    async fn a_full_socket_waits_for_room() {
        use tokio::io::AsyncReadExt;
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let a = Socket::new(a).unwrap();
        let mut b = Socket::new(b).unwrap();
        let chunk = vec![7u8; 64 * 1024];
        let mut sent = 0usize;
        // Fill the socket until a write would block.
        while let Some(r) = a.try_write(&chunk) {
            sent += r.unwrap();
        }
        assert!(!Readiness::is_ready(a.reg.readiness().now(), WRITE));
        let writer = tokio::spawn(async move {
            let n = poll_fn(|cx| a.poll_write(cx, &chunk)).await.unwrap();
            (a, n)
        });
        let mut got = 0usize;
        let mut sink = vec![0u8; 64 * 1024];
        while got < sent + 1 {
            got += b.read(&mut sink).await.unwrap();
        }
        let (_a, n) = writer.await.unwrap();
        assert!(n > 0);
    }
}
