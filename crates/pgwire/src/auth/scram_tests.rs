//! Tests for SCRAM-SHA-256: the RFC 7677 vector on both sides, a verifier made by PostgreSQL 15,
//! key reuse, ordering, and no panics on arbitrary peer bytes.

use super::*;
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
