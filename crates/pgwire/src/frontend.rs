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
    let end = memchr::memchr(0, body)?;
    std::str::from_utf8(&body[..end]).ok()
}

/// Returns the SQL text of a Parse message body (statement name, NUL, text, NUL, ...), if
/// well formed.
pub fn parse_text(body: &[u8]) -> Option<&str> {
    let (_name, rest) = cstr(body)?;
    query_text(rest)
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

/// The NUL-terminated string at the start of `b`, and what follows it.
pub fn cstr(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = b.iter().position(|&c| c == 0)?;
    Some((&b[..i], &b[i + 1..]))
}

/// A parameter value of a Bind (`None`: NULL).
pub type Value<'a> = Option<&'a [u8]>;

/// A Bind body read in place (nothing copied): its portal and statement names and its
/// parameter format codes; its values are read on demand, as far as asked.
#[derive(Debug, Clone, Copy)]
pub struct BindBody<'a> {
    pub portal: &'a [u8],
    pub statement: &'a [u8],
    /// Everything after the two names.
    pub after_names: &'a [u8],
    /// The parameter format codes, two bytes each.
    formats: &'a [u8],
    /// The parameter values, after their count.
    values: &'a [u8],
    count: usize,
}

impl<'a> BindBody<'a> {
    /// Reads a Bind body's names, format codes and parameter count; `None` when they are not
    /// well formed.
    pub fn parse(body: &'a [u8]) -> Option<BindBody<'a>> {
        let (portal, rest) = cstr(body)?;
        let (statement, after_names) = cstr(rest)?;
        let nfmt = u16::from_be_bytes([*after_names.first()?, *after_names.get(1)?]) as usize;
        let formats = after_names.get(2..2 + 2 * nfmt)?;
        let rest = &after_names[2 + 2 * nfmt..];
        let count = u16::from_be_bytes([*rest.first()?, *rest.get(1)?]) as usize;
        Some(BindBody {
            portal,
            statement,
            after_names,
            formats,
            values: &rest[2..],
            count,
        })
    }

    /// How many parameter format codes it has.
    pub fn format_count(&self) -> usize {
        self.formats.len() / 2
    }

    /// Format code `i` as sent.
    pub fn format_code(&self, i: usize) -> Option<u16> {
        let b = self.formats.get(2 * i..2 * i + 2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }

    /// The format of parameter `i`: with no codes text (0), with one that code for every
    /// parameter, else its own.
    pub fn format(&self, i: usize) -> Option<u16> {
        match self.format_count() {
            0 => Some(0),
            1 => self.format_code(0),
            _ => self.format_code(i),
        }
    }

    /// How many parameter values it has.
    pub fn param_count(&self) -> usize {
        self.count
    }

    /// Parameter `i` (`Some(None)`: NULL), reading no further than it; `None` when the body
    /// ends before it.
    pub fn param(&self, i: usize) -> Option<Option<&'a [u8]>> {
        if i >= self.count {
            return None;
        }
        let mut left = self.values;
        let mut value = None;
        for _ in 0..=i {
            value = Some(next_value(&mut left)?);
        }
        value
    }

    /// Every parameter value in order, and the result format codes (count and codes, as
    /// sent); `None` when the body ends early.
    pub fn values_and_results(&self) -> Option<(Vec<Value<'a>>, &'a [u8])> {
        let mut left = self.values;
        let values = (0..self.count)
            .map(|_| next_value(&mut left))
            .collect::<Option<_>>()?;
        Some((values, left))
    }
}

/// The length-prefixed value at the start of `left` (`Some(None)`: NULL), consumed.
fn next_value<'a>(left: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    let len = i32::from_be_bytes(left.get(..4)?.try_into().ok()?);
    *left = &left[4..];
    if len < 0 {
        return Some(None);
    }
    let v = left.get(..len as usize)?;
    *left = &left[len as usize..];
    Some(Some(v))
}
