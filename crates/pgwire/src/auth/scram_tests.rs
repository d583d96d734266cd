//! Tests for SCRAM-SHA-256: the RFC 7677 vector on both sides, a verifier made by PostgreSQL 15,
//! key reuse, ordering, channel binding (SCRAM-SHA-256-PLUS, gs2 flags, end-point hashes), and
//! no panics on arbitrary peer bytes.

use super::*;
use crate::auth::binding::{hash_for_signature_oid, tls_server_end_point, EndPointHash};
use proptest::prelude::*;

// RFC 7677, section 3.
const RFC_PASSWORD: &str = "pencil";
const RFC_CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const RFC_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

/// Made by PostgreSQL 15 for password 'secret' (password_encryption = scram-sha-256).
const PG_VERIFIER: &str = "SCRAM-SHA-256$4096:dp6Nu0GF7frYfUEC353f+g==$\
                           LGZoGzp7weEi+sE8LT/NyBZuefY3NBICaYdXk+3LMyY=:\
                           RpuF2eNUx5iIVcBN5m9rX+2lJl3yAcy4LKGMMBddv/s=";

fn rfc_secret() -> ScramSecret {
    let salt = STANDARD.decode(RFC_SALT).unwrap();
    ScramSecret::from_password(RFC_PASSWORD, &salt, 4096)
}

/// Runs a full exchange; returns the server's outcome or the first error from either side.
fn exchange(
    client: &mut ScramClient,
    server: &mut ScramServer,
) -> Result<ServerOutcome, ScramError> {
    let first = client.client_first();
    let server_first = server.client_first(&first)?;
    let client_final = client.server_first(&server_first)?;
    let outcome = server.client_final(&client_final)?;
    client.server_final(&outcome.server_final)?;
    Ok(outcome)
}

/// A cheap secret for tests that only care about parsing.
fn cheap_secret() -> ScramSecret {
    ScramSecret::from_password("pw", b"salty", 1)
}

/// client-final-message with a valid proof for `cheap_secret`'s password.
fn signed_final(client_first_bare: &str, server_first: &str, without_proof: &str) -> String {
    let (client_key, _) = keys_from_password("pw", b"salty", 1);
    let auth = format!("{client_first_bare},{server_first},{without_proof}");
    let signature = hmac(&sha256(&client_key), &[auth.as_bytes()]);
    let proof = xor(&client_key, &signature);
    format!("{without_proof},p={}", STANDARD.encode(proof))
}

#[test]
fn rfc7677_server_side() {
    let mut server = ScramServer::with_nonce(rfc_secret(), RFC_SERVER_NONCE);
    let server_first = server.client_first(RFC_CLIENT_FIRST.as_bytes()).unwrap();
    assert_eq!(server_first, RFC_SERVER_FIRST.as_bytes());
    let outcome = server.client_final(RFC_CLIENT_FINAL.as_bytes()).unwrap();
    assert_eq!(outcome.server_final, RFC_SERVER_FINAL.as_bytes());
    // The recovered ClientKey is the real one.
    let salt = STANDARD.decode(RFC_SALT).unwrap();
    let (client_key, _) = keys_from_password(RFC_PASSWORD, &salt, 4096);
    assert_eq!(outcome.client_key, client_key);
}

#[test]
fn rfc7677_client_side() {
    let mut client = ScramClient::with_nonce(RFC_PASSWORD, RFC_CLIENT_NONCE);
    client.username = "user".to_owned();
    assert_eq!(client.client_first(), RFC_CLIENT_FIRST.as_bytes());
    let client_final = client.server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(client_final, RFC_CLIENT_FINAL.as_bytes());
    client.server_final(RFC_SERVER_FINAL.as_bytes()).unwrap();
}

#[test]
fn rfc7677_client_against_server() {
    let mut client = ScramClient::with_nonce(RFC_PASSWORD, RFC_CLIENT_NONCE);
    client.username = "user".to_owned();
    let mut server = ScramServer::with_nonce(rfc_secret(), RFC_SERVER_NONCE);
    let outcome = exchange(&mut client, &mut server).unwrap();
    assert_eq!(outcome.server_final, RFC_SERVER_FINAL.as_bytes());
}

#[test]
fn default_client_first_has_empty_username() {
    let mut client = ScramClient::with_nonce("pw", "abc");
    assert_eq!(client.client_first(), b"n,,n=,r=abc");
    let mut random = ScramClient::new("pw");
    let msg = String::from_utf8(random.client_first()).unwrap();
    let nonce = msg.strip_prefix("n,,n=,r=").unwrap();
    assert_eq!(nonce.len(), 24);
    assert_eq!(STANDARD.decode(nonce).unwrap().len(), 18);
}

#[test]
fn random_server_nonce() {
    let mut server = ScramServer::new(cheap_secret());
    let first = String::from_utf8(server.client_first(b"n,,n=,r=abc").unwrap()).unwrap();
    let nonce = first
        .strip_prefix("r=abc")
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    assert_eq!(STANDARD.decode(nonce).unwrap().len(), 18);
}

#[test]
fn username_is_escaped() {
    let mut client = ScramClient::with_nonce("pw", "abc");
    client.username = "a,b=c".to_owned();
    assert_eq!(client.client_first(), b"n,,n=a=2Cb=3Dc,r=abc");
}

#[test]
fn postgres_verifier() {
    let secret = ScramSecret::parse(PG_VERIFIER).expect("PostgreSQL verifier parses");
    assert_eq!(secret.iterations, 4096);
    assert_eq!(secret.salt.len(), 16);
    assert_eq!(secret.to_verifier(), PG_VERIFIER);
    // Our derivation matches PostgreSQL's.
    assert_eq!(
        ScramSecret::from_password("secret", &secret.salt, 4096),
        secret
    );

    let mut client = ScramClient::new("secret");
    let mut server = ScramServer::new(secret.clone());
    exchange(&mut client, &mut server).expect("right password verifies");

    let mut client = ScramClient::new("wrong");
    let mut server = ScramServer::new(secret);
    assert_eq!(
        exchange(&mut client, &mut server).unwrap_err(),
        ScramError::BadProof
    );
}

