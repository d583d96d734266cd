//! The few pool settings read on every checkout and check-in, kept as atomics beside the
//! swapped settings: a plain load instead of an `ArcSwap` guard per use.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use super::PoolSettings;
use crate::config::PoolMode;

/// Stands for "none" in the nanosecond fields.
const NONE: u64 = u64::MAX;

pub(super) struct Hot {
    /// default_pool_size (or the database's pool_size).
    size: AtomicUsize,
    /// The size with the reserve: servers open at most.
    limit: AtomicUsize,
    /// server_lifetime, ns.
    lifetime: AtomicU64,
    /// server_check_delay when a check query is set, ns.
    check_after: AtomicU64,
    /// A session-mode pool with a reset query.
    session_reset: AtomicBool,
}

fn nanos(d: Option<Duration>) -> u64 {
    d.map_or(NONE, |d| u64::try_from(d.as_nanos()).unwrap_or(NONE - 1))
}

/// `ns` unless it is [`NONE`].
fn unless_none(ns: u64) -> Option<u64> {
    (ns != NONE).then_some(ns)
}

impl Hot {
    pub(super) fn new(s: &PoolSettings) -> Hot {
        let h = Hot {
            size: AtomicUsize::new(0),
            limit: AtomicUsize::new(0),
            lifetime: AtomicU64::new(NONE),
            check_after: AtomicU64::new(NONE),
            session_reset: AtomicBool::new(false),
        };
        h.set(s);
        h
    }

    /// Follows a reload.
    pub(super) fn set(&self, s: &PoolSettings) {
        self.size.store(s.size, Relaxed);
        self.limit
            .store(s.size.saturating_add(s.reserve_size), Relaxed);
        self.lifetime.store(nanos(s.lifetime), Relaxed);
        let check = s.check_query.is_some().then_some(s.check_delay);
        self.check_after.store(nanos(check), Relaxed);
        let reset = s.mode == PoolMode::Session && !s.reset_query.is_empty();
        self.session_reset.store(reset, Relaxed);
    }

    /// Servers open at most (not counting the reserve).
    pub(super) fn size(&self) -> usize {
        self.size.load(Relaxed)
    }

    /// Servers open at most, the reserve included: more only after the pool was made
    /// smaller, and those are closed as they come back.
    pub(super) fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    /// Servers older than this (ns) are closed at check-in. In nanoseconds, as [`crate::clock`]
    /// differences are, so that the hot path compares integers.
    pub(super) fn lifetime_ns(&self) -> Option<u64> {
        unless_none(self.lifetime.load(Relaxed))
    }

    /// Idle servers unused for this long (ns) are checked before reuse; `None` = no check query.
    pub(super) fn check_after_ns(&self) -> Option<u64> {
        unless_none(self.check_after.load(Relaxed))
    }

    /// A released server runs the pool's reset query.
    pub(super) fn session_reset(&self) -> bool {
        self.session_reset.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_settings() {
        let mut s = PoolSettings::new(5, PoolMode::Transaction);
        let h = Hot::new(&s);
        assert_eq!(
            (h.lifetime_ns(), h.check_after_ns(), h.session_reset()),
            (None, None, false)
        );
        s.lifetime = Some(Duration::from_secs(3600));
        s.check_query = Some("select 1".into());
        s.check_delay = Duration::from_secs(30);
        s.mode = PoolMode::Session;
        s.reset_query = "DISCARD ALL".into();
        h.set(&s);
        assert_eq!(h.lifetime_ns(), Some(3_600_000_000_000));
        assert_eq!(h.check_after_ns(), Some(30_000_000_000));
        assert!(h.session_reset());
        // No check query: no check, whatever the delay.
        s.check_query = None;
        s.check_delay = Duration::MAX;
        h.set(&s);
        assert_eq!(h.check_after_ns(), None);
    }
}
