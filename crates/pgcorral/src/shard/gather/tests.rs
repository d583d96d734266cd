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

/// A grouped merge of these visible columns and no hidden ones, sorted by `order`.
fn grouped(columns: Vec<Option<Combine>>, order: Vec<SortKey>) -> Merge {
    Merge::Grouped(Box::new(Grouping {
        visible: columns.len(),
        columns,
        having: None,
        order,
    }))
}

fn grouping(g: &Gather) -> &Grouping {
    match &g.merge {
        Merge::Grouped(g) => g,
        other => panic!("not grouped: {other:?}"),
    }
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
fn joins_each_shard_answers_alone_are_planned() {
    for sql in [
        "SELECT * FROM t JOIN u USING (k)",
        "SELECT * FROM t NATURAL JOIN u",
        "SELECT t.v, u.w FROM t JOIN u ON u.k = t.k AND t.v > 1 ORDER BY t.v",
        "SELECT count(*) FROM t a LEFT JOIN u b ON a.k = b.k",
        "SELECT count(*) FROM t a FULL JOIN t b ON b.k = a.k",
        "SELECT * FROM t LEFT JOIN o ON o.id = t.v",
        "SELECT * FROM o JOIN t ON t.k = o.id",
        "SELECT * FROM o RIGHT JOIN t ON t.k = o.id",
    ] {
        assert!(planned(sql).is_ok(), "{sql}: {:?}", planned(sql));
    }
}

#[test]
fn parameters_of_limit_and_offset_stay_in_the_shards_text() {
    // LIMIT $n alone: the shards run the client's text.
    let g = planned("SELECT k FROM t ORDER BY k LIMIT $1").unwrap();
    assert_eq!((g.limit_param, g.offset_param), (Some(0), None));
    assert_eq!(g.text, "SELECT k FROM t ORDER BY k LIMIT $1");
    // With an OFFSET the shards return LIMIT + OFFSET rows and skip none, but a negative value
    // still fails there as PostgreSQL fails it.
    let g = planned("SELECT k FROM t ORDER BY k LIMIT $2 OFFSET $1").unwrap();
    assert_eq!((g.limit_param, g.offset_param), (Some(1), Some(0)));
    assert_eq!(
        g.text,
        "SELECT k FROM t ORDER BY k LIMIT CASE WHEN $2 OPERATOR(pg_catalog.<) 0::bigint THEN $2 \
         ELSE $2 OPERATOR(pg_catalog.+) GREATEST($1, 0::bigint) END OFFSET LEAST($1, 0::bigint)"
    );
    let g = planned("SELECT k FROM t ORDER BY k LIMIT 10 OFFSET $1").unwrap();
    assert_eq!((g.limit, g.offset_param), (Some(10), Some(0)));
    assert!(
        g.text.ends_with(
            "LIMIT 10 OPERATOR(pg_catalog.+) GREATEST($1, 0::bigint) OFFSET LEAST($1, 0::bigint)"
        ),
        "{}",
        g.text
    );
    // Groups: the shards return them all; only a negative LIMIT is left for them to refuse.
    let g = planned("SELECT v, count(*) FROM t GROUP BY v LIMIT $1").unwrap();
    assert_eq!(
        g.text,
        "SELECT v, count(*) FROM t GROUP BY v \
         LIMIT CASE WHEN $1 OPERATOR(pg_catalog.<) 0::bigint THEN $1 END"
    );
}

#[test]
fn plain_aggregates_are_combined() {
    let g =
        planned("SELECT count(*), sum(v), min(v), pg_catalog.max(v) FROM t WHERE v > 0").unwrap();
    assert_eq!(
        g.merge,
        grouped(
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
        grouped(vec![Some(Combine::Count)], Vec::new())
    );
}

#[test]
fn what_cannot_be_merged_is_refused_by_name() {
    for (sql, named) in [
        ("SELECT k FROM t UNION SELECT k FROM u", "UNION"),
        ("WITH x AS (SELECT 1) SELECT * FROM t", "WITH"),
        ("SELECT DISTINCT ON (v) v, w FROM t", "DISTINCT ON"),
        (
            "SELECT count(*) FROM t GROUP BY v",
            "GROUP BY a column the query does not return",
        ),
        (
            "SELECT v, w, count(*) FROM t GROUP BY v",
            "neither a GROUP BY column",
        ),
        (
            "SELECT v, avg(DISTINCT w) FROM t GROUP BY v",
            "avg(DISTINCT",
        ),
        ("SELECT v FROM t GROUP BY DISTINCT v", "GROUP BY DISTINCT"),
        ("SELECT v FROM t GROUP BY ROLLUP (v)", "GROUPING SETS"),
        ("SELECT v FROM t HAVING v > 1", "HAVING without GROUP BY"),
        (
            "SELECT v, count(*) FROM t GROUP BY v HAVING count(*) + 1 > 2",
            "HAVING other than comparisons",
        ),
        (
            "SELECT v, count(*) FROM t GROUP BY v HAVING lower(v) = 'a'",
            "not an aggregate",
        ),
        (
            "SELECT v, count(*) FROM t GROUP BY v HAVING w > 1",
            "not a GROUP BY column",
        ),
        (
            "SELECT v, count(*) FROM t GROUP BY v HAVING 1 = 1",
            "two constants",
        ),
        (
            "SELECT v, count(*) FROM t GROUP BY v HAVING count(*) IN (1, 2)",
            "HAVING other than comparisons",
        ),
        (
            "SELECT v, count(*) FROM t GROUP BY v HAVING count(*) > 1_000",
            "1_000",
        ),
        (
            "SELECT v, count(*) FROM t GROUP BY v HAVING count(*) > (SELECT 1)",
            "subquery",
        ),
        (
            "SELECT stddev(v, w) FROM t",
            "stddev of other than one argument",
        ),
        ("SELECT corr(v, w) FROM t", "corr"),
        ("SELECT string_agg(v, ',') FROM t", "string_agg"),
        ("SELECT * FROM t WHERE k IN (SELECT k FROM u)", "subquery"),
        ("SELECT * FROM (SELECT * FROM t) s", "subquery"),
        ("SELECT rank() OVER (ORDER BY k) FROM t", "window"),
        (
            "SELECT * FROM t JOIN u ON t.v = u.v",
            "join of sharded tables",
        ),
        (
            "SELECT * FROM t JOIN u ON t.k = u.k OR t.v = u.v",
            "join of sharded tables",
        ),
        (
            "SELECT * FROM t JOIN u ON t.k = u.k + 0",
            "join of sharded tables",
        ),
        ("SELECT * FROM t, u", "join of sharded tables"),
        (
            "SELECT * FROM t, u WHERE t.k = u.k",
            "join of sharded tables",
        ),
        (
            "SELECT * FROM t JOIN u ON t.k = u.k JOIN t x ON x.k = u.k",
            "join of sharded tables",
        ),
        ("SELECT * FROM o LEFT JOIN t ON t.k = o.id", "outer join"),
        ("SELECT * FROM t RIGHT JOIN o ON t.k = o.id", "outer join"),
        ("SELECT * FROM t FULL JOIN o ON t.k = o.id", "outer join"),
        ("SELECT avg(v ORDER BY v) FROM t", "avg"),
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
        grouped(
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

#[test]
fn avg_and_spreads_ask_the_shards_for_hidden_sums_and_counts() {
    let g = planned("SELECT v, avg(w) FROM t GROUP BY v").unwrap();
    assert_eq!(
        *grouping(&g),
        Grouping {
            columns: vec![
                None,
                Some(Combine::Avg { sum: 2, count: 3 }),
                Some(Combine::Sum),
                Some(Combine::Count),
            ],
            visible: 2,
            having: None,
            order: Vec::new(),
        }
    );
    assert_eq!(
        g.text,
        "SELECT v, avg(w), pg_catalog.sum(w) AS _pgcorral0_2, pg_catalog.count(w) AS _pgcorral0_3 FROM t GROUP BY v"
    );
    let g = planned("SELECT stddev_pop(w) FILTER (WHERE w > 0), variance(w) FROM t").unwrap();
    let stat = |stat, count, sum, squares| {
        Some(Combine::Spread {
            stat,
            count,
            sum,
            squares,
        })
    };
    assert_eq!(
        grouping(&g).columns,
        vec![
            stat(Spread::StddevPop, 3, 2, 4),
            stat(Spread::VarSamp, 6, 5, 7),
            Some(Combine::Sum),
            Some(Combine::Count),
            Some(Combine::Sum),
            Some(Combine::Sum),
            Some(Combine::Count),
            Some(Combine::Sum),
        ]
    );
    assert!(
        g.text.contains("pg_catalog.sum(w::numeric OPERATOR(pg_catalog.*) w::numeric) FILTER (WHERE w > 0) AS _pgcorral0_4"),
        "{}",
        g.text
    );
    // The rewritten text plans again, and its hidden names are not taken twice.
    let again = planned(&g.text).unwrap();
    assert_eq!(grouping(&again).visible, 8);
    assert!(again.text.contains("_pgcorral1_"), "{}", again.text);
    for (sql, combine) in [
        ("SELECT bool_and(b) FROM t", Combine::BoolAnd),
        ("SELECT every(b) FROM t", Combine::BoolAnd),
        ("SELECT bool_or(b) FROM t", Combine::BoolOr),
    ] {
        let g = planned(sql).unwrap();
        assert_eq!(g.merge, grouped(vec![Some(combine)], Vec::new()), "{sql}");
        assert_eq!(g.text, sql);
    }
}

#[test]
fn having_is_evaluated_on_the_merged_groups() {
    use having::{Op, Operand};
    let g = planned(
        "SELECT v, count(*) FROM t GROUP BY v HAVING count(*) > 2 AND (avg(w) <= 1.5e1 OR v IS NULL) ORDER BY v LIMIT 3",
    )
    .unwrap();
    let merged = grouping(&g);
    assert_eq!(
        merged.columns,
        vec![
            None,
            Some(Combine::Count),
            Some(Combine::Count),
            Some(Combine::Avg { sum: 4, count: 5 }),
            Some(Combine::Sum),
            Some(Combine::Count),
        ]
    );
    assert_eq!(
        merged.having,
        Some(Cond::And(vec![
            Cond::Compare(Operand::Column(2), Op::Gt, Operand::Number("2".into())),
            Cond::Or(vec![
                Cond::Compare(Operand::Column(3), Op::Le, Operand::Number("15".into())),
                Cond::IsNull(Operand::Column(0), false),
            ]),
        ]))
    );
    // No HAVING and no LIMIT for the shards: their groups are partial.
    assert_eq!(
        g.text,
        "SELECT v, count(*), count(*) AS _pgcorral0_2, avg(w) AS _pgcorral0_3, pg_catalog.sum(w) AS _pgcorral0_4, pg_catalog.count(w) AS _pgcorral0_5 FROM t GROUP BY v ORDER BY v"
    );
    assert_eq!((g.limit, g.offset), (Some(3), 0));
    let g = planned("SELECT count(*) FROM t HAVING NOT bool_or(b) IS TRUE").unwrap();
    assert!(matches!(&grouping(&g).having, Some(Cond::Not(_))));
    let g = planned("SELECT v AS x, min(w) FROM t GROUP BY x HAVING 'a' < v AND max(w) <> min(w)")
        .unwrap();
    assert_eq!(
        grouping(&g).having,
        Some(Cond::And(vec![
            Cond::Compare(Operand::Text("a".into()), Op::Lt, Operand::Column(0)),
            Cond::Compare(Operand::Column(2), Op::Ne, Operand::Column(3)),
        ]))
    );
    // Rewritten texts are PostgreSQL's deparser's, written for standard strings.
    let e = plan(
        &sharding(),
        "SELECT v, count(*) FROM t GROUP BY v HAVING count(*) > 1",
        true,
        &[],
    )
    .unwrap_err();
    assert!(e.contains("standard_conforming_strings"), "{e}");
}

#[test]
fn distinct_rows_are_deduplicated_after_the_merge() {
    let g = planned("SELECT DISTINCT v, w FROM t ORDER BY 2 DESC, v LIMIT 5 OFFSET 2").unwrap();
    assert_eq!(
        g.merge,
        Merge::Distinct(vec![
            key(Column::At(1), true, true),
            key(Column::Named("v".into()), false, false)
        ])
    );
    assert_eq!(g.text, "SELECT DISTINCT v, w FROM t ORDER BY 2 DESC, v");
    assert_eq!((g.limit, g.offset), (Some(5), 2));
    let g = planned("SELECT DISTINCT * FROM t").unwrap();
    assert_eq!(
        (g.merge, g.text.as_str()),
        (Merge::Distinct(Vec::new()), "SELECT DISTINCT * FROM t")
    );
    // DISTINCT over groups changes nothing: they differ in their keys.
    let g = planned("SELECT DISTINCT v, count(*) FROM t GROUP BY v").unwrap();
    assert_eq!(grouping(&g).columns, vec![None, Some(Combine::Count)]);
}

#[test]
fn hidden_columns_take_names_the_query_does_not_use() {
    let g = planned("SELECT v AS _pgcorral0_, avg(w) FROM t GROUP BY v").unwrap();
    assert!(g.text.contains("AS _pgcorral1_2"), "{}", g.text);
}

#[test]
fn squares_of_expressions_are_cast_whole() {
    let g = planned("SELECT stddev(v + 1) FROM t").unwrap();
    assert!(
        g.text
            .contains("pg_catalog.sum((v + 1)::numeric OPERATOR(pg_catalog.*) (v + 1)::numeric)"),
        "{}",
        g.text
    );
}

/// A rewritten text the parser cannot read back is refused, not sent (the fuzzer's find: the
/// deparser writes a prefix operator's operand and an alias so that they no longer parse).
#[test]
fn a_rewrite_that_does_not_parse_is_refused() {
    let text = "SELECT !k, x > $0 pgcor OFFSET 2";
    if pg_query::parse(text, pg_query::ParserOptions::DEFAULT).is_err() {
        return;
    }
    match plan(&sharding(), text, false, &[]) {
        Ok(g) => assert!(
            pg_query::parse(&g.text, pg_query::ParserOptions::DEFAULT).is_ok(),
            "{:?}",
            g.text
        ),
        Err(e) => assert!(
            e.contains("rewritten for the shards") || !e.is_empty(),
            "{e}"
        ),
    }
}
