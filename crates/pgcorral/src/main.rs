//! The `pgcorral` binary: PgBouncer's command line, logging, `-d`/`-u`, the pidfile, the
//! runtime, and signals (docs/operations.md).

use std::path::{Path, PathBuf};

use clap::{ArgAction, Parser};
use pgcorral::logsafe::Esc;
use pgcorral::process::{daemon, log, pidfile, signals::Signals};

/// A multi-threaded PostgreSQL connection pooler.
///
/// Without a config file, pgcorral listens on 127.0.0.1:6432 and serves any database of the
/// PostgreSQL server at PGHOST:PGPORT (default 127.0.0.1:5432) in transaction mode.
#[derive(Parser, Debug)]
#[command(about, long_about, disable_version_flag = true)]
struct Cli {
    /// Configuration file: pgcorral's TOML (docs/configuration.md), PgCat's pgcat.toml
    /// (docs/pgcat.md) or PgBouncer's pgbouncer.ini (docs/pgbouncer.md).
    #[arg(value_name = "CONFIG", conflicts_with = "config")]
    config_file: Option<PathBuf>,

    /// The configuration file, as an option.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,

    /// Validate the configuration and exit: 0 when it is valid, 1 when it is not.
    #[arg(long)]
    check: bool,

    /// Run in the background (needs `pidfile`; log with `logfile`).
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,

    /// No log on stderr.
    #[arg(short = 'q', long = "quiet")]
    quiet: bool,

    /// More log: -v debug, -vv trace (RUST_LOG wins).
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,

    /// Switch to this user (its uid and groups) once the configuration is read.
    #[arg(short = 'u', long = "user", value_name = "USER")]
    user: Option<String>,

    /// Online restart: take the listening sockets of the pgcorral running with this
    /// configuration (over its Unix socket directory); it exits once its clients leave.
    #[arg(short = 'R', long = "reboot")]
    reboot: bool,

    /// Print the version (the console's SHOW VERSION) and exit.
    #[arg(short = 'V', long = "version")]
    version: bool,
}

fn main() {
    pgcorral::listen::trim::one_arena();
    std::process::exit(run());
}

/// Everything up to the end of the process; the exit code.
fn run() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help prints and exits 0; a mistake exits 1, as PgBouncer's.
            let _ = e.print();
            return if e.use_stderr() { 1 } else { 0 };
        }
    };
    if cli.version {
        println!("{}", pgcorral::admin::VERSION);
        return 0;
    }
    let path = cli.config_file.clone().or(cli.config.clone());
    let config = match &path {
        Some(path) => pgcorral::config::load_file_warnings(path),
        None => pgcorral::config::embedded_default(|k| std::env::var(k).ok()).map(|c| (c, vec![])),
    };
    let (config, warnings) = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pgcorral: invalid configuration: {e}");
            return 1;
        }
    };
    if cli.check {
        for w in &warnings {
            eprintln!("pgcorral: warning: {w}");
        }
        if config.general.auth_type == pgcorral::config::AuthType::Hba {
            let g = &config.general;
            match pgcorral::hba::Hba::load(&g.auth_hba_file, &g.auth_ident_file) {
                Ok((_, warnings)) => {
                    for w in warnings {
                        eprintln!("pgcorral: warning: {w}");
                    }
                }
                Err(e) => {
                    for line in &e.errors {
                        eprintln!("pgcorral: invalid hba file: {line}");
                    }
                    eprintln!("pgcorral: invalid configuration: {e}");
                    return 1;
                }
            }
        }
        if let Err(e) = pgcorral::tls::Tls::load(&config.general) {
            eprintln!("pgcorral: invalid configuration: {e}");
            return 1;
        }
        println!("configuration is valid");
        return 0;
    }
    let general = &config.general;
    let pidfile_path = (!general.pidfile.is_empty()).then(|| PathBuf::from(&general.pidfile));
    if cli.daemon && pidfile_path.is_none() {
        eprintln!("pgcorral: daemon needs pidfile configured");
        return 1;
    }
    if cli.daemon && general.logfile.is_empty() {
        eprintln!("pgcorral: warning: -d without logfile: the log is discarded");
    }
    // The logfile is opened before -u and -d, as the user who started pgcorral.
    let to_stderr = !cli.quiet && !cli.daemon;
    let output = match log::Output::open(general, to_stderr) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pgcorral: {e}");
            return 1;
        }
    };
    let filter = log::filter(
        std::env::var("RUST_LOG").ok(),
        cli.verbose,
        &general.log_level,
    );
    output.init(&filter, general.log_format);
    // Errors from here on go to the log; without it on stderr (-q, -d), to stderr as well
    // while it is still the terminal's.
    let die = |msg: &str| {
        if !to_stderr {
            eprintln!("pgcorral: {msg}");
        }
        tracing::error!("{msg}");
        1
    };
    // A PgCat or PgBouncer file's keys that pgcorral does not honour, one warning each.
    for w in &warnings {
        tracing::warn!(key = %Esc(&w.key), "{}", Esc(w));
    }
    if let Some(user) = &cli.user {
        if let Err(e) = daemon::switch_user(user) {
            return die(&format!("-u {user}: {e}"));
        }
        if daemon::is_root() {
            return die("pgcorral should not run as root");
        }
    }
    // -R: the running process's listeners, asked for before anything else binds. Without
    // one to ask (nothing running, no Unix socket directory) this one starts normally.
    let inherited = match (cli.reboot, config.general.unix_socket_dir.as_str()) {
        (false, _) => None,
        (true, "") => {
            tracing::warn!(
                "-R needs unix_socket_dir (the takeover goes over it): starting normally"
            );
            None
        }
        (true, dir) => match pgcorral::listen::takeover::take_in(dir, config.general.listen_port) {
            Ok(got) => Some(got),
            Err(e) => {
                tracing::warn!(error = %e, "takeover failed: starting normally");
                None
            }
        },
    };
    if let Some(p) = pidfile_path.as_ref().filter(|_| inherited.is_none()) {
        match pidfile::check(p) {
            Ok(pidfile::Found::Stale) => tracing::info!("stale pidfile, removing"),
            Ok(pidfile::Found::None) => {}
            Err(e) => return die(&e),
        }
    }
    if cli.daemon {
        // Before any thread exists: the runtime and the workers start after this.
        if let Err(e) = daemon::daemonize() {
            return die(&format!("cannot daemonize: {e}"));
        }
    }
    serve(config, path, pidfile_path.as_deref(), inherited)
}

