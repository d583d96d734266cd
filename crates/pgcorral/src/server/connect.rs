//! Opening a server connection: TCP connect within server_connect_timeout, TLS as
//! server_tls_sslmode asks, StartupMessage, answering whatever authentication the server asks
//! for, and collecting its parameters.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use corral_rt::sock::{connect_tcp, connect_unix, TcpSocket};
use corral_rt::stream::{Sock, Stream};
use corral_rt::timer;
use pgwire::auth::scram::{ScramClient, ScramSecret};
use pgwire::backend::{self, auth_code};
use pgwire::encode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{CancelKey, CancelTls, ServerAddr, ServerConn};
use crate::config::SslMode;
use crate::error::{Error, Kind, Result};
use crate::logsafe::Esc;
use crate::net::framed::{read_message, ReadError};
use crate::tls;

/// What pgcorral holds to prove a login to the server.
#[derive(Clone, Default)]
pub enum Secret {
    /// No password: only works where the server trusts us.
    #[default]
    None,
    Plain(String),
    /// A stored `md5...` hash: answers md5 challenges only.
    Md5(String),
    /// A SCRAM verifier; answers SCRAM once a client's proof has revealed its ClientKey.
    Scram {
        secret: ScramSecret,
        client_key: Option<[u8; 32]>,
    },
}

impl Secret {
    /// Whether two secrets come from the same configured password (a ClientKey learnt later
    /// does not count).
    pub fn same_password(&self, other: &Secret) -> bool {
        match (self, other) {
            (Secret::None, Secret::None) => true,
            (Secret::Plain(a), Secret::Plain(b)) | (Secret::Md5(a), Secret::Md5(b)) => a == b,
            (Secret::Scram { secret: a, .. }, Secret::Scram { secret: b, .. }) => a == b,
            _ => false,
        }
    }

    /// Interprets a configured password: plaintext, `md5...` or `SCRAM-SHA-256$...`.
    pub fn from_config(password: Option<&str>) -> Secret {
        match password {
            None => Secret::None,
            Some(p) if pgwire::auth::md5::is_stored_hash(p) => Secret::Md5(p.to_string()),
            Some(p) => match ScramSecret::parse(p) {
                Some(secret) => Secret::Scram {
                    secret,
                    client_key: None,
                },
                None => Secret::Plain(p.to_string()),
            },
        }
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Secret::None => "None",
            Secret::Plain(_) => "Plain(..)",
            Secret::Md5(_) => "Md5(..)",
            Secret::Scram { .. } => "Scram(..)",
        })
    }
}

/// Where and as whom to log in.
#[derive(Debug, Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub secret: Secret,
    pub connect_timeout: Duration,
    pub max_packet_size: u32,
    /// TLS to the server, as configured now.
    pub tls: tls::Shared,
    /// More startup parameters for the login (a database's `client_encoding`, `datestyle`,
    /// `timezone`, `application_name`): the server session's defaults.
    pub startup: Vec<(String, String)>,
}

fn io_err(target: &Target, what: &str, e: ReadError) -> Error {
    Error::with_source(
        Kind::ServerConnect,
        format!("server {}:{} {what}", target.host, target.port),
        e,
    )
}

/// Connects and logs in; the whole exchange is bounded by the connect timeout.
pub async fn connect(target: &Target, worker: usize) -> Result<ServerConn> {
    match timer::timeout(target.connect_timeout, connect_inner(target, worker)).await {
        Ok(r) => r,
        Err(_) => Err(Error::new(
            Kind::ServerConnect,
            format!(
                "could not connect to server {}:{}: timed out after {} ms",
                target.host,
                target.port,
                target.connect_timeout.as_millis()
            ),
        )),
    }
}

