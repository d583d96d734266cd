//! Keys read as PostgreSQL reads them, against three servers as three shards that each hold
//! only their own partition of `PARTITION BY HASH` tables (MODULUS 3, REMAINDER = the shard),
//! so PostgreSQL itself refuses a row sent to the wrong shard and a read there finds nothing:
//! an integer key written as a numeric or float (literal, cast or parameter), strings with
//! backslash escapes (E'' strings, standard_conforming_strings off by SET, at startup or by
//! the server's default), an empty key in a comment, and two-phase commit's COMMIT PREPARED
//! and ROLLBACK PREPARED reaching the shard that holds the prepared transaction.

mod support;

use support::sharding::{config, shard_of_int};
use support::wire::{self, Param, Wire};
use support::{db_message, simple_rows, sqlstate, value, PgOptions, Pooler, Postgres};
use tokio_postgres::types::Type;
use tokio_postgres::Client;

use pgcorral::shard::key::KeyType;

/// Each shard's partitions of `nums` (int4 key) and `words` (text key).
fn ddl(i: usize) -> String {
    format!(
        "CREATE TABLE nums (id int4, v text) PARTITION BY HASH (id); \
         CREATE TABLE nums_{i} PARTITION OF nums FOR VALUES WITH (MODULUS 3, REMAINDER {i}); \
         CREATE TABLE words (w text, v text) PARTITION BY HASH (w); \
         CREATE TABLE words_{i} PARTITION OF words FOR VALUES WITH (MODULUS 3, REMAINDER {i})"
    )
}

/// Three shards with `conf` in their postgresql.conf, each holding its own partitions, with
/// prepared transactions on (a write across shards commits with two-phase commit).
fn shards(conf: &str) -> Vec<Postgres> {
    let conf = format!("max_prepared_transactions = 10\n{conf}");
    let servers: Vec<Postgres> = support::blocking(|| {
        std::thread::scope(|s| {
            let starting: Vec<_> = (0..3)
                .map(|_| {
                    let conf = conf.clone();
                    s.spawn(move || {
                        Postgres::start_with(PgOptions {
                            conf,
                            ..PgOptions::default()
                        })
                    })
                })
                .collect();
            starting.into_iter().map(|h| h.join().unwrap()).collect()
        })
    });
    for (i, pg) in servers.iter().enumerate() {
        pg.sql("postgres", &ddl(i));
    }
    servers
}

const DB: &str = "sharded_tables_from_catalog = true\nsharding_key_type = \"text\"";

/// The `v` of `sql`'s rows, sorted.
async fn vs(c: &Client, sql: &str) -> Vec<String> {
    let msgs = c
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut v: Vec<String> = simple_rows(&msgs)
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    v.sort();
    v
}

async fn ok(c: &Client, sql: &str) {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e} ({})", db_message(&e)));
}

