//! A connection's byte stream, plaintext (TCP or a Unix socket) or TLS (to a client or to
//! PostgreSQL), with what the
//! data path needs beyond reading and writing: readiness without a buffer, output TLS still
//! holds, and moving the socket to another worker's reactor ([`crate::reactor`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_rustls::rustls;

use crate::sock::{Socket, TcpSocket, UnixSocket};

/// Plaintext, or TLS over a [`Sock`].
pub enum Stream {
    Plain(TcpSocket),
    /// A Unix-domain socket (to a PostgreSQL on the same host; never TLS, as libpq).
    Unix(UnixSocket),
    /// Boxed: TLS state is large, and most connections do not have it.
    Tls(Box<tokio_rustls::TlsStream<Sock>>),
    /// Taken apart (during a TLS upgrade, or after a failed move): any I/O is an error.
    Closed,
}

/// The socket under TLS: bytes read before the handshake began (a direct-TLS ClientHello) come
/// first; the socket itself can be taken out and put back to move it between reactors.
pub struct Sock {
    pre: BytesMut,
    io: Option<TcpSocket>,
}

impl Sock {
    /// `io`, with `pre` to be read before it.
    pub fn new(io: TcpSocket, pre: BytesMut) -> Sock {
        Sock { pre, io: Some(io) }
    }

    fn io(&mut self) -> io::Result<&mut TcpSocket> {
        self.io.as_mut().ok_or_else(not_connected)
    }
}

pub(super) fn not_connected() -> io::Error {
    io::ErrorKind::NotConnected.into()
}

impl AsyncRead for Sock {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.pre.is_empty() {
            let n = this.pre.len().min(buf.remaining());
            buf.put_slice(&this.pre[..n]);
            this.pre.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(this.io()?).poll_read(cx, buf)
    }
}

impl AsyncWrite for Sock {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.get_mut().io()?).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().io()?).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().io()?).poll_shutdown(cx)
    }
}

/// A stream taken off its reactor, to be put on another's ([`Stream::detach`]), with the bytes
/// written to it that its socket had no room for yet ([`crate::batch`]).
pub enum Detached {
    Plain(std::net::TcpStream, Vec<u8>),
    Unix(std::os::unix::net::UnixStream, Vec<u8>),
    Tls(
        Box<tokio_rustls::TlsStream<Sock>>,
        std::net::TcpStream,
        Vec<u8>,
    ),
}

impl Detached {
    /// Registers the socket with the current worker's reactor.
    pub fn attach(self) -> io::Result<Stream> {
        match self {
            Detached::Plain(s, held) => Ok(Stream::Plain(Socket::new_holding(s, held)?)),
            Detached::Unix(s, held) => Ok(Stream::Unix(Socket::new_holding(s, held)?)),
            Detached::Tls(mut tls, s, held) => {
                sock(&mut tls).io = Some(Socket::new_holding(s, held)?);
                Ok(Stream::Tls(tls))
            }
        }
    }
}

fn sock(tls: &mut tokio_rustls::TlsStream<Sock>) -> &mut Sock {
    match tls {
        tokio_rustls::TlsStream::Client(c) => c.get_mut().0,
        tokio_rustls::TlsStream::Server(s) => s.get_mut().0,
    }
}

fn common(tls: &tokio_rustls::TlsStream<Sock>) -> &rustls::CommonState {
    match tls {
        tokio_rustls::TlsStream::Client(c) => c.get_ref().1,
        tokio_rustls::TlsStream::Server(s) => s.get_ref().1,
    }
}

