//! TLS for both hops, built from the configuration's files: the acceptor for clients (SSLRequest
//! and direct TLS) and the connector for PostgreSQL. Loaded whole at start, on every reload and
//! SET; what does not load is never put in force (a reload is refused, a SET's setting is
//! taken and the running TLS stays until the settings load together).

mod client_verify;
mod files;
mod v1;
mod verify;

use std::sync::Arc;

use tokio_rustls::rustls::sign::SingleCertAndKey;
use tokio_rustls::rustls::{self, crypto::CryptoProvider, ServerConfig, SupportedProtocolVersion};

use crate::config::{AuthType, General, SslMode};

/// The ALPN protocol name PostgreSQL uses (required for direct TLS).
pub const ALPN: &[u8] = b"postgresql";

/// The TLS in force, shared by the listener and every server target; swapped whole on reload.
pub type Shared = Arc<arc_swap::ArcSwap<Tls>>;

/// Everything TLS, for one configuration.
#[derive(Default)]
pub struct Tls {
    /// Clients' side; `None` with `client_tls_sslmode = "disable"`.
    pub client: Option<ClientSide>,
    /// PostgreSQL's side; `None` with `server_tls_sslmode = "disable"`.
    pub server: Option<ServerSide>,
    /// What the server side was built from.
    pub server_settings: ServerSettings,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("client", &self.client.as_ref().map(|c| c.mode))
            .field("server", &self.server.as_ref().map(|s| s.mode))
            .finish()
    }
}

/// What answers clients' TLS.
pub struct ClientSide {
    pub mode: SslMode,
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// SCRAM channel binding data (tls-server-end-point) of pgcorral's certificate; `None` when
    /// its signature algorithm leaves the hash undefined (SCRAM-SHA-256-PLUS is then not offered).
    pub binding: Option<Vec<u8>>,
}

/// What opens TLS to PostgreSQL.
pub struct ServerSide {
    pub mode: SslMode,
    pub connector: tokio_rustls::TlsConnector,
}

impl Tls {
    /// Reads the certificate, key and CA files `g` names and builds both sides; `Err` when the
    /// settings do not go together or a file does not load (nothing is half built).
    pub fn load(g: &General) -> Result<Tls, String> {
        combinations(g)?;
        let client = match g.client_tls_sslmode {
            SslMode::Disable => None,
            mode => Some(client_side(g, mode)?),
        };
        let server = match g.server_tls_sslmode {
            SslMode::Disable => None,
            mode => Some(server_side(g, mode)?),
        };
        Ok(Tls {
            client,
            server,
            server_settings: ServerSettings::of(g),
        })
    }
}

/// The settings PostgreSQL's side was built from: when any of them changes, the servers
/// opened before are replaced (PgBouncer does the same), so none stays on older TLS settings.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ServerSettings {
    mode: Option<SslMode>,
    files: [String; 3],
    protocols: String,
    ciphers: [String; 2],
}

impl ServerSettings {
    fn of(g: &General) -> ServerSettings {
        ServerSettings {
            mode: Some(g.server_tls_sslmode),
            files: [
                g.server_tls_ca_file.clone(),
                g.server_tls_cert_file.clone(),
                g.server_tls_key_file.clone(),
            ],
            protocols: g.server_tls_protocols.clone(),
            ciphers: [g.server_tls_ciphers.clone(), g.server_tls13_ciphers.clone()],
        }
    }
}

/// The settings that must go together for TLS to be set up; checked when TLS is loaded (at
/// start, a reload, a SET), not when the configuration is read, so that the console can
/// change them one at a time.
fn combinations(g: &General) -> Result<(), String> {
    if g.client_tls_sslmode != SslMode::Disable
        && (g.client_tls_cert_file.is_empty() || g.client_tls_key_file.is_empty())
    {
        return Err("client_tls_cert_file and client_tls_key_file must be set for TLS from clients (client_tls_sslmode is not \"disable\")".into());
    }
    if g.client_tls_sslmode.verifies() && g.client_tls_ca_file.is_empty() {
        return Err("client_tls_ca_file: required with client_tls_sslmode = \"verify-ca\" or \"verify-full\" (client certificates are checked against it)".into());
    }
    if g.auth_type == AuthType::Cert {
        if g.client_tls_sslmode == SslMode::Disable {
            return Err(
                "auth_type = \"cert\" needs client TLS (client_tls_sslmode other than \"disable\")"
                    .into(),
            );
        }
        if g.client_tls_ca_file.is_empty() {
            return Err("client_tls_ca_file: required with auth_type = \"cert\"".into());
        }
    }
    if g.server_tls_cert_file.is_empty() != g.server_tls_key_file.is_empty() {
        return Err("server_tls_cert_file and server_tls_key_file go together".into());
    }
    Ok(())
}

