//! The relay's scan of client bytes (`relay::scan_client`), driven as the relay drives it: the
//! input arrives in reads of fuzzer-chosen sizes, each scan's ready bytes are forwarded and the
//! rest kept. Input: a flags byte (tracking mode, one batch at a time), a byte of read sizes,
//! then the client's bytes. Checks: no panic; `front <= ready <= buffered`; a scan that does not
//! stop leaves no whole message behind; and the link state is the same whether the bytes came in
//! one read or in many (and, with `session_pinning = "refuse"`, so is the refusal).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgcorral::relay::{scan_client, Track};
use pgcorral::session::hooks::HookMap;
use pgcorral::server::LinkState;

const MAX: u32 = 1 << 16;

/// Runs the scans over `data` in reads of `sizes` bytes (cycled); returns the state, whether
/// it stopped (error, Terminate, bad tag, refusal, held batch) and the refusal if any.
fn run(
    data: &[u8],
    sizes: &[usize],
    track: Track,
    one_batch: bool,
) -> (LinkState, bool, Option<&'static str>) {
    let mut st = LinkState {
        one_batch,
        ..Default::default()
    };
    let mut buf: Vec<u8> = Vec::new();
    let mut pass = 0usize;
    let mut custom = Default::default();
    let mut fed = 0;
    let mut i = 0;
    while fed < data.len() {
        let n = sizes[i % sizes.len()].min(data.len() - fed);
        i += 1;
        buf.extend_from_slice(&data[fed..fed + n]);
        fed += n;
        let Ok(s) = scan_client(&buf, &mut pass, &mut st, track, &HookMap::quiet(), &mut custom, MAX, None) else {
            return (st, true, None);
        };
        assert!(s.front <= s.ready && s.ready <= buf.len(), "{s:?}");
        let stopped = s.terminate || s.bad_tag.is_some() || s.refuse.is_some() || s.held;
        if !stopped {
            assert!(!s.again);
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
            return (st, true, s.refuse);
        }
    }
    (st, false, None)
}

fuzz_target!(|data: &[u8]| {
    let [flags, sizes, data @ ..] = data else {
        return;
    };
    let track = match flags % 3 {
        0 => Track::Off,
        1 => Track::Pin,
        _ => Track::Refuse,
    };
    let one_batch = flags & 4 != 0;
    let chunk = [
        1 + usize::from(sizes & 0x0f),
        1 + usize::from(sizes >> 4) * 3,
    ];
    let (whole, whole_stopped, whole_refused) = run(data, &[data.len().max(1)], track, one_batch);
    let (parts, parts_stopped, parts_refused) = run(data, &chunk, track, one_batch);
    // A Query is refused or not by its whole text, however it came.
    assert_eq!(whole_refused, parts_refused);
    if !whole_stopped && !parts_stopped {
        assert_eq!(whole.pending, parts.pending);
        assert_eq!(whole.unsynced, parts.unsynced);
        // A message seen before it is whole counts as dirty: never less dirty in parts.
        assert!(parts.dirty || !whole.dirty);
    }
});
