//! Session state in transaction mode against a real PostgreSQL: startup parameters, SET / RESET /
//! SET ROLE / SET SESSION AUTHORIZATION / set_config followed per client whatever server it
//! gets, server-bound state (advisory locks, temp tables, WITH HOLD cursors, LISTEN, SQL
//! PREPARE in a multi-statement query) pinning a client to its server, `session_pinning = "refuse"`, and a pgbench run of
//! bench/session_state.sql.
//!
//! Pools of one server force clients to take turns on the same backend (a leak of one client's
//! state shows up in the next one); `server_lifetime = 1` gives every transaction a brand-new
//! backend (a setting that is not replayed shows up as lost).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use pgwire::backend;
use support::raw::Raw;
use tokio_postgres::{AsyncMessage, Client, SimpleQueryMessage};

use support::wire::Msg;
use support::*;

// ---- helpers --------------------------------------------------------------------------------

fn cfg(pg: &Postgres, general: &str) -> String {
    config(pg, "postgres", general)
}

async fn try_rows(c: &Client, sql: &str) -> Result<Vec<Vec<String>>, tokio_postgres::Error> {
    Ok(simple_rows(&c.simple_query(sql).await?))
}

/// Rows of `sql` (simple protocol: one round trip, safe in transaction mode).
async fn rows(c: &Client, sql: &str) -> Vec<Vec<String>> {
    try_rows(c, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql:?} failed: {e}"))
}

/// The first row of `sql`.
async fn row(c: &Client, sql: &str) -> Vec<String> {
    rows(c, sql)
        .await
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{sql:?} returned no row"))
}

/// The first value of the first row of `sql`.
async fn one(c: &Client, sql: &str) -> String {
    row(c, sql).await.swap_remove(0)
}

async fn exec(c: &Client, sql: &str) {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql:?} failed: {e}"));
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A tokio-postgres client through `port` built from `cfg`; also returns the ParameterStatus
/// values it was sent at login.
async fn connect_with(
    port: u16,
    build: impl FnOnce(&mut tokio_postgres::Config),
) -> Result<(Client, BTreeMap<String, String>), tokio_postgres::Error> {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1")
        .port(port)
        .user("postgres")
        .dbname("postgres")
        .connect_timeout(Duration::from_secs(10));
    build(&mut cfg);
    let (client, conn) = cfg.connect(tokio_postgres::NoTls).await?;
    let mut params = BTreeMap::new();
    for name in [
        "application_name",
        "client_encoding",
        "TimeZone",
        "DateStyle",
    ] {
        if let Some(v) = conn.parameter(name) {
            params.insert(name.to_string(), v.to_string());
        }
    }
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((client, params))
}

// ---- a raw client, for exact ParameterStatus and ErrorResponse messages ---------------------

/// A raw protocol client logged in with startup parameters of its choosing.
struct RawClient {
    raw: Raw,
    /// ParameterStatus values sent at login.
    params: BTreeMap<String, String>,
}

/// What one simple Query got back.
#[derive(Debug, Default)]
struct Reply {
    rows: Vec<Vec<Option<String>>>,
    /// ParameterStatus messages, in order.
    params: Vec<(String, String)>,
    error: Option<Msg>,
    /// The ReadyForQuery status.
    status: u8,
}

impl RawClient {
    /// Logs in with `params` (user and database included); `Err` is the ErrorResponse, after
    /// which the connection must close.
    async fn login(port: u16, params: &[(&str, &str)]) -> Result<RawClient, Msg> {
        let mut raw = Raw::connect(port).await;
        raw.send(&wire::startup(params)).await;
        let mut got = BTreeMap::new();
        loop {
            let (tag, body) = raw.read().await.expect("connection closed during login");
            let m = Msg {
                tag,
                body: body.to_vec(),
            };
            match tag {
                backend::AUTHENTICATION => {
                    assert_eq!(&m.body[..4], &[0, 0, 0, 0], "only trust logins: {m:?}")
                }
                backend::PARAMETER_STATUS => {
                    let (k, v) = m.parameter();
                    got.insert(k, v);
                }
                backend::ERROR_RESPONSE => {
                    assert!(
                        raw.read().await.is_none(),
                        "connection still open after a failed login: {m:?}"
                    );
                    return Err(m);
                }
                backend::READY_FOR_QUERY => {
                    return Ok(RawClient { raw, params: got });
                }
                _ => {}
            }
        }
    }

