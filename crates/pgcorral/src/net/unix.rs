//! A Unix-socket connection that asks epoll for readability only. tokio's `UnixStream` asks for
//! writability too, and a Unix socket reports it every time the peer reads: PostgreSQL reading
//! each request would wake a sleeping worker for nothing (one extra sleep and wake-up per
//! transaction). Writes go straight to the socket; only one that would block adds write
//! interest, as PgBouncer's event loop does. Reads go into the buffer's uninitialised room.

use std::io;
use std::net::Shutdown;
use std::os::unix::net::UnixStream as StdUnix;
use std::path::Path;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

use super::stream::not_connected as gone;

pub struct UnixConn {
    /// `None` only while it is registered again.
    fd: Option<AsyncFd<StdUnix>>,
    /// Registered for writability too (a write would have blocked).
    write_interest: bool,
}

impl UnixConn {
    /// Registers `s` with the current worker's reactor, for readability.
    pub fn new(s: StdUnix) -> io::Result<UnixConn> {
        s.set_nonblocking(true)?;
        Ok(UnixConn {
            fd: Some(register(s, Interest::READABLE)?),
            write_interest: false,
        })
    }

    pub async fn connect(path: impl AsRef<Path>) -> io::Result<UnixConn> {
        let s = tokio::net::UnixStream::connect(path).await?;
        UnixConn::new(s.into_std()?)
    }

    fn fd(&self) -> io::Result<&AsyncFd<StdUnix>> {
        self.fd.as_ref().ok_or_else(gone)
    }

    /// Takes the socket off the reactor (see [`UnixConn::new`] to put it on another).
    pub fn into_std(mut self) -> io::Result<StdUnix> {
        Ok(self.fd.take().ok_or_else(gone)?.into_inner())
    }

    /// Ready when a read would not wait (readiness is kept for the read that follows).
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let fd = self.fd()?;
        fd.poll_read_ready(cx).map_ok(drop)
    }

    /// One read into `buf`'s spare room, straight from the cached readiness (see
    /// [`super::direct`]); a short read clears readiness.
    pub fn poll_read_into(
        &self,
        cx: &mut Context<'_>,
        buf: &mut bytes::BytesMut,
    ) -> Poll<io::Result<usize>> {
        let fd = self.fd()?;
        loop {
            let mut got = None;
            let _ = fd.try_io(Interest::READABLE, |s| {
                let room = buf.capacity() - buf.len();
                super::direct::keep(&mut got, super::direct::recv_into(s, buf), room)
            });
            if let Some(r) = got {
                return Poll::Ready(r);
            }
            drop(ready!(fd.poll_read_ready(cx))?);
        }
    }

    /// Ok when the cached readiness says a read would find something; no system call.
    pub fn readable_now(&self) -> io::Result<()> {
        self.fd()?.try_io(Interest::READABLE, |_| Ok(()))
    }

    /// For an idle connection: WouldBlock unless the socket is readable and a one-byte read
    /// finds something (data, the peer's close or an error); no waker is registered.
    pub fn probe(&self) -> io::Result<usize> {
        self.fd()?
            .try_io(Interest::READABLE, |s| super::direct::probe(s))
    }

    /// Registers the socket again, for writability too. The task is woken so that it polls
    /// again what it waits for, now on the new registration.
    fn add_write_interest(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let s = self.fd.take().ok_or_else(gone)?.into_inner();
        self.fd = Some(register(s, Interest::READABLE | Interest::WRITABLE)?);
        self.write_interest = true;
        cx.waker().wake_by_ref();
        Ok(())
    }
}

/// Registers `s` with the current worker's reactor for `interest`.
#[allow(unsafe_code)] // an exception to the workspace's deny(unsafe_code) (the others: below, in net::direct and clock::monotonic): see SAFETY
fn register(s: StdUnix, interest: Interest) -> io::Result<AsyncFd<StdUnix>> {
    // SAFETY: tokio requires the descriptor to stay open, and the same, while registered. The
    // AsyncFd owns the std socket, which closes its descriptor only when dropped, after the
    // AsyncFd deregistered it (or after `into_inner` gave it back).
    Ok(unsafe { AsyncFd::register_with_interest(s, interest) }?)
}

/// One `recv` into `buf`'s unfilled part, which it then counts as filled (into uninitialised
/// memory, see [`super::direct::recv_uninit`]).
#[allow(unsafe_code)] // another exception to the workspace's deny(unsafe_code): see SAFETY
fn recv_uninit(s: &StdUnix, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
    // SAFETY: recv writes at most `dst.len()` bytes into `dst` and never reads it; nothing in
    // `dst` is de-initialised.
    let n = super::direct::recv_uninit(s, unsafe { buf.unfilled_mut() })?;
    // SAFETY: recv initialised the first `n` bytes of the unfilled part.
    unsafe { buf.assume_init(n) };
    buf.advance(n);
    Ok(n)
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl AsyncRead for UnixConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let fd = self.get_mut().fd()?;
        loop {
            let mut guard = ready!(fd.poll_read_ready(cx))?;
            let len = buf.remaining();
            match recv_uninit(guard.get_inner(), buf) {
                Ok(n) => {
                    if n > 0 && n < len {
                        // A short read emptied the socket: no read wasted on EAGAIN next.
                        guard.clear_ready();
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e) if would_block(&e) => guard.clear_ready(),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for UnixConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.write_interest {
            match super::direct::send(this.fd()?.get_ref(), buf) {
                Err(e) if would_block(&e) => {
                    this.add_write_interest(cx)?;
                    return Poll::Pending;
                }
                r => return Poll::Ready(r),
            }
        }
        let fd = this.fd()?;
        loop {
            let mut guard = ready!(fd.poll_write_ready(cx))?;
            match guard.try_io(|s| super::direct::send(s.get_ref(), buf)) {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.fd()?.get_ref().shutdown(Shutdown::Write))
    }
}
