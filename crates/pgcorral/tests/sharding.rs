//! Sharding end to end, against real PostgreSQL servers as shards: rows written through
//! pgcorral land on the shard PostgreSQL's hash partitioning chooses (checked on each shard
//! with `satisfies_hash_partition`), reads by key find them, PgCat's and PgDog's commands and
//! comments choose shards, transactions stay on one shard, and requests that name no shard are
//! asked of every shard (reads), refused, or go to the default shard, never guessed.

mod support;

use support::sharding::{assert_placed, config, keys_per_shard, shard_of_int, start};
use support::{db_message, simple_rows, sqlstate, value, Pooler};
use tokio_postgres::SimpleQueryMessage;

use pgcorral::shard::key::KeyType;

const ACCOUNTS: &str = "CREATE TABLE accounts (aid int PRIMARY KEY, v text); \
                        CREATE TABLE countries (id int PRIMARY KEY, name text); \
                        INSERT INTO countries VALUES (1, 'one')";

const SHARDED: &str =
    "sharded_tables = [{ name = \"accounts\", columns = [\"aid\"], types = [\"int4\"] }]\n\
                       omnisharded_tables = [\"countries\"]";

/// The rows a simple query returned, as text.
async fn rows(c: &tokio_postgres::Client, sql: &str) -> Vec<Vec<String>> {
    simple_rows(&c.simple_query(sql).await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn rows_land_on_the_shard_postgresql_hash_partitioning_chooses() {
    let shards = start(3, ACCOUNTS);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    // Constants in simple queries, parameters in extended ones, several rows per INSERT
    // when they share a shard.
    for aid in 1..=150 {
        c.simple_query(&format!(
            "INSERT INTO accounts (aid, v) VALUES ({aid}, 'v{aid}')"
        ))
        .await
        .unwrap();
    }
    for aid in 151..=300i32 {
        c.execute(
            "INSERT INTO accounts (v, aid) VALUES ($2, $1)",
            &[&aid, &format!("v{aid}")],
        )
        .await
        .unwrap();
    }
    let held = keys_per_shard(&shards, "accounts", "aid");
    for (i, keys) in held.iter().enumerate() {
        assert!(!keys.is_empty(), "shard {i} got no rows");
        for k in keys {
            assert_eq!(
                shard_of_int(*k, KeyType::Int4, 3),
                i,
                "key {k} on shard {i}"
            );
        }
    }
    assert_eq!(held.iter().map(Vec::len).sum::<usize>(), 300);
    assert!(shards
        .iter()
        .all(|pg| pg.sql("postgres", "SELECT count(*) FROM accounts WHERE aid > 1000") == "0"));
    assert_placed(&shards, "accounts", "aid", "int4");
    // Every row is found by its key, in both protocols, and IN lists on one shard work.
    for aid in (1..=300i32).step_by(7) {
        assert_eq!(
            value(&c, &format!("SELECT v FROM accounts WHERE aid = {aid}")).await,
            format!("v{aid}")
        );
        let row = c
            .query_one("SELECT v FROM accounts WHERE aid = $1", &[&aid])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), format!("v{aid}"));
    }
    let same: Vec<i64> = (1..300)
        .filter(|k| shard_of_int(*k, KeyType::Int4, 3) == 0)
        .take(3)
        .collect();
    let listed = rows(
        &c,
        &format!(
            "SELECT aid FROM accounts WHERE aid IN ({}, {}, {}) ORDER BY aid",
            same[0], same[1], same[2]
        ),
    )
    .await;
    assert_eq!(listed.len(), 3);
    // An INSERT whose rows are on several shards is split: one INSERT per shard, all or
    // nothing, answered as one (RETURNING rows included).
    let msgs = c
        .simple_query(
            "INSERT INTO accounts (aid, v) VALUES (1001, 'm'), (1002, 'm'), (1003, 'm'), (1004, 'm') RETURNING aid",
        )
        .await
        .unwrap();
    let mut returned: Vec<i64> = simple_rows(&msgs)
        .iter()
        .map(|r| r[0].parse().unwrap())
        .collect();
    returned.sort();
    assert_eq!(returned, vec![1001, 1002, 1003, 1004]);
    assert!(msgs
        .iter()
        .any(|m| matches!(m, SimpleQueryMessage::CommandComplete(4))));
    for k in 1001..=1004 {
        let on = &shards[shard_of_int(k, KeyType::Int4, 3)];
        assert_eq!(
            on.sql(
                "postgres",
                &format!("SELECT v FROM accounts WHERE aid = {k}")
            ),
            "m"
        );
    }
    let before: Vec<String> = shards
        .iter()
        .map(|pg| pg.sql("postgres", "SELECT count(*) FROM accounts"))
        .collect();
    let e = c
        .simple_query(
            "INSERT INTO accounts (aid, v) VALUES (1005, 'x'), (1006, 'x'), (1001, 'dup')",
        )
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "23505");
    let after: Vec<String> = shards
        .iter()
        .map(|pg| pg.sql("postgres", "SELECT count(*) FROM accounts"))
        .collect();
    assert_eq!(before, after, "a failed split INSERT left rows behind");

    // Updates and deletes by key reach the row's shard.
    c.simple_query("UPDATE accounts SET v = 'changed' WHERE aid = 42")
        .await
        .unwrap();
    c.execute("DELETE FROM accounts WHERE aid = $1", &[&43i32])
        .await
        .unwrap();
    let on = |k: i64| &shards[shard_of_int(k, KeyType::Int4, 3)];
    assert_eq!(
        on(42).sql("postgres", "SELECT v FROM accounts WHERE aid = 42"),
        "changed"
    );
    assert_eq!(
        on(43).sql("postgres", "SELECT count(*) FROM accounts WHERE aid = 43"),
        "0"
    );
}

