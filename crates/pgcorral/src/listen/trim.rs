//! The allocator for many idle clients: one arena, and free memory given back to the system
//! after a burst of clients has left.
#![allow(unsafe_code)]

/// Makes glibc's allocator keep one arena rather than one per thread that contends for one
/// (up to 8 per core): a client's memory is allocated by whichever thread runs it at the time
/// (the acceptor, a worker, the one it moved to), and with several arenas each keeps holes of
/// its own between long-lived clients' blocks (about 170 bytes more per idle client,
/// bench/results/2026-11-27-idle-memory-2.md). The data path allocates almost nothing per
/// transaction, and what it does comes from the thread's own cache (glibc's tcache) without
/// the arena's lock. Left as it is when the operator set `MALLOC_ARENA_MAX` or
/// `GLIBC_TUNABLES`. Call before other threads start.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn one_arena() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some()
        || std::env::var_os("GLIBC_TUNABLES").is_some()
    {
        return;
    }
    // SAFETY: mallopt takes no pointers and only sets the allocator's own parameter.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Other allocators: nothing to do.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn one_arena() {}

/// glibc keeps freed memory in its arenas for reuse; `malloc_trim` returns what it can (free
/// pages inside the heaps too, not only at their tops). Returns whether memory was released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() -> bool {
    // SAFETY: malloc_trim takes no pointers and only walks the allocator's own arenas, under
    // their locks.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other allocators: nothing to do.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

/// When to trim: once a burst of at least [`Burst::SIZE`] clients, arriving or leaving, has
/// settled. Logins leave holes: a login's short-lived blocks (its first stage's future, the
/// SCRAM exchange, buffers) are freed around the long-lived blocks of the clients that
/// logged in beside it, and whole free pages among them stay resident until trimmed (about 50
/// bytes per idle client after 10,000 logins, bench/results/2026-11-28-idle-memory-3.md).
#[derive(Default)]
pub struct Burst {
    /// The most and the fewest clients since the last trim.
    peak: usize,
    low: Option<usize>,
    /// The count at the last look.
    last: usize,
}

impl Burst {
    /// Clients that must have come or gone since the last trim.
    pub const SIZE: usize = 1000;
    /// Settled: fewer than this many came or went since the last look.
    const STILL: usize = Self::SIZE / 10;

    /// Notes `clients` now (called every tick); true when memory is to be trimmed (and the
    /// count starts over from here).
    pub fn settled(&mut self, clients: usize) -> bool {
        let low = self.low.get_or_insert(clients);
        *low = (*low).min(clients);
        self.peak = self.peak.max(clients);
        let still = clients.abs_diff(self.last) < Self::STILL;
        self.last = clients;
        let moved = self.peak - clients >= Self::SIZE || clients - *low >= Self::SIZE;
        if !(still && moved) {
            return false;
        }
        (self.peak, self.low) = (clients, Some(clients));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_trimmed_once_it_has_settled() {
        let mut b = Burst::default();
        assert!(!b.settled(10));
        assert!(!b.settled(5000), "still arriving");
        assert!(b.settled(5050), "arrived, and settled");
        assert!(!b.settled(5050), "nothing new since the trim");
        assert!(!b.settled(4500));
        assert!(!b.settled(3900), "still leaving");
        assert!(b.settled(3900), "left, and settled");
        assert!(!b.settled(3000));
        assert!(!b.settled(3000), "900 left since the last trim");
        assert!(!b.settled(2800));
        assert!(b.settled(2800));
        assert!(!b.settled(3500));
        assert!(!b.settled(3500), "700 came since the last trim");
    }

    #[test]
    fn trimming_is_harmless() {
        let v: Vec<Vec<u8>> = (0..1000).map(|_| vec![1u8; 2048]).collect();
        drop(v);
        release_free_memory();
    }
}
