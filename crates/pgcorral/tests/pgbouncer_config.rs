//! pgcorral started on a pgbouncer.ini as PgBouncer users write it (`%include`d databases, a
//! forced server user with its password, `[users]` overrides, keys pgcorral does not honour):
//! clients log in and their queries run on the server the file names, users the file does not
//! know are refused, the admin reaches the console, the keys not honoured are warned about by
//! name, and a wrong value is refused naming its key and line; a database whose server is a
//! pooler's console (here pgcorral's own) is reached through it, in either pool mode.

mod support;

use support::{
    blocking, check_config, connect, db_message, free_port, socket_dir, PgOptions, PoolerProcess,
    Postgres,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pgbouncer_ini_serves_its_databases() {
    // The server checks passwords: pgcorral must log in with the file's user= and password=.
    let pg = blocking(|| {
        Postgres::start_with(PgOptions {
            auth: "scram-sha-256",
            ..PgOptions::default()
        })
    });
    blocking(|| {
        // SQL quoting: the password is `owner pw's`.
        pg.create_user("shop_owner", "owner pw''s");
        pg.create_db("shop");
        pg.sql("shop", "CREATE TABLE items (id int PRIMARY KEY, name text)");
        pg.sql("shop", "ALTER TABLE items OWNER TO shop_owner");
    });
    let port = free_port();
    let sockets = socket_dir();
    let dir = tempfile::tempdir().unwrap();
    let databases = dir.path().join("databases.ini");
    std::fs::write(
        &databases,
        format!(
            "shop = host=127.0.0.1 port={p} dbname=shop user=shop_owner password='owner pw''s' pool_size=4 connect_query='SET enable_seqscan = off; SET enable_nestloop = off'\n\
             shop_ro = host=127.0.0.1 port={p} dbname=shop user=shop_owner password='owner pw''s' pool_mode=statement timezone=Europe/Lisbon\n",
            p = pg.port
        ),
    )
    .unwrap();
    // trust: the file names who may log in (with no password to check).
    let userlist = dir.path().join("userlist.txt");
    std::fs::write(&userlist, "\"app\" \"\"\n\"reporter\" \"\"\n\"ops\" \"\"\n").unwrap();
    let ini = format!(
        ";; PgBouncer's file, unchanged\n\
         [databases]\n\
         %include {databases}\n\
         \n\
         [users]\n\
         app = pool_mode=transaction max_user_connections=3\n\
         reporter = pool_size=2 query_timeout=30 reserve_pool_size=1\n\
         lurker = pool_size=1\n\
         \n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir = {sockets}\n\
         auth_type = trust\n\
         auth_file = {userlist}\n\
         admin_users = ops\n\
         pool_mode = session\n\
         default_pool_size = 5\n\
         server_idle_timeout = 300\n\
         query_wait_timeout = 15.5\n\
         logfile = {logfile}\n\
         pidfile = {pidfile}\n\
         tcp_keepalive = 1\n\
         tcp_defer_accept = 1\n",
        databases = databases.display(),
        userlist = userlist.display(),
        sockets = sockets.display(),
        logfile = dir.path().join("pgbouncer.log").display(),
        pidfile = dir.path().join("pgbouncer.pid").display(),
    );
    let pooler = blocking(|| PoolerProcess::start_file("pgbouncer.ini", &ini, port));
    let log = pooler.log();
    for key in ["pgbouncer.tcp_keepalive", "pgbouncer.tcp_defer_accept"] {
        assert!(
            log.lines().any(|l| l.contains("WARN") && l.contains(key)),
            "no warning naming {key}:\n{log}"
        );
    }
    // A user's own query_timeout and reserve_pool_size are honoured, not warned about.
    assert!(!log.contains("users.reporter.query_timeout"), "{log}");
    assert!(!log.contains("users.reporter.reserve_pool_size"), "{log}");

    // The file's pidfile names the process; its logfile gets the log too.
    let pid = std::fs::read_to_string(dir.path().join("pgbouncer.pid")).unwrap();
    assert_eq!(pid.trim().parse::<u32>().unwrap(), pooler.pid());
    let logged = std::fs::read_to_string(dir.path().join("pgbouncer.log")).unwrap();
    assert!(logged.contains("pgbouncer.tcp_keepalive"), "{logged}");

    // A user of [users] logs in (trust) and works as the forced server user.
    let app = connect(port, "app", None, "shop").await.unwrap();
    let row = app
        .query_one("SELECT current_user::text, current_database()::text", &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("shop_owner".into(), "shop".into())
    );
    // The database's connect_query ran on its server connection (two statements).
    for setting in ["enable_seqscan", "enable_nestloop"] {
        let row = app
            .query_one(&format!("SHOW {setting}"), &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "off", "{setting}");
    }
    app.execute("INSERT INTO items VALUES ($1, $2)", &[&1i32, &"lamp"])
        .await
        .unwrap();
    let reporter = connect(port, "reporter", None, "shop_ro").await.unwrap();
    let row = reporter
        .query_one("SELECT name FROM items WHERE id = $1", &[&1i32])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "lamp");
    // The database's timezone= is its server sessions' default (the client sent none).
    let row = reporter.query_one("SHOW timezone", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "Europe/Lisbon");

    // A name the files do not know is refused, as PgBouncer refuses it; so is one that has
    // settings in [users] but is not in auth_file.
    for name in ["nobody", "lurker"] {
        let err = connect(port, name, None, "shop").await.unwrap_err();
        assert_eq!(
            db_message(&err),
            format!("\"trust\" authentication failed for user \"{name}\"")
        );
    }

    // The admin reaches the console; the pools have the file's modes (user's over database's
    // over [pgbouncer]'s). Both databases force the server user: each has one pool, that
    // user's, whose own settings apply (it has none in [users], so the database's mode, else
    // [pgbouncer]'s), as PgBouncer.
    let admin = connect(port, "ops", None, "pgbouncer").await.unwrap();
    let pools = admin.simple_query("SHOW POOLS").await.unwrap();
    let modes: Vec<(String, String, String)> = pools
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some((
                r.get("database")?.to_string(),
                r.get("user")?.to_string(),
                r.get("pool_mode")?.to_string(),
            )),
            _ => None,
        })
        .collect();
    for want in [
        ("shop", "shop_owner", "session"),
        ("shop_ro", "shop_owner", "statement"),
    ] {
        let want = (want.0.to_string(), want.1.to_string(), want.2.to_string());
        assert!(modes.contains(&want), "{want:?} not in {modes:?}");
    }

    // SHOW CONFIG lists every setting, those of the file included, even one that has no
    // limit (server_unavailable_wait, for ever from a pgbouncer.ini: it had left the table
    // empty); listen_port needs a restart.
    let config: Vec<(String, String, String)> = (admin.simple_query("SHOW CONFIG").await)
        .unwrap()
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some((
                r.get("key")?.to_string(),
                r.get("value")?.to_string(),
                r.get("changeable")?.to_string(),
            )),
            _ => None,
        })
        .collect();
    let setting = |k: &str| config.iter().find(|c| c.0 == k).cloned();
    let row = |k: &str, v: &str, c: &str| Some((k.into(), v.into(), c.into()));
    assert_eq!(
        setting("query_wait_timeout"),
        row("query_wait_timeout", "15500", "yes")
    );
    assert_eq!(
        setting("listen_port"),
        row("listen_port", &port.to_string(), "no")
    );
    assert_eq!(
        setting("server_unavailable_wait"),
        row("server_unavailable_wait", &i64::MAX.to_string(), "yes")
    );

    // The console's SET takes PgBouncer's keys, units and values: query_timeout in seconds
    // (1 s, not 1 ms), auth_type = plain; a value PgBouncer refuses is refused.
    for set in [
        "SET query_timeout = 1",
        "SET auth_type = plain",
        "SET auth_type = trust",
    ] {
        admin
            .simple_query(set)
            .await
            .unwrap_or_else(|e| panic!("{set}: {e}"));
    }
    // verbose sets log_level, which pgcorral reads only at start.
    let e = admin.simple_query("SET verbose = 1").await.unwrap_err();
    assert_eq!(
        db_message(&e),
        "SET failed: verbose cannot be changed without a restart"
    );
    let e = admin
        .simple_query("SET query_timeout = '10s'")
        .await
        .unwrap_err();
    assert!(
        db_message(&e).contains("query_timeout"),
        "{}",
        db_message(&e)
    );
    // A session (shop's pool is in session mode) takes the timeouts as it starts.
    drop(app);
    let app = connect(port, "app", None, "shop").await.unwrap();
    app.simple_query("SELECT pg_sleep(0.2)").await.unwrap();
    assert!(app.simple_query("SELECT pg_sleep(3)").await.is_err());
    drop(pooler);
}

