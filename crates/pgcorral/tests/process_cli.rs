//! The command line and the process's life as PgBouncer's (docs/operations.md): --version
//! equal to SHOW VERSION, --help, the config file as an argument, -d with its pidfile and
//! logfile, and each signal (SIGTERM waits for clients, SIGQUIT and SHUTDOWN exit at once,
//! SIGUSR1 pauses, SIGUSR2 resumes); SHUTDOWN WAIT_FOR_SERVERS with clients idle, waiting and
//! in a transaction, and the console over the Unix socket during a stop that waits.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::wire::{query, tags, Wire};
use support::*;

const ADMIN: &str = "admin_users = [\"postgres\"]";

fn pgcorral(args: &[&str]) -> std::process::Output {
    output({
        let mut c = Command::new(pgcorral_bin());
        c.args(args).env("RUST_LOG", "info");
        c
    })
}

#[test]
fn version_is_show_version_and_help_exits_0() {
    let out = pgcorral(&["--version"]);
    assert!(out.status.success());
    let first = stdout(&out).lines().next().unwrap_or_default().to_string();
    assert!(first.contains("PgBouncer 1."), "{first}");
    assert_eq!(stdout(&pgcorral(&["-V"])), stdout(&out));

    let pg = Postgres::start();
    let pooler = PoolerProcess::start(&config(&pg, "postgres", ADMIN));
    let show = output({
        let mut c = psql_cmd(pooler.port, "postgres", "pgbouncer", None);
        c.args(["-Atc", "SHOW VERSION"]);
        c
    });
    assert_eq!(stdout(&show).trim_end(), first, "{}", stderr(&show));

    let help = pgcorral(&["-h"]);
    assert!(help.status.success());
    for flag in [
        "--daemon",
        "--quiet",
        "--verbose",
        "--user",
        "--reboot",
        "CONFIG",
    ] {
        assert!(stdout(&help).contains(flag), "{}", stdout(&help));
    }
    let bad = pgcorral(&["--no-such-flag"]);
    assert_eq!(bad.status.code(), Some(1));
}

fn select_1(port: u16) -> std::process::Output {
    output({
        let mut c = psql_cmd(port, "postgres", "postgres", None);
        c.args(["-Atc", "SELECT 1"]);
        c
    })
}

#[test]
fn config_file_as_the_argument() {
    let pg = Postgres::start();
    let (dir, path, port) = config_file(&pg, |_| "unix_socket_dir = \"\"");
    #[allow(clippy::zombie_processes)] // killed and waited below
    let mut child = Command::new(pgcorral_bin())
        .arg("-q")
        .arg(&path)
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
        .spawn()
        .unwrap();
    poll_until("pgcorral listens", 5, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert_eq!(stdout(&select_1(port)).trim(), "1");
    let _ = child.kill();
    let _ = child.wait();
    // -q: nothing on stderr.
    assert_eq!(std::fs::read_to_string(dir.join("stderr")).unwrap(), "");
    let both = pgcorral(&["-c", path.to_str().unwrap(), path.to_str().unwrap()]);
    assert_eq!(both.status.code(), Some(1));
}

/// A daemon's pid, read from its pidfile; sends SIGQUIT on drop unless it is gone.
struct Daemon {
    pidfile: PathBuf,
    pid: String,
}

impl Daemon {
    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid])
            .status();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.pidfile.exists() {
            self.signal("QUIT");
        }
    }
}

fn read_pid(pidfile: &Path) -> Option<String> {
    let text = std::fs::read_to_string(pidfile).ok()?;
    text.ends_with('\n').then(|| text.trim().to_string())
}

