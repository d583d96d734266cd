//! A logged-in client's requests, with its request loop's state boxed: an idle client waits
//! for its next request with only what the wait needs, and the loop's state is allocated when
//! a request comes.

use std::future::Future;
use std::time::Duration;

use super::request::{next_request, IdleTimer, Next};
use super::{run, timeouts, ClientConn, Exit, LoggedIn};
use crate::cold;
use crate::error::Result;
use crate::notify;
use crate::services::Services;

/// Waits for the client's first request without the request loop's state, then runs the loop
/// ([`run`]) until the client leaves or moves on. The loop's state (the relay's, the
/// checkout's, its mode) is boxed once per busy spell, not per transaction: when the upkeep
/// finds the client idle a while ([`crate::conns::Lists::slim_idle_clients`]), the loop ends at
/// its wait, the box is freed, and the client waits here again. Not an `async fn`, whose
/// arguments would be kept twice.
#[allow(clippy::manual_async_fn)]
pub(super) fn serve<'a>(
    client: &'a mut ClientConn,
    services: &'a Services,
    session: &'a mut LoggedIn,
) -> impl Future<Output = Result<Exit>> + 'a {
    async move {
        let mut left = idle_timeout(services, session);
        loop {
            session.listed.slimmed();
            let mut timer = IdleTimer::default();
            // A client that listens through the hub (moved here from another worker, say)
            // has its notifications watched for too: the loop writes them.
            let inbox = session.listening.as_deref().map(notify::Listener::inbox);
            match next_request(client, services, left, &mut timer, true, None, inbox).await? {
                Next::Gone(why) => return Ok(Exit::Left(why)),
                // A request is buffered, a takeover began, or notifications wait: the loop
                // takes it from there (and moves the client to another worker first if it
                // should).
                Next::Request | Next::HandOver | Next::Slim(_) | Next::Notified => {}
            }
            drop(timer);
            session.listed.unslim();
            let deadline = match cold::cold(run(client, services, session)).await? {
                Exit::Slim(deadline) => deadline,
                exit => return Ok(exit),
            };
            // client_idle_timeout runs on from where the loop's wait began.
            left = deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
        }
    }
}

/// The client's client_idle_timeout under the configuration now (its user's own, else
/// [general]'s).
fn idle_timeout(services: &Services, session: &LoggedIn) -> Option<Duration> {
    timeouts(
        &services
            .config
            .load()
            .client_timeouts(session.listed.user()),
    )
    .client_idle
}
