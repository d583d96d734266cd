//! A multi-row INSERT split to its rows' shards (`shard::insert`). Input: SQL text, and the
//! same bytes as a Bind body. Checks: no panic; each shard's part, read again, is one INSERT
//! whose parameters are exactly `$1..$k`; a Bind's subset is a Bind that reads back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::shard::insert::{split, subset};
use pgwire::frontend::BindBody;

fuzz_target!(|data: &[u8]| {
    if let Some(b) = BindBody::parse(data) {
        for params in [&[][..], &[0], &[1, 0], &[0, 2, 1]] {
            if let Some(body) = subset(&b, params) {
                assert!(BindBody::parse(&body).is_some());
            }
        }
    }
    let text = String::from_utf8_lossy(data);
    for n in 1..=4 {
        let rows: Vec<usize> = (0..n).map(|i| i % 2).collect();
        // Backslash escapes in plain strings (standard_conforming_strings off) on odd rounds.
        let escapes = n % 2 == 1;
        let Ok(parts) = split(&text, &rows, escapes) else {
            continue;
        };
        for p in parts {
            let mine = rows.iter().filter(|&&s| s == p.shard).count();
            // (A text libpg_query writes back but cannot read again is its own matter.)
            let Ok(again) = split(&p.sql, &vec![0; mine], escapes) else {
                continue;
            };
            assert_eq!(again.len(), 1, "{:?}", p.sql);
            let k = p.params.len();
            assert_eq!(again[0].params, (0..k).collect::<Vec<_>>(), "{:?}", p.sql);
        }
    }
});