fn client_side(g: &General, mode: SslMode) -> Result<ClientSide, String> {
    let provider = Arc::new(provider_for(
        ("client_tls_ciphers", &g.client_tls_ciphers),
        ("client_tls13_ciphers", &g.client_tls13_ciphers),
    )?);
    let versions = versions(&g.client_tls_protocols)?;
    let certified = files::certified(
        &provider,
        ("client_tls_cert_file", &g.client_tls_cert_file),
        ("client_tls_key_file", &g.client_tls_key_file),
    )?;
    let binding = files::binding(&certified.cert[0]);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("client_tls_protocols: {e}"))?;
    let builder = if g.client_tls_ca_file.is_empty() {
        builder.with_no_client_auth()
    } else {
        let cas = files::roots(&g.client_tls_ca_file, "client_tls_ca_file")?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            cas.store,
            provider.clone(),
        );
        // Below verify-ca a certificate is optional, but checked when given (cert auth).
        let verifier = if mode.verifies() {
            verifier
        } else {
            verifier.allow_unauthenticated()
        };
        let webpki = verifier
            .build()
            .map_err(|e| format!("client_tls_ca_file: {e}"))?;
        builder.with_client_cert_verifier(Arc::new(client_verify::ClientVerifier {
            webpki,
            cas: cas.certs,
            provider,
        }))
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
    config.alpn_protocols = vec![ALPN.to_vec()];
    // libpq does not resume sessions: tickets would be work for nothing.
    config.send_tls13_tickets = 0;
    Ok(ClientSide {
        mode,
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        binding,
    })
}

fn server_side(g: &General, mode: SslMode) -> Result<ServerSide, String> {
    let provider = Arc::new(provider_for(
        ("server_tls_ciphers", &g.server_tls_ciphers),
        ("server_tls13_ciphers", &g.server_tls13_ciphers),
    )?);
    let versions = versions(&g.server_tls_protocols)?;
    // Without a CA file, verify-ca and verify-full check against the system's CAs, as
    // PgBouncer does.
    let cas = match (g.server_tls_ca_file.as_str(), mode.verifies()) {
        ("", false) => None,
        ("", true) => Some(files::system_roots("server_tls_ca_file")?),
        (path, _) => Some(files::roots(path, "server_tls_ca_file")?),
    };
    let verifier = verify::for_mode(mode, cas, provider.clone())?;
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("server_tls_protocols: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = if g.server_tls_cert_file.is_empty() {
        builder.with_no_client_auth()
    } else {
        let certified = files::certified(
            &provider,
            ("server_tls_cert_file", &g.server_tls_cert_file),
            ("server_tls_key_file", &g.server_tls_key_file),
        )?;
        builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(certified)))
    };
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(ServerSide {
        mode,
        connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
    })
}

/// The TLS versions a `*_tls_protocols` value allows: "secure", "all", "legacy" and "default"
/// mean TLS 1.2 and 1.3 (rustls has nothing older); otherwise a list of "tlsv1.2", "tlsv1.3".
pub fn versions(spec: &str) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let mut out = Vec::new();
    for word in spec
        .split([',', ':', ' '])
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        let v: &[&'static SupportedProtocolVersion] = match word.to_ascii_lowercase().as_str() {
            "secure" | "all" | "legacy" | "default" => {
                &[&rustls::version::TLS12, &rustls::version::TLS13]
            }
            "tlsv1.2" => &[&rustls::version::TLS12],
            "tlsv1.3" => &[&rustls::version::TLS13],
            "tlsv1" | "tlsv1.0" | "tlsv1.1" => {
                return Err(format!("{word:?} is not supported (TLS 1.2 and 1.3 only)"))
            }
            _ => {
                return Err(format!(
                    "unknown protocol {word:?}; use \"secure\", \"all\", \"tlsv1.2\" or \"tlsv1.3\""
                ))
            }
        };
        for x in v {
            if !out
                .iter()
                .any(|o: &&SupportedProtocolVersion| o.version == x.version)
            {
                out.push(*x);
            }
        }
    }
    if out.is_empty() {
        return Err("no protocol given".into());
    }
    Ok(out)
}