#[test]
fn daemon_writes_its_pidfile_logs_to_logfile_and_refuses_a_second_start() {
    let pg = Postgres::start();
    let (dir, _, _) = config_file(&pg, |_| "");
    let pidfile = dir.join("pgcorral.pid");
    let logfile = dir.join("pgcorral.log");
    let general = format!(
        "unix_socket_dir = \"\"\npidfile = \"{}\"\nlogfile = \"{}\"",
        pidfile.display(),
        logfile.display()
    );
    let (_, path, port) = config_file(&pg, |_| &general);
    let path = path.to_str().unwrap();

    let (_, no_pidfile, _) = config_file(&pg, |_| "");
    let out = pgcorral(&["-d", no_pidfile.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("daemon needs pidfile configured"),
        "{}",
        stderr(&out)
    );

    // The command returns at once; the daemon goes on.
    let out = pgcorral(&["-d", path]);
    assert!(out.status.success(), "{}", stderr(&out));
    poll_until("pidfile written", 10, || read_pid(&pidfile).is_some());
    let daemon = Daemon {
        pidfile: pidfile.clone(),
        pid: read_pid(&pidfile).unwrap(),
    };
    assert!(Path::new(&format!("/proc/{}", daemon.pid)).exists());
    assert_eq!(stdout(&select_1(port)).trim(), "1");

    let second = pgcorral(&["-d", path]);
    assert_eq!(second.status.code(), Some(1));
    let text = stderr(&second);
    assert!(text.contains("exists, another instance running?"), "{text}");
    assert_eq!(read_pid(&pidfile).as_deref(), Some(daemon.pid.as_str()));

    daemon.signal("TERM");
    poll_until("pidfile removed after SIGTERM", 10, || !pidfile.exists());
    let log = std::fs::read_to_string(&logfile).unwrap();
    for line in [
        "process up: pgcorral",
        "got SIGTERM, shutting down, waiting for all clients disconnect",
        "client connections dropped, exiting",
    ] {
        assert!(log.contains(line), "{line} not in {log}");
    }

    // A pidfile left by a process that is gone does not stop a start.
    std::fs::write(&pidfile, "2147483647\n").unwrap();
    let out = pgcorral(&["-d", path]);
    assert!(out.status.success(), "{}", stderr(&out));
    poll_until("stale pidfile replaced", 10, || {
        read_pid(&pidfile).is_some_and(|p| p != "2147483647")
    });
    let daemon = Daemon {
        pidfile: pidfile.clone(),
        pid: read_pid(&pidfile).unwrap(),
    };
    daemon.signal("QUIT");
    poll_until("pidfile removed after SIGQUIT", 10, || !pidfile.exists());
    assert!(std::fs::read_to_string(&logfile)
        .unwrap()
        .contains("stale pidfile, removing"));
}

/// After `-d`, every log line names the daemon's pid, the pidfile's (PgBouncer's line has the
/// pid: it is not the pid of the process that forked).
#[test]
fn a_daemons_log_lines_carry_its_pid() {
    let pg = Postgres::start();
    let (dir, _, _) = config_file(&pg, |_| "");
    let pidfile = dir.join("pgcorral.pid");
    let logfile = dir.join("pgcorral.log");
    let general = format!(
        "unix_socket_dir = \"\"\npidfile = \"{}\"\nlogfile = \"{}\"\nlog_format = \"pgbouncer\"",
        pidfile.display(),
        logfile.display()
    );
    let (_, path, port) = config_file(&pg, |_| &general);
    let out = pgcorral(&["-d", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    poll_until("pidfile written", 10, || read_pid(&pidfile).is_some());
    let daemon = Daemon {
        pidfile: pidfile.clone(),
        pid: read_pid(&pidfile).unwrap(),
    };
    assert_eq!(stdout(&select_1(port)).trim(), "1");
    daemon.signal("TERM");
    poll_until("pidfile removed after SIGTERM", 10, || !pidfile.exists());
    let log = std::fs::read_to_string(&logfile).unwrap();
    let from_up: Vec<&str> = log
        .lines()
        .skip_while(|l| !l.contains("process up"))
        .collect();
    assert!(from_up.len() > 3, "{log}");
    let mark = format!(" [{}] ", daemon.pid);
    for line in from_up {
        assert!(line.contains(&mark), "{line:?} lacks {mark:?} in\n{log}");
    }
}

#[test]
fn sigusr1_pauses_and_sigusr2_resumes() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start(&config(&pg, "postgres", ""));
    let port = pooler.port;
    assert_eq!(stdout(&select_1(port)).trim(), "1");
    pooler.signal("USR1");
    poll_until("SIGUSR1 logged", 5, || {
        pooler.log().contains("got SIGUSR1, pausing all activity")
    });
    let query = std::thread::spawn(move || select_1(port));
    std::thread::sleep(Duration::from_millis(1000));
    assert!(!query.is_finished(), "a query ran while paused");
    pooler.signal("USR2");
    let out = query.join().unwrap();
    assert_eq!(stdout(&out).trim(), "1", "{}", stderr(&out));
    let log = pooler.log();
    assert!(log.contains("got SIGUSR2, continuing from PAUSE"), "{log}");
    pooler.signal("USR2");
    poll_until("second SIGUSR2 logged", 5, || {
        pooler
            .log()
            .contains("got SIGUSR2, but not paused/suspended")
    });
}

/// A psql that holds a transaction open for 30 s.
fn long_transaction(port: u16) -> std::thread::JoinHandle<std::process::Output> {
    let t = std::thread::spawn(move || {
        output({
            let mut c = psql_cmd(port, "postgres", "postgres", None);
            c.args(["-c", "BEGIN", "-c", "SELECT pg_sleep(30)"]);
            c
        })
    });
    std::thread::sleep(Duration::from_millis(500));
    t
}

fn exits_within(pooler: &mut PoolerProcess, secs: u64) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = pooler.child.try_wait().unwrap() {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "pgcorral still runs: {}",
            pooler.log()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn sigquit_and_console_shutdown_exit_at_once() {
    let pg = Postgres::start();
    let toml = config(
        &pg,
        "postgres",
        &format!("{ADMIN}\nshutdown_timeout = 60000"),
    );
    let mut pooler = PoolerProcess::start(&toml);
    let client = long_transaction(pooler.port);
    pooler.signal("QUIT");
    assert!(exits_within(&mut pooler, 3).success());
    assert!(pooler.log().contains("got SIGQUIT, fast exit"));
    assert!(!client.join().unwrap().status.success());

    let mut pooler = PoolerProcess::start(&toml);
    let client = long_transaction(pooler.port);
    let _ = output({
        let mut c = psql_cmd(pooler.port, "postgres", "pgbouncer", None);
        c.args(["-c", "SHUTDOWN"]);
        c
    });
    assert!(exits_within(&mut pooler, 3).success());
    assert!(pooler.log().contains("SHUTDOWN command issued"));
    assert!(!client.join().unwrap().status.success());
}

/// An idle client when the process exits at once (SIGQUIT here; a second SIGTERM and the
/// console's SHUTDOWN alike) is told as PostgreSQL's immediate shutdown tells its sessions: a
/// WARNING (57P01), never an error, so that its next query finds the connection closed
/// (`server closed the connection unexpectedly`, what PgBouncer's own suite expects).
/// (tests/differential.rs compares it with PostgreSQL's in each pool mode.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_is_warned_not_failed_when_the_process_exits_at_once() {
    let pg = Postgres::start();
    let mut pooler = PoolerProcess::start(&config(&pg, "postgres", ""));
    let mut idle = Wire::connect(pooler.port, "postgres", "postgres").await;
    idle.send(&query("SELECT 1")).await;
    assert_eq!(tags(&idle.until_ready().await), "TDCZ");
    pooler.signal("QUIT");
    assert!(exits_within(&mut pooler, 3).success());
    let mut told = Vec::new();
    while let Ok(Some(m)) = idle.recv_within(Duration::from_secs(5)).await {
        told.push(m);
    }
    assert_eq!(told.len(), 1, "{told:?}");
    for m in &told {
        assert_eq!(m.tag, b'N', "{told:?}");
        assert_eq!(m.field(b'S').as_deref(), Some("WARNING"));
        assert_eq!(m.code(), "57P01");
        assert_eq!(
            m.field(b'M').as_deref(),
            Some("terminating connection due to immediate shutdown command")
        );
    }
}

/// SIGTERM: no new connections, but a connected client goes on, with new transactions, until
/// it leaves; then the process exits. A second SIGTERM exits at once.
#[test]
fn sigterm_waits_for_clients_to_leave() {
    let pg = Postgres::start();
    let mut pooler = PoolerProcess::start(&config(&pg, "postgres", "shutdown_timeout = 500"));
    let port = pooler.port;
    // Three transactions over 2.5 s; SIGTERM arrives during the second.
    let client = std::thread::spawn(move || {
        output(psql_statements(
            port,
            &["SELECT 1", "SELECT pg_sleep(2)", "SELECT 3"],
        ))
    });
    std::thread::sleep(Duration::from_millis(500));
    pooler.signal("TERM");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!select_1(port).status.success(), "new connection accepted");
    // Longer than shutdown_timeout: it does not apply to waiting for clients.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(pooler.child.try_wait().unwrap().is_none(), "exited early");
    let out = client.join().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains('3'), "{}", stdout(&out));
    assert!(exits_within(&mut pooler, 5).success());
    let log = pooler.log();
    assert!(
        log.contains("got SIGTERM, shutting down, waiting for all clients disconnect"),
        "{log}"
    );
    assert!(log.contains("client connections dropped, exiting"), "{log}");

    let mut pooler = PoolerProcess::start(&config(&pg, "postgres", ""));
    let client = long_transaction(pooler.port);
    pooler.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    assert!(pooler.child.try_wait().unwrap().is_none(), "exited early");
    pooler.signal("TERM");
    assert!(exits_within(&mut pooler, 3).success());
    assert!(pooler
        .log()
        .contains("got SIGTERM while shutting down, fast exit"));
    assert!(!client.join().unwrap().status.success());
}

