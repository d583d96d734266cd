//! Reads across shards, differentially: the same rows on one unsharded PostgreSQL and split
//! over three shards behind pgcorral, the same generated queries to both (filters, ORDER BY on
//! each type with NULLs, LIMIT/OFFSET, plain and grouped aggregates among them avg, bool_and,
//! bool_or, every, the variances and standard deviations, HAVING, DISTINCT), every answer
//! compared (ordered ones in order, the others as multisets, the row count of the tag too);
//! what pgcorral cannot merge is refused by name, never answered in part.

mod support;

use support::rng::Rng;
use support::sharding::{config, start};
use support::{connect, db_message, sqlstate, Pooler, Postgres};
use tokio_postgres::{Client, SimpleQueryMessage};

const DDL: &str = "CREATE TABLE items (id int8 PRIMARY KEY, grp int4, qty int4, \
    price numeric(10,2), score float8, name text, flag bool, day date, at timestamptz, u uuid, \
    label varchar(20), code char(4), small int2, amount numeric, odd numeric); \
    CREATE TABLE colours (id int4 PRIMARY KEY, name text); \
    INSERT INTO colours VALUES (1, 'red'), (2, 'green')";

const SHARDED: &str =
    "sharded_tables = [{ name = \"items\", columns = [\"id\"], types = [\"int8\"] }]\n\
     omnisharded_tables = [\"colours\"]";

/// Row `i`'s values as SQL literals; about one value in eight is NULL, and values repeat
/// (so that sorts have ties, broken by `id`).
fn row(rng: &mut Rng, id: i64) -> String {
    let mut v = |text: String| {
        if rng.below(8) == 0 {
            "NULL".to_string()
        } else {
            text
        }
    };
    let n = id as u64;
    let values = [
        id.to_string(),
        v(format!("{}", n % 7)),
        v(format!("{}", (id * 37) % 101 - 50)),
        v(format!("{}.{:02}", n % 97, (n * 13) % 100)),
        v(match n % 11 {
            0 => "'NaN'".to_string(),
            1 => "'-Infinity'".to_string(),
            2 => "'-0'".to_string(),
            k => format!("{}e{}", (n * 7919) % 1000, k as i64 - 6),
        }),
        v(format!(
            "'{}'",
            [
                "apple",
                "Apple",
                "banana",
                "äpfel",
                "Zebra",
                "apple pie",
                ""
            ][n as usize % 7]
        )),
        v(if n.is_multiple_of(3) {
            "true".into()
        } else {
            "false".into()
        }),
        v(format!(
            "'{}'",
            [
                "2024-01-05",
                "1999-12-31",
                "0044-03-15 BC",
                "infinity",
                "2024-06-30"
            ][n as usize % 5]
        )),
        v(format!(
            "'2024-{:02}-{:02} {:02}:{:02}:00.{:03}+00'",
            n % 12 + 1,
            n % 28 + 1,
            (n * 5) % 24,
            (n * 7) % 60,
            n % 1000
        )),
        v(format!(
            "'{:08x}-0000-4000-8000-{:012x}'",
            (n * 2654435761) % (1 << 32),
            n
        )),
        v(format!("'l{}'", n % 13)),
        v(format!("'c{}'", n % 5)),
        v(format!("{}", (id * 7) % 200 - 100)),
        // Scales 0 to 3, and magnitudes from 10^-4 to 10^13.
        v(match n % 5 {
            0 => format!("{}.5", n % 40),
            1 => format!("-{}.125", n % 13),
            2 => format!("{}", n * 1001),
            3 => format!("0.000{}", n % 9),
            _ => format!("12345678901234.{:03}", n % 1000),
        }),
        // NaN and the infinities now and then.
        v(match (n % 60, n % 97) {
            (11, _) => "'Infinity'".to_string(),
            (13, _) => "'-Infinity'".to_string(),
            (_, 5) => "'NaN'".to_string(),
            _ => format!("{}.{}", n % 17, n % 3),
        }),
    ];
    format!("({})", values.join(", "))
}

