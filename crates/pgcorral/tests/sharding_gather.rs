//! Reads across shards, differentially: the same rows on one unsharded PostgreSQL and split
//! over three shards behind pgcorral, the same generated queries to both (filters, ORDER BY on
//! each type with NULLs, LIMIT/OFFSET, plain and grouped aggregates among them avg, bool_and,
//! bool_or, every, the variances and standard deviations, HAVING, DISTINCT), every answer
//! compared (ordered ones in order, the others as multisets, the row count of the tag too);
//! what pgcorral cannot merge is refused by name, never answered in part.

mod support;

use support::rng::Rng;
use support::sharding::{config, start};
use support::wire::{self, tags, Msg, Param, Wire};
use support::{connect, db_message, sqlstate, Pooler, Postgres};
use tokio_postgres::{Client, SimpleQueryMessage};

const DDL: &str = "CREATE TABLE items (id int8 PRIMARY KEY, grp int4, qty int4, \
    price numeric(10,2), score float8, name text, flag bool, day date, at timestamptz, u uuid, \
    label varchar(20), code char(4), small int2, amount numeric, odd numeric); \
    CREATE TABLE colours (id int4 PRIMARY KEY, name text); \
    INSERT INTO colours VALUES (1, 'red'), (2, 'green'); \
    CREATE TABLE notes (item_id int8, n int4, body text)";

const SHARDED: &str =
    "sharded_tables = [{ name = \"items\", columns = [\"id\"], types = [\"int8\"] }, \
     { name = \"notes\", columns = [\"item_id\"], types = [\"int8\"] }]\n\
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
    // Joins each shard answers alone: two sharded tables on their keys, any join type; an
    // omnisharded table on the side an outer join may drop.
    for (sql, ordered) in [
        ("SELECT i.id, n.n, n.body FROM items i JOIN notes n ON n.item_id = i.id", false),
        ("SELECT i.id, n.body FROM items i LEFT JOIN notes n ON n.item_id = i.id WHERE i.id < 90", false),
        ("SELECT n.item_id, i.name FROM notes n LEFT JOIN items i ON i.id = n.item_id AND i.flag", false),
        ("SELECT i.grp, n.n FROM items i FULL JOIN notes n ON i.id = n.item_id", false),
        ("SELECT a.id, b.name FROM items a JOIN items b ON a.id = b.id WHERE a.qty > 10", false),
        ("SELECT i.name, c.name FROM items i LEFT JOIN colours c ON c.id = i.grp", false),
        ("SELECT i.id, n.n FROM items i JOIN notes n ON n.item_id = i.id ORDER BY 1 DESC, 2 LIMIT 25", true),
        ("SELECT i.grp, count(*), count(n.n), sum(n.n) FROM items i LEFT JOIN notes n ON i.id = n.item_id GROUP BY i.grp ORDER BY 1 NULLS FIRST", true),
        ("SELECT count(*), count(i.id), count(n.item_id) FROM items i FULL JOIN notes n ON n.item_id = i.id", true),
        ("SELECT DISTINCT n.body FROM notes n JOIN items i ON i.id = n.item_id ORDER BY 1", true),
        // LIMIT and OFFSET constants with a fraction or beyond int4: rounded as PostgreSQL does.
        ("SELECT id FROM items ORDER BY id LIMIT 2.5", true),
        ("SELECT id FROM items ORDER BY id DESC LIMIT 3.5 OFFSET 1.5", true),
        ("SELECT id FROM items ORDER BY id LIMIT 10000000000 OFFSET 595", true),
        ("SELECT grp, count(*) FROM items GROUP BY grp ORDER BY grp NULLS FIRST LIMIT 2.4", true),
    ] {
        out.push((sql.into(), ordered));
    }
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

