//! The hot path's clock: monotonic nanoseconds in a `u64`, read at most once per wake-up of a
//! client's task (see [`Moments`]), so a transaction costs two clock reads rather than seven.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// A reading of the monotonic clock (CLOCK_MONOTONIC, as [`std::time::Instant`] on Linux), in
/// nanoseconds. Cheaper to keep and subtract than an `Instant` (one `u64`, no carry between
/// seconds and nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tick(u64);

/// Outside a wake-up of a client's task: every [`now`] reads the clock.
const FRESH: u64 = 0;
/// Inside one, before the first [`now`].
const UNREAD: u64 = u64::MAX;

thread_local! {
    /// [`FRESH`], [`UNREAD`], or the reading taken in this wake-up.
    static TAKEN: Cell<u64> = const { Cell::new(FRESH) };
}

/// Reads the clock.
fn read() -> u64 {
    let ts = monotonic();
    let ns = (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64);
    // Never one of the markers (the clock starts at boot, far from both).
    ns.clamp(1, UNREAD - 1)
}

/// clock_gettime(CLOCK_MONOTONIC), which cannot fail on Linux (the clock always exists).
#[allow(unsafe_code)]
fn monotonic() -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given, a valid exclusive pointer
    // for the call's duration.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts
}

/// Now: within a wake-up of a client's task, the reading taken at its first call; elsewhere a
/// fresh one. A poll of a client's task does a few microseconds of work at most, so readings
/// in it may all share one moment.
#[inline]
pub fn now() -> Tick {
    TAKEN.with(|t| match t.get() {
        FRESH => Tick(read()),
        UNREAD => {
            let v = read();
            t.set(v);
            Tick(v)
        }
        v => Tick(v),
    })
}

impl Tick {
    /// Before every reading.
    pub const EARLIEST: Tick = Tick(0);
    /// After every reading.
    pub const LATEST: Tick = Tick(u64::MAX);

    /// The moment `d` after this one.
    #[inline]
    pub fn after(self, d: Duration) -> Tick {
        Tick(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// Time from `earlier` to this reading; zero if `earlier` is later.
    #[inline]
    pub fn since(self, earlier: Tick) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Nanoseconds from `earlier` to this reading; zero if `earlier` is later.
    #[inline]
    pub fn nanos_since(self, earlier: Tick) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Microseconds from `earlier` to this reading; zero if `earlier` is later.
    #[inline]
    pub fn micros_since(self, earlier: Tick) -> u64 {
        self.0.saturating_sub(earlier.0) / 1_000
    }

    /// Time since this reading, by [`now`].
    pub fn elapsed(self) -> Duration {
        now().since(self)
    }
}

pin_project_lite::pin_project! {
    /// A future each of whose polls is one moment for [`now`]: the clock is read at the
    /// first `now()` of a poll and that reading serves the rest of it.
    pub struct Moments<F> {
        #[pin]
        fut: F,
    }
}

/// Runs `fut` in [`Moments`].
pub fn moments<F: Future>(fut: F) -> Moments<F> {
    Moments { fut }
}

impl<F: Future> Future for Moments<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _moment = Moment::enter();
        self.project().fut.poll(cx)
    }
}

/// One poll's moment; back to fresh readings when dropped (also on unwinding).
struct Moment(u64);

impl Moment {
    fn enter() -> Moment {
        Moment(TAKEN.with(|t| t.replace(UNREAD)))
    }
}

impl Drop for Moment {
    fn drop(&mut self) {
        // Nested moments (none today) would restore the outer one's state.
        TAKEN.with(|t| t.set(self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    #[test]
    fn readings_outside_a_moment_are_fresh_and_monotonic() {
        let a = now();
        std::thread::sleep(Duration::from_millis(2));
        let b = now();
        assert!(b.since(a) >= Duration::from_millis(2));
        assert_eq!(a.since(b), Duration::ZERO);
    }

    #[test]
    fn a_poll_is_one_moment_and_the_next_poll_reads_again() {
        let mut polls = 0;
        let mut seen = Vec::new();
        let fut = moments(poll_fn(|cx| {
            let a = now();
            std::thread::sleep(Duration::from_millis(2));
            let b = now();
            seen.push((a, b));
            polls += 1;
            if polls < 2 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        }));
        block_on(fut);
        assert_eq!(seen.len(), 2);
        // Within a poll: one reading.
        assert_eq!(seen[0].0, seen[0].1);
        assert_eq!(seen[1].0, seen[1].1);
        // The next poll read the clock again.
        assert!(seen[1].0.since(seen[0].0) >= Duration::from_millis(2));
        // After the future, readings are fresh again.
        let x = now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(now().since(x) >= Duration::from_millis(2));
    }

    /// Polls `fut` to completion on this thread.
    fn block_on<F: Future>(fut: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(fut)
    }
}
