//! Reading PEM certificates, keys and CA bundles (the system's too), with errors that name the
//! setting and file; checking that a key goes with its certificate; and the SCRAM channel
//! binding data of a certificate.

use std::sync::Arc;

use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::RootCertStore;

/// Every certificate in `path` (leaf first); at least one.
pub fn certs(path: &str, key: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{key} {path:?}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("{key} {path:?}: no PEM certificate in it"));
    }
    for c in &chain {
        if let Err(e) = x509_parser::parse_x509_certificate(c) {
            return Err(format!("{key} {path:?}: not a valid certificate: {e}"));
        }
    }
    Ok(chain)
}

/// The private key in `path` (PKCS#8, PKCS#1 or SEC1).
pub fn key(path: &str, key: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| format!("{key} {path:?}: {e}"))
}

/// The CA certificates in `path`: the store webpki checks chains against, and the
/// certificates themselves (for [`super::v1`]).
pub fn roots(path: &str, key: &str) -> Result<Cas, String> {
    let mut store = RootCertStore::empty();
    let certs = certs(path, key)?;
    for c in &certs {
        store
            .add(c.clone())
            .map_err(|e| format!("{key} {path:?}: not a usable CA certificate: {e}"))?;
    }
    Ok(Cas {
        store: Arc::new(store),
        certs: Arc::new(certs),
    })
}

/// Where the system's CA bundle is looked for when `server_tls_ca_file` is not set, in
/// PgBouncer's order (its build takes the first that exists).
pub const SYSTEM_CA_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The system's CA bundle: the first of [`SYSTEM_CA_FILES`] that exists. Certificates in it
/// that are not usable as trust anchors are skipped (a system bundle is not ours to refuse).
pub fn system_roots(key: &str) -> Result<Cas, String> {
    let Some(path) = SYSTEM_CA_FILES
        .iter()
        .find(|p| std::path::Path::new(p).exists())
    else {
        return Err(format!(
            "{key}: not set, and no system CA bundle found (looked for {})",
            SYSTEM_CA_FILES.join(", ")
        ));
    };
    let certs = certs(path, key)?;
    let mut store = RootCertStore::empty();
    let (_, skipped) = store.add_parsable_certificates(certs.iter().cloned());
    if store.is_empty() {
        return Err(format!(
            "{key}: not set, and the system CA bundle {path:?} has no usable certificate"
        ));
    }
    if skipped > 0 {
        tracing::debug!(
            path,
            skipped,
            "system CA bundle: certificates not usable as trust anchors skipped"
        );
    }
    Ok(Cas {
        store: Arc::new(store),
        certs: Arc::new(certs),
    })
}

/// A CA file read: for webpki, and as given (v1 certificates are checked against these).
#[derive(Clone)]
pub struct Cas {
    pub store: Arc<RootCertStore>,
    pub certs: Arc<Vec<CertificateDer<'static>>>,
}

/// The certificate chain in `cert_path` with the key in `key_path`, checked to go together:
/// the key's public half must be the one in the chain's first certificate. rustls's own check
/// reads the certificate with webpki, which refuses X.509 v1 certificates (OpenSSL's, so
/// PgBouncer's, take them); here the certificate is read with x509-parser.
pub fn certified(
    provider: &CryptoProvider,
    (cert_key, cert_path): (&str, &str),
    (key_key, key_path): (&str, &str),
) -> Result<CertifiedKey, String> {
    let chain = certs(cert_path, cert_key)?;
    let key = key(key_path, key_key)?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("{key_key} {key_path:?}: {e}"))?;
    let mismatch = |why: &str| {
        format!("{key_key} {key_path:?} does not go with {cert_key} {cert_path:?}: {why}")
    };
    let Some(spki) = signing.public_key() else {
        return Err(mismatch(
            "the key's public half cannot be read, so the pair cannot be checked",
        ));
    };
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0])
        .map_err(|e| format!("{cert_key} {cert_path:?}: not a valid certificate: {e}"))?;
    if leaf.public_key().raw != spki.as_ref() {
        return Err(mismatch("the key is not the certificate's"));
    }
    Ok(CertifiedKey::new(chain, signing))
}

/// tls-server-end-point channel binding data for `cert` (RFC 5929): a hash of it, chosen by
/// its signature algorithm; `None` when that leaves the hash undefined (Ed25519, RSA-PSS).
pub fn binding(cert: &CertificateDer<'_>) -> Option<Vec<u8>> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let oid = parsed.signature_algorithm.algorithm.to_id_string();
    let hash = pgwire::auth::binding::hash_for_signature_oid(&oid)?;
    Some(pgwire::auth::binding::tls_server_end_point(cert, hash))
}