/// Three shards and one whole server, both holding the same 600 generated rows (loaded
/// through pgcorral into the shards), and pgcorral over the shards.
async fn loaded() -> (Vec<Postgres>, Postgres, Pooler, Client, Client) {
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
    // Notes of most items (none, one or several), and of items that do not exist.
    for item in (1..=650).filter(|i| i % 3 != 0) {
        let notes: Vec<String> = (0..item % 4)
            .map(|n| format!("({item}, {n}, 'note {}')", (item * 7 + n) % 13))
            .collect();
        if notes.is_empty() {
            continue;
        }
        let insert = format!("INSERT INTO notes VALUES {}", notes.join(", "));
        c.simple_query(&insert).await.unwrap();
        direct.simple_query(&insert).await.unwrap();
    }
    let held: Vec<String> = shards
        .iter()
        .map(|pg| pg.sql("postgres", "SELECT count(*) FROM items"))
        .collect();
    assert!(held.iter().all(|n| n != "0" && n != "600"), "{held:?}");
    (shards, whole, p, c, direct)
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_across_shards_answer_as_one_server_would() {
    let (_shards, _whole, _p, c, direct) = loaded().await;
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

/// The messages of one extended-protocol request (Parse, Bind with `params`, Describe of the
/// portal, Execute, Sync) up to its ReadyForQuery.
async fn extended(w: &mut Wire, sql: &str, params: &[Param<'_>], binary: bool) -> Vec<Msg> {
    request(w, (sql, &[]), (params, binary), false).await
}

/// One Parse (declaring `types`), Bind, Describe of the portal, Execute, Sync (with a Describe
/// of the statement after the Parse when `statement`), and the answers up to ReadyForQuery.
async fn request(
    w: &mut Wire,
    (sql, types): (&str, &[u32]),
    (params, binary): (&[Param<'_>], bool),
    statement: bool,
) -> Vec<Msg> {
    let mut messages = vec![wire::parse("", sql, types)];
    if statement {
        messages.push(wire::describe(b'S', ""));
    }
    messages.extend([
        wire::bind("", "", params, binary),
        wire::describe(b'P', ""),
        wire::execute("", 0),
        wire::sync(),
    ]);
    w.send_all(&messages).await;
    w.until_ready().await
}

/// [`extended`] with a Describe of the statement after its Parse: the parameters' types are
/// compared too.
async fn described(w: &mut Wire, sql: &str, params: &[Param<'_>], binary: bool) -> Vec<Msg> {
    request(w, (sql, &[]), (params, binary), true).await
}

/// `bind` (a whole Bind message asking no result formats) asking `codes` instead.
fn result_formats(mut bind: Vec<u8>, codes: &[i16]) -> Vec<u8> {
    bind.truncate(bind.len() - 2);
    bind.extend_from_slice(&(codes.len() as i16).to_be_bytes());
    for c in codes {
        bind.extend_from_slice(&c.to_be_bytes());
    }
    let len = (bind.len() - 1) as i32;
    bind[1..5].copy_from_slice(&len.to_be_bytes());
    bind
}

/// A RowDescription's fields without the table OID and column number (each server's own).
fn columns(m: &Msg) -> Vec<(String, Vec<u8>)> {
    let mut b = &m.body[2..];
    let mut out = Vec::new();
    while let Some(end) = b.iter().position(|&c| c == 0) {
        out.push((
            String::from_utf8_lossy(&b[..end]).into_owned(),
            b[end + 7..end + 19].to_vec(),
        ));
        b = &b[end + 19..];
    }
    out
}

/// Compares one request's messages direct (`want`) and through pgcorral (`got`): the same
/// messages, rows in order when `ordered` (else as a multiset). `Err`: pgcorral refused what
/// the server answered (its message).
fn alike(sql: &str, want: &[Msg], got: &[Msg], ordered: bool) -> Result<(), String> {
    let tags = |m: &[Msg]| {
        m.iter()
            .map(|m| m.tag)
            .filter(|&t| t != b'D')
            .collect::<Vec<_>>()
    };
    if let (Some(e), None) = (
        got.iter().find(|m| m.tag == b'E'),
        want.iter().find(|m| m.tag == b'E'),
    ) {
        return Err(format!(
            "{}: {}",
            e.code(),
            e.field(b'M').unwrap_or_default()
        ));
    }
    assert_eq!(tags(got), tags(want), "{sql}: {got:?} / {want:?}");
    let rows = |m: &[Msg]| {
        let mut r: Vec<Vec<u8>> = m
            .iter()
            .filter(|m| m.tag == b'D')
            .map(|m| m.body.clone())
            .collect();
        if !ordered {
            r.sort();
        }
        r
    };
    assert_eq!(rows(got), rows(want), "{sql}: rows");
    for (g, w) in got.iter().zip(want).filter(|(g, _)| g.tag != b'D') {
        match g.tag {
            b'T' => assert_eq!(columns(g), columns(w), "{sql}: columns"),
            b't' => assert_eq!(g.body, w.body, "{sql}: parameter types"),
            b'E' => assert_eq!(
                (g.code(), g.field(b'M')),
                (w.code(), w.field(b'M')),
                "{sql}"
            ),
            _ => {}
        }
    }
    let (g, w) = (
        got.iter().filter(|m| m.tag != b'D'),
        want.iter().filter(|m| m.tag != b'D'),
    );
    for (g, w) in g.zip(w).filter(|(g, _)| g.tag == b'C') {
        assert_eq!(g.text(), w.text(), "{sql}: tag");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_across_shards_through_the_extended_protocol_answer_as_one_server_would() {
    let (shards, whole, p, _c, _direct) = loaded().await;
    let mut via = Wire::connect(p.addr.port(), "postgres", "app").await;
    let mut direct = Wire::connect(whole.port, "postgres", "postgres").await;
    let (mut checked, mut text, mut binary, mut refused) = (0, 0, 0, 0);
    // Every query in text, and in binary (every column the client asks binary).
    for (i, (sql, ordered)) in queries().into_iter().enumerate() {
        let in_binary = i % 2 == 1;
        let want = extended(&mut direct, &sql, &[], in_binary).await;
        let got = extended(&mut via, &sql, &[], in_binary).await;
        match alike(&sql, &want, &got, ordered) {
            Ok(_) if in_binary => binary += 1,
            Ok(_) => text += 1,
            // In binary, columns of types pgcorral reads in text only are refused by name.
            Err(e) if in_binary && e.starts_with("0A000") && e.contains("binary") => refused += 1,
            Err(e) => panic!("{sql}: refused through pgcorral: {e}"),
        }
        checked += 1;
    }
    // Parameters, in text and binary, with the key among them (placed by ANY of an array).
    let with_params: [(&str, Vec<Param>, bool); 22] = [
        ("SELECT id, qty FROM items WHERE grp = $1 ORDER BY id", vec![Param::Text("3")], true),
        ("SELECT count(*), sum(qty), avg(price) FROM items WHERE qty > $1", vec![Param::Binary(10i32.to_be_bytes().to_vec())], true),
        ("SELECT id, name FROM items WHERE id = ANY($1::int8[]) ORDER BY id DESC", vec![Param::Text("{1,2,3,50,77,599}")], true),
        ("SELECT grp, count(*), min(day), max(at) FROM items WHERE flag = $1 GROUP BY grp ORDER BY grp", vec![Param::Text("true")], true),
        ("SELECT DISTINCT code FROM items WHERE small < $1 ORDER BY code", vec![Param::Text("0")], true),
        ("SELECT id, u FROM items WHERE label = $1 ORDER BY u NULLS FIRST, id LIMIT 5", vec![Param::Text("l3")], true),
        ("SELECT id, name FROM items WHERE grp = $1 ORDER BY name COLLATE \"C\", id LIMIT $2", vec![Param::Text("2"), Param::Text("7")], true),
        ("SELECT id FROM items LIMIT $1", vec![Param::Binary(600i64.to_be_bytes().to_vec())], false),
        // LIMIT and OFFSET as parameters, with groups, DISTINCT and aggregates too; NULL
        // and negative values as PostgreSQL takes them (2201W, 2201X, OFFSET's first).
        ("SELECT grp, count(*) FROM items GROUP BY grp ORDER BY grp NULLS FIRST LIMIT $1", vec![Param::Text("2")], true),
        ("SELECT grp, sum(qty) FROM items GROUP BY grp ORDER BY 2 DESC NULLS LAST, 1 LIMIT $1 OFFSET $2", vec![Param::Text("3"), Param::Text("1")], true),
        ("SELECT id, name FROM items ORDER BY name NULLS LAST, id LIMIT $1 OFFSET $2", vec![Param::Text("5"), Param::Text("17")], true),
        ("SELECT id FROM items ORDER BY id DESC OFFSET $1", vec![Param::Binary(590i32.to_be_bytes().to_vec())], true),
        ("SELECT id FROM items ORDER BY id LIMIT 4 OFFSET $1", vec![Param::Text("3")], true),
        ("SELECT id, qty FROM items ORDER BY qty NULLS FIRST, id LIMIT $1 OFFSET 2", vec![Param::Binary(6i16.to_be_bytes().to_vec())], true),
        ("SELECT DISTINCT grp FROM items ORDER BY grp LIMIT $1 OFFSET $2", vec![Param::Text("2"), Param::Text("1")], true),
        ("SELECT count(*), max(id) FROM items OFFSET $1", vec![Param::Text("1")], true),
        ("SELECT count(*), max(id) FROM items LIMIT $1", vec![Param::Text("0")], true),
        ("SELECT id FROM items ORDER BY id LIMIT $1 OFFSET $2", vec![Param::Null, Param::Null], true),
        ("SELECT id FROM items ORDER BY id LIMIT $1 OFFSET $2", vec![Param::Text("-1"), Param::Text("2")], true),
        ("SELECT id FROM items ORDER BY id LIMIT $1 OFFSET $2", vec![Param::Text("-1"), Param::Text("-2")], true),
        ("SELECT grp, count(*) FROM items GROUP BY grp LIMIT $1", vec![Param::Text("-3")], true),
        ("SELECT id FROM items ORDER BY id LIMIT $1", vec![Param::Text("-1")], true),
    ];
    for (sql, params, ordered) in &with_params {
        for in_binary in [false, true] {
            let want = described(&mut direct, sql, params, in_binary).await;
            let got = described(&mut via, sql, params, in_binary).await;
            match alike(sql, &want, &got, *ordered) {
                Ok(_) => checked += 1,
                Err(e) => panic!("{sql}: refused through pgcorral: {e}"),
            }
        }
    }
    // LIMIT and OFFSET parameters the client declared of another type than bigint: read as
    // PostgreSQL coerces them (numeric rounded half away from zero, float8 to even); one of a
    // type with no cast to bigint fails as on one server.
    let typed: [(&str, &[u32], Vec<Param>); 6] = [
        (
            "SELECT id FROM items ORDER BY id LIMIT $1",
            &[1700],
            vec![Param::Text("2.5")],
        ),
        (
            "SELECT id FROM items ORDER BY id LIMIT $1",
            &[701],
            vec![Param::Text("2.5")],
        ),
        (
            "SELECT id FROM items ORDER BY id DESC LIMIT $1",
            &[701],
            vec![Param::Binary(3.5f64.to_be_bytes().to_vec())],
        ),
        (
            "SELECT id FROM items ORDER BY id LIMIT $1 OFFSET $2",
            &[1700, 701],
            vec![Param::Text("3.5"), Param::Text("1.5")],
        ),
        (
            "SELECT grp, count(*) FROM items GROUP BY grp ORDER BY grp NULLS FIRST LIMIT $1",
            &[1700],
            vec![Param::Text("-0.4")],
        ),
        (
            "SELECT id FROM items ORDER BY id LIMIT $1",
            &[25],
            vec![Param::Text("3")],
        ),
    ];
    for (sql, types, params) in &typed {
        let want = request(&mut direct, (sql, types), (params, false), true).await;
        let got = request(&mut via, (sql, types), (params, false), true).await;
        match alike(sql, &want, &got, true) {
            Ok(_) => checked += 1,
            Err(e) => panic!("{sql} {types:?}: refused through pgcorral: {e}"),
        }
    }
    // Result formats that fit neither one per column nor one for all: PostgreSQL's error,
    // counting the client's columns (not the merge's hidden ones).
    let sql = "SELECT grp, avg(qty) FROM items GROUP BY grp";
    let mut answers = Vec::new();
    for w in [&mut direct, &mut via] {
        w.send_all(&[
            wire::parse("", sql, &[]),
            result_formats(wire::bind("", "", &[], false), &[1, 0, 1]),
            wire::describe(b'P', ""),
            wire::execute("", 0),
            wire::sync(),
        ])
        .await;
        answers.push(w.until_ready().await);
    }
    assert_eq!(tags(&answers[0]), "1EZ");
    if let Err(e) = alike(sql, &answers[0], &answers[1], false) {
        panic!("{sql}: {e}");
    }
    // A Parse of a name the client already holds, in a read across shards: PostgreSQL's
    // 42P05, and nothing of the request runs.
    let sql = "SELECT id FROM items ORDER BY id";
    let mut answers = Vec::new();
    for w in [&mut direct, &mut via] {
        w.send_all(&[wire::parse("dup", "SELECT 1", &[]), wire::sync()])
            .await;
        assert_eq!(tags(&w.until_ready().await), "1Z");
        w.send_all(&[
            wire::parse("dup", sql, &[]),
            wire::bind("", "dup", &[], false),
            wire::execute("", 0),
            wire::sync(),
        ])
        .await;
        answers.push(w.until_ready().await);
    }
    assert_eq!(tags(&answers[0]), "EZ");
    assert_eq!(answers[0][0].code(), "42P05");
    if let Err(e) = alike(sql, &answers[0], &answers[1], true) {
        panic!("{sql}: {e}");
    }
    assert!(
        text >= 300 && binary >= 250,
        "{text} in text, {binary} in binary, {refused} refused"
    );
    eprintln!(
        "{checked} requests alike: {text} in text, {binary} in binary; {refused} refused in binary"
    );
    // A prepared statement (parsed and described in a request of its own, as drivers do),
    // bound and executed twice, binary results: tokio-postgres.
    let c = p.connect("postgres", None, "app").await;
    let d = connect(whole.port, "postgres", None, "postgres")
        .await
        .unwrap();
    let sql = "SELECT grp, count(*) AS n, sum(qty) AS q, max(name) AS m FROM items WHERE id > $1 GROUP BY grp ORDER BY grp NULLS FIRST";
    let (sc, sd) = (c.prepare(sql).await.unwrap(), d.prepare(sql).await.unwrap());
    for from in [0i64, 300] {
        let read = |rows: Vec<tokio_postgres::Row>| {
            rows.iter()
                .map(|r| {
                    (
                        r.get::<_, Option<i32>>(0),
                        r.get::<_, i64>(1),
                        r.get::<_, Option<i64>>(2),
                        r.get::<_, Option<String>>(3),
                    )
                })
                .collect::<Vec<_>>()
        };
        let got = read(c.query(&sc, &[&from]).await.unwrap());
        assert_eq!(got, read(d.query(&sd, &[&from]).await.unwrap()));
        assert_eq!(got.len(), 8);
    }
    // An Execute with a row count: its rows, then PortalSuspended, as PostgreSQL gives them.
    for w in [&mut via, &mut direct] {
        w.send_all(&[
            wire::parse("", "SELECT id FROM items ORDER BY id", &[]),
            wire::bind("", "", &[], false),
            wire::execute("", 3),
            wire::sync(),
        ])
        .await;
    }
    let (g, w) = (via.until_ready().await, direct.until_ready().await);
    assert_eq!(g, w);
    assert_eq!(tags(&g), "12DDDsZ");
    // An error from the shards at Bind: the client's Parse answered, then the error.
    let bad = [Param::Text("x")];
    let (w, g) = (
        extended(
            &mut direct,
            "SELECT id FROM items WHERE qty > $1::int4",
            &bad,
            false,
        )
        .await,
        extended(
            &mut via,
            "SELECT id FROM items WHERE qty > $1::int4",
            &bad,
            false,
        )
        .await,
    );
    assert_eq!(tags(&g), tags(&w));
    assert_eq!(g.last().unwrap().body, w.last().unwrap().body);
    drop(shards);
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
        ("SELECT * FROM items i JOIN notes n ON n.n = i.grp", "join"),
        (
            "SELECT c.name, i.id FROM colours c LEFT JOIN items i ON i.grp = c.id",
            "outer join",
        ),
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
    // Through the extended protocol too (tokio-postgres asks every column in binary).
    assert_eq!(c.query("SELECT * FROM items", &[]).await.unwrap().len(), 4);
    // A LIMIT given as a parameter: the merge takes its value from the Bind.
    let ids: Vec<i64> = c
        .query("SELECT id FROM items ORDER BY id LIMIT $1", &[&2i64])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [1, 2]);
    // With GROUP BY the shards return every group and the merge counts the LIMIT.
    let groups = c
        .query(
            "SELECT grp, count(*) FROM items GROUP BY grp ORDER BY grp LIMIT $1",
            &[&1i64],
        )
        .await
        .unwrap();
    assert_eq!(groups.len(), 1);
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

#[tokio::test(flavor = "multi_thread")]
async fn reads_across_shards_inside_a_transaction_see_it_and_fail_it() {
    let shards = start(3, DDL);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let mut c = p.connect("postgres", None, "app").await;
    let other = p.connect("postgres", None, "app").await;
    c.simple_query("INSERT INTO items (id, grp) VALUES (1, 1), (2, 2), (3, 1), (4, 2)")
        .await
        .unwrap();
    let n = |rows: (Vec<Vec<Option<String>>>, Option<u64>)| rows.0[0][0].clone().unwrap();
    // The transaction's own writes are seen by its reads across shards, through either
    // protocol, and go with its ROLLBACK.
    c.simple_query("BEGIN").await.unwrap();
    c.simple_query("INSERT INTO items (id, grp) VALUES (10, 3), (11, 3), (12, 3)")
        .await
        .unwrap();
    let seen = answer(&c, "SELECT count(*) FROM items").await.unwrap();
    assert_eq!(n(seen), "7");
    let ids: Vec<i64> = c
        .query("SELECT id FROM items WHERE grp = $1 ORDER BY id", &[&3i32])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [10, 11, 12]);
    assert_eq!(
        n(answer(&other, "SELECT count(*) FROM items").await.unwrap()),
        "4"
    );
    c.simple_query("ROLLBACK").await.unwrap();
    assert_eq!(
        n(answer(&c, "SELECT count(*) FROM items").await.unwrap()),
        "4"
    );
    // A read as the transaction's first statement begins it on every shard; REPEATABLE READ
    // keeps each shard's snapshot for the transaction's later reads.
    c.simple_query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    assert_eq!(
        n(answer(&c, "SELECT count(*) FROM items").await.unwrap()),
        "4"
    );
    other
        .simple_query("INSERT INTO items (id) VALUES (20), (21), (22), (23)")
        .await
        .unwrap();
    assert_eq!(
        n(answer(&c, "SELECT count(*) FROM items").await.unwrap()),
        "4"
    );
    c.simple_query("COMMIT").await.unwrap();
    assert_eq!(
        n(answer(&c, "SELECT count(*) FROM items").await.unwrap()),
        "8"
    );
    // A driver's transaction (tokio-postgres: extended BEGIN, binary results).
    let t = c.transaction().await.unwrap();
    t.execute("INSERT INTO items (id, grp) VALUES (30, 5)", &[])
        .await
        .unwrap();
    let total: i64 = t
        .query_one("SELECT count(*) FROM items", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(total, 9);
    t.commit().await.unwrap();
    // An error on a shard fails the transaction everywhere, as on one server.
    c.simple_query("BEGIN").await.unwrap();
    c.simple_query("INSERT INTO items (id) VALUES (40)")
        .await
        .unwrap();
    let e = c
        .simple_query("SELECT id, 1 / (id - 3) FROM items ORDER BY id")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22012", "{}", db_message(&e));
    let e = c.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(sqlstate(&e), "25P02", "{}", db_message(&e));
    c.simple_query("ROLLBACK").await.unwrap();
    // What cannot be merged is refused, and that fails the transaction too.
    c.simple_query("BEGIN").await.unwrap();
    let e = c
        .simple_query("SELECT string_agg(name, ',') FROM items")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&e), "0A000", "{}", db_message(&e));
    let e = c.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(sqlstate(&e), "25P02", "{}", db_message(&e));
    c.simple_query("ROLLBACK").await.unwrap();
    assert_eq!(
        n(answer(&c, "SELECT count(*) FROM items").await.unwrap()),
        "9"
    );
    for pg in &shards {
        assert_eq!(
            pg.sql("postgres", "SELECT count(*) FROM pg_prepared_xacts"),
            "0"
        );
    }
}
