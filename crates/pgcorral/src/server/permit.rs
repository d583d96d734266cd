//! A server connection's place under shared caps (`max_db_connections`, `max_user_connections`):
//! held with the connection and given back when it is dropped, whoever keeps the caps.

use std::any::Any;

/// Room for one server under its caps. The caps' keeper hands over a value whose drop gives the
/// room back (so the connection needs to know nothing of the caps); dropping the permit drops it.
pub struct Permit(#[allow(dead_code)] Box<dyn Any + Send + Sync>);

impl Permit {
    /// A permit that gives its room back when `room` is dropped.
    pub fn new(room: impl Any + Send + Sync) -> Permit {
        Permit(Box::new(room))
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permit")
    }
}
