//! Unit tests of reading a pgbouncer.ini: a sample file, PgBouncer's defaults and value types, warned keys, errors naming key and line, `%include`, PgBouncer's own test.ini, and the choice of format.

use std::path::Path;

use super::pgbouncer::{from_pgbouncer_with, is_pgbouncer, seconds_ms, strtol};
use super::{AuthType, Config, LoadBalanceHosts, PoolMode, SslMode, Warning};

/// An application's pgbouncer.ini as people write them.
const SAMPLE: &str = r#";; pgbouncer.ini of the shop's pooler
[databases]
appdb = host=10.0.0.5 port=5433 dbname=app user=app_owner password='s3cr''et' pool_size=30 reserve_pool=5 pool_mode=transaction
reports = host=/var/run/postgresql dbname=reports max_db_connections=8 connect_query='SET work_mem = ''64MB'''
'legacy db' = host=db1.internal,db2.internal dbname=legacy load_balance_hosts=disable min_pool_size=2
local = dbname=local_app
* = host=10.0.0.5 port=5433

[users]
etl = pool_mode=session pool_size=4 max_user_connections=6
dashboard = max_user_connections=10 query_timeout=30

[pgbouncer]
listen_addr = 0.0.0.0
listen_port = 6543
unix_socket_dir = /var/run/pgbouncer
unix_socket_mode = 0770
auth_type = trust
auth_file = /etc/pgbouncer/userlist.txt
admin_users = postgres, ops
stats_users = monitor
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 25
reserve_pool_timeout = 2.5
server_idle_timeout = 300
server_lifetime = 1800
query_wait_timeout = 60
client_tls_sslmode = disable
server_tls_sslmode = require
ignore_startup_parameters = extra_float_digits,options
logfile = /var/log/pgbouncer/pgbouncer.log
pidfile = /var/run/pgbouncer/pgbouncer.pid
tcp_keepalive = 1
tcp_defer_accept = 1
max_prepared_statements = 100
verbose = 1
"#;

fn no_files(name: &str) -> std::io::Result<String> {
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        name.to_string(),
    ))
}

fn read(text: &str) -> (Config, Vec<Warning>) {
    from_pgbouncer_with("pgbouncer.ini", text, &no_files).unwrap_or_else(|e| panic!("{text}\n{e}"))
}

fn refused(text: &str) -> String {
    from_pgbouncer_with("pgbouncer.ini", text, &no_files)
        .map(|_| ())
        .expect_err(text)
        .to_string()
}

fn warned<'w>(warnings: &'w [Warning], key: &str) -> &'w Warning {
    warnings
        .iter()
        .find(|w| w.key == key)
        .unwrap_or_else(|| panic!("no warning for {key}: {warnings:#?}"))
}