/// Every row of a simple query's answer (NULL as `None`), and the row count of its tag.
async fn answer(c: &Client, sql: &str) -> Result<(Vec<Vec<Option<String>>>, Option<u64>), String> {
    let msgs = c
        .simple_query(sql)
        .await
        .map_err(|e| format!("{}: {}", sqlstate(&e), db_message(&e)))?;
    let mut rows = Vec::new();
    let mut count = None;
    for m in msgs {
        match m {
            SimpleQueryMessage::Row(r) => {
                rows.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            SimpleQueryMessage::CommandComplete(n) => count = Some(n),
            _ => {}
        }
    }
    Ok((rows, count))
}

/// The queries: (text, whether its answer's order is the query's).
fn queries() -> Vec<(String, bool)> {
    let mut rng = Rng(47);
    let filters = [
        "",
        " WHERE qty > 0",
        " WHERE grp = 3",
        " WHERE name LIKE 'a%'",
        " WHERE flag",
        " WHERE score IS NULL",
        " WHERE price BETWEEN 10 AND 40",
        " WHERE id % 5 = 1",
        // Keys on several shards: asked of those shards only.
        " WHERE id IN (3, 5, 8, 13, 21, 34, 55, 89)",
        " WHERE id IN (1, 2) OR id = 600",
    ];
    let sortable = [
        "grp", "qty", "price", "score", "name", "flag", "day", "at", "u", "label", "code", "id",
    ];
    let mut out = Vec::new();
    // Plain reads: multisets.
    for f in filters {
        out.push((format!("SELECT * FROM items{f}"), false));
        out.push((format!("SELECT id, name, price FROM items{f}"), false));
    }
    out.push((
        "SELECT i.id, c.name FROM items i JOIN colours c ON c.id = i.grp".into(),
        false,
    ));
    // Sorted reads, each type, directions and NULL placements, ties broken by id.
    for _ in 0..150 {
        let col = rng.pick(&sortable);
        let dir = rng.pick(&["", " ASC", " DESC"]);
        let nulls = rng.pick(&["", "", " NULLS FIRST", " NULLS LAST"]);
        let f = rng.pick(&filters);
        let tail = rng.pick(&[
            "",
            "",
            " LIMIT 7",
            " LIMIT 25 OFFSET 10",
            " OFFSET 590",
            " LIMIT 0",
            " LIMIT ALL",
        ]);
        let by = match rng.below(3) {
            0 => format!("{col}{dir}{nulls}, id"),
            1 => format!("2{dir}{nulls}, 1"),
            _ => format!("{col}{dir}{nulls}, id DESC"),
        };
        // `SELECT id, id … ORDER BY id` would name two columns: PostgreSQL takes them as one.
        if col != "id" {
            out.push((
                format!("SELECT id, {col} FROM items{f} ORDER BY {by}{tail}"),
                true,
            ));
        }
    }
    for _ in 0..20 {
        let col = rng.pick(&sortable);
        let f = rng.pick(&filters);
        out.push((
            format!("SELECT * FROM items{f} ORDER BY {col} DESC NULLS LAST, id LIMIT 12"),
            true,
        ));
    }
    // Plain aggregates.
    let aggregates = [
        "count(*)",
        "count(score)",
        "sum(qty)",
        "sum(price)",
        "sum(id)",
        "min(qty)",
        "max(qty)",
        "min(price)",
        "max(score)",
        "min(score)",
        "min(name)",
        "max(name)",
        "min(day)",
        "max(at)",
        "min(u)",
        "max(label)",
        "min(code)",
        "count(*) FILTER (WHERE flag)",
    ];
    for f in filters {
        for a in aggregates {
            out.push((format!("SELECT {a} FROM items{f}"), true));
        }
        out.push((
            format!("SELECT count(*), sum(qty), min(price), max(name) FROM items{f}"),
            true,
        ));
    }
    // Grouped reads: key columns of each type, aggregates beside them, ORDER BY and LIMIT on
    // the merged groups (ordered by every key, so that the order is total).
    let keys = ["grp", "flag", "day", "code", "label", "name", "price"];
    for k in keys {
        for f in filters {
            out.push((format!("SELECT {k}, count(*), sum(qty), min(score), max(at) FROM items{f} GROUP BY {k}"), false));
        }
        out.push((format!("SELECT {k}, count(*) AS n FROM items GROUP BY {k} ORDER BY n DESC, {k} NULLS FIRST LIMIT 4 OFFSET 1"), true));
        out.push((
            format!("SELECT grp, {k}, max(id) FROM items GROUP BY 1, 2 ORDER BY 1, 2 DESC"),
            true,
        ));
    }
    finished_aggregates(&mut out, &filters, &keys);
    having(&mut out, &filters, &keys);
    distinct(&mut out, &filters);
    out
}

/// avg, bool_and, bool_or, every and the variances and standard deviations over integers of
/// each width and numeric of many scales (NaN and the infinities among them), alone and grouped.
fn finished_aggregates(out: &mut Vec<(String, bool)>, filters: &[&str], keys: &[&str]) {
    let aggregates = [
        "avg(qty)",
        "avg(price)",
        "avg(id)",
        "avg(small)",
        "avg(amount)",
        "avg(odd)",
        "bool_and(flag)",
        "bool_or(flag)",
        "every(flag)",
        "stddev(qty)",
        "stddev_pop(price)",
        "variance(amount)",
        "var_pop(small)",
        "var_samp(id)",
        "stddev_samp(amount)",
        "stddev(odd)",
        "avg(qty) FILTER (WHERE flag)",
        "var_pop(amount) FILTER (WHERE grp < 3)",
    ];
    for f in filters {
        for a in aggregates {
            out.push((format!("SELECT {a} FROM items{f}"), true));
        }
        out.push((
            format!("SELECT count(*), avg(price), stddev_pop(amount), bool_or(flag), avg(amount) FROM items{f}"),
            true,
        ));
    }
    for k in keys {
        for f in filters {
            out.push((
                format!("SELECT {k}, avg(qty), bool_and(flag), stddev(price), var_pop(amount), avg(amount), count(*) FROM items{f} GROUP BY {k}"),
                false,
            ));
        }
        out.push((
            format!("SELECT {k}, avg(odd), variance(odd), every(flag), stddev_pop(small), avg(id) AS a FROM items GROUP BY {k} ORDER BY a DESC NULLS LAST, {k} LIMIT 5"),
            true,
        ));
    }
}

/// HAVING over merged groups: comparisons of each aggregate with constants of each type, with
/// other aggregates and with the group's key, combined with AND, OR, NOT and IS [NOT] NULL.
fn having(out: &mut Vec<(String, bool)>, filters: &[&str], keys: &[&str]) {
    let conditions = [
        "count(*) > 20",
        "avg(qty) > 0",
        "sum(price) >= 1000.5 OR min(name) = 'apple'",
        "NOT bool_or(flag)",
        "bool_and(flag) IS NULL",
        "stddev(qty) < 30 AND count(*) <> 0",
        "count(day) > 20 AND min(day) < '2000-01-01'",
        "min(at) < '2024-01-15 00:00:00+00'",
        "avg(amount) IS NOT NULL AND var_pop(amount) > 1e20",
        "count(score) >= 5 AND max(score) IS NOT NULL",
        "max(code) <> 'c4' AND min(label) > 'l1'",
        "max(label) >= 'l5'",
        "avg(odd) > 3.5 OR avg(odd) IS NULL",
        "count(*) > 5 IS TRUE",
        "min(qty) < max(qty) OR min(code) = 'c1'",
        "sum(qty) > avg(qty) AND NOT (max(small) >= 90)",
        "every(flag) IS NOT FALSE",
    ];
    for (i, c) in conditions.iter().enumerate() {
        let k = keys[i % keys.len()];
        let f = filters[i % filters.len()];
        out.push((
            format!("SELECT {k}, count(*), avg(qty) FROM items{f} GROUP BY {k} HAVING {c}"),
            false,
        ));
        out.push((
            format!("SELECT grp, flag, max(id) FROM items GROUP BY grp, flag HAVING {c} ORDER BY 1 NULLS FIRST, 2 DESC LIMIT 6 OFFSET 1"),
            true,
        ));
        out.push((
            format!("SELECT count(*), avg(price) FROM items{f} HAVING {c}"),
            true,
        ));
    }
    for k in keys {
        out.push((
            format!("SELECT {k}, sum(qty) FROM items GROUP BY {k} HAVING {k} IS NOT NULL AND (count(*) > 12 OR {k} IS NULL)"),
            false,
        ));
    }
    out.push((
        "SELECT grp, count(*) FROM items GROUP BY grp HAVING grp <> 3 AND grp >= 1".into(),
        false,
    ));
    out.push((
        "SELECT code AS c, min(name) FROM items GROUP BY c HAVING code <= 'c2'".into(),
        false,
    ));
}

/// SELECT DISTINCT on columns of each type (those whose equal values always print alike), with
/// ORDER BY, LIMIT and OFFSET after the merge.
fn distinct(out: &mut Vec<(String, bool)>, filters: &[&str]) {
    let columns = [
        "grp", "flag", "day", "code", "label", "name", "price", "at", "u", "small", "qty",
    ];
    for (i, c) in columns.iter().enumerate() {
        for f in [filters[0], filters[1 + i % (filters.len() - 1)]] {
            out.push((format!("SELECT DISTINCT {c} FROM items{f}"), false));
        }
        let other = if *c == "grp" { "flag" } else { "grp" };
        out.push((
            format!("SELECT DISTINCT {c}, {other} FROM items ORDER BY {c} DESC NULLS LAST, {other} NULLS FIRST LIMIT 9 OFFSET 2"),
            true,
        ));
    }
    for f in filters {
        out.push((
            format!("SELECT DISTINCT grp, flag FROM items{f} ORDER BY 1, 2 NULLS FIRST LIMIT 5 OFFSET 1"),
            true,
        ));
        out.push((
            format!("SELECT DISTINCT code, label FROM items{f} ORDER BY label DESC, code"),
            true,
        ));
    }
    out.push((
        "SELECT DISTINCT grp, count(*) FROM items GROUP BY grp".into(),
        false,
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_across_shards_answer_as_one_server_would() {
    let shards = start(3, DDL);
    let whole = Postgres::start();
    whole.sql("postgres", DDL);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    let direct = connect(whole.port, "postgres", None, "postgres")
        .await
        .unwrap();
    let mut rng = Rng(7);
    for batch in 0..12 {
        let rows: Vec<String> = (1..=50).map(|i| row(&mut rng, batch * 50 + i)).collect();
        let insert = format!("INSERT INTO items VALUES {}", rows.join(", "));
        c.simple_query(&insert).await.unwrap();
        direct.simple_query(&insert).await.unwrap();
    }
    let held: Vec<String> = shards
        .iter()
        .map(|pg| pg.sql("postgres", "SELECT count(*) FROM items"))
        .collect();
    assert!(held.iter().all(|n| n != "0" && n != "600"), "{held:?}");
    let (mut checked, mut answered) = (0, 0);
    for (sql, ordered) in queries() {
        let want = answer(&direct, &sql).await;
        let got = answer(&c, &sql).await;
        match (want, got) {
            (Ok((mut w, wn)), Ok((mut g, gn))) => {
                assert_eq!(gn, wn, "{sql}: row count");
                if !ordered {
                    w.sort();
                    g.sort();
                }
                assert_eq!(g, w, "{sql}");
                answered += 1;
            }
            (Err(w), Err(g)) => assert_eq!(g, w, "{sql}: the error"),
            (w, g) => panic!("{sql}: direct {w:?}, through pgcorral {g:?}"),
        }
        checked += 1;
    }
    assert!(checked >= 300, "{checked} queries");
    assert!(answered >= 300, "{answered} of {checked} queries answered");
    eprintln!("{checked} queries alike, {answered} of them answered with rows");
}

#[tokio::test(flavor = "multi_thread")]
async fn what_cannot_be_merged_is_refused_by_name_and_the_connection_goes_on() {
    let shards = start(3, DDL);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    c.simple_query("INSERT INTO items (id, grp, name) VALUES (1, 1, 'a'), (2, 2, 'b'), (3, 1, 'c'), (4, 2, 'd')")
        .await
        .unwrap();
    for (sql, named) in [
        (
            "SELECT grp, count(*) FROM items GROUP BY grp HAVING count(*) + 1 > 2",
            "HAVING other than comparisons",
        ),
        (
            "SELECT grp, count(*) FROM items GROUP BY grp HAVING max(score) > 1",
            "float",
        ),
        (
            "SELECT grp, count(*) FROM items GROUP BY grp HAVING min(day) > 'Jan 5 2024'",
            "HAVING constant",
        ),
        (
            "SELECT grp, count(*) FROM items GROUP BY grp HAVING min(qty) < max(qty) - 0",
            "HAVING other than comparisons",
        ),
        (
            "SELECT count(*) FROM items GROUP BY grp",
            "GROUP BY a column",
        ),
        ("SELECT avg(score) FROM items", "avg of float4 or float8"),
        (
            "SELECT grp, stddev(score) FROM items GROUP BY grp",
            "stddev or variance of float4 or float8",
        ),
        (
            "SELECT variance(score::float4) FROM items",
            "stddev or variance of float4 or float8",
        ),
        (
            "SELECT DISTINCT score FROM items",
            "DISTINCT on float column score",
        ),
        (
            "SELECT DISTINCT amount FROM items",
            "DISTINCT on numeric column amount",
        ),
        (
            "SELECT DISTINCT ON (grp) grp, id FROM items ORDER BY grp, id",
            "DISTINCT ON",
        ),
        ("SELECT count(DISTINCT grp) FROM items", "count(DISTINCT"),
        ("SELECT string_agg(name, ',') FROM items", "string_agg"),
        ("SELECT avg(DISTINCT qty) FROM items", "avg(DISTINCT"),
        (
            "SELECT * FROM items WHERE grp IN (SELECT grp FROM items WHERE id = 1)",
            "subquery",
        ),
        ("SELECT rank() OVER (ORDER BY id) FROM items", "window"),
        (
            "SELECT * FROM items a JOIN items b ON a.grp = b.grp",
            "join",
        ),
        ("SELECT name FROM items ORDER BY grp", "grp"),
        ("SELECT id FROM items ORDER BY id + 1", "expression"),
    ] {
        let e = c.simple_query(sql).await.expect_err(sql);
        assert_eq!(sqlstate(&e), "0A000", "{sql}: {}", db_message(&e));
        assert!(db_message(&e).contains(named), "{sql}: {}", db_message(&e));
        let n = answer(&c, "SELECT count(*) FROM items").await.unwrap().0;
        assert_eq!(n, vec![vec![Some("4".to_string())]], "after {sql}");
    }
    // The extended protocol is not gathered yet: refused, not answered from one shard.
    let e = c.query("SELECT * FROM items", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "0A000", "{}", db_message(&e));
    // An error on one shard reaches the client once, and the connection goes on.
    let e = c
        .simple_query("SELECT id, id / (id - 3) FROM items ORDER BY id")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22012", "{}", db_message(&e));
    assert_eq!(
        answer(&c, "SELECT max(id) FROM items").await.unwrap().0,
        vec![vec![Some("4".to_string())]]
    );
    // More groups than the database's max_gather_groups: refused whole (54000), not in part.
    drop(c);
    let p = Pooler::start(&config(
        &shards,
        "",
        &format!("{SHARDED}\nmax_gather_groups = 3"),
    ))
    .await;
    let c = p.connect("postgres", None, "app").await;
    let e = c
        .simple_query("SELECT id, count(*) FROM items GROUP BY id")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "54000", "{}", db_message(&e));
    assert_eq!(
        answer(
            &c,
            "SELECT grp, count(*) FROM items GROUP BY grp ORDER BY grp"
        )
        .await
        .unwrap()
        .0
        .len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_reaches_every_shard_of_a_read() {
    let shards = start(3, DDL);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    c.simple_query("INSERT INTO items (id) VALUES (1), (2), (3), (4), (5), (6), (7), (8), (9)")
        .await
        .unwrap();
    // Each shard holds rows of a 5 s sleep each: uncancelled, a shard takes 10 s or more.
    let token = c.cancel_token();
    let started = std::time::Instant::now();
    let cancel = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        token.cancel_query(tokio_postgres::NoTls).await
    });
    let e = c
        .simple_query("SELECT id, pg_sleep(5) FROM items")
        .await
        .unwrap_err();
    cancel.await.unwrap().unwrap();
    assert_eq!(sqlstate(&e), "57014", "{}", db_message(&e));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "every shard's query cancelled: {:?}",
        started.elapsed()
    );
    assert_eq!(
        answer(&c, "SELECT count(*) FROM items").await.unwrap().0,
        vec![vec![Some("9".to_string())]]
    );
}
