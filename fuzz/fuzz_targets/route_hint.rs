//! Routing hints read from SQL text before PostgreSQL's parser sees it: leading comment hints
//! (`route::hint::comment_hint`) and `SET/SHOW SERVER ROLE` (`route::hint::command`).
//! Checks: no panic, and the same answer twice.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::route::hint;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let hint = hint::comment_hint(&text);
    assert_eq!(
        format!("{hint:?}"),
        format!("{:?}", hint::comment_hint(&text))
    );
    let command = hint::command(&text);
    assert_eq!(
        format!("{command:?}"),
        format!("{:?}", hint::command(&text))
    );
});
