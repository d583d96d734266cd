//! The binary as an operator runs it: --help, --check, the embedded default, logging, and
//! SIGTERM/SIGINT letting running transactions finish (SIGINT within shutdown_timeout). More
//! of the command line and the signals: tests/process_cli.rs.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

#[test]
fn help_explains_the_flags() {
    let out = output({
        let mut c = Command::new(pgcorral_bin());
        c.arg("--help");
        c
    });
    assert!(out.status.success());
    let text = stdout(&out);
    for flag in ["--config", "-c", "--check", "PGHOST", "6432"] {
        assert!(text.contains(flag), "--help lacks {flag}: {text}");
    }
}

fn check(toml: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, toml).unwrap();
    output({
        let mut c = Command::new(pgcorral_bin());
        c.arg("--check").arg("-c").arg(&path);
        c
    })
}

#[test]
fn check_accepts_the_documented_example_and_names_bad_keys() {
    // The "Full example" of docs/configuration.md.
    let good = include_str!("../../../docs/configuration.md")
        .split("## Full example")
        .nth(1)
        .and_then(|s| s.split("```toml\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("docs/configuration.md has a full example");
    let out = check(good);
    assert!(out.status.success(), "{}", stderr(&out));

    let unknown = good.replace("workers = 0", "workers = 0\npool_sise = 3");
    let out = check(&unknown);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("pool_sise"), "{}", stderr(&out));

    let bad_mode = good.replace("pool_mode = \"session\"", "pool_mode = \"sessions\"");
    let out = check(&bad_mode);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("pool_mode"), "{}", stderr(&out));

    let bad_size = good.replace("default_pool_size = 20", "default_pool_size = 0");
    let out = check(&bad_size);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("default_pool_size"),
        "{}",
        stderr(&out)
    );

    let missing = output({
        let mut c = Command::new(pgcorral_bin());
        c.args(["--check", "--config", "/nonexistent/pgcorral.toml"]);
        c
    });
    assert_eq!(missing.status.code(), Some(1));
}

/// The embedded default (no file) against a trusting server: any database name, transaction
/// mode, pgbench -i and a 32-client run with no failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_default_serves_any_database_with_pgbench() {
    let pg = Postgres::start();
    pg.create_db("anydb");
    let port = pg.port.to_string();
    let mut config = pgcorral::config::embedded_default(|k| match k {
        "PGPORT" => Some(port.clone()),
        _ => None,
    })
    .unwrap();
    assert_eq!(config.general.listen_port, 6432);
    assert_eq!(config.general.listen_addr, "127.0.0.1");
    assert_eq!(
        config.general.pool_mode,
        pgcorral::config::PoolMode::Transaction
    );
    config.general.listen_port = 0;
    let server = pgcorral::Pooler::bind(config).await.unwrap();
    let p = server.local_addr().port();
    let services = server.services().clone();
    tokio::spawn(server.run());

    let init = tokio::task::spawn_blocking(move || {
        output({
            let mut c = pgbench_cmd(p, "postgres", "anydb", None);
            c.args(["-i", "-q"]);
            c
        })
    })
    .await
    .unwrap();
    assert!(init.status.success(), "{}", stderr(&init));
    let run = tokio::task::spawn_blocking(move || {
        output({
            let mut c = pgbench_cmd(p, "postgres", "anydb", None);
            c.args(["-c", "32", "-j", "2", "-T", "3"]);
            c
        })
    })
    .await
    .unwrap();
    let text = stdout(&run);
    assert!(run.status.success(), "{text}{}", stderr(&run));
    assert!(text.contains("number of failed transactions: 0"), "{text}");
    services.shutdown.cancel();
}

