//! Where a sharded database's request goes: `shard::plan` (libpg_query, then the constants
//! read back by their place in the text) and the comment and SET commands of `route::hint`.
//! Input: SQL text. Checks: no panic; the plan that reads constants by position (cached by the
//! text's shape) places the text exactly where a plan that reads them from the parse tree does;
//! the cache answers as a fresh plan does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::route::hint;
use pgcorral::shard::key::{Function, KeyType};
use pgcorral::shard::plan::plan;
use pgcorral::shard::{Sharding, Table};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let tables = vec![
        Table::new("t", vec!["k".into()], vec![KeyType::Int8]),
        Table::new("s.u", vec!["a".into(), "b".into()], vec![KeyType::Text, KeyType::Int4]),
        Table::new("v", vec!["id".into()], vec![KeyType::Uuid]),
    ];
    let sharding = Sharding::new(3, Function::PgHash, tables, &["o".to_string()], None, vec![KeyType::Int8]);
    let no_params = |_: usize| None;
    let by_place = plan(&sharding, &text, true).place(&sharding, &text, &no_params);
    let by_value = plan(&sharding, &text, false).place(&sharding, &text, &no_params);
    assert_eq!(by_place, by_value, "{text:?}");
    let cached = sharding.plans.get(&sharding, &text).place(&sharding, &text, &no_params);
    assert_eq!(cached, by_value, "{text:?}");
    let shard = hint::comment_shard(&text);
    assert_eq!(shard, hint::comment_shard(&text));
});