/// tokio-postgres over the Unix socket in `dir` for `port`, as `postgres` on `db`.
async fn connect_unix(
    dir: &Path,
    port: u16,
    db: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut c = tokio_postgres::Config::new();
    c.host_path(dir).port(port).user("postgres").dbname(db);
    c.connect_timeout(Duration::from_secs(10));
    let (client, conn) = c.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// The SQLSTATE and message of a failed query or login.
fn refusal(e: &tokio_postgres::Error) -> (String, String) {
    let d = e
        .as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {e:?}"));
    (d.code().code().to_string(), d.message().to_string())
}

/// During a stop that waits, the Unix socket stays open for the console (as PgBouncer 1.25):
/// SHOW works there, while other logins over it are refused (57P03) and TCP is closed.
async fn only_the_console_gets_in(dir: &Path, port: u16) {
    let console = connect_unix(dir, port, "pgbouncer")
        .await
        .expect("the console over the Unix socket during the stop");
    let version = console.simple_query("SHOW VERSION").await.unwrap();
    assert!(version.len() > 1, "{version:?}");
    let e = connect_unix(dir, port, "postgres")
        .await
        .map(|_| ())
        .expect_err("a login other than the console's is refused");
    assert_eq!(
        refusal(&e),
        ("57P03".into(), "pgcorral is shutting down".into())
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "TCP still accepts"
    );
}

/// SHUTDOWN WAIT_FOR_SERVERS (SIGINT's stop) as PgBouncer's: a client in a transaction
/// finishes it; a client idle at the command is closed when it next asks for a server, and one
/// already waiting for a server at once (`FATAL 57P01 server shutting down`); the console stays
/// reachable over the Unix socket; the process exits once no server is in use (the idle client
/// closed with it) and removes the socket file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_wait_for_servers_closes_clients_as_they_ask_for_a_server() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let general = format!(
        "{ADMIN}\nunix_socket_dir = \"{}\"\npool_mode = \"transaction\"\n\
         default_pool_size = 1\nshutdown_timeout = 60000",
        dir.path().display()
    );
    let mut pooler = PoolerProcess::start(&config(&pg, "postgres", &general));
    let port = pooler.port;
    let socket = dir.path().join(format!(".s.PGSQL.{port}"));
    let in_tx = connect(port, "postgres", None, "postgres").await.unwrap();
    in_tx.simple_query("BEGIN; SELECT 1").await.unwrap();
    let idle = connect(port, "postgres", None, "postgres").await.unwrap();
    let waiting = connect(port, "postgres", None, "postgres").await.unwrap();
    // The pool's one server is in_tx's: this query waits for it.
    let waits = tokio::spawn(async move { waiting.simple_query("SELECT 3").await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waits.is_finished(), "no server was free");

    let console = connect_unix(dir.path(), port, "pgbouncer").await.unwrap();
    console
        .simple_query("SHUTDOWN WAIT_FOR_SERVERS")
        .await
        .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), waits)
        .await
        .expect("the waiting client is sent away")
        .unwrap()
        .expect_err("the waiting client is closed");
    assert_eq!(refusal(&e), ("57P01".into(), "server shutting down".into()));

    // The transaction goes on; the idle client is closed at its next request.
    in_tx.simple_query("SELECT 2").await.unwrap();
    let e = idle.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(refusal(&e), ("57P01".into(), "server shutting down".into()));
    only_the_console_gets_in(dir.path(), port).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(pooler.child.try_wait().unwrap().is_none(), "exited early");

    // Its server released, the process exits, closing the console with it.
    in_tx.simple_query("COMMIT").await.unwrap();
    assert!(tokio::task::block_in_place(|| exits_within(&mut pooler, 5)).success());
    assert!(!socket.exists(), "the socket file is removed");
    let log = pooler.log();
    for line in [
        "SHUTDOWN WAIT_FOR_SERVERS command issued",
        "closing because: server shutting down",
        "server connections dropped, exiting",
    ] {
        assert!(log.contains(line), "{line} not in {log}");
    }
}

