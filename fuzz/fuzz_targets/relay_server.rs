//! The relay's scan of server bytes (`relay::scan_server`): ReadyForQuery, ErrorResponse,
//! ParameterStatus and the bodies it passes, driven as the relay drives it (reads of
//! fuzzer-chosen sizes, ready bytes forwarded). Input: a flags byte (requests owed, stop when
//! idle, statement mode), a byte of read sizes, then the server's bytes. Checks: no panic,
//! `front <= ready <= buffered`, a scan that does not stop leaves no whole message behind, and the state
//! and the bytes forwarded are the same in one read or in many.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::relay::scan_server;
use pgcorral::server::{LinkState, ServerParams};

const MAX: u32 = 1 << 16;

/// Returns the state, the bytes forwarded and whether the scan stopped.
fn run(data: &[u8], sizes: &[usize], flags: u8) -> (LinkState, usize, bool) {
    let mut st = LinkState {
        pending: u32::from(flags & 3),
        ..Default::default()
    };
    let mut params = ServerParams::default();
    let mut buf: Vec<u8> = Vec::new();
    let mut pass = 0usize;
    let mut fed = 0;
    let mut forwarded = 0;
    let mut i = 0;
    while fed < data.len() {
        let n = sizes[i % sizes.len()].min(data.len() - fed);
        i += 1;
        buf.extend_from_slice(&data[fed..fed + n]);
        fed += n;
        let Ok(s) = scan_server(
            &buf,
            &mut pass,
            &mut st,
            &mut params,
            flags & 4 != 0,
            flags & 8 != 0,
            MAX,
            None,
        ) else {
            return (st, forwarded, true);
        };
        assert!(s.front <= s.ready && s.ready <= buf.len(), "{s:?}");
        forwarded += s.ready - s.front;
        let stopped = s.stop.is_some() || s.fatal || s.again;
        if !stopped {
            // What is left: nothing (a body still to pass), or less than a header, or the start
            // of a message the scan must see whole (ReadyForQuery, ErrorResponse, ...).
            let left = &buf[s.ready..];
            let whole_left = match pgwire::Header::parse(left, MAX) {
                Ok(Some(h)) => left.len() >= h.total_len(),
                _ => false,
            };
            assert!(
                (pass > 0 && left.is_empty()) || (pass == 0 && !whole_left),
                "scan left {} bytes with {pass} to pass",
                left.len()
            );
        }
        buf.drain(..s.ready);
        if stopped {
            return (st, forwarded, true);
        }
    }
    (st, forwarded, false)
}

fuzz_target!(|data: &[u8]| {
    let [flags, sizes, data @ ..] = data else {
        return;
    };
    let chunk = [
        1 + usize::from(sizes & 0x0f),
        1 + usize::from(sizes >> 4) * 3,
    ];
    let (whole, fw_whole, whole_stopped) = run(data, &[data.len().max(1)], *flags);
    let (parts, fw_parts, parts_stopped) = run(data, &chunk, *flags);
    if !whole_stopped && !parts_stopped {
        assert_eq!(whole.pending, parts.pending);
        assert_eq!(whole.tx, parts.tx);
        assert_eq!(whole.broken, parts.broken);
        assert_eq!(fw_whole, fw_parts);
    }
});
