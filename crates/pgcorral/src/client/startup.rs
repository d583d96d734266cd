//! The client's first packets: SSLRequest and GSSENCRequest (declined with 'N' until TLS lands),
//! CancelRequest (handed to the cancel map), and the StartupMessage with its parameters.

use bytes::BytesMut;
use pgwire::startup::{self, StartupPacket};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::error::{Error, Kind, Result};
use crate::net::framed::{read_startup, ReadError};

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

/// Reads packets until the client opens a session or sends a cancel.
pub async fn open(stream: &mut TcpStream, buf: &mut BytesMut) -> Result<Opening> {
    loop {
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
            Ok(StartupPacket::SslRequest) | Ok(StartupPacket::GssEncRequest) => {
                if !buf.is_empty() {
                    // Bytes after SSLRequest before our answer: a client speaking TLS blind.
                    return Err(Error::new(
                        Kind::ClientProtocol,
                        "received unencrypted data after SSL request",
                    ));
                }
                stream
                    .write_all(b"N")
                    .await
                    .map_err(|e| Error::with_source(Kind::ClientIo, "write", e))?;
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
