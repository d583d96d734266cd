//! The config file: TOML parsing into the model and validation (`config::from_toml_str`), plus
//! the string checks validation uses (`socket_mode`). Checks: no panic, and a
//! config that loads passes `validate` again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cfg) = config::from_toml_str(text) {
        assert!(config::validate(&cfg).is_ok());
    }
    let _ = config::socket_mode(text);
});
