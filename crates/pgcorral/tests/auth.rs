//! Authentication end to end: clients to pgcorral (scram, md5, trust, verifiers) and pgcorral to real servers (trust, password, md5, scram); secrets stay out of logs.

mod support;

use std::process::Output;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use pgwire::backend;
use support::raw::{backends, Raw};
use support::*;

/// A config for database `postgres` on `pg` with the given auth type and `[users]` tables.
fn cfg(pg: &Postgres, auth: &str, users: &str) -> String {
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"{auth}\"\nserver_connect_timeout = 3000\n\n\
         {users}\n\n[databases.postgres]\nhost = \"127.0.0.1\"\nport = {port}\n",
        port = pg.port
    )
}

/// The authentication request code pgcorral answers a StartupMessage with.
async fn first_auth_code(port: u16, user: &str) -> i32 {
    let mut raw = Raw::connect(port).await;
    let mut out = BytesMut::new();
    pgwire::encode::startup(&mut out, &[("user", user), ("database", "postgres")]);
    raw.send(&out).await;
    let (tag, body) = raw.read().await.expect("an authentication request");
    assert_eq!(tag, backend::AUTHENTICATION);
    backend::authentication(&body).unwrap().0
}

/// Server connections every pool holds, open or being opened.
fn open_servers(pooler: &Pooler) -> usize {
    pooler
        .services
        .pools
        .all()
        .iter()
        .map(|p| p.counts().0)
        .sum()
}

/// A wrong password is refused with FATAL 28P01 and opens no server connection.
async fn assert_refused_without_server(pg: &Postgres, pooler: &Pooler, user: &str, pw: &str) {
    let start = Instant::now();
    let err = match connect(pooler.port(), user, Some(pw), "postgres").await {
        Ok(_) => panic!("login as {user} with a wrong password succeeded"),
        Err(e) => e,
    };
    assert!(start.elapsed() < Duration::from_secs(3), "refusal was slow");
    assert_eq!(sqlstate(&err), "28P01", "{err}");
    let db = err.as_db_error().unwrap();
    assert_eq!(db.severity(), "FATAL");
    assert!(
        db.message().contains("password authentication failed"),
        "{}",
        db.message()
    );
    assert_eq!(open_servers(pooler), 0, "a failed login opened a server");
    assert_eq!(backends(pg, user, "postgres"), 0);
}

async fn current_user(pooler: &Pooler, user: &str, pw: Option<&str>) -> String {
    let client = pooler.connect(user, pw, "postgres").await;
    scalar(&client, "SELECT current_user")
        .await
        .unwrap()
        .unwrap()
}

fn psql_current_user(port: u16, user: &str, pw: Option<&str>) -> Output {
    let mut c = psql_cmd(port, user, "postgres", pw);
    c.args(["-Atc", "SELECT current_user"]);
    output(c)
}

/// psql logs in to `port` as `user` and finds itself `current_user`.
fn assert_psql_login(port: u16, user: &str, pw: Option<&str>) {
    assert_psql_ok("psql", &psql_current_user(port, user, pw), user);
}

