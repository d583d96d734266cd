//! What a pool's logins with startup parameters came to: the settings as the server
//! canonicalised them and the parameters reported, by the parameters sent. A client that logs in
//! with parameters seen before needs no server to learn them, and shares the result (one
//! allocation for every client that sent the same ones).

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::server::ServerParams;
use crate::session::Settings;

/// Entries kept before the cache starts over (distinct parameter sets are few in practice).
const CAP: usize = 1024;

/// One login's outcome, shared by the clients that sent the same parameters.
#[derive(Debug, Clone)]
pub struct Login {
    /// The client's session settings.
    pub settings: Settings,
    /// Its startup parameters as canonicalised: what RESET returns to.
    pub startup: Settings,
    /// The ParameterStatus values the client is told.
    pub params: ServerParams,
}

#[derive(Default)]
pub struct Logins(Mutex<HashMap<Vec<(String, String)>, Login>>);

impl Logins {
    /// The outcome of an earlier login that sent `startup_settings`.
    pub fn get(&self, startup_settings: &[(String, String)]) -> Option<Login> {
        self.0.lock().get(startup_settings).cloned()
    }

    pub fn put(&self, startup_settings: Vec<(String, String)>, login: Login) {
        let mut m = self.0.lock();
        if m.len() >= CAP {
            m.clear();
        }
        m.insert(startup_settings, login);
    }

    /// Forgets everything (the server changed: RECONNECT, a new target).
    pub fn clear(&self) {
        self.0.lock().clear();
    }
}
