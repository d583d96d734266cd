//! Names and addresses in a tenant: its external id, CIDR ranges, host names.

use std::net::IpAddr;

use crate::tenants::model::parse_cidr;

use super::fields::BLANK;

/// Longest external id: it becomes part of user names (`user.EXTERNAL_ID`).
const MAX_EXTERNAL_ID: usize = 63;

/// What is wrong with an external id, if anything.
pub fn external_id_errors(id: &str) -> Vec<&'static str> {
    let mut why = Vec::new();
    if id.is_empty() {
        why.push(BLANK);
    }
    if id.len() > MAX_EXTERNAL_ID {
        why.push("must be at most 63 bytes");
    }
    if id.chars().any(|ch| ch.is_whitespace() || ch.is_control()) {
        why.push("must not contain whitespace or control characters");
    }
    // A client names its tenant by what follows the last dot of its user name.
    if id.contains('.') {
        why.push("must not contain a dot");
    }
    why
}

/// `address/length`, IPv4 (length ≤ 32) or IPv6 (≤ 128), spaces around it ignored; an
/// address alone is not a range (the rule logins apply, [`parse_cidr`]).
pub fn cidr(s: &str) -> bool {
    parse_cidr(s).is_some()
}

/// A DNS host name: dot-separated labels of 1 to 63 letters, digits and inner hyphens, 253
/// bytes at most, and not an IP address.
pub fn host_name(s: &str) -> bool {
    s.len() <= 253
        && s.parse::<IpAddr>().is_err()
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}