    async fn query(&mut self, sql: &str) -> Reply {
        self.raw.send(&wire::query(sql)).await;
        let mut reply = Reply::default();
        loop {
            let (tag, body) = self
                .raw
                .read()
                .await
                .expect("connection closed during query");
            let m = Msg {
                tag,
                body: body.to_vec(),
            };
            match tag {
                backend::DATA_ROW => reply.rows.push(m.row()),
                backend::PARAMETER_STATUS => reply.params.push(m.parameter()),
                backend::ERROR_RESPONSE => reply.error = Some(m),
                backend::READY_FOR_QUERY => {
                    reply.status = m.body[0];
                    return reply;
                }
                _ => {}
            }
        }
    }

    /// The first row of a query that must succeed and leave the session idle.
    async fn row(&mut self, sql: &str) -> (Vec<String>, Vec<(String, String)>) {
        let r = self.query(sql).await;
        assert!(r.error.is_none(), "{sql:?} failed: {:?}", r.error);
        assert_eq!(r.status, b'I', "{sql:?}");
        let row = r
            .rows
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{sql:?} returned no row"));
        (
            row.into_iter()
                .map(|v| v.unwrap_or_else(|| "NULL".into()))
                .collect(),
            r.params,
        )
    }
}

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

// ---- 2. SET, RESET, SET ROLE, SET SESSION AUTHORIZATION, set_config -------------------------

/// search_path, TimeZone, current_user, session_user.
const VIEW: &str = "SELECT current_setting('search_path'), current_setting('TimeZone'), \
                    current_user::text, session_user::text";

fn setup_roles(pg: &Postgres) {
    pg.sql(
        "postgres",
        "CREATE ROLE alice; CREATE ROLE bob; CREATE SCHEMA sa; CREATE SCHEMA sb; \
         GRANT USAGE ON SCHEMA sa TO alice; GRANT USAGE ON SCHEMA sb TO bob",
    );
}