/// SIGTERM (WAIT_FOR_CLIENTS): the console stays reachable over the Unix socket while the
/// clients are waited for, and counts as one of them; the socket file goes with the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_keeps_the_unix_socket_for_the_console() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().unwrap();
    let general = format!("{ADMIN}\nunix_socket_dir = \"{}\"", dir.path().display());
    let mut pooler = PoolerProcess::start(&config(&pg, "postgres", &general));
    let port = pooler.port;
    let socket = dir.path().join(format!(".s.PGSQL.{port}"));
    let client = connect(port, "postgres", None, "postgres").await.unwrap();
    client.simple_query("SELECT 1").await.unwrap();
    pooler.signal("TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    only_the_console_gets_in(dir.path(), port).await;
    // Clients go on until they leave.
    client.simple_query("SELECT 2").await.unwrap();
    let console = connect_unix(dir.path(), port, "pgbouncer").await.unwrap();
    drop(client);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        pooler.child.try_wait().unwrap().is_none(),
        "a console user is a client too"
    );
    drop(console);
    assert!(tokio::task::block_in_place(|| exits_within(&mut pooler, 5)).success());
    assert!(!socket.exists(), "the socket file is removed");
    assert!(pooler.log().contains("client connections dropped, exiting"));
}

/// -R without a Unix socket directory (where the takeover goes) starts normally and says so;
/// so_reuseport lets a second process listen on the same port. (The takeover itself:
/// tests/online_restart.rs.)
#[test]
fn reboot_flag_and_so_reuseport() {
    let pg = Postgres::start();
    let (dir, path, port) = config_file(&pg, |_| "unix_socket_dir = \"\"\nso_reuseport = true");
    let spawn = |log: &str| {
        #[allow(clippy::zombie_processes)] // killed and waited below
        let child = Command::new(pgcorral_bin())
            .arg("-R")
            .arg(&path)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(log)).unwrap())
            .spawn()
            .unwrap();
        child
    };
    let mut first = spawn("first.log");
    poll_until("first listens", 5, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let mut second = spawn("second.log");
    poll_until("second listens", 5, || {
        std::fs::read_to_string(dir.join("second.log"))
            .unwrap()
            .contains("process up")
    });
    assert!(second.try_wait().unwrap().is_none());
    // The first stops; the port stays served by the second.
    let _ = Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status();
    let _ = first.wait();
    assert_eq!(stdout(&select_1(port)).trim(), "1");
    let _ = second.kill();
    let _ = second.wait();
    let log = std::fs::read_to_string(dir.join("first.log")).unwrap();
    assert!(
        log.contains("-R needs unix_socket_dir (the takeover goes over it): starting normally"),
        "{log}"
    );
}
