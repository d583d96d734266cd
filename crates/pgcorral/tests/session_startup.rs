//! Startup parameters in transaction mode against a real PostgreSQL: options, application_name
//! and any setting given at login are per client whatever server it gets, reported as the
//! server spells them (client_encoding), refused like PostgreSQL refuses them, and what RESET
//! returns to.
//!
//! Pools of one server force clients to take turns on the same backend (a leak of one client's
//! state shows up in the next one); `server_lifetime = 1` gives every transaction a brand-new
//! backend (a setting that is not replayed shows up as lost).

mod support;

use std::time::Duration;

use support::session::*;
use support::*;

// ---- 1. startup parameters ------------------------------------------------------------------

const STARTUP_VIEW: &str = "SELECT current_setting('statement_timeout'), \
     current_setting('search_path'), current_setting('application_name')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_options_and_application_name_are_per_client() {
    let pg = Postgres::start();
    let defaults = row(&direct(&pg).await, STARTUP_VIEW).await;
    assert_eq!(defaults, ["0", "\"$user\", public", ""]);
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 1")).await;

    let (a, a_params) = connect_with(pooler.port(), |c| {
        c.application_name("app-a")
            .options("-c statement_timeout=5s -c search_path=foo");
    })
    .await
    .unwrap();
    assert_eq!(
        a_params.get("application_name").map(String::as_str),
        Some("app-a"),
        "ParameterStatus at login: {a_params:?}"
    );
    let (b, b_params) = connect_with(pooler.port(), |c| {
        c.application_name("app-b")
            .options("--statement-timeout=250ms");
    })
    .await
    .unwrap();
    assert_eq!(
        b_params.get("application_name").map(String::as_str),
        Some("app-b")
    );
    // No startup settings but client_encoding (which tokio-postgres always sends).
    let c = pooler.connect("postgres", None, "postgres").await;

    let want_a = strings(&["5s", "foo", "app-a"]);
    let want_b = strings(&["250ms", "\"$user\", public", "app-b"]);
    for i in 0..8 {
        // Every client, on every transaction, explicit or not, in changing order.
        let (first, second) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let wrap = |sql: &str| {
            if i % 3 == 0 {
                format!("BEGIN; {sql}; COMMIT")
            } else {
                sql.to_string()
            }
        };
        let q = wrap(STARTUP_VIEW);
        let got_first = row(first, &q).await;
        let got_c = row(&c, &q).await;
        let got_second = row(second, &q).await;
        let (got_a, got_b) = if i % 2 == 0 {
            (got_first, got_second)
        } else {
            (got_second, got_first)
        };
        assert_eq!(got_a, want_a, "client a, round {i}");
        assert_eq!(got_b, want_b, "client b, round {i}");
        assert_eq!(
            got_c, defaults,
            "client without startup settings, round {i}"
        );
    }
    assert_eq!(one(&a, "SHOW statement_timeout").await, "5s");
    assert_eq!(one(&c, "SHOW statement_timeout").await, "0");
    assert_eq!(one(&a, "SHOW search_path").await, "foo");
    assert_eq!(one(&b, "SHOW statement_timeout").await, "250ms");
    // The startup value is really in force, not just displayed.
    let err = try_rows(&b, "SELECT pg_sleep(2)").await.unwrap_err();
    assert_eq!(sqlstate(&err), "57014", "statement_timeout=250ms: {err}");
    assert_eq!(one(&c, "SELECT pg_sleep(0.5)::text").await, "");
    assert_eq!(row(&a, STARTUP_VIEW).await, want_a);
}

