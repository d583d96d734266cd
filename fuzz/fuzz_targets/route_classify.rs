//! Read/write routing: `route::classify::classify` (PostgreSQL's own parser via pg_query) and
//! its cache keyed by the text's skeleton (constants left out). Input: two texts separated by
//! 0xFF, the first classified through the cache before the second. Checks: no panic, and the
//! cache never answers differently from a fresh classification (two texts with one skeleton
//! must have one class).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::route::classify::{classify, Cache};

fuzz_target!(|data: &[u8]| {
    if data.len() > 2048 {
        return;
    }
    let mut parts = data.splitn(2, |&b| b == 0xff);
    // A query's text ends at its first NUL (`frontend::query_text`); libpg_query would cut it
    // there too, making two texts with one skeleton parse differently.
    let text = |p: Option<&[u8]>| {
        let p = p.unwrap_or_default();
        String::from_utf8_lossy(p.split(|&b| b == 0).next().unwrap_or_default()).into_owned()
    };
    let (a, b) = (text(parts.next()), text(parts.next()));
    let functions = vec!["nextval".to_string(), "setval".to_string()];
    let cache = Cache::new(16);
    let class_a = cache.classify(&a, &functions, 1);
    assert_eq!(class_a, classify(&a, &functions));
    let class_b = cache.classify(&b, &functions, 1);
    assert_eq!(class_b, classify(&b, &functions), "{a:?} then {b:?}");
});
