//! The session-state pre-filter over a client's SQL: `session::scan::classify` (and
//! `custom_names`). Checks: no panic, and `classify` is the strongest effect of the statements:
//! a complete statement of known effect in front of the text gives the stronger of the two; and a
//! longer text (a NUL and more bytes after the text) never classifies weaker, which the relay's
//! `sql_text` relies on when it does not search a Query for its NUL.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::session::hooks::HookMap;
use pgcorral::session::scan::{custom_names, Effect};

/// None < Dirty < Unsure < Taint < Pins, whatever the reason a statement pins.
fn rank(e: Effect) -> u8 {
    match e {
        Effect::None => 0,
        Effect::Dirty => 1,
        Effect::Unsure => 2,
        Effect::Taint => 3,
        Effect::Pins(_) => 4,
    }
}

/// The scan in a database without user code.
fn classify(sql: &[u8]) -> Effect {
    pgcorral::session::scan::classify(sql, &HookMap::quiet())
}

fuzz_target!(|data: &[u8]| {
    let effect = classify(data);
    if let Some(nul) = data.iter().position(|&b| b == 0) {
        assert!(
            rank(effect) >= rank(classify(&data[..nul])),
            "text + NUL + more"
        );
    }
    let _ = custom_names(data);
    if data.len() > 4096 {
        return;
    }
    // A statement that does nothing session-wide changes nothing.
    let mut with = b"select 1;".to_vec();
    with.extend_from_slice(data);
    assert_eq!(rank(classify(&with)), rank(effect), "select 1; + text");
    // One that dirties the session makes the text at least dirty.
    let mut with = b"set search_path = x;".to_vec();
    with.extend_from_slice(data);
    assert_eq!(rank(classify(&with)), rank(effect).max(1), "SET; + text");
});