#[test]
fn with_keys_reuses_recovered_client_key() {
    let secret = ScramSecret::parse(PG_VERIFIER).unwrap();
    let mut client = ScramClient::new("secret");
    let mut server = ScramServer::new(secret.clone());
    let outcome = exchange(&mut client, &mut server).unwrap();

    let mut client = ScramClient::with_keys(outcome.client_key, secret.server_key);
    let mut server = ScramServer::new(secret.clone());
    let again = exchange(&mut client, &mut server).expect("key-based login verifies");
    assert_eq!(again.client_key, outcome.client_key);

    // A wrong ClientKey is rejected by the server.
    let mut bad = outcome.client_key;
    bad[0] ^= 1;
    let mut client = ScramClient::with_keys(bad, secret.server_key);
    let mut server = ScramServer::new(secret.clone());
    assert_eq!(
        exchange(&mut client, &mut server).unwrap_err(),
        ScramError::BadProof
    );

    // A wrong ServerKey makes the client reject the server.
    let mut bad = secret.server_key;
    bad[0] ^= 1;
    let mut client = ScramClient::with_keys(outcome.client_key, bad);
    let mut server = ScramServer::new(secret);
    assert!(matches!(
        exchange(&mut client, &mut server),
        Err(ScramError::BadServer(_))
    ));
}

#[test]
fn secret_parse_rejects_garbage() {
    let ok = cheap_secret().to_verifier();
    assert_eq!(ScramSecret::parse(&ok), Some(cheap_secret()));
    for bad in [
        "",
        "md53175bce1d3201d16594cebf9d7eb3f9d",
        "SCRAM-SHA-256$",
        "SCRAM-SHA-256$4096:c2FsdA==$",
        "SCRAM-SHA-1$4096:dp6Nu0GF7frYfUEC353f+g==$LGZoGzp7weEi+sE8LT/NyBZuefY3NBICaYdXk+3LMyY=:RpuF2eNUx5iIVcBN5m9rX+2lJl3yAcy4LKGMMBddv/s=",
        "SCRAM-SHA-256$0:dp6Nu0GF7frYfUEC353f+g==$LGZoGzp7weEi+sE8LT/NyBZuefY3NBICaYdXk+3LMyY=:RpuF2eNUx5iIVcBN5m9rX+2lJl3yAcy4LKGMMBddv/s=",
        "SCRAM-SHA-256$-1:dp6Nu0GF7frYfUEC353f+g==$LGZoGzp7weEi+sE8LT/NyBZuefY3NBICaYdXk+3LMyY=:RpuF2eNUx5iIVcBN5m9rX+2lJl3yAcy4LKGMMBddv/s=",
        "SCRAM-SHA-256$+4096:dp6Nu0GF7frYfUEC353f+g==$LGZoGzp7weEi+sE8LT/NyBZuefY3NBICaYdXk+3LMyY=:RpuF2eNUx5iIVcBN5m9rX+2lJl3yAcy4LKGMMBddv/s=",
        "SCRAM-SHA-256$4096:!!$LGZoGzp7weEi+sE8LT/NyBZuefY3NBICaYdXk+3LMyY=:RpuF2eNUx5iIVcBN5m9rX+2lJl3yAcy4LKGMMBddv/s=",
        "SCRAM-SHA-256$4096:dp6Nu0GF7frYfUEC353f+g==$c2hvcnQ=:RpuF2eNUx5iIVcBN5m9rX+2lJl3yAcy4LKGMMBddv/s=",
        "SCRAM-SHA-256$4096:dp6Nu0GF7frYfUEC353f+g==$LGZoGzp7weEi+sE8LT/NyBZuefY3NBICaYdXk+3LMyY=:RpuF2eNUx5iIVcBN5m9rX+2lJl3yAcy4LKGMMBddv/s",
        "SCRAM-SHA-256$99999999999:dp6Nu0GF7frYfUEC353f+g==$LGZoGzp7weEi+sE8LT/NyBZuefY3NBICaYdXk+3LMyY=:RpuF2eNUx5iIVcBN5m9rX+2lJl3yAcy4LKGMMBddv/s=",
    ] {
        assert_eq!(ScramSecret::parse(bad), None, "{bad}");
    }
}

#[test]
fn debug_hides_secrets() {
    let secret = ScramSecret::parse(PG_VERIFIER).unwrap();
    let key_b64 = STANDARD.encode(secret.stored_key);
    let mut client = ScramClient::new("hunter2");
    let mut server = ScramServer::new(secret.clone());
    let outcome = exchange(&mut client, &mut ScramServer::new(cheap_secret()));
    assert!(outcome.is_err());
    let mut ok_client = ScramClient::new("secret");
    let outcome = exchange(&mut ok_client, &mut server).unwrap();
    for text in [
        format!("{secret:?}"),
        format!("{client:?}"),
        format!("{server:?}"),
        format!("{outcome:?}"),
    ] {
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains(&key_b64), "{text}");
        assert!(!text.contains("LGZo"), "{text}");
        assert!(
            !text.contains(&format!("{:?}", outcome.client_key)),
            "{text}"
        );
    }
}

