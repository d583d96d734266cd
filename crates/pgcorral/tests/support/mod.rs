//! Test fixtures: real PostgreSQL servers started from initdb on free ports (as the `postgres`
//! OS user when run as root), pgcorral in-process on port 0 or as a process, and the helpers
//! the test files share. Submodules: `client` (tokio-postgres helpers, re-exported here), `raw`
//! and `wire` (the protocol by hand), `tls`, `replicas`, `pgbouncer` and `flood` (a login
//! flood from one source address), `tenants`; and the helpers of one family of test files each
//! (`protocol`, `session`, `pools`, `timeouts`, `failover`, `tls_pooler`, `tls_data`). The
//! differential harness (`diff/`) is included by its one test.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

pub mod client;
pub mod failover;
pub mod flood;
pub mod pgbouncer;
pub mod pools;
pub mod protocol;
pub mod raw;
pub mod replicas;
pub mod rng;
pub mod session;
pub mod sharding;
pub mod tenants;
pub mod timeouts;
pub mod tls;
pub mod tls_data;
pub mod tls_pooler;
pub mod wire;

pub use client::*;

/// Directory holding PostgreSQL's server binaries (initdb, pg_ctl, postgres).
pub fn pg_bindir() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
        .into_iter()
        .rev()
        .find(|d| d.join("initdb").exists())
        .expect(
        "no PostgreSQL server binaries found: install postgresql (Debian) or put pg_config on PATH",
    )
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a PostgreSQL binary, as the postgres OS user when we are root.
fn pg_command(bin: &str) -> Command {
    let path = pg_bindir().join(bin);
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(path);
        c
    } else {
        Command::new(path)
    }
}

fn run_ok(mut c: Command, what: &str) {
    let out = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scratch_root() -> PathBuf {
    let root = std::env::temp_dir().join("pgcorral-tests");
    std::fs::create_dir_all(&root).unwrap();
    // The postgres user must be able to reach its data directory.
    let _ = Command::new("chmod").args(["755"]).arg(&root).status();
    root
}

/// A new directory for Unix sockets, short enough for a socket path (108 bytes) and writable
/// by the server; removed when the test process ends.
pub fn socket_dir() -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = PathBuf::from(format!("/tmp/pgc-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let _ = Command::new("chmod").args(["777"]).arg(&dir).status();
    watchdog(&dir, None);
    dir
}

/// One initdb per test binary; each server copies it.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let dir = scratch_root().join(format!("template-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        chown_postgres(&dir);
        let mut c = pg_command("initdb");
        c.args(["-D"]).arg(&dir).args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        run_ok(c, "initdb");
        watchdog(&dir, None);
        dir
    })
}

fn chown_postgres(dir: &Path) {
    if is_root() {
        run_ok(
            {
                let mut c = Command::new("chown");
                c.args(["-R", "postgres:postgres"]).arg(dir);
                c
            },
            "chown",
        );
    }
}

/// Removes `dir` (stopping its server first) once this test process has exited, even if it
/// panicked or was killed, so no server outlives the tests.
fn watchdog(dir: &Path, pg_ctl: Option<&Path>) {
    let stop = match pg_ctl {
        Some(p) => {
            let p = p.display();
            if is_root() {
                format!("runuser -u postgres -- {p} -D \"$D\" stop -m immediate >/dev/null 2>&1;")
            } else {
                format!("{p} -D \"$D\" stop -m immediate >/dev/null 2>&1;")
            }
        }
        None => String::new(),
    };
    let script =
        format!("while kill -0 $TESTPID 2>/dev/null; do sleep 0.5; done; {stop} rm -rf \"$D\"");
    let _ = Command::new("sh")
        .args(["-c", &script])
        .env("TESTPID", std::process::id().to_string())
        .env("D", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// A PostgreSQL server of the test's own.
pub struct Postgres {
    pub port: u16,
    pub dir: PathBuf,
}

/// Options for a test server.
pub struct PgOptions {
    /// Method for TCP logins of roles other than `postgres` (which is always trusted).
    pub auth: &'static str,
    /// Extra postgresql.conf lines.
    pub conf: String,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            auth: "trust",
            conf: String::new(),
        }
    }
}

impl Postgres {
    /// A trusting server.
    pub fn start() -> Postgres {
        Postgres::start_with(PgOptions::default())
    }

