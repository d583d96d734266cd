// Ping-pong over loopback TCP between two tasks on one current-thread runtime.
use tokio::io::{AsyncReadExt, AsyncWriteExt};
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (b, _) = l.accept().await.unwrap();
        a.set_nodelay(true).unwrap();
        b.set_nodelay(true).unwrap();
        let echo = tokio::spawn(async move {
            let mut b = b;
            let mut buf = [0u8; 64];
            loop {
                let k = b.read(&mut buf).await.unwrap();
                if k == 0 {
                    break;
                }
                b.write_all(&buf[..k]).await.unwrap();
            }
        });
        let mut a = a;
        let mut buf = [0u8; 64];
        for _ in 0..n {
            a.write_all(&[1u8; 64]).await.unwrap();
            let mut got = 0;
            while got < 64 {
                got += a.read(&mut buf[got..]).await.unwrap();
            }
        }
        drop(a);
        echo.await.unwrap();
    });
}
