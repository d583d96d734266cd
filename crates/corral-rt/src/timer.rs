//! Timers for code that runs on the worker threads, whose executors ([`crate::exec`])
//! drive no timers: the workers enter the context of the one timer thread's tokio runtime (see
//! [`crate::workers`]), so every sleep and timeout made there lives on its driver, and its
//! expiry wakes the worker's task from there. tokio binds a timer to the runtime whose context
//! it is created in, and it can be polled from any other; so a worker only pays for a timer it
//! actually sets. Elsewhere (the main thread, tests) these are the current runtime's.

use std::future::IntoFuture;
use std::time::Duration;

use tokio::time::{Instant, Interval, Sleep, Timeout};

/// [`tokio::time::sleep`].
pub fn sleep(d: Duration) -> Sleep {
    tokio::time::sleep(d)
}

/// [`tokio::time::sleep_until`].
pub fn sleep_until(at: Instant) -> Sleep {
    tokio::time::sleep_until(at)
}

/// [`tokio::time::timeout`].
pub fn timeout<F: IntoFuture>(d: Duration, f: F) -> Timeout<F::IntoFuture> {
    tokio::time::timeout(d, f)
}

/// [`tokio::time::timeout_at`].
pub fn timeout_at<F: IntoFuture>(at: Instant, f: F) -> Timeout<F::IntoFuture> {
    tokio::time::timeout_at(at, f)
}

/// [`tokio::time::interval`], whose missed ticks are delayed rather than burst.
pub fn interval(period: Duration) -> Interval {
    let mut i = tokio::time::interval(period);
    i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker (an executor that drives no timers, in the timer runtime's context) sleeps and
    /// times out on the timer runtime's driver.
    #[test]
    fn timers_of_a_worker_run_on_the_timer_runtime() {
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
        let exec = crate::exec::Handle::new().unwrap();
        let worker = {
            let exec = exec.clone();
            std::thread::spawn(move || {
                let _in = handle.enter();
                crate::exec::run_worker(&exec, true).unwrap();
            })
        };
        let (tx, rx) = std::sync::mpsc::channel();
        exec.spawn(async move {
            let start = Instant::now();
            sleep(Duration::from_millis(20)).await;
            let slept = start.elapsed();
            let pending = std::future::pending::<()>();
            let timed_out = timeout(Duration::from_millis(10), pending).await.is_err();
            let mut tick = interval(Duration::from_millis(5));
            tick.tick().await;
            tick.tick().await;
            let _ = tx.send((slept, timed_out));
        });
        let (slept, timed_out) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(slept >= Duration::from_millis(20), "slept {slept:?}");
        assert!(timed_out);
        exec.stop();
        worker.join().unwrap();
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