/// ignore_startup_parameters: the settings listed are dropped whether sent directly or in
/// `options` (even a value the server would refuse), the others applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_startup_parameters_are_not_applied() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(
        &pg,
        "default_pool_size = 1\nignore_startup_parameters = [\"extra_float_digits\"]",
    ))
    .await;
    let (c, _) = connect_with(pooler.port(), |c| {
        c.options("-c extra_float_digits=1111111111 -c search_path=foo");
    })
    .await
    .unwrap();
    assert_eq!(value(&c, "SHOW extra_float_digits").await, "1");
    assert_eq!(value(&c, "SHOW search_path").await, "foo");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_custom_guc_is_per_client() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 1")).await;
    const Q: &str = "SELECT coalesce(current_setting('myapp.x', true), '<unset>')";

    // In `options`, and as a startup parameter of its own (raw client).
    let (a, _) = connect_with(pooler.port(), |c| {
        c.options("-c myapp.x=from-options");
    })
    .await
    .unwrap();
    let mut r = RawClient::login(
        pooler.port(),
        &[
            ("user", "postgres"),
            ("database", "postgres"),
            ("myapp.x", "from-startup"),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("login with myapp.x: {e:?}"));
    let c = pooler.connect("postgres", None, "postgres").await;

    let mut seen_by_c = Vec::new();
    for i in 0..6 {
        assert_eq!(one(&a, Q).await, "from-options", "client a, round {i}");
        seen_by_c.push(one(&c, Q).await);
        assert_eq!(r.row(Q).await.0, ["from-startup"], "raw client, round {i}");
        seen_by_c.push(one(&c, Q).await);
    }
    // An unset placeholder reads as NULL, or '' once some SET/RESET created it on that backend.
    assert!(
        seen_by_c.iter().all(|v| v == "<unset>" || v.is_empty()),
        "a client without myapp.x saw other clients' values: {seen_by_c:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_pgoptions_and_conninfo_options_apply() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 1")).await;
    let other = pooler.connect("postgres", None, "postgres").await;
    let defaults = row(&other, STARTUP_VIEW).await;

    // Two -c: two queries, so two transactions.
    let q = "SELECT current_setting('statement_timeout') || '|' || current_setting('search_path') \
             || '|' || current_setting('application_name')";
    let mut c = psql_cmd(pooler.port(), "postgres", "postgres", None);
    c.env("PGOPTIONS", "-c statement_timeout=7s -c search_path=bar")
        .env("PGAPPNAME", "psql-opts")
        .args(["-At", "-v", "ON_ERROR_STOP=1", "-c", q, "-c", q]);
    let out = run_cmd(c).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "7s|bar|psql-opts\n7s|bar|psql-opts\n");
    assert_eq!(row(&other, STARTUP_VIEW).await, defaults);

    let mut c = psql_cmd(
        pooler.port(),
        "postgres",
        "dbname=postgres options='-c statement_timeout=9s -c search_path=baz'",
        None,
    );
    c.args(["-At", "-v", "ON_ERROR_STOP=1", "-c", q, "-c", q]);
    let out = run_cmd(c).await;
    assert!(out.status.success(), "{}", stderr(&out));
    // psql's own application_name.
    assert_eq!(stdout(&out), "9s|baz|psql\n9s|baz|psql\n");
    assert_eq!(row(&other, STARTUP_VIEW).await, defaults);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_encoding_is_reported_as_the_server_spells_it() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 1")).await;
    let startup = [
        ("user", "postgres"),
        ("database", "postgres"),
        ("client_encoding", "utf-8"),
        ("application_name", "raw"),
        ("DateStyle", "iso, dmy"),
        ("TimeZone", "asia/tokyo"),
    ];
    let mut via = RawClient::login(pooler.port(), &startup)
        .await
        .unwrap_or_else(|e| panic!("login through pgcorral: {e:?}"));
    let mut straight = RawClient::login(pg.port, &startup).await.unwrap();
    assert_eq!(
        via.params.get("client_encoding").map(String::as_str),
        Some("UTF8")
    );
    assert_eq!(
        via.params, straight.params,
        "ParameterStatus at login: through pgcorral vs PostgreSQL"
    );
    // With nothing but user and database: the server's own values.
    let minimal = [("user", "postgres"), ("database", "postgres")];
    let bare = RawClient::login(pooler.port(), &minimal).await.unwrap();
    let bare_direct = RawClient::login(pg.port, &minimal).await.unwrap();
    assert_eq!(
        bare.params, bare_direct.params,
        "ParameterStatus, minimal startup"
    );
    let q = "SELECT current_setting('client_encoding'), current_setting('DateStyle'), \
             current_setting('TimeZone'), current_setting('application_name')";
    let want = straight.row(q).await.0;
    assert_eq!(want, ["UTF8", "ISO, DMY", "Asia/Tokyo", "raw"]);
    let other = pooler.connect("postgres", None, "postgres").await;
    for _ in 0..3 {
        let (got, params) = via.row(q).await;
        assert_eq!(got, want);
        assert!(params.is_empty(), "unasked ParameterStatus: {params:?}");
        assert_eq!(one(&other, "SHOW DateStyle").await, "ISO, MDY");
    }

    // libpq asking for utf-8.
    let mut c = psql_cmd(pooler.port(), "postgres", "postgres", None);
    c.env("PGCLIENTENCODING", "utf-8").args([
        "-At",
        "-c",
        "\\encoding",
        "-c",
        "SHOW client_encoding",
    ]);
    let out = run_cmd(c).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "UTF8\nUTF8\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_or_invalid_startup_setting_fails_the_login_like_postgres() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 1")).await;
    let user = [("user", "postgres"), ("database", "postgres")];
    for (param, value, code) in [
        ("nosuch_setting", "1", "42704"),
        ("statement_timeout", "soon", "22023"),
    ] {
        let startup = [user[0], user[1], (param, value)];
        let pg_err = RawClient::login(pg.port, &startup)
            .await
            .err()
            .expect("PostgreSQL refuses it");
        assert_eq!(pg_err.code(), code, "{pg_err:?}");
        let err = within(
            Duration::from_secs(10),
            "refused login",
            RawClient::login(pooler.port(), &startup),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("login with {param}={value} succeeded through pgcorral"));
        assert_eq!(err.code(), code, "{err:?}");
        assert_eq!(err.field(b'M'), pg_err.field(b'M'), "PostgreSQL's message");
        // The same through `options` with tokio-postgres.
        let Err(e) = connect_with(pooler.port(), |c| {
            c.options(format!("-c {param}={value}"));
        })
        .await
        else {
            panic!("login with -c {param}={value} in options succeeded through pgcorral");
        };
        assert_eq!(sqlstate(&e), code, "{e}");
    }
    // The single server is fine and carries nothing of the failed logins.
    let c = pooler.connect("postgres", None, "postgres").await;
    assert_eq!(one(&c, "SHOW statement_timeout").await, "0");
    // PostgreSQL ends a failed login with FATAL, and so should pgcorral.
    let err = RawClient::login(pooler.port(), &[user[0], user[1], ("nosuch_setting", "1")])
        .await
        .err()
        .unwrap();
    assert_eq!(err.field(b'V').as_deref(), Some("FATAL"), "{err:?}");
}

