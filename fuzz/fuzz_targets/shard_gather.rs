//! A read across shards, planned: `shard::gather::plan` (libpg_query's tree, and the deparsed
//! text when an OFFSET or a grouped LIMIT moves after the merge). Input: a flag byte (bit 0:
//! the client's standard_conforming_strings off; bit 1: the catalog's aggregates unread) and
//! SQL text. Checks: no panic; a planned read's text, when rewritten, plans again to the same
//! merge with no OFFSET left; what is refused is refused with a message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::shard::gather::plan;
use pgcorral::shard::key::{Function, KeyType};
use pgcorral::shard::{Sharding, Table};

fuzz_target!(|data: &[u8]| {
    let Some((&flag, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let escapes = flag & 1 == 1;
    let tables = vec![Table::new("t", vec!["k".into()], vec![KeyType::Int8])];
    let sharding = Sharding::new(3, Function::PgHash, tables, &["o".to_string()], None, vec![KeyType::Int8]);
    // The catalog's aggregate names read (PostgreSQL's and one of the database's), or not.
    let aggregates = match flag & 2 {
        0 => vec!["count".to_string(), "my_agg".to_string()],
        _ => Vec::new(),
    };
    match plan(&sharding, &text, escapes, &aggregates) {
        Ok(g) => {
            if g.text != text {
                let again =
                    plan(&sharding, &g.text, escapes, &aggregates).expect("the rewritten text plans");
                assert_eq!(again.merge, g.merge, "{text:?} → {:?}", g.text);
                assert_eq!(again.offset, 0, "{:?}", g.text);
            }
        }
        Err(msg) => assert!(!msg.is_empty()),
    }
});
