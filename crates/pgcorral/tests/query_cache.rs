//! The result cache against a real PostgreSQL (`wal_level = logical`, a publication for all
//! tables): a cached answer is every message PostgreSQL sends, byte for byte; a change made
//! directly on the server is seen within `query_cache_lag`, one made through pgcorral at once;
//! DDL drops answers; and what may not be cached (the clock, randomness, sequences, views, row
//! security, temporary tables, catalogs) is read from the server every time. Whether a read
//! reached the server is told by the server's own statement log.

mod support;

use std::time::{Duration, Instant};

use bytes::BytesMut;
use support::raw::Raw;
use support::*;

/// A server that decodes logically (support's replicating server), logs every statement, and
/// holds the cache's publication and tables.
fn server() -> Postgres {
    let pg = replicating_server();
    pg.sql("postgres", "ALTER SYSTEM SET log_statement = 'all'");
    pg.sql("postgres", "ALTER SYSTEM SET log_line_prefix = ''");
    pg.pg_ctl("reload");
    pg.sql(
        "postgres",
        "CREATE PUBLICATION pgcorral_cache FOR ALL TABLES; \
         CREATE TABLE kv(k int PRIMARY KEY, v text); \
         INSERT INTO kv SELECT g, 'v' || g FROM generate_series(1, 100) g; \
         CREATE VIEW kv_view AS SELECT * FROM kv; \
         CREATE TABLE guarded(k int); ALTER TABLE guarded ENABLE ROW LEVEL SECURITY; \
         CREATE SEQUENCE seq; CREATE ROLE reader; GRANT SELECT ON kv TO reader",
    );
    pg
}

/// Runs `sql` twice through `c` (the second time from the cache, when it may be cached).
async fn twice(c: &mut Raw, sql: &str) {
    for _ in 0..2 {
        c.query(sql).await.unwrap();
    }
}

const LAG_MS: u64 = 1000;

fn cached_pooler(pg: &Postgres) -> PoolerProcess {
    PoolerProcess::start(&format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\
         default_pool_size = 4\nquery_cache_lag = {LAG_MS}\nadmin_users = [\"postgres\"]\n\n\
         [databases.postgres]\nhost = \"127.0.0.1\"\nport = {}\nquery_cache = true\n",
        pg.port
    ))
}

/// How many times the server's log shows `sql` run by a client (not pgcorral's own).
fn runs(pg: &Postgres, sql: &str) -> usize {
    let log = std::fs::read_to_string(pg.dir.join("log")).unwrap_or_default();
    log.lines()
        .filter(|l| l.strip_prefix("LOG:  statement: ") == Some(sql))
        .count()
}

/// Every message of `sql`'s answer, as bytes.
async fn answer(c: &mut Raw, sql: &str) -> Vec<(u8, Vec<u8>)> {
    let mut out = BytesMut::new();
    pgwire::encode::query(&mut out, sql);
    c.send(&out).await;
    let mut msgs = Vec::new();
    loop {
        let (tag, body) = c.read().await.expect("an answer");
        msgs.push((tag, body.to_vec()));
        if tag == pgwire::backend::READY_FOR_QUERY {
            return msgs;
        }
    }
}

