//! Frontend message framing: `frontend::scan` over a client's buffered bytes, `Header::parse`,
//! `frontend::kind` and `frontend::query_text`. Checks: no panic, the scan never claims more
//! bytes than given, each header it reports is the one at its offset and within the cap, a
//! Query's text ends at its first NUL, and re-encoding each message gives its bytes.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgwire::header::HEADER_LEN;
use pgwire::{encode, frontend, Header};

fuzz_target!(|data: &[u8]| {
    let Some((&cap, data)) = data.split_first() else {
        return;
    };
    // A small cap now and then, to reach the "too large" path with short inputs.
    let max = if cap < 16 {
        4 + u32::from(cap) * 4
    } else {
        1 << 20
    };
    let mut headers = Vec::new();
    let scanned = frontend::scan(data, max, |h| headers.push(h));
    let end = match scanned {
        Ok(n) => n,
        Err(_) => headers.iter().map(|h| h.total_len()).sum(),
    };
    assert!(end <= data.len());
    let mut pos = 0;
    for h in &headers {
        assert_eq!(Header::parse(&data[pos..], max), Ok(Some(*h)));
        assert!(h.len >= 4 && h.len <= max);
        let msg = &data[pos..pos + h.total_len()];
        let body = &msg[HEADER_LEN..];
        assert_eq!(body.len(), h.body_len());
        let _ = frontend::kind(h.tag);
        if let Some(text) = frontend::query_text(body) {
            assert_eq!(body[text.len()], 0);
            assert!(!text.as_bytes().contains(&0));
            if text.len() + 1 == body.len() && h.tag == frontend::QUERY {
                let mut buf = BytesMut::new();
                encode::query(&mut buf, text);
                assert_eq!(&buf[..], msg);
            }
        }
        let mut buf = BytesMut::new();
        encode::message(&mut buf, h.tag, |b| b.extend_from_slice(body));
        assert_eq!(&buf[..], msg);
        pos += h.total_len();
    }
    assert_eq!(pos, end);
    if scanned.is_ok() {
        // What is left is an incomplete message (or nothing).
        match Header::parse(&data[end..], max) {
            Ok(None) => assert!(data.len() - end < HEADER_LEN),
            Ok(Some(h)) => assert!(data.len() - end < h.total_len()),
            Err(e) => panic!("scan stopped before a bad header without an error: {e}"),
        }
    }
});
