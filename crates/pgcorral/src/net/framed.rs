//! Reading whole messages during startup and authentication, with the partial bytes kept in a
//! caller-owned buffer so that a dropped read future loses nothing (cancel-safe).

use bytes::{Buf, BytesMut};
use pgwire::Header;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Why a message could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed the connection cleanly between messages.
    Closed,
    Io(std::io::Error),
    Frame(pgwire::FrameError),
    Startup(pgwire::startup::StartupError),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Closed => f.write_str("connection closed"),
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Frame(e) => write!(f, "{e}"),
            ReadError::Startup(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReadError {}

async fn fill<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    want: usize,
) -> Result<(), ReadError> {
    while buf.len() < want {
        buf.reserve(want - buf.len());
        let n = stream.read_buf(buf).await.map_err(ReadError::Io)?;
        if n == 0 {
            return Err(if buf.is_empty() {
                ReadError::Closed
            } else {
                ReadError::Io(std::io::ErrorKind::UnexpectedEof.into())
            });
        }
    }
    Ok(())
}

/// Reads whatever arrives next (at least one byte) into `buf`, in one read where it can: a
/// startup packet or a TLS ClientHello fits in the room reserved.
pub async fn fill_some<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<(), ReadError> {
    buf.reserve(1024);
    fill(stream, buf, buf.len() + 1).await
}

/// The type byte of the next message, as soon as it is buffered: PostgreSQL refuses a message
/// of the wrong type before it reads its length.
pub async fn next_tag<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<u8, ReadError> {
    fill(stream, buf, 1).await?;
    Ok(buf[0])
}

/// Reads one tagged message; returns its tag and body.
pub async fn read_message<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    max_len: u32,
) -> Result<(u8, BytesMut), ReadError> {
    fill(stream, buf, pgwire::header::HEADER_LEN).await?;
    let h = Header::parse(buf, max_len)
        .map_err(ReadError::Frame)?
        .expect("five bytes buffered");
    fill(stream, buf, h.total_len()).await?;
    buf.advance(pgwire::header::HEADER_LEN);
    Ok((h.tag, buf.split_to(h.body_len())))
}

/// Reads one untagged startup packet (length prefix included).
pub async fn read_startup<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<BytesMut, ReadError> {
    // Room for what the client sent along with the packet, read with it as PostgreSQL reads
    // it (into its receive buffer): bytes after an SSLRequest must be seen to be refused.
    buf.reserve(1024);
    fill(stream, buf, 4).await?;
    let len = pgwire::startup::packet_len(buf)
        .map_err(ReadError::Startup)?
        .expect("four bytes buffered");
    fill(stream, buf, len).await?;
    Ok(buf.split_to(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_across_partial_writes() {
        let (mut a, mut b) = tokio::io::duplex(64);
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            a.write_all(b"Q\0\0").await.unwrap();
            a.write_all(b"\0\x0dSELECT 1\0X\0\0\0\x04").await.unwrap();
        });
        let mut buf = BytesMut::new();
        let (tag, body) = read_message(&mut b, &mut buf, 1 << 20).await.unwrap();
        assert_eq!(tag, b'Q');
        assert_eq!(&body[..], b"SELECT 1\0");
        let (tag, body) = read_message(&mut b, &mut buf, 1 << 20).await.unwrap();
        assert_eq!((tag, body.len()), (b'X', 0));
        assert!(matches!(
            read_message(&mut b, &mut buf, 1 << 20).await,
            Err(ReadError::Closed)
        ));
    }

    #[tokio::test]
    async fn refuses_oversized() {
        let (mut a, mut b) = tokio::io::duplex(64);
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            a.write_all(b"Q\x7f\xff\xff\xff").await.unwrap();
        });
        let mut buf = BytesMut::new();
        assert!(matches!(
            read_message(&mut b, &mut buf, 1 << 20).await,
            Err(ReadError::Frame(_))
        ));
    }
}
