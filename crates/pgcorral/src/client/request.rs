//! Waiting for a client's next request while it holds no server: no buffer kept while idle,
//! one read per readiness, client_idle_timeout, and stray COPY data dropped.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;

use bytes::{Buf, BytesMut};
use pgwire::frontend::{self, Kind as FeKind};
use pgwire::Header;
use tokio_util::io::poll_read_buf;

use super::replies::client_idle_error;
use super::ClientConn;
use crate::error::{Error, Kind, Result};
use crate::services::Services;

/// First read of a request: most requests fit; bigger ones grow the buffer in the relay.
const IDLE_READ: usize = 4096;

/// Waits for the first message of the next request while no server is attached. Returns
/// `None` when the client is gone; stray COPY messages (after a failed COPY) are dropped.
pub(super) async fn next_request(
    client: &mut ClientConn,
    services: &Services,
    idle_timeout: Option<std::time::Duration>,
) -> Result<Option<()>> {
    let deadline = idle_timeout.map(|t| tokio::time::Instant::now() + t);
    loop {
        if client.pass > 0 {
            // Discarding the rest of a stray COPY message.
            let n = client.pass.min(client.buf.len());
            client.buf.advance(n);
            client.pass -= n;
        }
        if client.pass == 0 {
            match Header::parse(&client.buf, client.max_len) {
                Err(e) => return Err(Error::new(Kind::ClientProtocol, e.to_string())),
                Ok(Some(h)) => match frontend::kind(h.tag) {
                    FeKind::Terminate => return Ok(None),
                    FeKind::Copy => {
                        client.buf.advance(pgwire::header::HEADER_LEN);
                        client.pass = h.body_len();
                        continue;
                    }
                    FeKind::Unknown => {
                        return Err(Error::new(
                            Kind::ClientProtocol,
                            format!("invalid frontend message type {}", h.tag as char),
                        ))
                    }
                    _ => return Ok(Some(())),
                },
                Ok(None) => {}
            }
        }
        if client.buf.is_empty() {
            // Idle between requests: hold no buffer while waiting, so an idle client costs
            // only its task and socket.
            client.buf = BytesMut::new();
        }
        tokio::select! {
            biased;
            r = client.stream.readable() => r.map_err(|e| Error::with_source(Kind::ClientIo, "read", e))?,
            _ = services.shutdown.cancelled() => {
                return Err(Error::new(Kind::Shutdown, "pgcorral is shutting down"));
            }
            _ = sleep_until(deadline) => {
                return Err(client_idle_error(idle_timeout.unwrap_or_default().as_millis()));
            }
        }
        if client.buf.capacity() - client.buf.len() < 1024 {
            client.buf.reserve(IDLE_READ);
        }
        // One read attempt. Readiness can be stale (left set by an exact-length read), so
        // Pending just means: wait again, and the empty buffer is dropped meanwhile. A short
        // read clears readiness, so the relay's next read costs no wasted system call.
        let read =
            poll_fn(
                |cx| match poll_read_buf(Pin::new(&mut client.stream), cx, &mut client.buf) {
                    Poll::Pending => Poll::Ready(None),
                    Poll::Ready(r) => Poll::Ready(Some(r)),
                },
            )
            .await;
        match read {
            None => {}
            Some(Ok(0)) => return Ok(None),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(Error::with_source(Kind::ClientIo, "read", e)),
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
