//! PgBouncer's users and passwords read as PgBouncer reads them: a userlist.txt (plaintext, md5
//! and SCRAM entries, re-read at SIGHUP) and auth_user + auth_query through a SECURITY DEFINER
//! function as in PgBouncer's documentation (roles created after start log in, an expired role
//! is refused at its next login, a client's search_path does not reach the lookup); logins and
//! refusals with PostgreSQL's messages and SQLSTATE 28P01.

mod support;

use std::time::Duration;

use support::raw::Raw;
use support::{
    blocking, connect, db_message, free_port, socket_dir, sqlstate, PgOptions, PoolerProcess,
    Postgres,
};

/// A PostgreSQL that checks passwords (md5 in pg_hba.conf: SCRAM for SCRAM-stored roles, md5
/// for md5-stored ones), with a database `app`.
fn server() -> Postgres {
    let pg = blocking(|| {
        Postgres::start_with(PgOptions {
            auth: "md5",
            ..PgOptions::default()
        })
    });
    blocking(|| pg.create_db("app"));
    pg
}

/// A login role stored as SCRAM (`md5 = false`) or md5.
fn role(pg: &Postgres, name: &str, password: &str, md5: bool) {
    let enc = if md5 { "md5" } else { "scram-sha-256" };
    pg.sql(
        "postgres",
        &format!(
            "SET password_encryption = '{enc}'; CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'"
        ),
    );
}

/// pgcorral on this pgbouncer.ini `[pgbouncer]` text (listen_addr, listen_port and
/// unix_socket_dir added) and `[databases]` lines.
fn start(pgbouncer: &str, databases: &str) -> PoolerProcess {
    let port = free_port();
    let ini = format!(
        "[databases]\n{databases}\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
         unix_socket_dir = {sockets}\npool_mode = transaction\n{pgbouncer}",
        sockets = socket_dir().display()
    );
    blocking(|| PoolerProcess::start_file("pgbouncer.ini", &ini, port))
}

/// Logs in and returns `current_user`, or the error's (SQLSTATE, message).
async fn login(port: u16, user: &str, password: &str) -> Result<String, (String, String)> {
    match connect(port, user, Some(password), "app").await {
        Ok(c) => {
            let row = c.query_one("SELECT current_user::text", &[]).await.unwrap();
            Ok(row.get(0))
        }
        Err(e) => Err((sqlstate(&e), db_message(&e))),
    }
}