/// The shard of each key, and the rows each shard holds of `keys`.
fn held_by_shard(shards: &[support::Postgres], keys: &[i64]) -> Vec<Vec<i64>> {
    let list = keys
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    shards
        .iter()
        .map(|pg| {
            pg.sql(
                "postgres",
                &format!(
                    "SELECT coalesce(string_agg(aid::text, ',' ORDER BY aid), '') FROM accounts WHERE aid IN ({list})"
                ),
            )
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect()
        })
        .collect()
}

fn placed(keys: &[i64], n: usize) -> Vec<Vec<i64>> {
    let mut want = vec![Vec::new(); n];
    for &k in keys {
        want[shard_of_int(k, KeyType::Int4, n)].push(k);
    }
    for w in &mut want {
        w.sort();
    }
    want
}

#[tokio::test(flavor = "multi_thread")]
async fn an_insert_of_rows_on_several_shards_with_parameters_is_split() {
    let shards = start(3, ACCOUNTS);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    // A prepared statement (Parse and Describe first, then Bind and Execute), its parameters
    // in binary, run twice with keys on several shards; one parameter in every shard's part.
    let stmt = c
        .prepare(
            "INSERT INTO accounts (aid, v) VALUES ($1, $2), ($3, $2), ($4, $5), ($6, $2) \
             ON CONFLICT (aid) DO UPDATE SET v = $7 RETURNING aid, v",
        )
        .await
        .unwrap();
    for base in [100i32, 200] {
        let keys: Vec<i32> = (base + 1..=base + 4).collect();
        let one = format!("a{base}");
        let rows = c
            .query(
                &stmt,
                &[
                    &keys[0], &one, &keys[1], &keys[2], &"b", &keys[3], &"updated",
                ],
            )
            .await
            .unwrap();
        let mut got: Vec<(i32, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (keys[0], one.clone()),
                (keys[1], one.clone()),
                (keys[2], "b".to_string()),
                (keys[3], one.clone())
            ]
        );
    }
    let keys: Vec<i64> = (101..=104).chain(201..=204).collect();
    assert_eq!(held_by_shard(&shards, &keys), placed(&keys, 3));
    assert!(
        placed(&keys, 3).iter().filter(|w| !w.is_empty()).count() > 1,
        "the keys span shards"
    );
    // The statement is still the client's: the ON CONFLICT part, and a one-shard run.
    let n = c
        .execute(
            &stmt,
            &[&101i32, &"x", &102i32, &103i32, &"y", &104i32, &"again"],
        )
        .await
        .unwrap();
    assert_eq!(n, 4);
    assert_eq!(
        value(&c, "SELECT v FROM accounts WHERE aid = 103").await,
        "again"
    );
    // The unnamed statement, Parse to Sync in one request (typed parameters).
    let rows = c
        .query_typed(
            "INSERT INTO accounts (aid, v) VALUES ($1, 'u'), ($2, 'u'), ($3, 'u') RETURNING aid",
            &[
                (&301i32, tokio_postgres::types::Type::INT4),
                (&302i32, tokio_postgres::types::Type::INT4),
                (&303i32, tokio_postgres::types::Type::INT4),
            ],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    let keys: Vec<i64> = vec![301, 302, 303];
    assert_eq!(held_by_shard(&shards, &keys), placed(&keys, 3));
    // All or nothing: a duplicate key on one shard leaves no row on the others.
    let before: Vec<String> = shards
        .iter()
        .map(|pg| pg.sql("postgres", "SELECT count(*) FROM accounts"))
        .collect();
    let e = c
        .execute(
            "INSERT INTO accounts (aid, v) VALUES ($1, 'd'), ($2, 'd'), ($3, 'd'), ($4, 'd')",
            &[&401i32, &402i32, &403i32, &101i32],
        )
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "23505");
    // A value PostgreSQL cannot read fails the INSERT with PostgreSQL's error.
    let e = c
        .query_typed(
            "INSERT INTO accounts (aid, v) VALUES ($1, 'e'), ($2, $3::int::text)",
            &[
                (&404i32, tokio_postgres::types::Type::INT4),
                (&405i32, tokio_postgres::types::Type::INT4),
                (&"not a number", tokio_postgres::types::Type::TEXT),
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22P02");
    let after: Vec<String> = shards
        .iter()
        .map(|pg| pg.sql("postgres", "SELECT count(*) FROM accounts"))
        .collect();
    assert_eq!(before, after, "a failed split INSERT left rows behind");
    // The connection is fine afterwards.
    assert_eq!(
        value(&c, "SELECT v FROM accounts WHERE aid = 301").await,
        "u"
    );
}

/// A message as the client sees it: its tag and body, an error by its severity, code and
/// message (PostgreSQL adds its source file and line).
fn seen(tag: u8, body: &[u8]) -> String {
    match tag {
        b'E' => {
            let e = pgwire::backend::ErrorFields::parse(body).unwrap();
            format!("E {} {} {}", e.severity, e.code, e.message)
        }
        _ => format!("{} {:?}", tag as char, String::from_utf8_lossy(body)),
    }
}

/// Sends `bytes` and reads every message up to ReadyForQuery.
async fn transcript(raw: &mut support::raw::Raw, bytes: &[u8]) -> Vec<String> {
    raw.send(bytes).await;
    let mut out = Vec::new();
    loop {
        let (tag, body) = raw.read().await.expect("connection closed");
        out.push(seen(tag, &body));
        if tag == b'Z' {
            return out;
        }
    }
}

/// Parse (when `parse`) of statement `name`, an INSERT of four rows, then Bind with `keys`
/// (text), Describe of the portal, Execute, Sync.
fn bulk_insert(name: &str, parse: bool, keys: [i32; 4]) -> bytes::BytesMut {
    use pgwire::encode;
    let mut out = bytes::BytesMut::new();
    let sql = "INSERT INTO accounts (aid, v) VALUES ($1, $5), ($2, $5), ($3, $5), ($4, $5)";
    if parse {
        let mut rest = sql.as_bytes().to_vec();
        rest.extend_from_slice(&[0, 0, 0]);
        encode::parse(&mut out, name.as_bytes(), &rest);
    }
    encode::message(&mut out, b'B', |b| {
        b.extend_from_slice(&[0]);
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&[0, 0, 0, 0, 5]);
        for v in keys.iter().map(i32::to_string).chain(["bulk".to_string()]) {
            b.extend_from_slice(&(v.len() as i32).to_be_bytes());
            b.extend_from_slice(v.as_bytes());
        }
        b.extend_from_slice(&[0, 0]);
    });
    encode::describe(&mut out, b'P', b"");
    encode::message(&mut out, b'E', |b| b.extend_from_slice(&[0, 0, 0, 0, 0]));
    encode::sync(&mut out);
    out
}

