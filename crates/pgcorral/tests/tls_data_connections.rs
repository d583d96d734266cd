//! Connections over TLS on both hops: a client's cancel request over TLS stops its query, the
//! cancel to a TLS server goes over TLS, two hundred idle TLS clients each get their answer, and
//! pgcorral sends the database's host name as SNI.
//!
//! Both hops are TLS: clients reach pgcorral over TLS (`client_tls_sslmode = "require"`) and
//! pgcorral reaches an `ssl = on` PostgreSQL over TLS (`server_tls_sslmode = "verify-full"`),
//! with two workers so that clients and servers move between reactors (support/tls_data.rs).

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::tls::*;
use support::tls_data::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_rustls::rustls::ServerConfig;

// ---- 1. cancel ------------------------------------------------------------------------------

/// A `MakeTlsConnect` that counts the TLS handshakes its connectors complete.
#[derive(Clone)]
struct CountingTls {
    inner: Rustls,
    handshakes: Arc<AtomicUsize>,
}

struct CountingConnect<T> {
    inner: T,
    handshakes: Arc<AtomicUsize>,
}

type Rustls = tokio_postgres_rustls::MakeRustlsConnect;

type Socket = tokio_postgres::Socket;

impl MakeTlsConnect<Socket> for CountingTls {
    type Stream = <Rustls as MakeTlsConnect<Socket>>::Stream;
    type TlsConnect = CountingConnect<<Rustls as MakeTlsConnect<Socket>>::TlsConnect>;
    type Error = <Rustls as MakeTlsConnect<Socket>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Self::TlsConnect, Self::Error> {
        Ok(CountingConnect {
            inner: MakeTlsConnect::<Socket>::make_tls_connect(&mut self.inner, domain)?,
            handshakes: self.handshakes.clone(),
        })
    }
}

type Handshake<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, T> TlsConnect<S> for CountingConnect<T>
where
    T: TlsConnect<S>,
    T::Future: Send + 'static,
{
    type Stream = T::Stream;
    type Error = T::Error;
    type Future = Handshake<T::Stream, T::Error>;

    fn connect(self, stream: S) -> Self::Future {
        let handshakes = self.handshakes;
        let handshake = self.inner.connect(stream);
        Box::pin(async move {
            let s = handshake.await?;
            handshakes.fetch_add(1, Ordering::SeqCst);
            Ok(s)
        })
    }
}

/// A TLS client's cancel request, itself sent over TLS (tokio-postgres opens the cancel
/// connection with the session's sslmode, require), stops its running query: 57014 within a
/// few seconds, and the client goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_over_tls_stops_the_query() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let p = Pooler::start(&cfg(&pg, &certs, "")).await;
    let client = Arc::new(tls_client(p.port(), &certs).await);
    assert_server_hop_tls(&client).await;
    let token = client.cancel_token();
    let c = client.clone();
    let query = tokio::spawn(async move { c.simple_query("SELECT pg_sleep(30)").await });
    wait_for_sleeping_query(&pg).await;

    let handshakes = Arc::new(AtomicUsize::new(0));
    let tls = CountingTls {
        inner: tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(&certs.ca, None)),
        handshakes: handshakes.clone(),
    };
    let start = Instant::now();
    within(
        Duration::from_secs(10),
        "the cancel request",
        token.cancel_query(tls),
    )
    .await
    .unwrap_or_else(|e| panic!("cancel over TLS: {e:?}"));
    assert_eq!(
        handshakes.load(Ordering::SeqCst),
        1,
        "the cancel connection completed a TLS handshake"
    );
    let res = within(Duration::from_secs(10), "the cancelled query", query)
        .await
        .unwrap();
    let err = res.map(drop).expect_err("the query was cancelled");
    assert_eq!(sqlstate(&err), "57014", "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "cancelled after {:?}",
        start.elapsed()
    );
    assert_eq!(
        scalar(&client, "SELECT 'after'").await.unwrap().as_deref(),
        Some("after")
    );
}

