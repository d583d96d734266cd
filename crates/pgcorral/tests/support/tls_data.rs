//! Setup for the tests of the data path over TLS (tls_data_*.rs): an `ssl = on` PostgreSQL,
//! pgcorral requiring TLS from clients and verifying PostgreSQL's certificate, with two workers,
//! and its TLS clients (tokio-postgres or raw, with a small receive buffer if asked).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::tls::*;
use super::*;

/// pg_hba.conf lines after the superuser's: `app` may log in over TLS only, so a server
/// connection of pgcorral's that is not TLS fails its login.
pub const HBA_APP_TLS_ONLY: &str =
    "hostssl all app 127.0.0.1/32 trust\nhostnossl all app 127.0.0.1/32 reject";

/// An `ssl = on` PostgreSQL presenting `certs.server` (localhost, 127.0.0.1), with a superuser
/// `app` that may only log in over TLS.
pub fn ssl_postgres(certs: &Certs) -> Postgres {
    let pg = postgres_tls(certs, HBA_APP_TLS_ONLY);
    pg.sql("postgres", "CREATE ROLE app LOGIN SUPERUSER");
    pg
}

/// A pgcorral config with TLS on both hops (clients must use TLS; PostgreSQL at `host`:`port`
/// verified with verify-full), two workers, trust logins, and `general` lines added.
pub fn cfg_at(host: &str, port: u16, certs: &Certs, general: &str) -> String {
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\nworkers = 2\n\
         server_connect_timeout = 5000\n\
         client_tls_sslmode = \"require\"\nclient_tls_cert_file = \"{cert}\"\n\
         client_tls_key_file = \"{key}\"\n\
         server_tls_sslmode = \"verify-full\"\nserver_tls_ca_file = \"{ca}\"\n{general}\n\n\
         [databases.postgres]\nhost = \"{host}\"\nport = {port}\n",
        cert = certs.server.cert.display(),
        key = certs.server.key.display(),
        ca = certs.ca.cert_file.display(),
    )
}

/// `cfg_at` for `pg` at 127.0.0.1.
pub fn cfg(pg: &Postgres, certs: &Certs, general: &str) -> String {
    cfg_at("127.0.0.1", pg.port, certs, general)
}

/// A tokio-postgres client over TLS (sslmode require, the certificate verified against the
/// test CA) to pgcorral at `port`, as `app`.
pub async fn tls_client(port: u16, certs: &Certs) -> tokio_postgres::Client {
    within(
        Duration::from_secs(30),
        "TLS login to pgcorral",
        connect_tls(
            port,
            "app",
            None,
            "postgres",
            tls_config(&certs.ca, None),
            |_| {},
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("TLS login to pgcorral: {e:?}"))
}

/// Checks that `c`'s queries reach PostgreSQL over TLS (the client's own hop is TLS by
/// construction: pgcorral requires it).
pub async fn assert_server_hop_tls(c: &tokio_postgres::Client) {
    assert_eq!(
        scalar(c, SSL_OF_BACKEND).await.unwrap().as_deref(),
        Some("t"),
        "pgcorral's server connection is not TLS"
    );
}

/// A raw protocol client over TLS to pgcorral at `port`, logged in as `app`.
pub async fn raw_tls_client(port: u16, certs: &Certs) -> PgStream<TlsStream> {
    let mut s = tls_connect(port, tls_config(&certs.ca, None), Negotiation::SslRequest)
        .await
        .expect("TLS to pgcorral");
    s.login("app", "postgres").await.expect("raw TLS login");
    s
}

/// As `raw_tls_client`, with the client's socket receive buffer fixed at `rcvbuf` bytes (no
/// autotuning: the kernel then buffers a steady amount of an answer the client does not read).
pub async fn raw_tls_client_with_rcvbuf(
    port: u16,
    certs: &Certs,
    rcvbuf: u32,
) -> PgStream<TlsStream> {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(rcvbuf).unwrap();
    let mut tcp = sock
        .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap();
    tcp.write_all(&ssl_request_bytes()).await.unwrap();
    assert_eq!(tcp.read_u8().await.unwrap(), b'S', "SSLRequest answered");
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("127.0.0.1")
        .unwrap()
        .to_owned();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(tls_config(&certs.ca, None)))
        .connect(name, tcp)
        .await
        .expect("TLS to pgcorral");
    let mut s = PgStream::new(tls);
    s.login("app", "postgres").await.expect("raw TLS login");
    s
}

/// The (non-NULL) column values of a DataRow body.
pub fn data_row(body: &[u8]) -> Vec<&[u8]> {
    let n = i16::from_be_bytes([body[0], body[1]]);
    let mut pos = 2;
    let mut cols = Vec::new();
    for _ in 0..n {
        let len = i32::from_be_bytes(body[pos..pos + 4].try_into().unwrap());
        pos += 4;
        let len = len.max(0) as usize;
        cols.push(&body[pos..pos + len]);
        pos += len;
    }
    cols
}
