//! Helpers of the tenant tests (`tenants.rs`, `tenant_fleet_api.rs`, `tenant_fleet.rs`): a
//! login through a node that answers with the server's message, polling until a change is
//! seen, and calls of a node's tenant API.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{db_message, pg_config};

/// Connects to 127.0.0.1:`port` as `user` with `password` on `db` (with `options`), or the
/// server's message and the error.
pub async fn login_to(
    port: u16,
    user: &str,
    password: &str,
    db: &str,
    options: Option<&str>,
) -> Result<tokio_postgres::Client, String> {
    let mut cfg = pg_config(port, user, db);
    cfg.password(password);
    if let Some(o) = options {
        cfg.options(o);
    }
    match cfg.connect(tokio_postgres::NoTls).await {
        Ok((client, conn)) => {
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(client)
        }
        Err(e) => Err(format!("{} {e}", db_message(&e))),
    }
}

/// Polls `f` every 20 ms until it is true; the time it took, or a failure after `limit`.
pub async fn until<F, Fut>(what: &str, limit: Duration, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if f().await {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not within {limit:?}");
}

/// The nodes' `api_jwt_secret`.
pub const SECRET: &str = "a test secret of 32 bytes or so!";

/// A bearer token signed with [`SECRET`], valid for an hour.
pub fn token() -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({"role": "admin", "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// An HTTP/1.1 exchange: status and body.
pub async fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A node just started may not listen on its API port yet (a loaded machine): refused
    // connections are tried again for a while.
    let mut tries = 0;
    let mut s = loop {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && tries < 100 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("connect to {addr}: {e}"),
        }
    };
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        token(),
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}
