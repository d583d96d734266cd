//! TLS for tests: certificates made at test time with rcgen (a CA, a server certificate for
//! localhost/127.0.0.1, client certificates by CN, and an unrelated second CA), PostgreSQL
//! servers with `ssl = on`, psql with libpq's TLS settings, tokio-postgres over rustls, and a raw
//! protocol client over TLS (after an SSLRequest, or PostgreSQL 17's direct TLS, with or without
//! ALPN).

use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::crypto::{ring, CryptoProvider};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{
    ClientConfig, RootCertStore, SupportedCipherSuite, SupportedProtocolVersion,
};

use super::wire::{self, first_column};
use super::{chown_postgres, pg_config, psql_cmd, Postgres};

/// How long a raw read or a wait for PostgreSQL may take before the test fails.
pub const TLS_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether the server backend running this query has a TLS connection ("t" or "f").
pub const SSL_OF_BACKEND: &str = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";

/// The ALPN protocol name of PostgreSQL's direct TLS.
pub const ALPN_POSTGRESQL: &[u8] = b"postgresql";

// ---- certificates ---------------------------------------------------------------------------

/// A certificate and its key, written as PEM files (the key with mode 0600).
#[derive(Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The certificate as DER, as a TLS peer sees it.
    pub der: CertificateDer<'static>,
    /// The private key (PKCS#8 DER).
    pub key_der: Vec<u8>,
}

impl CertFiles {
    pub fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }
}

/// A certificate authority whose certificate is written to `cert_file` (PEM).
pub struct Ca {
    pub name: String,
    pub cert_file: PathBuf,
    pub der: CertificateDer<'static>,
    dir: PathBuf,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    /// A new self-signed CA named `name` (its subject CN), written to `dir/<stem>.crt`.
    pub fn new(dir: &Path, stem: &str, name: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "pgcorral tests");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        let cert_file = dir.join(format!("{stem}.crt"));
        std::fs::write(&cert_file, issuer.pem()).unwrap();
        Ca {
            name: name.to_string(),
            cert_file,
            der: issuer.der().clone(),
            dir: dir.to_path_buf(),
            issuer,
        }
    }

    /// A server certificate for `names` (DNS names or IP addresses, as SANs; the first is also
    /// the CN), written to `dir/<stem>.crt` and `dir/<stem>.key`, replacing files of that stem.
    pub fn server(&self, stem: &str, names: &[&str]) -> CertFiles {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("server names");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(stem, params)
    }

    /// A client certificate with subject CN `cn`, written to `dir/<stem>.crt`/`.key`.
    pub fn client(&self, stem: &str, cn: &str) -> CertFiles {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(stem, params)
    }

    fn issue(&self, stem: &str, mut params: CertificateParams) -> CertFiles {
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let files = CertFiles {
            cert: self.dir.join(format!("{stem}.crt")),
            key: self.dir.join(format!("{stem}.key")),
            der: cert.der().clone(),
            key_der: key.serialize_der(),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        write_private(&files.key, key.serialize_pem().as_bytes());
        files
    }
}

/// Writes `bytes` to `path` with mode 0600 (replacing any file there).
pub fn write_private(path: &Path, bytes: &[u8]) {
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::io::Write::write_all(&mut f, bytes).unwrap();
}

/// A test PKI in its own temporary directory: `ca` with a server certificate for
/// localhost/127.0.0.1, and an unrelated `other_ca` with its own server certificate.
pub struct Certs {
    pub ca: Ca,
    pub server: CertFiles,
    pub other_ca: Ca,
    pub other_server: CertFiles,
    dir: tempfile::TempDir,
}