#[test]
fn sample_converts() {
    let (cfg, warnings) = read(SAMPLE);
    let g = &cfg.general;
    assert_eq!((g.listen_addr.as_str(), g.listen_port), ("0.0.0.0", 6543));
    assert_eq!(g.unix_socket_dir, "/var/run/pgbouncer");
    assert_eq!(g.unix_socket_mode, "0770");
    assert_eq!(g.auth_type, AuthType::Trust);
    assert_eq!(g.admin_users, ["postgres", "ops"]);
    assert_eq!(g.stats_users, ["monitor"]);
    assert_eq!(g.pool_mode, PoolMode::Transaction);
    assert_eq!((g.max_client_conn, g.default_pool_size), (2000, 25));
    assert_eq!(g.reserve_pool_timeout, 2500);
    assert_eq!(g.server_idle_timeout, 300_000);
    assert_eq!(g.server_lifetime, 1_800_000);
    assert_eq!(g.query_wait_timeout, 60_000);
    assert_eq!(g.server_tls_sslmode, SslMode::Require);
    assert_eq!(g.max_prepared_statements, 100);
    assert_eq!(g.log_level, "debug");
    // PgBouncer's defaults for what the file leaves out.
    assert_eq!(g.server_connect_timeout, 15_000);
    assert_eq!(g.client_login_timeout, 60_000);

    let app = &cfg.databases["appdb"];
    assert_eq!((app.host.as_str(), app.port), ("10.0.0.5", 5433));
    assert_eq!(app.dbname.as_deref(), Some("app"));
    assert_eq!(app.user.as_deref(), Some("app_owner"));
    assert_eq!(app.password.as_deref(), Some("s3cr'et"));
    assert_eq!((app.pool_size, app.reserve_pool_size), (Some(30), Some(5)));
    assert_eq!(app.pool_mode, Some(PoolMode::Transaction));
    let reports = &cfg.databases["reports"];
    assert_eq!(reports.host, "/var/run/postgresql");
    assert_eq!(reports.max_db_connections, Some(8));
    let legacy = &cfg.databases["legacy db"];
    assert_eq!(
        (legacy.host.as_str(), legacy.min_pool_size),
        ("db1.internal,db2.internal", Some(2))
    );
    // No host: the Unix socket in unix_socket_dir, as PgBouncer.
    assert_eq!(cfg.databases["local"].host, "/var/run/pgbouncer");
    assert_eq!(cfg.databases["*"].port, 5433);

    let etl = &cfg.users["etl"];
    assert_eq!(etl.pool_mode, Some(PoolMode::Session));
    assert_eq!(
        (etl.pool_size, etl.max_user_connections),
        (Some(4), Some(6))
    );
    assert_eq!(cfg.users["dashboard"].max_user_connections, Some(10));
    assert_eq!(cfg.users["dashboard"].query_timeout, Some(30_000));
    // The admins come from auth_file (read when the file is loaded), as PgBouncer's.
    assert_eq!(g.auth_file, "/etc/pgbouncer/userlist.txt");
    assert!(!cfg.users.contains_key("ops"));
    assert!(warnings.iter().all(|w| w.key != "pgbouncer.auth_file"));

    assert_eq!(
        cfg.databases["reports"].connect_query.as_deref(),
        Some("SET work_mem = '64MB'")
    );
    assert!(!warnings.iter().any(|w| w.key == "databases.legacy db.host"));
    for key in ["pgbouncer.tcp_keepalive", "pgbouncer.tcp_defer_accept"] {
        warned(&warnings, key);
    }
    assert_eq!(
        cfg.general.ignore_startup_parameters,
        ["extra_float_digits", "options"]
    );
    assert_eq!(cfg.general.logfile, "/var/log/pgbouncer/pgbouncer.log");
    assert_eq!(cfg.general.pidfile, "/var/run/pgbouncer/pgbouncer.pid");
    let w = warned(&warnings, "pgbouncer.tcp_keepalive").to_string();
    assert!(w.contains("pgbouncer.ini:"), "{w}");
    // Without auth_file, trust and a [users] list: the admins are let in too.
    let (cfg, _) =
        read("[pgbouncer]\nauth_type = trust\nadmin_users = ops\n[users]\netl = pool_size=2\n");
    assert_eq!(cfg.users["ops"].password, None);
    assert!(warned(&warnings, "pgbouncer.tcp_defer_accept")
        .message
        .starts_with("accepted, no effect"));
}

#[test]
fn pgbouncer_defaults() {
    let (cfg, warnings) = read("[pgbouncer]\nauth_type = trust\n[databases]\napp =\n");
    let g = &cfg.general;
    assert_eq!(g.pool_mode, PoolMode::Session);
    assert_eq!((g.max_client_conn, g.default_pool_size), (100, 20));
    assert_eq!(g.listen_port, 6432);
    assert_eq!(g.unix_socket_dir, "/tmp");
    assert_eq!(g.server_connect_timeout, 15_000);
    assert_eq!(g.server_unavailable_wait, crate::config::MAX_MS);
    let app = &cfg.databases["app"];
    assert_eq!(
        (app.host.as_str(), app.port, app.dbname.as_deref()),
        ("/tmp", 5432, None)
    );
    // No listen_addr: PgBouncer opens no TCP port, pgcorral says it does.
    assert_eq!(g.listen_addr, "127.0.0.1");
    let w = warned(&warnings, "pgbouncer.listen_addr").to_string();
    assert!(w.contains("cannot turn TCP off"), "{w}");
    // auth_type's default is md5, whose passwords come from auth_file.
    let err = refused("[pgbouncer]\nlisten_addr = *\n");
    assert!(
        err.contains("auth_type = md5 needs the users' passwords"),
        "{err}"
    );
}

