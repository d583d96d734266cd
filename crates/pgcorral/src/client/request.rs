//! Waiting for a client's next request while it holds no server: no buffer kept while idle,
//! one read per readiness, client_idle_timeout, and stray COPY data and Flush messages dropped.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Buf;
use corral_rt::timer::sleep_until;
use pgwire::frontend::{self, Kind as FeKind};
use pgwire::Header;
use tokio::time::Sleep;

use super::replies::client_idle_error;
use super::ClientConn;
use crate::conns::Entry;
use crate::error::{Error, Kind, Result};
use crate::notify::Inbox;
use crate::services::Services;

/// First read of a request: most requests fit; bigger ones grow the buffer in the relay.
const IDLE_READ: usize = 4096;

/// Why a client left: it asked (Terminate), as PgBouncer logs it.
pub(super) const CLOSE_REQUEST: &str = "client close request";
/// Why a client left: its socket closed without a Terminate.
pub(super) const UNEXPECTED_EOF: &str = "client unexpected eof";

/// What the wait for a request found.
pub(super) enum Next {
    /// A request's first message is buffered.
    Request,
    /// The client is gone: [`CLOSE_REQUEST`] or [`UNEXPECTED_EOF`].
    Gone(&'static str),
    /// A new process took over (`-R`): the client goes there if it can (only while
    /// `watch_handover`).
    HandOver,
    /// Idle a while, the client was asked to wait on without the request loop's state (only
    /// with `slim`, see [`crate::conns::Lists::slim_idle_clients`]); client_idle_timeout's
    /// deadline, if any, goes with it.
    Slim(Option<tokio::time::Instant>),
    /// Notifications wait in the client's inbox (only with `inbox`).
    Notified,
}

/// Waits for the first message of the next request while no server is attached. Stray COPY
/// messages (after a failed COPY) and Flush messages (nothing is outstanding) are dropped.
pub(super) fn next_request<'a>(
    client: &'a mut ClientConn,
    services: &'a Services,
    idle_timeout: Option<std::time::Duration>,
    idle_timer: &'a mut IdleTimer,
    watch_handover: bool,
    slim: Option<&'a Entry>,
    inbox: Option<&'a Inbox>,
) -> NextRequest<'a> {
    let timer = idle_timeout.map(|t| idle_timer.arm(tokio::time::Instant::now() + t));
    NextRequest {
        client,
        services,
        // For the error's words only (beyond 49 days, 49 days).
        idle_ms: idle_timeout.map_or(0, |t| u32::try_from(t.as_millis()).unwrap_or(u32::MAX)),
        timer,
        slim,
        inbox,
        watch_handover,
        woken: false,
    }
}

/// The wait of [`next_request`]. Written out rather than an `async` block: every idle client's
/// task holds it, and an `async` block would keep its arguments twice and a closure's
/// references to them a third time.
pub(super) struct NextRequest<'a> {
    client: &'a mut ClientConn,
    services: &'a Services,
    /// client_idle_timeout in ms, for the error's words (its timer is `timer`): 4 bytes rather
    /// than a `Duration`'s 16 in every idle client's task.
    idle_ms: u32,
    /// client_idle_timeout's timer, armed (its deadline is the wait's).
    timer: Option<Pin<&'a mut Sleep>>,
    /// The client's list entry, when it may be asked to wait without its request loop's state.
    slim: Option<&'a Entry>,
    /// The client's notifications, written between its requests.
    inbox: Option<&'a Inbox>,
    /// A takeover (`-R`) ends the wait with [`Next::HandOver`].
    watch_handover: bool,
    /// Polled since the socket last had nothing: the next poll tries a read straight away.
    woken: bool,
}

