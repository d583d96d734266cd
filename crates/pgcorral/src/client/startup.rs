//! The client's first packets, answered as PostgreSQL 15 answers them: SSLRequest (TLS, when
//! client_tls_sslmode allows it) or a TLS ClientHello straight away (PostgreSQL 17's direct TLS,
//! ALPN "postgresql"), GSSENCRequest (declined, as by a PostgreSQL built without GSSAPI),
//! CancelRequest (handed to the cancel map), and the StartupMessage. Each of SSLRequest and
//! GSSENCRequest may come once (neither after TLS); a packet PostgreSQL closes the connection on
//! without a word (a bad length, a short CancelRequest, the client leaving mid-packet) gets none.

use bytes::BytesMut;
use corral_rt::stream::{Sock, Stream};
use pgwire::startup::{self, StartupError, StartupPacket};

use crate::error::{Error, Kind, Result};
use crate::net::framed;
use crate::net::framed::{read_startup, ReadError};
use crate::session::startup as session_startup;
use crate::tls::{ClientSide, ALPN};

/// First byte of a TLS record carrying a handshake message (a ClientHello, from a client that
/// speaks TLS without asking first).
const TLS_HANDSHAKE: u8 = 0x16;

/// PostgreSQL's detail for plaintext bytes that came with an SSLRequest or GSSENCRequest.
const INJECTED: &str = "This could be either a client-software bug or evidence of an attempted man-in-the-middle attack.";

/// What the client asked for.
pub enum Opening {
    /// A session: the StartupMessage's parameters, as sent.
    Session {
        minor: u16,
        params: Vec<(startup::Param, startup::Param)>,
    },
    Cancel {
        pid: i32,
        secret: i32,
    },
    /// Closed before asking anything (a port probe, or a client giving up after 'N').
    Closed,
    /// The connection ends here, as PostgreSQL ends it: whatever it answers has been sent
    /// (often nothing); the error is for the log.
    Ended(Error),
}

fn io_error(e: std::io::Error) -> Error {
    Error::with_source(Kind::ClientIo, "write", e)
}

/// Sends PostgreSQL's FATAL for a refused startup packet (`e` as it writes itself: an
/// [`Error::as_postgres`] carries PostgreSQL's SQLSTATE, detail and hint) and ends the
/// connection.
async fn refuse(stream: &mut Stream, e: Error) -> Opening {
    let mut out = BytesMut::new();
    e.write_response(&mut out, "FATAL");
    let _ = stream.send(&out).await;
    Opening::Ended(e)
}

/// The first `replication` value of the startup packet that PostgreSQL refuses before
/// authentication: neither a boolean (as its `parse_bool` reads one) nor `database`.
fn bad_replication(params: &[(startup::Param, startup::Param)]) -> Option<String> {
    params
        .iter()
        .filter(|(k, _)| k == b"replication")
        .find(|(_, v)| v != b"database" && session_startup::parse_bool(v).is_none())
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
}

/// PostgreSQL's refusal of a `replication` value it cannot read, with its hint.
fn unreadable_replication(value: &str) -> Error {
    Error::as_postgres(
        Kind::ClientProtocol,
        pgwire::sqlstate::INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"replication\": \"{value}\""),
        &[(
            b'H',
            r#"Valid values are: "false", 0, "true", 1, "database"."#,
        )],
    )
}

/// A protocol violation PostgreSQL reports with its detail on injected bytes.
fn injected(message: &str) -> Error {
    Error::as_postgres(
        Kind::ClientProtocol,
        pgwire::sqlstate::PROTOCOL_VIOLATION,
        message,
        &[(b'D', INJECTED)],
    )
}

/// A refused startup packet, answered (or not) as PostgreSQL answers it.
async fn refused(stream: &mut Stream, e: StartupError) -> Opening {
    let err = |kind| Error::new(kind, e.to_string());
    match e {
        // A protocol major below 3 is answered in the format of protocol 2, as PostgreSQL
        // does (its error text, no length word).
        StartupError::UnsupportedProtocol(v) if (v as u32) >> 16 < 3 => {
            let mut out = BytesMut::from(&b"E"[..]);
            out.extend_from_slice(format!("FATAL:  {e}\n\0").as_bytes());
            let _ = stream.send(&out).await;
            Opening::Ended(err(Kind::NotSupported))
        }
        StartupError::UnsupportedProtocol(_) => refuse(stream, err(Kind::NotSupported)).await,
        StartupError::Layout => refuse(stream, err(Kind::ClientProtocol)).await,
        StartupError::BadLength(_) | StartupError::ShortCancel => {
            Opening::Ended(err(Kind::ClientProtocol))
        }
    }
}

