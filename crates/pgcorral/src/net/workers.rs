//! Worker threads, one single-threaded tokio runtime each (thread-per-core). A client lives on
//! one worker for its whole life, and the server it holds is registered with that worker's
//! reactor, so no socket event ever has to wake another thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// The worker runtimes; dropping this stops them (their remaining tasks are dropped).
pub struct Workers {
    handles: Vec<Handle>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
    next: AtomicUsize,
}

impl Workers {
    /// Starts `n` worker threads (at least one).
    pub fn start(n: usize) -> std::io::Result<Workers> {
        let n = n.max(1);
        let mut handles = Vec::with_capacity(n);
        let mut stops = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(rt.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("pgcorral-w{i}"))
                    .spawn(move || {
                        rt.block_on(async {
                            let _ = stopped.await;
                        });
                    })?,
            );
        }
        Ok(Workers {
            handles,
            stops,
            threads,
            next: AtomicUsize::new(0),
        })
    }

    pub fn len(&self) -> usize {
        self.handles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The next worker in turn, for a new client.
    pub fn pick(&self) -> (usize, &Handle) {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        (i, &self.handles[i])
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
