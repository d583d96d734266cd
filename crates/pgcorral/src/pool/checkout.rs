//! The checkout guard: a server lent to one client. Dropping it returns the server by the release
//! policy: idle and clean goes straight back; an open transaction is rolled back and a
//! session-mode server is reset first, and a client's cancel request still on its way is let
//! land first (in a background task); anything uncertain is closed.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use bytes::BytesMut;
use corral_rt::exec::spawn_here;
use corral_rt::timer;
use pgwire::backend::{self, TxStatus};

use super::Pool;
use crate::cancel;
use crate::conns;
use crate::net::framed::read_message;
use crate::server::{LinkState, ServerConn};
use crate::session::exec;

/// How long a background rollback or reset may take before the server is closed instead.
pub(super) const CLEANUP_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Checkout {
    /// Boxed: a client's future holds a checkout, and should stay small.
    server: Option<Box<ServerConn>>,
    pool: Pool,
}

/// What a released server needs before it can serve someone else.
#[derive(Debug, PartialEq, Eq)]
enum Release {
    Ready,
    Clean {
        /// A client's cancel request is on its way to the server: wait until it has landed
        /// (else it could cancel the next client's query).
        cancel: bool,
        rollback: bool,
        reset: Option<String>,
    },
    Close(&'static str),
}

/// Clears every kind of session state; what a server with unknown or pinned state gets.
const DISCARD_ALL: &str = "DISCARD ALL";

impl Checkout {
    pub(super) fn new(server: Box<ServerConn>, pool: Pool) -> Checkout {
        if let Some(l) = &server.listed {
            l.set_state(conns::State::Active);
        }
        Checkout {
            server: Some(server),
            pool,
        }
    }

