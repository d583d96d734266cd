//! Configuration: the TOML model, its validation, and the embedded default used without a file.

mod load;
mod model;
mod sharding;
mod validate;

pub use load::{embedded_default, from_toml_str, load_file, ConfigError};
pub use model::*;
pub use validate::{socket_mode, validate, RESERVED_DATABASES};
