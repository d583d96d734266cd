//! A client's session state between transactions: restored on each server it is given, read
//! back after a transaction that may have changed it, and what pins it to its server.

use super::{listens, ClientConn, LoggedIn};
use crate::error::{Error, Kind, Result};
use crate::pool::Checkout;
use crate::services::Services;
use crate::session;
use crate::session::apply;

/// After a transaction that may have changed the session: records the client's settings as
/// the server now has them, and pins or unpins the client by what is bound to the server. A
/// server the client keeps (`keeps`: session mode, where nothing pins) is given back what the
/// capture turned off or a RESET lost (see [`apply::reinstate`]), as is one it is now pinned
/// to.
pub(super) async fn recapture(
    (services, worker): (&Services, usize),
    session: &mut LoggedIn,
    server: &mut Checkout,
    seen: &mut thin_vec::ThinVec<String>,
    keeps: bool,
) -> Result<()> {
    let login_user = session.pool.server_user();
    let mut custom: Vec<String> = session::custom_names_of(&session.settings)
        .chain(session::custom_names_of(&session.startup))
        .chain(seen.drain(..))
        .collect();
    custom.sort();
    custom.dedup();
    *seen = Default::default();
    let captured = apply::capture(server, &login_user, &custom).await?;
    session.settings = session::with_startup(&captured.settings, &session.startup);
    if keeps {
        // Session mode: the server is the client's anyway; nothing pins.
        return apply::reinstate(server, &captured.on_server, &session.settings).await;
    }
    let mut pins = captured.pins;
    // A server's LISTENs are taken over by the database's hub where they can be.
    if pins.iter().any(|p| p == "LISTEN")
        && listens::adopt(services, session, server, worker).await?
    {
        pins.retain(|p| p != "LISTEN");
    }
    if *pins != *session.pinned {
        if pins.is_empty() {
            tracing::info!(
                pid = session.pid,
                "client unpinned: its server-bound state is gone"
            );
        } else {
            tracing::info!(pid = session.pid, reasons = ?pins, "client pinned to its server connection until this state is released");
        }
        session.pinned = pins.into_iter().collect();
        session.listed.set_pinned(session.pinned.join(", "));
    }
    server.bound = !session.pinned.is_empty();
    if server.bound {
        apply::reinstate(server, &captured.on_server, &session.settings).await?;
    }
    Ok(())
}

/// Sends the client the notifications and notices its server sent while pgcorral ran its own
/// queries there (see [`crate::server::ServerConn::held`]), in the order they came.
pub(super) async fn deliver_held(client: &mut ClientConn, server: &mut Checkout) -> Result<()> {
    let held = std::mem::take(&mut server.held);
    client
        .stream
        .send(&held)
        .await
        .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))
}