#[test]
fn gs2_flags() {
    // "y,," (client supports binding, thinks we don't): binding field is base64("y,,").
    let mut server = ScramServer::with_nonce(cheap_secret(), "SRV");
    let server_first = server.client_first(b"y,,n=,r=abc").unwrap();
    assert_eq!(server_first, b"r=abcSRV,s=c2FsdHk=,i=1");
    let y_final = signed_final("n=,r=abc", "r=abcSRV,s=c2FsdHk=,i=1", "c=eSws,r=abcSRV");
    server.client_final(y_final.as_bytes()).unwrap();
    let client_final = signed_final("n=,r=abc", "r=abcSRV,s=c2FsdHk=,i=1", "c=biws,r=abcSRV");
    let mut server = ScramServer::with_nonce(cheap_secret(), "SRV");
    server.client_first(b"n,,n=,r=abc").unwrap();
    server.client_final(client_final.as_bytes()).unwrap();

    // "y,," with "biws" does not match.
    let mut server = ScramServer::with_nonce(cheap_secret(), "SRV");
    server.client_first(b"y,,n=,r=abc").unwrap();
    assert!(matches!(
        server.client_final(client_final.as_bytes()),
        Err(ScramError::Malformed(_))
    ));

    // "n,," with "eSws" does not match either.
    let mut server = ScramServer::with_nonce(cheap_secret(), "SRV");
    server.client_first(b"n,,n=,r=abc").unwrap();
    assert!(matches!(
        server.client_final(y_final.as_bytes()),
        Err(ScramError::Malformed(_))
    ));

    // Channel binding requested: not offered.
    let mut server = ScramServer::new(cheap_secret());
    assert!(matches!(
        server.client_first(b"p=tls-server-end-point,,n=,r=abc"),
        Err(ScramError::Malformed(_))
    ));
}

#[test]
fn server_rejects_bad_client_messages() {
    for bad in [
        &b""[..],
        b"n",
        b"n,",
        b"x,,n=,r=abc",
        b"n,a=someone,n=,r=abc",
        b"n,,m=ext,n=,r=abc",
        b"n,,n=,r=",
        b"n,,n=,r=a b",
        b"n,,r=abc",
        b"n,,n=",
        b"n,,n=,r=abc,1=x",
        b"n,,n=,r=abc,",
        b"n,,n=,r=\xff",
    ] {
        let mut server = ScramServer::new(cheap_secret());
        assert!(
            matches!(server.client_first(bad), Err(ScramError::Malformed(_))),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    // Extensions after the nonce are ignored.
    let mut server = ScramServer::new(cheap_secret());
    server.client_first(b"n,,n=,r=abc,x=ext").unwrap();

    let proof = STANDARD.encode([0u8; 32]);
    for bad in [
        String::new(),
        "c=biws,r=abcSRV".to_owned(),
        format!("c=biws,r=abcSRVX,p={proof}"),
        format!("c=biws,r=abc,p={proof}"),
        format!("r=abcSRV,p={proof}"),
        format!("c=biws,p={proof}"),
        "c=biws,r=abcSRV,p=AAAA".to_owned(),
        "c=biws,r=abcSRV,p=!!!".to_owned(),
        format!("c=biws,r=abcSRV,p={proof},x=1"),
        format!("c=biws,r=abcSRV,,p={proof}"),
    ] {
        let mut server = ScramServer::with_nonce(cheap_secret(), "SRV");
        server.client_first(b"n,,n=,r=abc").unwrap();
        assert!(
            matches!(
                server.client_final(bad.as_bytes()),
                Err(ScramError::Malformed(_))
            ),
            "{bad}"
        );
    }
    // Well-formed but wrong proof.
    let mut server = ScramServer::with_nonce(cheap_secret(), "SRV");
    server.client_first(b"n,,n=,r=abc").unwrap();
    assert_eq!(
        server
            .client_final(format!("c=biws,r=abcSRV,p={proof}").as_bytes())
            .unwrap_err(),
        ScramError::BadProof
    );
}

#[test]
fn client_rejects_bad_server_messages() {
    let first = |client: &mut ScramClient| {
        client.client_first();
    };
    for (bad, bad_server) in [
        (&b"r=abc,s=c2FsdHk=,i=1"[..], true),
        (b"r=ab,s=c2FsdHk=,i=1", true),
        (b"r=xyzSRV,s=c2FsdHk=,i=1", true),
        (b"r=abcSRV,s=!!,i=1", false),
        (b"r=abcSRV,s=c2FsdHk=,i=0", false),
        (b"r=abcSRV,s=c2FsdHk=,i=-1", false),
        (b"r=abcSRV,s=c2FsdHk=,i=+1", false),
        (b"r=abcSRV,s=c2FsdHk=,i=", false),
        (b"r=abcSRV,s=c2FsdHk=,i=99999999999", false),
        (b"r=abcSRV,s=c2FsdHk=", false),
        (b"r=abcSRV,i=1", false),
        (b"m=x,r=abcSRV,s=c2FsdHk=,i=1", false),
        (b"r=abcSRV,s=c2FsdHk=,i=1,garbage", false),
        (b"\xff", false),
        (b"", false),
    ] {
        let mut client = ScramClient::with_nonce("pw", "abc");
        first(&mut client);
        let err = client.server_first(bad).unwrap_err();
        assert_eq!(
            matches!(err, ScramError::BadServer(_)),
            bad_server,
            "{:?}: {err:?}",
            String::from_utf8_lossy(bad)
        );
        assert!(matches!(
            err,
            ScramError::BadServer(_) | ScramError::Malformed(_)
        ));
    }

    let sig = STANDARD.encode([0u8; 32]);
    for (bad, bad_server) in [
        ("e=invalid-proof".to_owned(), true),
        ("e=something-else".to_owned(), true),
        (format!("v={sig}"), true),
        ("v=AAAA".to_owned(), false),
        ("v=!!".to_owned(), false),
        ("x=1".to_owned(), false),
        (String::new(), false),
    ] {
        let mut client = ScramClient::with_nonce("pw", "abc");
        first(&mut client);
        client.server_first(b"r=abcSRV,s=c2FsdHk=,i=1").unwrap();
        let err = client.server_final(bad.as_bytes()).unwrap_err();
        assert_eq!(
            matches!(err, ScramError::BadServer(_)),
            bad_server,
            "{bad}: {err:?}"
        );
    }
    let mut client = ScramClient::with_nonce("pw", "abc");
    first(&mut client);
    client.server_first(b"r=abcSRV,s=c2FsdHk=,i=1").unwrap();
    assert_eq!(
        client.server_final(b"e=invalid-proof"),
        Err(ScramError::BadServer("invalid-proof"))
    );
}

#[test]
fn out_of_order() {
    // Server: final before first.
    let mut server = ScramServer::new(cheap_secret());
    assert_eq!(
        server.client_final(b"c=biws,r=x,p=x").unwrap_err(),
        ScramError::OutOfOrder
    );
    // Server: first twice.
    let mut server = ScramServer::new(cheap_secret());
    server.client_first(b"n,,n=,r=abc").unwrap();
    assert_eq!(
        server.client_first(b"n,,n=,r=abc").unwrap_err(),
        ScramError::OutOfOrder
    );
    // Client: server_first before client_first; server_final before server_first.
    let mut client = ScramClient::new("pw");
    assert_eq!(
        client.server_first(b"r=abc,s=c2FsdHk=,i=1").unwrap_err(),
        ScramError::OutOfOrder
    );
    let mut client = ScramClient::new("pw");
    assert_eq!(
        client.server_final(b"v=x").unwrap_err(),
        ScramError::OutOfOrder
    );
    client.client_first();
    assert_eq!(
        client.server_final(b"v=x").unwrap_err(),
        ScramError::OutOfOrder
    );

    // After a complete exchange, nothing more is accepted.
    let mut client = ScramClient::with_nonce("pw", "abc");
    let mut server = ScramServer::with_nonce(cheap_secret(), "SRV");
    let outcome = exchange(&mut client, &mut server).unwrap();
    assert_eq!(
        server.client_final(b"c=biws,r=abcSRV,p=x").unwrap_err(),
        ScramError::OutOfOrder
    );
    assert_eq!(
        client.server_final(&outcome.server_final).unwrap_err(),
        ScramError::OutOfOrder
    );
    assert_eq!(
        client.server_first(b"r=abcSRV,s=c2FsdHk=,i=1").unwrap_err(),
        ScramError::OutOfOrder
    );

    // A failed step ends the exchange: a retry is out of order.
    let mut server = ScramServer::with_nonce(cheap_secret(), "SRV");
    server.client_first(b"n,,n=,r=abc").unwrap();
    let proof = STANDARD.encode([0u8; 32]);
    let wrong = format!("c=biws,r=abcSRV,p={proof}");
    assert_eq!(
        server.client_final(wrong.as_bytes()).unwrap_err(),
        ScramError::BadProof
    );
    assert_eq!(
        server.client_final(wrong.as_bytes()).unwrap_err(),
        ScramError::OutOfOrder
    );
}

/// Messages that are partly right, to reach the deeper parsing paths.
fn near_miss() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..80),
        "[a-z=,]{0,40}".prop_map(String::into_bytes),
        "[ -~]{0,60}".prop_map(|s| format!("c=biws,r=abcSRV,{s}").into_bytes()),
        "[ -~]{0,60}".prop_map(|s| format!("c=biws,r=abcSRV,p={s}").into_bytes()),
        "[ -~]{0,60}".prop_map(|s| format!("n,,n=,r={s}").into_bytes()),
        "[ -~]{0,60}".prop_map(|s| format!("r=abcSRV,s={s}").into_bytes()),
        "[0-9]{0,3}[ -~]{0,10}".prop_map(|s| format!("r=abcSRV,s=c2FsdHk=,i={s}").into_bytes()),
        "[ -~]{0,60}".prop_map(|s| format!("v={s}").into_bytes()),
        "[ -~]{0,60}".prop_map(|s| format!("e={s}").into_bytes()),
    ]
}