/// The refusal PostgreSQL gives a wrong password (or a role that does not exist).
fn refused(user: &str) -> Result<String, (String, String)> {
    Err((
        "28P01".into(),
        format!("password authentication failed for user \"{user}\""),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn userlist_entries_log_in_and_reload() {
    let pg = server();
    blocking(|| {
        role(&pg, "plainu", "plain pw", false);
        role(&pg, "md5u", "md5 pw", true);
        role(&pg, "scramu", "scram pw", false);
        role(&pg, "md5pass", "md5pass", false);
    });
    let verifier = blocking(|| {
        pg.sql(
            "postgres",
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'scramu'",
        )
    });
    assert!(verifier.starts_with("SCRAM-SHA-256$"), "{verifier}");
    let md5 = pgwire::auth::md5::stored_hash("md5u", "md5 pw");
    let dir = tempfile::tempdir().unwrap();
    let userlist = dir.path().join("userlist.txt");
    let write = |plain: &str| {
        let text = format!(
            ";; the shop's users\n\"plainu\" \"{plain}\"\n\"md5u\" \"{md5}\"\n\
             \"scramu\" \"{verifier}\" written by mkauth\n\"md5pass\" \"md5pass\"\n\"nopw\" \"\"\n"
        );
        std::fs::write(&userlist, text).unwrap();
    };
    write("plain pw");
    let pooler = start(
        &format!("auth_type = md5\nauth_file = {}\n", userlist.display()),
        &format!("app = host=127.0.0.1 port={} dbname=app", pg.port),
    );
    let port = pooler.port;

    // Each form of password logs in; the server sees the user itself.
    for (user, pw) in [
        ("plainu", "plain pw"),
        ("md5u", "md5 pw"),
        ("scramu", "scram pw"),
        ("md5pass", "md5pass"),
    ] {
        assert_eq!(login(port, user, pw).await, Ok(user.to_string()), "{user}");
    }
    // Refusals as PostgreSQL words them: a wrong password, a user the file does not know, a
    // user whose password is empty (no password login).
    assert_eq!(login(port, "plainu", "wrong").await, refused("plainu"));
    assert_eq!(login(port, "scramu", "wrong").await, refused("scramu"));
    assert_eq!(login(port, "ghost", "x").await, refused("ghost"));
    assert_eq!(login(port, "nopw", "").await.unwrap_err().0, "28P01");

    // A changed file is read again at SIGHUP.
    blocking(|| pg.sql("postgres", "ALTER ROLE plainu PASSWORD 'new pw'"));
    write("new pw");
    pooler.signal("HUP");
    let mut now = Err((String::new(), String::new()));
    for _ in 0..100 {
        now = login(port, "plainu", "new pw").await;
        if now.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(now, Ok("plainu".to_string()), "{}", pooler.log());
    assert_eq!(login(port, "plainu", "plain pw").await, refused("plainu"));
}

/// A broken line of auth_file is warned about by file and line, at start and at each reload
/// (PgBouncer logs `broken auth file`); as in PgBouncer, the lines before it are used and
/// those after it are not; no password reaches the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_userlist_line_is_warned_about_by_file_and_line() {
    let pg = server();
    blocking(|| {
        role(&pg, "early", "early pw", false);
        role(&pg, "late", "late pw", false);
    });
    let dir = tempfile::tempdir().unwrap();
    let userlist = dir.path().join("userlist.txt");
    std::fs::write(&userlist, "\"early\" \"early pw\"\nlate \"late pw\"\n").unwrap();
    let pooler = start(
        &format!("auth_type = md5\nauth_file = {}\n", userlist.display()),
        &format!("app = host=127.0.0.1 port={} dbname=app", pg.port),
    );
    let port = pooler.port;
    let warned = |line: usize| {
        let log = pooler.log();
        log.lines().any(|l| {
            l.contains(&userlist.display().to_string())
                && l.contains(&format!("broken auth file (line {line})"))
        })
    };
    assert!(
        warned(2),
        "no warning naming the file and line 2:\n{}",
        pooler.log()
    );
    assert_eq!(login(port, "early", "early pw").await, Ok("early".into()));
    assert_eq!(login(port, "late", "late pw").await, refused("late"));

    // Read again at SIGHUP: the file's new broken line is warned about too.
    std::fs::write(
        &userlist,
        "\"early\" \"early pw\"\n;; a comment\n\"late\" \"late pw\"\n\"unterminated \"x\n",
    )
    .unwrap();
    pooler.signal("HUP");
    blocking(|| support::poll_until("a warning naming line 4", 10, || warned(4)));
    assert_eq!(login(port, "late", "late pw").await, Ok("late".into()));
    let log = pooler.log();
    assert!(
        !log.contains("early pw") && !log.contains("late pw"),
        "a password in the log:\n{log}"
    );
}

/// PgBouncer's documented lookup function, in database `app`, for role `pgbouncer`; and a
/// decoy `evil.user_lookup` that answers any name with the md5 of "evil", which a client's
/// search_path must not reach.
fn lookup_function(pg: &Postgres) {
    pg.sql(
        "app",
        "CREATE ROLE pgbouncer LOGIN PASSWORD 'pgb pw';
         CREATE SCHEMA pgbouncer;
         CREATE OR REPLACE FUNCTION pgbouncer.user_lookup(in i_username text, out uname text, out phash text)
         RETURNS record AS $$
         BEGIN
             SELECT rolname, CASE WHEN rolvaliduntil < now() THEN NULL ELSE rolpassword END
             FROM pg_authid
             WHERE rolname=i_username AND rolcanlogin
             INTO uname, phash;
             RETURN;
         END;
         $$ LANGUAGE plpgsql
            SECURITY DEFINER
            SET search_path = pg_catalog, pg_temp;
         REVOKE ALL ON FUNCTION pgbouncer.user_lookup(text) FROM public, pgbouncer;
         GRANT USAGE ON SCHEMA pgbouncer TO pgbouncer;
         GRANT EXECUTE ON FUNCTION pgbouncer.user_lookup(text) TO pgbouncer;
         CREATE SCHEMA evil;
         GRANT USAGE ON SCHEMA evil TO public;
         CREATE FUNCTION evil.user_lookup(in i_username text, out uname text, out phash text)
         RETURNS record AS $$ SELECT i_username, 'md5' || md5('evil' || i_username) $$ LANGUAGE sql;",
    );
}

/// `[pgbouncer]` lines for md5 logins looked up as `pgbouncer` (its password in a
/// userlist.txt written in `dir`), with `more` lines.
fn lookup_settings(dir: &std::path::Path, more: &str) -> String {
    let userlist = dir.join("userlist.txt");
    std::fs::write(&userlist, "\"pgbouncer\" \"pgb pw\"\n").unwrap();
    format!(
        "auth_type = md5\nauth_file = {}\nauth_user = pgbouncer\n{more}\n",
        userlist.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_query_finds_roles_created_after_start() {
    let pg = server();
    blocking(|| lookup_function(&pg));
    let dir = tempfile::tempdir().unwrap();
    let p = pg.port;
    let pooler = start(
        &lookup_settings(
            dir.path(),
            "auth_query = SELECT uname, phash FROM pgbouncer.user_lookup($1)",
        ),
        &format!(
            "app = host=127.0.0.1 port={p} dbname=app\n\
             one_column = host=127.0.0.1 port={p} dbname=app auth_query='SELECT $1::text'\n\
             missing_fn = host=127.0.0.1 port={p} dbname=app auth_query='SELECT * FROM nope($1)'\n"
        ),
    );
    let port = pooler.port;

    // Roles created after pgcorral started: SCRAM-stored and md5-stored.
    blocking(|| {
        role(&pg, "late", "late pw", false);
        role(&pg, "late_md5", "md5 pw", true);
        pg.sql("postgres", "CREATE ROLE nologin PASSWORD 'x'");
    });
    assert_eq!(login(port, "late", "late pw").await, Ok("late".into()));
    assert_eq!(
        login(port, "late_md5", "md5 pw").await,
        Ok("late_md5".into())
    );
    assert_eq!(login(port, "late", "wrong").await, refused("late"));
    // No row (no such role, or one that may not log in): refused as a wrong password.
    assert_eq!(login(port, "ghost", "x").await, refused("ghost"));
    assert_eq!(login(port, "nologin", "x").await, refused("nologin"));

    // A client's search_path (a startup parameter, or in options) does not reach the lookup:
    // the decoy would accept "evil" for anyone.
    for params in [
        &[
            ("user", "ghost"),
            ("database", "app"),
            ("search_path", "evil"),
        ][..],
        &[
            ("user", "ghost"),
            ("database", "app"),
            ("options", "-c search_path=evil"),
        ][..],
    ] {
        let err = Raw::login_with(port, params, Some("evil")).await.err();
        let err = err.expect("the decoy lookup was used");
        assert_eq!(
            (err.code.as_str(), err.message.as_str()),
            ("28P01", "password authentication failed for user \"ghost\"")
        );
    }
    let params = [
        ("user", "late_md5"),
        ("database", "app"),
        ("search_path", "evil"),
    ];
    let mut ok = Raw::login_with(port, &params, Some("md5 pw"))
        .await
        .unwrap();
    let rows = ok.query("SELECT current_user::text").await.unwrap();
    assert_eq!(rows[0][0].as_deref(), Some("late_md5"));

    // VALID UNTIL moved into the past: refused at the next login.
    blocking(|| pg.sql("postgres", "ALTER ROLE late VALID UNTIL '2000-01-01'"));
    assert_eq!(login(port, "late", "late pw").await, refused("late"));
    // And back: no cache holds the refusal either.
    blocking(|| pg.sql("postgres", "ALTER ROLE late VALID UNTIL 'infinity'"));
    assert_eq!(login(port, "late", "late pw").await, Ok("late".into()));

    // A query the server cannot answer as asked: a clear error, never a login.
    for db in ["one_column", "missing_fn"] {
        let err = connect(port, "late", Some("late pw"), db)
            .await
            .unwrap_err();
        let msg = db_message(&err);
        assert!(msg == "bouncer config error", "{db}: {msg}");
    }
    let log = pooler.log();
    assert!(
        log.contains("expected 2 columns from auth_query, not 1"),
        "{log}"
    );
    assert!(log.contains("42883"), "{log}");
}

/// Under `trust`, a user auth_query does not find is told so in PgBouncer's words (`no such
/// user`: without a password to check, saying who does not exist reveals nothing more); one
/// it finds logs in without a password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_with_auth_query_names_an_unknown_user() {
    let pg = server();
    blocking(|| lookup_function(&pg));
    let dir = tempfile::tempdir().unwrap();
    let settings = lookup_settings(
        dir.path(),
        "auth_query = SELECT uname, phash FROM pgbouncer.user_lookup($1)",
    )
    .replace("auth_type = md5", "auth_type = trust");
    let pooler = start(
        &settings,
        &format!("app = host=127.0.0.1 port={} dbname=app\n", pg.port),
    );
    // md5-stored: the hash found logs in to the server (a SCRAM verifier would need the
    // client's proof, which trust does not ask for).
    blocking(|| role(&pg, "late_md5", "md5 pw", true));
    assert_eq!(
        login(pooler.port, "late_md5", "").await,
        Ok("late_md5".into())
    );
    assert_eq!(
        login(pooler.port, "ghost", "").await,
        Err(("28000".into(), "no such user: \"ghost\"".into()))
    );
}

/// auth_query_cache_lifetime (opt-in): a found password is reused, so an expiry is seen only
/// once the entry is gone; a failed login forgets it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_lookup_is_forgotten_after_a_failed_login() {
    let pg = server();
    blocking(|| {
        lookup_function(&pg);
        role(&pg, "cached", "cached pw", false);
    });
    let dir = tempfile::tempdir().unwrap();
    let pooler = start(
        &lookup_settings(
            dir.path(),
            "auth_query = SELECT uname, phash FROM pgbouncer.user_lookup($1)\nauth_query_cache_lifetime = 600",
        ),
        &format!("app = host=127.0.0.1 port={} dbname=app", pg.port),
    );
    let port = pooler.port;
    assert_eq!(
        login(port, "cached", "cached pw").await,
        Ok("cached".into())
    );
    blocking(|| pg.sql("postgres", "ALTER ROLE cached VALID UNTIL '2000-01-01'"));
    // Within the lifetime the server is not asked: the cached password still lets in (the
    // query runs on the server connection the first login left idle in the pool).
    assert_eq!(
        login(port, "cached", "cached pw").await,
        Ok("cached".into())
    );
    // A failed login forgets the entry: the next login asks, and the expiry refuses it.
    assert_eq!(login(port, "cached", "wrong").await, refused("cached"));
    assert_eq!(login(port, "cached", "cached pw").await, refused("cached"));
}

/// The same pgbouncer.ini and userlist.txt give the same logins and refusals on Debian's
/// PgBouncer (1.18) and on pgcorral: userlist entries of each form, auth_query through the
/// documented function, an expired role, users nobody knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_logins_and_refusals_as_pgbouncer() {
    let pg = server();
    blocking(|| {
        lookup_function(&pg);
        role(&pg, "plainu", "plain pw", false);
        role(&pg, "md5u", "md5 pw", true);
        role(&pg, "scramu", "scram pw", false);
        role(&pg, "late", "late pw", false);
        role(&pg, "expired", "old pw", false);
        pg.sql("postgres", "ALTER ROLE expired VALID UNTIL '2000-01-01'");
    });
    let verifier = blocking(|| {
        pg.sql(
            "postgres",
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'scramu'",
        )
    });
    let userlist = format!(
        ";; users\n\"pgbouncer\" \"pgb pw\"\n\"plainu\" \"plain pw\"\n\"md5u\" \"{}\"\n\"scramu\" \"{verifier}\"\n\"nopw\" \"\"\n",
        pgwire::auth::md5::stored_hash("md5u", "md5 pw"),
    );
    let ini = |port: u16| {
        format!(
            "[databases]\napp = host=127.0.0.1 port={pg} dbname=app\n\n[pgbouncer]\n\
             listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = md5\nauth_file = {{dir}}/userlist.txt\nauth_user = pgbouncer\n\
             auth_query = SELECT uname, phash FROM pgbouncer.user_lookup($1)\n\
             pool_mode = transaction\nignore_startup_parameters = extra_float_digits\n",
            pg = pg.port
        )
    };
    let bouncer_port = free_port();
    let bouncer = blocking(|| {
        support::pgbouncer::PgBouncer::start_files(
            bouncer_port,
            &[("userlist.txt", &userlist)],
            &ini(bouncer_port),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("userlist.txt"), &userlist).unwrap();
    let port = free_port();
    let text = ini(port).replace("{dir}", &dir.path().display().to_string());
    let pooler = blocking(|| PoolerProcess::start_file("pgbouncer.ini", &text, port));

    let cases = [
        ("plainu", "plain pw", true),
        ("plainu", "wrong", false),
        ("md5u", "md5 pw", true),
        ("md5u", "wrong", false),
        ("scramu", "scram pw", true),
        ("scramu", "wrong", false),
        ("late", "late pw", true),
        ("late", "wrong", false),
        ("expired", "old pw", false),
        ("nopw", "", false),
        ("ghost", "x", false),
    ];
    for (user, password, ok) in cases {
        let theirs = login(bouncer.port, user, password).await;
        let ours = login(pooler.port, user, password).await;
        assert_eq!(
            (theirs.is_ok(), ours.is_ok()),
            (ok, ok),
            "{user}/{password}: PgBouncer {theirs:?}, pgcorral {ours:?}\n{}",
            bouncer.log()
        );
        if let Err((code, _)) = &ours {
            assert_eq!(code, "28P01", "{user}: {ours:?}");
        }
    }
}

/// Where auth_query runs, as PgBouncer's `prepare_auth_database` decides, with its messages:
/// the console's logins are looked up too (with `[pgbouncer]`'s auth_dbname; without one, in
/// the console itself, which is refused); a database's auth_dbname naming the console is taken
/// from the file and its logins refused; an authentication database not configured, or
/// disabled, refuses the login; a `[users]` entry without a password is still looked up. And a
/// server's refused login is logged as PgBouncer logs it, a password of the wrong kind for the
/// server's method with PgBouncer's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_auth_query_runs_and_its_refusals() {
    let pg = server();
    blocking(|| {
        lookup_function(&pg);
        role(&pg, "watcher", "watch pw", false);
        role(&pg, "scrammed", "scram pw", false);
    });
    let dir = tempfile::tempdir().unwrap();
    let userlist = dir.path().join("userlist.txt");
    // `scrammed` held as an md5 hash, which a SCRAM-stored role's server cannot use.
    std::fs::write(
        &userlist,
        format!(
            "\"pgbouncer\" \"pgb pw\"\n\"scrammed\" \"{}\"\n",
            pgwire::auth::md5::stored_hash("scrammed", "scram pw")
        ),
    )
    .unwrap();
    let p = pg.port;
    let pooler = start(
        &format!(
            "auth_type = md5\nauth_file = {}\nauth_user = pgbouncer\n\
             auth_query = SELECT uname, phash FROM pgbouncer.user_lookup($1)\n\
             admin_users = pgbouncer\nstats_users = watcher\n\
             [users]\nwatcher = pool_mode=statement\n",
            userlist.display()
        ),
        &format!(
            "app = host=127.0.0.1 port={p} dbname=app\n\
             authdb = host=127.0.0.1 port={p} dbname=app\n\
             via_authdb = host=127.0.0.1 port={p} dbname=app auth_dbname=authdb\n\
             via_console = host=127.0.0.1 port={p} dbname=app auth_dbname=pgbouncer\n\
             via_nowhere = host=127.0.0.1 port={p} dbname=app auth_dbname=nowhere\n\
             bad_server_pw = host=127.0.0.1 port={p} dbname=app user=watcher password=wrong\n\
             wrong_kind = host=127.0.0.1 port={p} dbname=app user=scrammed\n"
        ),
    );
    let port = pooler.port;
    let refusal = |db: &'static str| async move {
        let err = connect(port, "watcher", Some("watch pw"), db)
            .await
            .err()
            .unwrap_or_else(|| panic!("{db}: logged in"));
        db_message(&err)
    };
    // A [users] entry without a password: looked up, so it logs in.
    assert_eq!(
        login(port, "watcher", "watch pw").await,
        Ok("watcher".into())
    );
    let c = connect(port, "watcher", Some("watch pw"), "via_authdb")
        .await
        .unwrap();
    c.simple_query("SELECT 1").await.unwrap();

    // The console without [pgbouncer]'s auth_dbname would look up in itself: refused.
    assert_eq!(refusal("pgbouncer").await, "bouncer config error");
    // A database's auth_dbname naming the console: taken from the file, its logins refused.
    assert_eq!(refusal("via_console").await, "bouncer config error");
    assert_eq!(refusal("via_nowhere").await, "bouncer config error");
    let log = pooler.log();
    assert_eq!(
        log.matches("cannot use the reserved \"pgbouncer\" database as an auth_dbname")
            .count(),
        2,
        "{log}"
    );
    assert!(
        log.contains("authentication database \"nowhere\" is not configured"),
        "{log}"
    );

    // A disabled authentication database.
    let admin = connect(port, "pgbouncer", Some("pgb pw"), "pgbouncer")
        .await
        .unwrap();
    admin.simple_query("DISABLE authdb").await.unwrap();
    assert_eq!(
        refusal("via_authdb").await,
        "authentication database \"authdb\" is disabled"
    );
    admin.simple_query("ENABLE authdb").await.unwrap();

    // With [pgbouncer]'s auth_dbname, the console's logins are looked up there.
    admin
        .simple_query("SET auth_dbname = 'authdb'")
        .await
        .unwrap();
    let stats = connect(port, "watcher", Some("watch pw"), "pgbouncer")
        .await
        .unwrap();
    stats.simple_query("SHOW STATS").await.unwrap();
    let err = connect(port, "watcher", Some("wrong"), "pgbouncer")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err), "28P01");

    // A server's refused login: its own closing line with the server's words (and the
    // client's), as PgBouncer logs both.
    assert_eq!(
        refusal("bad_server_pw").await,
        "password authentication failed for user \"watcher\""
    );
    let log = pooler.log();
    assert!(
        log.contains(&format!(
            "S-0: bad_server_pw/watcher@127.0.0.1:{p} closing because: password authentication failed for user \"watcher\""
        )),
        "{log}"
    );
    // An md5 hash for a server asking for SCRAM: PgBouncer's words, the details in the log.
    let err = connect(port, "scrammed", Some("scram pw"), "wrong_kind")
        .await
        .unwrap_err();
    assert_eq!(db_message(&err), "server login failed: wrong password type");
    assert!(
        pooler
            .log()
            .contains("cannot do SCRAM-SHA-256 authentication: wrong password type"),
        "{}",
        pooler.log()
    );
}
