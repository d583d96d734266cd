//! Worker threads, one single-threaded tokio runtime each (thread-per-core). A client lives on
//! one worker for its whole life, and the server it holds is registered with that worker's
//! reactor, so no socket event ever has to wake another thread. The workers' runtimes have no
//! time driver: their timers live on one more thread's (see [`crate::timer`]).

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::{mpsc, oneshot};

use super::balance::Balance;

/// The worker runtimes; dropping this stops them (their remaining tasks are dropped).
pub struct Workers {
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts one worker thread per entry of `balance`, reporting their load to it and
    /// registering their runtimes with it.
    pub fn start(balance: Arc<Balance>) -> std::io::Result<Workers> {
        let n = balance.len();
        let mut handles = Vec::with_capacity(n);
        let mut stops = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n + 1);
        // The timer thread runs until every worker has ended (each holds a sender), so that no
        // worker ever polls a timer whose driver is gone.
        let timers = tokio::runtime::Builder::new_current_thread()
            .enable_time()
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
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()?;
            let balance = balance.clone();
            let timer_handle = timer_handle.clone();
            let alive = alive.clone();
            handles.push(rt.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("pgcorral-w{i}"))
                    .spawn(move || {
                        balance.register_thread(i);
                        crate::pool::stats::own_shard(i);
                        crate::timer::install(timer_handle);
                        rt.block_on(async {
                            let _ = stopped.await;
                        });
                        // Its tasks (and their timers) are dropped before the timers may stop.
                        drop(rt);
                        drop(alive);
                    })?,
            );
        }
        balance.set_handles(handles);
        Ok(Workers { stops, threads })
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
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