impl Stream {
    /// The plaintext socket, for a TLS handshake over it (the stream is left `Closed`).
    pub fn take_plain(&mut self) -> Option<TcpSocket> {
        match std::mem::replace(self, Stream::Closed) {
            Stream::Plain(s) => Some(s),
            other => {
                *self = other;
                None
            }
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// Whether a read that found nothing leaves the task registered for the socket's next
    /// bytes until they come, so that no second registration is needed while its readiness
    /// stays clear: plaintext sockets in this thread's reactor (a worker's own). A TLS session
    /// may hold bytes already read.
    #[inline]
    pub fn keeps_read_registration(&self) -> bool {
        match self {
            Stream::Plain(s) => s.keeps_registration(),
            Stream::Unix(s) => s.keeps_registration(),
            _ => false,
        }
    }

    /// The TLS session, when there is one.
    pub fn tls(&self) -> Option<&rustls::CommonState> {
        match self {
            Stream::Tls(t) => Some(common(t)),
            _ => None,
        }
    }

    /// The certificates the peer presented over TLS (leaf first).
    pub fn peer_certificates(&self) -> Option<&[rustls::pki_types::CertificateDer<'static>]> {
        self.tls().and_then(|t| t.peer_certificates())
    }

    /// The host name a TLS client sent in its ClientHello (SNI), when it sent one.
    pub fn server_name(&self) -> Option<&str> {
        match self {
            Stream::Tls(t) => match &**t {
                tokio_rustls::TlsStream::Server(s) => s.get_ref().1.server_name(),
                tokio_rustls::TlsStream::Client(_) => None,
            },
            _ => None,
        }
    }

    fn tcp(&self) -> Option<&TcpSocket> {
        match self {
            Stream::Plain(s) => Some(s),
            Stream::Tls(t) => match &**t {
                tokio_rustls::TlsStream::Client(c) => c.get_ref().0.io.as_ref(),
                tokio_rustls::TlsStream::Server(s) => s.get_ref().0.io.as_ref(),
            },
            Stream::Unix(_) | Stream::Closed => None,
        }
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, Stream::Unix(_))
    }

    pub fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.tcp().ok_or_else(not_connected)?.peer_addr()
    }

    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.tcp().ok_or_else(not_connected)?.local_addr()
    }

    /// Ready when a read would not wait: the socket is readable, or TLS holds decrypted bytes
    /// (or the peer's close) already. Keeps no buffer while waiting.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Plain(s) => s.poll_read_ready(cx),
            Stream::Unix(s) => s.poll_read_ready(cx),
            Stream::Tls(t) => {
                if !common_wants_read(t) {
                    return Poll::Ready(Ok(()));
                }
                match self.tcp() {
                    Some(s) => s.poll_read_ready(cx),
                    None => Poll::Ready(Err(not_connected())),
                }
            }
            Stream::Closed => Poll::Ready(Err(not_connected())),
        }
    }

    /// [`Stream::poll_read_into`], setting `armed` to whether the read left the task registered
    /// for the socket's next bytes (see [`Stream::keeps_read_registration`]).
    #[inline]
    pub fn poll_read_armed(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
        armed: &mut bool,
    ) -> Poll<io::Result<usize>> {
        let r = self.poll_read_into(cx, buf);
        *armed = r.is_pending() && self.keeps_read_registration();
        r
    }

    /// True when the last read (`armed`, see [`Stream::poll_read_armed`]) left the task
    /// registered and its readiness is still clear: no bytes came since, the
    /// registration stands, and polling again would only register a second time.
    #[inline]
    pub fn still_registered(&self, armed: bool) -> bool {
        armed && self.readable_now() == Some(false)
    }

    /// One read into `buf`'s spare room (the caller makes room). Plaintext sockets read straight
    /// from their readiness ([`crate::sock`]); TLS goes through its session.
    #[inline]
    pub fn poll_read_into(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        match self {
            Stream::Plain(s) => s.poll_read_into(cx, buf),
            Stream::Unix(s) => s.poll_read_into(cx, buf),
            _ => tokio_util::io::poll_read_buf(Pin::new(self), cx, buf),
        }
    }

    /// One read into `buf`'s spare room now on a plaintext socket, whatever its readiness says
    /// (see [`crate::sock::Socket::try_read_now`]); `None` when it has nothing, or over TLS.
    #[inline]
    pub fn try_read_now(&mut self, buf: &mut BytesMut) -> Option<io::Result<usize>> {
        match self {
            Stream::Plain(s) => s.try_read_now(buf),
            Stream::Unix(s) => s.try_read_now(buf),
            _ => None,
        }
    }

    /// Whether the socket's readiness says a read would find something (data, the peer's
    /// close or an error), without registering for it; `None` over TLS, whose session may hold
    /// bytes already read.
    #[inline]
    pub fn readable_now(&self) -> Option<bool> {
        match self {
            Stream::Plain(s) => Some(s.readable_now()),
            Stream::Unix(s) => Some(s.readable_now()),
            _ => None,
        }
    }

    /// One write from `data`; plaintext writes straight when the socket is writable.
    #[inline]
    pub fn poll_write_from(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self {
            Stream::Plain(s) => s.poll_write(cx, data),
            Stream::Unix(s) => s.poll_write(cx, data),
            _ => Pin::new(self).poll_write(cx, data),
        }
    }

    /// One write from `data` without a task to register: a plaintext socket that its
    /// readiness says is writable. `None` when the write must be polled instead (the socket
    /// would block, or the stream is TLS).
    #[inline]
    pub fn try_write_now(&mut self, data: &[u8]) -> Option<io::Result<usize>> {
        match self {
            Stream::Plain(s) => s.try_write(data),
            Stream::Unix(s) => s.try_write(data),
            _ => None,
        }
    }

    /// TLS records written into the session but not yet onto the socket (flush them).
    #[inline]
    pub fn pending_output(&self) -> bool {
        match self {
            Stream::Tls(t) => match &**t {
                tokio_rustls::TlsStream::Client(c) => c.get_ref().1.wants_write(),
                tokio_rustls::TlsStream::Server(s) => s.get_ref().1.wants_write(),
            },
            _ => false,
        }
    }

    /// Writes all of `buf` and, over TLS, pushes it out of the session onto the socket.
    pub async fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all(buf).await?;
        if self.pending_output() {
            self.flush().await?;
        }
        Ok(())
    }

    /// True when an idle connection's peer has closed it or sent something (an idle PostgreSQL
    /// server only speaks to say it is going away). Checks the socket's readiness first, so a
    /// healthy connection costs no system call.
    pub fn closed_while_idle(&mut self) -> bool {
        if let Stream::Tls(t) = self {
            if !common_wants_read(t) {
                return true;
            }
        }
        let probed = match self {
            Stream::Unix(s) => s.probe(),
            _ => match self.tcp() {
                Some(s) => s.probe(),
                None => return true,
            },
        };
        !matches!(probed, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Sends this thread's write batch if it holds a write of this stream ([`crate::batch`]):
    /// before the stream becomes another thread's (a server checked in to its pool).
    #[inline]
    pub fn flush_batched(&mut self) {
        match self {
            Stream::Plain(s) => s.flush_batched(),
            Stream::Unix(s) => s.flush_batched(),
            Stream::Tls(t) => {
                if let Some(s) = sock(t).io.as_ref() {
                    s.flush_batched();
                }
            }
            Stream::Closed => {}
        }
    }

    /// Takes the socket off the current reactor, to [`Detached::attach`] it on another.
    pub fn detach(self) -> io::Result<Detached> {
        match self {
            Stream::Plain(s) => {
                let (s, held) = s.into_inner()?;
                Ok(Detached::Plain(s, held))
            }
            Stream::Unix(s) => {
                let (s, held) = s.into_inner()?;
                Ok(Detached::Unix(s, held))
            }
            Stream::Tls(mut t) => {
                let io = sock(&mut t).io.take().ok_or_else(not_connected)?;
                let (io, held) = io.into_inner()?;
                Ok(Detached::Tls(t, io, held))
            }
            Stream::Closed => Err(not_connected()),
        }
    }
}

fn common_wants_read(t: &tokio_rustls::TlsStream<Sock>) -> bool {
    match t {
        tokio_rustls::TlsStream::Client(c) => c.get_ref().1.wants_read(),
        tokio_rustls::TlsStream::Server(s) => s.get_ref().1.wants_read(),
    }
}

impl AsyncRead for Stream {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(t) => Pin::new(&mut **t).poll_read(cx, buf),
            Stream::Closed => Poll::Ready(Err(not_connected())),
        }
    }
}

impl AsyncWrite for Stream {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(t) => Pin::new(&mut **t).poll_write(cx, buf),
            Stream::Closed => Poll::Ready(Err(not_connected())),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(t) => Pin::new(&mut **t).poll_flush(cx),
            Stream::Closed => Poll::Ready(Err(not_connected())),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(t) => Pin::new(&mut **t).poll_shutdown(cx),
            Stream::Closed => Poll::Ready(Err(not_connected())),
        }
    }
}
