//! Sockets and the workers that serve them: accepting clients, the workers' executor and epoll
//! reactor, plaintext or TLS streams, and reading whole messages off them.

pub mod balance;
pub mod batch;
pub mod direct;
pub mod exec;
pub mod framed;
pub mod listener;
pub mod peer;
pub mod reactor;
pub mod sock;
pub mod stream;
pub mod unix_listener;
pub mod workers;
