//! Password authentication as PostgreSQL does it: MD5 (salted double hash) and SCRAM-SHA-256
//! (RFC 5802/7677, with SCRAM-SHA-256-PLUS channel binding), for both ends: verifying a client,
//! and answering a server.

pub mod binding;
pub mod md5;
pub mod scram;
