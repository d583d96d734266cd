//! pgcorral: a multi-threaded PostgreSQL connection pooler, on the worker threads, reactors and
//! sockets of the `corral-rt` crate.
//!
//! The data path, one module per hop: [`listen`] accepts and hands each client to a worker →
//! [`client::startup`] and [`client::auth`] admit it, reading whole messages through
//! [`net::framed`] → [`client`] waits for the first header of each request in the client's
//! [`client_conn::ClientConn`] → for a database with replicas, [`route`] decides where it goes
//! (a [`cluster::Target`]) and [`cluster`] picks the server → [`pool`] checks one out
//! ([`server::connect`] when a new one is needed) → [`relay`] forwards the request from the
//! client's buffer by message headers and streams the answer back until the server is idle → the
//! [`pool::Checkout`] guard returns the server. [`session`] keeps each client's settings on
//! whatever server it lands on, and [`prepared`] its prepared statements. Cancel requests go
//! around it via [`cancel`]. Clients of database `pgbouncer` (or `pgcorral`) get the [`admin`]
//! console, which reads [`pool::stats`] and the connection lists of [`conns`] and answers with
//! [`rows`]. Shared state lives in one [`Services`] handle built at start and passed down;
//! no mutable state in this crate is process-wide. Per-thread state is thread-local: here the
//! statistics shard ([`pool::stats`]), spare wait cells and read buffers, and the clock's reading
//! of the current poll ([`clock`]); in corral-rt each worker's executor, reactor and write batch.

#![cfg_attr(not(test), deny(clippy::disallowed_methods, clippy::absolute_paths))]

pub mod admin;
pub mod api;
pub mod auth_query;
pub mod cache;
pub mod cancel;
pub mod client;
pub mod client_conn;
pub mod clock;
pub mod cluster;
pub mod cold;
pub mod config;
pub mod connlog;
pub mod conns;
pub mod control;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod hba;
pub mod intern;
pub mod link;
pub mod link_state;
pub mod listen;
pub mod login_places;
pub mod logsafe;
pub mod meter;
pub mod metrics;
pub mod net;
pub mod notify;
pub mod pool;
pub mod prepared;
pub mod process;
pub mod relay;
pub mod reload;
pub mod route;
pub mod rows;
pub mod secrets;
pub mod server;
pub mod services;
pub mod session;
pub mod shard;
pub mod skeleton;
pub mod tenants;
pub mod tls;

pub use listen::Pooler;
pub use services::Services;
