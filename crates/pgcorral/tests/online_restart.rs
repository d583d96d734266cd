//! Online restart (`-R`, docs/operations.md): a new process takes the running one's listening
//! sockets (TCP and Unix) over its takeover socket; the old one finishes with its clients and
//! exits, and no client sees a refused connection or a failed transaction, under pgbench load
//! too.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// A pooler process, killed when dropped (a failed assertion leaves none running).
struct Running(Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A pooler process started from `path` (`-R` when `reboot`), logging to `log` in `dir`.
fn spawn(path: &Path, dir: &Path, log: &str, reboot: bool) -> Running {
    let mut c = Command::new(pgcorral_bin());
    if reboot {
        c.arg("-R");
    }
    #[allow(clippy::zombie_processes)] // waited for by each test
    let child = c
        .arg(path)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(log)).unwrap())
        .spawn()
        .unwrap();
    Running(child)
}

/// A config in a directory of its own: a fixed port, the Unix socket and the pidfile there.
fn setup(pg: &Postgres) -> (PathBuf, PathBuf, u16) {
    config_file(pg, |dir| {
        format!(
            "unix_socket_dir = \"{d}\"\npidfile = \"{d}/pgcorral.pid\"\n\
             pool_mode = \"transaction\"\ndefault_pool_size = 10",
            d = dir.display()
        )
    })
}

fn pid_in(dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(dir.join("pgcorral.pid")).ok()?;
    text.trim().parse().ok()
}

