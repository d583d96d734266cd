//! The pooler's error: what went wrong, whose side it was on, and how it reads to a client as an
//! ErrorResponse (SQLSTATE chosen here, at the client edge, and nowhere else).

use bytes::{Bytes, BytesMut};
use pgwire::sqlstate;

use crate::net::framed;

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The client broke the protocol (bad length, unknown message, oversized packet).
    ClientProtocol,
    /// The client's socket failed or closed.
    ClientIo,
    /// The client failed authentication.
    AuthFailed,
    /// The client named a database pgcorral does not serve.
    UnknownDatabase,
    /// The client's user is not allowed.
    UnknownUser,
    /// The client may not connect this way: TLS is required, or its certificate does not
    /// authenticate it.
    Refused,
    /// max_client_conn reached.
    TooManyClients,
    /// Could not open a server connection (refused, timed out, TLS, auth to server).
    ServerConnect,
    /// The server's socket failed or closed mid-use.
    ServerIo,
    /// The server refused us with an ErrorResponse; relayed to the client as sent.
    ServerError,
    /// Waited longer than query_wait_timeout for a server.
    PoolTimeout,
    /// pgcorral is shutting down.
    Shutdown,
    /// pgcorral exits at once (SIGQUIT, `SHUTDOWN`, a second SIGTERM/SIGINT): an idle client
    /// is told with a WARNING, not an error, as PostgreSQL's immediate shutdown tells its
    /// sessions, so that its next query finds the connection closed.
    Exiting,
    /// A request the current pool mode cannot serve.
    NotSupported,
    /// A query ran longer than query_timeout.
    QueryTimeout,
    /// Idle in a transaction longer than idle_transaction_timeout.
    IdleInTransaction,
    /// In a transaction longer than transaction_timeout.
    TransactionTimeout,
    /// Idle longer than client_idle_timeout, or too slow to log in (client_login_timeout).
    ClientIdle,
    /// The database was disabled from the admin console (DISABLE).
    Disabled,
    /// pgcorral is stopping (a SHUTDOWN that waits): logins other than the console's are
    /// refused, as PostgreSQL refuses them while it shuts down.
    Stopping,
    /// Bytes that are not UTF-8 where pgcorral needs text (a startup parameter).
    InvalidEncoding,
}