/// PostgreSQL's RESET, RESET ALL and DISCARD ALL go back to the values the client asked for at
/// startup ("the value the parameter would have had if no SET had been done in this session"),
/// not to the server's defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_returns_to_the_startup_values_like_postgres() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 1")).await;
    let steps = [
        "SET statement_timeout = '1s'; SET application_name = 'changed'",
        "RESET statement_timeout; RESET application_name",
        "SET statement_timeout = '1s'; RESET ALL",
        "SET statement_timeout = '1s'",
        "DISCARD ALL",
    ];
    let mut results = Vec::new();
    for port in [pg.port, pooler.port()] {
        let (c, _) = connect_with(port, |c| {
            c.application_name("app-a")
                .options("-c statement_timeout=5s");
        })
        .await
        .unwrap();
        let other = connect(port, "postgres", None, "postgres").await.unwrap();
        let mut seen = Vec::new();
        for step in steps {
            exec(&c, step).await;
            // Another client in between: the next transaction may run elsewhere.
            exec(&other, "SELECT 1").await;
            seen.push((step, row(&c, STARTUP_VIEW).await));
        }
        results.push(seen);
    }
    assert_eq!(results[0][1].1, ["5s", "\"$user\", public", "app-a"]);
    for (direct, pooled) in results[0].iter().zip(&results[1]) {
        assert_eq!(
            pooled, direct,
            "after {:?}: pgcorral vs PostgreSQL",
            direct.0
        );
    }
}