fn log(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

fn exits_within(child: &mut Child, secs: u64, dir: &Path, name: &str) -> bool {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.success();
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "{name} still runs: {}",
            log(dir, name)
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn psql(port_or_dir: &str, args: &[&str]) -> Output {
    let mut c = Command::new("psql");
    c.args(["-X", "-h", port_or_dir]).args(args);
    c.stdin(Stdio::null());
    output(c)
}

/// `SELECT 1` through the pooler at `host` (an address or a socket directory) and `port`.
fn select_one(host: &str, port: u16) -> Output {
    psql(
        host,
        &[
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-Atc",
            "SELECT 1",
        ],
    )
}

/// The new process has both sockets (the Unix socket's file stays where it was), the old one
/// keeps its client in its transaction and with new ones until it leaves, then exits; the
/// pidfile names the new process.
#[test]
fn the_new_process_takes_the_sockets_and_the_old_one_finishes_its_clients() {
    let pg = Postgres::start();
    let (dir, path, port) = setup(&pg);
    let mut old = spawn(&path, &dir, "old.log", false);
    poll_until("the first process listens", 10, || {
        pid_in(&dir) == Some(old.id()) && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    // Three statements over 2.5 s on the old process; the takeover comes during the second.
    let p = port.to_string();
    let client = std::thread::spawn(move || {
        output(psql_statements(
            port,
            &[
                "SELECT 1",
                "BEGIN",
                "SELECT pg_sleep(2)",
                "COMMIT",
                "SELECT 3",
            ],
        ))
    });
    // Once the client is in its transaction (a fixed wait lost the race to a slow psql start
    // on a loaded machine: the old process, with no client yet, had nothing to wait for).
    poll_until("the client sleeps in its transaction", 15, || {
        pg.sql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' \
             AND query LIKE 'SELECT pg_sleep%'",
        ) != "0"
    });
    let mut new = spawn(&path, &dir, "new.log", true);
    poll_until("the pidfile names the new process", 10, || {
        pid_in(&dir) == Some(new.id())
    });
    poll_until(
        "the old process says it handed the listeners over",
        10,
        || log(&dir, "old.log").contains("takeover: a new process has the listeners"),
    );
    // New connections, by TCP and by the Unix socket, are the new process's.
    let dir_s = dir.display().to_string();
    for host in ["127.0.0.1", dir_s.as_str()] {
        let o = psql(
            host,
            &[
                "-p", &p, "-U", "postgres", "-d", "postgres", "-Atc", "SELECT 2",
            ],
        );
        assert_eq!(stdout(&o).trim(), "2", "{host}: {}", stderr(&o));
    }
    assert!(
        old.try_wait().unwrap().is_none(),
        "the old process left its client"
    );
    let out = client.join().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains('3'), "{}", stdout(&out));
    assert!(exits_within(&mut old, 10, &dir, "old.log"));
    // The old process left the new one's files in place.
    assert!(dir.join(format!(".s.PGSQL.{port}")).exists());
    assert_eq!(pid_in(&dir), Some(new.id()));
    let o = psql(
        &dir_s,
        &[
            "-p", &p, "-U", "postgres", "-d", "postgres", "-Atc", "SELECT 4",
        ],
    );
    assert_eq!(stdout(&o).trim(), "4", "{}", stderr(&o));
    // And a second restart from the new one works the same way.
    let mut third = spawn(&path, &dir, "third.log", true);
    poll_until("the pidfile names the third process", 10, || {
        pid_in(&dir) == Some(third.id())
    });
    assert!(exits_within(&mut new, 10, &dir, "new.log"));
    let o = psql(
        "127.0.0.1",
        &[
            "-p", &p, "-U", "postgres", "-d", "postgres", "-Atc", "SELECT 5",
        ],
    );
    assert_eq!(stdout(&o).trim(), "5", "{}", stderr(&o));
    let _ = Command::new("kill")
        .args(["-TERM", &third.id().to_string()])
        .status();
    assert!(exits_within(&mut third, 10, &dir, "third.log"));
    assert!(!dir.join(format!(".s.PGSQL.{port}")).exists());
    assert!(!dir.join("pgcorral.pid").exists());
}

/// A process of the same OS user that connects to the takeover socket and says nothing delays
/// no login (the handshake runs beside the accepts, and gives up after its patience or when
/// the other end hangs up); a real takeover afterwards works.
#[test]
fn a_stalled_takeover_connection_delays_no_login() {
    let pg = Postgres::start();
    let (dir, path, port) = setup(&pg);
    let mut old = spawn(&path, &dir, "old.log", false);
    poll_until("the first process listens", 10, || {
        pid_in(&dir) == Some(old.id()) && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let stalled =
        std::os::unix::net::UnixStream::connect(dir.join(format!(".s.TAKE.{port}"))).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let p = port.to_string();
    for host in ["127.0.0.1", dir.display().to_string().as_str()] {
        let start = Instant::now();
        let o = select_one(host, port);
        assert_eq!(stdout(&o).trim(), "1", "{host}: {}", stderr(&o));
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{host}: a login waited {:?} behind the stalled takeover",
            start.elapsed()
        );
    }
    // Hanging up ends that handshake; a real takeover then works (given time: under a loaded
    // machine's full test run the new process once took longer than 10 s).
    drop(stalled);
    let mut new = spawn(&path, &dir, "new.log", true);
    let start = Instant::now();
    while pid_in(&dir) != Some(new.id()) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the pidfile names the new process\nold:\n{}\nnew:\n{}",
            log(&dir, "old.log"),
            log(&dir, "new.log")
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(exits_within(&mut old, 10, &dir, "old.log"));
    let o = psql(
        "127.0.0.1",
        &[
            "-p", &p, "-U", "postgres", "-d", "postgres", "-Atc", "SELECT 2",
        ],
    );
    assert_eq!(stdout(&o).trim(), "2", "{}", stderr(&o));
    let _ = Command::new("kill")
        .args(["-TERM", &new.id().to_string()])
        .status();
    assert!(exits_within(&mut new, 10, &dir, "new.log"));
}

/// Under pgbench load, persistent clients (they finish on the old process) and clients that
/// connect for each transaction (they move to the new process as it takes over): no failed
/// transaction, no refused connection.
#[test]
fn online_restart_under_pgbench_loses_nothing() {
    let pg = Postgres::start();
    let init = output({
        let mut c = pgbench_cmd(pg.port, "postgres", "postgres", None);
        c.args(["-i", "-q", "-s", "1"]);
        c
    });
    assert!(init.status.success(), "{}", stderr(&init));
    let (dir, path, port) = setup(&pg);
    let mut old = spawn(&path, &dir, "old.log", false);
    poll_until("the first process listens", 10, || {
        pid_in(&dir) == Some(old.id()) && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let run = |reconnect: bool| {
        std::thread::spawn(move || {
            let mut c = pgbench_cmd(port, "postgres", "postgres", None);
            c.args(["-n", "-S", "-c", "4", "-j", "2", "-T", "6"]);
            if reconnect {
                c.arg("-C");
            }
            output(c)
        })
    };
    let persistent = run(false);
    let reconnecting = run(true);
    std::thread::sleep(Duration::from_secs(2));
    let new = spawn(&path, &dir, "new.log", true);
    poll_until("the pidfile names the new process", 10, || {
        pid_in(&dir) == Some(new.id())
    });
    let persistent = persistent.join().unwrap();
    let reconnecting = reconnecting.join().unwrap();
    assert_pgbench_ok("persistent clients", &persistent);
    assert_pgbench_ok("a connection per transaction", &reconnecting);
    assert!(exits_within(&mut old, 10, &dir, "old.log"));
    let o = select_one("127.0.0.1", port);
    assert_eq!(stdout(&o).trim(), "1", "{}", stderr(&o));
    drop(new);
}

/// Idle clients go to the new process with their session: the old process exits while they
/// stay connected, and each finds its own settings there. A client in a transaction moves once
/// the transaction ends; one with a named prepared statement finishes on the old process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_clients_move_to_the_new_process_with_their_session() {
    let pg = Postgres::start();
    let (dir, path, port) = setup(&pg);
    let mut old = spawn(&path, &dir, "old.log", false);
    blocking(|| {
        poll_until("the first process listens", 10, || {
            pid_in(&dir) == Some(old.id())
                && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
    });
    let idle = connect(port, "postgres", None, "postgres").await.unwrap();
    idle.batch_execute("SET search_path TO moved, public; SET application_name = 'stays'")
        .await
        .unwrap();
    // A client with a named prepared statement stays on the old process until it leaves.
    let prepared = connect(port, "postgres", None, "postgres").await.unwrap();
    let statement = prepared.prepare("SELECT 1").await.unwrap();
    let busy = connect(port, "postgres", None, "postgres").await.unwrap();
    busy.batch_execute("SET work_mem = '7MB'; BEGIN; SELECT 1")
        .await
        .unwrap();
    let new = spawn(&path, &dir, "new.log", true);
    blocking(|| {
        poll_until("the pidfile names the new process", 10, || {
            pid_in(&dir) == Some(new.id())
        })
    });
    // `busy` is in its transaction on the old process; it moves after COMMIT.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        old.try_wait().unwrap().is_none(),
        "old exited with a transaction open"
    );
    busy.batch_execute("SELECT 2; COMMIT").await.unwrap();
    let shown = busy.simple_query("SHOW work_mem").await.unwrap();
    let value = shown.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(value.as_deref(), Some("7MB"));
    let shown = idle.simple_query("SHOW search_path").await.unwrap();
    let value = shown.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(value.as_deref(), Some("moved, public"));
    let one: i32 = prepared.query_one(&statement, &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        old.try_wait().unwrap().is_none(),
        "old exited under a client it kept"
    );
    drop((statement, prepared));
    blocking(|| assert!(exits_within(&mut old, 10, &dir, "old.log")));
    // Both clients are the new process's now, with their settings.
    for (c, name, want) in [
        (&idle, "application_name", "stays"),
        (&busy, "work_mem", "7MB"),
    ] {
        let rows = c.simple_query(&format!("SHOW {name}")).await.unwrap();
        let value = rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        });
        assert_eq!(value.as_deref(), Some(want), "{name}");
    }
    let log_new = log(&dir, "new.log");
    let log_old = log(&dir, "old.log");
    // `idle` and `busy`; `prepared` too when its statement's Close came before its Terminate.
    let handed = log_old
        .matches("client handed over to the new process")
        .count();
    assert!(handed >= 2, "{log_old}");
    assert!(!log_new.contains("ERROR"), "{log_new}");
    drop(new);
}

/// Three `-R` restarts 2 s apart under pgbench, each while the process before may still be
/// sending its clients along: clients in transactions of up to 2.5 s (they move only once the
/// transaction ends, possibly to a process that has itself been replaced since) and clients of
/// one-statement transactions. No client is dropped or fails a transaction, every process but
/// the last exits, and the last one serves.
#[test]
fn three_restarts_in_a_row_under_pgbench_drop_no_client() {
    let pg = Postgres::start();
    let init = output({
        let mut c = pgbench_cmd(pg.port, "postgres", "postgres", None);
        c.args(["-i", "-q", "-s", "1"]);
        c
    });
    assert!(init.status.success(), "{}", stderr(&init));
    let (dir, path, port) = setup(&pg);
    let script = dir.join("long.sql");
    std::fs::write(
        &script,
        "\\set ms random(1, 2500)\nBEGIN;\nSELECT pg_sleep(:ms / 1000.0);\nEND;\n",
    )
    .unwrap();
    let first = spawn(&path, &dir, "p0.log", false);
    poll_until("the first process listens", 10, || {
        pid_in(&dir) == Some(first.id())
            && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let run = |args: Vec<String>| {
        std::thread::spawn(move || {
            let mut c = pgbench_cmd(port, "postgres", "postgres", None);
            c.args(["-n", "-T", "10"]).args(args);
            output(c)
        })
    };
    let long = run(vec![
        "-c".into(),
        "4".into(),
        "-f".into(),
        script.display().to_string(),
    ]);
    let short = run(vec!["-c".into(), "3".into(), "-S".into()]);
    let mut procs = vec![(first, "p0.log".to_string())];
    for i in 1..=3 {
        std::thread::sleep(Duration::from_secs(2));
        let name = format!("p{i}.log");
        let p = spawn(&path, &dir, &name, true);
        poll_until(&format!("the pidfile names process {i}"), 10, || {
            pid_in(&dir) == Some(p.id())
        });
        procs.push((p, name));
    }
    poll_until("pgbench finishes", 40, || {
        long.is_finished() && short.is_finished()
    });
    let (long, short) = (long.join().unwrap(), short.join().unwrap());
    let logs = || {
        (0..=3)
            .map(|i| format!("--- p{i}.log\n{}", log(&dir, &format!("p{i}.log"))))
            .collect::<String>()
    };
    for (what, o) in [("long transactions", &long), ("short transactions", &short)] {
        let out = stdout(o) + &stderr(o);
        assert!(
            o.status.success() && !out.contains("aborted"),
            "{what}: a client was dropped\n{out}\n{}",
            logs()
        );
    }
    // Sane counts: a long transaction takes 1.25 s on average, so 4 clients do about 30 in
    // 10 s; the short ones many more.
    let tx = assert_pgbench_ok("long transactions", &long);
    assert!((15..=50).contains(&tx), "{tx} long transactions");
    assert!(assert_pgbench_ok("short transactions", &short) > 100);
    let last = procs.pop().unwrap();
    for (mut p, name) in procs {
        assert!(exits_within(&mut p, 10, &dir, &name), "{}", logs());
    }
    let o = select_one("127.0.0.1", port);
    assert_eq!(stdout(&o).trim(), "1", "{}", stderr(&o));
    drop(last);
}

/// A unix_socket_dir that leaves the client socket's path 107 bytes, the most a socket path may
/// have (as PgBouncer's tests' long temporary directories do): --check accepts it, pgcorral
/// starts and serves over the socket, and `-R` works there (the takeover socket's name is
/// shorter than the client socket's). One byte more, --check and the start refuse it alike.
#[test]
fn a_socket_path_of_107_bytes_serves_and_restarts() {
    let pg = Postgres::start();
    let base = tempfile::tempdir().unwrap().keep();
    let port = free_port();
    let name = format!(".s.PGSQL.{port}");
    let pad = 107 - base.as_os_str().len() - 1 - 1 - name.len();
    let write = |pad: usize| {
        let dir = base.join("d".repeat(pad));
        std::fs::create_dir_all(&dir).unwrap();
        let general = format!(
            "unix_socket_dir = \"{d}\"\npidfile = \"{b}/pgcorral.pid\"",
            d = dir.display(),
            b = base.display()
        );
        let text = config(&pg, "postgres", &general)
            .replace("listen_port = 0", &format!("listen_port = {port}"));
        let path = base.join(format!("pgcorral{pad}.toml"));
        std::fs::write(&path, text).unwrap();
        (dir, path)
    };
    let (dir, path) = write(pad);
    assert_eq!(dir.join(&name).as_os_str().len(), 107);
    let checked = check_config(&path);
    assert!(checked.status.success(), "{}", stderr(&checked));
    let mut old = spawn(&path, &base, "old.log", false);
    let dir_s = dir.display().to_string();
    let p = port.to_string();
    let select = |n: &str| {
        let sql = format!("SELECT {n}");
        psql(
            &dir_s,
            &["-p", &p, "-U", "postgres", "-d", "postgres", "-Atc", &sql],
        )
    };
    poll_until("the first process listens on its socket", 10, || {
        stdout(&select("1")).trim() == "1" || old.try_wait().unwrap().is_some()
    });
    assert!(
        old.try_wait().unwrap().is_none(),
        "{}",
        log(&base, "old.log")
    );
    let new = spawn(&path, &base, "new.log", true);
    poll_until("the pidfile names the new process", 10, || {
        pid_in(&base) == Some(new.id())
    });
    assert!(exits_within(&mut old, 10, &base, "old.log"));
    // The pidfile is replaced before the new process logs that it is up.
    poll_until("the new process says it is up", 10, || {
        log(&base, "new.log").contains("process up")
    });
    assert!(
        !log(&base, "new.log").contains("WARN"),
        "{}",
        log(&base, "new.log")
    );
    let o = select("2");
    assert_eq!(stdout(&o).trim(), "2", "{}", stderr(&o));
    drop(new);

    let (_, path) = write(pad + 1);
    let checked = check_config(&path);
    assert!(!checked.status.success(), "--check accepted 108 bytes");
    assert!(
        stderr(&checked).contains("is 108 bytes"),
        "{}",
        stderr(&checked)
    );
    let started = output({
        let mut c = Command::new(pgcorral_bin());
        c.arg(&path).stdin(Stdio::null());
        c
    });
    assert_eq!(started.status.code(), Some(1));
    assert!(
        stderr(&started).contains("is 108 bytes"),
        "{}",
        stderr(&started)
    );
}
