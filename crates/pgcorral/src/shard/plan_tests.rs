//! Tests of the statement planner: keys found where PostgreSQL would compare them, values read
//! as it reads them, plans shared by shape.

use super::*;
use crate::shard::key::{Function, KeyType};
use crate::shard::Table;

fn sharding() -> Sharding {
    let tables = vec![
        Table::new("t", vec!["k".into()], vec![KeyType::Int8]),
        Table::new(
            "u",
            vec!["a".into(), "b".into()],
            vec![KeyType::Text, KeyType::Int4],
        ),
    ];
    Sharding::new(
        5,
        Function::PgHash,
        tables,
        &["o".into()],
        None,
        vec![KeyType::Int8],
    )
}

fn place(s: &Sharding, sql: &str, numbered: bool) -> Place {
    plan(s, sql, numbered).place(s, sql, &|_| None)
}

fn shard(s: &Sharding, k: i64) -> Place {
    Place::Shard(s.shard_of(&[KeyType::Int8], &[Value::Int(k)]))
}

#[test]
fn keys_are_found_where_postgresql_would_compare_them() {
    let s = sharding();
    for (sql, k) in [
        ("SELECT * FROM t WHERE k = 42", 42),
        ("SELECT * FROM t WHERE 42 = k AND x > 1", 42),
        ("SELECT * FROM t x WHERE x.k = -7", -7),
        ("SELECT * FROM t WHERE k = - 7", -7),
        ("UPDATE t SET v = 1 WHERE k = '9'::int8", 9),
        ("DELETE FROM public.t WHERE k = 3", 3),
        ("INSERT INTO t (v, k) VALUES ('a', 11)", 11),
        ("SELECT * FROM t JOIN o ON o.id = t.id WHERE t.k = 5", 5),
        ("SELECT * FROM t WHERE k IN (5)", 5),
    ] {
        assert_eq!(place(&s, sql, true), shard(&s, k), "{sql}");
        assert_eq!(place(&s, sql, false), shard(&s, k), "{sql}");
    }
}

/// An integer key given as another type of number: stored as PostgreSQL's assignment
/// cast stores it (numeric rounds half away from zero, float8 half to even), compared as
/// PostgreSQL compares it (only a whole number can equal an integer).
#[test]
fn numbers_meet_an_integer_key_as_postgresql_makes_them() {
    let s = sharding();
    for (sql, k) in [
        ("SELECT * FROM t WHERE k = 7.0", 7),
        ("SELECT * FROM t WHERE k = 7e0", 7),
        ("SELECT * FROM t WHERE k = -7.00", -7),
        ("SELECT * FROM t WHERE k = 0.7E+1", 7),
        ("SELECT * FROM t WHERE k = '7'", 7),
        ("SELECT * FROM t WHERE k = ' 7 '::int8", 7),
        ("SELECT * FROM t WHERE k = '7.0'::numeric", 7),
        ("SELECT * FROM t WHERE k = '7.5'::numeric::int", 8),
        ("SELECT * FROM t WHERE k = 7.5::int4", 8),
        ("SELECT * FROM t WHERE k = 7.4::numeric(3)", 7),
        ("SELECT * FROM t WHERE k = 7.0::float8", 7),
        ("INSERT INTO t (k) VALUES (9.0)", 9),
        ("INSERT INTO t (k) VALUES (9.5)", 10),
        ("INSERT INTO t (k) VALUES (-9.5)", -10),
        ("INSERT INTO t (k) VALUES (9e0)", 9),
        ("INSERT INTO t (k) VALUES (2.5::float8)", 2),
        ("INSERT INTO t (k) VALUES ('3.5'::float8)", 4),
        ("INSERT INTO t (k) VALUES ('9')", 9),
    ] {
        assert_eq!(place(&s, sql, true), shard(&s, k), "{sql}");
        assert_eq!(place(&s, sql, false), shard(&s, k), "{sql}");
    }
    // No row can match, or PostgreSQL refuses the value (22003, 22P02): any shard.
    for sql in [
        "SELECT * FROM t WHERE k = 7.5",
        "SELECT * FROM t WHERE k = 7.5::float8",
        "SELECT * FROM t WHERE k = '7.0'",
        "SELECT * FROM t WHERE k = 'NaN'::numeric",
        "INSERT INTO t (k) VALUES (9223372036854775807.5)",
        "INSERT INTO t (k) VALUES ('9.0')",
    ] {
        assert_eq!(place(&s, sql, true), Place::Any, "{sql}");
    }
    // Beyond 2^53 several int8 keys equal one float8.
    assert!(matches!(
        place(&s, "SELECT * FROM t WHERE k = 9007199254740993::float8", true),
        Place::Default(m) if m.contains("float8")
    ));
    // Parameters: of the type the client's Parse gave them, in text or binary.
    let insert = "INSERT INTO t (k) VALUES ($1)";
    let select = "SELECT * FROM t WHERE k = $1";
    let float = 2.5f64.to_be_bytes();
    for (sql, value, binary, typed, k) in [
        (insert, &b"9.5"[..], false, Typed::Numeric, Some(10)),
        (select, b"7.0", false, Typed::Numeric, Some(7)),
        (select, b"7.5", false, Typed::Numeric, None),
        (insert, &float, true, Typed::Float8, Some(2)),
        (select, &float, true, Typed::Float8, None),
        (
            select,
            &7i16.to_be_bytes(),
            true,
            Typed::Int(KeyType::Int2),
            Some(7),
        ),
        (select, b"7", false, Typed::Key, Some(7)),
    ] {
        let p = plan(&s, sql, true);
        let got = p.place(&s, sql, &|_| {
            Some(Param {
                value: Some(value),
                binary,
                typed,
            })
        });
        assert_eq!(
            got,
            k.map_or(Place::Any, |k| shard(&s, k)),
            "{sql} {value:?}"
        );
    }
}

