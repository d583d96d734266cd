//! Untagged packets that open a connection: StartupMessage, SSLRequest, GSSENCRequest and
//! CancelRequest. They start with an Int32 length and an Int32 code instead of a tag.

/// Protocol 3.0.
pub const PROTOCOL_3_0: i32 = 196_608;
pub const SSL_REQUEST_CODE: i32 = 80_877_103;
pub const GSSENC_REQUEST_CODE: i32 = 80_877_104;
pub const CANCEL_REQUEST_CODE: i32 = 80_877_102;

/// Startup packets larger than this are refused (PostgreSQL uses 10000).
pub const MAX_STARTUP_LEN: usize = 10_000;

/// A parsed startup-phase packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupPacket {
    Startup {
        /// Minor protocol version requested (major is always 3).
        minor: u16,
        /// Parameters in order, e.g. ("user", "app"), ("database", "bench").
        params: Vec<(String, String)>,
    },
    SslRequest,
    GssEncRequest,
    Cancel {
        pid: i32,
        secret: i32,
    },
}

/// Why a startup packet was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupError {
    BadLength(i32),
    UnsupportedProtocol(i32),
    Malformed(&'static str),
}

impl std::fmt::Display for StartupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartupError::BadLength(n) => write!(f, "invalid startup packet length {n}"),
            StartupError::UnsupportedProtocol(v) => write!(
                f,
                "unsupported frontend protocol {}.{}: server supports 3.0",
                v >> 16,
                v & 0xffff
            ),
            StartupError::Malformed(what) => write!(f, "invalid startup packet layout: {what}"),
        }
    }
}

impl std::error::Error for StartupError {}

/// Length of the startup packet at the start of `buf`, once its 4-byte length is buffered.
pub fn packet_len(buf: &[u8]) -> Result<Option<usize>, StartupError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if len < 8 || len as usize > MAX_STARTUP_LEN {
        return Err(StartupError::BadLength(len));
    }
    Ok(Some(len as usize))
}

/// Parses a whole startup packet (length prefix included).
pub fn parse(packet: &[u8]) -> Result<StartupPacket, StartupError> {
    if packet.len() < 8 {
        return Err(StartupError::Malformed("too short"));
    }
    let code = i32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
    let body = &packet[8..];
    match code {
        SSL_REQUEST_CODE if body.is_empty() => Ok(StartupPacket::SslRequest),
        GSSENC_REQUEST_CODE if body.is_empty() => Ok(StartupPacket::GssEncRequest),
        CANCEL_REQUEST_CODE if body.len() == 8 => Ok(StartupPacket::Cancel {
            pid: i32::from_be_bytes([body[0], body[1], body[2], body[3]]),
            secret: i32::from_be_bytes([body[4], body[5], body[6], body[7]]),
        }),
        SSL_REQUEST_CODE | GSSENC_REQUEST_CODE | CANCEL_REQUEST_CODE => {
            Err(StartupError::Malformed("wrong length for request code"))
        }
        v if v >> 16 == 3 => Ok(StartupPacket::Startup {
            minor: (v & 0xffff) as u16,
            params: parse_params(body)?,
        }),
        v => Err(StartupError::UnsupportedProtocol(v)),
    }
}

fn parse_params(mut body: &[u8]) -> Result<Vec<(String, String)>, StartupError> {
    let mut params = Vec::new();
    loop {
        let end = body
            .iter()
            .position(|&b| b == 0)
            .ok_or(StartupError::Malformed("missing terminator"))?;
        if end == 0 {
            return Ok(params);
        }
        let name = utf8(&body[..end])?;
        body = &body[end + 1..];
        let vend = body
            .iter()
            .position(|&b| b == 0)
            .ok_or(StartupError::Malformed("missing value"))?;
        let value = utf8(&body[..vend])?;
        body = &body[vend + 1..];
        params.push((name, value));
    }
}

fn utf8(b: &[u8]) -> Result<String, StartupError> {
    String::from_utf8(b.to_vec()).map_err(|_| StartupError::Malformed("invalid UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode;

    #[test]
    fn round_trips_startup() {
        let mut buf = bytes::BytesMut::new();
        encode::startup(&mut buf, &[("user", "app"), ("database", "db")]);
        assert_eq!(packet_len(&buf).unwrap(), Some(buf.len()));
        match parse(&buf).unwrap() {
            StartupPacket::Startup { minor, params } => {
                assert_eq!(minor, 0);
                assert_eq!(params[0], ("user".into(), "app".into()));
                assert_eq!(params[1], ("database".into(), "db".into()));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn special_codes() {
        let ssl = [0, 0, 0, 8, 4, 210, 22, 47];
        assert_eq!(parse(&ssl).unwrap(), StartupPacket::SslRequest);
        let gss = [0, 0, 0, 8, 4, 210, 22, 48];
        assert_eq!(parse(&gss).unwrap(), StartupPacket::GssEncRequest);
        let mut cancel = bytes::BytesMut::new();
        encode::cancel_request(&mut cancel, 42, -7);
        assert_eq!(
            parse(&cancel).unwrap(),
            StartupPacket::Cancel {
                pid: 42,
                secret: -7
            }
        );
        assert!(matches!(
            parse(&[0, 0, 0, 8, 0, 2, 0, 0]),
            Err(StartupError::UnsupportedProtocol(_))
        ));
        assert!(packet_len(&[0x7f, 0, 0, 0]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = packet_len(&bytes);
            let _ = parse(&bytes);
        }
    }
}