impl Future for NextRequest<'_> {
    type Output = Result<Next>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Next>> {
        let this = self.get_mut();
        loop {
            if let Some(found) = buffered(this.client) {
                return Poll::Ready(found);
            }
            let client = &mut *this.client;
            if client.buf.is_empty() && client.buf.capacity() > 0 {
                // Idle between requests: hold no buffer while waiting, so an idle client costs
                // only its task and socket. The buffer goes to the worker's spares, for the
                // next client with a request to read.
                spare::put(std::mem::take(&mut client.buf));
            }
            // The end of the last answer may still be in the TLS session.
            if client.stream.pending_output() {
                if let Poll::Ready(Err(e)) =
                    tokio::io::AsyncWrite::poll_flush(Pin::new(&mut client.stream), cx)
                {
                    return Poll::Ready(Err(Error::with_source(Kind::ClientIo, "write", e)));
                }
            }
            // Readable, else a takeover, else slimming, else the idle timeout, in that order.
            // The socket's readiness is polled in place. Once woken, the socket is most likely
            // readable, so the read is tried straight away (a read that finds nothing registers
            // the waker as polling readiness would, and costs no system call): one readiness
            // check fewer per request. Shutdown wakes the client through its list entry, whose
            // waker `Entry::killable` registered before this poll, so reading the flag here
            // misses no shutdown.
            let read = if this.woken {
                match read_into_buffer(client, cx) {
                    Poll::Ready(r) => Some(r),
                    Poll::Pending => None,
                }
            } else if client.stream.still_registered(client.read_armed) {
                // The relay's last read of the client left this task registered: nothing
                // to poll until the client's next bytes wake it.
                None
            } else {
                match client.stream.poll_read_ready(cx) {
                    Poll::Ready(Err(e)) => {
                        return Poll::Ready(Err(Error::with_source(Kind::ClientIo, "read", e)))
                    }
                    // Ready at the first look: one read attempt. Readiness can be stale (left
                    // set by an exact-length read), so Pending just means: wait again, and the
                    // empty buffer is dropped meanwhile. A short read clears readiness, so the
                    // relay's next read costs no wasted system call.
                    Poll::Ready(Ok(())) => match read_into_buffer(client, cx) {
                        Poll::Ready(r) => Some(r),
                        Poll::Pending => continue,
                    },
                    Poll::Pending => None,
                }
            };
            match read {
                Some(Ok(0)) => return Poll::Ready(Ok(Next::Gone(UNEXPECTED_EOF))),
                Some(Ok(_)) => this.woken = false,
                Some(Err(e)) => {
                    return Poll::Ready(Err(Error::with_source(Kind::ClientIo, "read", e)))
                }
                None => {
                    this.woken = true;
                    // A takeover wakes idle clients through their list entries, as a stop does.
                    if this.watch_handover && this.services.handover.get().is_some() {
                        return Poll::Ready(Ok(Next::HandOver));
                    }
                    if this.inbox.is_some_and(|i| i.poll_ready(cx)) {
                        return Poll::Ready(Ok(Next::Notified));
                    }
                    if this.slim.is_some_and(|e| e.take_slim()) {
                        let deadline = this.timer.as_ref().map(|t| t.deadline());
                        return Poll::Ready(Ok(Next::Slim(deadline)));
                    }
                    // Idle clients stay through a stop that waits (WAIT_FOR_SERVERS closes them
                    // at their next request, see `client::run`); the process's exit kills their
                    // list entries, which ends this future from outside (`Entry::killable`).
                    if let Some(t) = &mut this.timer {
                        if t.as_mut().poll(cx).is_ready() {
                            let ms = u128::from(this.idle_ms);
                            return Poll::Ready(Err(client_idle_error(ms)));
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

/// What the client's buffer already holds: the next request's first message, its departure,
/// or an error; `None` when more must be read. Skips stray COPY messages and Flush messages.
fn buffered(client: &mut ClientConn) -> Option<Result<Next>> {
    loop {
        if client.pass > 0 {
            // Discarding the rest of a stray COPY message.
            let n = client.pass.min(client.buf.len());
            client.buf.advance(n);
            client.pass -= n;
            if client.pass > 0 {
                return None;
            }
        }
        // The type is checked before the length, as PostgreSQL does.
        if let Some(&tag) = client.buf.first() {
            if matches!(frontend::kind(tag), FeKind::Unknown) {
                return Some(Err(Error::new(
                    Kind::ClientProtocol,
                    format!("invalid frontend message type {tag}"),
                )));
            }
        }
        let h = match Header::parse(&client.buf, client.max_len) {
            Err(e) => return Some(Err(Error::new(Kind::ClientProtocol, e.to_string()))),
            Ok(None) => return None,
            Ok(Some(h)) => h,
        };
        match frontend::kind(h.tag) {
            FeKind::Terminate => return Some(Ok(Next::Gone(CLOSE_REQUEST))),
            // With no server held nothing is owed, so a Flush asks for nothing: psycopg ends a
            // pipeline with Sync then Flush, which may arrive apart. Checking out a server for
            // it would hold that server until the client's next request.
            FeKind::Extended if h.tag == frontend::FLUSH => {}
            FeKind::Copy => {}
            _ => return Some(Ok(Next::Request)),
        }
        client.buf.advance(pgwire::header::HEADER_LEN);
        client.pass = h.body_len();
    }
}

/// Most bytes of one request buffered while its shard waits for the rest of it.
const ROUTE_WAIT_MAX: usize = 16 << 20;

/// Reads more of a request that cannot be routed before the rest of it comes (a sharded
/// database's Parse before its Bind). `None` when the client is gone.
pub(super) async fn read_more(client: &mut ClientConn) -> Result<Option<()>> {
    if client.buf.len() >= ROUTE_WAIT_MAX {
        return Err(Error::new(
            Kind::ClientProtocol,
            format!(
                "a request of more than {ROUTE_WAIT_MAX} bytes without a Sync cannot be routed to a shard"
            ),
        ));
    }
    match poll_fn(|cx| read_into_buffer(client, cx)).await {
        Ok(0) => Ok(None),
        Ok(_) => Ok(Some(())),
        Err(e) => Err(Error::with_source(Kind::ClientIo, "read", e)),
    }
}

/// The first buffered message, read whole when its body is at most `max` bytes: its length
/// (header included), or `None` (longer, a malformed header the relay will report, or the
/// client left).
pub(super) async fn read_whole(client: &mut ClientConn, max: usize) -> Result<Option<usize>> {
    let h = loop {
        match Header::parse(&client.buf, client.max_len) {
            Ok(Some(h)) => break h,
            Err(_) => return Ok(None),
            Ok(None) => {
                if read_more(client).await?.is_none() {
                    return Ok(None);
                }
            }
        }
    };
    if h.body_len() > max {
        return Ok(None);
    }
    while client.buf.len() < h.total_len() {
        if read_more(client).await?.is_none() {
            return Ok(None);
        }
    }
    Ok(Some(h.total_len()))
}

/// One read into the client's buffer, taken from the worker's spares if it holds none; a read
/// that finds nothing gives an empty buffer back, so an idle client keeps none.
fn read_into_buffer(
    client: &mut ClientConn,
    cx: &mut std::task::Context<'_>,
) -> Poll<std::io::Result<usize>> {
    if client.buf.capacity() == 0 {
        client.buf = spare::take();
    }
    if client.buf.capacity() - client.buf.len() < 1024 {
        client.buf.reserve(IDLE_READ);
    }
    let r = client.poll_read(cx);
    if r.is_pending() && client.buf.is_empty() {
        spare::put(std::mem::take(&mut client.buf));
    }
    r
}

/// client_idle_timeout's timer, kept for the client's life on its worker: allocated at the first
/// wait with a timeout and reset for each later one, so a client without the timeout carries no
/// timer, and one with it allocates once rather than per request.
#[derive(Default)]
pub(super) struct IdleTimer(Option<Pin<Box<Sleep>>>);

impl IdleTimer {
    /// The timer, set to fire at `deadline`.
    fn arm(&mut self, deadline: tokio::time::Instant) -> Pin<&mut Sleep> {
        match &mut self.0 {
            Some(s) => s.as_mut().reset(deadline),
            None => self.0 = Some(Box::pin(sleep_until(deadline))),
        }
        self.0.as_mut().expect("set above").as_mut()
    }
}

/// Read buffers of clients gone idle, kept per worker thread for the next client's request:
/// under load a client waits between transactions, and without this each request would
/// allocate a buffer and free it again. Bounded, so idle clients still hold no memory.
mod spare {
    use std::cell::RefCell;

    use bytes::BytesMut;

    /// At most this many per worker thread (256 KiB of 4 KiB buffers).
    const KEEP: usize = 64;
    /// Bigger buffers (after a large message) go back to the allocator.
    const LARGEST: usize = 16 * 1024;

    thread_local! {
        static SPARE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    }

    /// Keeps `buf` (empty) for another request on this thread, or frees it.
    pub(super) fn put(mut buf: BytesMut) {
        if buf.capacity() > LARGEST {
            return;
        }
        buf.clear();
        SPARE.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < KEEP {
                s.push(buf);
            }
        });
    }

    /// A kept buffer, or an empty one (which allocates when reserved).
    pub(super) fn take() -> BytesMut {
        SPARE.with(|s| s.borrow_mut().pop()).unwrap_or_default()
    }
}
