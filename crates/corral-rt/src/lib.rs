//! corral-rt: pgcorral's own small runtime. Worker threads each run an executor ([`exec`]) over an
//! epoll reactor ([`reactor`]); sockets ([`sock`], [`stream`]) are read and written with direct
//! system calls ([`direct`]), writes of one executor turn going to the kernel together through
//! io_uring ([`batch`]); [`balance`] places clients on workers and [`workers`] starts them, with
//! timers on a tokio runtime of their own ([`timer`]). It knows nothing of PostgreSQL or of the
//! pooler; its invariants, and the tests that guard them, are in this crate's README.

#![cfg_attr(not(test), deny(clippy::disallowed_methods))]

pub mod balance;
pub mod batch;
pub mod direct;
pub mod exec;
mod grow;
pub mod reactor;
pub mod sock;
pub mod stream;
mod sync;
pub mod timer;
pub mod workers;
