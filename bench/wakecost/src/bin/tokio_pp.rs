// The ping-pong on tokio: two tasks on one current-thread runtime, reading with
// `AsyncReadExt::read`, and writing straight to the socket as the other programs do (the
// message always fits the socket's buffer).
use std::io::Write;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The socket under tokio for reads, and a second handle on it for plain writes.
struct Sock(TcpStream, std::net::TcpStream);

impl wakecost::Duplex for Sock {
    async fn read(&mut self, buf: &mut [u8]) -> usize {
        self.0.read(buf).await.unwrap()
    }
    fn write(&mut self, b: &[u8]) {
        self.1.write_all(b).unwrap();
    }
}

fn main() {
    let n = wakecost::rounds();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (a, b) = wakecost::pair();
        let sock = |s: std::net::TcpStream| {
            let w = s.try_clone().unwrap();
            Sock(TcpStream::from_std(s).unwrap(), w)
        };
        let (a, b) = (sock(a), sock(b));
        let echo = tokio::spawn(wakecost::echo(b));
        wakecost::ping(a, n).await;
        echo.await.unwrap();
    });
}