/// A `[databases]` entry that points at a pooler's admin console (PgBouncer's test suite points
/// one at the pooler's own, `dbname=pgbouncer` on its own port): the console runs no SQL, so its
/// clients are linked each to a server connection of their own (the client's startup
/// parameters sent at login) rather than pooled, in session and transaction mode alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_on_a_pooler_console_is_linked_not_pooled() {
    let pg = blocking(Postgres::start);
    let port = free_port();
    let ini = format!(
        "[databases]\n\
         itself = host=127.0.0.1 port={port} dbname=pgbouncer\n\
         itself_tx = host=127.0.0.1 port={port} dbname=pgbouncer pool_mode=transaction\n\
         postgres = host=127.0.0.1 port={pg}\n\
         [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = {sockets}\n\
         auth_type = trust\nadmin_users = postgres\n",
        pg = pg.port,
        sockets = socket_dir().display(),
    );
    let _pooler = blocking(|| PoolerProcess::start_file("pgbouncer.ini", &ini, port));
    for db in ["itself", "itself", "itself_tx", "itself_tx"] {
        let c = connect(port, "postgres", None, db)
            .await
            .unwrap_or_else(|e| panic!("{db}: {e}"));
        let rows = c.simple_query("SHOW VERSION").await.unwrap();
        let version = rows
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            })
            .unwrap_or_default();
        assert!(version.contains("PgBouncer"), "{db}: {version}");
    }
    // The pooler's own database beside them is pooled as before.
    let c = connect(port, "postgres", None, "postgres").await.unwrap();
    assert_eq!(
        c.query_one("SELECT 1 + 1", &[])
            .await
            .unwrap()
            .get::<_, i32>(0),
        2
    );
}

#[test]
fn a_wrong_value_is_refused_naming_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgbouncer.ini");
    std::fs::write(
        &path,
        "[databases]\napp = host=127.0.0.1 dbname=app\n\n[pgbouncer]\nauth_type = trust\nquery_timeout = 10s\ntcp_keepalive = yes\n",
    )
    .unwrap();
    let out = check_config(&path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let shown = path.display();
    for want in [
        format!("{shown}:6: invalid value \"10s\" for parameter query_timeout"),
        format!("{shown}:7: invalid value \"yes\" for parameter tcp_keepalive"),
    ] {
        assert!(err.contains(&want), "{want:?} not in {err}");
    }
}
