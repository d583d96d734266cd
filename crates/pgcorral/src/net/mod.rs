//! Sockets: accepting clients, plaintext or TLS streams, and reading whole messages off them.

pub mod balance;
pub mod direct;
pub mod framed;
pub mod listener;
pub mod stream;
pub mod unix;
pub mod workers;
