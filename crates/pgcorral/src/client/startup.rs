//! The client's first packets: SSLRequest (TLS, when client_tls_sslmode allows it) or a TLS
//! ClientHello straight away (PostgreSQL 17's direct TLS, ALPN "postgresql"), GSSENCRequest
//! (declined), CancelRequest (handed to the cancel map), and the StartupMessage.

use bytes::BytesMut;
use pgwire::startup::{self, StartupPacket};

use crate::error::{Error, Kind, Result};
use crate::net::framed::{read_startup, ReadError};
use crate::net::stream::{Sock, Stream};
use crate::tls::{ClientSide, ALPN};

/// First byte of a TLS record carrying a handshake message (a ClientHello, from a client that
/// speaks TLS without asking first).
const TLS_HANDSHAKE: u8 = 0x16;

/// What the client asked for.
pub enum Opening {
    /// A session: the StartupMessage's parameters.
    Session {
        minor: u16,
        params: Vec<(String, String)>,
    },
    Cancel {
        pid: i32,
        secret: i32,
    },
    /// Closed before asking anything (a port probe, or a client giving up after 'N').
    Closed,
}

fn io_error(e: std::io::Error) -> Error {
    Error::with_source(Kind::ClientIo, "write", e)
}

/// Reads packets until the client opens a session or sends a cancel; SSLRequest and direct TLS
/// are answered with a TLS handshake when `tls` is set (client_tls_sslmode is not disable).
pub async fn open(
    stream: &mut Stream,
    buf: &mut BytesMut,
    tls: Option<&ClientSide>,
) -> Result<Opening> {
    loop {
        if let (Some(side), true) = (tls, !stream.is_tls()) {
            // Direct TLS is recognised by its first byte, once something has been read.
            if buf.is_empty() {
                match crate::net::framed::fill_some(stream, buf).await {
                    Ok(()) => {}
                    Err(ReadError::Closed) => return Ok(Opening::Closed),
                    Err(e) => {
                        return Err(Error::with_source(Kind::ClientIo, "read", e));
                    }
                }
            }
            if buf[0] == TLS_HANDSHAKE {
                let pre = buf.split();
                handshake(stream, pre, side, true).await?;
                continue;
            }
        }
        let packet = match read_startup(stream, buf).await {
            Ok(p) => p,
            Err(ReadError::Closed) => return Ok(Opening::Closed),
            Err(e) => {
                return Err(Error::with_source(
                    Kind::ClientProtocol,
                    "invalid startup packet",
                    e,
                ))
            }
        };
        match startup::parse(&packet) {
            Ok(StartupPacket::SslRequest) if tls.is_some() && !stream.is_tls() => {
                if !buf.is_empty() {
                    return Err(Error::new(
                        Kind::ClientProtocol,
                        "received unencrypted data after SSL request",
                    ));
                }
                stream.send(b"S").await.map_err(io_error)?;
                handshake(stream, BytesMut::new(), tls.expect("checked"), false).await?;
            }
            Ok(StartupPacket::SslRequest) if stream.is_tls() => {
                return Err(Error::new(
                    Kind::ClientProtocol,
                    "SSLRequest over a TLS connection",
                ));
            }
            Ok(StartupPacket::SslRequest) | Ok(StartupPacket::GssEncRequest) => {
                if !buf.is_empty() {
                    // Bytes after SSLRequest before our answer: a client speaking TLS blind.
                    return Err(Error::new(
                        Kind::ClientProtocol,
                        "received unencrypted data after SSL request",
                    ));
                }
                stream.send(b"N").await.map_err(io_error)?;
            }
            Ok(StartupPacket::Cancel { pid, secret }) => {
                return Ok(Opening::Cancel { pid, secret })
            }
            Ok(StartupPacket::Startup { minor, params }) => {
                return Ok(Opening::Session { minor, params })
            }
            Err(e) => {
                return Err(Error::with_source(
                    Kind::ClientProtocol,
                    "invalid startup packet",
                    e,
                ))
            }
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
        .map_err(|e| Error::with_source(Kind::ClientProtocol, "TLS handshake failed", e))?;
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
pub fn negotiate(out: &mut BytesMut, minor: u16, params: &[(String, String)]) {
    let unknown: Vec<&str> = params
        .iter()
        .filter(|(k, _)| k.starts_with("_pq_."))
        .map(|(k, _)| k.as_str())
        .collect();
    if minor == 0 && unknown.is_empty() {
        return;
    }
    pgwire::encode::message(out, pgwire::backend::NEGOTIATE_PROTOCOL_VERSION, |b| {
        use bytes::BufMut;
        b.put_i32(0);
        b.put_i32(unknown.len() as i32);
        for k in unknown {
            b.put_slice(k.as_bytes());
            b.put_u8(0);
        }
    });
}
