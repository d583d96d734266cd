//! The COPY splitter of sharded tables (`shard::copy::Splitter`), over client COPY data.
//! Input: a format byte (text, CSV, binary), a delimiter, a header flag, the key's column
//! position, a cut point, then the data. Checks: no panic; the data fed in two pieces gives
//! the same rows, to the same shards, and the same verdict as fed whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::shard::copy::{Format, Options, Splitter, To};
use pgcorral::shard::key::{Function, KeyType};

/// Every piece handed out, with where it went, and the verdict.
fn run(options: &Options, key_at: usize, pieces: &[&[u8]]) -> (Vec<(Option<usize>, Vec<u8>)>, Result<(), String>) {
    let mut split = Splitter::new(options.clone(), vec![key_at], vec![KeyType::Int8], Function::PgHash, 3, 1 << 16);
    let mut out: Vec<(Option<usize>, Vec<u8>)> = Vec::new();
    let mut take = |to: To, bytes: &[u8]| {
        let to = match to {
            To::Shard(n) => {
                assert!(n < 3, "shard {n} of 3");
                Some(n)
            }
            To::Every => None,
        };
        out.push((to, bytes.to_vec()));
    };
    let mut verdict = Ok(());
    for p in pieces {
        if let Err(e) = split.feed(p, &mut take) {
            verdict = Err(e);
            break;
        }
    }
    if verdict.is_ok() {
        verdict = split.finish(&mut take);
    }
    (out, verdict)
}

fuzz_target!(|data: &[u8]| {
    let [format, delimiter, header, key_at, cut, rest @ ..] = data else {
        return;
    };
    let mut options = Options::new(match format % 3 {
        0 => Format::Text,
        1 => Format::Csv,
        _ => Format::Binary,
    });
    if options.format != Format::Binary {
        if delimiter.is_ascii_punctuation() && *delimiter != b'"' && *delimiter != b'\\' {
            options.delimiter = *delimiter;
        }
        options.header = header & 1 == 1;
    }
    let key_at = usize::from(key_at % 4);
    let cut = usize::from(*cut).min(rest.len());
    let (whole, whole_verdict) = run(&options, key_at, &[rest]);
    let (cut_out, cut_verdict) = run(&options, key_at, &[&rest[..cut], &rest[cut..]]);
    assert_eq!(whole_verdict.is_ok(), cut_verdict.is_ok(), "{whole_verdict:?} / {cut_verdict:?}");
    if whole_verdict.is_ok() {
        assert_eq!(whole, cut_out);
    }
});
