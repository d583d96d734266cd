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

/// When to trim: after at least [`Burst::LEFT`] clients left since the most listed at once.
#[derive(Default)]
pub struct Burst {
    peak: usize,
}

impl Burst {
    /// Clients that must have left since the peak before memory is trimmed.
    pub const LEFT: usize = 1000;

    /// Notes `clients` listed now; true when a burst has left (and the peak starts over).
    pub fn left(&mut self, clients: usize) -> bool {
        self.peak = self.peak.max(clients);
        if self.peak - clients < Self::LEFT {
            return false;
        }
        self.peak = clients;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_trimmed_once_after_it_left() {
        let mut b = Burst::default();
        assert!(!b.left(10));
        assert!(!b.left(5000));
        assert!(!b.left(4500));
        assert!(b.left(3900));
        assert!(!b.left(3000), "900 left since the last trim");
        assert!(b.left(2800));
        assert!(!b.left(3500), "more came: a new peak");
        assert!(!b.left(2600));
    }

    #[test]
    fn trimming_is_harmless() {
        let v: Vec<Vec<u8>> = (0..1000).map(|_| vec![1u8; 2048]).collect();
        drop(v);
        release_free_memory();
    }
}
