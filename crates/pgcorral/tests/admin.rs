//! The admin console against PgBouncer's: pgcorral and PgBouncer (the Debian `pgbouncer`
//! package) run side by side in front of the same real PostgreSQL, and every `SHOW` PgBouncer
//! knows must answer with PgBouncer's columns first, in PgBouncer's order (pgcorral may append
//! more); SHOW LISTS and SHOW TOTALS have PgBouncer's rows, SHOW CONFIG PgBouncer's spelling of
//! shared keys. Also: SHOW HELP's notice, SHOW STATE, stats users (SHOW yes, PAUSE no), unknown
//! commands as errors that keep the connection, logins refused to other users, database
//! `pgcorral` as an alias, and SHOW through the extended protocol.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::pgbouncer::PgBouncer;
use support::wire::{Msg, Wire};
use support::*;

/// The SHOW commands whose columns must start with PgBouncer's (SHOW HELP has none).
const SHOW: &[&str] = &[
    "STATS",
    "STATS_TOTALS",
    "STATS_AVERAGES",
    "TOTALS",
    "POOLS",
    "CLIENTS",
    "SERVERS",
    "DATABASES",
    "USERS",
    "CONFIG",
    "LISTS",
    "VERSION",
    "SOCKETS",
    "ACTIVE_SOCKETS",
    "MEM",
    "DNS_HOSTS",
    "DNS_ZONES",
];

/// `[general]` lines turning pgcorral's console on.
const ADMIN: &str = "admin_users = [\"postgres\"]\nstats_users = [\"stats\"]";

/// Which pooler answered, for messages.
#[derive(Clone, Copy, Debug)]
enum Who {
    Pgcorral,
    PgBouncer,
}

/// Both poolers in front of one PostgreSQL, each with a client of database `postgres` that has
/// run a query (so POOLS, CLIENTS and SERVERS have rows). Drops clients, then poolers, then
/// PostgreSQL.
struct Both {
    _warm: Vec<tokio_postgres::Client>,
    bouncer: PgBouncer,
    corral: Pooler,
    _pg: Postgres,
}

impl Both {
    async fn start() -> Both {
        let pg = Postgres::start();
        let corral = Pooler::start(&config(&pg, "postgres", ADMIN)).await;
        let bouncer = PgBouncer::start(pg.port);
        let mut warm = Vec::new();
        for (who, port) in [
            (Who::Pgcorral, corral.port()),
            (Who::PgBouncer, bouncer.port),
        ] {
            let c = within(
                ANSWER,
                "warm-up login",
                connect(port, "postgres", None, "postgres"),
            )
            .await
            .unwrap_or_else(|e| panic!("{who:?}: connect to database postgres: {e}"));
            within(ANSWER, "warm-up query", c.simple_query("SELECT 1"))
                .await
                .unwrap_or_else(|e| panic!("{who:?}: SELECT 1: {e}"));
            warm.push(c);
        }
        Both {
            _warm: warm,
            bouncer,
            corral,
            _pg: pg,
        }
    }

    fn port(&self, who: Who) -> u16 {
        match who {
            Who::Pgcorral => self.corral.port(),
            Who::PgBouncer => self.bouncer.port,
        }
    }

    /// An admin console session as `user`.
    async fn console(&self, who: Who, user: &str) -> Wire {
        within(
            ANSWER,
            &format!("{who:?}: console login as {user}"),
            Wire::connect(self.port(who), user, "pgbouncer"),
        )
        .await
    }
}

/// How long a login or an answer may take before the test fails instead of hanging.
const ANSWER: Duration = Duration::from_secs(20);

/// A simple query's answer, message by message.
#[derive(Debug, Default)]
struct Answer {
    /// From RowDescription; `None` if there was none.
    columns: Option<Vec<String>>,
    rows: Vec<Vec<Option<String>>>,
    /// NoticeResponse message and detail fields.
    notices: Vec<String>,
    /// ErrorResponse: (SQLSTATE, message).
    error: Option<(String, String)>,
    /// CommandComplete tag.
    tag: Option<String>,
}

