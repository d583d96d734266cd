//! Opens many logged-in, idle client connections and holds them: the load for the memory
//! benchmark in `bench/run.sh` (RSS per idle client of a pooler).
//!
//! ```sh
//! cargo run --release --example idle_clients -- \
//!     --port 6432 --user bench --password secret --db bench --count 10000
//! ```
//!
//! Each connection is a full tokio-postgres login (startup, SCRAM or whatever the server asks
//! for, ReadyForQuery); no query is sent. At most `--concurrency` logins are in flight at a
//! time. When all `--count` connections are up, one line `ready N` is printed on stdout; the
//! connections are then held until stdin reaches end of file, or SIGINT/SIGTERM arrives, and
//! closed (Terminate) before exiting. The first failed login ends the program with exit
//! status 1 and the error on stderr. Connections the other side closes while they are held are
//! counted and reported on stderr at exit (`lost N`), with exit status 3.
//!
//! With `--tenants N` connection `i` logs in as `USER.tI` where `I` is `--tenant-offset` plus
//! `i % N`: its tenant's name after the last dot, as pgcorral's tenants are named
//! (for the tenant scale benchmark, `bench/tenants.sh`).
//!
//! Raise the open-file limit first (`ulimit -n`): each connection is one file descriptor.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tokio_postgres::NoTls;

/// Open N idle, logged-in PostgreSQL connections and hold them until stdin closes.
#[derive(Parser, Debug)]
struct Args {
    /// Host (name or IP address) to connect to.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// TCP port.
    #[arg(long)]
    port: u16,
    /// User name.
    #[arg(long)]
    user: String,
    /// Password; when not given, PGPASSWORD is used if set.
    #[arg(long)]
    password: Option<String>,
    /// Database name.
    #[arg(long)]
    db: String,
    /// Number of connections to open.
    #[arg(long)]
    count: usize,
    /// Most logins in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Give up on one login after this many seconds.
    #[arg(long, default_value_t = 60)]
    connect_timeout: u64,
    /// Spread the connections over this many tenants: connection i logs in as
    /// `{user}.t{offset + i % N}`. 0: the user name as given.
    #[arg(long, default_value_t = 0)]
    tenants: usize,
    /// The first tenant's number (with `--tenants`).
    #[arg(long, default_value_t = 0)]
    tenant_offset: usize,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("idle_clients: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<std::process::ExitCode, String> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(&args.host)
        .port(args.port)
        .user(&args.user)
        .dbname(&args.db)
        .application_name("idle_clients")
        .connect_timeout(Duration::from_secs(args.connect_timeout));
    if let Some(p) = args
        .password
        .clone()
        .or_else(|| std::env::var("PGPASSWORD").ok())
    {
        config.password(p);
    }
    // One configuration per tenant (one in all without --tenants); connection i takes i % len.
    let configs: Arc<Vec<tokio_postgres::Config>> = Arc::new(if args.tenants == 0 {
        vec![config]
    } else {
        (0..args.tenants)
            .map(|t| {
                let mut c = config.clone();
                c.user(format!("{}.t{}", args.user, args.tenant_offset + t));
                c
            })
            .collect()
    });
    let next = Arc::new(AtomicUsize::new(0));
    let lost = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();

    // `concurrency` tasks, each logging in one connection after another until `count` are open.
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency.clamp(1, args.count.max(1)) {
        let (configs, next, lost) = (configs.clone(), next.clone(), lost.clone());
        let count = args.count;
        tasks.push(tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok(held);
                }
                let (client, connection) = configs[i % configs.len()]
                    .connect(NoTls)
                    .await
                    .map_err(|e| format!("connection {} of {count}: {e}", i + 1))?;
                let lost = lost.clone();
                tokio::spawn(async move {
                    // Resolves only when the connection ends: an error, or the other side closed it.
                    let _ = connection.await;
                    lost.fetch_add(1, Ordering::Relaxed);
                });
                held.push(client);
            }
        }));
    }
    let mut clients = Vec::with_capacity(args.count);
    for t in tasks {
        let held: Result<Vec<_>, String> = t.await.map_err(|e| format!("login task: {e}"))?;
        clients.extend(held?);
    }
    println!(
        "ready {} in {:.2}s",
        clients.len(),
        started.elapsed().as_secs_f64()
    );

    wait_for_end().await;
    let lost_now = lost.load(Ordering::Relaxed);
    drop(clients); // each Client's connection sends Terminate and closes
    tokio::time::sleep(Duration::from_millis(200)).await;
    if lost_now > 0 {
        eprintln!("lost {lost_now}");
        return Ok(std::process::ExitCode::from(3));
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Waits until stdin reaches end of file (or fails), or SIGINT/SIGTERM arrives.
async fn wait_for_end() {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    // Blocking read on a plain thread: stdin is not worth an async reader here.
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        let _ = tx.send(());
    });
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        let _ = rx.await;
        return;
    };
    tokio::select! {
        _ = rx => {}
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
