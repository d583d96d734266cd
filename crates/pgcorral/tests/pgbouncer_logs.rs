//! The log as PgBouncer's readers expect it (issue 37 item 4): started from a pgbouncer.ini,
//! pgcorral writes PgBouncer's line format and words for logins, closes and why, new server
//! connections, pooler errors and the stats line; `log_connections = 0` and friends silence
//! them; started from TOML, the same words come in pgcorral's own format.

mod support;

use std::time::{Duration, Instant};

use support::{blocking, connect, free_port, socket_dir, PgOptions, PoolerProcess, Postgres};

/// `2026-11-26 21:40:00.123 UTC [4711] LOG ` and the rest of the line.
fn pgbouncer_line(line: &str) -> Option<(&str, &str)> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (date, rest) = line.split_once(' ')?;
    let (time, rest) = rest.split_once(' ')?;
    let rest = rest.strip_prefix("UTC [")?;
    let (pid, rest) = rest.split_once("] ")?;
    let (level, rest) = rest.split_once(' ')?;
    let date_ok = date.len() == 10 && date.split('-').all(digits);
    let time_ok = time.len() == 12
        && time
            .split([':', '.'])
            .all(|p| digits(p) && (p.len() == 2 || p.len() == 3));
    (date_ok && time_ok && digits(pid)).then_some((level, rest))
}

