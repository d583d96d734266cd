//! A server connection of one client's own (replication): opened for it with its startup
//! parameters, in a place of the pool (an idle server is evicted to make room when the pool is
//! full), and closed when it is done, never pooled.

use std::ops::{Deref, DerefMut};
use std::task::Poll;

use super::inner::{self, Grant};
use super::{mailbox, Checkout, ClientWait, Open, Pool};
use crate::clock;
use crate::error::{Error, Kind, Result};
use crate::server::ServerConn;

/// A server opened for one client alone. Dropping it closes the server and gives its place
/// back: it never returns to the pool, whatever state it is in.
pub struct Dedicated(Option<Checkout>);

impl Pool {
    /// Opens a server for one client, logged in with `startup` (its own parameters, over the
    /// database's), in a place of this pool: a free one, else the least recently used idle
    /// server's (closed, `evicted`), else the first to come free, waiting as a checkout waits
    /// (up to query_wait_timeout, or `wait`, the client's own).
    pub async fn dedicated(
        &self,
        worker: usize,
        startup: &[(String, String)],
        wait: ClientWait,
    ) -> Result<Dedicated> {
        let slot = self.place(worker, wait).await?;
        let c = self
            .open_for(slot, worker, Open::Dedicated(startup), wait)
            .await?;
        Ok(Dedicated(Some(c)))
    }

    /// A counted place for a new server.
    async fn place(&self, worker: usize, client_wait: ClientWait) -> Result<inner::Slot> {
        let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        let (wait, evicted) = {
            let mut inner = self.0.inner.lock();
            if inner.open < self.0.hot.size() {
                inner.open += 1;
                return Ok(inner::Slot::new(self.clone()));
            }
            match inner.idle.is_empty() {
                // Its place is taken over: still counted.
                false => (None, Some(inner.idle.remove(0))),
                true => {
                    let (wait, entry) = mailbox::open(waker);
                    inner.waiters.push_back(inner::Waiting {
                        since: clock::now(),
                        worker,
                        wait: client_wait,
                        entry,
                    });
                    (Some(wait), None)
                }
            }
        };
        if let Some(server) = evicted {
            self.closing(&server, &"evicted");
            return Ok(inner::Slot::new(self.clone()));
        }
        match wait.expect("waits when nothing was evicted").await {
            Some(Grant::Slot(slot)) => Ok(slot),
            Some(Grant::Server(mut c)) => {
                // A server came back for us: closed, and its place is ours.
                let server = c.take();
                self.closing(&server, &"evicted");
                Ok(inner::Slot::new(self.clone()))
            }
            Some(Grant::TimedOut(waited)) => {
                Err(self.0.settings.load().waited_too_long(waited, client_wait))
            }
            Some(Grant::Shutdown) => Err(Error::server_shutting_down()),
            None => Err(Error::new(Kind::Shutdown, "pool closed")),
        }
    }
}

impl Deref for Dedicated {
    type Target = ServerConn;
    fn deref(&self) -> &ServerConn {
        self.0.as_ref().expect("a dedicated server until dropped")
    }
}

impl DerefMut for Dedicated {
    fn deref_mut(&mut self) -> &mut ServerConn {
        self.0.as_mut().expect("a dedicated server until dropped")
    }
}

impl Drop for Dedicated {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let pool = c.pool().clone();
            let server = c.take();
            // PgBouncer's words.
            pool.closing(&server, &"replication client was closed");
            drop(server);
            pool.release_slot();
        }
    }
}
