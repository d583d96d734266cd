//! Writes across shards, against real PostgreSQL servers as shards: an UPDATE or DELETE that
//! names no one shard runs on every shard it may touch (row counts summed, RETURNING rows of
//! all), omnisharded tables and DDL reach every shard, all or nothing; and a commit across
//! shards is atomic when pgcorral dies between its phases (two-phase commit, finished by the
//! next pgcorral).

mod support;

use support::sharding::{config, keys_per_shard, shard_of_int, start};
use support::wire::{self, tags, Param, Wire};
use support::{db_message, poll_until, simple_rows, sqlstate, value, Pooler, PoolerProcess};
use tokio_postgres::SimpleQueryMessage;

use pgcorral::shard::key::KeyType;

const TABLES: &str = "CREATE TABLE accounts (aid int PRIMARY KEY, v int CHECK (v < 1000)); \
                      CREATE TABLE countries (id int PRIMARY KEY, name text); \
                      INSERT INTO countries VALUES (1, 'one')";
const SHARDED: &str =
    "sharded_tables = [{ name = \"accounts\", columns = [\"aid\"], types = [\"int4\"] }]\n\
                       omnisharded_tables = [\"countries\"]";

/// The row count of a simple query's (last) CommandComplete.
fn count(msgs: &[SimpleQueryMessage]) -> u64 {
    msgs.iter()
        .rev()
        .find_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .unwrap()
}

/// Every shard's answer to `sql`.
fn on_each(shards: &[support::Postgres], sql: &str) -> Vec<String> {
    shards.iter().map(|pg| pg.sql("postgres", sql)).collect()
}

/// Sum of `v` over every shard's accounts.
fn total(shards: &[support::Postgres]) -> i64 {
    on_each(shards, "SELECT coalesce(sum(v), 0) FROM accounts")
        .iter()
        .map(|s| s.parse::<i64>().unwrap())
        .sum()
}

fn prepared(shards: &[support::Postgres]) -> Vec<String> {
    on_each(shards, "SELECT count(*) FROM pg_prepared_xacts")
}

/// Three shards, a pgcorral over them and a client of it, with accounts 1 to 30 (`v` of each
/// key) inserted through it.
async fn thirty_accounts(
    v: fn(i64) -> i64,
) -> (Vec<support::Postgres>, Pooler, tokio_postgres::Client) {
    let shards = start(3, TABLES);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    let values: Vec<String> = (1..=30).map(|k| format!("({k}, {})", v(k))).collect();
    c.simple_query(&format!(
        "INSERT INTO accounts VALUES {}",
        values.join(", ")
    ))
    .await
    .unwrap();
    (shards, p, c)
}

