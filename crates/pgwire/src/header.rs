//! Message framing: a tagged message is a 1-byte tag and a 4-byte big-endian length that counts
//! itself; `Header::parse` says whether a whole header is buffered and checks the length bounds.

/// Largest message accepted from either side unless the caller sets its own cap (1 GiB, the
/// server's own limit for a single field is 1 GiB).
pub const DEFAULT_MAX_MESSAGE_LEN: u32 = 1 << 30;

/// Bytes of a tagged message header: tag + length.
pub const HEADER_LEN: usize = 5;

/// A framing error: the peer sent bytes that cannot be a PostgreSQL message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The length field is below 4 (it counts itself).
    LengthTooSmall(i32),
    /// The length field is above the configured cap.
    TooLarge { len: u32, max: u32 },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::LengthTooSmall(n) => write!(f, "invalid message length {n}"),
            FrameError::TooLarge { len, max } => {
                write!(f, "message length {len} exceeds the limit of {max} bytes")
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// The header of a tagged message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub tag: u8,
    /// The length field: body length + 4.
    pub len: u32,
}

impl Header {
    /// Parses a header at the start of `buf`. `Ok(None)` means fewer than 5 bytes are buffered.
    #[inline]
    pub fn parse(buf: &[u8], max_len: u32) -> Result<Option<Header>, FrameError> {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
        if len < 4 {
            return Err(FrameError::LengthTooSmall(len));
        }
        let len = len as u32;
        if len > max_len {
            return Err(FrameError::TooLarge { len, max: max_len });
        }
        Ok(Some(Header { tag: buf[0], len }))
    }

    /// Length of the whole message on the wire, tag included.
    #[inline]
    pub fn total_len(&self) -> usize {
        self.len as usize + 1
    }

    /// Length of the body (after the length field).
    #[inline]
    pub fn body_len(&self) -> usize {
        self.len as usize - 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_header_is_none() {
        assert_eq!(Header::parse(b"Q\0\0", 100), Ok(None));
    }

    #[test]
    fn parses_tag_and_length() {
        let h = Header::parse(b"Q\0\0\0\x0dSELECT 1\0", 100)
            .unwrap()
            .unwrap();
        assert_eq!(h.tag, b'Q');
        assert_eq!(h.total_len(), 14);
        assert_eq!(h.body_len(), 9);
    }

    #[test]
    fn rejects_bad_lengths() {
        assert_eq!(
            Header::parse(b"Q\0\0\0\x03", 100),
            Err(FrameError::LengthTooSmall(3))
        );
        assert_eq!(
            Header::parse(b"Q\x80\0\0\0", 100),
            Err(FrameError::LengthTooSmall(i32::MIN))
        );
        assert_eq!(
            Header::parse(b"Q\x7f\xff\xff\xff", 1000),
            Err(FrameError::TooLarge {
                len: 0x7fff_ffff,
                max: 1000
            })
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_bounds_hold(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16), max in 4u32..u32::MAX) {
            if let Ok(Some(h)) = Header::parse(&bytes, max) {
                proptest::prop_assert!(h.len >= 4 && h.len <= max);
            }
        }
    }
}