/// psql with the wrong password `pw` is refused for it.
fn assert_psql_refused(port: u16, user: &str, pw: &str) {
    assert_psql_fails(
        "psql with a wrong password",
        &psql_current_user(port, user, Some(pw)),
        "password authentication failed",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_clients_log_in_and_wrong_passwords_cost_no_server() {
    password_case("scram-sha-256", 10, |_| "app-secret".to_string()).await;
}

/// Clients authenticating with `auth` (challenge `code`) against `[users.app]` holding what
/// `stored` returns: wrong passwords and unknown users are refused without a server; the right
/// password works for tokio-postgres and psql.
async fn password_case(auth: &str, code: i32, stored: impl FnOnce(&Postgres) -> String) {
    let pg = Postgres::start();
    pg.create_user("app", "unused-on-a-trusting-server");
    let password = stored(&pg);
    let pooler = Pooler::start(&cfg(
        &pg,
        auth,
        &format!("[users.app]\npassword = \"{password}\""),
    ))
    .await;
    assert_eq!(first_auth_code(pooler.port(), "app").await, code, "{auth}");
    assert_refused_without_server(&pg, &pooler, "app", "wrong").await;
    // An unknown user fails the same way, also without a server.
    assert_refused_without_server(&pg, &pooler, "ghost", "app-secret").await;
    assert_psql_refused(pooler.port(), "app", "wrong");
    assert_eq!(open_servers(&pooler), 0);
    assert_eq!(
        current_user(&pooler, "app", Some("app-secret")).await,
        "app"
    );
    assert_psql_login(pooler.port(), "app", Some("app-secret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn md5_clients_with_plaintext_password() {
    password_case("md5", 5, |_| "app-secret".to_string()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn md5_clients_with_stored_md5_hash() {
    password_case("md5", 5, |pg| {
        // Computed by PostgreSQL, not by the code under test.
        let hash = pg.sql("postgres", "SELECT 'md5' || md5('app-secret' || 'app')");
        assert!(hash.starts_with("md5") && hash.len() == 35, "{hash}");
        hash
    })
    .await;
}

/// With `auth_type = "scram-sha-256"`, a user whose password is an md5 hash is not a
/// configuration error (PgBouncer takes it; PostgreSQL stores it): that user is asked for
/// SCRAM and refused as with a wrong password, even with the right one, without a server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_logins_of_a_user_with_an_md5_hash_fail_as_a_wrong_password() {
    let pg = Postgres::start();
    pg.create_user("app", "unused-on-a-trusting-server");
    pg.create_user("other", "unused-on-a-trusting-server");
    let hash = pg.sql("postgres", "SELECT 'md5' || md5('app-secret' || 'app')");
    let users =
        format!("[users.app]\npassword = \"{hash}\"\n[users.other]\npassword = \"other-secret\"");
    let pooler = Pooler::start(&cfg(&pg, "scram-sha-256", &users)).await;
    assert_eq!(first_auth_code(pooler.port(), "app").await, 10);
    assert_refused_without_server(&pg, &pooler, "app", "app-secret").await;
    assert_eq!(
        current_user(&pooler, "other", Some("other-secret")).await,
        "other"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_without_users_admits_anyone_without_a_password() {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE someone LOGIN");
    let pooler = Pooler::start(&cfg(&pg, "trust", "")).await;
    assert_eq!(first_auth_code(pooler.port(), "someone").await, 0, "OK");
    assert_eq!(current_user(&pooler, "someone", None).await, "someone");
    assert_eq!(current_user(&pooler, "postgres", None).await, "postgres");
    assert_psql_login(pooler.port(), "someone", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_with_users_refuses_unlisted_users() {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE app LOGIN; CREATE ROLE other LOGIN");
    let pooler = Pooler::start(&cfg(&pg, "trust", "[users.app]\npool_size = 2")).await;
    assert_eq!(current_user(&pooler, "app", None).await, "app");
    let err = match connect(pooler.port(), "other", None, "postgres").await {
        Ok(_) => panic!("unlisted user admitted"),
        Err(e) => e,
    };
    assert_eq!(sqlstate(&err), "28000", "{err}");
    assert_eq!(err.as_db_error().unwrap().severity(), "FATAL");
    assert_eq!(backends(&pg, "other", "postgres"), 0);
    let out = psql_current_user(pooler.port(), "other", None);
    assert!(!out.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_verifier_serves_clients_and_logs_in_to_a_scram_server() {
    let pg = Postgres::start_with(PgOptions {
        auth: "scram-sha-256",
        conf: String::new(),
    });
    pg.create_user("app", "Verif1ed-Only");
    let verifier = pg.sql(
        "postgres",
        "SELECT rolpassword FROM pg_authid WHERE rolname = 'app'",
    );
    assert!(verifier.starts_with("SCRAM-SHA-256$"), "{verifier}");
    let toml = cfg(
        &pg,
        "scram-sha-256",
        &format!("[users.app]\npassword = \"{verifier}\""),
    );
    assert!(
        !toml.contains("Verif1ed-Only"),
        "no plaintext in the config"
    );
    let pooler = Pooler::start(&toml).await;

    assert_refused_without_server(&pg, &pooler, "app", "Verif1ed-Wrong").await;
    // The client's proof gives pgcorral the ClientKey it needs for the server's SCRAM.
    assert_eq!(
        current_user(&pooler, "app", Some("Verif1ed-Only")).await,
        "app"
    );
    assert!(backends(&pg, "app", "postgres") >= 1);
    assert_psql_login(pooler.port(), "app", Some("Verif1ed-Only"));

    // Session mode: each client gets its own server login, made with the learned key.
    let session = Pooler::start(&toml.replace(
        "auth_type = \"scram-sha-256\"",
        "auth_type = \"scram-sha-256\"\npool_mode = \"session\"",
    ))
    .await;
    let a = session
        .connect("app", Some("Verif1ed-Only"), "postgres")
        .await;
    let b = session
        .connect("app", Some("Verif1ed-Only"), "postgres")
        .await;
    let pid = |c: tokio_postgres::Client| async move {
        scalar(&c, "SELECT pg_backend_pid()").await.unwrap()
    };
    assert_ne!(pid(a).await, pid(b).await);

    // auth_type = "md5" with a verifier asks the client for SCRAM instead.
    let md5 = Pooler::start(&toml.replace("\"scram-sha-256\"", "\"md5\"")).await;
    assert_eq!(first_auth_code(md5.port(), "app").await, 10, "SASL");
    assert_eq!(
        current_user(&md5, "app", Some("Verif1ed-Only")).await,
        "app"
    );
}

/// SCRAM with non-ASCII plaintext passwords, SASLprep'd (RFC 4013) as PostgreSQL and libpq do,
/// both ways: psql logs in to pgcorral, which holds the plaintext password, and pgcorral logs
/// in to a SCRAM server, which stored PostgreSQL's verifier of it, with that password. The
/// password is given in one Unicode form and typed in another: decomposed vs composed, ROMAN
/// NUMERAL FOUR vs "IV", a no-break space vs a space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_plaintext_passwords_are_saslprepped_both_ways() {
    let pg = Postgres::start_with(PgOptions {
        auth: "scram-sha-256",
        conf: String::new(),
    });
    // (the password in pgcorral's config and the server's, what the client types)
    let cases = [
        ("p\u{e4}ssw\u{f6}rd", "p\u{e4}ssw\u{f6}rd"),
        ("pa\u{308}sswo\u{308}rd", "p\u{e4}ssw\u{f6}rd"),
        ("\u{2163}", "IV"),
        ("\u{2163}", "\u{2163}"),
        ("pass\u{a0}word", "pass word"),
    ];
    for (i, (stored, typed)) in cases.into_iter().enumerate() {
        let user = format!("u{i}");
        pg.create_user(&user, stored);
        let pooler = Pooler::start(&cfg(
            &pg,
            "scram-sha-256",
            &format!("[users.{user}]\npassword = \"{stored}\""),
        ))
        .await;
        let out = psql_current_user(pooler.port(), &user, Some(typed));
        assert!(
            out.status.success(),
            "{stored:?} typed as {typed:?}: {}",
            stderr(&out)
        );
        assert_eq!(stdout(&out).trim(), user);
        assert_psql_refused(pooler.port(), &user, "p\u{e4}ssw\u{f6}rt");
    }
}

/// A password that only looks like a stored hash (`md5pass`, a malformed verifier) is a
/// plaintext password, as for PostgreSQL and PgBouncer: the config loads, clients log in with
/// it (SCRAM and md5), and pgcorral logs in to a SCRAM server with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_that_only_look_like_hashes_are_plaintext() {
    let pg = Postgres::start_with(PgOptions {
        auth: "scram-sha-256",
        conf: String::new(),
    });
    for (i, password) in ["md5pass", "SCRAM-SHA-256$4096:c2FsdA==$a:b"]
        .into_iter()
        .enumerate()
    {
        let user = format!("h{i}");
        pg.create_user(&user, password);
        for auth in ["scram-sha-256", "md5"] {
            let pooler = Pooler::start(&cfg(
                &pg,
                auth,
                &format!("[users.{user}]\npassword = \"{password}\""),
            ))
            .await;
            assert_psql_login(pooler.port(), &user, Some(password));
            assert_eq!(
                current_user(&pooler, &user, Some(password)).await,
                user,
                "{auth}"
            );
            assert_psql_refused(pooler.port(), &user, "md5");
        }
    }
}

/// pgcorral logs in to a server using `method` for role app: right password works, a wrong one
/// gives the client the server's 28P01 promptly.
async fn server_method(method: &'static str, md5_storage: bool) {
    let conf = if md5_storage {
        "password_encryption = 'md5'".to_string()
    } else {
        String::new()
    };
    let pg = Postgres::start_with(PgOptions { auth: method, conf });
    pg.create_user("app", "srv-secret");
    let stored = pg.sql(
        "postgres",
        "SELECT rolpassword FROM pg_authid WHERE rolname = 'app'",
    );
    if md5_storage {
        assert!(stored.starts_with("md5"), "{stored}");
    } else {
        assert!(stored.starts_with("SCRAM-SHA-256$"), "{stored}");
    }
    let good = Pooler::start(&cfg(&pg, "trust", "[users.app]\npassword = \"srv-secret\"")).await;
    assert_eq!(current_user(&good, "app", None).await, "app");
    if md5_storage {
        // A stored md5 hash answers an md5 challenge too.
        let hashed = Pooler::start(&cfg(
            &pg,
            "trust",
            &format!("[users.app]\npassword = \"{stored}\""),
        ))
        .await;
        assert_eq!(current_user(&hashed, "app", None).await, "app");
    }
    for mode in ["transaction", "session"] {
        let bad = Pooler::start(&cfg(
            &pg,
            "trust",
            &format!("[users.app]\npassword = \"not-the-secret\"\npool_mode = \"{mode}\""),
        ))
        .await;
        for _ in 0..2 {
            let start = Instant::now();
            let err = match within(
                Duration::from_secs(5),
                "login with a wrong server password",
                connect(bad.port(), "app", None, "postgres"),
            )
            .await
            {
                Ok(_) => panic!("wrong server password accepted ({method}, {mode})"),
                Err(e) => e,
            };
            assert!(start.elapsed() < Duration::from_secs(3));
            assert_eq!(sqlstate(&err), "28P01", "{method} {mode}: {err}");
            let msg = db_message(&err);
            assert!(
                msg.contains("password authentication failed for user \"app\""),
                "{msg}"
            );
            assert_eq!(open_servers(&bad), 0, "failed server login leaked a slot");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_trust() {
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE app LOGIN");
    let pooler = Pooler::start(&cfg(&pg, "trust", "")).await;
    assert_eq!(current_user(&pooler, "app", None).await, "app");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_cleartext_password() {
    server_method("password", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_md5() {
    server_method("md5", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_scram() {
    server_method("scram-sha-256", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_password_missing_is_a_clear_error() {
    let pg = Postgres::start_with(PgOptions {
        auth: "scram-sha-256",
        conf: String::new(),
    });
    pg.create_user("app", "srv-secret");
    let pooler = Pooler::start(&cfg(&pg, "trust", "")).await;
    let err = match within(
        Duration::from_secs(5),
        "login without a server password",
        connect(pooler.port(), "app", None, "postgres"),
    )
    .await
    {
        Ok(_) => panic!("login without a password accepted"),
        Err(e) => e,
    };
    assert_eq!(sqlstate(&err), "08001", "{err}");
    // PgBouncer's words to the client; the log names the server and the method it asked for.
    assert_eq!(db_message(&err), "server login failed: wrong password type");
}

/// Every secret of a config, and the pieces of its verifiers.
fn secret_pieces(secrets: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for s in secrets {
        out.push(s.to_string());
        if let Some(rest) = s.strip_prefix("SCRAM-SHA-256$") {
            // iterations:salt$StoredKey:ServerKey
            let (head, keys) = rest.split_once('$').unwrap();
            let (_, salt) = head.split_once(':').unwrap();
            let (stored, server) = keys.split_once(':').unwrap();
            out.extend([salt.to_string(), stored.to_string(), server.to_string()]);
        }
        if let Some(hex) = s.strip_prefix("md5") {
            out.push(hex.to_string());
        }
    }
    out
}

fn assert_no_secrets(log: &str, secrets: &[String]) {
    assert!(log.contains("closing because: "), "log is too quiet: {log}");
    for s in secrets {
        assert!(!log.contains(s.as_str()), "secret {s:?} in the log:\n{log}");
    }
}

/// Logins that succeed and fail, client side and server side, against a pgcorral on `port`.
async fn login_attempts(port: u16, client_pw: &str, wrong: &str) {
    let c = connect(port, "app", Some(client_pw), "postgres")
        .await
        .unwrap();
    c.simple_query("SELECT 1").await.unwrap();
    let c = connect(port, "ver", Some("Ver-Plain-77"), "postgres")
        .await
        .unwrap();
    c.simple_query("SELECT 1").await.unwrap();
    assert!(connect(port, "app", Some(wrong), "postgres").await.is_err());
    assert!(connect(port, "ver", Some(wrong), "postgres").await.is_err());
    // Server refuses pgcorral's configured login for this database.
    let e = connect(port, "app", Some(client_pw), "badsrv")
        .await
        .map(drop)
        .expect_err("server refuses a wrong password");
    assert_eq!(sqlstate(&e), "28P01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_the_log() {
    // md5 in pg_hba: app (stored md5) gets an md5 challenge, ver (stored SCRAM) gets SCRAM.
    let pg = Postgres::start_with(PgOptions {
        auth: "md5",
        conf: String::new(),
    });
    pg.sql(
        "postgres",
        "SET password_encryption = 'md5'; CREATE ROLE app LOGIN SUPERUSER PASSWORD 'App-Plain-42'",
    );
    pg.create_user("ver", "Ver-Plain-77");
    let verifier = pg.sql(
        "postgres",
        "SELECT rolpassword FROM pg_authid WHERE rolname = 'ver'",
    );
    let md5_hash = pg.sql("postgres", "SELECT 'md5' || md5('App-Plain-42' || 'app')");
    let users = |app_pw: &str| {
        format!(
            "[users.app]\npassword = \"{app_pw}\"\n[users.ver]\npassword = \"{verifier}\"\n\n\
             [databases.badsrv]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\n\
             user = \"app\"\npassword = \"Bad-Server-Pw-13\"\n",
            port = pg.port
        )
    };
    let wrong = "Client-Wrong-99";
    let mut secrets = secret_pieces(&[
        "App-Plain-42",
        "Ver-Plain-77",
        &verifier,
        &md5_hash,
        "Bad-Server-Pw-13",
        wrong,
    ]);
    secrets.sort();
    secrets.dedup();

    // The harness's process (RUST_LOG=info), SCRAM clients, plaintext + verifier.
    let toml = cfg(&pg, "scram-sha-256", &users("App-Plain-42")).replace(
        "server_connect_timeout = 3000",
        "server_connect_timeout = 3000\nlog_level = \"debug\"",
    );
    let p = PoolerProcess::start(&toml);
    login_attempts(p.port, "App-Plain-42", wrong).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_no_secrets(&p.log(), &secrets);

    // Debug and trace logs too, md5 clients with a stored hash for app.
    for level in ["debug", "trace"] {
        let toml = cfg(&pg, "md5", &users(&md5_hash));
        let p = PoolerProcess::start_logging(&toml, level);
        login_attempts(p.port, "App-Plain-42", wrong).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let log = p.log();
        assert!(
            log.contains("DEBUG"),
            "{level} log has no debug lines: {log}"
        );
        assert_no_secrets(&log, &secrets);
    }
}

/// Sends `bytes` where the client's password (or SASL) response belongs.
async fn bad_auth_response(port: u16, bytes: &[u8]) -> pgwire::backend::ErrorFields {
    let mut raw = Raw::connect(port).await;
    let mut out = BytesMut::new();
    pgwire::encode::startup(&mut out, &[("user", "app"), ("database", "postgres")]);
    raw.send(&out).await;
    let (tag, _) = raw.read().await.expect("an authentication request");
    assert_eq!(tag, backend::AUTHENTICATION);
    raw.send_lossy(bytes).await;
    within(
        Duration::from_secs(5),
        "answer to a bad auth response",
        raw.expect_error_and_close(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_during_authentication_is_a_protocol_violation() {
    let pg = Postgres::start();
    pg.create_user("app", "unused-on-a-trusting-server");
    for auth in ["md5", "scram-sha-256"] {
        let pooler = Pooler::start(&cfg(&pg, auth, "[users.app]\npassword = \"app-secret\"")).await;
        let cases: [(&[u8], &str); 4] = [
            (b"p\x7f\xff\xff\xff", "2 GB length"),
            (b"p\0\0\0\x02", "length below 4"),
            (b"p\0\x01\0\0", "64 kB password, over the login limit"),
            (b"Q\0\0\0\x0dSELECT 1\0", "a query instead of a password"),
        ];
        for (bytes, what) in cases {
            let err = bad_auth_response(pooler.port(), bytes).await;
            assert_eq!(err.code, "08P01", "{auth}: {what}: {err:?}");
            assert_eq!(err.severity, "FATAL");
        }
        assert_eq!(open_servers(&pooler), 0);
        assert_eq!(
            current_user(&pooler, "app", Some("app-secret")).await,
            "app"
        );
    }
}

/// The salt and iteration count pgcorral's SCRAM server-first-message offers `user`.
async fn scram_salt_and_iterations(port: u16, user: &str) -> (String, String) {
    let mut raw = Raw::connect(port).await;
    let mut out = BytesMut::new();
    pgwire::encode::startup(&mut out, &[("user", user), ("database", "postgres")]);
    raw.send(&out).await;
    let (tag, body) = raw.read().await.expect("AuthenticationSASL");
    assert_eq!(tag, backend::AUTHENTICATION);
    assert_eq!(backend::authentication(&body).unwrap().0, 10);
    out.clear();
    pgwire::encode::sasl_initial_response(&mut out, "SCRAM-SHA-256", b"n,,n=,r=0123456789abcdef");
    raw.send(&out).await;
    let (tag, body) = raw.read().await.expect("AuthenticationSASLContinue");
    assert_eq!(tag, backend::AUTHENTICATION, "{body:?}");
    let (code, data) = backend::authentication(&body).unwrap();
    assert_eq!(code, 11);
    let text = std::str::from_utf8(data).unwrap();
    let attr = |k: &str| {
        text.split(',')
            .find_map(|a| a.strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k} in {text}"))
            .to_string()
    };
    (attr("s="), attr("i="))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_users_get_a_scram_challenge_like_known_ones() {
    let pg = Postgres::start();
    let verifier = {
        pg.create_user("ver", "ver-secret");
        pg.sql(
            "postgres",
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'ver'",
        )
    };
    let pooler = Pooler::start(&cfg(
        &pg,
        "scram-sha-256",
        &format!("[users.app]\npassword = \"app-secret\"\n[users.ver]\npassword = \"{verifier}\""),
    ))
    .await;
    let port = pooler.port();
    let app = scram_salt_and_iterations(port, "app").await;
    let ver = scram_salt_and_iterations(port, "ver").await;
    assert_eq!(scram_salt_and_iterations(port, "app").await, app, "stable");
    assert_eq!(app.1, ver.1, "plaintext and verifier users alike");
    // An unknown user must not stand out: same iteration count, a salt of its own that stays
    // the same from one attempt to the next (as a real user's does).
    let ghost = scram_salt_and_iterations(port, "ghost").await;
    assert_eq!(ghost.1, app.1, "iteration count gives unknown users away");
    assert_eq!(ghost.0.len(), app.0.len());
    assert_eq!(
        scram_salt_and_iterations(port, "ghost").await,
        ghost,
        "an unknown user's salt changes between attempts"
    );
    let phantom = scram_salt_and_iterations(port, "phantom").await;
    assert_ne!(phantom.0, ghost.0, "all unknown users share one salt");
}

/// Like PostgreSQL, pgcorral checks the password before it says whether the database exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_is_checked_before_the_database_name() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(
        &pg,
        "scram-sha-256",
        "[users.app]\npassword = \"app-secret\"",
    ))
    .await;
    let Err(e) = connect(pooler.port(), "app", Some("wrong"), "nosuchdb").await else {
        panic!("wrong password accepted");
    };
    assert_eq!(sqlstate(&e), "28P01", "{e}");
    let Err(e) = connect(pooler.port(), "app", Some("app-secret"), "nosuchdb").await else {
        panic!("unknown database accepted");
    };
    assert_eq!(sqlstate(&e), "3D000", "{e}");
}
