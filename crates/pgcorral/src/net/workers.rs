//! Worker threads, one single-threaded tokio runtime each (thread-per-core). A client lives on
//! one worker for its whole life, and the server it holds is registered with that worker's
//! reactor, so no socket event ever has to wake another thread.

use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

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
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let balance = balance.clone();
            handles.push(rt.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("pgcorral-w{i}"))
                    .spawn(move || {
                        balance.register_thread(i);
                        crate::pool::stats::own_shard(i);
                        rt.block_on(async {
                            let _ = stopped.await;
                        });
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