/// A string key is the string PostgreSQL stores: `E''` strings take backslash escapes,
/// and plain ones do too when the client's standard_conforming_strings is off.
#[test]
fn strings_are_read_as_postgresql_reads_them() {
    let s = sharding();
    let key = |a: &str| {
        Place::Shard(s.shard_of(
            &[KeyType::Text, KeyType::Int4],
            &[Value::Text(a.into()), Value::Int(1)],
        ))
    };
    for (sql, escapes, want) in [
        ("SELECT * FROM u WHERE a = E'x' AND b = 1", false, "x"),
        (
            "SELECT * FROM u WHERE a = e'it''s' AND b = 1",
            false,
            "it's",
        ),
        (r"SELECT * FROM u WHERE a = E'a\'b' AND b = 1", false, "a'b"),
        (
            r"SELECT * FROM u WHERE a = E'x\\y\n' AND b = 1",
            false,
            "x\\y\n",
        ),
        (
            r"SELECT * FROM u WHERE a = 'x\\y' AND b = 1",
            false,
            r"x\\y",
        ),
        (r"SELECT * FROM u WHERE a = 'x\\y' AND b = 1", true, r"x\y"),
        (r"SELECT * FROM u WHERE a = 'a\'b' AND b = 1", true, "a'b"),
        (r"SELECT * FROM u WHERE a = 'a\'' AND b = 1", true, "a'"),
        (r"INSERT INTO u (a, b) VALUES ('\n', 1)", true, "\n"),
        (r"INSERT INTO u (a, b) VALUES ('\n', 1)", false, r"\n"),
        ("INSERT INTO u (a, b) VALUES ('plain', 1)", true, "plain"),
    ] {
        let (mut near, mut spans) = (None, Spans::new());
        let got = s
            .plans
            .near(&mut near, &s, sql, escapes, &mut spans)
            .place_in(&s, sql, Some(&spans), &|_| None);
        assert_eq!(got, key(want), "{sql} (escapes: {escapes})");
    }
    // A text of a known shape whose string now holds a backslash is read whole.
    let (mut near, mut spans) = (None, Spans::new());
    for (sql, want) in [
        ("SELECT * FROM u WHERE a = 'p' AND b = 1", "p"),
        (r"SELECT * FROM u WHERE a = 'p\\q' AND b = 1", r"p\q"),
        ("SELECT * FROM u WHERE a = E'r' AND b = 1", "r"),
        (r"SELECT * FROM u WHERE a = E'r\tq' AND b = 1", "r\tq"),
    ] {
        let got = s.plans.near(&mut near, &s, sql, true, &mut spans).place_in(
            &s,
            sql,
            Some(&spans),
            &|_| None,
        );
        assert_eq!(got, key(want), "{sql}");
    }
}