/// Reads packets until the client opens a session or sends a cancel; SSLRequest and direct TLS
/// are answered with a TLS handshake when `tls` is set (client_tls_sslmode is not disable).
pub async fn open(
    stream: &mut Stream,
    buf: &mut BytesMut,
    tls: Option<&ClientSide>,
) -> Result<Opening> {
    // PostgreSQL's ssl_done and gss_done: each request is answered once, TLS ends both.
    let (mut ssl_done, mut gss_done) = (false, false);
    if let Some(side) = tls.filter(|_| !stream.is_tls()) {
        // Direct TLS is recognised by the first byte of the connection.
        match framed::fill_some(stream, buf).await {
            Ok(()) => {}
            Err(ReadError::Closed) => return Ok(Opening::Closed),
            Err(e) => {
                return Ok(Opening::Ended(Error::with_source(
                    Kind::ClientIo,
                    "read",
                    e,
                )))
            }
        }
        if buf[0] == TLS_HANDSHAKE {
            let pre = buf.split();
            if let Err(e) = handshake(stream, pre, side, true).await {
                return Ok(Opening::Ended(e));
            }
            (ssl_done, gss_done) = (true, true);
        }
    }
    loop {
        let packet = match read_startup(stream, buf).await {
            Ok(p) => p,
            Err(ReadError::Closed) => return Ok(Opening::Closed),
            // PostgreSQL only logs "incomplete startup packet" or a bad length.
            Err(ReadError::Startup(e)) => return Ok(refused(stream, e).await),
            Err(e) => {
                let e = Error::with_source(Kind::ClientProtocol, "incomplete startup packet", e);
                return Ok(Opening::Ended(e));
            }
        };
        let parsed = match startup::parse(&packet) {
            Ok(StartupPacket::SslRequest) if ssl_done => {
                Err(StartupError::UnsupportedProtocol(startup::SSL_REQUEST_CODE))
            }
            Ok(StartupPacket::GssEncRequest) if gss_done => Err(StartupError::UnsupportedProtocol(
                startup::GSSENC_REQUEST_CODE,
            )),
            other => other,
        };
        match parsed {
            Ok(StartupPacket::SslRequest) => {
                ssl_done = true;
                match tls.filter(|_| !stream.is_tls()) {
                    Some(side) => {
                        stream.send(b"S").await.map_err(io_error)?;
                        // Bytes that came with the SSLRequest stay aside, unencrypted: refused
                        // over TLS once it is up, as PostgreSQL does.
                        if let Err(e) = handshake(stream, BytesMut::new(), side, false).await {
                            return Ok(Opening::Ended(e));
                        }
                        gss_done = true;
                    }
                    None => stream.send(b"N").await.map_err(io_error)?,
                }
                if !buf.is_empty() {
                    let e = injected("received unencrypted data after SSL request");
                    return Ok(refuse(stream, e).await);
                }
            }
            Ok(StartupPacket::GssEncRequest) => {
                gss_done = true;
                stream.send(b"N").await.map_err(io_error)?;
                if !buf.is_empty() {
                    let e = injected("received unencrypted data after GSSAPI encryption request");
                    return Ok(refuse(stream, e).await);
                }
            }
            Ok(StartupPacket::Cancel { pid, secret }) => {
                return Ok(Opening::Cancel { pid, secret })
            }
            Ok(StartupPacket::Startup { minor, params }) => {
                if let Some(value) = bad_replication(&params) {
                    return Ok(refuse(stream, unreadable_replication(&value)).await);
                }
                return Ok(Opening::Session { minor, params });
            }
            Err(e) => return Ok(refused(stream, e).await),
        }
    }
}

/// Runs the TLS handshake over the plaintext socket (`pre`: bytes of it already read).
/// Direct TLS must negotiate ALPN "postgresql", as PostgreSQL 17 requires.
async fn handshake(
    stream: &mut Stream,
    pre: BytesMut,
    side: &ClientSide,
    direct: bool,
) -> Result<()> {
    let Some(tcp) = stream.take_plain() else {
        return Err(Error::new(Kind::ClientProtocol, "TLS requested twice"));
    };
    let tls = side
        .acceptor
        .accept(Sock::new(tcp, pre))
        .await
        .map_err(|e| {
            Error::with_source(Kind::ClientProtocol, "could not accept SSL connection", e)
        })?;
    if direct && tls.get_ref().1.alpn_protocol() != Some(ALPN) {
        return Err(Error::new(
            Kind::ClientProtocol,
            "direct TLS connection without ALPN \"postgresql\"",
        ));
    }
    *stream = Stream::Tls(Box::new(tokio_rustls::TlsStream::Server(tls)));
    Ok(())
}

/// Appends NegotiateProtocolVersion when the client asked for a newer minor version or sent
/// `_pq_.` options: we speak 3.0 and recognise none of them.
/// The names are listed as sent, as PostgreSQL lists them.
pub fn negotiate(out: &mut BytesMut, minor: u16, params: &[(startup::Param, startup::Param)]) {
    let unknown: Vec<&[u8]> = params
        .iter()
        .filter(|(k, _)| k.starts_with(b"_pq_."))
        .map(|(k, _)| &k[..])
        .collect();
    if minor == 0 && unknown.is_empty() {
        return;
    }
    pgwire::encode::message(out, pgwire::backend::NEGOTIATE_PROTOCOL_VERSION, |b| {
        use bytes::BufMut;
        // The newest version supported, whole (3.0), as PostgreSQL sends it.
        b.put_i32(startup::PROTOCOL_3_0);
        b.put_i32(unknown.len() as i32);
        for k in unknown {
            b.put_slice(k);
            b.put_u8(0);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::bad_replication;

    /// The values PostgreSQL's parse_bool reads, and `database`, pass; others are refused.
    #[test]
    fn replication_values_as_postgresql_reads_them() {
        let one = |v: &str| bad_replication(&[(b"replication".to_vec(), v.as_bytes().to_vec())]);
        for ok in [
            "database", "1", "0", "t", "TRUE", "f", "fal", "y", "yes", "n", "No", "on", "of", "OFF",
        ] {
            assert_eq!(one(ok), None, "{ok}");
        }
        for bad in [
            "", "o", "Database", "truee", "2", "onn", "offf", " true", "yes ",
        ] {
            assert_eq!(one(bad).as_deref(), Some(bad), "{bad}");
        }
    }
}