/// The PostgreSQL SSLRequest packet: length 8, code 1234.5679.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// Asks the server at `host`:`port` for TLS and runs the handshake; plaintext if the server
/// declines and the mode allows it. Also opens the connections of cancel requests.
pub(crate) async fn start_tls(
    mut tcp: TcpSocket,
    host: &str,
    port: u16,
    side: &tls::ServerSide,
) -> Result<Stream> {
    let failed = |what: &str, e: std::io::Error| {
        Error::with_source(
            Kind::ServerConnect,
            format!("server {host}:{port} {what}"),
            e,
        )
    };
    tcp.write_all(&SSL_REQUEST)
        .await
        .map_err(|e| failed("write failed", e))?;
    let answer = tcp
        .read_u8()
        .await
        .map_err(|e| failed("closed the connection at SSLRequest", e))?;
    match answer {
        b'S' => {}
        b'N' if !side.mode.required() => return Ok(Stream::Plain(tcp)),
        b'N' => {
            return Err(Error::new(
                Kind::ServerConnect,
                format!(
                    "server {host}:{port} does not support SSL, but server_tls_sslmode = \"{}\" requires it",
                    mode_name(side.mode)
                ),
            ))
        }
        other => {
            return Err(Error::new(
                Kind::ServerConnect,
                format!(
                    "server {host}:{port}: answered SSLRequest with {:?}",
                    other as char
                ),
            ))
        }
    }
    let name =
        tokio_rustls::rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
            Error::with_source(
                Kind::ServerConnect,
                format!("server {host}: not a host name for TLS"),
                e,
            )
        })?;
    let tls = side
        .connector
        .connect(name, Sock::new(tcp, BytesMut::new()))
        .await
        .map_err(|e| {
            // The cause (a certificate not trusted, a name not matching) is what the client
            // needs to read; a refused certificate in OpenSSL's words too, which PgBouncer's
            // users search their logs for.
            let refused = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<tokio_rustls::rustls::Error>())
                .is_some_and(|r| matches!(r, tokio_rustls::rustls::Error::InvalidCertificate(_)));
            let verify = if refused {
                "certificate verify failed: "
            } else {
                ""
            };
            Error::new(
                Kind::ServerConnect,
                format!("server {host}:{port} SSL handshake failed: {verify}{e}"),
            )
        })?;
    Ok(Stream::Tls(Box::new(tokio_rustls::TlsStream::Client(tls))))
}

fn mode_name(mode: SslMode) -> &'static str {
    match mode {
        SslMode::Disable => "disable",
        SslMode::Allow => "allow",
        SslMode::Prefer => "prefer",
        SslMode::Require => "require",
        SslMode::VerifyCa => "verify-ca",
        SslMode::VerifyFull => "verify-full",
    }
}

/// The path of the Unix socket of a server whose host is a directory (as libpq:
/// `<dir>/.s.PGSQL.<port>`), `None` for a TCP host.
fn unix_socket_path(host: &str, port: u16) -> Option<String> {
    host.starts_with('/')
        .then(|| format!("{}/.s.PGSQL.{port}", host.trim_end_matches('/')))
}

/// Opens the connection: TCP (TLS as `server_tls_sslmode` says) or a Unix socket (never TLS,
/// as libpq).
async fn open(target: &Target) -> Result<(Stream, ServerAddr, Option<Arc<CancelTls>>)> {
    let failed = |e| {
        Error::with_source(
            Kind::ServerConnect,
            format!(
                "could not connect to server {}:{}",
                target.host, target.port
            ),
            e,
        )
    };
    if let Some(path) = unix_socket_path(&target.host, target.port) {
        let unix = connect_unix(&path).await.map_err(failed)?;
        return Ok((Stream::Unix(unix), ServerAddr::Unix(path.into()), None));
    }
    let tcp = connect_tcp((target.host.as_str(), target.port))
        .await
        .map_err(failed)?;
    let addr = tcp
        .peer_addr()
        .map_err(|e| Error::with_source(Kind::ServerConnect, "peer address", e))?;
    // allow asks for TLS as prefer does (as PgBouncer): the server decides.
    let tls = target.tls.load_full();
    let stream = match tls.server.as_ref() {
        Some(side) => start_tls(tcp, &target.host, target.port, side).await?,
        None => Stream::Plain(tcp),
    };
    // Cancel requests for this connection take the way its login took.
    let cancel = stream.is_tls().then(|| {
        Arc::new(CancelTls {
            host: target.host.clone(),
            port: target.port,
            tls,
        })
    });
    Ok((stream, ServerAddr::Tcp(addr), cancel))
}

