//! Sockets: accepting clients and reading whole messages off a stream.

pub mod balance;
pub mod framed;
pub mod listener;
pub mod workers;
