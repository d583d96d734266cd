//! Worker threads, one executor of pgcorral's own each ([`super::exec`], thread-per-core). A
//! client lives on one worker for its whole life, and the server it holds is registered with
//! that worker's reactor, so no socket event ever has to wake another thread. Timers and the
//! tokio I/O that is not the data path (connects) live on one more thread's tokio runtime,
//! whose context the workers enter (see [`crate::timer`]).

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::mpsc;

use super::balance::Balance;
use super::exec::{self, Handle};

/// The worker executors; dropping this stops them (their remaining tasks are dropped).
pub struct Workers {
    handles: Vec<Handle>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts one worker thread per entry of `balance`, reporting their load to it and
    /// registering their executors with it; `io_uring`: batch each turn's writes.
    pub fn start(balance: Arc<Balance>, io_uring: bool) -> std::io::Result<Workers> {
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
            handles.push(handle.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("pgcorral-w{i}"))
                    .spawn(move || {
                        balance.register_thread(i);
                        crate::pool::stats::own_shard(i);
                        // Timers and connects made here go to the timer thread's runtime.
                        let _tokio = timer_handle.enter();
                        if let Err(e) = exec::run_worker(&handle, io_uring) {
                            tracing::error!(worker = i, error = %e, "worker could not run");
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
