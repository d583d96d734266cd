//! Messages a client (frontend) sends after startup: tag constants and the few lazy views the
//! pooler needs. Tags share letters with backend ones ('D', 'S', 'E', 'C'), so the two live apart.

use crate::header::Header;

pub const QUERY: u8 = b'Q';
pub const PARSE: u8 = b'P';
pub const BIND: u8 = b'B';
pub const DESCRIBE: u8 = b'D';
pub const EXECUTE: u8 = b'E';
pub const CLOSE: u8 = b'C';
pub const SYNC: u8 = b'S';
pub const FLUSH: u8 = b'H';
pub const FUNCTION_CALL: u8 = b'F';
pub const COPY_DATA: u8 = b'd';
pub const COPY_DONE: u8 = b'c';
pub const COPY_FAIL: u8 = b'f';
pub const TERMINATE: u8 = b'X';
/// PasswordMessage, SASLInitialResponse and SASLResponse all use 'p'.
pub const PASSWORD: u8 = b'p';

/// What a frontend message means for the pooler's bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Query or FunctionCall: a whole request, answered by exactly one ReadyForQuery.
    Request,
    /// Sync: ends an extended-protocol batch, answered by one ReadyForQuery.
    Sync,
    /// Parse/Bind/Describe/Execute/Close/Flush: part of an extended batch, not yet synced.
    Extended,
    /// CopyData/CopyDone/CopyFail: only meaningful while the server is in COPY IN.
    Copy,
    /// Terminate.
    Terminate,
    /// A tag a client may not send after startup.
    Unknown,
}

/// Classifies a frontend tag.
#[inline]
pub fn kind(tag: u8) -> Kind {
    match tag {
        QUERY | FUNCTION_CALL => Kind::Request,
        SYNC => Kind::Sync,
        PARSE | BIND | DESCRIBE | EXECUTE | CLOSE | FLUSH => Kind::Extended,
        COPY_DATA | COPY_DONE | COPY_FAIL => Kind::Copy,
        TERMINATE => Kind::Terminate,
        _ => Kind::Unknown,
    }
}

/// Returns the SQL text of a Query message body (without the trailing NUL), if well formed.
pub fn query_text(body: &[u8]) -> Option<&str> {
    let end = body.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&body[..end]).ok()
}

/// Walks the complete messages at the start of `buf`, calling `f(header)` for each, and returns
/// the number of bytes they span. Stops at the first incomplete message or framing error.
pub fn scan(
    buf: &[u8],
    max_len: u32,
    mut f: impl FnMut(Header),
) -> Result<usize, crate::FrameError> {
    let mut pos = 0;
    while let Some(h) = Header::parse(&buf[pos..], max_len)? {
        if buf.len() - pos < h.total_len() {
            break;
        }
        f(h);
        pos += h.total_len();
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        assert_eq!(kind(b'Q'), Kind::Request);
        assert_eq!(kind(b'S'), Kind::Sync);
        assert_eq!(kind(b'P'), Kind::Extended);
        assert_eq!(kind(b'd'), Kind::Copy);
        assert_eq!(kind(b'X'), Kind::Terminate);
        assert_eq!(kind(b'Z'), Kind::Unknown);
    }

    #[test]
    fn query_text_stops_at_nul() {
        assert_eq!(query_text(b"select 1\0"), Some("select 1"));
        assert_eq!(query_text(b"no nul"), None);
    }

    #[test]
    fn scan_stops_at_partial() {
        let mut buf = Vec::new();
        buf.extend_from_slice(b"S\0\0\0\x04");
        buf.extend_from_slice(b"Q\0\0\0\x09abc\0");
        buf.extend_from_slice(b"Q\0\0\0\x09ab");
        let mut tags = Vec::new();
        let n = scan(&buf, 1 << 20, |h| tags.push(h.tag)).unwrap();
        assert_eq!(n, 5 + 10);
        assert_eq!(tags, b"SQ");
    }

    proptest::proptest! {
        #[test]
        fn scan_never_overruns(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            if let Ok(n) = scan(&bytes, 1 << 20, |_| {}) {
                proptest::prop_assert!(n <= bytes.len());
            }
        }
    }
}