/// Runs the pooler until it stops; the exit code.
fn serve(
    config: pgcorral::config::Config,
    path: Option<PathBuf>,
    pid_path: Option<&Path>,
    inherited: Option<pgcorral::listen::takeover::Inherited>,
) -> i32 {
    let taking_over = inherited.is_some();
    // The main thread accepts connections and handles signals; clients run on the worker
    // threads that `Pooler::run` starts (see corral_rt::workers).
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start runtime: {e}");
            return 1;
        }
    };
    rt.block_on(async move {
        let signals = match Signals::install() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("cannot install signal handlers: {e}");
                return 1;
            }
        };
        // Written before the port listens, so that a pooler that answers has its pidfile; removed
        // again (dropped) if the port cannot be had.
        // Taking over, the old process's pidfile names it: this one's replaces it.
        let write = match taking_over {
            true => pidfile::Pidfile::replace,
            false => pidfile::Pidfile::write,
        };
        let mut pidfile = match pid_path.map(write).transpose() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("{e}");
                return 1;
            }
        };
        let server = match pgcorral::Pooler::bind_inheriting(config, inherited).await {
            Ok(s) => s,
            Err(e) => {
                // A listener's error names where ("cannot listen on 127.0.0.1:6432: ..."),
                // as PgBouncer's.
                tracing::error!("{e}");
                return 1;
            }
        };
        tracing::info!("process up: {}", pgcorral::admin::VERSION);
        tracing::info!(addr = %server.local_addr(), "listening on {}", server.local_addr());
        if let Some(path) = server.unix_path() {
            tracing::info!(path = %path.display(), "listening on Unix socket {}", path.display());
        }
        if let Some(p) = path {
            let _ = server.services().config_path.set(p);
        }
        tokio::spawn(signals.run(server.services().clone()));
        if server.run().await == pgcorral::listen::Ended::HandedOver {
            // The new process's pidfile now; removing it on the way out could race its write.
            if let Some(p) = pidfile.take() {
                p.leave();
            }
        }
        tracing::info!("stopped");
        0
    })
    // Exits without dropping the runtime, which would wait for its blocking tasks; the
    // pidfile went with the future.
}
