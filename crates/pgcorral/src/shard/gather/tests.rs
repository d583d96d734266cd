//! Tests of the gather planner: what is merged how, and what is refused by name.

use super::*;
use crate::shard::key::{Function, KeyType};
use crate::shard::Table;

fn sharding() -> Sharding {
    let tables = vec![
        Table::new("t", vec!["k".into()], vec![KeyType::Int8]),
        Table::new("u", vec!["k".into()], vec![KeyType::Int8]),
    ];
    Sharding::new(
        3,
        Function::PgHash,
        tables,
        &["o".into()],
        None,
        vec![KeyType::Int8],
    )
}

fn planned(sql: &str) -> Result<Gather, String> {
    plan(&sharding(), sql, false, &["my_agg".to_string()])
}

fn key(column: Column, desc: bool, nulls_first: bool) -> SortKey {
    SortKey {
        column,
        desc,
        nulls_first,
        collate_c: false,
    }
}

#[test]
fn plain_reads_are_concatenated_as_sent() {
    for sql in [
        "SELECT * FROM t",
        "select k, v from t where v > 3",
        "SELECT t.k, o.name FROM t JOIN o ON o.id = t.o_id",
        "SELECT * FROM t LIMIT 5",
        "SELECT lower(v) FROM t FOR UPDATE",
    ] {
        let g = planned(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(g.merge, Merge::Concat, "{sql}");
        assert_eq!(g.text, sql);
    }
    let g = planned("SELECT * FROM t LIMIT 5").unwrap();
    assert_eq!((g.limit, g.offset), (Some(5), 0));
}

#[test]
fn order_by_names_output_columns_with_postgresql_defaults() {
    let g =
        planned("SELECT t.k, v AS w FROM t ORDER BY w DESC, 1 NULLS FIRST, t.k, 2 ASC NULLS LAST")
            .unwrap();
    assert_eq!(
        g.merge,
        Merge::Sorted(vec![
            key(Column::Named("w".into()), true, true),
            key(Column::At(0), false, true),
            key(Column::At(0), false, false),
            key(Column::At(1), false, false),
        ])
    );
    let g = planned(r#"SELECT v FROM t ORDER BY v COLLATE "C" DESC NULLS LAST"#).unwrap();
    assert_eq!(
        g.merge,
        Merge::Sorted(vec![SortKey {
            column: Column::Named("v".into()),
            desc: true,
            nulls_first: false,
            collate_c: true,
        }])
    );
}

#[test]
fn an_offset_is_counted_after_the_merge() {
    let g = planned("SELECT k FROM t ORDER BY k LIMIT 10 OFFSET 5").unwrap();
    assert_eq!((g.limit, g.offset), (Some(10), 5));
    assert_eq!(g.text, "SELECT k FROM t ORDER BY k LIMIT 15");
    let g = planned("SELECT k FROM t ORDER BY k OFFSET 5").unwrap();
    assert_eq!((g.limit, g.offset), (None, 5));
    assert_eq!(g.text, "SELECT k FROM t ORDER BY k");
    let g = planned("SELECT k FROM t ORDER BY k LIMIT ALL").unwrap();
    assert_eq!((g.limit, g.offset), (None, 0));
}

#[test]
fn plain_aggregates_are_combined() {
    let g =
        planned("SELECT count(*), sum(v), min(v), pg_catalog.max(v) FROM t WHERE v > 0").unwrap();
    assert_eq!(
        g.merge,
        Merge::Grouped(
            vec![
                Some(Combine::Count),
                Some(Combine::Sum),
                Some(Combine::Min),
                Some(Combine::Max)
            ],
            Vec::new()
        )
    );
    assert_eq!(
        planned("SELECT count(v) FILTER (WHERE v > 1) FROM t")
            .unwrap()
            .merge,
        Merge::Grouped(vec![Some(Combine::Count)], Vec::new())
    );
}

#[test]
fn what_cannot_be_merged_is_refused_by_name() {
    for (sql, named) in [
        ("SELECT k FROM t UNION SELECT k FROM u", "UNION"),
        ("WITH x AS (SELECT 1) SELECT * FROM t", "WITH"),
        ("SELECT DISTINCT v FROM t", "DISTINCT"),
        (
            "SELECT count(*) FROM t GROUP BY v",
            "GROUP BY a column the query does not return",
        ),
        (
            "SELECT v, w, count(*) FROM t GROUP BY v",
            "neither a GROUP BY column",
        ),
        ("SELECT v, avg(w) FROM t GROUP BY v", "avg"),
        ("SELECT v FROM t GROUP BY DISTINCT v", "GROUP BY DISTINCT"),
        ("SELECT v FROM t GROUP BY ROLLUP (v)", "GROUPING SETS"),
        ("SELECT count(*) FROM t HAVING count(*) > 1", "HAVING"),
        ("SELECT * FROM t WHERE k IN (SELECT k FROM u)", "subquery"),
        ("SELECT * FROM (SELECT * FROM t) s", "subquery"),
        ("SELECT rank() OVER (ORDER BY k) FROM t", "window"),
        ("SELECT * FROM t JOIN u USING (k)", "join of sharded tables"),
        ("SELECT * FROM t, u", "join of sharded tables"),
        ("SELECT avg(v) FROM t", "avg"),
        ("SELECT count(DISTINCT v) FROM t", "count(DISTINCT"),
        ("SELECT count(*) + 1 FROM t", "not an aggregate itself"),
        ("SELECT k, count(*) FROM t", "not an aggregate itself"),
        ("SELECT my_agg(v) FROM t", "my_agg"),
        ("SELECT public.sum(v) FROM t", "sum"),
        ("SELECT * FROM t ORDER BY k + 1", "expression"),
        ("SELECT * FROM t ORDER BY k USING <", "USING"),
        ("SELECT v FROM t ORDER BY v COLLATE \"de_DE\"", "de_DE"),
        ("SELECT * FROM t LIMIT 2 + 1", "LIMIT"),
        ("SELECT * FROM t FETCH FIRST 2 ROWS WITH TIES", "WITH TIES"),
        ("SELECT 1; SELECT * FROM t", "several statements"),
        ("UPDATE t SET v = 1", NOT_A_READ),
        ("SELECT * INTO x FROM t", "SELECT INTO"),
    ] {
        match planned(sql) {
            Ok(g) => panic!("{sql}: planned {g:?}"),
            Err(e) => assert!(e.contains(named), "{sql}: {e}"),
        }
    }
}

#[test]
fn groups_are_merged_by_their_output_key_columns() {
    let g =
        planned("SELECT v, count(*), max(w) FROM t GROUP BY v ORDER BY 2 DESC, v LIMIT 3 OFFSET 1")
            .unwrap();
    assert_eq!(
        g.merge,
        Merge::Grouped(
            vec![None, Some(Combine::Count), Some(Combine::Max)],
            vec![
                key(Column::At(1), true, true),
                key(Column::Named("v".into()), false, false)
            ]
        )
    );
    assert_eq!((g.limit, g.offset), (Some(3), 1));
    // The shards return all their groups: LIMIT and OFFSET count merged groups.
    assert_eq!(
        g.text,
        "SELECT v, count(*), max(w) FROM t GROUP BY v ORDER BY 2 DESC, v"
    );
    for sql in [
        "SELECT t.v AS x, sum(w) FROM t GROUP BY t.v",
        "SELECT v AS x, sum(w) FROM t GROUP BY x",
        "SELECT v, sum(w) FROM t GROUP BY 1",
        "SELECT v FROM t GROUP BY v",
    ] {
        let g = planned(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert!(matches!(g.merge, Merge::Grouped(..)), "{sql}");
        assert_eq!(g.text, sql);
    }
}

#[test]
fn without_the_catalog_a_function_that_may_be_an_aggregate_is_refused() {
    let s = sharding();
    let e = plan(&s, "SELECT my_agg(v) AS x FROM t", false, &[]).unwrap_err();
    assert!(e.contains("aggregates are unknown"), "{e}");
    let e = plan(&s, "SELECT lower(v) FROM t", false, &[]).unwrap_err();
    assert!(e.contains("aggregates are unknown"), "{e}");
    // PostgreSQL's own aggregates, and reads without function calls, are still planned.
    assert!(plan(&s, "SELECT count(*), max(v) FROM t", false, &[]).is_ok());
    assert!(plan(&s, "SELECT * FROM t ORDER BY v", false, &[]).is_ok());
}