proptest! {
    #[test]
    fn server_client_first_never_panics(msg in near_miss()) {
        let mut server = ScramServer::with_nonce(cheap_secret(), "SRV");
        let _ = server.client_first(&msg);
    }

    #[test]
    fn server_client_final_never_panics(msg in near_miss()) {
        let mut server = ScramServer::with_nonce(cheap_secret(), "SRV");
        server.client_first(b"n,,n=,r=abc").unwrap();
        let _ = server.client_final(&msg);
    }

    #[test]
    fn client_server_first_never_panics(msg in near_miss()) {
        let mut client = ScramClient::with_nonce("pw", "abc");
        client.client_first();
        let _ = client.server_first(&msg);
        let mut client = ScramClient::with_keys([1; 32], [2; 32]);
        client.client_first();
        let _ = client.server_first(&msg);
    }

    #[test]
    fn client_server_final_never_panics(msg in near_miss()) {
        let mut client = ScramClient::with_nonce("pw", "abc");
        client.client_first();
        client.server_first(b"r=abcSRV,s=c2FsdHk=,i=1").unwrap();
        let _ = client.server_final(&msg);
    }

    #[test]
    fn secret_parse_never_panics(s in any::<String>()) {
        let _ = ScramSecret::parse(&s);
    }

    #[test]
    fn secret_parse_near_miss_never_panics(s in "[ -~]{0,120}") {
        let _ = ScramSecret::parse(&format!("SCRAM-SHA-256${s}"));
    }

    #[test]
    fn secret_round_trips(salt in proptest::collection::vec(any::<u8>(), 0..32), iter in 1u32..4) {
        let secret = ScramSecret::from_password("pw", &salt, iter);
        prop_assert_eq!(ScramSecret::parse(&secret.to_verifier()), Some(secret));
    }
}

// ---------------------------------------------------------------------------------------------
// Channel binding (SCRAM-SHA-256-PLUS)
// ---------------------------------------------------------------------------------------------

