//! A replication client (`replication=database`, or a true value): a server connection of its
//! own, logged in with the client's startup parameters, whose every byte is relayed both ways
//! until either side ends (replication commands, COPY BOTH streams and, on a logical
//! connection, SQL), as PgBouncer does since 1.23. A client of a database whose server is a
//! pooler's admin console (PgBouncer's, or pgcorral's own) is linked the same way: a console
//! runs no SQL, so a session there cannot be set up, checked or reset as a pool's is.

use std::sync::Arc;

use bytes::BytesMut;
use pgwire::encode;

use super::admit::{welcome, Admitted};
use super::ClientConn;
use crate::cancel::CancelSlot;
use crate::conns;
use crate::error::Result;
use crate::pool::{ClientWait, Dedicated, Pool};
use crate::services::Services;
use crate::session::startup::Replication;

/// A logged-in replication client and its server.
pub(super) struct Link {
    pub server: Dedicated,
    pub listed: conns::Listed,
    pub pid: i32,
    pub secret: i32,
    pool: Pool,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.pool.client_left();
    }
}

/// The startup parameters the server gets: the client's, but for those pgcorral answers itself
/// (user and database are the pool's; protocol options were negotiated with the client).
fn server_startup(params: &[(String, String)]) -> Vec<(String, String)> {
    params
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "user" | "database") && !k.starts_with("_pq_."))
        .cloned()
        .collect()
}

/// Whether a server that reported `params` is a pooler's admin console rather than PostgreSQL:
/// its `server_version` ends in `/bouncer` (PgBouncer's) or `/pgcorral` (ours).
pub(super) fn is_console(params: &[(String, String)]) -> bool {
    params.iter().any(|(k, v)| {
        k == "server_version" && (v.ends_with("/bouncer") || v.ends_with("/pgcorral"))
    })
}

/// Opens the client's server and welcomes the client with what that server reported
/// (parameters, and a cancel key of pgcorral's that reaches it). `told` holds what the login
/// has written for the client so far (left there when the server refuses). `kind` is `None`
/// for a console's client.
#[allow(clippy::too_many_arguments)]
pub(super) async fn login(
    client: &mut ClientConn,
    services: &Services,
    pool: &Pool,
    kind: Option<Replication>,
    (user, params): (&str, &[(String, String)]),
    told: &mut BytesMut,
    id: u64,
) -> Result<Admitted> {
    let database = pool.name().0;
    if services.control.is_paused(database) {
        services.control.wait_resumed(database).await;
    }
    let wait = ClientWait::of_user(&services.config.load(), user);
    let server = pool
        .dedicated(client.worker, &server_startup(params), wait)
        .await?;
    // What the login told the client so far stays with it if the server refuses.
    let mut out = told.split();
    for (k, v) in server.params.iter() {
        encode::parameter_status(&mut out, k, v);
    }
    let slot = Arc::new(CancelSlot::default());
    slot.set(Some(server.key.clone()));
    let pid = server.key.pid;
    let (secret, listed) =
        welcome(client, services, out, pool, (user, params), (pid, slot), id).await?;
    if let Some(kind) = kind {
        listed.set_replication(kind.name());
    }
    if let Some(l) = &server.listed {
        if let Some(kind) = kind {
            l.set_replication(kind.name());
        }
        l.set_link(listed.id);
        listed.set_link(l.id);
    }
    pool.client_joined();
    Ok(Admitted::Replication(Box::new(Link {
        server,
        listed,
        pid,
        secret,
        pool: pool.clone(),
    })))
}
