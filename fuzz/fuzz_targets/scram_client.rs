//! SCRAM on pgcorral's client side (logging in to a server): the AuthenticationSASL mechanism
//! list, server-first-message and server-final-message, through `ScramClient`. Input: a flags
//! byte, then the mechanism list, server-first and server-final separated by 0xFF. Checks: no
//! panic, a client-final that carries our channel binding, the combined nonce and a proof, and
//! an exchange that stays failed once a step failed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgwire::auth::scram::{ScramClient, ScramError};
use pgwire::backend;

const CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";

/// Iteration counts above this are skipped: PBKDF2 cost is the server's choice (libpq pays it
/// too) and would only slow the fuzzer down.
const MAX_ITERATIONS: u64 = 64;

fn too_costly(msg: &[u8]) -> bool {
    let text = String::from_utf8_lossy(msg);
    text.split(',').any(|p| {
        p.strip_prefix("i=")
            .and_then(|i| i.parse::<u64>().ok())
            .is_some_and(|i| i > MAX_ITERATIONS)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(3, |&b| b == 0xff);
    let (list, first, last) = (parts.next().unwrap_or_default(), parts.next(), parts.next());
    let mut client = ScramClient::with_nonce("pencil", CLIENT_NONCE);
    let binding = (flags & 1 != 0).then(|| vec![flags; 32]);
    if flags & 2 != 0 {
        let offered = backend::sasl_mechanisms(list);
        match client.negotiate(&offered, binding) {
            Some(c) => {
                assert!(offered.contains(&c.mechanism()));
                client = c;
            }
            None => return,
        }
    } else if let Some(b) = binding {
        client = client.channel_binding(b);
    }
    let client_first = String::from_utf8(client.client_first()).unwrap();
    assert!(client_first.ends_with(&format!(",r={CLIENT_NONCE}")));
    let Some(first) = first else { return };
    if too_costly(first) {
        return;
    }
    match client.server_first(first) {
        Ok(reply) => {
            let reply = String::from_utf8(reply).expect("client-final is text");
            assert!(reply.starts_with("c="));
            let (without_proof, proof) = reply.rsplit_once(",p=").expect("a proof");
            assert_eq!(proof.len(), 44);
            let nonce = without_proof.split_once(",r=").expect("a nonce").1;
            assert!(nonce.starts_with(CLIENT_NONCE) && nonce.len() > CLIENT_NONCE.len());
        }
        Err(_) => {
            assert_eq!(
                client.server_final(last.unwrap_or_default()),
                Err(ScramError::OutOfOrder)
            );
            return;
        }
    }
    let Some(last) = last else { return };
    let _ = client.server_final(last);
    assert_eq!(client.server_final(last), Err(ScramError::OutOfOrder));
});