impl Answer {
    /// The first column of every row.
    fn first_column(&self) -> Vec<String> {
        self.rows
            .iter()
            .map(|r| r.first().cloned().flatten().unwrap_or_default())
            .collect()
    }

    /// The column named `name` of every row.
    fn column(&self, name: &str) -> Vec<Option<String>> {
        let i = self
            .columns
            .as_ref()
            .and_then(|c| c.iter().position(|n| n == name))
            .unwrap_or_else(|| panic!("no column {name:?} in {self:?}"));
        self.rows
            .iter()
            .map(|r| r.get(i).cloned().flatten())
            .collect()
    }
}

/// The field names of a RowDescription: i16 count, then per field a NUL-terminated name and 18
/// bytes (table oid, column number, type oid, type size, type modifier, format).
fn row_description(m: &Msg) -> Vec<String> {
    assert_eq!(m.tag, b'T', "not a RowDescription: {m:?}");
    let b = &m.body;
    let n = i16::from_be_bytes([b[0], b[1]]) as usize;
    let mut pos = 2;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let end = pos
            + b[pos..]
                .iter()
                .position(|&c| c == 0)
                .expect("NUL-terminated field name");
        out.push(String::from_utf8_lossy(&b[pos..end]).into_owned());
        pos = end + 1 + 18;
    }
    assert_eq!(pos, b.len(), "RowDescription length: {m:?}");
    out
}

/// Sends `sql` as a simple Query and collects the answer up to ReadyForQuery; fails (rather than
/// panicking deep inside the wire client) if the pooler closes the connection instead.
async fn ask(w: &mut Wire, who: Who, sql: &str) -> Answer {
    w.send(&wire::query(sql)).await;
    let mut a = Answer::default();
    loop {
        let m = match w.try_recv().await {
            Some(m) => m,
            None => panic!("{who:?} closed the connection on {sql:?} (answer so far: {a:?})"),
        };
        match m.tag {
            b'T' => a.columns = Some(row_description(&m)),
            b'D' => a.rows.push(m.row()),
            b'N' => a.notices.push(format!(
                "{}\n{}",
                m.field(b'M').unwrap_or_default(),
                m.field(b'D').unwrap_or_default()
            )),
            b'E' => a.error = Some((m.code(), m.field(b'M').unwrap_or_default())),
            b'C' => a.tag = Some(m.text()),
            b'Z' => return a,
            _ => {}
        }
    }
}

/// Asks and requires a successful answer with a RowDescription.
async fn show(w: &mut Wire, who: Who, sql: &str) -> Answer {
    let a = ask(w, who, sql).await;
    assert!(a.error.is_none(), "{who:?}: {sql}: {:?}", a.error);
    assert!(
        a.columns.is_some(),
        "{who:?}: {sql}: no RowDescription: {a:?}"
    );
    a
}

