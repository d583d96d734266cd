//! Configuration: the TOML model, its validation, and the embedded default used without a file.

mod load;
mod model;
mod pgcat;
mod pgcat_pool;
#[cfg(test)]
mod pgcat_tests;
mod sharding;
mod validate;

pub use load::{embedded_default, from_toml_str, load_file, load_file_warnings, ConfigError};
pub use model::*;
pub use pgcat::{from_pgcat_str, is_pgcat, Warning};
pub use validate::{socket_mode, validate, RESERVED_DATABASES};
