//! The connection a database's notification hub listens on: logged in as the pool's servers
//! are, but outside its places and caps (the pool plus one), never pooled nor listed.

use super::{ClientWait, Pool};
use crate::error::Result;
use crate::server::ServerConn;

impl Pool {
    /// This pool's identity while it lives: two handles give the same number only when they
    /// are the same pool (a tenant's pools may share a database's name with another's).
    pub fn identity(&self) -> usize {
        std::sync::Arc::as_ptr(&self.0) as usize
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
}
