//! What the hops share about a connection's bytes: reading whole messages during startup and
//! authentication ([`framed`]) and where a client connected from ([`peer`]).

pub mod framed;
pub mod peer;
