//! The client's side of a connection, as the hops past admission share it: its socket, what
//! has been read from it and not yet forwarded, and its prepared statements. A leaf: the
//! request loop (`client`), routing, the relay and the console all take it, and it knows none
//! of them.

use bytes::BytesMut;
use corral_rt::stream::Stream;

use crate::error::{Error, Kind, Result};
use crate::net::peer::Peer;
use crate::prepared::ClientStatements;

/// The client's socket and what has been read from it but not yet forwarded.
pub struct ClientConn {
    pub stream: Stream,
    /// Where it connected from.
    pub peer: Peer,
    pub buf: BytesMut,
    /// Bytes of a message body still to pass through unparsed.
    pub pass: usize,
    /// Largest message accepted from this client.
    pub max_len: u32,
    /// The worker thread this client lives on; servers it holds are moved there.
    pub worker: usize,
    /// Custom (dotted) setting names seen in the client's SET/RESET/set_config since the last
    /// capture; empty (no allocation) for almost every client.
    pub custom: thin_vec::ThinVec<String>,
    /// Its prepared statements (transaction and statement mode); empty until it prepares one.
    pub statements: ClientStatements,
    /// The last read of the (plaintext) socket found nothing and left this task registered for
    /// its next bytes; the socket keeps that registration until they come, so waiting for the next
    /// request needs no second one.
    pub read_armed: bool,
}

impl ClientConn {
    /// Writes `out` (pgcorral's own answer) to the client.
    pub async fn reply(&mut self, out: &[u8]) -> Result<()> {
        self.stream
            .send(out)
            .await
            .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))
    }

    /// One read into `buf`'s spare room (see [`Stream::poll_read_into`]), noting whether it
    /// left the task registered for the socket.
    #[inline]
    pub fn poll_read(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.stream
            .poll_read_armed(cx, &mut self.buf, &mut self.read_armed)
    }
}