/// The crypto provider (ring) limited to a `*_tls_ciphers` value: "default", "secure", "all",
/// "normal" or "fast" keep every suite rustls offers; otherwise a list, separated by `:` or
/// `,`, of IANA names ("TLS_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"; the
/// rustls spelling "TLS13_..." is accepted too).
pub fn provider(spec: &str) -> Result<CryptoProvider, String> {
    let mut p = rustls::crypto::ring::default_provider();
    let words: Vec<&str> = spec
        .split([',', ':', ' '])
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    let all = |w: &str| {
        matches!(
            w.to_ascii_lowercase().as_str(),
            "default" | "secure" | "all" | "normal" | "fast"
        )
    };
    if words.is_empty() || (words.len() == 1 && all(words[0])) {
        return Ok(p);
    }
    let name = suite_name;
    let mut chosen = Vec::new();
    for w in &words {
        let want = w.to_ascii_uppercase().replacen("TLS13_", "TLS_", 1);
        match p.cipher_suites.iter().find(|s| name(s) == want) {
            Some(s) => chosen.push(*s),
            None => {
                let known: Vec<String> = p.cipher_suites.iter().map(name).collect();
                return Err(format!(
                    "unknown cipher suite {w:?}; known: {}",
                    known.join(", ")
                ));
            }
        }
    }
    p.cipher_suites = chosen;
    Ok(p)
}

/// A side's provider: `*_tls_ciphers`, with its TLS 1.3 suites replaced by those
/// `*_tls13_ciphers` names when it is set (PgBouncer's split: the first for TLS 1.2, the
/// second for TLS 1.3).
fn provider_for(
    (key, spec): (&str, &str),
    (key13, spec13): (&str, &str),
) -> Result<CryptoProvider, String> {
    let mut p = provider(spec).map_err(|e| format!("{key}: {e}"))?;
    if !spec13.trim().is_empty() {
        let tls13 = tls13_suites(spec13).map_err(|e| format!("{key13}: {e}"))?;
        let tls12 = std::mem::take(&mut p.cipher_suites)
            .into_iter()
            .filter(|s| !matches!(s, rustls::SupportedCipherSuite::Tls13(_)));
        p.cipher_suites = tls13.into_iter().chain(tls12).collect();
    }
    Ok(p)
}

/// The TLS 1.3 suites a `*_tls13_ciphers` value names: IANA names separated by `:` or `,`
/// ("TLS_CHACHA20_POLY1305_SHA256").
pub fn tls13_suites(spec: &str) -> Result<Vec<rustls::SupportedCipherSuite>, String> {
    let known: Vec<rustls::SupportedCipherSuite> = rustls::crypto::ring::default_provider()
        .cipher_suites
        .into_iter()
        .filter(|s| matches!(s, rustls::SupportedCipherSuite::Tls13(_)))
        .collect();
    let mut out = Vec::new();
    for w in spec
        .split([',', ':', ' '])
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        let want = w.to_ascii_uppercase().replacen("TLS13_", "TLS_", 1);
        match known.iter().find(|s| suite_name(s) == want) {
            Some(s) => out.push(*s),
            None => {
                let names: Vec<String> = known.iter().map(suite_name).collect();
                return Err(format!(
                    "failed to set the TLSv1.3 cipher suites: {w:?} is not one; known: {}",
                    names.join(", ")
                ));
            }
        }
    }
    if out.is_empty() {
        return Err("failed to set the TLSv1.3 cipher suites: none named".into());
    }
    Ok(out)
}

/// A suite's IANA name ("TLS_AES_256_GCM_SHA384"; rustls spells TLS 1.3's "TLS13_...").
fn suite_name(s: &rustls::SupportedCipherSuite) -> String {
    format!("{:?}", s.suite()).replacen("TLS13_", "TLS_", 1)
}

pub use files::binding;

/// The subject's common name in a certificate (cert auth's user name).
pub fn common_name(cert: &rustls::pki_types::CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let cn = parsed.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// "TLSv1.3/TLS_AES_256_GCM_SHA384", as SHOW CLIENTS and SHOW SERVERS give it.
pub fn describe(conn: &rustls::CommonState) -> String {
    let version = match conn.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
        _ => "TLS",
    };
    match conn.negotiated_cipher_suite() {
        Some(s) => format!(
            "{version}/{}",
            format!("{:?}", s.suite()).replacen("TLS13_", "TLS_", 1)
        ),
        None => version.to_string(),
    }
}
