//! Stored passwords from the config or auth query: PostgreSQL's SCRAM verifier text
//! (`ScramSecret::parse`) and the MD5 scheme (`md5::is_stored_hash`, `salted_response`,
//! `verify`), plus a client's MD5 response. Checks: no panic; a parsed verifier renders back to
//! the same secret, and to the same text when the text was canonical; a salted response is
//! `md5` + 32 hex digits and verifies.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pgwire::auth::md5;
use pgwire::auth::scram::ScramSecret;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Some(secret) = ScramSecret::parse(&text) {
        let rendered = secret.to_verifier();
        assert_eq!(ScramSecret::parse(&rendered).as_ref(), Some(&secret));
        // Leading zeros in the iteration count are the only non-canonical spelling.
        let iterations = text.split_once('$').unwrap().1.split(':').next().unwrap();
        if !iterations.starts_with('0') {
            assert_eq!(rendered, text);
        }
    }
    let salt = [data.first().copied().unwrap_or(0); 4];
    if md5::is_stored_hash(&text) {
        assert_eq!(text.len(), 35);
    }
    let response = md5::salted_response(&text, salt);
    assert!(md5::is_stored_hash(&response));
    if md5::is_stored_hash(&text) {
        assert!(md5::verify(&text, salt, &response));
    }
    // A client's response against a stored hash.
    let _ = md5::verify(&md5::stored_hash("user", "pw"), salt, &text);
    let _ = md5::stored_hash(&text, &text);
});
