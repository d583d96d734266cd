//! Sans-IO PostgreSQL wire protocol pieces: message framing by header, tag constants for each
//! direction, startup packets, encoders that append to a `BytesMut`, and SCRAM/MD5 auth.
//!
//! Nothing here touches a socket. The pooler reads bytes into its own buffers and asks this crate
//! where message boundaries are ([`header`]), what a message is ([`frontend`], [`backend`]), and
//! how to build the few messages it writes itself ([`encode`]). Bodies of forwarded messages are
//! never parsed: only ReadyForQuery, ErrorResponse, ParameterStatus, BackendKeyData and the
//! authentication messages are looked into.

pub mod auth;
pub mod backend;
pub mod encode;
pub mod frontend;
pub mod header;
pub mod sqlstate;
pub mod startup;

pub use header::{FrameError, Header};