/// A self-signed ECDSA P-256 certificate signed with ecdsa-with-SHA384, made by OpenSSL 3
/// (`openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -sha384`), as DER in base64.
const CERT_DER_B64: &str = "MIIBhDCCASugAwIBAgIURfz1DvHyGSiFThl/n1A60t9Y+w0wCgYIKoZIzj0EAwMwGDEWMBQGA1UEAwwNcGdjb3JyYWwtdGVzdDAeFw0yNjExMjMwMjM1MTNaFw0zNjExMjAwMjM1MTNaMBgxFjAUBgNVBAMMDXBnY29ycmFsLXRlc3QwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASMn//+KBghvzULOVE5T5V9aUPXQrSRvvfGNLIvS42l9KaV6W5TZ/gIwADRea75rDzTGTrYqnFtG4BMgiLBKRXSo1MwUTAdBgNVHQ4EFgQUhs2LshUcPwVh/ys1aTjas40ahoowHwYDVR0jBBgwFoAUhs2LshUcPwVh/ys1aTjas40ahoowDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAwNHADBEAiBI5Sx+daJ/AT2UCrJzRAW+sbSUozDPwsGkhFWeM/KrQwIgUK6IowFWHyRW7Tk/2CkuITrC+Ke8xuQX6A6p3lIbYxQ=";
/// `openssl dgst -sha256` of that DER.
const CERT_SHA256: &str = "ae484814d4587abb76c0658c25916565a54460d919e2cce0efaf6c508e5b1291";
/// `openssl x509 -fingerprint -sha384` of that certificate: its tls-server-end-point value.
const CERT_SHA384: &str = "e0d273b5f25d6522c0008aa54fdf0877b6004c8cc8a4fbf2720dd3073dab8dbf\
                           145f1643ea55ac4d3ab70bea35c2c6c6";

// A PLUS exchange with the RFC 7677 password, salt and nonces (empty username, as PostgreSQL
// clients send), bound to the certificate above; computed independently with Python's hashlib
// and hmac.
const PLUS_CLIENT_FIRST: &str = "p=tls-server-end-point,,n=,r=rOprNGfwEbeRWgbNEkqO";
const PLUS_CLIENT_FINAL: &str = "c=cD10bHMtc2VydmVyLWVuZC1wb2ludCws4NJztfJdZSLAAIqlT98Id7YATIz\
                                 IpPvycg3TBz2rjb8UXxZD6lWsTTq3C+o1wsbG,\
                                 r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                 p=c310Konr/j/junILvF28d2K8OfwgkcCQTHbE0nJFrMY=";
const PLUS_SERVER_FINAL: &str = "v=StQSh+iuix9cBrQeNc8DmOvZSMdk6GzFhaBTVkdDLjI=";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn cert_binding() -> Vec<u8> {
    let der = STANDARD.decode(CERT_DER_B64).unwrap();
    tls_server_end_point(&der, EndPointHash::Sha384)
}

/// Runs a full exchange, the server first taking the mechanism the client names.
fn exchange_selecting(
    client: &mut ScramClient,
    server: &mut ScramServer,
) -> Result<ServerOutcome, ScramError> {
    server.select_mechanism(client.mechanism().as_bytes())?;
    exchange(client, server)
}

#[test]
fn mechanism_lists() {
    assert_eq!(SCRAM_SHA_256, "SCRAM-SHA-256");
    assert_eq!(SCRAM_SHA_256_PLUS, "SCRAM-SHA-256-PLUS");
    assert_eq!(mechanisms(true), ["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"]);
    assert_eq!(mechanisms(false), ["SCRAM-SHA-256"]);
    assert_eq!(
        ScramServer::new(cheap_secret()).mechanisms(),
        ["SCRAM-SHA-256"]
    );
    assert_eq!(
        ScramServer::new(cheap_secret())
            .channel_binding(vec![1, 2, 3])
            .mechanisms(),
        ["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"]
    );
}

#[test]
fn end_point_hash() {
    let der = STANDARD.decode(CERT_DER_B64).unwrap();
    // ecdsa-with-SHA384 calls for SHA-384.
    let hash = hash_for_signature_oid("1.2.840.10045.4.3.3").unwrap();
    assert_eq!(hash, EndPointHash::Sha384);
    assert_eq!(hex(&tls_server_end_point(&der, hash)), CERT_SHA384);
    assert_eq!(
        hex(&tls_server_end_point(&der, EndPointHash::Sha256)),
        CERT_SHA256
    );
    assert_eq!(tls_server_end_point(&der, EndPointHash::Sha224).len(), 28);
    assert_eq!(tls_server_end_point(&der, EndPointHash::Sha512).len(), 64);
    assert_eq!(
        tls_server_end_point(b"", EndPointHash::Sha256),
        sha256(b"").to_vec()
    );

    for (oid, hash) in [
        // MD5 and SHA-1 are upgraded to SHA-256.
        ("1.2.840.113549.1.1.4", Some(EndPointHash::Sha256)),
        ("1.2.840.113549.1.1.5", Some(EndPointHash::Sha256)),
        ("1.2.840.10045.4.1", Some(EndPointHash::Sha256)),
        ("1.2.840.10040.4.3", Some(EndPointHash::Sha256)),
        ("1.2.840.113549.1.1.14", Some(EndPointHash::Sha224)),
        ("1.2.840.113549.1.1.11", Some(EndPointHash::Sha256)),
        ("1.2.840.113549.1.1.12", Some(EndPointHash::Sha384)),
        ("1.2.840.113549.1.1.13", Some(EndPointHash::Sha512)),
        ("1.2.840.10045.4.3.1", Some(EndPointHash::Sha224)),
        ("1.2.840.10045.4.3.2", Some(EndPointHash::Sha256)),
        ("1.2.840.10045.4.3.4", Some(EndPointHash::Sha512)),
        ("2.16.840.1.101.3.4.3.2", Some(EndPointHash::Sha256)),
        // RSASSA-PSS, Ed25519, Ed448: not defined by the OID.
        ("1.2.840.113549.1.1.10", None),
        ("1.3.101.112", None),
        ("1.3.101.113", None),
        ("", None),
        ("1.2.840.113549.1.1.11.", None),
    ] {
        assert_eq!(hash_for_signature_oid(oid), hash, "{oid}");
    }
}

