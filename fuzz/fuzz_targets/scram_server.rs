//! SCRAM on pgcorral's server side (clients logging in): the mechanism a client selects, its
//! client-first-message and its client-final-message, through `ScramServer`. Input: a flags
//! byte, then the mechanism name, client-first and client-final separated by 0xFF (a byte UTF-8
//! never holds). Checks: no panic, a server-first that extends the client's nonce with ours,
//! and an exchange that stays failed once a step failed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgwire::auth::scram::{ScramError, ScramSecret, ScramServer};

const SERVER_NONCE: &str = "3rfcNHYJY1ZVvWVs7j";

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(3, |&b| b == 0xff);
    let (mech, first, last) = (parts.next().unwrap_or_default(), parts.next(), parts.next());
    // One PBKDF2 round: parsing is what is fuzzed, not the key derivation.
    let secret = ScramSecret::from_password("pencil", b"salt", 1);
    let mut server = ScramServer::with_nonce(secret, SERVER_NONCE);
    if flags & 1 != 0 {
        server = server.channel_binding(vec![flags; 32]);
    }
    if flags & 2 != 0 && server.select_mechanism(mech).is_err() {
        assert_eq!(
            server.client_first(first.unwrap_or_default()),
            Err(ScramError::OutOfOrder)
        );
        return;
    }
    let Some(first) = first else { return };
    match server.client_first(first) {
        Ok(reply) => {
            let reply = String::from_utf8(reply).expect("server-first is text");
            let nonce = reply
                .strip_prefix("r=")
                .and_then(|r| r.split(',').next())
                .expect("server-first starts with the nonce");
            assert!(nonce.ends_with(SERVER_NONCE) && nonce.len() > SERVER_NONCE.len());
            let text = std::str::from_utf8(first).unwrap();
            assert!(text.contains(&format!(
                ",r={}",
                &nonce[..nonce.len() - SERVER_NONCE.len()]
            )));
        }
        Err(_) => {
            assert!(matches!(
                server.client_final(last.unwrap_or_default()),
                Err(ScramError::OutOfOrder)
            ));
            return;
        }
    }
    let Some(last) = last else { return };
    if let Ok(outcome) = server.client_final(last) {
        // Only a client that knows the password gets here.
        assert!(outcome.server_final.starts_with(b"v="));
    }
    assert!(matches!(
        server.client_final(last),
        Err(ScramError::OutOfOrder)
    ));
});
