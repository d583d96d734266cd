//! Worker threads, one executor of pgcorral's own each ([`crate::exec`], thread-per-core). A
//! client lives on one worker for its whole life, and the server it holds is registered with
//! that worker's reactor, so no socket event ever has to wake another thread. Timers and the
//! tokio I/O that is not the data path (connects) live on one more thread's tokio runtime,
//! whose context the workers enter (see [`crate::timer`]). A worker that ends for any reason
//! (stopped, failed to start, or a panic outside a task) is marked dead in the [`Balance`] and
//! its queue closed: no client is placed on it again.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::mpsc;

use crate::balance::Balance;
use crate::exec::{self, Handle};

/// The worker executors; dropping this stops them (their remaining tasks are dropped).
pub struct Workers {
    handles: Vec<Handle>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts one worker thread per entry of `balance`, reporting their load to it and
    /// registering their executors with it; `io_uring`: batch each turn's writes. `on_start`
    /// runs first on each worker's thread, with its number (for the caller's per-thread state).
    pub fn start(
        balance: Arc<Balance>,
        io_uring: bool,
        on_start: impl Fn(usize) + Send + Sync + 'static,
    ) -> std::io::Result<Workers> {
        let on_start = Arc::new(on_start);
        let n = balance.len();
        let mut handles = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n + 1);
        // The timer thread runs until every worker has ended (each holds a sender), so that no
        // worker ever polls a timer or a connect whose driver is gone.
        let timers = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let timer_handle = timers.handle().clone();
        let (alive, mut all_ended) = mpsc::channel::<()>(1);
        threads.push(
            std::thread::Builder::new()
                .name("pgcorral-timers".into())
                .spawn(move || {
                    timers.block_on(async {
                        let _ = all_ended.recv().await;
                    });
                })?,
        );
        for i in 0..n {
            let handle = Handle::new()?;
            let balance = balance.clone();
            let timer_handle = timer_handle.clone();
            let alive = alive.clone();
            let on_start = on_start.clone();
            handles.push(handle.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("pgcorral-w{i}"))
                    .spawn(move || {
                        balance.register_thread(i);
                        // Timers and connects made here go to the timer thread's runtime.
                        let _tokio = timer_handle.enter();
                        let ran = catch_unwind(AssertUnwindSafe(|| {
                            on_start(i);
                            exec::run_worker(&handle, io_uring)
                        }));
                        // Dead, whatever ended it: no client is placed here again, and what
                        // is spawned onto it from now on is dropped at once.
                        balance.mark_dead(i);
                        handle.close();
                        match ran {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => {
                                tracing::error!(worker = i, error = %e, "worker could not run")
                            }
                            Err(_) => tracing::error!(
                                worker = i,
                                "worker thread panicked outside a task; its clients are lost"
                            ),
                        }
                        // Its tasks (and their timers) were dropped before the timers may stop.
                        drop(alive);
                    })?,
            );
        }
        balance.set_handles(handles.clone());
        Ok(Workers { handles, threads })
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for h in self.handles.drain(..) {
            h.stop();
        }
        // The threads finish on their own; joining here could block an async caller.
        self.threads.clear();
    }
}

/// Number of workers for a configured `workers` value: 0 means one per core.
pub fn count(configured: usize) -> usize {
    if configured > 0 {
        configured
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A panic on a worker's loop, outside every task: the worker is marked dead, clients go
    /// to the others, and a spawn onto it is dropped instead of kept for no one.
    #[test]
    fn a_worker_that_dies_gets_no_more_clients() {
        let balance = Arc::new(Balance::new(2));
        let workers = Workers::start(balance.clone(), false, |_| {}).unwrap();
        balance
            .handle(0)
            .unwrap()
            .on_loop(|| panic!("a bug in the worker's loop"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while balance.is_alive(0) {
            assert!(Instant::now() < deadline, "the dead worker was not marked");
            std::thread::sleep(Duration::from_millis(5));
        }
        for _ in 0..10 {
            let w = balance.pick().unwrap();
            assert_eq!(w, 1);
            let (tx, rx) = std::sync::mpsc::channel();
            balance.handle(w).unwrap().spawn(async move {
                let _ = tx.send(std::thread::current().name().map(String::from));
            });
            let ran_on = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            assert_eq!(ran_on.as_deref(), Some("pgcorral-w1"));
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        balance.handle(0).unwrap().spawn(async move {
            let _ = tx.send(());
        });
        assert!(rx.blocking_recv().is_err(), "the future was dropped unrun");
        drop(workers);
    }
}
