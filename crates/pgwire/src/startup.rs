//! Untagged packets that open a connection: StartupMessage, SSLRequest, GSSENCRequest and
//! CancelRequest. They start with an Int32 length and an Int32 code instead of a tag.

/// Protocol 3.0.
pub const PROTOCOL_3_0: i32 = 196_608;
pub const SSL_REQUEST_CODE: i32 = 80_877_103;
pub const GSSENC_REQUEST_CODE: i32 = 80_877_104;
pub const CANCEL_REQUEST_CODE: i32 = 80_877_102;

/// PostgreSQL's MAX_STARTUP_PACKET_LENGTH: the most a startup packet may hold after its
/// length word.
pub const MAX_STARTUP_BODY: usize = 10_000;

/// The longest startup packet accepted, its length word included (PostgreSQL's limit applies
/// to what follows the length word).
pub const MAX_STARTUP_LEN: usize = MAX_STARTUP_BODY + 4;

/// A parsed startup-phase packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupPacket {
    Startup {
        /// Minor protocol version requested (major is always 3).
        minor: u16,
        /// Parameters in order, e.g. ("user", "app"), ("database", "bench"), as the bytes
        /// sent: PostgreSQL takes any (see [`Param`]).
        params: Vec<(Param, Param)>,
    },
    SslRequest,
    GssEncRequest,
    Cancel {
        pid: i32,
        secret: i32,
    },
}

/// Why a startup packet was refused, each as PostgreSQL 15 refuses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupError {
    /// A length word below 8 or above [`MAX_STARTUP_LEN`]: PostgreSQL closes the connection
    /// without a word (it only logs "invalid length of startup packet").
    BadLength(i32),
    /// A protocol version whose major is not 3, or an SSLRequest or GSSENCRequest where none
    /// may come (a second one): FATAL 0A000, the version in the message.
    UnsupportedProtocol(i32),
    /// The parameters do not end with their terminator as the packet's last byte: FATAL 08P01.
    Layout,
    /// A CancelRequest too short to hold a key: closed without a word.
    ShortCancel,
}

impl StartupError {
    /// Whether PostgreSQL answers this with a FATAL ErrorResponse (else it closes without a
    /// word).
    pub fn answered(&self) -> bool {
        matches!(
            self,
            StartupError::UnsupportedProtocol(_) | StartupError::Layout
        )
    }
}

impl std::fmt::Display for StartupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartupError::BadLength(_) => f.write_str("invalid length of startup packet"),
            StartupError::UnsupportedProtocol(v) => write!(
                f,
                "unsupported frontend protocol {}.{}: server supports 3.0 to 3.0",
                (*v as u32) >> 16,
                (*v as u32) & 0xffff
            ),
            StartupError::Layout => {
                f.write_str("invalid startup packet layout: expected terminator as last byte")
            }
            StartupError::ShortCancel => f.write_str("invalid length of cancel request packet"),
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

/// Parses a whole startup packet (length prefix included), as PostgreSQL reads one: the code
/// decides, whatever follows it for an SSLRequest or a GSSENCRequest, and the first 8 bytes
/// after it for a CancelRequest. Whether an SSLRequest or GSSENCRequest may come at this point
/// is the caller's to decide.
pub fn parse(packet: &[u8]) -> Result<StartupPacket, StartupError> {
    if packet.len() < 8 {
        return Err(StartupError::BadLength(packet.len() as i32));
    }
    let code = i32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
    let body = &packet[8..];
    match code {
        SSL_REQUEST_CODE => Ok(StartupPacket::SslRequest),
        GSSENC_REQUEST_CODE => Ok(StartupPacket::GssEncRequest),
        CANCEL_REQUEST_CODE if body.len() >= 8 => Ok(StartupPacket::Cancel {
            pid: i32::from_be_bytes([body[0], body[1], body[2], body[3]]),
            secret: i32::from_be_bytes([body[4], body[5], body[6], body[7]]),
        }),
        CANCEL_REQUEST_CODE => Err(StartupError::ShortCancel),
        v if v >> 16 == 3 => Ok(StartupPacket::Startup {
            minor: (v & 0xffff) as u16,
            params: parse_params(body)?,
        }),
        v => Err(StartupError::UnsupportedProtocol(v)),
    }
}

/// A startup parameter's name or value: the bytes the client sent, with no NUL. PostgreSQL
/// takes any bytes here, whatever the encoding; what to make of some that are not UTF-8 is the
/// caller's to decide.
pub type Param = Vec<u8>;