// ---------------------------------------------------------------------------------------------
// Column lists and row names against PgBouncer
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_columns_start_with_pgbouncers() {
    let both = Both::start().await;
    let mut bouncer = both.console(Who::PgBouncer, "postgres").await;
    let mut corral = both.console(Who::Pgcorral, "postgres").await;
    let mut problems = Vec::new();
    for cmd in SHOW {
        let sql = format!("SHOW {cmd}");
        let want = show(&mut bouncer, Who::PgBouncer, &sql)
            .await
            .columns
            .unwrap();
        let got = ask(&mut corral, Who::Pgcorral, &sql).await;
        if let Some((code, msg)) = &got.error {
            problems.push(format!("{sql}: error {code} {msg}"));
            continue;
        }
        let Some(got) = got.columns else {
            problems.push(format!("{sql}: no RowDescription"));
            continue;
        };
        if !got.starts_with(&want) {
            let at = want
                .iter()
                .zip(&got)
                .position(|(w, g)| w != g)
                .unwrap_or(got.len());
            problems.push(format!(
                "{sql}: columns differ from column {at} on\n    PgBouncer: {want:?}\n    pgcorral:  {got:?}"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "pgcorral's SHOW columns must start with PgBouncer 1.18's:\n  {}",
        problems.join("\n  ")
    );
}

/// PgBouncer's row names in `sql`'s first column that pgcorral lacks (pgcorral may have more).
async fn missing_rows(both: &Both, sql: &str) -> (Vec<String>, Vec<String>) {
    let mut bouncer = both.console(Who::PgBouncer, "postgres").await;
    let mut corral = both.console(Who::Pgcorral, "postgres").await;
    let want = show(&mut bouncer, Who::PgBouncer, sql).await.first_column();
    assert!(!want.is_empty(), "PgBouncer: {sql} has no rows");
    let got: BTreeSet<String> = show(&mut corral, Who::Pgcorral, sql)
        .await
        .first_column()
        .into_iter()
        .collect();
    let missing = want.iter().filter(|w| !got.contains(*w)).cloned().collect();
    (missing, want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_lists_has_pgbouncers_rows() {
    let both = Both::start().await;
    let (missing, want) = missing_rows(&both, "SHOW LISTS").await;
    assert!(
        missing.is_empty(),
        "SHOW LISTS lacks PgBouncer's rows {missing:?} (PgBouncer has {want:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_totals_has_pgbouncers_rows() {
    let both = Both::start().await;
    let (missing, want) = missing_rows(&both, "SHOW TOTALS").await;
    assert!(
        missing.is_empty(),
        "SHOW TOTALS lacks PgBouncer's rows {missing:?} (PgBouncer has {want:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_config_spells_keys_like_pgbouncer() {
    let keys = [
        "listen_port",
        "pool_mode",
        "default_pool_size",
        "max_client_conn",
        "admin_users",
        "stats_users",
    ];
    let both = Both::start().await;
    for who in [Who::PgBouncer, Who::Pgcorral] {
        let mut w = both.console(who, "postgres").await;
        let have: BTreeSet<String> = show(&mut w, who, "SHOW CONFIG")
            .await
            .first_column()
            .into_iter()
            .collect();
        let missing: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|k| !have.contains(*k))
            .collect();
        assert!(
            missing.is_empty(),
            "{who:?}: SHOW CONFIG lacks the keys {missing:?}; it has {have:?}"
        );
    }
}

/// The pools, clients, servers and databases the warm-up made show up in pgcorral as in
/// PgBouncer: by database name `postgres`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_lists_the_warm_pool_like_pgbouncer() {
    let both = Both::start().await;
    for who in [Who::PgBouncer, Who::Pgcorral] {
        let mut w = both.console(who, "postgres").await;
        for (sql, col) in [
            ("SHOW POOLS", "database"),
            ("SHOW CLIENTS", "database"),
            ("SHOW SERVERS", "database"),
            ("SHOW DATABASES", "name"),
        ] {
            let a = show(&mut w, who, sql).await;
            let values = a.column(col);
            assert!(
                values.iter().any(|v| v.as_deref() == Some("postgres")),
                "{who:?}: {sql}: no row with {col} = postgres: {a:?}"
            );
        }
    }
}

/// With only a `*` fallback in [databases], SHOW DATABASES lists, as PgBouncer does, each
/// database a client named (made from the fallback: its host and port, the name as the server
/// database) and not `*` itself; the rows have PgBouncer's values (the console's own row
/// aside, whose port is each pooler's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_database_lists_those_clients_named_like_pgbouncer() {
    let pg = Postgres::start();
    blocking(|| pg.create_db("app"));
    let corral = Pooler::start(&format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\n{ADMIN}\ndefault_pool_size = 7\n\n\
         [databases.\"*\"]\nhost = \"127.0.0.1\"\nport = {}\n",
        pg.port
    ))
    .await;
    let port = free_port();
    let bouncer = blocking(|| {
        PgBouncer::start_files(
            port,
            &[("users.txt", "\"postgres\" \"\"\n")],
            &format!(
                "[databases]\n* = host=127.0.0.1 port={}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
                 listen_port = {port}\nunix_socket_dir =\nauth_type = trust\n\
                 auth_file = {{dir}}/users.txt\nadmin_users = postgres\ndefault_pool_size = 7\n",
                pg.port
            ),
        )
    });
    let mut answers = Vec::new();
    let mut clients = Vec::new();
    for (who, port) in [
        (Who::Pgcorral, corral.port()),
        (Who::PgBouncer, bouncer.port),
    ] {
        let mut w = within(
            ANSWER,
            "console",
            Wire::connect(port, "postgres", "pgbouncer"),
        )
        .await;
        let before = show(&mut w, who, "SHOW DATABASES").await;
        assert_eq!(before.first_column(), ["pgbouncer"], "{who:?}: {before:?}");
        for db in ["postgres", "app"] {
            let c = within(ANSWER, "login", connect(port, "postgres", None, db))
                .await
                .unwrap_or_else(|e| panic!("{who:?}: connect to {db}: {e}"));
            c.simple_query("SELECT 1").await.unwrap();
            clients.push(c);
        }
        let a = show(&mut w, who, "SHOW DATABASES").await;
        // PgBouncer 1.18's columns but current_connections (servers still opening).
        let cols = [
            "name",
            "host",
            "port",
            "database",
            "force_user",
            "pool_size",
            "min_pool_size",
            "reserve_pool",
            "pool_mode",
            "max_connections",
            "paused",
            "disabled",
        ];
        let values: Vec<Vec<Option<String>>> = cols.iter().map(|c| a.column(c)).collect();
        let rows: Vec<Vec<Option<String>>> = (0..a.rows.len())
            .filter(|&i| values[0][i].as_deref() != Some("pgbouncer"))
            .map(|i| values.iter().map(|v| v[i].clone()).collect())
            .collect();
        answers.push((a.first_column(), rows));
    }
    let (corral_answer, bouncer_answer) = (&answers[0], &answers[1]);
    assert_eq!(
        bouncer_answer.0,
        ["app", "pgbouncer", "postgres"],
        "PgBouncer's own"
    );
    assert_eq!(corral_answer, bouncer_answer, "pgcorral vs PgBouncer");
}

// ---------------------------------------------------------------------------------------------
// HELP, STATE, VERSION
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_help_is_a_notice() {
    let both = Both::start().await;
    for who in [Who::PgBouncer, Who::Pgcorral] {
        let mut w = both.console(who, "postgres").await;
        let a = ask(&mut w, who, "SHOW HELP").await;
        assert!(a.error.is_none(), "{who:?}: SHOW HELP: {:?}", a.error);
        assert!(
            a.notices.iter().any(|n| n.contains("SHOW")),
            "{who:?}: SHOW HELP sent no NOTICE mentioning SHOW: {a:?}"
        );
        assert!(a.tag.is_some(), "{who:?}: SHOW HELP: no CommandComplete");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_state_says_active_paused_suspended() {
    let pg = Postgres::start();
    let corral = Pooler::start(&config(&pg, "postgres", ADMIN)).await;
    let mut w = within(
        ANSWER,
        "console login",
        Wire::connect(corral.port(), "postgres", "pgbouncer"),
    )
    .await;
    let a = show(&mut w, Who::Pgcorral, "SHOW STATE").await;
    assert_eq!(
        a.columns.as_deref(),
        Some(&["key".to_string(), "value".to_string()][..]),
        "SHOW STATE columns"
    );
    let keys: BTreeSet<String> = a.first_column().into_iter().collect();
    let want: BTreeSet<String> = ["active", "paused", "suspended"].map(String::from).into();
    assert_eq!(keys, want, "SHOW STATE rows: {a:?}");
    for row in &a.rows {
        assert!(row[1].is_some(), "SHOW STATE: NULL value in {row:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_also_answers_to_database_pgcorral() {
    let pg = Postgres::start();
    let corral = Pooler::start(&config(&pg, "postgres", ADMIN)).await;
    let mut w = within(
        ANSWER,
        "console login",
        Wire::connect(corral.port(), "postgres", "pgcorral"),
    )
    .await;
    let a = show(&mut w, Who::Pgcorral, "SHOW VERSION").await;
    assert_eq!(a.rows.len(), 1, "SHOW VERSION: {a:?}");
}

// ---------------------------------------------------------------------------------------------
// Who may do what
// ---------------------------------------------------------------------------------------------

/// A stats user may SHOW but not PAUSE, and its session survives the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_users_may_show_but_not_pause() {
    let both = Both::start().await;
    for who in [Who::PgBouncer, Who::Pgcorral] {
        let mut w = both.console(who, "stats").await;
        let a = show(&mut w, who, "SHOW POOLS").await;
        assert!(
            !a.rows.is_empty(),
            "{who:?}: stats user's SHOW POOLS: {a:?}"
        );
        let a = ask(&mut w, who, "PAUSE").await;
        assert!(
            a.error.is_some(),
            "{who:?}: stats user's PAUSE succeeded: {a:?}"
        );
        let a = show(&mut w, who, "SHOW VERSION").await;
        assert_eq!(a.rows.len(), 1, "{who:?}: SHOW VERSION after PAUSE: {a:?}");
    }
}

/// Unknown commands are ErrorResponses, not disconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_commands_are_errors_that_keep_the_session() {
    let both = Both::start().await;
    for who in [Who::PgBouncer, Who::Pgcorral] {
        let mut w = both.console(who, "postgres").await;
        for sql in ["SHOW NONSENSE", "FROB"] {
            let a = ask(&mut w, who, sql).await;
            assert!(a.error.is_some(), "{who:?}: {sql} was not an error: {a:?}");
            let a = show(&mut w, who, "SHOW VERSION").await;
            assert_eq!(a.rows.len(), 1, "{who:?}: SHOW VERSION after {sql}: {a:?}");
        }
    }
}

/// A user in neither admin_users nor stats_users cannot log in to the console, though it may
/// use the databases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_users_are_refused_at_login() {
    let pg = Postgres::start();
    pg.create_user("app", "app-secret");
    let corral = Pooler::start(&config(&pg, "postgres", ADMIN)).await;
    let c = within(
        ANSWER,
        "login to postgres",
        connect(corral.port(), "app", None, "postgres"),
    )
    .await
    .unwrap_or_else(|e| panic!("app cannot use database postgres: {e}"));
    within(ANSWER, "SELECT 1", c.simple_query("SELECT 1"))
        .await
        .unwrap();
    for db in ["pgbouncer", "pgcorral"] {
        let r = within(
            ANSWER,
            "console login",
            connect(corral.port(), "app", None, db),
        )
        .await;
        assert!(r.is_err(), "user app logged in to the console as {db}");
    }
}

// ---------------------------------------------------------------------------------------------
// Extended protocol
// ---------------------------------------------------------------------------------------------

/// tokio-postgres sends Parse/Describe/Sync then Bind/Execute/Sync: the console answers with the
/// same columns as a simple query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_pools_through_the_extended_protocol() {
    let both = Both::start().await;
    let mut w = both.console(Who::Pgcorral, "postgres").await;
    let simple = show(&mut w, Who::Pgcorral, "SHOW POOLS").await;
    let c = within(
        ANSWER,
        "console login",
        connect(both.corral.port(), "postgres", None, "pgbouncer"),
    )
    .await
    .unwrap_or_else(|e| panic!("tokio-postgres console login: {e}"));
    let rows = within(ANSWER, "extended SHOW POOLS", c.query("SHOW POOLS", &[]))
        .await
        .unwrap_or_else(|e| panic!("extended SHOW POOLS: {e}"));
    assert!(!rows.is_empty(), "extended SHOW POOLS returned no rows");
    let columns: Vec<String> = rows[0]
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    assert_eq!(
        Some(columns),
        simple.columns,
        "extended and simple SHOW POOLS columns"
    );
    // The connection stays usable.
    let again = within(
        ANSWER,
        "extended SHOW VERSION",
        c.query("SHOW VERSION", &[]),
    )
    .await
    .unwrap_or_else(|e| panic!("extended SHOW VERSION: {e}"));
    assert_eq!(again.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// What pgcorral's numbers say (pgcorral only)
// ---------------------------------------------------------------------------------------------

/// The console's answer to `sql` as rows of (column name → value).
async fn rows_of(w: &mut Wire, sql: &str) -> Vec<std::collections::HashMap<String, String>> {
    let a = show(w, Who::Pgcorral, sql).await;
    let cols = a.columns.clone().unwrap();
    a.rows
        .iter()
        .map(|r| {
            cols.iter()
                .cloned()
                .zip(r.iter().map(|v| v.clone().unwrap_or_default()))
                .collect()
        })
        .collect()
}

fn num(row: &std::collections::HashMap<String, String>, col: &str) -> i64 {
    row.get(col)
        .unwrap_or_else(|| panic!("no {col} in {row:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{col} is not a number in {row:?}"))
}

/// A client with an application_name, through tokio-postgres.
async fn client_named(port: u16, name: &str) -> tokio_postgres::Client {
    let (c, conn) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(port)
        .user("postgres")
        .dbname("postgres")
        .application_name(name)
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect through pgcorral");
    tokio::spawn(conn);
    c
}

/// Transactions, queries and bytes a client ran show up in SHOW STATS_TOTALS, STATS and
/// TOTALS; with stats_period = 1 s, SHOW STATS_AVERAGES has per-second rates and times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_what_clients_ran() {
    let pg = Postgres::start();
    let p = Pooler::start(&config(
        &pg,
        "postgres",
        &format!("{ADMIN}\nstats_period = 1"),
    ))
    .await;
    let c = p.connect("postgres", None, "postgres").await;
    for _ in 0..10 {
        c.simple_query("SELECT pg_sleep(0.001)").await.unwrap();
    }
    c.batch_execute("BEGIN; SELECT 1; SELECT 2; COMMIT")
        .await
        .unwrap();
    c.simple_query("BEGIN").await.unwrap();
    c.simple_query("SELECT 1").await.unwrap();
    c.simple_query("COMMIT").await.unwrap();
    let mut w = Wire::connect(p.port(), "postgres", "pgbouncer").await;
    let rows = rows_of(&mut w, "SHOW STATS_TOTALS").await;
    let r = rows
        .iter()
        .find(|r| r["database"] == "postgres")
        .expect("a row for database postgres");
    // 10 queries, one multi-statement query, and a transaction of three requests.
    assert_eq!(num(r, "xact_count"), 12, "{r:?}");
    assert_eq!(num(r, "query_count"), 14, "{r:?}");
    assert!(num(r, "bytes_received") > 14 * 10, "{r:?}");
    assert!(num(r, "bytes_sent") > num(r, "bytes_received"), "{r:?}");
    assert!(num(r, "query_time") >= 10_000, "10 sleeps of 1 ms: {r:?}");
    assert!(num(r, "xact_time") >= num(r, "query_time"), "{r:?}");

    let stats = rows_of(&mut w, "SHOW STATS").await;
    let s = stats.iter().find(|r| r["database"] == "postgres").unwrap();
    assert_eq!(num(s, "total_xact_count"), 12);
    let totals = rows_of(&mut w, "SHOW TOTALS").await;
    let total = |name: &str| {
        totals
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| num(r, "value"))
            .unwrap_or_else(|| panic!("no {name} in {totals:?}"))
    };
    // The console's commands count too, as PgBouncer counts its admin pool's: SHOW
    // STATS_TOTALS, SHOW STATS and SHOW TOTALS itself.
    assert_eq!(total("total_xact_count"), 12 + 3);
    assert_eq!(total("total_query_count"), 14 + 3);

    // pgcorral's own: percentiles of query and wait times.
    let lat = rows_of(&mut w, "SHOW LATENCY").await;
    let l = lat
        .iter()
        .find(|r| r["database"] == "postgres" && r["user"] == "postgres")
        .unwrap_or_else(|| panic!("{lat:?}"));
    assert_eq!(num(l, "queries"), 14, "{l:?}");
    assert!(num(l, "query_p99_us") >= 1000, "10 of 14 slept 1 ms: {l:?}");
    assert!(num(l, "query_p50_us") >= 1000, "{l:?}");
    assert!(num(l, "query_p50_us") <= num(l, "query_p95_us"), "{l:?}");
    assert!(num(l, "waits") >= 12, "a checkout per transaction: {l:?}");

    // A period with traffic, then one more tick: its averages are shown.
    for _ in 0..20 {
        c.simple_query("SELECT 1").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let avg = rows_of(&mut w, "SHOW STATS_AVERAGES").await;
    let a = avg.iter().find(|r| r["database"] == "postgres").unwrap();
    assert!(num(a, "xact_count") > 0, "per second: {a:?}");
    assert!(num(a, "query_time") > 0, "microseconds per query: {a:?}");
}

/// With a pool of one server held by a transaction, SHOW POOLS counts the waiting client and
/// how long it has waited; SHOW CLIENTS shows which client holds the server (link) and which
/// waits; SHOW SERVERS shows the server's backend pid and its client; afterwards the server is
/// idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_and_servers_show_who_holds_what() {
    let pg = Postgres::start();
    let p = Pooler::start(&config(
        &pg,
        "postgres",
        &format!("{ADMIN}\ndefault_pool_size = 1"),
    ))
    .await;
    let a = client_named(p.port(), "alpha").await;
    let b = client_named(p.port(), "beta").await;
    a.simple_query("BEGIN").await.unwrap();
    let pid = backend_pid(&a).await;
    let waiting = tokio::spawn(async move {
        b.simple_query("SELECT 1").await.unwrap();
        b
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut w = Wire::connect(p.port(), "postgres", "pgbouncer").await;

    let pools = rows_of(&mut w, "SHOW POOLS").await;
    let pool = pools.iter().find(|r| r["database"] == "postgres").unwrap();
    assert_eq!(num(pool, "cl_waiting"), 1, "{pool:?}");
    assert_eq!(num(pool, "cl_active"), 1, "{pool:?}");
    assert_eq!(num(pool, "sv_active"), 1, "{pool:?}");
    assert!(
        num(pool, "maxwait") * 1_000_000 + num(pool, "maxwait_us") >= 200_000,
        "{pool:?}"
    );

    let clients = rows_of(&mut w, "SHOW CLIENTS").await;
    let by_name = |n: &str| {
        clients
            .iter()
            .find(|r| r["application_name"] == n)
            .unwrap_or_else(|| panic!("no client {n} in {clients:?}"))
            .clone()
    };
    let (ca, cb) = (by_name("alpha"), by_name("beta"));
    assert_eq!((ca["type"].as_str(), ca["state"].as_str()), ("C", "active"));
    assert_eq!(cb["state"], "waiting", "{cb:?}");
    assert!(
        num(&cb, "wait") * 1_000_000 + num(&cb, "wait_us") >= 200_000,
        "{cb:?}"
    );
    assert_eq!(cb["link"], "", "a waiting client holds no server");
    assert_eq!(ca["database"], "postgres");
    assert!(ca["connect_time"].ends_with(" UTC"), "{ca:?}");

    let servers = rows_of(&mut w, "SHOW SERVERS").await;
    assert_eq!(servers.len(), 1, "{servers:?}");
    let s = &servers[0];
    assert_eq!((s["type"].as_str(), s["state"].as_str()), ("S", "active"));
    assert_eq!(num(s, "remote_pid"), pid as i64, "{s:?}");
    assert_eq!(s["link"], ca["ptr"], "the server's client is alpha");
    assert_eq!(ca["link"], s["ptr"], "alpha's server");
    assert_eq!(num(s, "port"), pg.port as i64);

    a.simple_query("COMMIT").await.unwrap();
    let b = within(ANSWER, "the waiting client", waiting).await.unwrap();
    drop(b);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let servers = rows_of(&mut w, "SHOW SERVERS").await;
    assert_eq!(servers[0]["state"], "idle", "{servers:?}");
    assert_eq!(servers[0]["link"], "");
    let clients = rows_of(&mut w, "SHOW CLIENTS").await;
    assert!(
        clients.iter().all(|r| r["application_name"] != "beta"),
        "a client that left is not listed: {clients:?}"
    );
}
