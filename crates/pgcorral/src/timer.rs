//! Timers for code that runs on the worker threads, whose runtimes have no time driver: every
//! sleep and timeout is created here, on the one timer thread's driver (see [`crate::net::workers`]).
//!
//! tokio binds a timer to the runtime whose context it is created in, and it can be polled from
//! any other; so a worker only pays for a timer it actually sets, not a timer-wheel check and two
//! clock reads on every park (about 325 instructions each, two parks per transaction at one
//! client). On threads without a timer runtime (the main thread, tests) these are tokio's own.

use std::cell::OnceCell;
use std::future::IntoFuture;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::{Instant, Interval, Sleep, Timeout};

thread_local! {
    /// The timer runtime's handle, on the worker threads.
    static TIMERS: OnceCell<Handle> = const { OnceCell::new() };
}

/// Makes this thread create its timers on `timers`' driver (called once, as a worker starts).
pub fn install(timers: Handle) {
    TIMERS.with(|t| {
        let _ = t.set(timers);
    });
}

/// Runs `make` in the timer runtime's context, when this thread has one.
fn on_timers<T>(make: impl FnOnce() -> T) -> T {
    TIMERS.with(|t| match t.get() {
        Some(h) => {
            let _in = h.enter();
            make()
        }
        None => make(),
    })
}

/// [`tokio::time::sleep`].
pub fn sleep(d: Duration) -> Sleep {
    on_timers(|| tokio::time::sleep(d))
}

/// [`tokio::time::sleep_until`].
pub fn sleep_until(at: Instant) -> Sleep {
    on_timers(|| tokio::time::sleep_until(at))
}

/// [`tokio::time::timeout`]. `f` becomes a future outside the timer runtime's context: only
/// the timer is made in it.
pub fn timeout<F: IntoFuture>(d: Duration, f: F) -> Timeout<F::IntoFuture> {
    let f = f.into_future();
    on_timers(|| tokio::time::timeout(d, f))
}

/// [`tokio::time::timeout_at`], `f` made a future as in [`timeout`].
pub fn timeout_at<F: IntoFuture>(at: Instant, f: F) -> Timeout<F::IntoFuture> {
    let f = f.into_future();
    on_timers(|| tokio::time::timeout_at(at, f))
}

/// [`tokio::time::interval`], whose missed ticks are delayed rather than burst.
pub fn interval(period: Duration) -> Interval {
    on_timers(|| {
        let mut i = tokio::time::interval(period);
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker-like runtime without a time driver sleeps and times out on the timer runtime's.
    #[test]
    fn timers_of_a_runtime_without_time_driver() {
        let timers = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let handle = timers.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let driver = std::thread::spawn(move || {
            timers.block_on(async {
                let _ = stopped.await;
            })
        });
        let worker = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .unwrap();
            install(handle);
            rt.block_on(async {
                let start = Instant::now();
                sleep(Duration::from_millis(20)).await;
                let slept = start.elapsed();
                let pending = std::future::pending::<()>();
                let timed_out = timeout(Duration::from_millis(10), pending).await.is_err();
                let mut tick = interval(Duration::from_millis(5));
                tick.tick().await;
                tick.tick().await;
                (slept, timed_out)
            })
        });
        let (slept, timed_out) = worker.join().unwrap();
        assert!(slept >= Duration::from_millis(20), "slept {slept:?}");
        assert!(timed_out);
        let _ = stop.send(());
        driver.join().unwrap();
    }

    /// Without a timer runtime the current runtime's driver is used.
    #[tokio::test]
    async fn falls_back_to_the_current_runtime() {
        assert!(
            timeout(Duration::from_millis(5), std::future::pending::<()>())
                .await
                .is_err()
        );
    }
}
