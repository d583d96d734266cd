//! A client linked to a server of its own for its whole connection (replication, or a
//! database whose server is another pooler's console): every byte relayed both ways, nothing
//! parsed, nothing pooled.

use crate::client_conn::ClientConn;
use crate::error::{Error, Kind, Result};
use crate::pool::Dedicated;

/// Relays both ways until both sides have finished (the one that ends first has its end
/// passed on to the other); what either sent before the relay began goes first. Returns why
/// the client left, in PgBouncer's words.
pub async fn relay(client: &mut ClientConn, server: &mut Dedicated) -> Result<&'static str> {
    let early = client.buf.split();
    if !early.is_empty() {
        server
            .stream
            .send(&early)
            .await
            .map_err(|e| Error::with_source(Kind::ServerIo, "write", e))?;
    }
    let early = server.rbuf.split();
    if !early.is_empty() {
        client.reply(&early).await?;
    }
    tokio::io::copy_bidirectional(&mut client.stream, &mut server.stream)
        .await
        .map_err(|e| Error::with_source(Kind::ClientIo, "linked connection", e))?;
    Ok("client close request")
}
