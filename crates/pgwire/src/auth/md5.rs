//! PostgreSQL's MD5 password scheme: stored hash `md5(password || user)`, wire response
//! `"md5" || md5(hex(stored) || salt)`.

use md5::{Digest, Md5};

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}

/// The stored form: `"md5" + hex(md5(password + user))`, as in pg_authid.
pub fn stored_hash(user: &str, password: &str) -> String {
    let mut h = Md5::new();
    h.update(password.as_bytes());
    h.update(user.as_bytes());
    format!("md5{}", hex(&h.finalize()))
}

/// True when `s` is a stored MD5 hash (`md5` + 32 lowercase hex digits).
pub fn is_stored_hash(s: &str) -> bool {
    s.len() == 35
        && s.starts_with("md5")
        && s[3..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The wire response for `salt`, from a stored hash (`md5...`).
pub fn salted_response(stored: &str, salt: [u8; 4]) -> String {
    let mut h = Md5::new();
    h.update(stored.get(3..).unwrap_or("").as_bytes());
    h.update(salt);
    format!("md5{}", hex(&h.finalize()))
}

/// Constant-time comparison of a client's response with the expected one.
pub fn verify(stored: &str, salt: [u8; 4], response: &str) -> bool {
    let expected = salted_response(stored, salt);
    let (a, b) = (expected.as_bytes(), response.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        let stored = stored_hash("postgres", "postgres");
        assert_eq!(stored, "md53175bce1d3201d16594cebf9d7eb3f9d");
        assert!(is_stored_hash(&stored));
        assert!(!is_stored_hash("md5xyz"));
        let r = salted_response(&stored, [1, 2, 3, 4]);
        assert!(verify(&stored, [1, 2, 3, 4], &r));
        assert!(!verify(&stored, [1, 2, 3, 5], &r));
    }
}
