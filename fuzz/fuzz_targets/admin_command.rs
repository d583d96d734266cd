//! The admin console's command parser (`SHOW ...`, `PAUSE`, `RELOAD`, ...), fed by any user
//! that reaches the console. Checks: no panic, and the same answer twice.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let first = pgcorral::fuzzing::admin_command(&text);
    assert_eq!(first, pgcorral::fuzzing::admin_command(&text));
});