/// Name/value pairs up to an empty name, which must be the packet's last byte. PostgreSQL's
/// walk, step for step: each string ends at its NUL or at the end of the packet, a name with no
/// room for its value ends the walk, and only where the walk ended is checked.
fn parse_params(body: &[u8]) -> Result<Vec<(Param, Param)>, StartupError> {
    let cstr = |at: usize| -> &[u8] {
        let rest = &body[at.min(body.len())..];
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    };
    let mut params = Vec::new();
    let mut offset = 0;
    while offset < body.len() {
        let name = cstr(offset);
        if name.is_empty() {
            break;
        }
        let at = offset + name.len() + 1;
        if at >= body.len() {
            break;
        }
        let value = cstr(at);
        params.push((name.to_vec(), value.to_vec()));
        offset = at + value.len() + 1;
    }
    if offset + 1 != body.len() {
        return Err(StartupError::Layout);
    }
    Ok(params)
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
                assert_eq!(params[0], (b"user".to_vec(), b"app".to_vec()));
                assert_eq!(params[1], (b"database".to_vec(), b"db".to_vec()));
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

    fn startup_with(body: &[u8]) -> Vec<u8> {
        let mut p = ((body.len() + 8) as i32).to_be_bytes().to_vec();
        p.extend_from_slice(&PROTOCOL_3_0.to_be_bytes());
        p.extend_from_slice(body);
        p
    }

    /// Each case as PostgreSQL 15 reads it (checked against a server over a raw socket).
    #[test]
    fn layout_as_postgresql() {
        let ok = |body: &[u8]| parse(&startup_with(body));
        assert_eq!(
            ok(b"user\0app\0\0"),
            Ok(StartupPacket::Startup {
                minor: 0,
                params: vec![(b"user".to_vec(), b"app".to_vec())]
            })
        );
        for bad in [
            &b""[..],          // no terminator at all
            b"user\0",         // a name, no value, no terminator
            b"user\0\0",       // the terminator taken for the value
            b"user\0app\0\0x", // a byte after the terminator
            b"user\0app\0",    // no terminator
            b"user\0app",      // value not NUL-ended
        ] {
            assert_eq!(ok(bad), Err(StartupError::Layout), "{bad:?}");
        }
        // A packet of zeros after the version: the walk ends on an empty name at once.
        assert_eq!(ok(&[0u8; 9992]), Err(StartupError::Layout));
        // PostgreSQL's walk stops at a last name with no room for a value, and accepts.
        assert!(ok(b"user\0app\0x").is_ok());
        // Bytes that are not UTF-8 are taken as they are, as PostgreSQL takes them.
        match ok(b"user\0caf\xe9\0\0") {
            Ok(StartupPacket::Startup { params, .. }) => assert_eq!(params[0].1, b"caf\xe9"),
            other => panic!("{other:?}"),
        }
        let msg = StartupError::Layout.to_string();
        assert_eq!(
            msg,
            "invalid startup packet layout: expected terminator as last byte"
        );
    }

    #[test]
    fn lengths_and_codes_as_postgresql() {
        // PostgreSQL's 10000-byte limit counts what follows the length word.
        assert_eq!(packet_len(&10_004i32.to_be_bytes()), Ok(Some(10_004)));
        assert_eq!(
            packet_len(&10_005i32.to_be_bytes()),
            Err(StartupError::BadLength(10_005))
        );
        assert!(packet_len(&7i32.to_be_bytes()).is_err());
        assert!(!StartupError::BadLength(7).answered());
        // An SSLRequest or GSSENCRequest longer than 8 bytes is one all the same.
        let mut ssl = vec![0, 0, 0, 12, 4, 210, 22, 47, 1, 2, 3, 4];
        assert_eq!(parse(&ssl), Ok(StartupPacket::SslRequest));
        ssl[7] = 48;
        assert_eq!(parse(&ssl), Ok(StartupPacket::GssEncRequest));
        // A CancelRequest takes the first 8 bytes after its code; shorter is dropped.
        let mut cancel = vec![
            0, 0, 0, 20, 4, 210, 22, 46, 0, 0, 0, 1, 0, 0, 0, 2, 9, 9, 9, 9,
        ];
        assert_eq!(
            parse(&cancel),
            Ok(StartupPacket::Cancel { pid: 1, secret: 2 })
        );
        cancel.truncate(12);
        cancel[3] = 12;
        assert_eq!(parse(&cancel), Err(StartupError::ShortCancel));
        assert!(!StartupError::ShortCancel.answered());
        let e = parse(&[0, 0, 0, 8, 0x12, 0x34, 0x56, 0x78]).unwrap_err();
        assert!(e.answered());
        assert_eq!(
            e.to_string(),
            "unsupported frontend protocol 4660.22136: server supports 3.0 to 3.0"
        );
        assert_eq!(
            StartupError::UnsupportedProtocol(SSL_REQUEST_CODE).to_string(),
            "unsupported frontend protocol 1234.5679: server supports 3.0 to 3.0"
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = packet_len(&bytes);
            let _ = parse(&bytes);
        }
    }
}