/// Waits until the cache serves (its follower has caught up): a cacheable read run twice
/// reaches the server once.
async fn until_serving(pg: &Postgres, c: &mut Raw) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut n = 0;
    loop {
        n += 1;
        let sql = format!("SELECT {n} AS warm");
        answer(c, &sql).await;
        answer(c, &sql).await;
        if runs(pg, &sql) == 1 {
            return;
        }
        assert!(Instant::now() < deadline, "the cache never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A server, pgcorral with the cache in front of it, and a client through pgcorral once the
/// cache serves.
async fn cached() -> (Postgres, PoolerProcess, Raw) {
    let pg = server();
    let pooler = cached_pooler(&pg);
    let mut c = Raw::login(pooler.port, "postgres", "postgres")
        .await
        .unwrap();
    until_serving(&pg, &mut c).await;
    (pg, pooler, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_answer_is_every_message_postgres_sends() {
    let (pg, _pooler, mut c) = cached().await;
    let mut direct = Raw::login(pg.port, "postgres", "postgres").await.unwrap();
    let reads = [
        "SELECT k, v FROM kv WHERE k = 7",
        "SELECT count(*), max(v) FROM kv WHERE k BETWEEN 10 AND 20",
        "SELECT k FROM kv WHERE v LIKE 'v1%' ORDER BY k DESC LIMIT 3",
        "SELECT upper(v), k::int8, '2024-01-01'::date FROM kv WHERE k IN (1, 2, 3) ORDER BY k",
        "SELECT * FROM kv WHERE k = 100000",
        "SELECT current_user, 1 + 1",
    ];
    for sql in reads {
        let want = answer(&mut direct, sql).await;
        let first = answer(&mut c, sql).await;
        let second = answer(&mut c, sql).await;
        assert_eq!(first, want, "{sql}: read through");
        assert_eq!(second, want, "{sql}: from the cache");
        assert_eq!(
            runs(&pg, sql),
            2,
            "{sql}: once direct, once through pgcorral"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_reach_the_cache_from_anywhere() {
    let (pg, pooler, mut c) = cached().await;
    let mut w = Raw::login(pooler.port, "postgres", "postgres")
        .await
        .unwrap();
    let read = "SELECT v FROM kv WHERE k = 1";
    let value = |rows: Vec<Vec<Option<String>>>| rows[0][0].clone().unwrap();
    assert_eq!(value(c.query(read).await.unwrap()), "v1");
    assert_eq!(value(c.query(read).await.unwrap()), "v1");
    assert_eq!(runs(&pg, read), 1);

    // Through pgcorral: the next read sees it at once.
    w.query("UPDATE kv SET v = 'through' WHERE k = 1")
        .await
        .unwrap();
    assert_eq!(value(c.query(read).await.unwrap()), "through");

    // Directly on the server (and by a trigger's cascade, a COPY, anything): within the lag.
    for (i, sql) in [
        "UPDATE kv SET v = 'direct' WHERE k = 1",
        "DELETE FROM kv WHERE k = 1; INSERT INTO kv VALUES (1, 'again')",
        "TRUNCATE kv; INSERT INTO kv VALUES (1, 'truncated')",
    ]
    .iter()
    .enumerate()
    {
        let want = ["direct", "again", "truncated"][i];
        twice(&mut c, read).await;
        let changed = Instant::now();
        pg.sql("postgres", sql);
        loop {
            if value(c.query(read).await.unwrap()) == want {
                break;
            }
            assert!(
                changed.elapsed() < Duration::from_millis(LAG_MS + 300),
                "{sql}: not seen within the lag"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!("{sql}: seen after {:?}", changed.elapsed());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_drops_answers() {
    let (pg, _pooler, mut c) = cached().await;
    let read = "SELECT * FROM kv WHERE k = 2";
    assert_eq!(c.query(read).await.unwrap()[0].len(), 2);
    assert_eq!(c.query(read).await.unwrap()[0].len(), 2);
    // Through pgcorral: at once.
    c.query("ALTER TABLE kv ADD COLUMN w int").await.unwrap();
    assert_eq!(c.query(read).await.unwrap()[0].len(), 3);
    assert_eq!(c.query(read).await.unwrap()[0].len(), 3);
    // Directly: within the lag.
    let changed = Instant::now();
    pg.sql("postgres", "ALTER TABLE kv DROP COLUMN w");
    while c.query(read).await.unwrap()[0].len() != 2 {
        assert!(changed.elapsed() < Duration::from_millis(LAG_MS + 300));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_may_not_be_cached_is_read_every_time() {
    let (pg, _pooler, mut c) = cached().await;
    for sql in [
        "SELECT now()",
        "SELECT random()",
        "SELECT nextval('seq')",
        "SELECT CURRENT_TIMESTAMP",
        "SELECT 'now'::timestamptz",
        "SELECT * FROM kv_view WHERE k = 3",
        "SELECT * FROM guarded",
        "SELECT count(*) FROM pg_class",
        "SELECT v FROM kv WHERE k = 4 FOR UPDATE",
        "SELECT pg_backend_pid()",
    ] {
        twice(&mut c, sql).await;
        assert_eq!(runs(&pg, sql), 2, "{sql} was served from the cache");
    }
    // Inside a transaction: the server's.
    let sql = "SELECT v FROM kv WHERE k = 5";
    c.query("BEGIN").await.unwrap();
    twice(&mut c, sql).await;
    c.query("COMMIT").await.unwrap();
    assert_eq!(runs(&pg, sql), 2);
    // A temporary table pins the client: the server's too.
    let sql = "SELECT v FROM kv WHERE k = 6";
    c.query("CREATE TEMP TABLE tmp(a int)").await.unwrap();
    twice(&mut c, sql).await;
    assert_eq!(runs(&pg, sql), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_role_is_part_of_the_key() {
    let (pg, _pooler, mut c) = cached().await;
    let sql = "SELECT v FROM kv WHERE k = 8";
    twice(&mut c, sql).await;
    assert_eq!(runs(&pg, sql), 1);
    // Another role reads it again (its own answer); one without the privilege gets its error.
    c.query("SET ROLE reader").await.unwrap();
    c.query(sql).await.unwrap();
    assert_eq!(runs(&pg, sql), 2);
    c.query("RESET ROLE").await.unwrap();
    c.query("REVOKE SELECT ON kv FROM reader").await.unwrap();
    c.query("SET ROLE reader").await.unwrap();
    let e = c.query(sql).await.unwrap_err();
    assert_eq!(e.code, "42501", "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_cache_and_clear_cache() {
    let (pg, pooler, mut c) = cached().await;
    let sql = "SELECT v FROM kv WHERE k = 9";
    twice(&mut c, sql).await;
    let mut console = Raw::login(pooler.port, "postgres", "pgbouncer")
        .await
        .unwrap();
    let rows = console.query("SHOW CACHE").await.unwrap();
    let cell = |r: &Vec<Option<String>>, i: usize| r[i].clone().unwrap_or_default();
    let total = &rows[0];
    assert_eq!((cell(total, 0), cell(total, 1)), ("*".into(), "*".into()));
    assert!(cell(total, 2).parse::<u64>().unwrap() >= 1, "{rows:?}");
    assert!(
        cell(total, 4).parse::<u64>().unwrap() >= 1,
        "hits: {rows:?}"
    );
    let kv = rows
        .iter()
        .find(|r| cell(r, 1) == "kv")
        .expect("a line for kv");
    assert_eq!((cell(kv, 0), cell(kv, 2)), ("postgres".into(), "1".into()));
    console.query("CLEAR CACHE kv").await.unwrap();
    c.query(sql).await.unwrap();
    assert_eq!(runs(&pg, sql), 2, "read again after CLEAR CACHE kv");
    console.query("CLEAR CACHE").await.unwrap();
    let rows = console.query("SHOW CACHE").await.unwrap();
    assert_eq!(cell(&rows[0], 2), "0", "{rows:?}");
    let e = console.query("CLEAR STATS").await.unwrap_err();
    assert!(e.message.contains("CLEAR takes CACHE"), "{e:?}");
}

/// Only tables whose every change the publication streams are cached: one outside it, or a
/// publication that leaves out a kind of change, is read every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_what_the_publication_streams_is_cached() {
    let pg = server();
    pg.sql(
        "postgres",
        "CREATE TABLE loose(a int); INSERT INTO loose VALUES (1); \
         CREATE PUBLICATION just_kv FOR TABLE kv; \
         CREATE PUBLICATION inserts FOR ALL TABLES WITH (publish = 'insert')",
    );
    for (publication, kv_cached) in [("just_kv", true), ("inserts", false)] {
        let pooler = PoolerProcess::start(&format!(
            "[general]\nlisten_port = 0\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\
             query_cache_publication = \"{publication}\"\n\n\
             [databases.postgres]\nhost = \"127.0.0.1\"\nport = {}\nquery_cache = true\n",
            pg.port
        ));
        let mut c = Raw::login(pooler.port, "postgres", "postgres")
            .await
            .unwrap();
        until_serving(&pg, &mut c).await;
        let loose = format!("SELECT a FROM loose /* {publication} */");
        let kv = format!("SELECT v FROM kv WHERE k = 10 /* {publication} */");
        for sql in [&loose, &kv, &loose, &kv] {
            c.query(sql).await.unwrap();
        }
        assert_eq!(
            runs(&pg, &loose),
            2,
            "{publication}: loose is not published"
        );
        assert_eq!(
            runs(&pg, &kv),
            if kv_cached { 1 } else { 2 },
            "{publication}: kv"
        );
    }
}

/// Per table (`query_cache_tables`) and per query (a read that begins with a comment, as
/// pgpool's `/*NO QUERY CACHE*/`, is not cached).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_and_queries_opt_in_and_out() {
    let pg = server();
    pg.sql(
        "postgres",
        "CREATE TABLE loose(a int); INSERT INTO loose VALUES (1)",
    );
    let pooler = PoolerProcess::start(&format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\n\
         [databases.postgres]\nhost = \"127.0.0.1\"\nport = {}\nquery_cache = true\n\
         query_cache_tables = [\"kv\"]\n",
        pg.port
    ));
    let mut c = Raw::login(pooler.port, "postgres", "postgres")
        .await
        .unwrap();
    until_serving(&pg, &mut c).await;
    let kv = "SELECT v FROM kv WHERE k = 11";
    let loose = "SELECT a FROM loose";
    let both = "SELECT v, a FROM kv, loose WHERE k = 11";
    let opted_out = "/*NO QUERY CACHE*/ SELECT v FROM kv WHERE k = 12";
    // (Any request that is not a cached read drops the answers of the tables it names, so
    // the opted-out read of kv goes last.)
    for sql in [kv, loose, both, kv, loose, both, opted_out, opted_out] {
        c.query(sql).await.unwrap();
    }
    assert_eq!(runs(&pg, kv), 1);
    assert_eq!(runs(&pg, loose), 2);
    assert_eq!(runs(&pg, both), 2);
    assert_eq!(runs(&pg, opted_out), 2);
}

/// The same script of reads and writes run directly on one database and through pgcorral (with
/// the cache) on its twin: every message of every answer is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_of_reads_and_writes_answers_as_postgres_does() {
    let pg = server();
    let setup = "CREATE PUBLICATION pgcorral_cache FOR ALL TABLES; \
                 CREATE TABLE acc(id int PRIMARY KEY, owner text, balance numeric); \
                 INSERT INTO acc SELECT g, 'o' || (g % 7), g * 10 FROM generate_series(1, 50) g";
    for db in ["twin_direct", "twin_cached"] {
        pg.create_db(db);
        pg.sql(db, setup);
    }
    let pooler = PoolerProcess::start(&format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\n\
         [databases.twin_cached]\nhost = \"127.0.0.1\"\nport = {}\nquery_cache = true\n",
        pg.port
    ));
    let mut direct = Raw::login(pg.port, "postgres", "twin_direct")
        .await
        .unwrap();
    let mut pooled = Raw::login(pooler.port, "postgres", "twin_cached")
        .await
        .unwrap();
    until_serving(&pg, &mut pooled).await;
    let reads = [
        "SELECT * FROM acc WHERE id = 3",
        "SELECT owner, count(*), sum(balance) FROM acc GROUP BY owner ORDER BY owner",
        "SELECT id FROM acc WHERE balance > 200 ORDER BY id LIMIT 5",
        "SELECT max(balance) FROM acc",
    ];
    let writes = [
        "UPDATE acc SET balance = balance + 1 WHERE id = 3",
        "INSERT INTO acc VALUES (1000, 'o1', 5)",
        "DELETE FROM acc WHERE id = 7",
        "UPDATE acc SET owner = 'o9' WHERE id % 5 = 0",
        "INSERT INTO acc VALUES (1001, 'o2', 999) RETURNING *",
    ];
    let mut script = Vec::new();
    for (i, w) in writes.iter().enumerate() {
        for r in &reads {
            script.push(*r);
            script.push(*r);
        }
        script.push(*w);
        script.push(reads[i % reads.len()]);
    }
    for sql in &script {
        let want = same_tables(answer(&mut direct, sql).await);
        let got = same_tables(answer(&mut pooled, sql).await);
        assert_eq!(got, want, "{sql}");
    }
    // And the cache answered: each read reached the server fewer times than it was sent (once
    // direct, once through pgcorral per step).
    for r in reads {
        let sent = script.iter().filter(|s| **s == r).count();
        let ran = runs(&pg, r);
        assert!(ran < 2 * sent, "{r}: {ran} runs for {sent} steps");
    }
}

/// `msgs` with each RowDescription's table oids zeroed: the twins' tables are alike but not
/// the same relation.
fn same_tables(mut msgs: Vec<(u8, Vec<u8>)>) -> Vec<(u8, Vec<u8>)> {
    for (tag, body) in &mut msgs {
        if *tag != pgwire::backend::ROW_DESCRIPTION {
            continue;
        }
        let mut at = 2;
        for _ in 0..u16::from_be_bytes([body[0], body[1]]) {
            at += body[at..].iter().position(|&b| b == 0).unwrap() + 1;
            body[at..at + 4].fill(0);
            at += 18;
        }
    }
    msgs
}
