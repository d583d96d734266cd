//! The process's life as PgBouncer's: its pidfile, `-d` and `-u`, where the log goes, and what
//! each signal does (docs/operations.md).

pub mod daemon;
pub mod log;
pub mod log_line;
pub mod pidfile;
pub mod signals;
pub mod syslog;