/// The first 8 bytes of every connection pgcorral opens to PostgreSQL, seen by a proxy in
/// between that forwards everything as it is.
struct FirstBytes {
    port: u16,
    seen: Arc<std::sync::Mutex<Vec<[u8; 8]>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FirstBytes {
    async fn start(pg_port: u16) -> FirstBytes {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut from, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let mut first = [0u8; 8];
                    if from.read_exact(&mut first).await.is_err() {
                        return;
                    }
                    record.lock().unwrap().push(first);
                    let mut to = tokio::net::TcpStream::connect(("127.0.0.1", pg_port))
                        .await
                        .unwrap();
                    to.write_all(&first).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut from, &mut to).await;
                });
            }
        });
        FirstBytes { port, seen, task }
    }

    fn seen(&self) -> Vec<[u8; 8]> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for FirstBytes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// pgcorral's own CancelRequest to a server it reaches over TLS goes over TLS too (an
/// SSLRequest first, as for the login: the request carries the backend's secret key), and it
/// still stops the query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cancel_to_a_tls_server_goes_over_tls() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let proxy = FirstBytes::start(pg.port).await;
    let p = Pooler::start(&cfg_at("127.0.0.1", proxy.port, &certs, "")).await;
    let client = Arc::new(tls_client(p.port(), &certs).await);
    assert_server_hop_tls(&client).await;
    let token = client.cancel_token();
    let c = client.clone();
    let query = tokio::spawn(async move { c.simple_query("SELECT pg_sleep(30)").await });
    wait_for_sleeping_query(&pg).await;
    let opened = proxy.seen().len();

    let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(&certs.ca, None));
    within(
        Duration::from_secs(10),
        "the cancel request",
        token.cancel_query(tls),
    )
    .await
    .unwrap_or_else(|e| panic!("cancel over TLS: {e:?}"));
    let res = within(Duration::from_secs(10), "the cancelled query", query)
        .await
        .unwrap();
    let err = res.map(drop).expect_err("the query was cancelled");
    assert_eq!(sqlstate(&err), "57014", "{err:?}");

    let seen = proxy.seen();
    assert!(
        seen.len() > opened,
        "the cancel opened a connection to PostgreSQL: {seen:?}"
    );
    for first in &seen {
        assert_eq!(
            *first,
            ssl_request_bytes(),
            "every connection to PostgreSQL begins with an SSLRequest, the cancel's too"
        );
    }
}

// ---- 2. idle TLS clients --------------------------------------------------------------------

/// 200 TLS clients connect and sit idle (pgcorral waits on their sockets' readiness, holding
/// no buffer), then each runs a query, twice: all answered, each with its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_idle_tls_clients_each_get_their_answer() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let p = Pooler::start(&cfg(&pg, &certs, "")).await;
    let port = p.port();
    let mut clients = Vec::new();
    for batch in 0..10 {
        let logins = (0..20).map(|_| tls_client(port, &certs));
        let batch_clients = within(
            Duration::from_secs(60),
            &format!("login batch {batch}"),
            futures_util::future::join_all(logins),
        )
        .await;
        clients.extend(batch_clients.into_iter().map(Arc::new));
    }
    assert_eq!(clients.len(), 200);

    for round in 0..2 {
        // Idle: every client is waiting in pgcorral for its next request.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let tasks: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let c = c.clone();
                tokio::spawn(async move {
                    scalar(
                        &c,
                        &format!(
                            "SELECT '{round}-{i}-' || ssl FROM pg_stat_ssl \
                             WHERE pid = pg_backend_pid()"
                        ),
                    )
                    .await
                })
            })
            .collect();
        for (i, t) in tasks.into_iter().enumerate() {
            let got = within(Duration::from_secs(60), "an idle client's query", t)
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}, client {i}: {e:?}"));
            assert_eq!(got, Some(format!("{round}-{i}-true")), "round {round}");
        }
    }
}

// ---- 3. SNI ---------------------------------------------------------------------------------

/// Where pgcorral's TLS connections to a "server" end, for looking at pgcorral's ClientHello.
/// Not a mock of PostgreSQL: it answers the SSLRequest with 'S', reads the SNI of the
/// ClientHello, completes the handshake (with a certificate from the test CA for localhost and
/// 127.0.0.1, so verify-full accepts it) and closes. It checks only what pgcorral puts in its
/// ClientHello; PostgreSQL does not expose the SNI it received.
struct SniProbe {
    port: u16,
    /// Per connection: the SNI (None when the ClientHello had none), and whether the
    /// handshake completed.
    seen: tokio::sync::mpsc::UnboundedReceiver<Result<(Option<String>, bool), String>>,
    task: tokio::task::JoinHandle<()>,
}