struct Inner {
    kind: Kind,
    message: String,
    /// A server's own ErrorResponse (whole message, tag included), relayed verbatim, and its code.
    server_error: Option<(Bytes, String)>,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// A pooler error: one pointer wide, kind + message + optional cause.
pub struct Error(Box<Inner>);

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    #[cold]
    pub fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error(Box::new(Inner {
            kind,
            message: message.into(),
            server_error: None,
            source: None,
        }))
    }

    /// What a client that asks for a server during WAIT_FOR_SERVERS is told (57P01, in
    /// PgBouncer's words, which its log line `closing because: ...` repeats).
    #[cold]
    pub fn server_shutting_down() -> Error {
        Error::new(Kind::Shutdown, "server shutting down")
    }

    #[cold]
    pub fn with_source(
        kind: Kind,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        let mut e = Error::new(kind, message);
        e.0.source = Some(Box::new(source));
        e
    }

    /// A server's ErrorResponse (with its SQLSTATE) to pass on as it was sent.
    #[cold]
    pub fn server(message: impl Into<String>, raw: Bytes, code: String) -> Error {
        let mut e = Error::new(Kind::ServerError, message);
        e.0.server_error = Some((raw, code));
        e
    }

    /// An error PostgreSQL itself sends in this case, with its SQLSTATE and further fields
    /// (`(type, value)`: a hint, a detail), written as PostgreSQL writes it.
    #[cold]
    pub fn as_postgres(
        kind: Kind,
        code: &str,
        message: impl Into<String>,
        more: &[(u8, &str)],
    ) -> Error {
        let message = message.into();
        let mut raw = BytesMut::new();
        pgwire::encode::error_response_with(&mut raw, "ERROR", code, &message, more);
        let mut e = Error::new(kind, message);
        e.0.server_error = Some((raw.freeze(), code.to_string()));
        e
    }

    /// The same error again, as the first client saw it, to hand to another client.
    pub fn replay(&self) -> Error {
        Error(Box::new(Inner {
            kind: self.0.kind,
            message: self.0.message.clone(),
            server_error: self.0.server_error.clone(),
            source: None,
        }))
    }

    pub fn kind(&self) -> Kind {
        self.0.kind
    }

    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The message the client reads: a relayed server error's own (its `M` field), else
    /// pgcorral's.
    pub fn client_message(&self) -> std::borrow::Cow<'_, str> {
        let relayed = self
            .0
            .server_error
            .as_ref()
            .and_then(|(raw, _)| pgwire::backend::error_field(raw.get(5..)?, b'M'));
        match relayed {
            Some(m) => String::from_utf8_lossy(m),
            None => std::borrow::Cow::Borrowed(&self.0.message),
        }
    }

    /// An error pgcorral itself tells the client (PgBouncer's "pooler error"): not a server's
    /// relayed ErrorResponse, and not the client's own socket failing.
    pub fn is_pooler_error(&self) -> bool {
        self.0.server_error.is_none() && self.0.kind != Kind::ClientIo
    }

    /// Whether the server was down rather than refusing us: the connection was refused, reset
    /// or timed out, or PostgreSQL said it is starting up or shutting down. Worth waiting for.
    pub fn server_unavailable(&self) -> bool {
        use std::io::ErrorKind as K;
        let io_down = |k: K| {
            matches!(
                k,
                K::ConnectionRefused
                    | K::ConnectionReset
                    | K::ConnectionAborted
                    | K::UnexpectedEof
                    | K::BrokenPipe
                    | K::TimedOut
            )
        };
        match self.0.kind {
            Kind::ServerError => self
                .0
                .server_error
                .as_ref()
                .is_some_and(|(_, code)| matches!(code.as_str(), "57P01" | "57P02" | "57P03")),
            Kind::ServerConnect => match self.0.source.as_deref() {
                // A TLS handshake that failed (a certificate refused) is retried as any failed
                // connect, as PgBouncer retries it: the server may be fixed, or the
                // configuration reloaded, while clients wait.
                None => {
                    self.0.message.contains("timed out")
                        || self.0.message.contains("SSL handshake failed")
                }
                Some(src) => {
                    if let Some(e) = src.downcast_ref::<std::io::Error>() {
                        io_down(e.kind())
                    } else if let Some(e) = src.downcast_ref::<framed::ReadError>() {
                        match e {
                            framed::ReadError::Closed => true,
                            framed::ReadError::Io(e) => io_down(e.kind()),
                            _ => false,
                        }
                    } else {
                        false
                    }
                }
            },
            _ => false,
        }
    }

    /// SQLSTATE a client sees for this error.
    pub fn sqlstate(&self) -> &str {
        if let Some((_, code)) = &self.0.server_error {
            return code;
        }
        match self.0.kind {
            Kind::ClientProtocol => sqlstate::PROTOCOL_VIOLATION,
            Kind::ClientIo => sqlstate::CONNECTION_FAILURE,
            Kind::AuthFailed => sqlstate::INVALID_PASSWORD,
            Kind::UnknownDatabase => sqlstate::INVALID_CATALOG_NAME,
            Kind::UnknownUser | Kind::Refused => sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            Kind::TooManyClients => sqlstate::TOO_MANY_CONNECTIONS,
            Kind::ServerConnect => sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
            Kind::ServerIo => sqlstate::CONNECTION_FAILURE,
            Kind::ServerError => sqlstate::CONNECTION_FAILURE,
            Kind::PoolTimeout => sqlstate::QUERY_CANCELED,
            Kind::Shutdown | Kind::Exiting => sqlstate::ADMIN_SHUTDOWN,
            Kind::NotSupported => sqlstate::FEATURE_NOT_SUPPORTED,
            Kind::QueryTimeout => sqlstate::QUERY_CANCELED,
            Kind::IdleInTransaction => sqlstate::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
            Kind::TransactionTimeout => sqlstate::TRANSACTION_TIMEOUT,
            Kind::ClientIdle => sqlstate::IDLE_SESSION_TIMEOUT,
            Kind::Disabled | Kind::Stopping => sqlstate::CANNOT_CONNECT_NOW,
            Kind::InvalidEncoding => sqlstate::CHARACTER_NOT_IN_REPERTOIRE,
        }
    }

    /// Appends the ErrorResponse a client should see, with the given severity ([`Kind::Exiting`]:
    /// a NoticeResponse, WARNING).
    pub fn write_response(&self, buf: &mut BytesMut, severity: &str) {
        if self.0.kind == Kind::Exiting {
            let code = self.sqlstate();
            return pgwire::encode::notice_response(buf, "WARNING", code, &self.0.message);
        }
        match &self.0.server_error {
            // A server's ERROR that ends the client's session (a refused startup parameter,
            // say) reads as FATAL, as PostgreSQL's own would.
            Some((raw, _)) if severity == "FATAL" && raw.len() > 5 => {
                pgwire::encode::error_with_severity(buf, &raw[5..], severity)
            }
            Some((raw, _)) => buf.extend_from_slice(raw),
            None => pgwire::encode::error_response(buf, severity, self.sqlstate(), &self.0.message),
        }
    }

    /// [`Error::write_response`], with `"text"` in the message written as `"raw"`: a client's
    /// name that is not UTF-8 (`text` holds it replaced lossily), quoted as it was sent, as
    /// PostgreSQL quotes it.
    pub fn write_response_quoting(
        &self,
        buf: &mut BytesMut,
        severity: &str,
        text: &str,
        raw: &[u8],
    ) {
        let quoted = format!("\"{text}\"");
        let message = &self.0.message;
        match message.find(&quoted) {
            Some(at) if self.0.server_error.is_none() => {
                let mut m = message.as_bytes()[..at + 1].to_vec();
                m.extend_from_slice(raw);
                m.extend_from_slice(&message.as_bytes()[at + quoted.len() - 1..]);
                pgwire::encode::error_response_bytes(buf, severity, self.sqlstate(), &m);
            }
            _ => self.write_response(buf, severity),
        }
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.0.kind, self)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.message)?;
        if let Some(src) = &self.0.source {
            write!(f, ": {src}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
