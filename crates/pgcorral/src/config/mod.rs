//! Configuration: the TOML model, its validation, the embedded default used without a file, and PgCat's and PgBouncer's files read as they are.

mod ini;
mod load;
mod model;
pub mod overrides;
mod pgbouncer;
mod pgbouncer_db;
mod pgbouncer_general;
mod pgbouncer_keys;
#[cfg(test)]
mod pgbouncer_tests;
mod pgcat;
mod pgcat_pool;
#[cfg(test)]
mod pgcat_tests;
pub mod settings;
mod sharding;
pub mod userlist;
mod validate;

pub use load::{embedded_default, from_toml_str, load_file, load_file_warnings, ConfigError};
pub use model::*;
pub use overrides::ClientTimeouts;
pub use pgbouncer::{from_pgbouncer_str, is_pgbouncer};
pub use pgbouncer_general::set_key as set_pgbouncer_key;
pub use pgcat::{from_pgcat_str, is_pgcat, Warning};
pub use settings::MAX_MS;
pub use validate::{socket_mode, syslog_facility, validate, RESERVED_DATABASES};