    pub fn start_with(opts: PgOptions) -> Postgres {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = scratch_root().join(format!("pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        run_ok(
            {
                let mut c = Command::new("cp");
                c.arg("-a").arg(template()).arg(&dir);
                c
            },
            "copy template",
        );
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nunix_socket_directories = ''\nfsync = off\n\
             max_connections = 200\nshared_buffers = 32MB\npassword_encryption = 'scram-sha-256'\n{}\n",
            opts.conf
        );
        append(&dir.join("postgresql.conf"), &conf);
        let hba = format!(
            "host all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 {0}\n\
             local all postgres trust\nlocal all all {0}\n",
            opts.auth
        );
        std::fs::write(dir.join("pg_hba.conf"), hba).unwrap();
        chown_postgres(&dir);
        watchdog(&dir, Some(&pg_bindir().join("pg_ctl")));
        let mut pg = Postgres { port: 0, dir };
        pg.start_on_a_free_port();
        pg
    }

    /// Starts the server on a free port, written as the last `port` line of postgresql.conf
    /// (the last setting wins). Another process can take the port between our look and the
    /// server's bind; the server then stops at once, and we try again on another port.
    pub fn start_on_a_free_port(&mut self) {
        for attempt in 1.. {
            self.port = free_port();
            append(
                &self.dir.join("postgresql.conf"),
                &format!("port = {}\n", self.port),
            );
            let Err(e) = self.try_pg_ctl("start", "fast") else {
                return;
            };
            let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            let port_taken = log.contains("could not bind") || log.contains("in use");
            assert!(port_taken && attempt < 5, "{e}\nserver log:\n{log}");
        }
    }

    /// Runs `pg_ctl <action>` (start, stop, restart) and waits for it.
    pub fn pg_ctl(&self, action: &str) {
        self.pg_ctl_mode(action, "fast");
    }

    /// Runs `pg_ctl -m <mode> <action>` (mode: smart, fast, immediate) and waits for it.
    pub fn pg_ctl_mode(&self, action: &str, mode: &str) {
        if let Err(e) = self.try_pg_ctl(action, mode) {
            panic!("{e}");
        }
    }

