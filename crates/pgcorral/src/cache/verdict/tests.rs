//! The verdict on texts against a small hand-made catalog.

use super::*;

fn catalog() -> Catalog {
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
    let mut relations = HashMap::new();
    relations.insert("accounts".into(), vec![("public".into(), true)]);
    relations.insert("branches".into(), vec![("public".into(), true)]);
    // A table here and a view of the same name in another schema.
    relations.insert(
        "mixed".into(),
        vec![("public".into(), true), ("other".into(), false)],
    );
    relations.insert("pg_class".into(), vec![("pg_catalog".into(), false)]);
    Catalog {
        functions: set(&["lower", "abs", "count", "sum", "coalesce", "length"]),
        operators: set(&["=", "<", ">", "<=", ">=", "<>", "+", "~~", "||"]),
        types: set(&[
            "int4",
            "int8",
            "text",
            "numeric",
            "date",
            "timestamptz",
            "varchar",
        ]),
        callable: set(&["now", "random", "f_user", "nextval"]),
        relations,
        by_lower: HashMap::new(),
    }
}

fn yes(text: &str) -> Vec<String> {
    judge(text, &catalog())
        .unwrap_or_else(|| panic!("{text:?} should be cacheable"))
        .iter()
        .map(|t| t.to_string())
        .collect()
}

fn no(text: &str) {
    assert!(
        judge(text, &catalog()).is_none(),
        "{text:?} should not be cacheable"
    );
}

#[test]
fn plain_reads_are_cacheable_with_their_tables() {
    assert_eq!(
        yes("SELECT abalance FROM accounts WHERE aid = 7"),
        ["accounts"]
    );
    assert_eq!(
        yes(
            "SELECT a.x, count(*) FROM accounts a JOIN branches b ON a.bid = b.bid \
             WHERE lower(a.name) LIKE 'x%' GROUP BY a.x ORDER BY 2 DESC LIMIT 10"
        ),
        ["accounts", "branches"]
    );
    assert_eq!(yes("SELECT 1"), Vec::<String>::new());
    assert_eq!(
        yes("SELECT * FROM accounts WHERE aid IN (SELECT aid FROM branches) AND x BETWEEN 1 AND 2"),
        ["accounts", "branches"]
    );
    assert_eq!(
        yes("SELECT DISTINCT x::int8, '2024-01-01'::date FROM public.accounts"),
        ["accounts"]
    );
    assert_eq!(yes("SELECT current_user, x FROM accounts"), ["accounts"]);
    assert_eq!(
        yes("SELECT x FROM accounts UNION SELECT y FROM branches"),
        ["accounts", "branches"]
    );
}

#[test]
fn the_clock_randomness_and_state_are_not() {
    no("SELECT now()");
    no("SELECT random() FROM accounts");
    no("SELECT nextval('s')");
    no("SELECT CURRENT_TIMESTAMP");
    no("SELECT current_date FROM accounts");
    no("SELECT * FROM accounts WHERE created > 'now'");
    no("SELECT 'TODAY'::date");
    no("SELECT * FROM accounts WHERE d = 'yesterday'");
    // Attribute notation calls a function.
    no("SELECT a.now FROM accounts a");
    no("SELECT a.f_user FROM accounts a");
    // Unknown functions, user functions, qualified by another schema.
    no("SELECT f_user(1)");
    no("SELECT public.lower('x')");
    no("SELECT pg_sleep(1)");
}

#[test]
fn what_is_not_a_followed_table_is_not() {
    no("SELECT * FROM pg_class");
    no("SELECT * FROM mixed");
    assert_eq!(yes("SELECT * FROM public.mixed"), ["mixed"]);
    no("SELECT * FROM other.mixed");
    no("SELECT * FROM nowhere");
    no("SELECT * FROM generate_series(1, 3)");
    no("SELECT * FROM pg_temp.accounts");
}

#[test]
fn other_statements_and_shapes_are_not() {
    no("SELECT 1; SELECT 2");
    no("INSERT INTO accounts VALUES (1)");
    no("SELECT * INTO t FROM accounts");
    no("SELECT * FROM accounts FOR UPDATE");
    no("WITH a AS (SELECT 1) SELECT * FROM a");
    no("SELECT x, sum(y) OVER () FROM accounts");
    no("SELECT * FROM accounts ORDER BY x USING <");
    no("SELECT * FROM accounts, LATERAL (SELECT 1) s");
    no("SELECT x::regclass FROM accounts");
    no("SELECT x COLLATE \"C\" FROM accounts");
    no("SELECT x OPERATOR(public.=) 1 FROM accounts");
    no("SELECT x @@ y FROM accounts");
    no("SELECT $1");
    no("EXPLAIN SELECT 1");
    no("not sql");
}

#[test]
fn the_quick_look_only_spares_parses() {
    for t in [
        "SELECT 1",
        "  select 1",
        "(SELECT 1)",
        "VALUES (1)",
        "table t",
        "\nSelect\t1",
    ] {
        assert!(may_read(t.as_bytes()), "{t:?}");
    }
    for t in [
        "INSERT INTO t VALUES (1)",
        "WITH a AS (SELECT 1) SELECT 1",
        "selectx",
        "",
        "/* c */ SELECT 1",
    ] {
        assert!(!may_read(t.as_bytes()), "{t:?}");
        assert!(
            judge(t, &catalog()).is_none() || t.starts_with("/*"),
            "{t:?}"
        );
    }
}