#[test]
fn constants_the_scan_cannot_read_whole_are_not_keys_either_way() {
    let s = sharding();
    for sql in [
        "SELECT * FROM t WHERE k = 0x1F",
        "SELECT * FROM t WHERE k = 1_000",
        "SELECT * FROM t WHERE k = '1'\n'2'",
        "SELECT * FROM u WHERE a = U&'x' AND b = 1",
    ] {
        let (by_place, by_value) = (place(&s, sql, true), place(&s, sql, false));
        assert_eq!(by_place, by_value, "{sql}");
        assert!(matches!(by_place, Place::Default(_)), "{sql}: {by_place:?}");
    }
}

#[test]
fn what_cannot_be_placed_says_why() {
    let s = sharding();
    assert!(
        matches!(place(&s, "SELECT * FROM t", true), Place::Default(m) if m.contains("\"t\" (key: k)"))
    );
    assert!(
        matches!(place(&s, "SELECT * FROM other", true), Place::Default(m) if m.contains("other"))
    );
    assert!(
        matches!(place(&s, "UPDATE t SET k = 1 WHERE k = 2", true), Place::MovesKey(0, from, m) if from.len() == 1 && m.contains("move"))
    );
    assert_eq!(
        place(&s, "SELECT * FROM o", true),
        Place::Omni("\"o\"".into())
    );
    // The same table every time (found by fuzzing: it was a hash set's first).
    for _ in 0..20 {
        assert!(
            matches!(place(&s, ";SELECT * FROM jd, ptud, x", true), Place::Default(ref m) if m.contains("\"jd\"")),
            "{:?}",
            place(&s, ";SELECT * FROM jd, ptud, x", true)
        );
    }
    assert_eq!(place(&s, "SELECT 1", true), Place::Any);
    assert_eq!(place(&s, "SET x = 1", true), Place::Any);
    assert!(
        matches!(place(&s, "INSERT INTO t (k) VALUES (1), (2), (3), (4)", true), Place::SplitInsert(r) if r.len() == 4)
    );
}

#[test]
fn a_clients_near_plan_serves_until_the_plans_are_forgotten() {
    let s = sharding();
    let mut near = None;
    let none = |_: usize| None;
    let mut spans = Spans::new();
    for k in [1i64, 22] {
        let sql = format!("SELECT v FROM t WHERE k = {k}");
        assert_eq!(
            s.plans
                .near(&mut near, &s, &sql, false, &mut spans)
                .place_in(&s, &sql, Some(&spans), &none),
            shard(&s, k)
        );
    }
    let sql = "INSERT INTO t VALUES (5, 'x')";
    assert_eq!(
        s.plans
            .near(&mut near, &s, sql, false, &mut spans)
            .place_in(&s, sql, Some(&spans), &none),
        Place::NeedColumns(0)
    );
    s.plans.learn_columns(0, vec!["k".into(), "v".into()]);
    assert_eq!(
        s.plans
            .near(&mut near, &s, sql, false, &mut spans)
            .place_in(&s, sql, Some(&spans), &none),
        shard(&s, 5)
    );
    // Another configuration's plans are not taken for this one's.
    let other = sharding();
    let sql = "SELECT v FROM t WHERE k = 7";
    let _ = s.plans.near(&mut near, &s, sql, false, &mut spans);
    let before = other.plans.map.lock().len();
    let _ = other.plans.near(&mut near, &other, sql, false, &mut spans);
    assert_eq!(other.plans.map.lock().len(), before + 1);
}

#[test]
fn a_plan_of_one_shape_serves_every_constant() {
    let s = sharding();
    for k in [1i64, 22, 333, 4444] {
        let sql = format!("SELECT v FROM t WHERE k = {k}");
        assert_eq!(
            s.plans.get(&s, &sql).place(&s, &sql, &|_| None),
            shard(&s, k)
        );
    }
    assert_eq!(s.plans.map.lock().len(), 1);
}

#[test]
fn keys_on_several_shards_name_those_shards() {
    let s = sharding();
    let shard = |k: i64| s.shard_of(&[KeyType::Int8], &[Value::Int(k)]);
    let (a, b) = (1, (2..100).find(|&k| shard(k) != shard(1)).unwrap());
    let mut want = vec![shard(a), shard(b)];
    want.sort_unstable();
    match place(
        &s,
        &format!("SELECT * FROM t WHERE k IN ({a}, {b}, {a})"),
        true,
    ) {
        Place::Several(shards, why) => {
            assert_eq!(shards, want);
            assert!(why.contains("one shard"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}
