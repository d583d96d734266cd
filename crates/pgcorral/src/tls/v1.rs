//! X.509 version 1 certificates, which rustls's webpki refuses and OpenSSL (so PostgreSQL,
//! libpq and PgBouncer) accepts: a v1 end-entity certificate signed straight by a CA of the
//! configured file, and the handshake signatures made with its key.
//!
//! Used only where webpki failed on such a certificate: every check webpki would make on a v1
//! certificate that has a meaning for it is made here (issuer among the CAs, the CA allowed to
//! sign certificates, the signature, both validity periods, the host name when asked), and
//! what a v1 certificate cannot carry (extensions, so no intermediates) is refused.

use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::crypto::{
    verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms,
};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    CertificateError, DigitallySignedStruct, Error, PeerMisbehaved, SignatureScheme,
};
use x509_parser::certificate::X509Certificate;

/// Whether `cert` parses as an X.509 version 1 certificate.
pub fn is_v1(cert: &CertificateDer<'_>) -> bool {
    x509_parser::parse_x509_certificate(cert).is_ok_and(|(_, c)| c.version().0 == 0)
}

/// Checks a v1 end-entity certificate: issued and signed by one of `cas`, within its validity
/// (and the CA within its own) at `now`, and, when `name` is given, naming it in its subject's
/// common name (a v1 certificate has no subjectAltName).
pub fn verify_leaf(
    cert: &CertificateDer<'_>,
    cas: &[CertificateDer<'static>],
    now: UnixTime,
    algs: &WebPkiSupportedAlgorithms,
    name: Option<&ServerName<'_>>,
) -> Result<(), Error> {
    let (_, leaf) =
        x509_parser::parse_x509_certificate(cert).map_err(|_| CertificateError::BadEncoding)?;
    if leaf.version().0 != 0 {
        return Err(CertificateError::BadEncoding.into());
    }
    let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    valid_at(&leaf, now)?;
    let parts = signed_parts(cert).ok_or(CertificateError::BadEncoding)?;
    let mut signed = false;
    for ca in cas {
        let Ok((_, issuer)) = x509_parser::parse_x509_certificate(ca) else {
            continue;
        };
        if issuer.subject().as_raw() != leaf.issuer().as_raw() || !may_sign(&issuer) {
            continue;
        }
        if valid_at(&issuer, now).is_ok() && signed_by(&parts, issuer.public_key().raw, algs) {
            signed = true;
            break;
        }
    }
    if !signed {
        return Err(CertificateError::UnknownIssuer.into());
    }
    match name {
        Some(name) if !names(&leaf, name) => Err(CertificateError::NotValidForName.into()),
        _ => Ok(()),
    }
}

/// A TLS 1.2 handshake signature: as rustls checks it, or, for a v1 certificate, here.
pub fn tls12_signature(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    match verify_tls12_signature(message, cert, dss, algs) {
        Err(_) if is_v1(cert) => verify_handshake(message, cert, dss, algs, false),
        other => other,
    }
}

/// A TLS 1.3 handshake signature: as rustls checks it, or, for a v1 certificate, here.
pub fn tls13_signature(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    match verify_tls13_signature(message, cert, dss, algs) {
        Err(_) if is_v1(cert) => verify_handshake(message, cert, dss, algs, true),
        other => other,
    }
}

/// A handshake signature checked with the public key of `cert` as x509-parser reads it (webpki
/// cannot read a v1 certificate): TLS 1.3 takes the scheme's first algorithm, TLS 1.2 any of
/// them that fits the key, as rustls does.
fn verify_handshake(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
    tls13: bool,
) -> Result<HandshakeSignatureValid, Error> {
    if tls13 && !in_tls13(dss.scheme) {
        return Err(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme.into());
    }
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert).map_err(|_| CertificateError::BadEncoding)?;
    let (key_alg, key) =
        spki_parts(parsed.public_key().raw).ok_or(CertificateError::BadEncoding)?;
    let Some((_, candidates)) = algs.mapping.iter().find(|(s, _)| *s == dss.scheme) else {
        return Err(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme.into());
    };
    let candidates = if tls13 {
        &candidates[..candidates.len().min(1)]
    } else {
        candidates
    };
    for alg in candidates.iter() {
        if alg.public_key_alg_id().as_ref() != key_alg {
            continue;
        }
        return alg
            .verify_signature(key, message, dss.signature())
            .map(|()| HandshakeSignatureValid::assertion())
            .map_err(|_| CertificateError::BadSignature.into());
    }
    Err(Error::General(format!(
        "the certificate's key does not fit the signature scheme {:?}",
        dss.scheme
    )))
}

/// The signature schemes TLS 1.3 allows (RFC 8446 4.2.3: no PKCS#1 v1.5, no SHA-1).
fn in_tls13(scheme: SignatureScheme) -> bool {
    use SignatureScheme as S;
    matches!(
        scheme,
        S::ECDSA_NISTP256_SHA256
            | S::ECDSA_NISTP384_SHA384
            | S::ECDSA_NISTP521_SHA512
            | S::RSA_PSS_SHA256
            | S::RSA_PSS_SHA384
            | S::RSA_PSS_SHA512
            | S::ED25519
            | S::ED448
    )
}

