//! pgcorral: a multi-threaded PostgreSQL connection pooler.
//!
//! The data path, one module per hop: [`listen`] accepts → [`client::startup`] and
//! [`client::auth`] admit the client → [`client`] reads whole requests through [`net::framed`] →
//! [`pool`] checks out a server ([`server::connect`] when a new one is needed) → [`relay`]
//! forwards the request and streams the answer back until the server is idle → the
//! [`pool::Checkout`] guard returns the server. [`session`] keeps each client's settings on
//! whatever server it lands on, and [`prepared`] its prepared statements. Cancel requests go
//! around it via [`cancel`]. Clients of database `pgbouncer` get the [`admin`] console, which
//! reads [`pool::stats`] and the connection lists of [`conns`].
//! Shared state lives in one [`Services`] handle built at start and passed down; nothing is global.

#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

pub mod admin;
pub mod cancel;
pub mod client;
pub mod client_conn;
pub mod clock;
pub mod cluster;
pub mod cold;
pub mod config;
pub mod conns;
pub mod control;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod listen;
pub mod logsafe;
pub mod metrics;
pub mod net;
pub mod pool;
pub mod prepared;
pub mod relay;
pub mod reload;
pub mod route;
pub mod rows;
pub mod server;
pub mod secrets;
pub mod services;
pub mod session;
pub mod tls;

pub use listen::Pooler;
pub use services::Services;
