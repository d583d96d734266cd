//! Connections of pgcorral's own beside a pool (the notification hub's, the result cache's):
//! logged in as the pool's servers are, but outside its places and caps, never pooled nor
//! listed.

use std::sync::Arc;

use super::{ClientWait, Pool};
use crate::error::Result;
use crate::server::hooks::Watch;
use crate::server::ServerConn;

impl Pool {
    /// This pool's identity while it lives: two handles give the same number only when they
    /// are the same pool (a tenant's pools may share a database's name with another's).
    pub fn identity(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// Opens the hub's listening connection on `worker` (a server that is down fails at once:
    /// the LISTEN that asked for it is told).
    pub async fn open_listener(&self, worker: usize) -> Result<ServerConn> {
        let settings = self.0.settings.load_full();
        let target = self.0.target.lock().clone();
        let mut server = self
            .log_in(&settings, &target, worker, (false, ClientWait::default()))
            .await?;
        server.generation = self.generation();
        Ok(server)
    }

    /// Opens a logical replication connection (`replication=database`) to the pool's database
    /// on `worker`, for the result cache's stream of changes.
    pub async fn open_replication(&self, worker: usize) -> Result<ServerConn> {
        let settings = self.0.settings.load_full();
        let mut target = self.0.target.lock().clone();
        target
            .startup
            .retain(|(k, _)| !k.eq_ignore_ascii_case("replication"));
        target
            .startup
            .push(("replication".to_string(), "database".to_string()));
        self.log_in(&settings, &target, worker, (false, ClientWait::default()))
            .await
    }

    /// The session-state watch of the pool's server database: its generation moves with each
    /// statement that may change the catalog or run user code (see [`crate::server::hooks`]).
    pub fn hook_watch(&self) -> &Arc<Watch> {
        &self.0.hooks
    }
}
