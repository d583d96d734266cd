//! Backend messages the pooler looks into: framing, then ErrorResponse/NoticeResponse fields
//! (`ErrorFields::parse`, `encode::error_with_severity`, `prepared::expect::stale_plan`),
//! ParameterStatus, BackendKeyData, Authentication (with its SASL mechanism list) and
//! ReadyForQuery. Checks: no panic, and round trips through the encoders.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgwire::backend::{self as be, ErrorFields, TxStatus};
use pgwire::header::HEADER_LEN;
use pgwire::{encode, frontend};

fn error_body(body: &[u8]) {
    let _ = pgcorral::prepared::expect::stale_plan(body);
    let Some(fields) = ErrorFields::parse(body) else {
        return;
    };
    // encode(decode(x)) decodes to the same fields.
    let mut buf = BytesMut::new();
    encode::error_response(&mut buf, &fields.severity, &fields.code, &fields.message);
    assert_eq!(
        ErrorFields::parse(&buf[HEADER_LEN..]).as_ref(),
        Some(&fields)
    );
    // Changing the severity keeps the other fields.
    let mut buf = BytesMut::new();
    encode::error_with_severity(&mut buf, body, "FATAL");
    let again = ErrorFields::parse(&buf[HEADER_LEN..]).expect("re-encoded error parses");
    assert_eq!(again.code, fields.code);
    assert_eq!(again.message, fields.message);
    let had_severity = {
        // Whether the fields before the terminator include S or V.
        let mut rest = body;
        let mut found = false;
        while let Some((&kind, tail)) = rest.split_first() {
            if kind == 0 {
                break;
            }
            found |= kind == b'S' || kind == b'V';
            let end = tail.iter().position(|&c| c == 0).unwrap_or(tail.len());
            rest = tail.get(end + 1..).unwrap_or(&[]);
        }
        found
    };
    assert_eq!(again.is_fatal(), had_severity);
}

fuzz_target!(|data: &[u8]| {
    let mut headers = Vec::new();
    let _ = frontend::scan(data, 1 << 20, |h| headers.push(h));
    let mut pos = 0;
    for h in headers {
        let msg = &data[pos..pos + h.total_len()];
        let body = &msg[HEADER_LEN..];
        pos += h.total_len();
        let mut buf = BytesMut::new();
        match h.tag {
            be::ERROR_RESPONSE | be::NOTICE_RESPONSE => error_body(body),
            be::PARAMETER_STATUS => {
                if let Some((name, value)) = be::parameter_status(body) {
                    encode::parameter_status(&mut buf, name, value);
                    assert_eq!(&buf[HEADER_LEN..], &body[..name.len() + value.len() + 2]);
                }
            }
            be::BACKEND_KEY_DATA => {
                if let Some((pid, secret)) = be::backend_key_data(body) {
                    encode::backend_key_data(&mut buf, pid, secret);
                    assert_eq!(&buf[..], msg);
                }
            }
            be::READY_FOR_QUERY => {
                if let (Some(&b), 1) = (body.first(), body.len()) {
                    if let Some(status) = TxStatus::from_byte(b) {
                        assert_eq!(status.as_byte(), b);
                        encode::ready_for_query(&mut buf, status);
                        assert_eq!(&buf[..], msg);
                    }
                }
            }
            be::AUTHENTICATION => {
                if let Some((code, rest)) = be::authentication(body) {
                    assert_eq!(rest.len() + 4, body.len());
                    if code == be::auth_code::SASL {
                        let mechs = be::sasl_mechanisms(rest);
                        encode::auth_sasl(&mut buf, &mechs);
                        let again = be::authentication(&buf[HEADER_LEN..]).unwrap();
                        assert_eq!(again.0, code);
                        assert_eq!(be::sasl_mechanisms(again.1), mechs);
                    }
                }
            }
            _ => {}
        }
    }
    // Any body, whatever its tag.
    let _ = ErrorFields::parse(data);
    let _ = be::parameter_status(data);
    let _ = be::backend_key_data(data);
    let _ = be::authentication(data);
    let _ = be::sasl_mechanisms(data);
});
