//! An hba rule pgcorral cannot honour is never passed over for the next one: each line that
//! used to be skipped, a `reject` followed by `trust`, now either rejects as PostgreSQL does
//! (`samehost`, `samenet`, `+role` and `samerole`, the roles asked of the server as
//! auth_user) or refuses the file (a host name, `ident`, a bad mask, a misspelt method, a
//! regular expression): pgcorral does not start, `--check` fails naming the line, and a
//! reload keeps the rules in force.

mod support;

use std::path::Path;

use support::{blocking, check_config, connect, db_message, sqlstate, stderr, Pooler, Postgres};

/// The rules under test: `first`, then trust for everyone.
fn rules(first: &str) -> String {
    format!("# TYPE DATABASE USER ADDRESS METHOD\n{first}\nhost all all all trust\n")
}

/// A config on `pg` with `hba` as the hba file: users `app` (in `admins` through `mid`, and in
/// `staff`), `other` (in no role) and `boss` (a superuser in no role), databases `shop` and
/// `staff`, roles looked up as `lookup`.
fn config(pg: &Postgres, hba: &Path) -> String {
    let p = pg.port;
    format!(
        "[general]\nlisten_addr = \"127.0.0.1\"\nlisten_port = 0\nauth_type = \"hba\"\n\
         auth_hba_file = \"{hba}\"\nauth_user = \"lookup\"\n\
         [users.app]\npassword = \"app-secret\"\n[users.other]\npassword = \"other-secret\"\n\
         [users.boss]\npassword = \"boss-secret\"\n\
         [users.lookup]\npassword = \"lookup-secret\"\n\
         [databases.shop]\nhost = \"127.0.0.1\"\nport = {p}\ndbname = \"postgres\"\nuser = \"postgres\"\n\
         [databases.staff]\nhost = \"127.0.0.1\"\nport = {p}\ndbname = \"postgres\"\nuser = \"postgres\"\n",
        hba = hba.display()
    )
}

fn server() -> Postgres {
    let pg = blocking(Postgres::start);
    blocking(|| {
        pg.sql(
            "postgres",
            "CREATE ROLE lookup LOGIN; CREATE ROLE admins; CREATE ROLE staff; CREATE ROLE mid;
             CREATE ROLE app LOGIN; CREATE ROLE other LOGIN; CREATE ROLE boss LOGIN SUPERUSER;
             GRANT admins TO mid; GRANT mid TO app; GRANT staff TO app;",
        )
    });
    pg
}

/// Logs in from 127.0.0.1: `Ok` or the refusal's (SQLSTATE, message).
async fn login(port: u16, user: &str, password: &str, db: &str) -> Result<(), (String, String)> {
    match connect(port, user, Some(password), db).await {
        Ok(c) => c
            .simple_query("SELECT 1")
            .await
            .map(drop)
            .map_err(|e| (sqlstate(&e), db_message(&e))),
        Err(e) => Err((sqlstate(&e), db_message(&e))),
    }
}

fn rejected(user: &str, db: &str) -> Result<(), (String, String)> {
    Err((
        "28000".into(),
        format!("pg_hba.conf rejects connection for host \"127.0.0.1\", user \"{user}\", database \"{db}\", no encryption"),
    ))
}

/// Each `reject` rule pgcorral used to skip is honoured: the wrong password the following
/// `trust` would take is refused, and logins the rule does not match still reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_rules_it_used_to_skip_are_honoured() {
    let pg = server();
    let dir = tempfile::tempdir().unwrap();
    let hba = dir.path().join("hba.conf");
    // A superuser is no member of a role by being one (PostgreSQL's `is_member`).
    let cases: &[(&str, &str, &str, &[&str])] = &[
        // (first rule, user, database, users the rule does not match)
        ("host all all samehost reject", "app", "shop", &[]),
        ("host all all samenet reject", "app", "shop", &[]),
        (
            "host all +admins all reject",
            "app",
            "shop",
            &["other", "boss"],
        ),
        (
            "host samerole all all reject",
            "app",
            "staff",
            &["other", "boss"],
        ),
        ("host samegroup all all reject", "app", "staff", &["other"]),
    ];
    for &(first, user, db, unmatched) in cases {
        std::fs::write(&hba, rules(first)).unwrap();
        let p = Pooler::start(&config(&pg, &hba)).await;
        let port = p.port();
        assert_eq!(
            login(port, user, "wrong", db).await,
            rejected(user, db),
            "{first}"
        );
        for &u in unmatched {
            assert_eq!(login(port, u, "wrong", db).await, Ok(()), "{first}: {u}");
        }
        p.shutdown().await;
    }
    // samerole: a database that is not one of the user's roles is not matched.
    std::fs::write(&hba, rules("host samerole all all reject")).unwrap();
    let p = Pooler::start(&config(&pg, &hba)).await;
    assert_eq!(login(p.port(), "app", "wrong", "shop").await, Ok(()));
    p.shutdown().await;

    // Without an auth_user the roles cannot be asked: the login is refused, never passed on.
    std::fs::write(&hba, rules("host all +admins all reject")).unwrap();
    let toml = config(&pg, &hba).replace("auth_user = \"lookup\"\n", "");
    let p = Pooler::start(&toml).await;
    let (state, msg) = login(p.port(), "other", "wrong", "shop").await.unwrap_err();
    assert_eq!(
        (state.as_str(), msg.as_str()),
        ("08001", "bouncer config error")
    );
    p.shutdown().await;
}

