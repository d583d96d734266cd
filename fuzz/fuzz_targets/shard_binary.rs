//! Result values in binary format read as text for a merge across shards and written back:
//! `shard::values::binary`. Input: a byte choosing the type, then the value's bytes.
//! Checks: no panic; whatever reads as text writes back as exactly the bytes it was read from,
//! and its text compares equal to itself as the merge compares it; a LIMIT or OFFSET value of
//! the type, in either format, is read or refused (`shard::gather::count`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::shard::gather::count::count_value;
use pgcorral::shard::values::{binary, compare, Kind};

const OIDS: [u32; 16] = [16, 20, 21, 23, 26, 700, 701, 1700, 19, 25, 1043, 1042, 1082, 1114, 1184, 2950];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, value)) = data.split_first() else {
        return;
    };
    let oid = OIDS[usize::from(pick) % OIDS.len()];
    assert!(binary::supported(oid));
    if let Some(text) = binary::to_text(oid, value) {
        assert_eq!(binary::to_binary(oid, &text).as_deref(), Some(value), "{oid}: {text:?}");
        let kind = Kind::of_oid(oid).expect("a kind");
        assert_eq!(compare(kind, &text, &text), Some(std::cmp::Ordering::Equal), "{oid}: {text:?}");
    }
    // Text of any shape never panics either way.
    let _ = binary::to_binary(oid, value);
    let _ = count_value(oid, 0, Some(value));
    let _ = count_value(oid, 1, Some(value));
});
