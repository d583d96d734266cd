//! A read across shards, planned: `shard::gather::plan` (libpg_query's tree, and the deparsed
//! text when an OFFSET or a grouped LIMIT moves after the merge, HAVING moves to pgcorral or
//! hidden columns are added). Input: a flag byte (bit 0: the client's
//! standard_conforming_strings off; bit 1: the catalog's aggregates unread) and SQL text.
//! Checks: no panic; a planned read's text, when rewritten, plans again with no OFFSET left: to
//! the same merge, or (hidden columns and HAVING) to one whose columns are the first plan's
//! visible and hidden ones, with no HAVING; what is refused is refused with a message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::shard::gather::{plan, Merge};
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
            // An OFFSET parameter stays in the shards' text as `OFFSET LEAST($n, 0::bigint)`
            // (0 for any value PostgreSQL takes, its own error for a negative one), which is
            // for the shards, not for planning again.
            if g.text != text && g.offset_param.is_none() {
                let again =
                    plan(&sharding, &g.text, escapes, &aggregates).expect("the rewritten text plans");
                assert_eq!(again.offset, 0, "{:?}", g.text);
                match (&g.merge, &again.merge) {
                    (Merge::Grouped(first), Merge::Grouped(second))
                        if first.having.is_some() || first.columns.len() > first.visible =>
                    {
                        assert_eq!(second.visible, first.columns.len(), "{:?}", g.text);
                        assert!(second.having.is_none(), "{:?}", g.text);
                    }
                    _ => assert_eq!(again.merge, g.merge, "{text:?} → {:?}", g.text),
                }
            }
        }
        Err(msg) => assert!(!msg.is_empty()),
    }
});