/// The same bytes straight to one PostgreSQL server and through pgcorral to three shards give
/// the same messages: a named statement parsed, bound and run in one request, run again by
/// its name alone, parsed again under its taken name, and the unnamed statement.
#[tokio::test(flavor = "multi_thread")]
async fn a_split_insert_answers_as_one_server_does() {
    let shards = start(3, ACCOUNTS);
    let reference = start(1, ACCOUNTS);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let mut direct = support::raw::Raw::login(reference[0].port, "postgres", "postgres")
        .await
        .unwrap();
    let mut pooled = support::raw::Raw::login(p.port(), "postgres", "app")
        .await
        .unwrap();
    for (i, (name, parse)) in [("ins", true), ("ins", false), ("ins", true), ("", true)]
        .into_iter()
        .enumerate()
    {
        let base = 500 + 10 * i as i32;
        let keys = [base + 1, base + 2, base + 3, base + 4];
        let bytes = bulk_insert(name, parse, keys);
        let want = transcript(&mut direct, &bytes).await;
        let got = transcript(&mut pooled, &bytes).await;
        assert_eq!(got, want, "step {i}: {name:?}, parse {parse}");
    }
    // Every row is on its shard: those of the steps that ran (not the refused re-Parse).
    let keys: Vec<i64> = [500, 510, 530].iter().flat_map(|b| b + 1..=b + 4).collect();
    assert_eq!(held_by_shard(&shards, &keys), placed(&keys, 3));
    assert!(held_by_shard(&shards, &[521, 522, 523, 524])
        .iter()
        .all(Vec::is_empty));
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_that_name_no_shard_are_refused_never_guessed() {
    let shards = start(3, ACCOUNTS);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    let refused = |sql: &'static str| {
        let c = &c;
        async move {
            let e = c.simple_query(sql).await.expect_err(sql);
            (sqlstate(&e), db_message(&e))
        }
    };
    // A read that names no shard is asked of every shard (tests/sharding_gather.rs), unless
    // its answer cannot be merged; a write that names none runs on every shard
    // (tests/sharding_writes.rs), unless each shard would read only its part of the data.
    let (code, msg) =
        refused("SELECT v, count(*) FROM accounts GROUP BY v HAVING count(*) + 1 > 2").await;
    assert_eq!(code, "0A000");
    assert!(msg.contains("HAVING"), "{msg}");
    let (code, msg) =
        refused("DELETE FROM accounts WHERE aid IN (SELECT aid FROM accounts WHERE v = 'x')").await;
    assert_eq!(code, "0A000");
    assert!(msg.contains("reads a sharded table"), "{msg}");
    // A key changed with FROM (tests/sharding_writes.rs moves rows without it), an
    // omnisharded table written beside other statements: refused.
    let (_, msg) = refused(
        "UPDATE accounts SET aid = 5 FROM countries WHERE accounts.aid = 7 AND countries.id = 1",
    )
    .await;
    assert!(msg.contains("moves rows between shards"), "{msg}");
    let (_, msg) = refused("INSERT INTO countries VALUES (2, 'two'); SELECT 1").await;
    assert!(msg.contains("omnisharded"), "{msg}");
    // Still a working connection: reads of omnisharded tables and keyless statements go to
    // any shard.
    assert_eq!(
        value(&c, "SELECT name FROM countries WHERE id = 1").await,
        "one"
    );
    assert_eq!(value(&c, "SELECT 40 + 2").await, "42");
    c.simple_query("SET statement_timeout = '5s'")
        .await
        .unwrap();
    assert_eq!(value(&c, "SHOW statement_timeout").await, "5s");

    // With a default shard, a query without a key goes there.
    drop(c);
    let p = Pooler::start(&config(
        &shards,
        "",
        &format!("{SHARDED}\ndefault_shard = 2"),
    ))
    .await;
    let c = p.connect("postgres", None, "app").await;
    shards[2].sql(
        "postgres",
        "INSERT INTO accounts VALUES (1000000, 'on two')",
    );
    assert_eq!(
        rows(&c, "SELECT v FROM accounts ORDER BY aid DESC LIMIT 1").await,
        vec![vec!["on two".to_string()]]
    );

    // An INSERT without a column list into a sharded table the shards lack: its columns
    // cannot be read from the catalog, so neither can its key; refused, and the connection
    // goes on.
    drop(c);
    let ghosts = "sharded_tables = [{ name = \"ghosts\", columns = [\"id\"], types = [\"int4\"] }]";
    let p = Pooler::start(&config(&shards, "", ghosts)).await;
    let c = p.connect("postgres", None, "app").await;
    for _ in 0..2 {
        let e = c
            .simple_query("INSERT INTO ghosts VALUES (1)")
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&e), "0A000");
        assert!(
            db_message(&e).contains("name the columns"),
            "{}",
            db_message(&e)
        );
        assert_eq!(value(&c, "SELECT 40 + 2").await, "42");
    }
}