#[test]
fn value_types_as_pgbouncer_reads_them() {
    assert_eq!(strtol("0777"), Some(0o777));
    assert_eq!(strtol("0x1F"), Some(31));
    assert_eq!(strtol("010"), Some(8));
    assert_eq!(strtol("-3"), Some(-3));
    assert_eq!(strtol("0"), Some(0));
    for bad in ["", "1.5", "yes", "true", "10k", "08", "0x"] {
        assert_eq!(strtol(bad), None, "{bad}");
    }
    assert_eq!(seconds_ms("0.5"), Some(500));
    assert_eq!(seconds_ms("1e2"), Some(100_000));
    assert_eq!(seconds_ms("120"), Some(120_000));
    for bad in ["10s", "-1", "", "inf", "nan", "1 000"] {
        assert_eq!(seconds_ms(bad), None, "{bad}");
    }
    // 511 is decimal (0777); 777 would be 0o1411, too large, as for PgBouncer.
    let (cfg, _) =
        read("[pgbouncer]\nauth_type = TRUST\nunix_socket_mode = 511\npool_mode = Statement\n");
    assert_eq!(cfg.general.pool_mode, PoolMode::Statement);
    assert_eq!(cfg.general.unix_socket_mode, "0777");
}

#[test]
fn wrong_values_name_key_and_line() {
    let cases = [
        (
            "query_timeout = 10s",
            "pgbouncer.ini:3: invalid value \"10s\" for parameter query_timeout",
        ),
        (
            "tcp_keepalive = yes",
            "pgbouncer.ini:3: invalid value \"yes\" for parameter tcp_keepalive",
        ),
        (
            "pool_mode = sometimes",
            "pgbouncer.ini:3: invalid value \"sometimes\" for parameter pool_mode",
        ),
        (
            "listen_port = 0",
            "pgbouncer.ini:3: invalid value \"0\" for parameter listen_port",
        ),
        ("unix_socket_mode = 0999", "parameter unix_socket_mode"),
        ("unix_socket_mode = 777", "parameter unix_socket_mode"),
        ("unix_socket_dir = @pgb", "parameter unix_socket_dir"),
        ("default_pool_size = 0", "parameter default_pool_size"),
        ("listen_addr = db.example.com", "parameter listen_addr"),
        (
            "pool_mod = session",
            "pgbouncer.ini:3: unknown parameter: pgbouncer/pool_mod",
        ),
        (
            "auth_type = hba",
            "auth_hba_file: required with auth_type = \"hba\"",
        ),
        ("auth_type = pam", "auth_type = pam: not supported"),
    ];
    for (line, want) in cases {
        let err = refused(&format!("[pgbouncer]\nauth_type = trust\n{line}\n"));
        assert!(err.contains(want), "{line}: {err}");
    }
    let db = |entry: &str| {
        refused(&format!(
            "[pgbouncer]\nauth_type = trust\n[databases]\n{entry}\n"
        ))
    };
    for (entry, want) in [
        (
            "app = host=db pool_size=abc",
            "pgbouncer.ini:4: invalid value \"abc\" for databases.app.pool_size",
        ),
        ("app = host=db port=0", "databases.app.port"),
        (
            "app = host=db pool_mode=sometimes",
            "databases.app.pool_mode",
        ),
        (
            "app = host=db hots=x",
            "pgbouncer.ini:4: databases.app: unrecognized connection parameter: hots",
        ),
        (
            "app = host=",
            "pgbouncer.ini:4: databases.app: syntax error in connection string",
        ),
        ("app = host=@abstract", "databases.app.host"),
        (
            "pgbouncer = host=db",
            "database name \"pgbouncer\" is reserved",
        ),
        (
            "pgcorral = host=db",
            "database name \"pgcorral\" is reserved",
        ),
    ] {
        let err = db(entry);
        assert!(err.contains(want), "{entry}: {err}");
    }
    for (text, want) in [
        (
            "[pgbouncer]\nauth_type = trust\n[users]\nbob = pool_size=x\n",
            "users.bob.pool_size",
        ),
        (
            "[pgbouncer]\nauth_type = trust\n[users]\nbob = colour=red\n",
            "unrecognized user parameter: colour",
        ),
        (
            "[pgbouncer]\nauth_type = trust\n[peers]\n0 = host=a\n",
            "ids of peers",
        ),
        (
            "[pgbouncer]\nauth_type = trust\n[peers]\n1 = port=6432\n",
            "host was not provided for peer 1",
        ),
        (
            "[pgbouncer]\nauth_type = trust\n[pgcorral]\n",
            "pgbouncer.ini:3: invalid section \"pgcorral\"",
        ),
        (
            "listen_port = 1\n[pgbouncer]\n",
            "pgbouncer.ini:1: value without section: listen_port",
        ),
        ("[databases]\n", "main section missing"),
    ] {
        let err = refused(text);
        assert!(err.contains(want), "{text}: {err}");
    }
    // Every error, not just the first.
    let err = refused("[pgbouncer]\nauth_type = trust\nlisten_port = x\nquery_timeout = y\n");
    assert_eq!(err.lines().count(), 2, "{err}");
}