/// Three clients take turns on a pool of one server: `a` SETs, `b` uses set_config and SET
/// SESSION AUTHORIZATION, `c` (raw) changes nothing and must never hear a ParameterStatus.
async fn settings_follow_each_client(general: &str, fresh_servers: bool) {
    let pg = Postgres::start();
    setup_roles(&pg);
    let defaults = row(&direct(&pg).await, VIEW).await;
    assert_eq!(defaults[2..], ["postgres", "postgres"]);
    let pooler = Pooler::start(&cfg(&pg, general)).await;
    let a = Arc::new(pooler.connect("postgres", None, "postgres").await);
    let b = Arc::new(pooler.connect("postgres", None, "postgres").await);
    let mut c = RawClient::login(
        pooler.port(),
        &[("user", "postgres"), ("database", "postgres")],
    )
    .await
    .unwrap();

    exec(
        &a,
        "SET search_path = sa, public; SET TimeZone = 'Asia/Tokyo'; SET ROLE alice",
    )
    .await;
    exec(
        &b,
        "SELECT set_config('search_path', 'sb', false); SET TIME ZONE 'America/New_York'",
    )
    .await;
    exec(&b, "SET SESSION AUTHORIZATION bob").await;
    let want_a = strings(&["sa, public", "Asia/Tokyo", "alice", "postgres"]);
    let want_b = strings(&["sb", "America/New_York", "bob", "bob"]);

    let mut a_pids = Vec::new();
    for i in 0..15 {
        let q = if i % 3 == 1 {
            format!("BEGIN; {VIEW}; COMMIT")
        } else {
            VIEW.to_string()
        };
        // Rotate who goes first.
        for k in 0..3 {
            match (i + k) % 3 {
                0 => {
                    if fresh_servers {
                        // Its server reaches server_lifetime (1 ms) before it is checked in,
                        // however fast the machine: the next query needs a new one.
                        exec(&a, "SELECT pg_sleep(0.002)").await;
                    }
                    assert_eq!(row(&a, &q).await, want_a, "a, round {i}");
                    a_pids.push(backend_pid(&a).await);
                }
                1 => assert_eq!(row(&b, &q).await, want_b, "b, round {i}"),
                _ => {
                    let (got, params) = c.row(&q).await;
                    assert_eq!(got, defaults, "c, round {i}");
                    assert!(params.is_empty(), "c was sent {params:?}, round {i}");
                }
            }
        }
    }
    if fresh_servers {
        a_pids.dedup();
        assert!(
            a_pids.len() > 10,
            "server_lifetime = 1 should give new servers: {a_pids:?}"
        );
    } else {
        a_pids.dedup();
        assert_eq!(a_pids.len(), 1, "one server for all: {a_pids:?}");
    }

    // All three at once.
    let ta = tokio::spawn({
        let (a, want) = (a.clone(), want_a.clone());
        async move {
            for i in 0..30 {
                assert_eq!(row(&a, VIEW).await, want, "a, concurrent round {i}");
            }
        }
    });
    let tb = tokio::spawn({
        let (b, want) = (b.clone(), want_b.clone());
        async move {
            for i in 0..30 {
                assert_eq!(row(&b, VIEW).await, want, "b, concurrent round {i}");
            }
        }
    });
    let tc = tokio::spawn({
        let defaults = defaults.clone();
        async move {
            for i in 0..30 {
                let (got, params) = c.row(VIEW).await;
                assert_eq!(got, defaults, "c, concurrent round {i}");
                assert!(params.is_empty(), "c was sent {params:?}");
            }
            c
        }
    });
    ta.await.unwrap();
    tb.await.unwrap();
    let mut c = tc.await.unwrap();

    // SET LOCAL lasts until the end of its transaction.
    let got = rows(
        &a,
        "BEGIN; SET LOCAL search_path = tmp; SELECT current_setting('search_path'); COMMIT",
    )
    .await;
    assert_eq!(got, [["tmp"]]);
    assert_eq!(row(&b, VIEW).await, want_b);
    assert_eq!(row(&a, VIEW).await, want_a, "after SET LOCAL");

    // A SET in a transaction that is rolled back does not stick...
    exec(&a, "BEGIN; SET TimeZone = 'UTC'; SET ROLE NONE; ROLLBACK").await;
    assert_eq!(c.row(VIEW).await.0, defaults);
    assert_eq!(row(&a, VIEW).await, want_a, "after a rolled-back SET");
    // ...nor one in a transaction that failed, implicit or explicit.
    let e = try_rows(&a, "SET search_path = zzz; SELECT 1/0")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22012");
    assert_eq!(row(&b, VIEW).await, want_b);
    assert_eq!(
        row(&a, VIEW).await,
        want_a,
        "after a failed implicit transaction"
    );
    exec(&a, "BEGIN; SET TimeZone = 'Europe/Paris'").await;
    let e = try_rows(&a, "SELECT 1/0").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22012");
    exec(&a, "ROLLBACK").await;
    assert_eq!(c.row(VIEW).await.0, defaults);
    assert_eq!(
        row(&a, VIEW).await,
        want_a,
        "after a failed explicit transaction"
    );

    // A SET that commits inside an explicit transaction does.
    exec(&a, "BEGIN; SET TimeZone = 'Europe/Paris'; COMMIT").await;
    let want_a = strings(&["sa, public", "Europe/Paris", "alice", "postgres"]);
    assert_eq!(row(&b, VIEW).await, want_b);
    assert_eq!(row(&a, VIEW).await, want_a);

    // The raw client hears about its own change once, and about nothing else.
    let (_, params) = c.row("SET TimeZone = 'Australia/Sydney'; SELECT 1").await;
    assert_eq!(
        params,
        [(String::from("TimeZone"), String::from("Australia/Sydney"))]
    );
    assert_eq!(row(&a, VIEW).await, want_a);
    assert_eq!(row(&b, VIEW).await, want_b);
    let (got, params) = c.row(VIEW).await;
    assert_eq!(got[1], "Australia/Sydney");
    assert!(params.is_empty(), "{params:?}");
    let (_, params) = c.row("RESET TimeZone; SELECT 1").await;
    assert_eq!(params, [(String::from("TimeZone"), defaults[1].clone())]);
    assert_eq!(c.row(VIEW).await.0, defaults);

    // DISCARD ALL clears only the state of the client that sends it.
    exec(&a, "DISCARD ALL").await;
    assert_eq!(row(&b, VIEW).await, want_b);
    assert_eq!(row(&a, VIEW).await, defaults, "a after DISCARD ALL");
    assert_eq!(row(&b, VIEW).await, want_b, "b after a's DISCARD ALL");

    // RESET ALL: settings back to the defaults, but (as in PostgreSQL) not the session user.
    exec(&b, "RESET ALL").await;
    assert_eq!(row(&a, VIEW).await, defaults);
    assert_eq!(
        row(&b, VIEW).await,
        strings(&[defaults[0].as_str(), defaults[1].as_str(), "bob", "bob"]),
        "b after RESET ALL"
    );
    exec(&b, "RESET SESSION AUTHORIZATION").await;
    assert_eq!(row(&a, VIEW).await, defaults);
    assert_eq!(
        row(&b, VIEW).await,
        defaults,
        "b after RESET SESSION AUTHORIZATION"
    );

    // SET ROLE, then RESET ROLE.
    exec(&a, "SET ROLE bob").await;
    assert_eq!(row(&b, VIEW).await, defaults);
    assert_eq!(row(&a, VIEW).await[2..], ["bob", "postgres"]);
    exec(&a, "RESET ROLE").await;
    assert_eq!(row(&b, VIEW).await, defaults);
    assert_eq!(row(&a, VIEW).await, defaults);
    assert_eq!(c.row(VIEW).await.0, defaults);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_follow_each_client_on_a_shared_server() {
    settings_follow_each_client("default_pool_size = 1", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_follow_each_client_onto_new_servers() {
    settings_follow_each_client("default_pool_size = 1\nserver_lifetime = 1", true).await;
}

/// Custom (`x.y`) settings made with SET or set_config follow their client and reach no one else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_settings_from_set_follow_their_client() {
    let pg = Postgres::start();
    const Q: &str = "SELECT coalesce(current_setting('myapp.tenant', true), '<unset>')";
    for (general, what) in [
        ("default_pool_size = 1", "shared server"),
        ("default_pool_size = 1\nserver_lifetime = 1", "new servers"),
    ] {
        let pooler = Pooler::start(&cfg(&pg, general)).await;
        let a = pooler.connect("postgres", None, "postgres").await;
        let b = pooler.connect("postgres", None, "postgres").await;
        let c = pooler.connect("postgres", None, "postgres").await;
        exec(&a, "SET myapp.tenant = 'acme'").await;
        exec(&b, "SELECT set_config('myapp.tenant', 'globex', false)").await;
        let mut seen_by_c = Vec::new();
        for i in 0..5 {
            assert_eq!(one(&a, Q).await, "acme", "{what}: a, round {i}");
            seen_by_c.push(one(&c, Q).await);
            assert_eq!(one(&b, Q).await, "globex", "{what}: b, round {i}");
            seen_by_c.push(one(&c, Q).await);
        }
        assert!(
            seen_by_c.iter().all(|v| v == "<unset>" || v.is_empty()),
            "{what}: c saw other clients' values: {seen_by_c:?}"
        );
        pooler.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_follow_each_client_in_statement_mode() {
    let pg = Postgres::start();
    setup_roles(&pg);
    let defaults = row(&direct(&pg).await, VIEW).await;
    let pooler = Pooler::start(&cfg(
        &pg,
        "default_pool_size = 1\npool_mode = \"statement\"",
    ))
    .await;
    let a = pooler.connect("postgres", None, "postgres").await;
    let b = pooler.connect("postgres", None, "postgres").await;
    let c = pooler.connect("postgres", None, "postgres").await;
    exec(&a, "SET search_path = sa, public").await;
    exec(&a, "SET TimeZone = 'Asia/Tokyo'").await;
    exec(&a, "SET ROLE alice").await;
    exec(
        &b,
        "SELECT set_config('TimeZone', 'America/New_York', false)",
    )
    .await;
    exec(&b, "SET SESSION AUTHORIZATION bob").await;
    let want_a = strings(&["sa, public", "Asia/Tokyo", "alice", "postgres"]);
    let want_b = strings(&[&defaults[0], "America/New_York", "bob", "bob"]);
    for i in 0..10 {
        assert_eq!(row(&a, VIEW).await, want_a, "a, round {i}");
        assert_eq!(row(&c, VIEW).await, defaults, "c, round {i}");
        assert_eq!(row(&b, VIEW).await, want_b, "b, round {i}");
    }
    exec(&a, "RESET ALL").await;
    exec(&b, "RESET SESSION AUTHORIZATION").await;
    assert_eq!(row(&a, VIEW).await[..2], defaults[..2]);
    assert_eq!(row(&a, VIEW).await[2], "alice");
    assert_eq!(
        row(&b, VIEW).await[..],
        [&defaults[0], "America/New_York", "postgres", "postgres"]
    );
    assert_eq!(row(&c, VIEW).await, defaults);
}

/// A superuser changes a superuser-only setting, then drops its privileges with SET ROLE (or
/// SET SESSION AUTHORIZATION): legal in PostgreSQL, and must replay on another server too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superuser_settings_made_before_set_role_are_replayed() {
    let pg = Postgres::start();
    setup_roles(&pg);
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 1")).await;
    const Q: &str =
        "SELECT current_setting('session_replication_role'), current_user::text, session_user::text";
    for (switch, user, session_user) in [
        ("SET ROLE alice", "alice", "postgres"),
        ("SET SESSION AUTHORIZATION bob", "bob", "bob"),
    ] {
        let a = pooler.connect("postgres", None, "postgres").await;
        let b = pooler.connect("postgres", None, "postgres").await;
        exec(&a, "SET session_replication_role = replica").await;
        exec(&a, switch).await;
        let want = strings(&["replica", user, session_user]);
        assert_eq!(row(&a, Q).await, want, "{switch}");
        for i in 0..3 {
            // b makes the server's settings differ, so a's are replayed.
            exec(&b, "SET TimeZone = 'Asia/Tokyo'").await;
            assert_eq!(
                row(&b, Q).await,
                ["origin", "postgres", "postgres"],
                "{switch}: b, round {i}"
            );
            let got = try_rows(&a, Q).await;
            assert!(
                matches!(&got, Ok(r) if r[0] == want),
                "{switch}: a, round {i}: {got:?}"
            );
        }
    }
}

// ---- 3. server-bound state pins the client --------------------------------------------------

/// What a server carries that could leak: temp relations, SQL prepared statements, cursors,
/// LISTEN channels, advisory locks held by this backend, and search_path.
const LEFTOVERS: &str = "SELECT \
    (SELECT count(*) FROM pg_catalog.pg_class WHERE relnamespace = pg_catalog.pg_my_temp_schema()), \
    (SELECT count(*) FROM pg_catalog.pg_prepared_statements WHERE name NOT LIKE 'pgcorral%'), \
    (SELECT count(*) FROM pg_catalog.pg_cursors), \
    (SELECT count(*) FROM pg_catalog.pg_listening_channels()), \
    (SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' \
        AND pid = pg_catalog.pg_backend_pid()), \
    current_setting('search_path')";

fn clean_server() -> Vec<String> {
    strings(&["0", "0", "0", "0", "0", "\"$user\", public"])
}

/// One kind of server-bound state: what the log calls it, how to create it, a query that only
/// works (with the expected answer, given the round) on the server that has it, and how to
/// release it.
struct Pin {
    kind: &'static str,
    create: &'static str,
    check: &'static str,
    expect: fn(usize) -> String,
    release: &'static str,
}

const PINS: [Pin; 5] = [
    Pin {
        kind: "session advisory lock",
        create: "SELECT pg_advisory_lock(4242)",
        check:
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
        expect: |_| "1".into(),
        release: "SELECT pg_advisory_unlock(4242)",
    },
    Pin {
        kind: "temporary table",
        create: "CREATE TEMP TABLE pin_t AS SELECT 7 AS a",
        check: "SELECT a FROM pin_t",
        expect: |_| "7".into(),
        release: "DROP TABLE pin_t",
    },
    Pin {
        kind: "WITH HOLD cursor",
        create: "DECLARE pin_c CURSOR WITH HOLD FOR SELECT g FROM generate_series(1, 1000) g",
        check: "FETCH 1 FROM pin_c",
        expect: |round| (round + 1).to_string(),
        release: "CLOSE pin_c",
    },
    Pin {
        kind: "LISTEN",
        create: "LISTEN pin_chan",
        check: "SELECT string_agg(c, ',') FROM pg_listening_channels() c",
        expect: |_| "pin_chan".into(),
        release: "UNLISTEN pin_chan",
    },
    Pin {
        kind: "SQL PREPARE",
        // A PREPARE of its own is pgcorral's to move between servers; inside a
        // multi-statement query it is left to the server, and pins.
        create: "SELECT 1; PREPARE pin_p AS SELECT 42",
        check: "EXECUTE pin_p",
        expect: |_| "42".into(),
        release: "DEALLOCATE pin_p",
    },
];

/// `BEGIN` and the backend pid, as one request; the server stays with the client until COMMIT.
const BEGIN_PID: &str = "BEGIN; SELECT pg_backend_pid()";

fn first_pid(msgs: &[SimpleQueryMessage]) -> i32 {
    simple_rows(msgs)[0][0].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_bound_state_pins_the_client_until_released() {
    let pg = Postgres::start();
    let pooler = PoolerProcess::start_logging(&cfg(&pg, "default_pool_size = 2"), "info");
    let port = pooler.port;
    let o1 = connect(port, "postgres", None, "postgres").await.unwrap();
    let o2 = connect(port, "postgres", None, "postgres").await.unwrap();

    for pin in &PINS {
        let kind = pin.kind;
        let (p, mut notes) = client_with_messages(port).await;
        exec(&p, pin.create).await;
        let pinned = backend_pid(&p).await;
        for round in 0..5 {
            // Others run on the other server and see none of it.
            let other = backend_pid(&o1).await;
            assert_ne!(
                other, pinned,
                "{kind}: o1 got the pinned server (round {round})"
            );
            assert_eq!(row(&o2, LEFTOVERS).await, clean_server(), "{kind}: o2");
            assert_eq!(
                backend_pid(&p).await,
                pinned,
                "{kind}: pinned client moved (round {round})"
            );
            assert_eq!(
                one(&p, pin.check).await,
                (pin.expect)(round),
                "{kind}: state on the pinned server (round {round})"
            );
        }
        if kind == "LISTEN" {
            // A notification reaches the pinned client while it is idle.
            exec(&o1, "NOTIFY pin_chan, 'hello'").await;
            let n = within(Duration::from_secs(5), "notification", notes.recv())
                .await
                .expect("notification channel open");
            match n {
                AsyncMessage::Notification(n) => {
                    assert_eq!((n.channel(), n.payload()), ("pin_chan", "hello"))
                }
                other => panic!("{kind}: expected a notification, got {other:?}"),
            }
        }

        // The pinned server is not in the pool: with o1 holding the other one, o2 waits...
        let held = first_pid(&o1.simple_query(BEGIN_PID).await.unwrap());
        assert_ne!(held, pinned);
        {
            let waiting = o2.simple_query(BEGIN_PID);
            tokio::pin!(waiting);
            assert!(
                tokio::time::timeout(Duration::from_millis(500), &mut waiting)
                    .await
                    .is_err(),
                "{kind}: o2 got a server while one was pinned and o1 held the other"
            );
            // ...while the pinned client goes on, needing no server from the pool.
            assert_eq!(backend_pid(&p).await, pinned, "{kind}");
            exec(&o1, "COMMIT").await;
            let got = within(Duration::from_secs(5), "o2 after o1's COMMIT", waiting)
                .await
                .unwrap();
            assert_eq!(first_pid(&got), held, "{kind}");
        }
        exec(&o2, "COMMIT").await;

        // Released: the client is unpinned and its server back in the pool.
        exec(&p, pin.release).await;
        let x = first_pid(&o1.simple_query(BEGIN_PID).await.unwrap());
        let y = first_pid(
            &within(
                Duration::from_secs(5),
                &format!("{kind}: a second server after release"),
                o2.simple_query(BEGIN_PID),
            )
            .await
            .unwrap(),
        );
        let mut got = [x, y];
        got.sort();
        let mut want = [pinned, held];
        want.sort();
        assert_eq!(got, want, "{kind}: both servers in the pool again");
        let (on_pinned, on_other) = if x == pinned { (&o1, &o2) } else { (&o2, &o1) };
        assert_eq!(
            row(on_pinned, LEFTOVERS).await,
            clean_server(),
            "{kind}: released"
        );
        exec(on_other, "COMMIT").await;
        // The formerly pinned client now takes whatever server is free.
        assert_eq!(
            backend_pid(&p).await,
            held,
            "{kind}: unpinned client got the free server"
        );
        exec(on_pinned, "COMMIT").await;
        if kind == "LISTEN" {
            exec(&o1, "NOTIFY pin_chan, 'after'").await;
            exec(&p, "SELECT 1").await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(notes.try_recv().is_err(), "notification after UNLISTEN");
        }
    }

    let log = pooler.log();
    for pin in &PINS {
        assert!(
            log.lines()
                .any(|l| l.contains("pinned") && l.contains(&format!("\"{}\"", pin.kind))),
            "the log does not say the client was pinned for {:?}:\n{log}",
            pin.kind
        );
    }
    assert!(
        log.lines().filter(|l| l.contains("unpinned")).count() >= PINS.len(),
        "the log does not say clients were unpinned:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_until_every_kind_is_released_or_discarded() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 2")).await;
    let p = pooler.connect("postgres", None, "postgres").await;
    let o = pooler.connect("postgres", None, "postgres").await;
    for pin in &PINS {
        exec(&p, pin.create).await;
    }
    let pinned = backend_pid(&p).await;
    // Releasing all but one keeps the client pinned.
    for pin in &PINS[..PINS.len() - 1] {
        exec(&p, pin.release).await;
        let held = first_pid(&o.simple_query(BEGIN_PID).await.unwrap());
        assert_ne!(held, pinned, "after releasing {}", pin.kind);
        assert_eq!(
            backend_pid(&p).await,
            pinned,
            "after releasing {}",
            pin.kind
        );
        exec(&o, "COMMIT").await;
    }
    // DISCARD ALL releases everything at once.
    for pin in &PINS[..PINS.len() - 1] {
        exec(&p, pin.create).await;
    }
    exec(&p, "DISCARD ALL").await;
    let held = first_pid(&o.simple_query(BEGIN_PID).await.unwrap());
    let now = within(
        Duration::from_secs(5),
        "unpinned after DISCARD ALL",
        backend_pid(&p),
    )
    .await;
    assert_ne!(now, held);
    exec(&o, "COMMIT").await;
    assert_eq!(row(&p, LEFTOVERS).await, clean_server());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_state_never_reaches_the_next_client() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 2")).await;
    let o1 = pooler.connect("postgres", None, "postgres").await;
    let o2 = pooler.connect("postgres", None, "postgres").await;
    for round in 0..2 {
        let p = pooler.connect("postgres", None, "postgres").await;
        exec(&p, "SET search_path = leaked, public").await;
        for pin in &PINS {
            exec(&p, pin.create).await;
        }
        let pinned = backend_pid(&p).await;
        drop(p);
        // Both servers, one of them the pinned client's, once it has been cleaned.
        let mut seen = Vec::new();
        let mut found = false;
        for _ in 0..50 {
            let x = first_pid(&o1.simple_query(BEGIN_PID).await.unwrap());
            let y = first_pid(&o2.simple_query(BEGIN_PID).await.unwrap());
            for (c, pid) in [(&o1, x), (&o2, y)] {
                assert_eq!(
                    row(c, LEFTOVERS).await,
                    clean_server(),
                    "round {round}: a client on server {pid} after the pinned client {pinned} left"
                );
            }
            exec(&o1, "COMMIT").await;
            exec(&o2, "COMMIT").await;
            seen.push((x, y));
            if x == pinned || y == pinned {
                found = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            found,
            "round {round}: the pinned client's server {pinned} never came back to the pool \
             (it should be cleaned with DISCARD ALL and reused): {seen:?}"
        );
        // Its advisory lock is free for anyone.
        assert_eq!(one(&o1, "SELECT pg_try_advisory_lock(4242)").await, "t");
        assert_eq!(one(&o1, "SELECT pg_advisory_unlock(4242)").await, "t");
    }
}

// ---- 4. session_pinning = "refuse" ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_mode_answers_pinning_statements_with_0a000() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(
        &pg,
        "default_pool_size = 2\nsession_pinning = \"refuse\"",
    ))
    .await;
    let c = pooler.connect("postgres", None, "postgres").await;
    for sql in [
        "LISTEN x",
        "SELECT pg_advisory_lock(4242)",
        "CREATE TEMP TABLE refused_t (a int)",
        "DECLARE refused_c CURSOR WITH HOLD FOR SELECT 1",
        "SELECT 1; PREPARE refused_p AS SELECT 1",
    ] {
        let e = try_rows(&c, sql)
            .await
            .expect_err(&format!("{sql:?} was allowed"));
        assert_eq!(sqlstate(&e), "0A000", "{sql:?}: {e}");
        assert_eq!(
            one(&c, "SELECT 1").await,
            "1",
            "client usable after {sql:?}"
        );
    }
    // Nothing of it reached a server.
    let d = direct(&pg).await;
    assert_eq!(
        one(
            &d,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
        )
        .await,
        "0"
    );
    let e = try_rows(&c, "EXECUTE refused_p").await.unwrap_err();
    assert_eq!(sqlstate(&e), "26000", "{e}");
    assert_eq!(row(&c, LEFTOVERS).await, clean_server());

    // In a transaction: refused too, and the client can roll back and go on.
    exec(&c, "BEGIN").await;
    let e = try_rows(&c, "LISTEN x").await.unwrap_err();
    assert_eq!(sqlstate(&e), "0A000", "{e}");
    exec(&c, "ROLLBACK").await;
    assert_eq!(one(&c, "SELECT 1").await, "1");

    // Plain session settings are still allowed and followed.
    exec(&c, "SET search_path = refuse_ok").await;
    let other = pooler.connect("postgres", None, "postgres").await;
    exec(&other, "BEGIN").await;
    assert_eq!(one(&c, "SHOW search_path").await, "refuse_ok");
    exec(&other, "COMMIT").await;
    assert_eq!(one(&other, "SHOW search_path").await, "\"$user\", public");
}

/// A refused Query that arrives in several reads is refused all the same: nothing of it
/// reaches a server (it was forwarded, and ran, when its start came before its text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_mode_refuses_a_query_split_across_writes() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(
        &pg,
        "default_pool_size = 1\nsession_pinning = \"refuse\"",
    ))
    .await;
    let mut c = Raw::login(pooler.port(), "postgres", "postgres")
        .await
        .unwrap();
    c.stream.set_nodelay(true).unwrap();
    let mut q = bytes::BytesMut::new();
    pgwire::encode::query(&mut q, "LISTEN split_x");
    // In writes of 3 and 1 bytes, as the fuzzer's reads.
    let mut at = 0;
    for n in [3, 1].into_iter().cycle() {
        let end = (at + n).min(q.len());
        c.send(&q[at..end]).await;
        at = end;
        if at == q.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let mut error = None;
    loop {
        let (tag, body) = c.read().await.expect("an answer");
        match tag {
            backend::ERROR_RESPONSE => error = backend::ErrorFields::parse(&body),
            backend::READY_FOR_QUERY => break,
            other => panic!("the refused LISTEN got {:?}", other as char),
        }
    }
    let e = error.expect("an ErrorResponse");
    assert_eq!(e.code, "0A000", "{e:?}");
    assert_eq!(c.query("SELECT 1").await.unwrap(), [[Some("1".into())]]);
    let d = direct(&pg).await;
    assert_eq!(
        one(
            &d,
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
        )
        .await,
        "0"
    );
}

// ---- 5. pgbench: bench/session_state.sql ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_session_state_script_has_no_failures() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&cfg(&pg, "default_pool_size = 5")).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/session_state.sql");
    let mut c = pgbench_cmd(pooler.port(), "postgres", "postgres", None);
    c.args([
        "-n",
        "-c",
        "50",
        "-j",
        "2",
        "-T",
        "10",
        "--protocol",
        "simple",
        "-f",
        script,
    ]);
    let out = run_cmd(c).await;
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "pgbench failed:\n{o}\n{e}");
    assert!(!e.contains("aborted"), "{o}\n{e}");
    let processed =
        pgbench_transactions(&o).unwrap_or_else(|| panic!("no transaction count in:\n{o}"));
    assert!(processed > 50, "{o}");
    assert!(
        o.contains("number of failed transactions: 0 "),
        "failures:\n{o}\n{e}"
    );
}