    pub(super) fn take(&mut self) -> Box<ServerConn> {
        self.server.take().expect("checkout holds a server")
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Moves the server to `worker`'s reactor if it lives elsewhere. False when that failed and
    /// the server was closed (its place in the pool is given back).
    pub(crate) fn rehome(&mut self, worker: usize) -> bool {
        if self.home == worker {
            return true;
        }
        let server = self.take();
        match server.rehome(worker) {
            Ok(s) => {
                self.server = Some(Box::new(s));
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not move a server connection between workers");
                self.pool.release_slot();
                false
            }
        }
    }

    fn policy(&self, server: &ServerConn) -> Release {
        // The settings are loaded only where a reset follows every release (session mode).
        let settings = self
            .pool
            .0
            .hot
            .session_reset()
            .then(|| self.pool.settings());
        let session_reset = settings.as_ref().map(|s| s.reset_query.as_str());
        let cancel = server.key.cancel_in_flight();
        release_policy(
            &server.state,
            server.pass,
            server.bound,
            session_reset,
            cancel,
        )
    }
}

/// How a server is released, from its link state, the bytes of a client message still to pass
/// (`pass`), whether it holds server-bound state (`bound`), the reset query when one follows
/// every release (`session_reset`, session mode), and whether a client's cancel request is on
/// its way to it (`cancel`).
fn release_policy(
    st: &LinkState,
    pass: usize,
    bound: bool,
    session_reset: Option<&str>,
    cancel: bool,
) -> Release {
    if st.broken {
        return Release::Close("broken");
    }
    if st.pending > 0 || st.unsynced || pass > 0 {
        return Release::Close("released with a request in flight");
    }
    let reset = if st.dirty || bound {
        // A client changed state that was not read back, or left server-bound state.
        Some(DISCARD_ALL.to_string())
    } else {
        session_reset.map(str::to_string)
    };
    let rollback = st.tx != TxStatus::Idle;
    if cancel || rollback || reset.is_some() {
        Release::Clean {
            cancel,
            rollback,
            reset,
        }
    } else {
        Release::Ready
    }
}

impl Deref for Checkout {
    type Target = ServerConn;
    fn deref(&self) -> &ServerConn {
        self.server.as_ref().expect("checkout holds a server")
    }
}

impl DerefMut for Checkout {
    fn deref_mut(&mut self) -> &mut ServerConn {
        self.server.as_mut().expect("checkout holds a server")
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let Some(mut server) = self.server.take() else {
            return;
        };
        // What the server said to the client that held it goes no further (a client that has
        // gone, or pgcorral's own login queries).
        server.held = bytes::BytesMut::new();
        match self.policy(&server) {
            Release::Ready => self.pool.checkin(server),
            Release::Close(why) => {
                self.pool.closing(&server, &why);
                // A query still running there would hold the backend after we hang up.
                let running = !server.state.broken && server.state.pending > 0;
                if running {
                    let key = server.key.clone();
                    let _ = spawn_here(async move {
                        let _ = cancel::send_cancel(&key).await;
                    });
                }
                drop(server);
                self.pool.release_slot();
            }
            Release::Clean {
                cancel,
                rollback,
                reset,
            } => {
                let pool = self.pool.clone();
                let cleaning = async move {
                    let mut server = server;
                    // Each cancel waits for PostgreSQL to hang up, so once none is on its way
                    // every one has landed.
                    let landed = !cancel
                        || (server.key.in_flight)
                            .all_landed_within(CLEANUP_TIMEOUT)
                            .await;
                    let ok = landed
                        && (!rollback && reset.is_none()
                            || timer::timeout(
                                CLEANUP_TIMEOUT,
                                clean(&mut server, rollback, reset),
                            )
                            .await
                            .unwrap_or(false));
                    if ok {
                        pool.checkin(server);
                    } else {
                        let why = match landed {
                            true => "server reset failed",
                            false => "cancel request not answered",
                        };
                        pool.closing(&server, &why);
                        drop(server);
                        pool.release_slot();
                    }
                };
                if spawn_here(cleaning).is_err() {
                    // No executor here (the process is ending): the server goes.
                    self.pool.release_slot();
                }
            }
        }
    }
}

/// Rolls back and/or runs the reset query; true when the server ends idle and healthy. After
/// `DISCARD ALL` its session state is the default; after another reset query it is unknown.
pub(crate) async fn clean(server: &mut ServerConn, rollback: bool, reset: Option<String>) -> bool {
    let discards = reset
        .as_deref()
        .map(|q| q.trim().eq_ignore_ascii_case(DISCARD_ALL));
    if reset
        .as_deref()
        .is_some_and(|q| q.to_ascii_lowercase().contains("deallocate"))
        || discards == Some(true)
    {
        // Its prepared statements are gone (or about to be).
        server.statements.clear();
    }
    match discards {
        Some(true) => {
            server.applied = None;
            server.bound = false;
        }
        Some(false) => server.applied = None,
        None => {}
    }
    let mut out = BytesMut::new();
    let mut expect = 0;
    if rollback {
        pgwire::encode::query(&mut out, "ROLLBACK");
        expect += 1;
    }
    if let Some(q) = &reset {
        pgwire::encode::query(&mut out, q);
        expect += 1;
    }
    if server.stream.send(&out).await.is_err() {
        return false;
    }
    let mut last = None;
    let mut failed = false;
    while expect > 0 {
        match read_message(&mut server.stream, &mut server.rbuf, 1 << 30).await {
            Ok((backend::READY_FOR_QUERY, body)) => {
                expect -= 1;
                last = body.first().copied().and_then(TxStatus::from_byte);
            }
            Ok((backend::ERROR_RESPONSE, _)) => {
                // A failed check or reset: the connection is not fit to hand out.
                failed = true;
            }
            Ok((backend::PARAMETER_STATUS, body)) => {
                if let Some((k, v)) = backend::parameter_status(&body) {
                    exec::set_param(&mut server.params, k, v);
                }
            }
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    if failed || last != Some(TxStatus::Idle) || !server.rbuf.is_empty() {
        return false;
    }
    server.state = Default::default();
    if discards == Some(true) {
        server.applied = Some(Default::default());
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One server at release: its link state, then what `release_policy` decides.
    struct Row {
        broken: bool,
        pending: u32,
        unsynced: bool,
        pass: usize,
        tx: TxStatus,
        dirty: bool,
        bound: bool,
        session_reset: Option<&'static str>,
        cancel: bool,
        want: Release,
    }

    const IDLE: Row = Row {
        broken: false,
        pending: 0,
        unsynced: false,
        pass: 0,
        tx: TxStatus::Idle,
        dirty: false,
        bound: false,
        session_reset: None,
        cancel: false,
        want: Release::Ready,
    };

    const IN_FLIGHT: Release = Release::Close("released with a request in flight");

    fn clean(rollback: bool, reset: Option<&str>) -> Release {
        Release::Clean {
            cancel: false,
            rollback,
            reset: reset.map(str::to_string),
        }
    }

    fn after_cancel(rollback: bool, reset: Option<&str>) -> Release {
        Release::Clean {
            cancel: true,
            rollback,
            reset: reset.map(str::to_string),
        }
    }

    #[test]
    fn release_policy_by_row() {
        use TxStatus::{Failed, InTransaction};
        let reset = Some("RESET ALL");
        #[rustfmt::skip]
        let rows = [
            // Clean and idle: straight back.
            IDLE,
            // Broken: closed, whatever else holds.
            Row { broken: true, want: Release::Close("broken"), ..IDLE },
            Row { broken: true, pending: 1, tx: InTransaction, dirty: true, bound: true, session_reset: reset, want: Release::Close("broken"), ..IDLE },
            // A request in flight: closed, whatever reset it would need.
            Row { pending: 1, want: IN_FLIGHT, ..IDLE },
            Row { unsynced: true, want: IN_FLIGHT, ..IDLE },
            Row { pass: 3, want: IN_FLIGHT, ..IDLE },
            Row { pending: 2, unsynced: true, pass: 1, tx: InTransaction, dirty: true, bound: true, session_reset: reset, want: IN_FLIGHT, ..IDLE },
            // State not read back, or server-bound state: DISCARD ALL, before any reset query.
            Row { dirty: true, want: clean(false, Some(DISCARD_ALL)), ..IDLE },
            Row { bound: true, want: clean(false, Some(DISCARD_ALL)), ..IDLE },
            Row { dirty: true, bound: true, session_reset: reset, want: clean(false, Some(DISCARD_ALL)), ..IDLE },
            // Session mode: the configured reset query.
            Row { session_reset: reset, want: clean(false, reset), ..IDLE },
            // A transaction left open or failed: rolled back.
            Row { tx: InTransaction, want: clean(true, None), ..IDLE },
            Row { tx: Failed, want: clean(true, None), ..IDLE },
            // Both.
            Row { tx: InTransaction, dirty: true, want: clean(true, Some(DISCARD_ALL)), ..IDLE },
            Row { tx: Failed, bound: true, session_reset: reset, want: clean(true, Some(DISCARD_ALL)), ..IDLE },
            Row { tx: Failed, session_reset: reset, want: clean(true, reset), ..IDLE },
            // A client's cancel on its way: it lands first, then whatever else is due.
            Row { cancel: true, want: after_cancel(false, None), ..IDLE },
            Row { cancel: true, tx: InTransaction, dirty: true, want: after_cancel(true, Some(DISCARD_ALL)), ..IDLE },
            Row { cancel: true, session_reset: reset, want: after_cancel(false, reset), ..IDLE },
            // ...unless the server is closed anyway.
            Row { cancel: true, pending: 1, want: IN_FLIGHT, ..IDLE },
            Row { cancel: true, broken: true, want: Release::Close("broken"), ..IDLE },
        ];
        for (i, row) in rows.iter().enumerate() {
            let st = LinkState {
                broken: row.broken,
                pending: row.pending,
                unsynced: row.unsynced,
                tx: row.tx,
                dirty: row.dirty,
                ..Default::default()
            };
            let got = release_policy(&st, row.pass, row.bound, row.session_reset, row.cancel);
            assert_eq!(got, row.want, "row {i}");
        }
    }
}