impl SniProbe {
    async fn start(cert: &CertFiles) -> SniProbe {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let config = Arc::new(
            ServerConfig::builder_with_provider(Arc::new(provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert.der.clone()], cert.private_key())
                .unwrap(),
        );
        let (tx, seen) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut tcp, _)) = listener.accept().await else {
                    return;
                };
                let (config, tx) = (config.clone(), tx.clone());
                tokio::spawn(async move {
                    let mut req = [0u8; 8];
                    if let Err(e) = tcp.read_exact(&mut req).await {
                        let _ = tx.send(Err(format!("no SSLRequest: {e}")));
                        return;
                    }
                    if req != ssl_request_bytes() {
                        let _ = tx.send(Err(format!("not an SSLRequest: {req:?}")));
                        return;
                    }
                    tcp.write_all(b"S").await.unwrap();
                    let acceptor = tokio_rustls::LazyConfigAcceptor::new(
                        tokio_rustls::rustls::server::Acceptor::default(),
                        tcp,
                    );
                    let start = match acceptor.await {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = tx.send(Err(format!("no ClientHello: {e}")));
                            return;
                        }
                    };
                    let sni = start.client_hello().server_name().map(str::to_string);
                    let done = start.into_stream(config).await.is_ok();
                    let _ = tx.send(Ok((sni, done)));
                })
                .await
                .ok();
            }
        });
        SniProbe { port, seen, task }
    }

    /// What the next connection's ClientHello carried.
    async fn next(&mut self) -> (Option<String>, bool) {
        within(
            Duration::from_secs(20),
            "a TLS connection to the probe",
            async { self.seen.recv().await.expect("probe running") },
        )
        .await
        .unwrap_or_else(|e| panic!("probe: {e}"))
    }
}

impl Drop for SniProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// pgcorral sends the database's `host` as SNI when it is a DNS name: against an ssl=on
/// PostgreSQL whose certificate names only "localhost", `host = "localhost"` with verify-full
/// works; a probe sees SNI "localhost" in the ClientHello for `host = "localhost"`, and none
/// for `host = "127.0.0.1"` (TLS has no SNI for addresses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgcorral_sends_the_database_host_name_as_sni() {
    let certs = Certs::new();
    let localhost_only = certs.ca.server("localhost-only", &["localhost"]);
    let pg = postgres_tls_with(
        &localhost_only,
        &certs.ca.cert_file,
        HBA_APP_TLS_ONLY,
        PgOptions::default(),
    );
    pg.sql("postgres", "CREATE ROLE app LOGIN SUPERUSER");
    let p = Pooler::start(&cfg_at("localhost", pg.port, &certs, "")).await;
    let c = tls_client(p.port(), &certs).await;
    assert_server_hop_tls(&c).await;
    assert_eq!(scalar(&c, "SELECT 3").await.unwrap().as_deref(), Some("3"));

    for (host, want) in [("localhost", Some("localhost")), ("127.0.0.1", None)] {
        let mut probe = SniProbe::start(&certs.server).await;
        let p = Pooler::start(&cfg_at(host, probe.port, &certs, "")).await;
        // The probe closes after the handshake, so the login or the query fails (pgcorral
        // may retry for a while); only the ClientHello matters, so the attempt is dropped
        // once the probe has seen it.
        let mut tcfg = tokio_postgres::Config::new();
        tcfg.host("127.0.0.1")
            .port(p.port())
            .user("app")
            .dbname("postgres")
            .ssl_mode(tokio_postgres::config::SslMode::Require)
            .connect_timeout(Duration::from_secs(10));
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(&certs.ca, None));
        let attempt = tokio::spawn(async move {
            if let Ok((client, conn)) = tcfg.connect(tls).await {
                tokio::spawn(conn);
                let _ = client.simple_query("SELECT 1").await;
            }
        });
        let (sni, handshake) = probe.next().await;
        attempt.abort();
        assert_eq!(sni.as_deref(), want, "host = {host:?}");
        assert!(
            handshake,
            "host = {host:?}: pgcorral completed the handshake"
        );
    }
}
