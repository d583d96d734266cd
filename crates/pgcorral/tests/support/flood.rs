//! A login flood from one loopback source address: connections that connect, say nothing and
//! hold on (until the pooler ends them, or for a while), then reconnect at once; bounded in
//! count and in time, and stopped by [`Flood::stop`] or its deadline, whichever comes first.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

/// A flood under way.
pub struct Flood {
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What a flood did.
#[derive(Debug, Default)]
pub struct Counts {
    /// Connections made (the pooler accepted them: refused ones included).
    pub connected: AtomicUsize,
    /// Connections the pooler ended within 100 ms (refused at accept, as a rule).
    pub ended_at_once: AtomicUsize,
    /// Connections that held on until the flood let go of them.
    pub held: AtomicUsize,
}

/// How a flood goes: `tasks` connections at a time from `source` to 127.0.0.1:`port`, each
/// held up to `hold`, at most `max` connections in all, for at most `limit`.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub source: IpAddr,
    pub port: u16,
    pub tasks: usize,
    pub hold: Duration,
    pub max: usize,
    pub limit: Duration,
}

impl Flood {
    pub fn start(plan: Plan) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let deadline = Instant::now() + plan.limit;
        let tasks = (0..plan.tasks)
            .map(|_| {
                let (stop, counts) = (stop.clone(), counts.clone());
                tokio::spawn(async move { flood(plan, deadline, &stop, &counts).await })
            })
            .collect();
        Flood {
            stop,
            counts,
            tasks,
        }
    }

    /// How many connections the flood made so far.
    pub fn connected(&self) -> usize {
        self.counts.connected.load(Ordering::Relaxed)
    }

    /// Whether the flood still goes on (not out of time nor out of count).
    pub fn going_on(&self) -> bool {
        self.tasks.iter().any(|t| !t.is_finished())
    }

    /// Stops the flood (its connections are closed within the hold) and returns its counts.
    pub async fn stop(self) -> Arc<Counts> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
        self.counts
    }
}

/// One of the flood's connections after another, until stopped, out of time or out of count.
async fn flood(plan: Plan, deadline: Instant, stop: &AtomicBool, counts: &Counts) {
    let per_task = plan.max.div_ceil(plan.tasks.max(1));
    for _ in 0..per_task {
        if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
            return;
        }
        let Ok(mut s) = connect_from(plan.source, plan.port).await else {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        counts.connected.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let hold_until = (start + plan.hold).min(deadline);
        let mut b = [0u8; 256];
        loop {
            // Stops within 100 ms of being told to.
            let wait = hold_until
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            if wait.is_zero() || stop.load(Ordering::Relaxed) {
                counts.held.fetch_add(1, Ordering::Relaxed);
                break;
            }
            match tokio::time::timeout(wait, s.read(&mut b)).await {
                // Closed (or told FATAL 53300, then closed).
                Ok(Ok(0)) | Ok(Err(_)) => {
                    if start.elapsed() < Duration::from_millis(100) {
                        counts.ended_at_once.fetch_add(1, Ordering::Relaxed);
                    }
                    break;
                }
                Ok(Ok(_)) | Err(_) => {}
            }
        }
    }
}

/// A TCP connection from the loopback address `source` (127.0.0.2, ...: Linux routes all of
/// 127.0.0.0/8 to the loopback interface) to the pooler on 127.0.0.1:`port` (::1 from an IPv6
/// source).
pub async fn connect_from(source: IpAddr, port: u16) -> std::io::Result<TcpStream> {
    let socket = match source {
        IpAddr::V4(_) => TcpSocket::new_v4()?,
        IpAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(source, 0))?;
    socket
        .connect(SocketAddr::new(loopback_of(source), port))
        .await
}

/// The pooler's address for a connection from `source`: 127.0.0.1, or ::1.
fn loopback_of(source: IpAddr) -> IpAddr {
    match source {
        IpAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
        IpAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
    }
}
