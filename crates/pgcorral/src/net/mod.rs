//! What the hops share about a connection's bytes: reading whole messages during startup and
//! authentication ([`framed`]), where a client connected from ([`peer`]), and the OS users of
//! the pooler and of a Unix-socket peer ([`os_user`]).

pub mod framed;
pub mod os_user;
pub mod peer;