#[test]
fn a_new_pgbouncer_section_starts_from_the_defaults() {
    let text = "[pgbouncer]\nmax_client_conn = 7\npool_mode = statement\n[pgbouncer]\nauth_type = trust\npool_mode = transaction\npool_mode = statement\n";
    let (cfg, _) = read(text);
    assert_eq!(cfg.general.max_client_conn, 100);
    assert_eq!(cfg.general.pool_mode, PoolMode::Statement);
}

#[test]
fn peers_are_read_and_auth_any_is_warned() {
    let text = "[pgbouncer]\nauth_type = any\npeer_id = 1\n[databases]\nforced = host=db user=svc\nloose = host=db\n[peers]\n1 = host=/tmp\n2 = host=10.0.0.2 port=6433 pool_size=4\n";
    let (cfg, warnings) = read(text);
    assert_eq!(cfg.general.auth_type, AuthType::Trust);
    assert_eq!(cfg.general.peer_id, 1);
    assert_eq!(cfg.peers["1"].host, "/tmp");
    assert_eq!(cfg.peers["1"].port, 6432);
    assert_eq!(cfg.peers["2"].host, "10.0.0.2");
    assert_eq!(cfg.peers["2"].port, 6433);
    assert!(!warnings.iter().any(|w| w.key.starts_with("peers")));
    warned(&warnings, "databases.loose");
    assert!(!warnings.iter().any(|w| w.key == "databases.forced"));
}

#[test]
fn includes_are_read_in_place() {
    let read = |name: &str| match name {
        "/etc/pgbouncer/databases.ini" => Ok("app = host=db\n".to_string()),
        other => no_files(other),
    };
    let text =
        "[databases]\n%include /etc/pgbouncer/databases.ini\n[pgbouncer]\nauth_type = trust\n";
    let (cfg, _) = from_pgbouncer_with("pgbouncer.ini", text, &read).unwrap();
    assert_eq!(cfg.databases["app"].host, "db");
    let err = from_pgbouncer_with("pgbouncer.ini", "%include nope.ini\n", &read)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("pgbouncer.ini:1: cannot read nope.ini"),
        "{err}"
    );
}

/// PgBouncer's own test.ini (tag pgbouncer_1_24_1) reads, with warnings for what pgcorral
/// does not do. Runs where the mirror of PgBouncer's repository is (PGBOUNCER_REPO, a git
/// directory; default the session's mirror); skipped elsewhere.
#[test]
fn pgbouncers_own_test_ini() {
    let repo = std::env::var("PGBOUNCER_REPO")
        .unwrap_or_else(|_| "/work/.mirror/pgbouncer+pgbouncer/repo".into());
    let out = std::process::Command::new("git")
        .args(["--git-dir", &repo, "show", "pgbouncer_1_24_1:test/test.ini"])
        .output();
    let Some(text) = out.ok().filter(|o| o.status.success()).map(|o| o.stdout) else {
        eprintln!("skipped: no PgBouncer repository at {repo}");
        return;
    };
    let text = String::from_utf8(text).unwrap();
    let (cfg, warnings) = read(&text);
    assert_eq!(cfg.general.auth_type, AuthType::Trust);
    assert_eq!(cfg.general.pool_mode, PoolMode::Statement);
    assert_eq!(cfg.general.listen_port, 6667);
    assert_eq!(cfg.databases["p0"].port, 6666);
    assert_eq!(cfg.databases["hostlist1"].host, "127.0.0.1,::1");
    assert_eq!(
        cfg.databases["hostlist_good_first"].load_balance_hosts,
        Some(LoadBalanceHosts::Disable)
    );
    assert!(cfg.databases["p8"].connect_query.is_some());
    // The client caps are honoured (not warned).
    assert_eq!(
        cfg.databases["conn_limit_db"].max_db_client_connections,
        Some(2)
    );
    assert_eq!(cfg.users["maxedout2"].max_user_client_connections, Some(2));
    // So is a database's server_lifetime.
    assert_eq!(cfg.databases["p9"].server_lifetime, Some(2000));
    assert!(warnings
        .iter()
        .all(|w| w.key != "databases.p9.server_lifetime"));
    assert!(
        !warnings
            .iter()
            .any(|w| w.key.contains("client_connections")),
        "{warnings:?}"
    );
}