impl Certs {
    pub fn new() -> Certs {
        let dir = tempfile::Builder::new()
            .prefix("pgcorral-tls-")
            .tempdir()
            .unwrap();
        let ca = Ca::new(dir.path(), "ca", "pgcorral test CA");
        let server = ca.server("server", &["localhost", "127.0.0.1"]);
        let other_ca = Ca::new(dir.path(), "other-ca", "unrelated test CA");
        let other_server = other_ca.server("other-server", &["localhost", "127.0.0.1"]);
        Certs {
            ca,
            server,
            other_ca,
            other_server,
            dir,
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A client certificate signed by `ca` with subject CN `cn` (files `client-<cn>.*`).
    pub fn client(&self, cn: &str) -> CertFiles {
        self.ca.client(&format!("client-{cn}"), cn)
    }

    /// A client certificate signed by the unrelated `other_ca` (files `other-client-<cn>.*`).
    pub fn other_client(&self, cn: &str) -> CertFiles {
        self.other_ca.client(&format!("other-client-{cn}"), cn)
    }

    /// A path in the directory that does not exist (for "no certificate" in libpq settings).
    pub fn missing(&self) -> PathBuf {
        self.dir.path().join("does-not-exist")
    }
}

impl Default for Certs {
    fn default() -> Self {
        Certs::new()
    }
}

/// The subject CN of a DER certificate ("" when it has none).
pub fn subject_cn(der: &[u8]) -> String {
    let (_, cert) = x509_parser::parse_x509_certificate(der).expect("a certificate");
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    cn
}

// ---- PostgreSQL with ssl = on ---------------------------------------------------------------

/// Copies `src` into `dir` as `name`, owned by the postgres OS user (when root) with mode 0600,
/// as PostgreSQL requires of its key files; returns the new path.
pub fn install_for_postgres(dir: &Path, src: &Path, name: &str) -> PathBuf {
    let dst = dir.join(name);
    std::fs::copy(src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o600)).unwrap();
    chown_postgres(&dst);
    dst
}

/// Replaces pg_hba.conf with the superuser's trust line followed by `lines`, and reloads.
pub fn set_hba(pg: &Postgres, lines: &str) {
    std::fs::write(
        pg.dir.join("pg_hba.conf"),
        format!("host all postgres 127.0.0.1/32 trust\n{lines}\n"),
    )
    .unwrap();
    pg.sql("postgres", "SELECT pg_reload_conf()");
}

/// A PostgreSQL server with `ssl = on` presenting `server` (with `ca_file` as ssl_ca_file, to
/// verify client certificates), `hba` lines after the superuser's trust line (e.g.
/// "hostssl all app 127.0.0.1/32 cert"), and `opts` as for `Postgres::start_with`. Returns once
/// a TLS connection verified against `ca_file` works.
pub fn postgres_tls_with(
    server: &CertFiles,
    ca_file: &Path,
    hba: &str,
    opts: super::PgOptions,
) -> Postgres {
    let pg = Postgres::start_with(opts);
    let cert = install_for_postgres(&pg.dir, &server.cert, "server.crt");
    let key = install_for_postgres(&pg.dir, &server.key, "server.key");
    let ca = install_for_postgres(&pg.dir, ca_file, "root.crt");
    super::append(
        &pg.dir.join("postgresql.conf"),
        &format!(
            "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\nssl_ca_file = '{}'\n",
            cert.display(),
            key.display(),
            ca.display()
        ),
    );
    set_hba(&pg, hba);
    // The postmaster loads the SSL context at SIGHUP; wait for a verified TLS login to work.
    let start = Instant::now();
    loop {
        let out = psql_tls(
            pg.port,
            "postgres",
            "postgres",
            &PsqlTls {
                sslmode: "verify-ca",
                rootcert: Some(ca_file),
                ..PsqlTls::default()
            },
        )
        .args([
            "-Atc",
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        ])
        .output()
        .unwrap();
        if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "t" {
            return pg;
        }
        if start.elapsed() > TLS_TIMEOUT {
            panic!(
                "PostgreSQL did not start serving TLS: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(pg.dir.join("log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A PostgreSQL server with `ssl = on` presenting `certs.server` (trusting `certs.ca` for client
/// certificates) with `hba` lines after the superuser's trust line.
pub fn postgres_tls(certs: &Certs, hba: &str) -> Postgres {
    postgres_tls_with(
        &certs.server,
        &certs.ca.cert_file,
        hba,
        super::PgOptions::default(),
    )
}

// ---- psql -----------------------------------------------------------------------------------

/// libpq's TLS settings for `psql_tls` (passed as PGSSLMODE, PGSSLROOTCERT, PGSSLCERT, PGSSLKEY,
/// PGCHANNELBINDING, PGPASSWORD).
#[derive(Clone, Copy)]
pub struct PsqlTls<'a> {
    pub sslmode: &'a str,
    pub rootcert: Option<&'a Path>,
    pub cert: Option<&'a CertFiles>,
    pub channel_binding: Option<&'a str>,
    pub password: Option<&'a str>,
}

impl Default for PsqlTls<'_> {
    fn default() -> Self {
        PsqlTls {
            sslmode: "prefer",
            rootcert: None,
            cert: None,
            channel_binding: None,
            password: None,
        }
    }
}

/// A psql command against 127.0.0.1:`port` with libpq's TLS settings from `tls` (add `-c` and
/// friends). Without a client certificate, PGSSLCERT points at a file that does not exist, so
/// none in ~/.postgresql is picked up.
pub fn psql_tls(port: u16, user: &str, db: &str, tls: &PsqlTls) -> Command {
    let mut c = psql_cmd(port, user, db, tls.password);
    c.env("PGSSLMODE", tls.sslmode);
    let nowhere = Path::new("/nonexistent/pgcorral-tests");
    c.env("PGSSLROOTCERT", tls.rootcert.unwrap_or(nowhere));
    match tls.cert {
        Some(f) => c.env("PGSSLCERT", &f.cert).env("PGSSLKEY", &f.key),
        None => c
            .env("PGSSLCERT", nowhere.join("none.crt"))
            .env("PGSSLKEY", nowhere.join("none.key")),
    };
    match tls.channel_binding {
        Some(cb) => c.env("PGCHANNELBINDING", cb),
        None => c.env_remove("PGCHANNELBINDING"),
    };
    c.env_remove("PGSSLNEGOTIATION").env_remove("PGSSLCRL");
    c
}

/// Runs `sql` through psql with `tls` (unaligned, tuples only, stop on error), in a blocking
/// task; the output (see `super::stdout`/`super::stderr`).
pub async fn psql_tls_run(port: u16, user: &str, db: &str, tls: &PsqlTls<'_>, sql: &str) -> Output {
    let mut c = psql_tls(port, user, db, tls);
    c.args(["-Atq", "-v", "ON_ERROR_STOP=1", "-c", sql]);
    tokio::task::spawn_blocking(move || c.output().expect("psql runs"))
        .await
        .unwrap()
}

// ---- rustls clients -------------------------------------------------------------------------

/// rustls' ring provider with all its cipher suites.
pub fn provider() -> CryptoProvider {
    ring::default_provider()
}

/// A rustls client config trusting `trust`, presenting `client` when given, TLS 1.2 and 1.3,
/// all of ring's suites, no ALPN (like libpq before 17).
pub fn tls_config(trust: &Ca, client: Option<&CertFiles>) -> ClientConfig {
    tls_config_with(trust, client, &[], None, false)
}

/// As `tls_config`, with the protocol `versions` offered (empty = TLS 1.2 and 1.3), the cipher
/// `suites` offered (None = all of ring's), and ALPN "postgresql" when `alpn`.
pub fn tls_config_with(
    trust: &Ca,
    client: Option<&CertFiles>,
    versions: &[&'static SupportedProtocolVersion],
    suites: Option<Vec<SupportedCipherSuite>>,
    alpn: bool,
) -> ClientConfig {
    let mut provider = provider();
    if let Some(s) = suites {
        provider.cipher_suites = s;
    }
    let versions: &[&'static SupportedProtocolVersion] = if versions.is_empty() {
        tokio_rustls::rustls::ALL_VERSIONS
    } else {
        versions
    };
    let mut roots = RootCertStore::empty();
    roots.add(trust.der.clone()).expect("CA certificate");
    let builder = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .expect("versions and suites fit")
        .with_root_certificates(roots);
    let mut config = match client {
        Some(c) => builder
            .with_client_auth_cert(vec![c.der.clone()], c.private_key())
            .expect("client certificate"),
        None => builder.with_no_client_auth(),
    };
    if alpn {
        config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
    }
    config
}

/// Connects with tokio-postgres over rustls (`tls`), sslmode require unless `configure` says
/// otherwise (it may also set channel binding, direct negotiation, application_name...), and
/// drives the connection in a task.
pub async fn connect_tls(
    port: u16,
    user: &str,
    password: Option<&str>,
    db: &str,
    tls: ClientConfig,
    configure: impl FnOnce(&mut tokio_postgres::Config),
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut cfg = pg_config(port, user, db);
    cfg.ssl_mode(tokio_postgres::config::SslMode::Require);
    if let Some(p) = password {
        cfg.password(p);
    }
    configure(&mut cfg);
    let (client, conn) = cfg
        .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
        .await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

// ---- raw protocol over plain TCP or TLS -----------------------------------------------------

/// How a raw client starts TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Negotiation {
    /// SSLRequest, then the handshake after 'S'.
    SslRequest,
    /// PostgreSQL 17's direct TLS: the ClientHello is the first thing sent.
    Direct,
}

/// The SSLRequest packet.
pub fn ssl_request_bytes() -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&8i32.to_be_bytes());
    b[4..].copy_from_slice(&80877103i32.to_be_bytes());
    b
}

/// Sends an SSLRequest to 127.0.0.1:`port`; the connection and the one-byte answer ('S'/'N').
pub async fn ssl_request(port: u16) -> (TcpStream, u8) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(&ssl_request_bytes()).await.unwrap();
    let mut b = [0u8; 1];
    tokio::time::timeout(TLS_TIMEOUT, s.read_exact(&mut b))
        .await
        .expect("an answer to SSLRequest in time")
        .expect("an answer to SSLRequest");
    (s, b[0])
}

pub type TlsStream = tokio_rustls::client::TlsStream<TcpStream>;

/// Opens a TLS connection to 127.0.0.1:`port` (server name 127.0.0.1) with `config`. Err when
/// the server answers 'N' to the SSLRequest, or the handshake fails.
pub async fn tls_connect(
    port: u16,
    config: ClientConfig,
    how: Negotiation,
) -> io::Result<PgStream<TlsStream>> {
    let tcp = match how {
        Negotiation::SslRequest => {
            let (s, answer) = ssl_request(port).await;
            if answer != b'S' {
                return Err(io::Error::other(format!(
                    "SSLRequest answered {:?}",
                    answer as char
                )));
            }
            s
        }
        Negotiation::Direct => TcpStream::connect(("127.0.0.1", port)).await?,
    };
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("127.0.0.1")
        .unwrap()
        .to_owned();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tls = tokio::time::timeout(TLS_TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(|_| io::Error::other("TLS handshake timed out"))??;
    Ok(PgStream::new(tls))
}

/// What a TLS connection negotiated.
#[derive(Clone, Debug)]
pub struct TlsInfo {
    /// The server's certificate (DER).
    pub peer: Vec<u8>,
    /// "TLSv1_3", "TLSv1_2" (rustls' names).
    pub version: String,
    /// IANA suite name, e.g. "TLS13_AES_256_GCM_SHA384".
    pub suite: String,
    /// The ALPN protocol the server chose, if any.
    pub alpn: Option<Vec<u8>>,
}

impl PgStream<TlsStream> {
    pub fn tls_info(&self) -> TlsInfo {
        let (_, conn) = self.stream.get_ref();
        TlsInfo {
            peer: conn
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.to_vec())
                .unwrap_or_default(),
            version: conn
                .protocol_version()
                .map(|v| format!("{v:?}"))
                .unwrap_or_default(),
            suite: conn
                .negotiated_cipher_suite()
                .map(|s| format!("{:?}", s.suite()))
                .unwrap_or_default(),
            alpn: conn.alpn_protocol().map(<[u8]>::to_vec),
        }
    }
}

/// The server certificate a TLS client sees at 127.0.0.1:`port` after an SSLRequest, verified
/// against `trust`.
pub async fn peer_certificate(port: u16, trust: &Ca) -> io::Result<Vec<u8>> {
    peer_certificate_with(port, tls_config(trust, None)).await
}

/// The server certificate a TLS client with `config` sees at 127.0.0.1:`port` after an
/// SSLRequest.
pub async fn peer_certificate_with(port: u16, config: ClientConfig) -> io::Result<Vec<u8>> {
    let s = tls_connect(port, config, Negotiation::SslRequest).await?;
    Ok(s.tls_info().peer)
}

/// An ErrorResponse's fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PgError {
    pub severity: String,
    pub code: String,
    pub message: String,
}

impl PgError {
    pub fn parse(body: &[u8]) -> PgError {
        let mut e = PgError::default();
        for field in body.split(|&b| b == 0) {
            if let Some((&t, v)) = field.split_first() {
                let v = String::from_utf8_lossy(v).into_owned();
                match t {
                    b'S' => e.severity = v,
                    b'C' => e.code = v,
                    b'M' => e.message = v,
                    _ => {}
                }
            }
        }
        e
    }
}

/// Why a raw login did not reach ReadyForQuery.
#[derive(Debug)]
pub enum LoginError {
    /// An ErrorResponse.
    Server(PgError),
    /// An authentication request other than Ok (code, body after the code).
    Auth(i32, Vec<u8>),
    /// The connection closed or failed (TLS alerts land here).
    Closed(String),
}

/// A raw protocol stream (plain TCP or TLS) with time-bounded reads.
pub struct PgStream<S> {
    pub stream: S,
    buf: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> PgStream<S> {
    pub fn new(stream: S) -> PgStream<S> {
        PgStream {
            stream,
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    /// The next backend message (tag, body); Ok(None) when the peer closed cleanly.
    pub async fn recv(&mut self) -> io::Result<Option<(u8, Vec<u8>)>> {
        loop {
            if self.buf.len() >= 5 {
                let len = i32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
                if self.buf.len() > len {
                    let tag = self.buf[0];
                    let body = self.buf[5..1 + len].to_vec();
                    self.buf.drain(..1 + len);
                    return Ok(Some((tag, body)));
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = tokio::time::timeout(TLS_TIMEOUT, self.stream.read(&mut chunk))
                .await
                .map_err(|_| io::Error::other("no backend message in time"))??;
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends a protocol 3.0 StartupMessage.
    pub async fn startup(&mut self, user: &str, db: &str) -> io::Result<()> {
        self.send(&wire::startup(&[("user", user), ("database", db)]))
            .await
    }

    /// Sends a StartupMessage and reads up to ReadyForQuery (no password is answered).
    pub async fn login(&mut self, user: &str, db: &str) -> Result<(), LoginError> {
        self.startup(user, db)
            .await
            .map_err(|e| LoginError::Closed(e.to_string()))?;
        loop {
            match self.recv().await {
                Ok(Some((b'R', body))) => {
                    let code = i32::from_be_bytes(body[..4].try_into().unwrap());
                    if code != 0 {
                        return Err(LoginError::Auth(code, body[4..].to_vec()));
                    }
                }
                Ok(Some((b'E', body))) => return Err(LoginError::Server(PgError::parse(&body))),
                Ok(Some((b'Z', _))) => return Ok(()),
                Ok(Some(_)) => {}
                Ok(None) => return Err(LoginError::Closed("closed".into())),
                Err(e) => return Err(LoginError::Closed(e.to_string())),
            }
        }
    }

    /// Runs a simple query: the first value of the first row, or the error.
    pub async fn scalar(&mut self, sql: &str) -> Result<Option<String>, String> {
        self.send(&wire::query(sql))
            .await
            .map_err(|e| e.to_string())?;
        let mut value = None;
        let mut err = None;
        loop {
            match self.recv().await {
                Ok(Some((b'D', body))) if value.is_none() => value = Some(first_column(&body)),
                Ok(Some((b'E', body))) => err = Some(PgError::parse(&body)),
                Ok(Some((b'Z', _))) => break,
                Ok(Some(_)) => {}
                Ok(None) => return Err("connection closed".into()),
                Err(e) => return Err(e.to_string()),
            }
        }
        match err {
            Some(e) => Err(format!("{} {}", e.code, e.message)),
            None => Ok(value.flatten()),
        }
    }
}

/// SASL mechanisms of an AuthenticationSASL body after its code (NUL-separated names).
pub fn sasl_mechanisms(rest: &[u8]) -> Vec<String> {
    rest.split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// A plain TCP raw client to 127.0.0.1:`port`.
pub async fn plain_connect(port: u16) -> PgStream<TcpStream> {
    PgStream::new(TcpStream::connect(("127.0.0.1", port)).await.unwrap())
}
