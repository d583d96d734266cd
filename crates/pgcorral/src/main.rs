//! The `pgcorral` binary: command line, logging, the runtime, and signals → graceful shutdown.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// A multi-threaded PostgreSQL connection pooler.
///
/// Without --config, pgcorral listens on 127.0.0.1:6432 and serves any database of the
/// PostgreSQL server at PGHOST:PGPORT (default 127.0.0.1:5432) in transaction mode.
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Cli {
    /// Configuration file: pgcorral's TOML (docs/configuration.md), PgCat's pgcat.toml
    /// (docs/pgcat.md) or PgBouncer's pgbouncer.ini (docs/pgbouncer.md).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,

    /// Validate the configuration and exit: 0 when it is valid, 1 when it is not.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match &cli.config {
        Some(path) => pgcorral::config::load_file_warnings(path),
        None => pgcorral::config::embedded_default(|k| std::env::var(k).ok()).map(|c| (c, vec![])),
    };
    let (config, warnings) = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pgcorral: invalid configuration: {e}");
            return ExitCode::FAILURE;
        }
    };
    if cli.check {
        for w in &warnings {
            eprintln!("pgcorral: warning: {w}");
        }
        if let Err(e) = pgcorral::tls::Tls::load(&config.general) {
            eprintln!("pgcorral: invalid configuration: {e}");
            return ExitCode::FAILURE;
        }
        println!("configuration is valid");
        return ExitCode::SUCCESS;
    }
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| config.general.log_level.clone());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // A PgCat or PgBouncer file's keys that pgcorral does not honour, one warning each.
    for w in &warnings {
        tracing::warn!(key = %w.key, "{w}");
    }

    // The main thread accepts connections and handles signals; clients run on the worker
    // threads that `Pooler::run` starts (see corral_rt::workers).
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pgcorral: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let path = cli.config.clone();
    rt.block_on(async move {
        // Signal handlers first: once the port is bound, a client (or a test) may connect and
        // send SIGHUP at once, whose default action would end the process.
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(hup), Ok(term), Ok(int)) = (
            signal(SignalKind::hangup()),
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            eprintln!("pgcorral: cannot install signal handlers");
            return ExitCode::FAILURE;
        };
        let server = match pgcorral::Pooler::bind(config).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(addr = %server.local_addr(), "listening on {}", server.local_addr());
        if let Some(path) = server.unix_path() {
            tracing::info!(path = %path.display(), "listening on Unix socket {}", path.display());
        }
        let shutdown = server.services().shutdown.clone();
        tokio::spawn(async move {
            wait_for_signal(term, int).await;
            tracing::info!("received shutdown signal");
            shutdown.cancel();
        });
        if let Some(p) = path {
            let _ = server.services().config_path.set(p);
        }
        tokio::spawn(reload_on_sighup(hup, server.services().clone()));
        server.run().await;
        tracing::info!("stopped");
        ExitCode::SUCCESS
    })
}

/// SIGHUP reads the config file again (see `pgcorral::reload`); a bad file is logged and the
/// running configuration stays.
async fn reload_on_sighup(mut hup: tokio::signal::unix::Signal, services: pgcorral::Services) {
    while hup.recv().await.is_some() {
        tracing::info!("received SIGHUP: reloading the configuration");
        if let Err(e) = pgcorral::reload::reload(&services) {
            tracing::error!(error = %e, "reload refused; the running configuration stays");
        }
    }
}

async fn wait_for_signal(
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
) {
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