/// `[users]` and `[databases]` timeouts: whole seconds; 0 and -1 are "not set" (`[pgbouncer]`'s),
/// except query_wait_timeout, whose 0 waits forever; the global transaction_timeout.
#[test]
fn per_user_and_per_database_timeouts() {
    let (cfg, warnings) = read(
        "[databases]
         a = host=h query_wait_timeout=2 server_lifetime=30
         b = host=h query_wait_timeout=0 server_lifetime=0
         c = host=h query_wait_timeout=-1
         [users]
         u1 = query_timeout=1 idle_transaction_timeout=2 transaction_timeout=3 client_idle_timeout=4 query_wait_timeout=5
         u2 = query_timeout=0 idle_transaction_timeout=-1 query_wait_timeout=0
         u3 = query_wait_timeout=-1
         [pgbouncer]
auth_type = trust
transaction_timeout = 2.5
",
    );
    assert_eq!(cfg.general.transaction_timeout, 2500);
    let db = |n: &str| {
        let d = &cfg.databases[n];
        (d.query_wait_timeout, d.server_lifetime)
    };
    assert_eq!(db("a"), (Some(2000), Some(30_000)));
    assert_eq!(db("b"), (Some(0), None));
    assert_eq!(db("c"), (None, None));
    let u1 = &cfg.users["u1"];
    assert_eq!(
        (
            u1.query_timeout,
            u1.idle_transaction_timeout,
            u1.transaction_timeout,
            u1.client_idle_timeout,
            u1.query_wait_timeout
        ),
        (Some(1000), Some(2000), Some(3000), Some(4000), Some(5000))
    );
    let u2 = &cfg.users["u2"];
    assert_eq!(
        (
            u2.query_timeout,
            u2.idle_transaction_timeout,
            u2.query_wait_timeout
        ),
        (None, None, Some(0))
    );
    assert_eq!(cfg.users["u3"].query_wait_timeout, None);
    assert!(
        warnings
            .iter()
            .all(|w| !w.key.contains("timeout") && !w.key.contains("lifetime")),
        "{warnings:?}"
    );
    // A fraction or a unit is refused, naming the key.
    let err = refused(
        "[users]
u = query_timeout=1.5
[pgbouncer]
auth_type = trust
",
    );
    assert!(err.contains("users.u.query_timeout"), "{err}");
    let err = refused(
        "[databases]
d = host=h query_wait_timeout=5s
[pgbouncer]
auth_type = trust
",
    );
    assert!(err.contains("databases.d.query_wait_timeout"), "{err}");
    let err = refused(
        "[users]
u = client_idle_timeout=-2
[pgbouncer]
auth_type = trust
",
    );
    assert!(err.contains("users.u.client_idle_timeout"), "{err}");
}

#[test]
fn which_files_are_pgbouncers() {
    let ini = "[databases]\n[pgbouncer]\n";
    assert!(is_pgbouncer(Path::new("/etc/pgbouncer/pgbouncer.ini"), ""));
    assert!(is_pgbouncer(Path::new("pooler.conf"), ini));
    assert!(is_pgbouncer(
        Path::new("pooler.conf"),
        "  \n%include /etc/pgb.ini\n"
    ));
    assert!(!is_pgbouncer(
        Path::new("pgcorral.toml"),
        "[general]\nlisten_port = 6432\n"
    ));
    assert!(!is_pgbouncer(Path::new("pgcat.toml"), "[pools.app]\n"));
    assert!(!is_pgbouncer(
        Path::new("pgbouncer.ini.toml"),
        "[general]\n"
    ));
}
