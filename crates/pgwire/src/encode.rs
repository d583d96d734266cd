//! Builders for the messages the pooler writes itself; each appends one message to a `BytesMut`
//! and back-patches the length, so a batch of them costs one buffer and one write.

use bytes::{BufMut, BytesMut};

use crate::backend::{self, auth_code, TxStatus};
use crate::startup;

/// Appends one tagged message whose body `body` writes.
#[inline]
pub fn message(buf: &mut BytesMut, tag: u8, body: impl FnOnce(&mut BytesMut)) {
    buf.put_u8(tag);
    let at = buf.len();
    buf.put_i32(0);
    body(buf);
    let len = (buf.len() - at) as i32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

fn cstr(buf: &mut BytesMut, s: &str) {
    buf.put_slice(s.as_bytes());
    buf.put_u8(0);
}

/// StartupMessage for protocol 3.0 with the given parameters (text, or any bytes but NUL).
pub fn startup<K: AsRef<[u8]>, V: AsRef<[u8]>>(buf: &mut BytesMut, params: &[(K, V)]) {
    let at = buf.len();
    buf.put_i32(0);
    buf.put_i32(startup::PROTOCOL_3_0);
    for (k, v) in params {
        for s in [k.as_ref(), v.as_ref()] {
            buf.put_slice(s);
            buf.put_u8(0);
        }
    }
    buf.put_u8(0);
    let len = (buf.len() - at) as i32;
    buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

/// CancelRequest for a server process.
pub fn cancel_request(buf: &mut BytesMut, pid: i32, secret: i32) {
    buf.put_i32(16);
    buf.put_i32(startup::CANCEL_REQUEST_CODE);
    buf.put_i32(pid);
    buf.put_i32(secret);
}

/// ErrorResponse (or, with `tag = b'N'`, NoticeResponse) with severity, SQLSTATE and message.
pub fn error_fields(buf: &mut BytesMut, tag: u8, severity: &str, code: &str, msg: &str) {
    message(buf, tag, |b| {
        b.put_u8(b'S');
        cstr(b, severity);
        b.put_u8(b'V');
        cstr(b, severity);
        b.put_u8(b'C');
        cstr(b, code);
        b.put_u8(b'M');
        cstr(b, msg);
        b.put_u8(0);
    });
}

/// ErrorResponse with severity, SQLSTATE, message and further fields (`(type, value)`: `R`
/// routine, `F` file, ...), for errors that drivers recognise by those fields.
pub fn error_response_with(
    buf: &mut BytesMut,
    severity: &str,
    code: &str,
    msg: &str,
    more: &[(u8, &str)],
) {
    message(buf, backend::ERROR_RESPONSE, |b| {
        for (kind, value) in [
            (b'S', severity),
            (b'V', severity),
            (b'C', code),
            (b'M', msg),
        ]
        .iter()
        .chain(more)
        {
            b.put_u8(*kind);
            cstr(b, value);
        }
        b.put_u8(0);
    });
}

/// NoticeResponse (a WARNING, NOTICE, ...).
pub fn notice_response(buf: &mut BytesMut, severity: &str, code: &str, msg: &str) {
    error_fields(buf, backend::NOTICE_RESPONSE, severity, code, msg);
}

/// ErrorResponse.
pub fn error_response(buf: &mut BytesMut, severity: &str, code: &str, msg: &str) {
    error_fields(buf, backend::ERROR_RESPONSE, severity, code, msg);
}

/// ErrorResponse whose message is bytes (any but NUL), as PostgreSQL's may be: it quotes
/// names as a client sent them, whatever their encoding.
pub fn error_response_bytes(buf: &mut BytesMut, severity: &str, code: &str, msg: &[u8]) {
    message(buf, backend::ERROR_RESPONSE, |b| {
        for (kind, value) in [(b'S', severity), (b'V', severity), (b'C', code)] {
            b.put_u8(kind);
            cstr(b, value);
        }
        b.put_u8(b'M');
        b.put_slice(msg);
        b.put_u8(0);
        b.put_u8(0);
    });
}

/// Re-encodes an ErrorResponse body (its fields) with another severity (`S` and `V` fields),
/// keeping every other field as it was.
pub fn error_with_severity(buf: &mut BytesMut, body: &[u8], severity: &str) {
    error_with_fields(buf, body, |kind, _| {
        (kind == b'S' || kind == b'V').then(|| severity.as_bytes().to_vec())
    });
}

/// Re-encodes an ErrorResponse body with each field's value replaced by what `f` gives for
/// it (its type and value), if anything.
pub fn error_with_fields(
    buf: &mut BytesMut,
    body: &[u8],
    f: impl Fn(u8, &[u8]) -> Option<Vec<u8>>,
) {
    message(buf, backend::ERROR_RESPONSE, |b| {
        let mut rest = body;
        while let Some((&kind, tail)) = rest.split_first() {
            if kind == 0 {
                break;
            }
            let end = tail.iter().position(|&c| c == 0).unwrap_or(tail.len());
            b.put_u8(kind);
            match f(kind, &tail[..end]) {
                Some(v) => b.put_slice(&v),
                None => b.put_slice(&tail[..end]),
            }
            b.put_u8(0);
            rest = tail.get(end + 1..).unwrap_or(&[]);
        }
        b.put_u8(0);
    });
}

pub fn auth_ok(buf: &mut BytesMut) {
    auth(buf, auth_code::OK, &[]);
}

pub fn auth_md5(buf: &mut BytesMut, salt: [u8; 4]) {
    auth(buf, auth_code::MD5, &salt);
}

/// AuthenticationSASL listing `mechanisms`.
pub fn auth_sasl(buf: &mut BytesMut, mechanisms: &[&str]) {
    message(buf, backend::AUTHENTICATION, |b| {
        b.put_i32(auth_code::SASL);
        for m in mechanisms {
            cstr(b, m);
        }
        b.put_u8(0);
    });
}

pub fn auth_sasl_continue(buf: &mut BytesMut, data: &[u8]) {
    auth(buf, auth_code::SASL_CONTINUE, data);
}

pub fn auth_sasl_final(buf: &mut BytesMut, data: &[u8]) {
    auth(buf, auth_code::SASL_FINAL, data);
}

fn auth(buf: &mut BytesMut, code: i32, data: &[u8]) {
    message(buf, backend::AUTHENTICATION, |b| {
        b.put_i32(code);
        b.put_slice(data);
    });
}

pub fn parameter_status(buf: &mut BytesMut, name: &str, value: &str) {
    message(buf, backend::PARAMETER_STATUS, |b| {
        cstr(b, name);
        cstr(b, value);
    });
}

pub fn backend_key_data(buf: &mut BytesMut, pid: i32, secret: i32) {
    message(buf, backend::BACKEND_KEY_DATA, |b| {
        b.put_i32(pid);
        b.put_i32(secret);
    });
}

pub fn ready_for_query(buf: &mut BytesMut, status: TxStatus) {
    message(buf, backend::READY_FOR_QUERY, |b| {
        b.put_u8(status.as_byte())
    });
}

/// Simple Query.
pub fn query(buf: &mut BytesMut, sql: &str) {
    message(buf, crate::frontend::QUERY, |b| cstr(b, sql));
}

/// PasswordMessage (cleartext or md5 response).
pub fn password(buf: &mut BytesMut, password: &str) {
    message(buf, crate::frontend::PASSWORD, |b| cstr(b, password));
}

/// SASLInitialResponse.
pub fn sasl_initial_response(buf: &mut BytesMut, mechanism: &str, data: &[u8]) {
    message(buf, crate::frontend::PASSWORD, |b| {
        cstr(b, mechanism);
        b.put_i32(data.len() as i32);
        b.put_slice(data);
    });
}

/// SASLResponse.
pub fn sasl_response(buf: &mut BytesMut, data: &[u8]) {
    message(buf, crate::frontend::PASSWORD, |b| b.put_slice(data));
}

/// Parse of a statement named `name`; `rest` is the body after the name (query text with its
/// NUL, then the parameter type count and types), as a client sent it.
pub fn parse(buf: &mut BytesMut, name: &[u8], rest: &[u8]) {
    message(buf, crate::frontend::PARSE, |b| {
        b.put_slice(name);
        b.put_u8(0);
        b.put_slice(rest);
    });
}

/// Bind of statement `statement` into portal `portal`; `rest` is the body after the two names
/// (parameter formats and values, result formats), in parts.
pub fn bind(buf: &mut BytesMut, portal: &[u8], statement: &[u8], rest: &[&[u8]]) {
    message(buf, crate::frontend::BIND, |b| {
        b.put_slice(portal);
        b.put_u8(0);
        b.put_slice(statement);
        b.put_u8(0);
        for part in rest {
            b.put_slice(part);
        }
    });
}

/// Close of a prepared statement (`kind` b'S') or portal (b'P').
pub fn close(buf: &mut BytesMut, kind: u8, name: &[u8]) {
    message(buf, crate::frontend::CLOSE, |b| {
        b.put_u8(kind);
        b.put_slice(name);
        b.put_u8(0);
    });
}

/// Sync.
pub fn sync(buf: &mut BytesMut) {
    message(buf, crate::frontend::SYNC, |_| {});
}

/// Describe of a prepared statement (`kind` b'S') or portal (b'P').
pub fn describe(buf: &mut BytesMut, kind: u8, name: &[u8]) {
    message(buf, crate::frontend::DESCRIBE, |b| {
        b.put_u8(kind);
        b.put_slice(name);
        b.put_u8(0);
    });
}

/// Flush.
pub fn flush(buf: &mut BytesMut) {
    message(buf, crate::frontend::FLUSH, |_| {});
}

/// A backend message without a body: ParseComplete, BindComplete, CloseComplete, NoData, ...
pub fn empty(buf: &mut BytesMut, tag: u8) {
    message(buf, tag, |_| {});
}

/// CommandComplete with its tag (e.g. `PREPARE`).
pub fn command_complete(buf: &mut BytesMut, tag: &str) {
    message(buf, backend::COMMAND_COMPLETE, |b| cstr(b, tag));
}

/// Terminate.
pub fn terminate(buf: &mut BytesMut) {
    message(buf, crate::frontend::TERMINATE, |_| {});
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_for_query_bytes() {
        let mut b = BytesMut::new();
        ready_for_query(&mut b, TxStatus::Idle);
        assert_eq!(&b[..], b"Z\0\0\0\x05I");
    }

    #[test]
    fn a_bind_in_parts_reads_back_whole() {
        let mut b = BytesMut::new();
        // One text parameter "7", then no result formats.
        let values: &[u8] = &[0, 0, 0, 1, 0, 0, 0, 1, b'7'];
        bind(&mut b, b"p", b"s1", &[values, &[0, 0]]);
        let h = crate::Header::parse(&b, 1 << 20).unwrap().unwrap();
        assert_eq!((h.tag, h.total_len()), (crate::frontend::BIND, b.len()));
        let body = crate::frontend::BindBody::parse(&b[5..]).unwrap();
        assert_eq!((body.portal, body.statement), (&b"p"[..], &b"s1"[..]));
        assert_eq!(body.param(0), Some(Some(&b"7"[..])));
    }

    #[test]
    fn error_round_trip() {
        let mut b = BytesMut::new();
        error_response(&mut b, "FATAL", "28P01", "password authentication failed");
        let h = crate::Header::parse(&b, 1 << 20).unwrap().unwrap();
        assert_eq!(h.total_len(), b.len());
        let f = crate::backend::ErrorFields::parse(&b[5..]).unwrap();
        assert_eq!(f.code, "28P01");
        assert_eq!(f.severity, "FATAL");
    }

    #[test]
    fn severity_is_replaced_and_the_rest_kept() {
        let mut b = BytesMut::new();
        error_response(
            &mut b,
            "ERROR",
            "42704",
            "unrecognized configuration parameter",
        );
        let mut out = BytesMut::new();
        error_with_severity(&mut out, &b[5..], "FATAL");
        let h = crate::Header::parse(&out, 1 << 20).unwrap().unwrap();
        assert_eq!(h.total_len(), out.len());
        let f = crate::backend::ErrorFields::parse(&out[5..]).unwrap();
        assert_eq!((f.severity.as_str(), f.code.as_str()), ("FATAL", "42704"));
        assert_eq!(f.message, "unrecognized configuration parameter");
    }

    #[test]
    fn query_bytes() {
        let mut b = BytesMut::new();
        query(&mut b, "SELECT 1");
        assert_eq!(&b[..], b"Q\0\0\0\x0dSELECT 1\0");
    }
}