#[test]
fn plus_fixed_transcript() {
    let binding = cert_binding();

    let mut client =
        ScramClient::with_nonce(RFC_PASSWORD, RFC_CLIENT_NONCE).channel_binding(binding.clone());
    assert_eq!(client.mechanism(), SCRAM_SHA_256_PLUS);
    assert_eq!(client.client_first(), PLUS_CLIENT_FIRST.as_bytes());
    let client_final = client.server_first(RFC_SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(client_final, PLUS_CLIENT_FINAL.as_bytes());
    client.server_final(PLUS_SERVER_FINAL.as_bytes()).unwrap();

    let mut server =
        ScramServer::with_nonce(rfc_secret(), RFC_SERVER_NONCE).channel_binding(binding);
    server.select_mechanism(b"SCRAM-SHA-256-PLUS").unwrap();
    let server_first = server.client_first(PLUS_CLIENT_FIRST.as_bytes()).unwrap();
    assert_eq!(server_first, RFC_SERVER_FIRST.as_bytes());
    let outcome = server.client_final(PLUS_CLIENT_FINAL.as_bytes()).unwrap();
    assert_eq!(outcome.server_final, PLUS_SERVER_FINAL.as_bytes());
}

#[test]
fn plus_exchange() {
    let secret = ScramSecret::parse(PG_VERIFIER).unwrap();
    let binding = cert_binding();

    let mut client = ScramClient::new("secret").channel_binding(binding.clone());
    let mut server = ScramServer::new(secret.clone()).channel_binding(binding.clone());
    let outcome = exchange_selecting(&mut client, &mut server).expect("bound login verifies");

    // The key-based form binds too.
    let mut client = ScramClient::with_keys(outcome.client_key, secret.server_key)
        .channel_binding(binding.clone());
    assert_eq!(client.mechanism(), SCRAM_SHA_256_PLUS);
    let mut server = ScramServer::new(secret.clone()).channel_binding(binding.clone());
    exchange_selecting(&mut client, &mut server).expect("bound key-based login verifies");

    // Wrong password with binding: still a bad proof.
    let mut client = ScramClient::new("wrong").channel_binding(binding.clone());
    let mut server = ScramServer::new(secret.clone()).channel_binding(binding.clone());
    assert_eq!(
        exchange_selecting(&mut client, &mut server).unwrap_err(),
        ScramError::BadProof
    );

    // A client without binding still logs in to a server that offers it (flag "n").
    let mut client = ScramClient::new("secret");
    assert_eq!(client.mechanism(), SCRAM_SHA_256);
    let mut server = ScramServer::new(secret.clone()).channel_binding(binding.clone());
    exchange_selecting(&mut client, &mut server).unwrap();
    // Also when the caller never selects a mechanism (existing callers).
    let mut client = ScramClient::new("secret");
    let mut server = ScramServer::new(secret).channel_binding(binding);
    exchange(&mut client, &mut server).unwrap();
}

#[test]
fn plus_binding_mismatch() {
    let secret = ScramSecret::parse(PG_VERIFIER).unwrap();
    let binding = cert_binding();
    let mut other = binding.clone();
    other[0] ^= 1;

    // The client saw another certificate.
    let mut client = ScramClient::new("secret").channel_binding(other);
    let mut server = ScramServer::new(secret.clone()).channel_binding(binding.clone());
    assert_eq!(
        exchange_selecting(&mut client, &mut server).unwrap_err(),
        ScramError::BindingMismatch
    );
    assert_eq!(
        ScramError::BindingMismatch.to_string(),
        "SCRAM channel binding check failed"
    );

    // A truncated binding, and the header alone, do not match either.
    for c in [
        STANDARD.encode(plus_gs2_header()),
        STANDARD.encode([plus_gs2_header().as_bytes(), &binding[..10]].concat()),
        "biws".to_owned(),
    ] {
        let mut server =
            ScramServer::with_nonce(cheap_secret(), "SRV").channel_binding(binding.clone());
        server.select_mechanism(b"SCRAM-SHA-256-PLUS").unwrap();
        server
            .client_first(b"p=tls-server-end-point,,n=,r=abc")
            .unwrap();
        let msg = signed_final(
            "n=,r=abc",
            "r=abcSRV,s=c2FsdHk=,i=1",
            &format!("c={c},r=abcSRV"),
        );
        assert_eq!(
            server.client_final(msg.as_bytes()).unwrap_err(),
            ScramError::BindingMismatch,
            "{c}"
        );
    }

    // The right binding with a hand-made message verifies.
    let mut server =
        ScramServer::with_nonce(cheap_secret(), "SRV").channel_binding(binding.clone());
    server.select_mechanism(b"SCRAM-SHA-256-PLUS").unwrap();
    server
        .client_first(b"p=tls-server-end-point,,n=,r=abc")
        .unwrap();
    let c = plus_cbind(&binding);
    let msg = signed_final(
        "n=,r=abc",
        "r=abcSRV,s=c2FsdHk=,i=1",
        &format!("c={c},r=abcSRV"),
    );
    server.client_final(msg.as_bytes()).unwrap();
}

#[test]
fn flag_y() {
    // Refused when the server offers binding: a downgrade.
    let mut server = ScramServer::new(cheap_secret()).channel_binding(vec![7; 32]);
    server.select_mechanism(b"SCRAM-SHA-256").unwrap();
    assert_eq!(
        server.client_first(b"y,,n=,r=abc").unwrap_err(),
        ScramError::BindingNegotiation
    );
    assert_eq!(
        ScramError::BindingNegotiation.to_string(),
        "SCRAM channel binding negotiation error"
    );
    // Same without an explicit mechanism selection.
    let mut server = ScramServer::new(cheap_secret()).channel_binding(vec![7; 32]);
    assert_eq!(
        server.client_first(b"y,,n=,r=abc").unwrap_err(),
        ScramError::BindingNegotiation
    );

    // Accepted when it does not: a full exchange with our client sending "y".
    let mut client = ScramClient::with_nonce("pw", "abc").binding_not_offered();
    assert_eq!(client.mechanism(), SCRAM_SHA_256);
    assert_eq!(client.client_first(), b"y,,n=,r=abc");
    let mut client = ScramClient::with_nonce("pw", "abc").binding_not_offered();
    let mut server = ScramServer::with_nonce(cheap_secret(), "SRV");
    exchange_selecting(&mut client, &mut server).unwrap();

    // Our "y" client against a server that offers binding fails the same way.
    let mut client = ScramClient::new("pw").binding_not_offered();
    let mut server = ScramServer::new(cheap_secret()).channel_binding(vec![7; 32]);
    assert_eq!(
        exchange_selecting(&mut client, &mut server).unwrap_err(),
        ScramError::BindingNegotiation
    );
}

#[test]
fn flag_p_needs_plus() {
    // "p" with the plain mechanism, whether or not binding is offered.
    for offered in [false, true] {
        let mut server = ScramServer::new(cheap_secret());
        if offered {
            server = server.channel_binding(vec![7; 32]);
        }
        server.select_mechanism(b"SCRAM-SHA-256").unwrap();
        assert!(
            matches!(
                server.client_first(b"p=tls-server-end-point,,n=,r=abc"),
                Err(ScramError::Malformed(_))
            ),
            "{offered}"
        );
    }
    // Our binding client against a server that did not select PLUS.
    let mut client = ScramClient::new("pw").channel_binding(vec![7; 32]);
    let mut server = ScramServer::new(cheap_secret()).channel_binding(vec![7; 32]);
    server.select_mechanism(b"SCRAM-SHA-256").unwrap();
    assert!(matches!(
        exchange(&mut client, &mut server),
        Err(ScramError::Malformed(_))
    ));
}

#[test]
fn plus_needs_flag_p() {
    for first in [&b"n,,n=,r=abc"[..], b"y,,n=,r=abc"] {
        let mut server = ScramServer::new(cheap_secret()).channel_binding(vec![7; 32]);
        server.select_mechanism(b"SCRAM-SHA-256-PLUS").unwrap();
        assert!(matches!(
            server.client_first(first),
            Err(ScramError::Malformed(_))
        ));
    }
    for (first, why) in [
        (
            &b"p=tls-unique,,n=,r=abc"[..],
            "unsupported channel binding type",
        ),
        (b"p=,,n=,r=abc", "unsupported channel binding type"),
        (
            b"p=tls-server-end-point,a=bob,n=,r=abc",
            "authorization identity is not supported",
        ),
        (b"p,,n=,r=abc", "invalid gs2 channel binding flag"),
    ] {
        let mut server = ScramServer::new(cheap_secret()).channel_binding(vec![7; 32]);
        server.select_mechanism(b"SCRAM-SHA-256-PLUS").unwrap();
        assert_eq!(
            server.client_first(first).unwrap_err(),
            ScramError::Malformed(why)
        );
    }
}

#[test]
fn mechanism_selection() {
    // PLUS when the server offers no binding: refused, and the exchange is over.
    let mut server = ScramServer::new(cheap_secret());
    assert_eq!(
        server.select_mechanism(b"SCRAM-SHA-256-PLUS").unwrap_err(),
        ScramError::InvalidMechanism
    );
    assert_eq!(
        server.client_first(b"n,,n=,r=abc").unwrap_err(),
        ScramError::OutOfOrder
    );
    // Our binding client against a server without binding.
    let mut client = ScramClient::new("pw").channel_binding(vec![7; 32]);
    let mut server = ScramServer::new(cheap_secret());
    assert_eq!(
        exchange_selecting(&mut client, &mut server).unwrap_err(),
        ScramError::InvalidMechanism
    );

    for bad in [
        &b""[..],
        b"SCRAM-SHA-1",
        b"scram-sha-256",
        b"SCRAM-SHA-256\0",
        b"\xff",
    ] {
        let mut server = ScramServer::new(cheap_secret()).channel_binding(vec![7; 32]);
        assert_eq!(
            server.select_mechanism(bad).unwrap_err(),
            ScramError::InvalidMechanism
        );
    }

    // Selecting after client-first-message is out of order.
    let mut server = ScramServer::new(cheap_secret()).channel_binding(vec![7; 32]);
    server.client_first(b"n,,n=,r=abc").unwrap();
    assert_eq!(
        server.select_mechanism(b"SCRAM-SHA-256").unwrap_err(),
        ScramError::OutOfOrder
    );
}

#[test]
fn client_negotiates_like_libpq_prefer() {
    let data = vec![7u8; 32];
    let both = ["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"];
    let plain = ["SCRAM-SHA-256"];
    let plus_only = ["SCRAM-SHA-256-PLUS"];
    let first = |offered: &[&str], binding: Option<Vec<u8>>| {
        let mut client = ScramClient::with_nonce("pw", "abc").negotiate(offered, binding)?;
        Some((
            client.mechanism(),
            String::from_utf8(client.client_first()).unwrap(),
        ))
    };
    let p = "p=tls-server-end-point,,n=,r=abc".to_owned();
    assert_eq!(
        first(&both, Some(data.clone())),
        Some((SCRAM_SHA_256_PLUS, p.clone()))
    );
    assert_eq!(
        first(&plus_only, Some(data.clone())),
        Some((SCRAM_SHA_256_PLUS, p))
    );
    assert_eq!(
        first(&plain, Some(data.clone())),
        Some((SCRAM_SHA_256, "y,,n=,r=abc".to_owned()))
    );
    assert_eq!(
        first(&both, None),
        Some((SCRAM_SHA_256, "n,,n=,r=abc".to_owned()))
    );
    assert_eq!(
        first(&plain, None),
        Some((SCRAM_SHA_256, "n,,n=,r=abc".to_owned()))
    );
    assert_eq!(first(&plus_only, None), None);
    assert_eq!(first(&["SCRAM-SHA-1"], Some(data.clone())), None);
    assert_eq!(first(&[], None), None);
    // negotiate() with no binding undoes an earlier choice.
    let client = ScramClient::new("pw")
        .binding_not_offered()
        .negotiate(&both, None)
        .unwrap();
    assert_eq!(client.mechanism(), SCRAM_SHA_256);

    // End to end with a server offering binding.
    let secret = cheap_secret();
    let mut server = ScramServer::new(secret.clone()).channel_binding(data.clone());
    let mut client = ScramClient::new("pw")
        .negotiate(server.mechanisms(), Some(data.clone()))
        .unwrap();
    exchange_selecting(&mut client, &mut server).unwrap();
}

proptest! {
    #[test]
    fn plus_server_never_panics(first in near_miss(), last in near_miss()) {
        let mut server = ScramServer::with_nonce(cheap_secret(), "SRV").channel_binding(vec![7; 32]);
        server.select_mechanism(b"SCRAM-SHA-256-PLUS").unwrap();
        let _ = server.client_first(&first);
        let mut server = ScramServer::with_nonce(cheap_secret(), "SRV").channel_binding(vec![7; 32]);
        server.select_mechanism(b"SCRAM-SHA-256-PLUS").unwrap();
        server.client_first(b"p=tls-server-end-point,,n=,r=abc").unwrap();
        let _ = server.client_final(&last);
    }

    #[test]
    fn plus_mechanism_never_panics(mech in proptest::collection::vec(any::<u8>(), 0..24)) {
        let mut server = ScramServer::new(cheap_secret()).channel_binding(vec![7; 32]);
        let _ = server.select_mechanism(&mech);
    }
}

/// Verifiers made by PostgreSQL 15 (`CREATE ROLE ... PASSWORD`, password_encryption =
/// scram-sha-256) for non-ASCII passwords: SASLprep normalizes (NFKC), maps non-ASCII spaces to
/// a space and drops soft hyphens; a password SASLprep refuses (a private-use character, or
/// nothing left after mapping) is hashed as it is. The same secret must come out here.
#[test]
fn saslprep_as_postgresql() {
    let cases = [
        ("p\u{e4}ssw\u{f6}rd", "SCRAM-SHA-256$4096:Ci6JU1yXcvD5ekpFZQpzrg==$GFTjxXhVpdejJfGlSYZZuiWxdt0hAFuZe+7xKNey7Gs=:82GqaXuk8nOn+G9jb25h0dosHZZk7LcXrwW6wHpSgsQ="),
        ("pa\u{308}sswo\u{308}rd", "SCRAM-SHA-256$4096:kCGx1Vh/5vkFoZ3EeYdFdg==$5oN3aS8Hwxm6zlqkM3q8mOyI296IBqvYcLAuD+BeJlg=:A1hQzHhJF8n9pQ9ciNICHsJdd6LMIgIgZ1XBGK7AAo4="),
        ("a\u{a0}b", "SCRAM-SHA-256$4096:GqGAB8A91Igz6f74McuH1w==$YJukSQcJ20N0cKqem237MCf5olXNVTA75/xWbP+hpSQ=:OZzizLZgDTy6bUFcfnLkfz8/GW6CEejpdHmacfzLrvs="),
        ("\u{ad}", "SCRAM-SHA-256$4096:4Dtix5Oy9gxnOt9Ug/nJog==$h0NSJ2QEaK6DP5CMG1TmJwphEfyPHNipNtwZun3kQUI=:/fm6Rc/SSEn33c3oZt2RKy1ce/5uweCiPVT+HcfpbWE="),
        ("a\u{e000}b", "SCRAM-SHA-256$4096:1V/QXegoDS9g5XUOUiggoQ==$PIpz9yTNLMM/DtV/yNML5o7c1G4U/ra2338EgwLIRNw=:YoAgvOsw2ukr77RwwsaDhJTskTDAMe/0L5+J15JiD6Q="),
        ("\u{2163}", "SCRAM-SHA-256$4096:I6ZGJ3H0V/HyDn07GM9FLQ==$ZcMePxVu66Q0Cht8DIX6tjSEUyVHrtEwRdQDi0ZgrK8=:wm3BVNIJkmqvtCajKQC9u26G1BkPa8L7GzDqDXcISHg="),
        ("pass\u{ad}word", "SCRAM-SHA-256$4096:XZTUqictWI9Sq1ALb2TNnw==$lPtmQKMu/PLTxS8QCvRhLhIpoSSTNoBm56wmUHu/4eM=:1n8SneToYzVujl2aIlgOwWs8oUJsO3gmbppNpTduw/Q="),
    ];
    for (password, verifier) in cases {
        let pg = ScramSecret::parse(verifier).unwrap();
        let ours = ScramSecret::from_password(password, &pg.salt, pg.iterations);
        assert_eq!(ours.to_verifier(), verifier, "{password:?}");
    }
    // The client side hashes the same way: a client with the password logs in against
    // PostgreSQL's verifier; ROMAN NUMERAL FOUR is "IV" after SASLprep, and either spelling works.
    let (_, roman) = cases[5];
    for password in ["\u{2163}", "IV"] {
        let mut server = ScramServer::new(ScramSecret::parse(roman).unwrap());
        let mut client = ScramClient::new(password);
        exchange(&mut client, &mut server).unwrap();
    }
    assert_eq!(saslprep("\u{2163}"), "IV");
    assert_eq!(saslprep("a\u{e000}b"), "a\u{e000}b");
    assert_eq!(saslprep(""), "");
}
