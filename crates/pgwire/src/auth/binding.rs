//! TLS channel binding data for SCRAM-SHA-256-PLUS: the `tls-server-end-point` value of
//! RFC 5929 §4.1 (a hash of the server's DER certificate), and which hash a certificate's
//! signature algorithm calls for. No X.509 parsing happens here: the caller supplies the DER and
//! the signature algorithm.

use sha2::{Digest, Sha224, Sha256, Sha384, Sha512};

/// The only channel binding type PostgreSQL supports (`p=tls-server-end-point` in the gs2 header).
pub const TLS_SERVER_END_POINT: &str = "tls-server-end-point";

/// Hash function that makes a certificate's `tls-server-end-point` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndPointHash {
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

/// The `tls-server-end-point` binding data: `hash` over the whole DER certificate of the server.
///
/// `hash` must be the one RFC 5929 §4.1 asks for: the hash of the certificate's
/// signatureAlgorithm, SHA-256 when that is MD5 or SHA-1 (see [`hash_for_signature_oid`]).
pub fn tls_server_end_point(cert_der: &[u8], hash: EndPointHash) -> Vec<u8> {
    match hash {
        EndPointHash::Sha224 => Sha224::digest(cert_der).to_vec(),
        EndPointHash::Sha256 => Sha256::digest(cert_der).to_vec(),
        EndPointHash::Sha384 => Sha384::digest(cert_der).to_vec(),
        EndPointHash::Sha512 => Sha512::digest(cert_der).to_vec(),
    }
}

/// Hash for `tls-server-end-point` given the dotted OID of a certificate's signatureAlgorithm,
/// as RFC 5929 §4.1 and PostgreSQL: the algorithm's own hash, with MD5 and SHA-1 upgraded to
/// SHA-256.
///
/// `None` when the binding is not defined by the OID alone: unknown algorithms, RSASSA-PSS (its
/// hash is in the algorithm parameters; a caller that parses them can pick the hash itself),
/// and Ed25519/Ed448 (RFC 5929 defines nothing for them; PostgreSQL cannot bind with such a
/// certificate either). With `None`, do not use channel binding.
pub fn hash_for_signature_oid(oid: &str) -> Option<EndPointHash> {
    use EndPointHash::*;
    Some(match oid {
        // RSA PKCS #1 v1.5: md5WithRSAEncryption, sha1-, sha224-, sha256-, sha384-, sha512-.
        "1.2.840.113549.1.1.4" | "1.2.840.113549.1.1.5" => Sha256,
        "1.2.840.113549.1.1.14" => Sha224,
        "1.2.840.113549.1.1.11" => Sha256,
        "1.2.840.113549.1.1.12" => Sha384,
        "1.2.840.113549.1.1.13" => Sha512,
        // ECDSA: ecdsa-with-SHA1, -SHA224, -SHA256, -SHA384, -SHA512.
        "1.2.840.10045.4.1" => Sha256,
        "1.2.840.10045.4.3.1" => Sha224,
        "1.2.840.10045.4.3.2" => Sha256,
        "1.2.840.10045.4.3.3" => Sha384,
        "1.2.840.10045.4.3.4" => Sha512,
        // DSA: dsa-with-sha1, -sha224, -sha256.
        "1.2.840.10040.4.3" => Sha256,
        "2.16.840.1.101.3.4.3.1" => Sha224,
        "2.16.840.1.101.3.4.3.2" => Sha256,
        // RSASSA-PSS (1.2.840.113549.1.1.10), Ed25519 (1.3.101.112), Ed448 (1.3.101.113), and
        // anything else.
        _ => return None,
    })
}
