//! The differential harness: the same client scripts run straight against PostgreSQL and
//! through pgcorral in each pool mode, every message each client receives compared (see
//! docs/testing.md, "Differential tests").

pub mod cases_hooks;
pub mod cases_protocol;
pub mod cases_state;
pub mod compare;
pub mod harness;
pub mod random;
pub mod run;
pub mod script;