/// Waits until the log has a line for which `want` holds.
fn wait_for_line(pooler: &PoolerProcess, what: &str, want: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let log = pooler.log();
        if let Some(l) = log.lines().find(|l| want(l)) {
            return l.to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no {what} in the log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ini(pg_port: u16, port: u16, extra: &str) -> String {
    let sockets = socket_dir();
    format!(
        "[databases]\n\
         app = host=127.0.0.1 port={pg_port} dbname=postgres\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir = {sockets}\n\
         auth_type = plain\n\
         auth_file = {userlist}\n\
         pool_mode = transaction\n\
         stats_period = 1\n\
         {extra}\n",
        sockets = sockets.display(),
        userlist = userlist().display(),
    )
}

fn userlist() -> std::path::PathBuf {
    let dir = tempfile::tempdir().unwrap().keep();
    let path = dir.join("userlist.txt");
    std::fs::write(&path, "\"postgres\" \"secret\"\n").unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pgbouncer_ini_gets_pgbouncers_log_lines() {
    let pg = blocking(|| {
        Postgres::start_with(PgOptions {
            auth: "trust",
            ..PgOptions::default()
        })
    });
    let port = free_port();
    // syslog on as well (with no syslog daemon here its lines go nowhere): the file still
    // gets every line.
    let pooler = blocking(|| {
        PoolerProcess::start_file("pgbouncer.ini", &ini(pg.port, port, "syslog = 1"), port)
    });

    let c = connect(port, "postgres", Some("secret"), "app")
        .await
        .unwrap();
    c.simple_query("SELECT 1").await.unwrap();
    drop(c);
    let wrong = connect(port, "postgres", Some("wrong"), "app").await;
    assert!(wrong.is_err());

    // A login: `C-<id>: db/user@addr login attempt: db=… user=… tls=no`.
    let line = wait_for_line(&pooler, "login line", |l| l.contains("login attempt"));
    let (level, rest) =
        pgbouncer_line(&line).unwrap_or_else(|| panic!("not PgBouncer's format: {line}"));
    assert_eq!(level, "LOG", "{line}");
    assert!(rest.starts_with("C-"), "{line}");
    assert!(
        rest.contains(": app/postgres@127.0.0.1:")
            && rest.ends_with("login attempt: db=app user=postgres tls=no"),
        "{line}"
    );
    // The server connection it got.
    let line = wait_for_line(&pooler, "server line", |l| {
        l.contains("new connection to server")
    });
    let (_, rest) = pgbouncer_line(&line).unwrap();
    assert!(rest.starts_with("S-"), "{line}");
    assert!(
        rest.contains(&format!(
            ": app/postgres@127.0.0.1:{} new connection to server (from 127.0.0.1:",
            pg.port
        )),
        "{line}"
    );
    // Its close, and the refused login: closed, and the error it was sent.
    let line = wait_for_line(&pooler, "close line", |l| {
        l.contains("closing because: client close request")
    });
    assert!(line.ends_with("(age=0s)"), "{line}");
    let line = wait_for_line(&pooler, "refusal", |l| {
        l.contains("closing because: password authentication failed")
    });
    assert!(line.contains("C-0: app/postgres@127.0.0.1:"), "{line}");
    let line = wait_for_line(&pooler, "pooler error", |l| {
        l.contains("pooler error: password authentication failed")
    });
    assert_eq!(pgbouncer_line(&line).unwrap().0, "WARNING", "{line}");
    // The stats line, every stats_period.
    let line = wait_for_line(&pooler, "stats line", |l| l.contains("stats: "));
    let (_, rest) = pgbouncer_line(&line).unwrap();
    assert!(
        rest.starts_with("stats: ") && rest.contains(" xacts/s, ") && rest.ends_with(" us"),
        "{line}"
    );
    drop(pooler);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_connections_and_friends_silence_their_lines() {
    let pg = blocking(Postgres::start);
    let port = free_port();
    let quiet = "log_connections = 0\nlog_disconnections = 0\nlog_pooler_errors = 0\nlog_stats = 0";
    let pooler =
        blocking(|| PoolerProcess::start_file("pgbouncer.ini", &ini(pg.port, port, quiet), port));
    let c = connect(port, "postgres", Some("secret"), "app")
        .await
        .unwrap();
    c.simple_query("SELECT 1").await.unwrap();
    drop(c);
    assert!(connect(port, "postgres", Some("wrong"), "app")
        .await
        .is_err());
    std::thread::sleep(Duration::from_millis(2500));
    let log = pooler.log();
    for word in [
        "login attempt",
        "new connection to server",
        "closing because",
        "pooler error",
        "stats: ",
    ] {
        assert!(!log.contains(word), "{word:?} logged:\n{log}");
    }
    drop(pooler);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toml_keeps_pgcorrals_format_with_the_same_words() {
    let pg = blocking(Postgres::start);
    let toml = format!(
        "[general]\nlisten_addr = \"127.0.0.1\"\nlisten_port = {{port}}\nauth_type = \"trust\"\n\
         [databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"postgres\"\n",
        pg.port
    );
    let port = free_port();
    let pooler = blocking(|| {
        PoolerProcess::start_file(
            "pgcorral.toml",
            &toml.replace("{port}", &port.to_string()),
            port,
        )
    });
    let c = connect(port, "postgres", None, "app").await.unwrap();
    c.simple_query("SELECT 1").await.unwrap();
    drop(c);
    let line = wait_for_line(&pooler, "close line", |l| {
        l.contains("closing because: client close request")
    });
    assert!(pgbouncer_line(&line).is_none(), "{line}");
    assert!(
        line.contains("INFO") && line.contains("conn=C-") && line.contains("db=app"),
        "{line}"
    );
    drop(pooler);
}

#[test]
fn a_syslog_facility_syslog_does_not_have_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgbouncer.ini");
    let check = |facility: &str| {
        let ini = format!(
            "[databases]\napp = host=127.0.0.1 dbname=app\n[pgbouncer]\nauth_type = trust\nsyslog = 1\nsyslog_facility = {facility}\n"
        );
        std::fs::write(&path, ini).unwrap();
        support::check_config(&path)
    };
    let out = check("kernel");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(":6: invalid value \"kernel\" for parameter syslog_facility"),
        "{err}"
    );
    // local0 is one: the file is valid (and syslog is opened only at start, not by --check).
    let out = check("local0");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A database served by the `*` template is logged as PgBouncer logs it (`registered new
/// auto-database`), and `login_notify_message` reaches every client as a NOTICE once it has
/// authenticated (psql prints it before the query's result).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_database_line_and_login_notify_message() {
    let pg = blocking(Postgres::start);
    let port = free_port();
    let ini = ini(pg.port, port, "login_notify_message = Welcome aboard").replace(
        "[pgbouncer]",
        &format!("* = host=127.0.0.1 port={}\n[pgbouncer]", pg.port),
    );
    let pooler = blocking(|| PoolerProcess::start_file("pgbouncer.ini", &ini, port));
    let out = support::run_cmd({
        let mut c = support::psql_cmd(port, "postgres", "postgres", Some("secret"));
        c.args(["-X", "-At", "-c", "SELECT 42"]);
        c
    })
    .await;
    assert!(out.status.success(), "{}", support::stderr(&out));
    assert_eq!(support::stdout(&out).trim(), "42");
    assert_eq!(support::stderr(&out), "NOTICE:  Welcome aboard\n");
    let line = wait_for_line(&pooler, "auto-database line", |l| {
        l.contains("registered new auto-database")
    });
    assert!(
        line.ends_with("registered new auto-database: db=postgres"),
        "{line}"
    );
}