/// The PgCat README's sharding examples, as written (its `SET SHARDING ROLE` spelling
/// included), and PgDog's spellings of the same.
#[tokio::test(flavor = "multi_thread")]
async fn pgcat_and_pgdog_commands_and_comments_choose_the_shard() {
    let ddl = "CREATE TABLE users (id bigint, name text, email text, zone_id bigint)";
    let shards = start(3, ddl);
    let db = "sharded_tables = [{ name = \"users\", columns = [\"zone_id\"], types = [\"int8\"] }]";
    let p = Pooler::start(&config(&shards, "", db)).await;
    let c = p.connect("postgres", None, "app").await;
    for (i, pg) in shards.iter().enumerate() {
        pg.sql(
            "postgres",
            &format!("INSERT INTO users VALUES ({i}, 'shard {i}', 'x', -1)"),
        );
    }
    c.simple_query("SET SHARD TO '1'").await.unwrap();
    assert_eq!(
        value(&c, "SELECT name FROM users WHERE id = 1").await,
        "shard 1"
    );
    assert_eq!(value(&c, "SHOW SHARD").await, "1");
    c.simple_query("SET SHARDING KEY TO '1234'").await.unwrap();
    let s = shard_of_int(1234, KeyType::Int8, 3);
    assert_eq!(value(&c, "SELECT count(*) FROM users").await, "1");
    assert_eq!(value(&c, "SHOW SHARD").await, s.to_string());
    c.simple_query("SET SHARDING ROLE TO 'primary'")
        .await
        .unwrap();
    c.simple_query("SET SHARDING KEY TO '85'").await.unwrap();
    c.simple_query(
        "INSERT INTO users (name, email, zone_id) VALUES ('test user', 'test@example.com', 85)",
    )
    .await
    .unwrap();
    c.simple_query("SET SERVER ROLE TO 'auto'").await.unwrap();
    assert_eq!(
        value(
            &c,
            "SELECT name FROM users WHERE email = 'test@example.com'"
        )
        .await,
        "test user"
    );
    let home = shard_of_int(85, KeyType::Int8, 3);
    assert_eq!(
        shards[home].sql("postgres", "SELECT count(*) FROM users WHERE zone_id = 85"),
        "1"
    );
    // PgDog's SET and both projects' comments; a comment wins over the SET for its query.
    c.simple_query("SET pgdog.shard TO 2").await.unwrap();
    assert_eq!(
        value(&c, "SELECT name FROM users WHERE id >= 0").await,
        "shard 2"
    );
    for (comment, shard) in [
        ("/* shard_id: 0 */", 0),
        ("/* pgdog_shard: 1 */", 1),
        (&format!("/* sharding_key: {} */", 85)[..], home),
        ("/* pgdog_sharding_key: 85 */", home),
    ] {
        let sql = format!("{comment} SELECT count(*) FROM users WHERE zone_id >= -1");
        let want = shards[shard].sql("postgres", "SELECT count(*) FROM users WHERE zone_id >= -1");
        assert_eq!(value(&c, &sql).await, want, "{comment}");
    }
    let e = c.simple_query("SET SHARD TO '7'").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    assert!(db_message(&e).contains("shard 7"), "{}", db_message(&e));

    // The console: every shard's servers, and where a key lives.
    let admin = p.connect("postgres", None, "pgbouncer").await;
    let listed = simple_rows(&admin.simple_query("SHOW SHARDS").await.unwrap());
    assert_eq!(listed.len(), 3);
    let found = simple_rows(&admin.simple_query("SHOW SHARD FOR '85'").await.unwrap());
    assert_eq!(found[0][3], home.to_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_stays_on_one_shard_unless_it_can_spread() {
    let shards = start(3, ACCOUNTS);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    let (a, b) = {
        let a = 1i64;
        let b = (2..100)
            .find(|k| shard_of_int(*k, KeyType::Int4, 3) != shard_of_int(a, KeyType::Int4, 3))
            .unwrap();
        (a, b)
    };
    // BEGIN waits for the statement that names the shard; the transaction commits there.
    c.batch_execute("BEGIN").await.unwrap();
    c.simple_query(&format!("INSERT INTO accounts VALUES ({a}, 'a')"))
        .await
        .unwrap();
    c.simple_query(&format!("UPDATE accounts SET v = 'a2' WHERE aid = {a}"))
        .await
        .unwrap();
    c.batch_execute("COMMIT").await.unwrap();
    let home = &shards[shard_of_int(a, KeyType::Int4, 3)];
    assert_eq!(
        home.sql(
            "postgres",
            &format!("SELECT v FROM accounts WHERE aid = {a}")
        ),
        "a2"
    );

    // The extended protocol inside a transaction: the statement is prepared (Parse, Describe,
    // Sync) before its Bind names the shard; the client still sees its transaction.
    let mut c2 = p.connect("postgres", None, "app").await;
    let t = c2.transaction().await.unwrap();
    let row = t
        .query_one("SELECT v FROM accounts WHERE aid = $1", &[&(a as i32)])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "a2");
    t.execute(
        "UPDATE accounts SET v = $2 WHERE aid = $1",
        &[&(a as i32), &"a3"],
    )
    .await
    .unwrap();
    // Another shard's key: the transaction spreads there (tests/sharding_writes.rs), and its
    // ROLLBACK undoes both shards' parts.
    let rows = t
        .query("SELECT v FROM accounts WHERE aid = $1", &[&(b as i32)])
        .await
        .unwrap();
    assert!(rows.is_empty());
    t.rollback().await.unwrap();
    assert_eq!(
        home.sql(
            "postgres",
            &format!("SELECT v FROM accounts WHERE aid = {a}")
        ),
        "a2"
    );
    let t = c2.transaction().await.unwrap();
    t.execute(
        "UPDATE accounts SET v = $2 WHERE aid = $1",
        &[&(a as i32), &"a3"],
    )
    .await
    .unwrap();
    t.commit().await.unwrap();
    assert_eq!(
        home.sql(
            "postgres",
            &format!("SELECT v FROM accounts WHERE aid = {a}")
        ),
        "a3"
    );
    c.simple_query(&format!("UPDATE accounts SET v = 'a2' WHERE aid = {a}"))
        .await
        .unwrap();

    // A transaction begun in the same request as its first statement cannot spread: a
    // statement for another shard fails it, as an error does on PostgreSQL.
    c.batch_execute(&format!(
        "BEGIN; UPDATE accounts SET v = 'lost' WHERE aid = {a}"
    ))
    .await
    .unwrap();
    let e = c
        .simple_query(&format!("SELECT v FROM accounts WHERE aid = {b}"))
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "0A000");
    assert!(
        db_message(&e).contains("cannot spread"),
        "{}",
        db_message(&e)
    );
    let e = c.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(sqlstate(&e), "25P02");
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        home.sql(
            "postgres",
            &format!("SELECT v FROM accounts WHERE aid = {a}")
        ),
        "a2"
    );

    // An empty transaction, and one whose shard is set inside it (for that transaction only).
    c.batch_execute("BEGIN; COMMIT").await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute("COMMIT").await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    c.simple_query("SET SHARD TO '2'").await.unwrap();
    let count = value(&c, "SELECT count(*) FROM accounts").await;
    assert_eq!(
        count,
        shards[2].sql("postgres", "SELECT count(*) FROM accounts")
    );
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(value(&c, "SHOW SHARD").await, "auto");
    // A transaction whose first statement pgcorral refuses fails, and ends cleanly.
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    let e = c
        .simple_query("SELECT * FROM accounts a JOIN accounts b ON a.v = b.v")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "0A000");
    let e = c.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(sqlstate(&e), "25P02");
    c.batch_execute("ROLLBACK").await.unwrap();
    // The BEGIN's options reach the shard with the first statement.
    c.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        .await
        .unwrap();
    let msgs = c
        .simple_query(&format!(
            "SELECT current_setting('transaction_isolation') FROM accounts WHERE aid = {a}"
        ))
        .await
        .unwrap();
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(simple_rows(&msgs), vec![vec!["serializable".to_string()]]);
    assert!(msgs
        .iter()
        .any(|m| matches!(m, SimpleQueryMessage::CommandComplete(1))));
}

