//! How clients' certificates are checked against `client_tls_ca_file`: by webpki, and X.509 v1
//! certificates (which OpenSSL, so PgBouncer, takes and webpki refuses) by [`super::v1`].

use std::sync::Arc;

use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::{CertificateDer, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

use super::v1;

/// webpki's verifier, with v1 certificates checked against the CA file's certificates.
#[derive(Debug)]
pub struct ClientVerifier {
    pub webpki: Arc<dyn ClientCertVerifier>,
    /// The CA file's certificates.
    pub cas: Arc<Vec<CertificateDer<'static>>>,
    pub provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.webpki.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.webpki.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        match self
            .webpki
            .verify_client_cert(end_entity, intermediates, now)
        {
            Err(_) if v1::is_v1(end_entity) => v1::verify_leaf(
                end_entity,
                &self.cas,
                now,
                &self.provider.signature_verification_algorithms,
                None,
            )
            .map(|()| ClientCertVerified::assertion()),
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
