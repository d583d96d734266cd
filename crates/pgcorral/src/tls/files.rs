//! Reading PEM certificates, keys and CA bundles, with errors that name the setting and file;
//! and the SCRAM channel binding data of a certificate.

use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
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

/// The CA certificates in `path`.
pub fn roots(path: &str, key: &str) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for c in certs(path, key)? {
        store
            .add(c)
            .map_err(|e| format!("{key} {path:?}: not a usable CA certificate: {e}"))?;
    }
    Ok(store)
}

/// tls-server-end-point channel binding data for `cert` (RFC 5929): a hash of it, chosen by
/// its signature algorithm; `None` when that leaves the hash undefined (Ed25519, RSA-PSS).
pub fn binding(cert: &CertificateDer<'_>) -> Option<Vec<u8>> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    let oid = parsed.signature_algorithm.algorithm.to_id_string();
    let hash = pgwire::auth::binding::hash_for_signature_oid(&oid)?;
    Some(pgwire::auth::binding::tls_server_end_point(cert, hash))
}