/// Within its validity period at `now` (seconds since the epoch).
fn valid_at(cert: &X509Certificate<'_>, now: i64) -> Result<(), Error> {
    let v = cert.validity();
    if now < v.not_before.timestamp() {
        return Err(CertificateError::NotValidYet.into());
    }
    if now > v.not_after.timestamp() {
        return Err(CertificateError::Expired.into());
    }
    Ok(())
}

/// A CA certificate may sign others: version 1 (no extensions to say otherwise, as OpenSSL
/// takes a trusted v1 CA), or basicConstraints cA when present and keyCertSign in keyUsage
/// when present.
fn may_sign(ca: &X509Certificate<'_>) -> bool {
    if ca.version().0 == 0 {
        return true;
    }
    let ca_flag = match ca.basic_constraints() {
        Ok(Some(bc)) => bc.value.ca,
        Ok(None) => true,
        Err(_) => false,
    };
    let cert_sign = match ca.key_usage() {
        Ok(Some(ku)) => ku.value.key_cert_sign(),
        Ok(None) => true,
        Err(_) => false,
    };
    ca_flag && cert_sign
}

/// A certificate's signed part (the whole tbsCertificate element), its signature algorithm
/// (the AlgorithmIdentifier's contents) and signature.
struct Signed<'a> {
    tbs: &'a [u8],
    alg: &'a [u8],
    signature: &'a [u8],
}

fn signed_parts(cert: &[u8]) -> Option<Signed<'_>> {
    let (0x30, body, _, _) = tlv(cert)? else {
        return None;
    };
    let (0x30, _, tbs, rest) = tlv(body)? else {
        return None;
    };
    let (0x30, alg, _, rest) = tlv(rest)? else {
        return None;
    };
    let (0x03, bits, _, _) = tlv(rest)? else {
        return None;
    };
    let (&0, signature) = bits.split_first()? else {
        return None;
    };
    Some(Signed {
        tbs,
        alg,
        signature,
    })
}

/// Whether the key in `issuer_spki` (a whole SubjectPublicKeyInfo) made the signature, with an
/// algorithm of `algs` that fits both the signature's algorithm and the key.
fn signed_by(parts: &Signed<'_>, issuer_spki: &[u8], algs: &WebPkiSupportedAlgorithms) -> bool {
    let Some((key_alg, key)) = spki_parts(issuer_spki) else {
        return false;
    };
    algs.all.iter().any(|alg| {
        alg.signature_alg_id().as_ref() == parts.alg
            && alg.public_key_alg_id().as_ref() == key_alg
            && alg
                .verify_signature(key, parts.tbs, parts.signature)
                .is_ok()
    })
}

/// A SubjectPublicKeyInfo's algorithm (the AlgorithmIdentifier's contents) and key bits.
fn spki_parts(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    let (0x30, body, _, _) = tlv(spki)? else {
        return None;
    };
    let (0x30, alg, _, rest) = tlv(body)? else {
        return None;
    };
    let (0x03, bits, _, _) = tlv(rest)? else {
        return None;
    };
    let (&0, key) = bits.split_first()? else {
        return None;
    };
    Some((alg, key))
}

/// A DER element: its tag, its contents, the whole element, and what follows it.
type Element<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

/// The DER element at the start of `b`; `None` when it is cut short or its length takes more
/// than four bytes.
fn tlv(b: &[u8]) -> Option<Element<'_>> {
    let (&tag, r) = b.split_first()?;
    let (&first, r) = r.split_first()?;
    let (len, r) = if first < 0x80 {
        (usize::from(first), r)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || r.len() < n {
            return None;
        }
        let len = r[..n]
            .iter()
            .fold(0usize, |a, &x| (a << 8) | usize::from(x));
        (len, &r[n..])
    };
    if r.len() < len {
        return None;
    }
    let header = b.len() - r.len();
    Some((tag, &r[..len], &b[..header + len], &r[len..]))
}

/// The host name (or address) is the certificate's subject common name, compared without case;
/// a leading `*.` in it stands for one label, as libpq and OpenSSL match.
fn names(cert: &X509Certificate<'_>, name: &ServerName<'_>) -> bool {
    let host = match name {
        ServerName::DnsName(d) => d.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        _ => return false,
    };
    let host = host.trim_end_matches('.');
    cert.subject().iter_common_name().any(|cn| {
        let Ok(cn) = cn.as_str() else {
            return false;
        };
        if cn.eq_ignore_ascii_case(host) {
            return true;
        }
        match (cn.strip_prefix("*."), host.split_once('.')) {
            (Some(rest), Some((label, host_rest))) => {
                !label.is_empty()
                    && matches!(name, ServerName::DnsName(_))
                    && rest.contains('.')
                    && host_rest.eq_ignore_ascii_case(rest)
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::tlv;

    #[test]
    fn der_elements_are_bounded() {
        assert_eq!(tlv(&[0x30, 0x01, 0x05]).map(|t| t.1), Some(&[0x05][..]));
        assert!(tlv(&[0x30, 0x02, 0x05]).is_none());
        assert!(tlv(&[0x30, 0x85, 1, 1, 1, 1, 1]).is_none());
        assert!(tlv(&[0x30, 0x82, 0x01]).is_none());
        assert!(tlv(&[]).is_none());
        let long: Vec<u8> = [0x04, 0x81, 0x80].into_iter().chain([7; 0x80]).collect();
        assert_eq!(tlv(&long).map(|t| t.1.len()), Some(0x80));
    }
}