async fn connect_inner(target: &Target, worker: usize) -> Result<ServerConn> {
    let (mut stream, addr, tls) = open(target).await?;

    let mut out = BytesMut::with_capacity(256);
    let mut params = vec![
        ("user", target.user.as_str()),
        ("database", target.database.as_str()),
    ];
    params.extend(target.startup.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    encode::startup(&mut out, &params);
    write(&mut stream, &out, target).await?;

    let mut rbuf = BytesMut::with_capacity(8192);
    let mut params = Vec::new();
    let mut key = None;
    let mut scram: Option<ScramClient> = None;
    loop {
        let (tag, body) = read_message(&mut stream, &mut rbuf, target.max_packet_size)
            .await
            .map_err(|e| io_err(target, "closed the connection during login", e))?;
        match tag {
            backend::AUTHENTICATION => {
                let (code, data) = backend::authentication(&body)
                    .ok_or_else(|| bad_server(target, "malformed authentication request"))?;
                out.clear();
                // Over TLS, SCRAM binds to the server's certificate when it offers -PLUS.
                let binding = || {
                    stream
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(tls::binding)
                };
                answer_auth(target, code, data, &mut scram, &mut out, binding)?;
                if !out.is_empty() {
                    write(&mut stream, &out, target).await?;
                }
            }
            backend::PARAMETER_STATUS => {
                if let Some((k, v)) = backend::parameter_status(&body) {
                    params.push((k.to_string(), v.to_string()));
                }
            }
            backend::BACKEND_KEY_DATA => key = backend::backend_key_data(&body),
            backend::ERROR_RESPONSE => {
                let fields = backend::ErrorFields::parse(&body).unwrap_or_default();
                let mut raw = BytesMut::new();
                encode::message(&mut raw, tag, |b| b.extend_from_slice(&body));
                return Err(Error::server(
                    format!(
                        "server {}:{} refused login: {} ({})",
                        target.host, target.port, fields.message, fields.code
                    ),
                    raw.freeze(),
                    fields.code,
                ));
            }
            backend::READY_FOR_QUERY => break,
            // NoticeResponse and NegotiateProtocolVersion carry nothing we need.
            _ => {}
        }
    }
    let (pid, secret) = key.unwrap_or((0, 0));
    Ok(ServerConn::new(
        stream,
        rbuf,
        CancelKey {
            addr,
            pid,
            secret,
            tls,
            in_flight: Default::default(),
        },
        std::sync::Arc::new(params),
        worker,
    ))
}

fn bad_server(target: &Target, what: &str) -> Error {
    Error::new(
        Kind::ServerConnect,
        format!("server {}:{}: {what}", target.host, target.port),
    )
}

/// The server asks for a method the password held cannot answer (none held, or an md5 hash
/// for SCRAM): logged with the details, and the client told in PgBouncer's words.
fn no_secret(target: &Target, method: &str) -> Error {
    tracing::error!(
        server = %format_args!("{}:{}", target.host, target.port),
        user = %Esc(&target.user),
        "cannot do {method} authentication: wrong password type (the server asks for {method} and pgcorral holds no usable password for the user)"
    );
    Error::new(
        Kind::ServerConnect,
        "server login failed: wrong password type",
    )
}

fn answer_auth(
    target: &Target,
    code: i32,
    data: &[u8],
    scram: &mut Option<ScramClient>,
    out: &mut BytesMut,
    binding: impl FnOnce() -> Option<Vec<u8>>,
) -> Result<()> {
    match code {
        auth_code::OK => Ok(()),
        auth_code::CLEARTEXT => match &target.secret {
            Secret::Plain(p) => {
                encode::password(out, p);
                Ok(())
            }
            _ => Err(no_secret(target, "cleartext password")),
        },
        auth_code::MD5 => {
            let salt: [u8; 4] = data
                .get(..4)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| bad_server(target, "malformed md5 request"))?;
            let stored = match &target.secret {
                Secret::Plain(p) => pgwire::auth::md5::stored_hash(&target.user, p),
                Secret::Md5(h) => h.clone(),
                _ => return Err(no_secret(target, "md5")),
            };
            encode::password(out, &pgwire::auth::md5::salted_response(&stored, salt));
            Ok(())
        }
        auth_code::SASL => {
            let client = match &target.secret {
                Secret::Plain(p) => ScramClient::new(p),
                Secret::Scram {
                    secret,
                    client_key: Some(ck),
                } => ScramClient::with_keys(*ck, secret.server_key),
                _ => return Err(no_secret(target, "SCRAM-SHA-256")),
            };
            let Some(mut client) = client.negotiate(&backend::sasl_mechanisms(data), binding())
            else {
                return Err(bad_server(
                    target,
                    "offers no SASL mechanism pgcorral supports",
                ));
            };
            let first = client.client_first();
            encode::sasl_initial_response(out, client.mechanism(), &first);
            *scram = Some(client);
            Ok(())
        }
        auth_code::SASL_CONTINUE => {
            let client = scram
                .as_mut()
                .ok_or_else(|| bad_server(target, "SASL continue out of order"))?;
            let fin = client
                .server_first(data)
                .map_err(|e| Error::with_source(Kind::ServerConnect, "SCRAM with server", e))?;
            encode::sasl_response(out, &fin);
            Ok(())
        }
        auth_code::SASL_FINAL => {
            let client = scram
                .as_mut()
                .ok_or_else(|| bad_server(target, "SASL final out of order"))?;
            client
                .server_final(data)
                .map_err(|e| Error::with_source(Kind::ServerConnect, "SCRAM with server", e))
        }
        other => Err(bad_server(
            target,
            &format!("asks for unsupported authentication method {other}"),
        )),
    }
}

async fn write(stream: &mut Stream, buf: &[u8], target: &Target) -> Result<()> {
    stream
        .send(buf)
        .await
        .map_err(|e| io_err(target, "write failed", ReadError::Io(e)))
}
