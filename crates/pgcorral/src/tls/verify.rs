//! How PostgreSQL's certificate is checked, by `server_tls_sslmode`: not at all below
//! verify-ca (as libpq without a root certificate), the chain only with verify-ca, the chain
//! and the host name with verify-full. X.509 v1 certificates (which OpenSSL, so PostgreSQL and
//! PgBouncer, take and webpki refuses) are checked by [`super::v1`].

use std::sync::Arc;

use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

use super::files::Cas;
use super::v1;
use crate::config::SslMode;

/// The verifier for `mode`; `cas` is required from verify-ca up.
pub fn for_mode(
    mode: SslMode,
    cas: Option<Cas>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, String> {
    if !mode.verifies() {
        return Ok(Arc::new(Unchecked(provider)));
    }
    let cas = cas.ok_or("server_tls_ca_file: required from verify-ca up")?;
    let webpki = WebPkiServerVerifier::builder_with_provider(cas.store, provider.clone())
        .build()
        .map_err(|e| format!("server_tls_ca_file: {e}"))?;
    Ok(Arc::new(Checked {
        webpki,
        cas: cas.certs,
        provider,
        full: mode == SslMode::VerifyFull,
    }))
}

/// Accepts any certificate (the handshake's signatures are still checked, so the link is
/// encrypted to whoever holds the key).
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        v1::tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        v1::tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The chain must lead to a trusted CA; with `full`, the certificate must also name the host.
#[derive(Debug)]
struct Checked {
    webpki: Arc<WebPkiServerVerifier>,
    /// The CA file's certificates, for v1 server certificates.
    cas: Arc<Vec<CertificateDer<'static>>>,
    provider: Arc<CryptoProvider>,
    full: bool,
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.full => Ok(ServerCertVerified::assertion()),
            Err(_) if v1::is_v1(end_entity) => v1::verify_leaf(
                end_entity,
                &self.cas,
                now,
                &self.provider.signature_verification_algorithms,
                self.full.then_some(server_name),
            )
            .map(|()| ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        v1::tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        v1::tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}
