//! Helpers for the protocol tests (protocol_*.rs, prepared.rs): pgcorral in front of database
//! `postgres` of a test's PostgreSQL, a client through it, and an int4 in binary.

use tokio_postgres::Client;

use super::*;

/// A config for database "postgres" with `general` lines (transaction mode unless they say not).
pub fn cfg(pg: &Postgres, general: &str) -> String {
    config(pg, "postgres", general)
}

/// pgcorral in process, in front of database `postgres` of `pg` (see [`cfg`]).
pub async fn pooler(pg: &Postgres, general: &str) -> Pooler {
    Pooler::start(&cfg(pg, general)).await
}

/// A tokio-postgres client through `p`, as postgres on database postgres.
pub async fn client(p: &Pooler) -> Client {
    p.connect("postgres", None, "postgres").await
}

/// An int4 in binary, as a Bind parameter or FunctionCall argument carries it.
pub fn i32_be(v: i32) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}
