//! Password authentication as PostgreSQL does it: MD5 (salted double hash) and SCRAM-SHA-256
//! (RFC 5802/7677), for both ends: verifying a client, and answering a server.

pub mod md5;
pub mod scram;