/// Three shards and pgcorral over them, with accounts 1 to 60 (`v` = aid % 10) written.
async fn sixty_accounts() -> (Vec<support::Postgres>, Pooler, tokio_postgres::Client) {
    let shards = start(3, TABLES);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    let values: Vec<String> = (1..=60).map(|k| format!("({k}, {})", k % 10)).collect();
    c.simple_query(&format!(
        "INSERT INTO accounts VALUES {}",
        values.join(", ")
    ))
    .await
    .unwrap();
    (shards, p, c)
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_that_name_no_one_shard_run_on_every_shard_they_touch() {
    let (shards, _p, c) = sixty_accounts().await;
    assert!(keys_per_shard(&shards, "accounts", "aid")
        .iter()
        .all(|k| k.len() > 5));

    // Keyless: every shard; the count is the sum, RETURNING rows are all shards'.
    let m = c
        .simple_query("UPDATE accounts SET v = v + 100 WHERE v % 2 = 0")
        .await
        .unwrap();
    assert_eq!(count(&m), 30);
    let m = c
        .simple_query("DELETE FROM accounts WHERE v = 9 RETURNING aid")
        .await
        .unwrap();
    let mut gone: Vec<i64> = simple_rows(&m)
        .iter()
        .map(|r| r[0].parse().unwrap())
        .collect();
    gone.sort();
    assert_eq!(gone, vec![9, 19, 29, 39, 49, 59]);
    assert_eq!(count(&m), 6);
    // Keys on several shards: those shards.
    let (a, b) = (
        1i64,
        (2..60)
            .find(|k| shard_of_int(*k, KeyType::Int4, 3) != shard_of_int(1, KeyType::Int4, 3))
            .unwrap(),
    );
    let m = c
        .simple_query(&format!(
            "UPDATE accounts SET v = 500 WHERE aid IN ({a}, {b})"
        ))
        .await
        .unwrap();
    assert_eq!(count(&m), 2);
    assert_eq!(
        value(
            &c,
            &format!("SELECT count(*) FROM accounts WHERE v = 500 AND aid IN ({a}, {b})")
        )
        .await,
        "2"
    );

    // All or nothing: a CHECK that fails on one shard's rows leaves every shard as it was.
    let before = total(&shards);
    let e = c
        .simple_query("UPDATE accounts SET v = v + 600 WHERE v >= 100")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "23514", "{}", db_message(&e));
    assert_eq!(total(&shards), before);
    assert_eq!(prepared(&shards), ["0", "0", "0"]);

    // Omnisharded tables: every copy, answered once.
    let m = c
        .simple_query("INSERT INTO countries VALUES (2, 'two'), (3, 'three')")
        .await
        .unwrap();
    assert_eq!(count(&m), 2);
    assert_eq!(
        on_each(&shards, "SELECT count(*) FROM countries"),
        ["3", "3", "3"]
    );
    let m = c
        .simple_query("UPDATE countries SET name = upper(name) RETURNING id")
        .await
        .unwrap();
    assert_eq!(simple_rows(&m).len(), 3);
    assert_eq!(count(&m), 3);
    // Copies that differ are not written.
    shards[1].sql("postgres", "INSERT INTO countries VALUES (4, 'only here')");
    let e = c
        .simple_query("DELETE FROM countries WHERE id > 1")
        .await
        .unwrap_err();
    assert!(db_message(&e).contains("copies"), "{}", db_message(&e));
    assert_eq!(
        on_each(&shards, "SELECT count(*) FROM countries"),
        ["3", "4", "3"]
    );

    // DDL on a sharded table: every shard, at once.
    let m = c
        .simple_query("ALTER TABLE accounts ADD COLUMN note text DEFAULT 'n'")
        .await
        .unwrap();
    assert!(matches!(
        m.last(),
        Some(SimpleQueryMessage::CommandComplete(0))
    ));
    assert_eq!(
        on_each(&shards, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'accounts' AND column_name = 'note'"),
        ["1", "1", "1"]
    );
    // One that fails on one shard fails everywhere.
    shards[2].sql("postgres", "CREATE INDEX accounts_v ON accounts (v)");
    let e = c
        .simple_query("CREATE INDEX accounts_v ON accounts (v)")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42P07");
    assert_eq!(
        on_each(
            &shards,
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'accounts_v'"
        ),
        ["0", "0", "1"]
    );
    assert_eq!(prepared(&shards), ["0", "0", "0"]);
    // Still a working connection.
    assert_eq!(value(&c, "SELECT 40 + 2").await, "42");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_default_shard_takes_keyless_writes_but_ddl_and_copies_reach_every_shard() {
    let shards = start(2, TABLES);
    let p = Pooler::start(&config(
        &shards,
        "",
        &format!("{SHARDED}\ndefault_shard = 1"),
    ))
    .await;
    let c = p.connect("postgres", None, "app").await;
    for (i, pg) in shards.iter().enumerate() {
        pg.sql(
            "postgres",
            &format!("INSERT INTO accounts VALUES ({}, 1)", 100 + i),
        );
    }
    let m = c.simple_query("UPDATE accounts SET v = 2").await.unwrap();
    assert_eq!(count(&m), 1);
    assert_eq!(on_each(&shards, "SELECT v FROM accounts"), ["1", "2"]);
    c.simple_query("CREATE INDEX accounts_v2 ON accounts (v)")
        .await
        .unwrap();
    c.simple_query("INSERT INTO countries VALUES (9, 'nine')")
        .await
        .unwrap();
    assert_eq!(
        on_each(
            &shards,
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'accounts_v2'"
        ),
        ["1", "1"]
    );
    assert_eq!(
        on_each(&shards, "SELECT count(*) FROM countries"),
        ["2", "2"]
    );
}

#[test]
fn without_prepared_transactions_a_write_across_shards_is_refused_and_changes_nothing() {
    let shards: Vec<support::Postgres> = (0..2)
        .map(|_| {
            let pg = support::Postgres::start();
            pg.sql("postgres", TABLES);
            pg
        })
        .collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let p = Pooler::start(&config(&shards, "", SHARDED)).await;
        let c = p.connect("postgres", None, "app").await;
        for (i, pg) in shards.iter().enumerate() {
            pg.sql(
                "postgres",
                &format!("INSERT INTO accounts VALUES ({}, 1)", 100 + i),
            );
        }
        let e = c
            .simple_query("UPDATE accounts SET v = 2")
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&e), "55000", "{}", db_message(&e));
        assert!(db_message(&e).contains("prepared transactions are disabled"));
        assert_eq!(on_each(&shards, "SELECT v FROM accounts"), ["1", "1"]);
        assert_eq!(value(&c, "SELECT 40 + 2").await, "42");
    });
}

/// A new pgcorral on `toml`, once its first client of the database (which has it read the
/// shards' catalog) has had it finish every prepared transaction a dead one left.
fn restarted(toml: &str, shards: &[support::Postgres]) -> PoolerProcess {
    let again = PoolerProcess::start(toml);
    let out = support::psql_cmd(again.port, "postgres", "app", None)
        .args(["-Atc", "SELECT 1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    poll_until("the prepared transactions to be finished", 20, || {
        prepared(shards) == ["0", "0", "0"]
    });
    again
}

