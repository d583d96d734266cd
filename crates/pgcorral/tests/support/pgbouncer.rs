//! The reference pooler: PgBouncer from the Debian `pgbouncer` package, run in the foreground on
//! a free port in front of a test's PostgreSQL (as the `postgres` OS user when we are root, since
//! PgBouncer refuses to run as root), and killed on drop.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the Debian package installs PgBouncer.
pub const PGBOUNCER_BIN: &str = "/usr/sbin/pgbouncer";

/// PgBouncer with one database, `postgres`, in transaction mode; trust auth for users `postgres`
/// (admin) and `stats` (stats user).
pub struct PgBouncer {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

use super::{free_port, is_root};

impl PgBouncer {
    /// Starts PgBouncer in front of the PostgreSQL on 127.0.0.1:`pg_port` and waits (up to 10 s)
    /// until it accepts connections.
    pub fn start(pg_port: u16) -> PgBouncer {
        PgBouncer::start_with(
            pg_port,
            "unix_socket_dir =\nauth_type = trust\nauth_file = {dir}/users.txt\n",
            &[("users.txt", "\"postgres\" \"\"\n\"stats\" \"\"\n")],
        )
    }

    /// The same, with `auth` as the [pgbouncer] section's authentication lines (and its Unix
    /// socket, if any) and `files` (name, text) written to its directory, which `{dir}` in
    /// `auth` and in the files names.
    pub fn start_with(pg_port: u16, auth: &str, files: &[(&str, &str)]) -> PgBouncer {
        let port = free_port();
        let ini = format!(
            "[databases]\n\
             postgres = host=127.0.0.1 port={pg_port} dbname=postgres\n\
             \n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             {auth}\
             admin_users = postgres\n\
             stats_users = stats\n\
             pool_mode = transaction\n\
             ignore_startup_parameters = extra_float_digits\n"
        );
        PgBouncer::start_files(port, files, &ini)
    }

    /// Starts PgBouncer on `ini`, which must listen on 127.0.0.1:`port` and end in its
    /// `[pgbouncer]` section (logfile and pidfile are added there); `{dir}` in it and in the
    /// files is the directory where `files` (name, text) are written. Waits (up to 10 s) until it accepts
    /// connections.
    pub fn start_files(port: u16, files: &[(&str, &str)], ini: &str) -> PgBouncer {
        assert!(
            Path::new(PGBOUNCER_BIN).exists(),
            "{PGBOUNCER_BIN} is missing: these tests compare pgcorral with PgBouncer; \
             install it with `apt-get install pgbouncer` (.ci/run does)"
        );
        let root = is_root();
        let dir = tempfile::Builder::new()
            .prefix("pgcorral-pgbouncer-")
            .tempdir()
            .unwrap();
        let path = dir.path();
        for (name, text) in files {
            std::fs::write(
                path.join(name),
                text.replace("{dir}", &path.display().to_string()),
            )
            .unwrap();
        }
        let ini = format!(
            "{}\nlogfile = {log}\npidfile = {pid}\n",
            ini.replace("{dir}", &path.display().to_string()),
            log = path.join("pgbouncer.log").display(),
            pid = path.join("pgbouncer.pid").display(),
        );
        let ini_path = path.join("pgbouncer.ini");
        std::fs::write(&ini_path, ini).unwrap();
        let stderr = std::fs::File::create(path.join("stderr.log")).unwrap();
        if root {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(path)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(ok, "chown -R postgres {} failed", path.display());
        }
        let mut cmd = if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", PGBOUNCER_BIN]);
            c
        } else {
            Command::new(PGBOUNCER_BIN)
        };
        cmd.arg(&ini_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        #[allow(clippy::zombie_processes)] // waited for in Drop
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {PGBOUNCER_BIN}: {e}"));
        watchdog(&path.join("pgbouncer.pid"));
        let mut bouncer = PgBouncer { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return bouncer;
            }
            if let Ok(Some(status)) = bouncer.child.try_wait() {
                panic!("pgbouncer exited at start ({status}): {}", bouncer.log());
            }
            if Instant::now() > deadline {
                panic!(
                    "pgbouncer did not accept connections within 10 s: {}",
                    bouncer.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// PgBouncer's log file, or its stderr if it wrote none (it failed before opening it).
    pub fn log(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.path().join(name));
        match read("pgbouncer.log") {
            Ok(log) if !log.is_empty() => log,
            _ => read("stderr.log").unwrap_or_default(),
        }
    }

    fn pidfile(&self) -> PathBuf {
        self.dir.path().join("pgbouncer.pid")
    }
}

/// Kills the PgBouncer whose pidfile is `pidfile` once this test process has exited, even if it
/// was killed; does nothing if the pidfile is gone by then (Drop already stopped it).
fn watchdog(pidfile: &Path) {
    let script = "while kill -0 $TESTPID 2>/dev/null; do sleep 0.5; done; \
                  [ -f \"$P\" ] && kill -9 \"$(cat \"$P\")\" 2>/dev/null; rm -rf \"$(dirname \"$P\")\"";
    let _ = Command::new("sh")
        .args(["-c", script])
        .env("TESTPID", std::process::id().to_string())
        .env("P", pidfile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // Under runuser the child is runuser, which cannot forward SIGKILL: kill PgBouncer itself
        // by the pid it wrote, then runuser exits on its own.
        let pid = std::fs::read_to_string(self.pidfile()).unwrap_or_default();
        let pid = pid.trim();
        if !pid.is_empty() && pid.chars().all(|c| c.is_ascii_digit()) {
            let _ = Command::new("kill").args(["-KILL", pid]).status();
        }
        // Let runuser reap PgBouncer and exit (killing it first would leave a zombie behind).
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.pidfile());
    }
}
