//! Messages a server (backend) sends: tag constants and lazy views over the bodies the pooler
//! must look into (ReadyForQuery, ErrorResponse, ParameterStatus, BackendKeyData, Authentication).

pub const AUTHENTICATION: u8 = b'R';
pub const BACKEND_KEY_DATA: u8 = b'K';
pub const PARAMETER_STATUS: u8 = b'S';
pub const READY_FOR_QUERY: u8 = b'Z';
pub const ERROR_RESPONSE: u8 = b'E';
pub const NOTICE_RESPONSE: u8 = b'N';
pub const NOTIFICATION_RESPONSE: u8 = b'A';
pub const COMMAND_COMPLETE: u8 = b'C';
pub const DATA_ROW: u8 = b'D';
pub const ROW_DESCRIPTION: u8 = b'T';
pub const EMPTY_QUERY_RESPONSE: u8 = b'I';
pub const PARSE_COMPLETE: u8 = b'1';
pub const BIND_COMPLETE: u8 = b'2';
pub const CLOSE_COMPLETE: u8 = b'3';
pub const NO_DATA: u8 = b'n';
pub const PORTAL_SUSPENDED: u8 = b's';
pub const PARAMETER_DESCRIPTION: u8 = b't';
pub const COPY_IN_RESPONSE: u8 = b'G';
pub const COPY_OUT_RESPONSE: u8 = b'H';
pub const COPY_BOTH_RESPONSE: u8 = b'W';
pub const COPY_DATA: u8 = b'd';
pub const COPY_DONE: u8 = b'c';
pub const FUNCTION_CALL_RESPONSE: u8 = b'V';
pub const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';

/// Authentication request codes (the first Int32 of an 'R' body).
pub mod auth_code {
    pub const OK: i32 = 0;
    pub const CLEARTEXT: i32 = 3;
    pub const MD5: i32 = 5;
    pub const SASL: i32 = 10;
    pub const SASL_CONTINUE: i32 = 11;
    pub const SASL_FINAL: i32 = 12;
}

/// Transaction status carried by ReadyForQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxStatus {
    Idle,
    InTransaction,
    Failed,
}

impl TxStatus {
    /// Parses the status byte of a ReadyForQuery body.
    #[inline]
    pub fn from_byte(b: u8) -> Option<TxStatus> {
        match b {
            b'I' => Some(TxStatus::Idle),
            b'T' => Some(TxStatus::InTransaction),
            b'E' => Some(TxStatus::Failed),
            _ => None,
        }
    }

    pub fn as_byte(self) -> u8 {
        match self {
            TxStatus::Idle => b'I',
            TxStatus::InTransaction => b'T',
            TxStatus::Failed => b'E',
        }
    }
}

/// Fields of an ErrorResponse or NoticeResponse body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorFields {
    /// Non-localized severity ('V'), falling back to 'S'.
    pub severity: String,
    pub code: String,
    pub message: String,
}

impl ErrorFields {
    /// Parses the fields the pooler cares about; unknown fields are skipped.
    pub fn parse(body: &[u8]) -> Option<ErrorFields> {
        let mut out = ErrorFields::default();
        let mut rest = body;
        let mut localized_severity = None;
        loop {
            let (&field, tail) = rest.split_first()?;
            if field == 0 {
                break;
            }
            let end = tail.iter().position(|&b| b == 0)?;
            let value = String::from_utf8_lossy(&tail[..end]).into_owned();
            match field {
                b'V' => out.severity = value,
                b'S' => localized_severity = Some(value),
                b'C' => out.code = value,
                b'M' => out.message = value,
                _ => {}
            }
            rest = &tail[end + 1..];
        }
        if out.severity.is_empty() {
            out.severity = localized_severity.unwrap_or_default();
        }
        Some(out)
    }

    /// FATAL or PANIC: the server closes the connection after sending it.
    pub fn is_fatal(&self) -> bool {
        self.severity == "FATAL" || self.severity == "PANIC"
    }
}

/// Splits a ParameterStatus body into name and value.
/// The value of field `kind` (`P`, `C`, ...) of an ErrorResponse or NoticeResponse body.
pub fn error_field(body: &[u8], kind: u8) -> Option<&[u8]> {
    let mut rest = body;
    while let Some((&k, tail)) = rest.split_first() {
        if k == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0)?;
        if k == kind {
            return Some(&tail[..end]);
        }
        rest = &tail[end + 1..];
    }
    None
}

pub fn parameter_status(body: &[u8]) -> Option<(&str, &str)> {
    let n = body.iter().position(|&b| b == 0)?;
    let rest = &body[n + 1..];
    let v = rest.iter().position(|&b| b == 0)?;
    Some((
        std::str::from_utf8(&body[..n]).ok()?,
        std::str::from_utf8(&rest[..v]).ok()?,
    ))
}

/// Parses a BackendKeyData body: (process id, secret key).
pub fn backend_key_data(body: &[u8]) -> Option<(i32, i32)> {
    if body.len() != 8 {
        return None;
    }
    Some((
        i32::from_be_bytes(body[0..4].try_into().ok()?),
        i32::from_be_bytes(body[4..8].try_into().ok()?),
    ))
}

/// Splits an Authentication body into its code and the data after it.
pub fn authentication(body: &[u8]) -> Option<(i32, &[u8])> {
    if body.len() < 4 {
        return None;
    }
    Some((i32::from_be_bytes(body[0..4].try_into().ok()?), &body[4..]))
}

/// Mechanism names listed in an AuthenticationSASL body (after the code).
pub fn sasl_mechanisms(data: &[u8]) -> Vec<&str> {
    data.split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .filter_map(|s| std::str::from_utf8(s).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_fields() {
        let body =
            b"SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0";
        let e = ErrorFields::parse(body).unwrap();
        assert_eq!(e.code, "57P01");
        assert!(e.is_fatal());
        assert!(e.message.starts_with("terminating"));
        assert_eq!(ErrorFields::parse(b"SERR"), None);
    }

    #[test]
    fn param_and_key() {
        assert_eq!(
            parameter_status(b"TimeZone\0UTC\0"),
            Some(("TimeZone", "UTC"))
        );
        assert_eq!(backend_key_data(&[0, 0, 0, 7, 0, 0, 0, 9]), Some((7, 9)));
        assert_eq!(backend_key_data(&[0, 0, 0, 7]), None);
        assert_eq!(
            sasl_mechanisms(b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0"),
            vec!["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"]
        );
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128)) {
            let _ = ErrorFields::parse(&bytes);
            let _ = parameter_status(&bytes);
            let _ = backend_key_data(&bytes);
            if let Some((_, d)) = authentication(&bytes) { let _ = sasl_mechanisms(d); }
        }
    }
}