/// pgcorral dies (a test-only stop, debug builds) at `stop` of a commit across 3 shards; a new
/// pgcorral finishes what it left prepared: the UPDATE is on every shard (`committed`) or on
/// none, and no shard keeps a prepared transaction.
fn dies_between_the_phases(stop: &str, committed: bool) {
    let shards = start(3, TABLES);
    for pg in &shards {
        pg.sql(
            "postgres",
            "INSERT INTO accounts SELECT g, 1 FROM generate_series(1, 30) g",
        );
    }
    // Each shard holds its own keys only for the count to mean something: keep the keys whose
    // shard this is.
    for (i, pg) in shards.iter().enumerate() {
        let theirs: Vec<String> = (1..=30)
            .filter(|k| shard_of_int(*k, KeyType::Int4, 3) != i)
            .map(|k| k.to_string())
            .collect();
        pg.sql(
            "postgres",
            &format!("DELETE FROM accounts WHERE aid IN ({})", theirs.join(", ")),
        );
    }
    let toml = config(&shards, "", SHARDED);
    let dying = PoolerProcess::start_env(&toml, &[("PGCORRAL_TEST_STOP_2PC", stop)]);
    let out = support::psql_cmd(dying.port, "postgres", "app", None)
        .args(["-Atc", "UPDATE accounts SET v = 7"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the commit was to be stopped at {stop}"
    );
    drop(dying);
    let left: i64 = prepared(&shards)
        .iter()
        .map(|n| n.parse::<i64>().unwrap())
        .sum();
    assert_eq!(
        left, 2,
        "the two shards other than the coordinator were prepared"
    );
    let again = restarted(&toml, &shards);
    let want = if committed { "7" } else { "1" };
    assert_eq!(
        on_each(
            &shards,
            "SELECT string_agg(DISTINCT v::text, ',') FROM accounts"
        ),
        [want, want, want]
    );
    assert!(
        again.log().contains("finished a prepared transaction"),
        "{}",
        again.log()
    );
}

#[test]
fn a_client_transaction_across_shards_killed_after_its_decision_is_finished_everywhere() {
    let shards = start(3, TABLES);
    let toml = config(&shards, "", SHARDED);
    let on = |k: i64| shard_of_int(k, KeyType::Int4, 3);
    let b = (2..30).find(|k| on(*k) != on(1)).unwrap();
    for pg in &shards {
        pg.sql(
            "postgres",
            &format!("INSERT INTO accounts VALUES (1, 1), ({b}, 1)"),
        );
    }
    let mut dying = PoolerProcess::start_env(&toml, &[("PGCORRAL_TEST_STOP_2PC", "decided")]);
    let script = format!(
        "BEGIN;\nUPDATE accounts SET v = 9 WHERE aid = 1;\nUPDATE accounts SET v = 9 WHERE aid = {b};\nCOMMIT;\n"
    );
    // psql sends each statement of its input as a Query of its own.
    let mut psql = support::psql_cmd(dying.port, "postgres", "app", None)
        .args(["-At", "-v", "ON_ERROR_STOP=1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        psql.stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
    }
    // The client may or may not see its COMMIT's answer before pgcorral stops: the current
    // shard committed either way, and the others were prepared.
    let _ = psql.wait_with_output().unwrap();
    poll_until("pgcorral to stop after the decision", 10, || {
        matches!(dying.child.try_wait(), Ok(Some(_)))
    });
    drop(dying);
    let _again = restarted(&toml, &shards);
    assert_eq!(
        shards[on(1)].sql("postgres", "SELECT v FROM accounts WHERE aid = 1"),
        "9"
    );
    assert_eq!(
        shards[on(b)].sql(
            "postgres",
            &format!("SELECT v FROM accounts WHERE aid = {b}")
        ),
        "9"
    );
}

#[test]
fn killed_after_prepare_a_commit_across_shards_is_rolled_back_everywhere() {
    dies_between_the_phases("prepared", false);
}

#[test]
fn killed_after_the_decision_a_commit_across_shards_is_finished_everywhere() {
    dies_between_the_phases("decided", true);
}

#[tokio::test(flavor = "multi_thread")]
async fn unique_ids_from_two_pgcorrals_never_collide_and_route_their_rows() {
    let shards = start(3, "CREATE TABLE events (id int8 PRIMARY KEY, n int)");
    let sharded =
        "sharded_tables = [{ name = \"events\", columns = [\"id\"], types = [\"int8\"] }]";
    let a = Pooler::start(&config(&shards, "peer_id = 1", sharded)).await;
    let b = Pooler::start(&config(&shards, "peer_id = 2", sharded)).await;
    let mut tasks = Vec::new();
    for (i, p) in [&a, &b].into_iter().cycle().take(8).enumerate() {
        let c = p.connect("postgres", None, "app").await;
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for n in 0..200 {
                let id: i64 = value(&c, "SELECT pgcorral.unique_id()")
                    .await
                    .parse()
                    .unwrap();
                if n % 20 == 0 {
                    c.simple_query(&format!("INSERT INTO events VALUES ({id}, {i})"))
                        .await
                        .unwrap();
                }
                ids.push(id);
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let n = all.len();
    assert!(all.iter().all(|id| *id > 0));
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "every id is unique");
    // The rows inserted by those ids are on the shards their ids hash to.
    support::sharding::assert_placed(&shards, "events", "id", "int8");
    let rows: i64 = on_each(&shards, "SELECT count(*) FROM events")
        .iter()
        .map(|c| c.parse::<i64>().unwrap())
        .sum();
    assert_eq!(rows, 80);
    // One row, `SELECT 1`, its column named as the function.
    let c = a.connect("postgres", None, "app").await;
    let m = c.simple_query("SELECT pgcorral.unique_id()").await.unwrap();
    assert_eq!(count(&m), 1);
    match &m[..] {
        [SimpleQueryMessage::RowDescription(d), SimpleQueryMessage::Row(_), SimpleQueryMessage::CommandComplete(1)] =>
        {
            assert_eq!(d[0].name(), "unique_id")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_of_the_key_moves_rows_to_their_new_shards_atomically() {
    let (shards, _p, c) = thirty_accounts(|k| k).await;
    let placed = || support::sharding::assert_placed(&shards, "accounts", "aid", "int4");
    let keys = || -> Vec<i64> {
        let mut all: Vec<i64> = keys_per_shard(&shards, "accounts", "aid").concat();
        all.sort();
        all
    };

    // No key in WHERE: every shard's rows, each to the shard of its new key.
    let m = c
        .simple_query("UPDATE accounts SET aid = aid + 1000, v = v + 1 WHERE aid <= 10")
        .await
        .unwrap();
    assert_eq!(count(&m), 10);
    placed();
    let want: Vec<i64> = (11..=30).chain(1001..=1010).collect();
    assert_eq!(keys(), want);
    assert_eq!(
        value(&c, "SELECT v FROM accounts WHERE aid = 1004").await,
        "5"
    );
    // A key in WHERE: from its shard.
    let m = c
        .simple_query("UPDATE accounts SET aid = 4 WHERE aid = 1004")
        .await
        .unwrap();
    assert_eq!(count(&m), 1);
    placed();
    assert_eq!(value(&c, "SELECT v FROM accounts WHERE aid = 4").await, "5");
    // A move that fails where the row lands (its key is taken there) changes nothing.
    let before = on_each(
        &shards,
        "SELECT string_agg(aid || ':' || v, ',' ORDER BY aid) FROM accounts",
    );
    let e = c
        .simple_query("UPDATE accounts SET aid = 20 WHERE aid = 1008")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "23505", "{}", db_message(&e));
    assert_eq!(
        on_each(
            &shards,
            "SELECT string_agg(aid || ':' || v, ',' ORDER BY aid) FROM accounts"
        ),
        before
    );
    assert_eq!(prepared(&shards), ["0", "0", "0"]);
    // RETURNING: the client's columns of each changed row, moved or not, as one server
    // returns them.
    let m = c
        .simple_query("UPDATE accounts SET aid = aid - 1000 WHERE aid IN (1003, 1005) RETURNING v, aid * 10 AS ten")
        .await
        .unwrap();
    let mut rows = simple_rows(&m);
    rows.sort();
    assert_eq!(rows, [["4", "30"], ["6", "50"]]);
    assert_eq!(count(&m), 2);
    placed();
    // Through the extended protocol too: the client's columns in its formats (tokio-postgres
    // asks every column in binary), `*` among them.
    let rows = c
        .query(
            "UPDATE accounts SET aid = $1 WHERE aid = $2 RETURNING aid, *, v + 1 AS next",
            &[&6i32, &1006i32],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    let names: Vec<&str> = rows[0].columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["aid", "aid", "v", "next"]);
    let got: Vec<i32> = (0..4).map(|i| rows[0].get(i)).collect();
    assert_eq!(got, [6, 6, 7, 8]);
    placed();
    assert_eq!(
        value(&c, "SELECT count(*) FROM accounts WHERE aid = 1006").await,
        "0"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_of_the_key_through_the_extended_protocol_moves_rows_too() {
    let (shards, p, mut c) = thirty_accounts(|k| k).await;
    let placed = || support::sharding::assert_placed(&shards, "accounts", "aid", "int4");
    // tokio-postgres: Parse and Describe, then Bind (binary values) and Execute.
    let n = c
        .execute(
            "UPDATE accounts SET aid = aid + $1 WHERE aid <= $2",
            &[&1000i32, &10i32],
        )
        .await
        .unwrap();
    assert_eq!(n, 10);
    placed();
    let n = c
        .execute(
            "UPDATE accounts SET aid = $1, v = v + 1 WHERE aid = $2",
            &[&4i32, &1004i32],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    placed();
    assert_eq!(value(&c, "SELECT v FROM accounts WHERE aid = 4").await, "5");
    // A clash where the row lands: PostgreSQL's error, nothing changed.
    let before = total(&shards);
    let e = c
        .execute(
            "UPDATE accounts SET aid = $1 WHERE aid = $2",
            &[&20i32, &1008i32],
        )
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "23505", "{}", db_message(&e));
    assert_eq!(total(&shards), before);
    assert_eq!(
        value(&c, "SELECT count(*) FROM accounts WHERE aid = 1008").await,
        "1"
    );
    // Inside a driver's transaction, undone by its ROLLBACK.
    let t = c.transaction().await.unwrap();
    let n = t
        .execute(
            "UPDATE accounts SET aid = aid + $1 WHERE aid > $2",
            &[&500i32, &1000i32],
        )
        .await
        .unwrap();
    assert_eq!(n, 9);
    t.rollback().await.unwrap();
    assert_eq!(
        value(&c, "SELECT count(*) FROM accounts WHERE aid > 1000").await,
        "9"
    );
    assert_eq!(prepared(&shards), ["0", "0", "0"]);
    // What the client sees is one server's answer to an UPDATE: no rows, no row description.
    let mut w = Wire::connect(p.addr.port(), "postgres", "app").await;
    w.send_all(&[
        wire::parse("", "UPDATE accounts SET aid = $1 WHERE aid = $2", &[]),
        wire::describe(b'S', ""),
        wire::bind("", "", &[Param::Text("9"), Param::Text("1009")], false),
        wire::describe(b'P', ""),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    let m = w.until_ready().await;
    assert_eq!(tags(&m), "1tn2nCZ", "{m:?}");
    assert_eq!(m[5].text(), "UPDATE 1");
    placed();
    assert_eq!(
        value(&c, "SELECT count(*) FROM accounts WHERE aid = 9").await,
        "1"
    );
    // With RETURNING: the statement's and the portal's description are the client's columns,
    // its rows those columns of each changed row, as one server answers.
    w.send_all(&[
        wire::parse(
            "",
            "UPDATE accounts SET aid = $1, v = v + 1 WHERE aid = $2 RETURNING v, aid * 10 AS ten",
            &[],
        ),
        wire::describe(b'S', ""),
        wire::bind("", "", &[Param::Text("1009"), Param::Text("9")], false),
        wire::describe(b'P', ""),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    let m = w.until_ready().await;
    assert_eq!(tags(&m), "1tT2TDCZ", "{m:?}");
    for d in [&m[2], &m[4]] {
        assert_eq!(&d.body[..2], &[0, 2], "two columns: {d:?}");
    }
    assert_eq!(
        m[5].row(),
        [Some("10".to_string()), Some("10090".to_string())]
    );
    assert_eq!(m[6].text(), "UPDATE 1");
    placed();
    assert_eq!(
        value(&c, "SELECT v FROM accounts WHERE aid = 1009").await,
        "10"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_spreads_to_the_shards_its_statements_need_and_commits_atomically() {
    let (shards, _p, mut c) = thirty_accounts(|_| 0).await;
    let on = |k: i64| shard_of_int(k, KeyType::Int4, 3);
    let a = 1i64;
    let b = (2..30).find(|k| on(*k) != on(a)).unwrap();
    let d = (2..30)
        .find(|k| on(*k) != on(a) && on(*k) != on(b))
        .unwrap();
    let v = |k: i64| format!("SELECT v FROM accounts WHERE aid = {k}");

    // Simple queries: three shards, back to the first, committed on all.
    c.simple_query("BEGIN").await.unwrap();
    for k in [a, b, d] {
        c.simple_query(&format!("UPDATE accounts SET v = 1 WHERE aid = {k}"))
            .await
            .unwrap();
    }
    assert_eq!(
        value(&c, &v(a)).await,
        "1",
        "its own writes, back on the first shard"
    );
    let m = c.simple_query("COMMIT").await.unwrap();
    assert!(matches!(m[..], [SimpleQueryMessage::CommandComplete(0)]));
    for k in [a, b, d] {
        assert_eq!(value(&c, &v(k)).await, "1");
    }
    assert_eq!(prepared(&shards), ["0", "0", "0"]);

    // ROLLBACK undoes every shard's part.
    c.simple_query("BEGIN").await.unwrap();
    c.simple_query(&format!("UPDATE accounts SET v = 2 WHERE aid = {a}"))
        .await
        .unwrap();
    c.simple_query(&format!("UPDATE accounts SET v = 2 WHERE aid = {b}"))
        .await
        .unwrap();
    c.simple_query("ROLLBACK").await.unwrap();
    assert_eq!(value(&c, &v(a)).await, "1");
    assert_eq!(value(&c, &v(b)).await, "1");

    // An error on one shard fails the whole transaction, wherever its next statement goes;
    // COMMIT rolls back everywhere, as PostgreSQL's does.
    c.simple_query("BEGIN").await.unwrap();
    c.simple_query(&format!("UPDATE accounts SET v = 3 WHERE aid = {a}"))
        .await
        .unwrap();
    let e = c
        .simple_query(&format!("UPDATE accounts SET v = 5000 WHERE aid = {b}"))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "23514");
    let e = c
        .simple_query(&format!("UPDATE accounts SET v = 3 WHERE aid = {d}"))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "25P02");
    c.simple_query("COMMIT").await.unwrap();
    assert_eq!(value(&c, &v(a)).await, "1");

    // No savepoints across shards.
    c.simple_query("BEGIN").await.unwrap();
    c.simple_query(&format!("UPDATE accounts SET v = 4 WHERE aid = {a}"))
        .await
        .unwrap();
    c.simple_query("SAVEPOINT s").await.unwrap();
    let e = c
        .simple_query(&format!("UPDATE accounts SET v = 4 WHERE aid = {b}"))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "0A000");
    assert!(db_message(&e).contains("savepoint"), "{}", db_message(&e));
    c.simple_query("ROLLBACK").await.unwrap();

    // A driver's transaction with parameters (tokio-postgres: BEGIN, then Parse/Bind/Execute).
    let t = c.transaction().await.unwrap();
    for k in [a, b, d] {
        t.execute(
            "UPDATE accounts SET v = $2 WHERE aid = $1",
            &[&(k as i32), &7i32],
        )
        .await
        .unwrap();
    }
    let got: i32 = t
        .query_one("SELECT v FROM accounts WHERE aid = $1", &[&(b as i32)])
        .await
        .unwrap()
        .get(0);
    assert_eq!(got, 7);
    t.commit().await.unwrap();
    for k in [a, b, d] {
        assert_eq!(value(&c, &v(k)).await, "7");
    }
    assert_eq!(prepared(&shards), ["0", "0", "0"]);
    assert_eq!(value(&c, "SELECT 40 + 2").await, "42");
}

/// psycopg's and asyncpg's executemany of 1,000 rows on 3 shards, read back across shards by
/// both drivers (tests/drivers/sharded_many.py).
#[tokio::test(flavor = "multi_thread")]
async fn executemany_of_psycopg_and_asyncpg_puts_every_row_on_its_shard() {
    let shards = start(3, "CREATE TABLE accounts (aid int PRIMARY KEY, v text)");
    let sharded =
        "sharded_tables = [{ name = \"accounts\", columns = [\"aid\"], types = [\"int4\"] }]";
    let p = Pooler::start(&config(&shards, "", sharded)).await;
    let py = std::env::var("PGCORRAL_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let cases = std::env::var("PGCORRAL_MANY_CASES").unwrap_or_else(|_| {
        "psycopg_autocommit,psycopg_transaction,asyncpg,asyncpg_transaction,keyless,failing,failing_transaction,reads"
            .into()
    });
    let mut c = std::process::Command::new(&py);
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/drivers"))
        .arg("sharded_many.py")
        .args([
            "--port",
            &p.port().to_string(),
            "--rows",
            "1000",
            "--cases",
            &cases,
        ])
        .stdin(std::process::Stdio::null());
    let out = support::run_cmd(c).await;
    assert!(
        out.status.success(),
        "sharded_many.py failed\n{}\n{}",
        support::stdout(&out),
        support::stderr(&out)
    );
    support::sharding::assert_placed(&shards, "accounts", "aid", "int4");
    let rows: i64 = on_each(&shards, "SELECT count(*) FROM accounts")
        .iter()
        .map(|n| n.parse::<i64>().unwrap())
        .sum();
    assert_eq!(
        rows as usize,
        1000 * cases
            .split(',')
            .filter(|c| !c.starts_with("failing") && *c != "reads" && *c != "keyless")
            .count()
    );
    assert!(on_each(&shards, "SELECT count(*) FROM accounts")
        .iter()
        .all(|n| n != "0"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_insert_of_rows_on_several_shards_is_split_inside_a_transaction_too() {
    let shards = start(3, TABLES);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    let rows = |from: i64| -> String {
        let v: Vec<String> = (from..from + 30).map(|k| format!("({k}, 1)")).collect();
        format!("INSERT INTO accounts VALUES {}", v.join(", "))
    };
    let total = || -> i64 {
        on_each(&shards, "SELECT count(*) FROM accounts")
            .iter()
            .map(|n| n.parse::<i64>().unwrap())
            .sum()
    };
    // The first statement of a transaction, then another, then COMMIT: all kept.
    c.simple_query("BEGIN").await.unwrap();
    let m = c.simple_query(&rows(1)).await.unwrap();
    assert_eq!(count(&m), 30);
    let m = c.simple_query(&rows(101)).await.unwrap();
    assert_eq!(count(&m), 30);
    assert_eq!(
        value(&c, "SELECT v FROM accounts WHERE aid = 105").await,
        "1"
    );
    c.simple_query("COMMIT").await.unwrap();
    assert_eq!(total(), 60);
    support::sharding::assert_placed(&shards, "accounts", "aid", "int4");
    // ROLLBACK: none kept.
    c.simple_query("BEGIN").await.unwrap();
    c.simple_query("UPDATE accounts SET v = 2 WHERE aid = 1")
        .await
        .unwrap();
    c.simple_query(&rows(201)).await.unwrap();
    c.simple_query("ROLLBACK").await.unwrap();
    assert_eq!(total(), 60);
    assert_eq!(value(&c, "SELECT v FROM accounts WHERE aid = 1").await, "1");
    // A failing split INSERT fails the transaction everywhere.
    c.simple_query("BEGIN").await.unwrap();
    c.simple_query(&rows(301)).await.unwrap();
    let e = c.simple_query(&rows(1)).await.unwrap_err();
    assert_eq!(sqlstate(&e), "23505");
    let e = c
        .simple_query("UPDATE accounts SET v = 3 WHERE aid = 2")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "25P02");
    c.simple_query("COMMIT").await.unwrap();
    assert_eq!(total(), 60);
    assert_eq!(prepared(&shards), ["0", "0", "0"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_s_own_prepare_transaction_spans_the_shards_of_its_transaction() {
    let shards = start(3, TABLES);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    let on = |k: i64| shard_of_int(k, KeyType::Int4, 3);
    let b = (2..30).find(|k| on(*k) != on(1)).unwrap();
    c.simple_query(&format!("INSERT INTO accounts VALUES (1, 0), ({b}, 0)"))
        .await
        .unwrap();
    let v = |k: i64| format!("SELECT v FROM accounts WHERE aid = {k}");
    for (gid, finish, want) in [("g1", "COMMIT", "1"), ("g2", "ROLLBACK", "1")] {
        c.simple_query("BEGIN").await.unwrap();
        for k in [1, b] {
            c.simple_query(&format!("UPDATE accounts SET v = v + 1 WHERE aid = {k}"))
                .await
                .unwrap();
        }
        c.simple_query(&format!("PREPARE TRANSACTION '{gid}'"))
            .await
            .unwrap();
        let held: Vec<String> = on_each(&shards, "SELECT count(*) FROM pg_prepared_xacts");
        assert_eq!(held.iter().filter(|n| *n == "1").count(), 2, "{held:?}");
        // Finished by another client, on both shards at once.
        let other = p.connect("postgres", None, "app").await;
        let m = other
            .simple_query(&format!("{finish} PREPARED '{gid}'"))
            .await
            .unwrap();
        assert!(matches!(m[..], [SimpleQueryMessage::CommandComplete(0)]));
        assert_eq!(prepared(&shards), ["0", "0", "0"]);
        assert_eq!(value(&c, &v(1)).await, want);
        assert_eq!(value(&c, &v(b)).await, want);
    }
    // Prepared through one pgcorral, finished through another that never saw it: it finds
    // the gid on both shards.
    c.simple_query("BEGIN").await.unwrap();
    for k in [1, b] {
        c.simple_query(&format!("UPDATE accounts SET v = 5 WHERE aid = {k}"))
            .await
            .unwrap();
    }
    c.simple_query("PREPARE TRANSACTION 'g3'").await.unwrap();
    let q = Pooler::start(&config(&shards, "", SHARDED)).await;
    let other = q.connect("postgres", None, "app").await;
    other.simple_query("COMMIT PREPARED 'g3'").await.unwrap();
    assert_eq!(prepared(&shards), ["0", "0", "0"]);
    assert_eq!(value(&c, &v(b)).await, "5");
    // A gid no shard holds: PostgreSQL's own error.
    let e = other
        .simple_query("COMMIT PREPARED 'nowhere'")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42704");
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_across_shards_inside_a_transaction_spread_it_and_commit_with_it() {
    let (shards, _p, c) = thirty_accounts(|_| 0).await;
    let sum = || total(&shards);
    // Keyless, keys on several shards, an omnisharded table, a key moved: all in one
    // transaction, committed together.
    c.simple_query("BEGIN").await.unwrap();
    let m = c
        .simple_query("UPDATE accounts SET v = v + 1")
        .await
        .unwrap();
    assert_eq!(count(&m), 30);
    assert_eq!(value(&c, "SELECT v FROM accounts WHERE aid = 7").await, "1");
    let m = c
        .simple_query("UPDATE accounts SET v = v + 1 WHERE aid IN (1, 2, 3)")
        .await
        .unwrap();
    assert_eq!(count(&m), 3);
    c.simple_query("INSERT INTO countries VALUES (2, 'two')")
        .await
        .unwrap();
    let m = c
        .simple_query("UPDATE accounts SET aid = aid + 1000 WHERE aid = 5")
        .await
        .unwrap();
    assert_eq!(count(&m), 1);
    assert_eq!(sum(), 0, "nothing is visible outside before COMMIT");
    c.simple_query("COMMIT").await.unwrap();
    assert_eq!(sum(), 33);
    assert_eq!(
        on_each(&shards, "SELECT count(*) FROM countries"),
        ["2", "2", "2"]
    );
    support::sharding::assert_placed(&shards, "accounts", "aid", "int4");
    assert_eq!(prepared(&shards), ["0", "0", "0"]);

    // ROLLBACK undoes them; a write as a transaction's first statement begins it everywhere.
    c.simple_query("BEGIN").await.unwrap();
    c.simple_query("DELETE FROM accounts WHERE v >= 0")
        .await
        .unwrap();
    c.simple_query("ROLLBACK").await.unwrap();
    assert_eq!(sum(), 33);

    // A read across shards inside a transaction sees its writes; one pgcorral cannot merge
    // is refused, and fails it.
    let v1: i64 = value(&c, "SELECT v FROM accounts WHERE aid = 1")
        .await
        .parse()
        .unwrap();
    c.simple_query("BEGIN").await.unwrap();
    c.simple_query("UPDATE accounts SET v = 0 WHERE aid = 1")
        .await
        .unwrap();
    let inside: i64 = value(&c, "SELECT sum(v) FROM accounts")
        .await
        .parse()
        .unwrap();
    assert_eq!(inside, 33 - v1);
    let e = c
        .simple_query("SELECT * FROM accounts a JOIN accounts b ON a.v = b.v")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "0A000");
    let e = c
        .simple_query("UPDATE accounts SET v = 0 WHERE aid = 2")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "25P02");
    c.simple_query("ROLLBACK").await.unwrap();
    assert_eq!(sum(), 33);
    assert_eq!(value(&c, "SELECT count(*) FROM accounts").await, "30");
}

/// `COPY ... FROM STDIN` of `rows` through `c` (a client or its transaction).
async fn copy_rows(
    c: &impl tokio_postgres::GenericClient,
    rows: std::ops::RangeInclusive<i64>,
) -> Result<u64, tokio_postgres::Error> {
    use futures_util::SinkExt;
    let data: Vec<u8> = rows
        .flat_map(|k| format!("{k}\t1\n").into_bytes())
        .collect();
    let sink = c
        .client()
        .copy_in::<_, bytes::Bytes>("COPY accounts FROM STDIN")
        .await?;
    futures_util::pin_mut!(sink);
    sink.send(bytes::Bytes::from(data)).await?;
    sink.finish().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_into_a_sharded_table_is_split_inside_a_transaction_too() {
    let shards = start(3, TABLES);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let mut c = p.connect("postgres", None, "app").await;
    let rows = || -> i64 {
        on_each(&shards, "SELECT count(*) FROM accounts")
            .iter()
            .map(|n| n.parse::<i64>().unwrap())
            .sum()
    };
    // The first statement of a transaction, then an UPDATE of one of its rows, then COMMIT.
    let t = c.transaction().await.unwrap();
    assert_eq!(copy_rows(&t, 1..=300).await.unwrap(), 300);
    t.execute("UPDATE accounts SET v = 2 WHERE aid = 7", &[])
        .await
        .unwrap();
    assert_eq!(rows(), 0, "nothing visible before COMMIT");
    t.commit().await.unwrap();
    assert_eq!(rows(), 300);
    support::sharding::assert_placed(&shards, "accounts", "aid", "int4");
    assert_eq!(value(&c, "SELECT v FROM accounts WHERE aid = 7").await, "2");
    // After another statement, then ROLLBACK: none kept.
    let t = c.transaction().await.unwrap();
    t.execute("UPDATE accounts SET v = 3 WHERE aid = 8", &[])
        .await
        .unwrap();
    assert_eq!(copy_rows(&t, 301..=400).await.unwrap(), 100);
    t.rollback().await.unwrap();
    assert_eq!(rows(), 300);
    // A COPY that fails (a duplicate key) fails the transaction everywhere.
    let t = c.transaction().await.unwrap();
    assert_eq!(copy_rows(&t, 401..=450).await.unwrap(), 50);
    let e = copy_rows(&t, 1..=10).await.unwrap_err();
    assert_eq!(sqlstate(&e), "23505", "{}", db_message(&e));
    let e = t
        .execute("UPDATE accounts SET v = 4 WHERE aid = 9", &[])
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "25P02");
    drop(t);
    assert_eq!(
        value(&c, "SELECT count(*) FROM accounts WHERE aid > 400").await,
        "0"
    );
    assert_eq!(rows(), 300);
    assert_eq!(prepared(&shards), ["0", "0", "0"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_across_shards_through_the_extended_protocol_answer_as_one_server_would() {
    let (shards, _p, mut c) = sixty_accounts().await;
    // tokio-postgres: Parse and Describe first, then Bind/Execute with the values (binary).
    let n = c
        .execute(
            "UPDATE accounts SET v = v + $1 WHERE v % 2 = $2",
            &[&100i32, &0i32],
        )
        .await
        .unwrap();
    assert_eq!(n, 30);
    let mut gone: Vec<i32> = c
        .query("DELETE FROM accounts WHERE v = $1 RETURNING aid", &[&9i32])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    gone.sort();
    assert_eq!(gone, [9, 19, 29, 39, 49, 59]);
    // Keys on several shards (an array of keys).
    let n = c
        .execute(
            "UPDATE accounts SET v = 500 WHERE aid = ANY($1)",
            &[&vec![1i32, 2, 3, 4]],
        )
        .await
        .unwrap();
    assert_eq!(n, 4);
    // All or nothing: a CHECK failing on one shard's rows leaves every shard as it was.
    let before = total(&shards);
    let e = c
        .execute("UPDATE accounts SET v = v + $1 WHERE v >= 100", &[&600i32])
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "23514", "{}", db_message(&e));
    assert_eq!(total(&shards), before);
    // An omnisharded table: every copy, answered once.
    let n = c
        .execute("INSERT INTO countries VALUES ($1, $2)", &[&7i32, &"seven"])
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        on_each(&shards, "SELECT count(*) FROM countries WHERE id = 7"),
        ["1", "1", "1"]
    );
    // Inside a driver's transaction: it spreads, and its ROLLBACK undoes every shard.
    let t = c.transaction().await.unwrap();
    let n = t
        .execute("UPDATE accounts SET v = $1 WHERE v < $2", &[&0i32, &100i32])
        .await
        .unwrap();
    assert!(n > 0);
    let left: i64 = t
        .query_one("SELECT count(*) FROM accounts WHERE v = $1", &[&0i32])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, i64::try_from(n).unwrap());
    t.rollback().await.unwrap();
    assert_eq!(total(&shards), before);
    assert_eq!(prepared(&shards), ["0", "0", "0"]);
    // An error while it runs: the shards' error, nothing changed.
    let e = c
        .execute("UPDATE accounts SET v = v / $1 WHERE v >= 0", &[&0i32])
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22012", "{}", db_message(&e));
    assert_eq!(total(&shards), before);
    assert_eq!(value(&c, "SELECT count(*) FROM accounts").await, "54");
}
