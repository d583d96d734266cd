//! The atomics and fences of the cross-thread handshakes ([`crate::exec`]'s doorbell, [`crate::reactor`]'s
//! readiness word): std's, or loom's when built with `--cfg corral_loom` to model them.

#[cfg(corral_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicUsize};
#[cfg(not(corral_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicUsize};