/// With `sharded_tables_from_catalog`, a table the shards partition by hash is sharded by its
/// partition key without being declared: each shard holds only its own partition here, so a
/// row sent to the wrong shard would be refused by PostgreSQL itself. A declared text key under
/// a non-deterministic collation is refused (PostgreSQL hashes its sort key).
#[tokio::test(flavor = "multi_thread")]
async fn hash_partitioned_tables_are_read_from_the_shards_catalogs() {
    let shards = start(3, "SELECT 1");
    for (i, pg) in shards.iter().enumerate() {
        pg.sql(
            "postgres",
            &format!(
                "CREATE TABLE events (tenant uuid, day int, v text) PARTITION BY HASH (tenant, day); \
                 CREATE TABLE events_{i} PARTITION OF events FOR VALUES WITH (MODULUS 3, REMAINDER {i}); \
                 CREATE COLLATION nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false); \
                 CREATE TABLE names (n text COLLATE nocase)"
            ),
        );
    }
    let db = "sharded_tables_from_catalog = true\n\
              sharded_tables = [{ name = \"names\", columns = [\"n\"], types = [\"text\"] }]";
    let p = Pooler::start(&config(&shards, "", db)).await;
    let c = p.connect("postgres", None, "app").await;
    for i in 0..60 {
        let tenant = format!("00000000-0000-4000-8000-{:012x}", i * 7919);
        c.simple_query(&format!(
            "INSERT INTO events (tenant, day, v) VALUES ('{tenant}', {i}, 'e{i}')"
        ))
        .await
        .unwrap();
        let v = value(
            &c,
            &format!("SELECT v FROM events WHERE tenant = '{tenant}' AND day = {i}"),
        )
        .await;
        assert_eq!(v, format!("e{i}"));
    }
    let total: usize = shards
        .iter()
        .map(|pg| {
            pg.sql("postgres", "SELECT count(*) FROM events")
                .parse::<usize>()
                .unwrap()
        })
        .sum();
    assert_eq!(total, 60);
    assert!(shards
        .iter()
        .all(|pg| pg.sql("postgres", "SELECT count(*) FROM events") != "0"));
    let e = c
        .simple_query("SELECT * FROM names WHERE n = 'a'")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "0A000");
    assert!(
        db_message(&e).contains("non-deterministic"),
        "{}",
        db_message(&e)
    );
}