/// A Parse of `sql` with parameter types `types`, a Bind of `params`, an Execute and a Sync;
/// the answer's rows (first column) or its error's SQLSTATE.
async fn extended(
    w: &mut Wire,
    sql: &str,
    types: &[u32],
    params: &[Param<'_>],
) -> Result<Vec<String>, String> {
    w.send_all(&[
        wire::parse("", sql, types),
        wire::bind("", "", params, false),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    let msgs = w.until_ready().await;
    if let Some(e) = msgs.iter().find(|m| m.tag == b'E') {
        return Err(e.code());
    }
    Ok(msgs
        .iter()
        .filter(|m| m.tag == b'D')
        .filter_map(|m| m.row()[0].clone())
        .collect())
}

/// Three shards (no settings of their own), pgcorral over them, and a client.
async fn sharded() -> (Vec<Postgres>, Pooler, Client) {
    let shards = shards("");
    let p = Pooler::start(&config(&shards, "", DB)).await;
    let c = p.connect("postgres", None, "app").await;
    (shards, p, c)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_integer_key_written_as_another_number_finds_the_row_postgresql_stores() {
    let (_shards, p, c) = sharded().await;
    // An integer key written as a numeric or float literal is stored as PostgreSQL's
    // assignment cast stores it: numeric rounds half away from zero, float8 half to even.
    let mut stored: Vec<(i64, String)> = Vec::new();
    for k in 1..=12i64 {
        let cases = [
            (format!("{k}.0"), k, "n"),
            (format!("{}.5", k + 20), k + 21, "h"),
            (format!("-{}.5", k + 40), -(k + 41), "m"),
            // Half to even: 203.5 is 204, 206.5 is 206.
            (
                format!("'{}.5'::float8", 200 + 3 * k),
                200 + 3 * k + k % 2,
                "f",
            ),
            (format!("{}e0", k + 80), k + 80, "e"),
        ];
        for (written, key, tag) in cases {
            let v = format!("{tag}{key}");
            ok(
                &c,
                &format!("INSERT INTO nums (id, v) VALUES ({written}, '{v}')"),
            )
            .await;
            stored.push((key, v));
        }
        // A float8 parameter in binary, typed by its cast.
        let key = k + 100;
        let v = format!("b{key}");
        c.execute(
            "INSERT INTO nums (id, v) VALUES ($1::float8, $2)",
            &[&(key as f64 + 0.25), &v],
        )
        .await
        .unwrap_or_else(|e| panic!("float8 parameter {key}: {e}"));
        stored.push((key, v));
    }
    // Parameters typed by the client's Parse: numeric in text, float8 in binary.
    let mut w = Wire::connect(p.port(), "postgres", "app").await;
    for k in 1..=6i64 {
        let (key, v) = (k + 120, format!("p{}", k + 120));
        let text = format!("{}.5", k + 119);
        let sql = "INSERT INTO nums (id, v) VALUES ($1, $2)";
        let params = [Param::Text(&text), Param::Text(&v)];
        extended(&mut w, sql, &[1700, 25], &params)
            .await
            .expect("numeric parameter");
        stored.push((key, v));
        let (key, v) = (k + 140, format!("d{}", k + 140));
        let bytes = (key as f64).to_be_bytes().to_vec();
        let params = [Param::Binary(bytes), Param::Text(&v)];
        extended(&mut w, sql, &[701, 25], &params)
            .await
            .expect("float8 parameter");
        stored.push((key, v));
    }
    // Every row is found again by its key written as PostgreSQL compares it; a key no integer
    // equals finds nothing, without an error.
    for (key, v) in &stored {
        for written in [format!("{key}.0"), format!("'{key}'"), format!("{key}e0")] {
            let sql = format!("SELECT v FROM nums WHERE id = {written}");
            assert_eq!(vs(&c, &sql).await, vec![v.clone()], "{sql}");
        }
        assert!(vs(&c, &format!("SELECT v FROM nums WHERE id = {key}.5"))
            .await
            .is_empty());
        let rows = c
            .query(
                "SELECT v FROM nums WHERE id = $1::float8",
                &[&(*key as f64)],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "{key} as a float8 parameter");
        let rows = c
            .query_typed(
                "SELECT v FROM nums WHERE id = $1",
                &[(&(*key as f64), Type::FLOAT8)],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "{key} as a typed float8 parameter");
    }
    let numeric = extended(
        &mut w,
        "SELECT v FROM nums WHERE id = $1",
        &[1700],
        &[Param::Text("7.000")],
    )
    .await;
    assert_eq!(numeric, Ok(vec!["n7".to_string()]));
    // Out of the key's range: PostgreSQL's own error, wherever it goes.
    let e = c
        .simple_query("INSERT INTO nums (id, v) VALUES (3000000000.0, 'x')")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22003", "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn string_keys_take_backslash_escapes_as_postgresql_reads_them() {
    let (_shards, p, c) = sharded().await;
    // Backslash escapes, as PostgreSQL reads them: with standard_conforming_strings off (SET),
    // in every string; in E'' strings always.
    ok(&c, "SET standard_conforming_strings = off").await;
    for i in 0..8 {
        ok(
            &c,
            &format!(r"INSERT INTO words (w, v) VALUES ('a\'b{i}', 'q{i}')"),
        )
        .await;
        ok(
            &c,
            &format!(r"INSERT INTO words (w, v) VALUES ('x\\y{i}', 's{i}')"),
        )
        .await;
        assert_eq!(
            vs(&c, &format!(r"SELECT v FROM words WHERE w = 'a\'b{i}'")).await,
            vec![format!("q{i}")]
        );
    }
    ok(&c, "RESET standard_conforming_strings").await;
    for i in 0..8 {
        assert_eq!(
            vs(&c, &format!("SELECT v FROM words WHERE w = 'a''b{i}'")).await,
            vec![format!("q{i}")]
        );
        assert_eq!(
            vs(&c, &format!(r"SELECT v FROM words WHERE w = 'x\y{i}'")).await,
            vec![format!("s{i}")]
        );
        ok(
            &c,
            &format!(r"INSERT INTO words (w, v) VALUES (E'e\\{i}', 'e{i}'), (E'it''s{i}', 'i{i}')"),
        )
        .await;
        assert_eq!(
            vs(&c, &format!(r"SELECT v FROM words WHERE w = 'e\{i}'")).await,
            vec![format!("e{i}")]
        );
        assert_eq!(
            vs(&c, &format!(r"SELECT v FROM words WHERE w = E'it\'s{i}'")).await,
            vec![format!("i{i}")]
        );
    }
    // Off from the startup packet.
    let mut off = Wire::connect_with(
        p.port(),
        &[
            ("user", "postgres"),
            ("database", "app"),
            ("standard_conforming_strings", "off"),
        ],
    )
    .await;
    for i in 0..8 {
        let answer = off
            .simple(&format!(
                r"INSERT INTO words (w, v) VALUES ('t\\u{i}', 't{i}')"
            ))
            .await;
        assert!(answer.iter().all(|m| m.tag != b'E'), "{answer:?}");
        assert_eq!(
            vs(&c, &format!(r"SELECT v FROM words WHERE w = 't\u{i}'")).await,
            vec![format!("t{i}")]
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_key_in_a_comment_is_the_empty_string() {
    let (shards, _p, c) = sharded().await;
    // An empty key in a comment is a key: the empty string, on the shard that holds ''.
    ok(&c, "INSERT INTO words (w, v) VALUES ('', 'empty')").await;
    let holder = shards
        .iter()
        .position(|pg| pg.sql("postgres", "SELECT count(*) FROM words WHERE w = ''") == "1")
        .expect("a shard holds ''");
    let want = shards[holder].sql("postgres", "SELECT count(*) FROM words");
    for comment in ["/* sharding_key: '' */", "/* pgdog_sharding_key: \"\" */"] {
        let sql = format!("{comment} SELECT count(*) FROM words");
        assert_eq!(value(&c, &sql).await, want, "{sql}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn prepared_transactions_are_finished_on_their_shard() {
    // The servers' own default: standard_conforming_strings off, as the client is told.
    let shards = shards("standard_conforming_strings = off");
    let p = Pooler::start(&config(&shards, "", DB)).await;
    let c1 = p.connect("postgres", None, "app").await;
    let c2 = p.connect("postgres", None, "app").await;
    for k in 1..=8i64 {
        ok(&c1, "BEGIN").await;
        ok(
            &c1,
            &format!("INSERT INTO nums (id, v) VALUES ({k}, 'p{k}')"),
        )
        .await;
        ok(&c1, &format!("PREPARE TRANSACTION 'g{k}'")).await;
    }
    // Another client finishes them: half committed, half rolled back.
    for k in 1..=8i64 {
        let verb = if k % 2 == 1 { "COMMIT" } else { "ROLLBACK" };
        ok(&c2, &format!("{verb} PREPARED 'g{k}'")).await;
    }
    for k in 1..=8i64 {
        let want = if k % 2 == 1 {
            vec![format!("p{k}")]
        } else {
            vec![]
        };
        assert_eq!(
            vs(&c1, &format!("SELECT v FROM nums WHERE id = {k}")).await,
            want
        );
    }
    // Prepared without pgcorral: found by asking the shards.
    let on = shard_of_int(100, KeyType::Int4, 3);
    shards[on].sql(
        "postgres",
        "BEGIN; INSERT INTO nums (id, v) VALUES (100, 'outside'); PREPARE TRANSACTION 'outside'",
    );
    ok(&c2, "COMMIT PREPARED 'outside'").await;
    assert_eq!(
        vs(&c1, "SELECT v FROM nums WHERE id = 100").await,
        vec!["outside"]
    );
    // Prepared nowhere: PostgreSQL's own error.
    let e = c2
        .simple_query("COMMIT PREPARED 'nowhere'")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42704");
    assert_eq!(
        db_message(&e),
        "prepared transaction with identifier \"nowhere\" does not exist"
    );
    for (i, pg) in shards.iter().enumerate() {
        assert_eq!(
            pg.sql("postgres", "SELECT count(*) FROM pg_prepared_xacts"),
            "0",
            "shard {i}"
        );
    }
    // The servers' standard_conforming_strings off: backslashes in strings are escapes.
    for i in 0..8 {
        ok(
            &c1,
            &format!(r"INSERT INTO words (w, v) VALUES ('d\'q{i}', 'd{i}')"),
        )
        .await;
        assert_eq!(
            vs(&c2, &format!("SELECT v FROM words WHERE w = 'd''q{i}'")).await,
            vec![format!("d{i}")]
        );
    }
}