/// Lines pgcorral cannot use: pgcorral refuses to start and `--check` fails, naming the file
/// and line, so no wrong password is let in by the `trust` after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_it_cannot_use_refuses_the_file() {
    let pg = server();
    let dir = tempfile::tempdir().unwrap();
    let hba = dir.path().join("hba.conf");
    let toml_file = dir.path().join("pgcorral.toml");
    for (first, why) in [
        (
            "host all all db.example.com reject",
            "host names (\"db.example.com\") are not supported by pgcorral",
        ),
        (
            "host all all 127.0.0.1/32 ident",
            "authentication method \"ident\" is not supported by pgcorral",
        ),
        ("host all all 127.0.0.1/33 reject", "invalid CIDR mask"),
        ("host all all 127.0.0.1 255.0.0 reject", "invalid IP mask"),
        (
            "host all all all rejct",
            "invalid authentication method \"rejct\"",
        ),
        ("host all /^app$ all reject", "regular expressions"),
        (
            "host all app all reject clientcert=verify-full",
            "\"clientcert=verify-full\"",
        ),
    ] {
        std::fs::write(&hba, rules(first)).unwrap();
        let toml = config(&pg, &hba);
        std::fs::write(&toml_file, &toml).unwrap();
        let out = check_config(&toml_file);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{first}: {err}");
        let at = format!("{}:2: ", hba.display());
        assert!(err.contains(&at) && err.contains(why), "{first}: {err}");

        let mut cfg = pgcorral::config::from_toml_str(&toml).unwrap();
        cfg.general.listen_port = 0;
        let e = pgcorral::Pooler::bind(cfg).await.err().expect(first);
        assert!(e.to_string().contains(&at), "{first}: {e}");
    }
    // A good file passes the check.
    std::fs::write(&hba, rules("host all all samenet reject")).unwrap();
    let out = check_config(&toml_file);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// A reload that finds the file unusable keeps the rules in force, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_a_bad_file_keeps_the_rules() {
    let pg = server();
    let dir = tempfile::tempdir().unwrap();
    let hba = dir.path().join("hba.conf");
    std::fs::write(&hba, rules("host all app all scram-sha-256")).unwrap();
    let toml = config(&pg, &hba);
    let file = dir.path().join("pgcorral.toml");
    std::fs::write(&file, &toml).unwrap();
    let p = Pooler::start(&toml).await;
    p.services.config_path.set(file).unwrap();
    let port = p.port();
    let refused_pw = Err((
        "28P01".to_string(),
        "password authentication failed for user \"app\"".to_string(),
    ));
    assert_eq!(login(port, "app", "wrong", "shop").await, refused_pw);

    // The first line now unusable: were it skipped, trust would let `app` in.
    std::fs::write(&hba, rules("host all app all scram-sha-265")).unwrap();
    let applied = pgcorral::reload::reload(&p.services).unwrap();
    let kept = applied.hba_kept.expect("the bad file is reported");
    assert!(
        kept.contains("invalid authentication method \"scram-sha-265\""),
        "{kept}"
    );
    assert_eq!(login(port, "app", "wrong", "shop").await, refused_pw);
    assert_eq!(login(port, "app", "app-secret", "shop").await, Ok(()));

    // A good file again is taken.
    std::fs::write(&hba, rules("host all app all reject")).unwrap();
    let applied = pgcorral::reload::reload(&p.services).unwrap();
    assert!(applied.hba_kept.is_none());
    assert_eq!(
        login(port, "app", "app-secret", "shop").await,
        rejected("app", "shop")
    );
    p.shutdown().await;
}