    fn try_pg_ctl(&self, action: &str, mode: &str) -> Result<(), String> {
        let mut c = pg_command("pg_ctl");
        c.arg("-D")
            .arg(&self.dir)
            .args(["-w", "-t", "60", "-m", mode]);
        c.arg("-l").arg(self.dir.join("log"));
        c.arg(action);
        let out = c.output().map_err(|e| format!("pg_ctl {action}: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "pg_ctl {action} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// Runs SQL as the superuser through psql; returns unaligned, tuples-only output.
    pub fn sql(&self, db: &str, sql: &str) -> String {
        let out = psql_cmd(self.port, "postgres", db, None)
            .args(["-Atq", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Creates a login role with a password (stored as SCRAM).
    pub fn create_user(&self, name: &str, password: &str) {
        self.sql(
            "postgres",
            &format!("CREATE ROLE \"{name}\" LOGIN SUPERUSER PASSWORD '{password}'"),
        );
    }

    pub fn create_db(&self, name: &str) {
        self.sql("postgres", &format!("CREATE DATABASE \"{name}\""));
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let mut c = pg_command("pg_ctl");
        c.arg("-D")
            .arg(&self.dir)
            .args(["stop", "-m", "immediate", "-w"]);
        let _ = c.output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// A psql command against 127.0.0.1:`port` (add `-c`/`-f` and friends).
pub fn psql_cmd(port: u16, user: &str, db: &str, password: Option<&str>) -> Command {
    let mut c = Command::new("psql");
    c.args([
        "-h",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        user,
        "-d",
        db,
        "-X",
    ]);
    c.env_remove("PGPASSWORD").env("PGCONNECT_TIMEOUT", "10");
    if let Some(p) = password {
        c.env("PGPASSWORD", p);
    }
    c.stdin(Stdio::null());
    c
}

/// A pgbench command against 127.0.0.1:`port`.
pub fn pgbench_cmd(port: u16, user: &str, db: &str, password: Option<&str>) -> Command {
    let mut c = Command::new("pgbench");
    c.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", user]);
    c.env_remove("PGPASSWORD");
    if let Some(p) = password {
        c.env("PGPASSWORD", p);
    }
    c.arg(db);
    c.stdin(Stdio::null());
    c
}

/// Runs `c` (psql, pgbench, a driver) off the async runtime's threads, which may be running
/// pgcorral, and returns its output.
pub async fn run_cmd(c: Command) -> Output {
    tokio::task::spawn_blocking(move || output(c))
        .await
        .expect("command thread")
}

/// Runs blocking fixture work (psql, pg_ctl) without stalling the runtime's other tasks: an
/// in-process pgcorral runs on the same runtime. Needs the multi-threaded runtime.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Awaits `fut`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer within {limit:?}"),
    }
}

/// Waits until `pg` shows a running `pg_sleep` query, so that a cancel has something to hit.
pub async fn wait_for_sleeping_query(pg: &Postgres) {
    let start = Instant::now();
    loop {
        let n = pg.sql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' \
             AND query LIKE 'SELECT pg_sleep%'",
        );
        if n != "0" {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "query never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks a psql run that must succeed and print `expect` (its output trimmed).
pub fn assert_psql_ok(what: &str, out: &Output, expect: &str) {
    assert!(out.status.success(), "{what}: psql failed: {}", stderr(out));
    assert_eq!(stdout(out).trim(), expect, "{what}");
}

/// Checks a psql run that must fail with `needle` in its stderr; returns the stderr.
pub fn assert_psql_fails(what: &str, out: &Output, needle: &str) -> String {
    let err = stderr(out);
    assert!(
        !out.status.success(),
        "{what}: psql succeeded: {}",
        stdout(out)
    );
    assert!(err.contains(needle), "{what}: expected {needle:?} in {err}");
    err
}

/// `pgbench -i -q -s 1` through 127.0.0.1:`port` as postgres into database postgres; panics
/// with pgbench's output if it fails.
pub async fn pgbench_init(port: u16) {
    let mut init = pgbench_cmd(port, "postgres", "postgres", None);
    init.args(["-i", "-q", "-s", "1"]);
    let o = run_cmd(init).await;
    assert!(
        o.status.success(),
        "pgbench -i: {}{}",
        stdout(&o),
        stderr(&o)
    );
}

/// The "number of transactions actually processed" of a pgbench report; `None` when it has none.
pub fn pgbench_transactions(out: &str) -> Option<u64> {
    out.lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|v| v.parse().ok())
}

/// Checks a pgbench run: exit 0, transactions processed, none failed, no client aborted.
pub fn assert_pgbench_ok(what: &str, o: &std::process::Output) -> u64 {
    let (out, err) = (stdout(o), stderr(o));
    assert!(
        o.status.success(),
        "{what}: pgbench exited with {}\n{out}\n{err}",
        o.status
    );
    assert!(
        !err.contains("aborted") && !out.contains("aborted"),
        "{what}: clients aborted\n{out}\n{err}"
    );
    assert!(
        out.contains("number of failed transactions: 0 "),
        "{what}: failed transactions\n{out}\n{err}"
    );
    let tx = pgbench_transactions(&out)
        .unwrap_or_else(|| panic!("{what}: no transaction count in\n{out}\n{err}"));
    assert!(tx > 0, "{what}: no transactions\n{out}\n{err}");
    tx
}

/// The starting value of a 64-bit FNV-1a hash (see [`fnv`]).
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Adds `bytes` to a 64-bit FNV-1a hash: a cheap digest to compare large data two paths
/// carried without keeping it.
pub fn fnv(hash: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *hash ^= b as u64;
        *hash = hash.wrapping_mul(0x100_0000_01b3);
    }
}

/// Local ports of the TCP connections to 127.0.0.1:`port` whose connecting side has not closed
/// them (ESTABLISHED in /proc/net/tcp).
pub fn established_to(port: u16) -> std::collections::HashSet<u16> {
    let text = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let hex_port = |a: &str| u16::from_str_radix(a.rsplit(':').next()?, 16).ok();
            let (local, remote) = (hex_port(f.get(1)?)?, hex_port(f.get(2)?)?);
            (remote == port && *f.get(3)? == "01").then_some(local)
        })
        .collect()
}

/// Server connections matching `cond` (a condition over pg_stat_activity) that pgcorral holds,
/// asked over `admin`, a direct connection to the server at `pg_port`: client backends, other
/// than the asking one, whose client socket is still open. A backend pgcorral just hung up on
/// stays in pg_stat_activity for a moment while it exits, and pgcorral's replacement may already
/// be there; that overlap is not pgcorral holding more than its cap, so it is not counted.
pub async fn held_servers(admin: &tokio_postgres::Client, cond: &str, pg_port: u16) -> i64 {
    let ports: Vec<i32> = admin
        .query(
            &format!(
                "SELECT client_port FROM pg_stat_activity WHERE backend_type = 'client backend' \
                 AND pid <> pg_backend_pid() AND {cond}"
            ),
            &[],
        )
        .await
        .expect("list server connections")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let open = established_to(pg_port);
    ports
        .iter()
        .filter(|p| u16::try_from(**p).is_ok_and(|p| open.contains(&p)))
        .count() as i64
}

/// The highest [`held_servers`] count seen while sampling until `finish`.
pub struct Peak {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<i64>,
}

impl Peak {
    /// Starts sampling the server connections to `pg` matching `cond` every `every`.
    pub async fn watch(pg: &Postgres, cond: String, every: Duration) -> Peak {
        let admin = direct(pg).await;
        let port = pg.port;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut max = 0;
            while !flag.load(Ordering::SeqCst) {
                let n = held_servers(&admin, &cond, port).await;
                max = max.max(n);
                tokio::time::sleep(every).await;
            }
            max
        });
        Peak { stop, task }
    }

    /// Stops sampling; the highest count seen.
    pub async fn finish(self) -> i64 {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

/// Runs a command, returning its output (stdout+stderr readable via helpers).
pub fn output(mut c: Command) -> Output {
    c.output()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", c.get_program()))
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// pgcorral running in this process on a free port.
pub struct Pooler {
    pub addr: SocketAddr,
    /// The Prometheus endpoint, when `metrics_addr` is set (use `metrics_addr =
    /// "127.0.0.1:0"` for a free port).
    pub metrics: Option<SocketAddr>,
    pub services: pgcorral::Services,
    task: Option<tokio::task::JoinHandle<pgcorral::listen::Ended>>,
}

impl Pooler {
    /// Starts pgcorral from TOML; `listen_port` is forced to 0 (a free port).
    pub async fn start(toml: &str) -> Pooler {
        let mut config = pgcorral::config::from_toml_str(toml).expect("test config is valid");
        config.general.listen_port = 0;
        let server = pgcorral::Pooler::bind(config).await.unwrap();
        let addr = server.local_addr();
        let metrics = server.metrics_addr();
        let services = server.services().clone();
        let task = Some(tokio::spawn(server.run()));
        Pooler {
            addr,
            metrics,
            services,
            task,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Fires shutdown and waits for the drain to finish.
    pub async fn shutdown(mut self) {
        self.services.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(60), task).await;
        }
    }

    /// tokio-postgres client through the pooler.
    pub async fn connect(
        &self,
        user: &str,
        password: Option<&str>,
        db: &str,
    ) -> tokio_postgres::Client {
        connect(self.port(), user, password, db)
            .await
            .unwrap_or_else(|e| panic!("connect through pgcorral: {e:?}"))
    }
}

impl Drop for Pooler {
    fn drop(&mut self) {
        self.services.shutdown.cancel();
    }
}

/// A tokio-postgres configuration for 127.0.0.1:`port` as `user` on database `db`, giving up
/// on the connection after 10 s.
pub fn pg_config(port: u16, user: &str, db: &str) -> tokio_postgres::Config {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(port)
        .user(user)
        .dbname(db)
        .connect_timeout(Duration::from_secs(10));
    cfg
}

/// Connects with tokio-postgres and drives the connection in a task.
pub async fn connect(
    port: u16,
    user: &str,
    password: Option<&str>,
    db: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut cfg = pg_config(port, user, db);
    if let Some(p) = password {
        cfg.password(p);
    }
    let (client, conn) = cfg.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// A server that takes logical and physical replication from `postgres` over TCP.
pub fn replicating_server() -> Postgres {
    let pg = Postgres::start_with(PgOptions {
        conf: "wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n".into(),
        ..Default::default()
    });
    let hba = pg.dir.join("pg_hba.conf");
    let mut lines = std::fs::read_to_string(&hba).unwrap();
    lines.insert_str(0, "host replication postgres 127.0.0.1/32 trust\n");
    std::fs::write(&hba, lines).unwrap();
    pg.pg_ctl("reload");
    pg
}

/// A config for one database `db` on `pg`, with `general` lines added to [general] and
/// users app/app-secret (and admin) in [users].
pub fn config(pg: &Postgres, db: &str, general: &str) -> String {
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\n{general}\n\n\
         [databases.{db}]\nhost = \"127.0.0.1\"\nport = {port}\n",
        port = pg.port
    )
}

/// The pgcorral binary built by cargo for integration tests.
pub fn pgcorral_bin() -> &'static str {
    env!("CARGO_BIN_EXE_pgcorral")
}

/// `pgcorral --check --config path`: whether the file is valid, and why not on stderr.
pub fn check_config(path: &Path) -> Output {
    Command::new(pgcorral_bin())
        .args(["--check", "--config"])
        .arg(path)
        .output()
        .unwrap()
}

/// pgcorral as a child process; killed on drop.
pub struct PoolerProcess {
    pub child: std::process::Child,
    pub port: u16,
    pub log: PathBuf,
}

impl PoolerProcess {
    /// Starts the binary with `--config` at a temp file holding `toml` (on a fixed free port)
    /// and waits until it accepts connections. Logs at `RUST_LOG=info`.
    pub fn start(toml: &str) -> PoolerProcess {
        PoolerProcess::start_logging(toml, "info")
    }

    /// Same, with the log filter `rust_log`.
    pub fn start_logging(toml: &str, rust_log: &str) -> PoolerProcess {
        PoolerProcess::start_limited(toml, rust_log, None)
    }

    /// Same, with the open-files limit (`ulimit -n`) set to `nofile` when given.
    pub fn start_limited(toml: &str, rust_log: &str, nofile: Option<u64>) -> PoolerProcess {
        PoolerProcess::start_in(toml, rust_log, nofile, &[])
    }

    /// [`PoolerProcess::start`], with environment variables `env` set.
    pub fn start_env(toml: &str, env: &[(&str, &str)]) -> PoolerProcess {
        PoolerProcess::start_in(toml, "info", None, env)
    }

    fn start_in(
        toml: &str,
        rust_log: &str,
        nofile: Option<u64>,
        env: &[(&str, &str)],
    ) -> PoolerProcess {
        let port = free_port();
        let toml = toml.replace("listen_port = 0", &format!("listen_port = {port}"));
        let dir = tempfile::tempdir().unwrap().keep();
        let path = dir.join("pgcorral.toml");
        std::fs::write(&path, toml).unwrap();
        let command = match nofile {
            None => Command::new(pgcorral_bin()),
            Some(n) => {
                let mut c = Command::new("sh");
                c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\"")])
                    .arg(pgcorral_bin());
                c
            }
        };
        let mut command = command;
        command.envs(env.iter().copied());
        launch(command, &path, &dir, rust_log, port)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for PoolerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Killed, it could not remove its Unix socket (unix_socket_dir's default).
        let _ = std::fs::remove_file(format!("/tmp/.s.PGSQL.{}", self.port));
    }
}

impl PoolerProcess {
    /// Starts the binary with `--config` at a temp file named `file_name` holding `text` (which
    /// must make it listen on 127.0.0.1:`port`) and waits until it accepts connections. Logs at
    /// `RUST_LOG=info`.
    pub fn start_file(file_name: &str, text: &str, port: u16) -> PoolerProcess {
        let dir = tempfile::tempdir().unwrap().keep();
        let path = dir.join(file_name);
        std::fs::write(&path, text).unwrap();
        launch(Command::new(pgcorral_bin()), &path, &dir, "info", port)
    }
}

/// Runs `command --config path`, logging at `rust_log` to `dir`/pgcorral.log, and waits until
/// 127.0.0.1:`port` accepts connections.
fn launch(
    mut command: Command,
    path: &Path,
    dir: &Path,
    rust_log: &str,
    port: u16,
) -> PoolerProcess {
    let log = dir.join("pgcorral.log");
    #[allow(clippy::zombie_processes)] // waited for in Drop
    let child = command
        .arg("--config")
        .arg(path)
        .env("RUST_LOG", rust_log)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return PoolerProcess { child, port, log };
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!(
        "pgcorral did not start: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// A config file (`pgcorral.toml`) in a directory of its own, on a fixed free port, for a
/// pooler run as a process: `general(dir)` gives the lines added to `[general]`. Returns the
/// directory, the file and the port.
pub fn config_file<S: AsRef<str>>(
    pg: &Postgres,
    general: impl FnOnce(&Path) -> S,
) -> (PathBuf, PathBuf, u16) {
    let dir = tempfile::tempdir().unwrap().keep();
    let port = free_port();
    let text = config(pg, "postgres", general(&dir).as_ref())
        .replace("listen_port = 0", &format!("listen_port = {port}"));
    let path = dir.join("pgcorral.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path, port)
}

/// Polls `f` every 25 ms until it holds; fails with `what` after `secs` seconds.
pub fn poll_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(secs), "{what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// psql as `postgres` on database `postgres` at `port`, running `statements` one `-c` each
/// (unaligned, tuples only), stopping at the first error.
pub fn psql_statements(port: u16, statements: &[&str]) -> Command {
    let mut c = psql_cmd(port, "postgres", "postgres", None);
    c.args(["-v", "ON_ERROR_STOP=1", "-At"]);
    for s in statements {
        c.args(["-c", s]);
    }
    c
}
