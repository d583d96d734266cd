//! Sharding: one logical database over several shards (each a cluster of a primary and
//! replicas), rows placed by PostgreSQL's own hash partitioning ([`hash`]) of a key ([`key`]).

pub mod hash;
pub mod key;