/// The binary with no config file, when 6432 is free on this machine.
#[test]
fn binary_without_config_listens_on_6432() {
    if std::net::TcpListener::bind("127.0.0.1:6432").is_err() {
        eprintln!("port 6432 is busy on this machine; not starting a second default instance");
        return;
    }
    let pg = Postgres::start();
    #[allow(clippy::zombie_processes)] // killed and waited below
    let mut child = Command::new(pgcorral_bin())
        .env("PGPORT", pg.port.to_string())
        .env_remove("PGHOST")
        .env_remove("PGUSER")
        .env_remove("PGPASSWORD")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut ok = None;
    for _ in 0..100 {
        let out = output({
            let mut c = psql_cmd(6432, "postgres", "postgres", None);
            c.args(["-Atc", "SELECT current_database()"]);
            c
        });
        if out.status.success() {
            ok = Some(stdout(&out));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    if ok.is_some() {
        // Killed, it could not remove its Unix socket.
        let _ = std::fs::remove_file("/tmp/.s.PGSQL.6432");
    }
    assert_eq!(ok.as_deref().map(str::trim), Some("postgres"));
}

/// SIGTERM (PgBouncer's WAIT_FOR_CLIENTS, docs/operations.md): no new connections; a
/// transaction already running finishes and commits; the process exits 0 once its client has
/// left.
#[test]
fn sigterm_lets_running_transactions_finish() {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE TABLE t (x int)");
    let toml = config(&pg, "postgres", "shutdown_timeout = 20000");
    let mut pooler = PoolerProcess::start(&toml);
    let port = pooler.port;

    // A transaction that is running when the signal arrives and commits 1.5 s later.
    let in_tx = std::thread::spawn(move || {
        output({
            let mut c = psql_cmd(port, "postgres", "postgres", None);
            c.args([
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                "BEGIN",
                "-c",
                "INSERT INTO t VALUES (1)",
                "-c",
                "SELECT pg_sleep(1.5)",
                "-c",
                "COMMIT",
            ]);
            c
        })
    });
    std::thread::sleep(Duration::from_millis(500));
    pooler.signal("TERM");
    std::thread::sleep(Duration::from_millis(200));

    let refused = output({
        let mut c = psql_cmd(port, "postgres", "postgres", None);
        c.args(["-c", "SELECT 1"]);
        c
    });
    assert!(
        !refused.status.success(),
        "new connection accepted during shutdown"
    );

    let out = in_tx.join().unwrap();
    assert!(
        out.status.success(),
        "running transaction failed: {}",
        stderr(&out)
    );
    assert_eq!(pg.sql("postgres", "SELECT count(*) FROM t"), "1");

    let start = Instant::now();
    let status = loop {
        if let Some(s) = pooler.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "pgcorral did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
    let log = pooler.log();
    assert!(log.contains("login attempt: db="), "{log}");
    assert!(
        log.contains("closing because: client close request"),
        "{log}"
    );
    assert!(log.contains("shutting down"), "{log}");
}

/// A transaction that outlasts shutdown_timeout does not keep the process alive.
#[test]
fn shutdown_timeout_bounds_the_drain() {
    let pg = Postgres::start();
    let toml = config(&pg, "postgres", "shutdown_timeout = 1000");
    let mut pooler = PoolerProcess::start(&toml);
    let port = pooler.port;
    let long = std::thread::spawn(move || {
        output({
            let mut c = psql_cmd(port, "postgres", "postgres", None);
            c.args(["-c", "BEGIN", "-c", "SELECT pg_sleep(30)"]);
            c
        })
    });
    std::thread::sleep(Duration::from_millis(500));
    let start = Instant::now();
    pooler.signal("INT");
    loop {
        if pooler.child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(8),
            "pgcorral outlived shutdown_timeout"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = long.join().unwrap();
    assert!(!out.status.success());
}

/// A start that cannot have its address says which, as PgBouncer's log does (`cannot listen on
/// 127.0.0.1:6432: ...`, `cannot listen on unix:/tmp/.s.PGSQL.6432: ...`), and exits 1.
#[test]
fn cannot_listen_names_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let start = |port: u16| {
        let path = dir.path().join("c.toml");
        let toml = format!(
            "[general]\nlisten_addr = \"127.0.0.1\"\nlisten_port = {port}\nauth_type = \"trust\"\n\
             unix_socket_dir = \"{}\"\n\n[databases.postgres]\nhost = \"127.0.0.1\"\nport = 1\n",
            dir.path().display()
        );
        std::fs::write(&path, toml).unwrap();
        output({
            let mut c = Command::new(pgcorral_bin());
            c.arg(&path).env("RUST_LOG", "info");
            c
        })
    };
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = start(port);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let want = format!("cannot listen on 127.0.0.1:{port}: Address already in use");
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
    drop(taken);

    let port = free_port();
    let socket = dir.path().join(format!(".s.PGSQL.{port}"));
    let _live = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let out = start(port);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let want = format!("cannot listen on unix:{}: ", socket.display());
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
}
