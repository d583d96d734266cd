//! Seeded cases: prepared statements across DDL and clients, and the extended protocol
//! (pipelines, errors, malformed messages, portals).

use super::script::{Batch, Case};

const INS: &str = "INSERT INTO r VALUES ($1)";

pub fn cases() -> Vec<Case> {
    let mut v = prepared();
    v.extend(protocol());
    v
}

fn prepared() -> Vec<Case> {
    vec![
        // The issue's silent wrong result: a new client's Parse after the table changed type.
        Case::new("prepared_numeric_then_int", 2)
            .q(0, "CREATE TABLE r(v numeric)")
            .ext(0, Batch::new().parse("ins", INS).bind("ins", &[Some("1.5")]).execute().sync())
            .q(0, "DROP TABLE r; CREATE TABLE r(v int)")
            .ext(1, Batch::new().parse("ins", INS).bind("ins", &[Some("1.5")]).execute().sync())
            .q(1, "SELECT v FROM r"),
        Case::new("prepared_date_then_timestamp", 2)
            .q(0, "CREATE TABLE r(v date)")
            .ext(0, Batch::new().parse("ins", INS).bind("ins", &[Some("2024-01-02")]).execute().sync())
            .q(0, "DROP TABLE r; CREATE TABLE r(v timestamp)")
            .ext(1, Batch::new().parse("ins", INS).bind("ins", &[Some("2024-01-02 10:30")]).execute().sync())
            .q(1, "SELECT v FROM r"),
        Case::new("prepared_type_dropped_and_created", 2)
            .q(0, "CREATE TYPE mood AS ENUM ('a', 'b'); CREATE TABLE m(v mood)")
            .ext(0, Batch::new().parse("ins", "INSERT INTO m VALUES ($1)").bind("ins", &[Some("a")]).execute().sync())
            .q(0, "DROP TABLE m; DROP TYPE mood; CREATE TYPE mood AS ENUM ('a', 'b'); CREATE TABLE m(v mood)")
            .ext(1, Batch::new().parse("ins", "INSERT INTO m VALUES ($1)").bind("ins", &[Some("b")]).execute().sync())
            .q(1, "SELECT v FROM m"),
        // A brand-new Parse never gets `cached plan must not change result type`.
        Case::new("fresh_parse_after_result_type_change", 2)
            .q(0, "CREATE TABLE t(id int)")
            .q(0, "INSERT INTO t VALUES (1)")
            .ext(0, Batch::new().parse("sel", "SELECT * FROM t").bind("sel", &[]).execute().sync())
            .q(0, "ALTER TABLE t ADD COLUMN w text DEFAULT 'w'")
            .ext(1, Batch::new().parse("sel", "SELECT * FROM t").bind("sel", &[]).describe_portal().execute().sync())
            .ext(1, Batch::new().parse("sel2", "SELECT * FROM t").describe_stmt("sel2").sync()),
        Case::new("fresh_parse_without_describe_after_result_type_change", 3)
            .q(0, "CREATE TABLE t(id int)")
            .q(0, "INSERT INTO t VALUES (1)")
            .ext(0, Batch::new().parse("sel", "SELECT * FROM t").describe_stmt("sel").bind("sel", &[]).execute().sync())
            .q(0, "ALTER TABLE t ADD COLUMN w text DEFAULT 'w'")
            .ext(1, Batch::new().parse("sel", "SELECT * FROM t").bind("sel", &[]).execute().sync())
            .ext(2, Batch::new().parse("q", "SELECT * FROM t").sync())
            .ext(2, Batch::new().bind("q", &[]).execute().sync())
            .ext(0, Batch::new().bind("sel", &[]).execute().sync()),
        // The same client's old statement: PostgreSQL answers 0A000.
        Case::new("own_statement_after_result_type_change", 1)
            .q(0, "CREATE TABLE t(id int)")
            .q(0, "INSERT INTO t VALUES (1)")
            .ext(0, Batch::new().parse("sel", "SELECT * FROM t").describe_stmt("sel").bind("sel", &[]).execute().sync())
            .q(0, "ALTER TABLE t ADD COLUMN w text DEFAULT 'w'")
            .ext(0, Batch::new().bind("sel", &[]).describe_portal().execute().sync())
            .ext(0, Batch::new().bind("sel", &[]).execute().sync()),
        Case::new("sql_statement_after_result_type_change", 1)
            .q(0, "CREATE TABLE t(id int)")
            .q(0, "INSERT INTO t VALUES (1)")
            .q(0, "PREPARE q AS SELECT * FROM t")
            .q(0, "EXECUTE q")
            .q(0, "ALTER TABLE t ADD COLUMN w text DEFAULT 'w'")
            .q(0, "EXECUTE q")
            .q(0, "EXECUTE q"),
        Case::new("prepared_param_type_after_alter_column", 2)
            .q(0, "CREATE TABLE t(id int, v int)")
            .ext(0, Batch::new().parse("up", "UPDATE t SET v = $1").describe_stmt("up").sync())
            .q(0, "ALTER TABLE t ALTER COLUMN v TYPE text")
            .ext(1, Batch::new().parse("up", "UPDATE t SET v = $1").describe_stmt("up").sync()),
        Case::new("prepared_same_text_other_search_path", 2)
            .q(0, "CREATE TABLE s1.x(a int); CREATE TABLE s2.x(b text, c text)")
            .q(0, "SET search_path = s1")
            .ext(0, Batch::new().parse("sx", "SELECT * FROM x").bind("sx", &[]).describe_portal().execute().sync())
            .q(1, "SET search_path = s2")
            .ext(1, Batch::new().parse("sx", "SELECT * FROM x").bind("sx", &[]).describe_portal().execute().sync()),
        // Found by the generator (seed 2766): PostgreSQL re-analyses a prepared statement under
        // the new search_path; through pgcorral, after another client's DISCARD ALL, the
        // statement prepared again resolves to another table and gets 0A000.
        Case::new("search_path_change_then_discard_by_other", 2)
            .setup("CREATE TABLE t(id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a')")
            .setup("CREATE TABLE s1.t(id int, v text); INSERT INTO s1.t VALUES (1, 's1')")
            .ext(1, Batch::new().parse("sel", "SELECT * FROM t WHERE id = $1").describe_stmt("sel").sync())
            .q(1, "SET search_path = s1, public")
            .q(0, "DISCARD ALL")
            .ext(1, Batch::new().bind("sel", &[Some("1")]).describe_portal().execute().sync()),
        // Found by the generator (seed 5738): one text prepared by two clients whose
        // search_path differs; the first client's Bind then gets 0A000.
        Case::new("same_text_other_search_path_interleaved", 2)
            .setup("CREATE TABLE t(id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a')")
            .setup("CREATE TABLE s1.t(id int, v text); INSERT INTO s1.t VALUES (1, 's1')")
            .q(0, "SET search_path = s1, public")
            .ext(1, Batch::new().parse("sel", "SELECT * FROM t WHERE id = $1").describe_stmt("sel").sync())
            .ext(0, Batch::new().parse("sel", "SELECT * FROM t WHERE id = $1").describe_stmt("sel").sync())
            .ext(1, Batch::new().bind("sel", &[Some("1")]).describe_portal().execute().sync())
            .ext(0, Batch::new().bind("sel", &[Some("1")]).describe_portal().execute().sync()),
        Case::new("pg_prepared_statements_shows_own_only", 2)
            .ext(0, Batch::new().parse("secret", "SELECT 'c0 secret'").sync())
            .ext(1, Batch::new().parse("mine", "SELECT 'c1'").sync())
            .q(1, "SELECT name, statement, parameter_types FROM pg_prepared_statements ORDER BY name")
            .q(0, "SELECT name, statement FROM pg_prepared_statements ORDER BY name"),
        Case::new("sql_prepare_execute_deallocate", 2)
            .q(0, "PREPARE p1(int) AS SELECT $1 * 2")
            .q(0, "EXECUTE p1(21)")
            .q(1, "EXECUTE p1(21)")
            .q(0, "PREPARE p1 AS SELECT 1")
            .q(0, "DEALLOCATE p1")
            .q(0, "EXECUTE p1(1)")
            .q(0, "DEALLOCATE ALL"),
        // Errors pgcorral answers itself must abort the transaction as PostgreSQL's do.
        Case::new("own_errors_abort_transaction", 1)
            .no_statement()
            .q(0, "PREPARE q1 AS SELECT 1")
            .q(0, "BEGIN")
            .q(0, "PREPARE q1 AS SELECT 1")
            .q(0, "SELECT 2")
            .q(0, "ROLLBACK")
            .q(0, "BEGIN")
            .q(0, "EXECUTE nope")
            .q(0, "SELECT 3")
            .q(0, "ROLLBACK")
            .q(0, "BEGIN")
            .q(0, "DEALLOCATE nope")
            .q(0, "SELECT 4")
            .q(0, "ROLLBACK")
            .q(0, "BEGIN")
            .ext(0, Batch::new().bind("nope", &[]).execute().sync())
            .q(0, "SELECT 5")
            .q(0, "ROLLBACK")
            .q(0, "BEGIN")
            .ext(0, Batch::new().parse("", "SELECT 1").parse("dup", "SELECT 1").parse("dup", "SELECT 1").sync())
            .q(0, "SELECT 6")
            .q(0, "ROLLBACK"),
        Case::new("own_answers_in_aborted_transaction", 1)
            .no_statement()
            .q(0, "PREPARE q1 AS SELECT 1")
            .ext(0, Batch::new().parse("n1", "SELECT 1").sync())
            .q(0, "BEGIN")
            .q(0, "SELECT 1/0")
            .q(0, "DEALLOCATE q1")
            .q(0, "PREPARE q2 AS SELECT 2")
            .q(0, "EXECUTE q1")
            .ext(0, Batch::new().parse("n2", "SELECT 2").sync())
            .ext(0, Batch::new().bind("n1", &[]).execute().sync())
            .ext(0, Batch::new().close_stmt("n1").sync())
            .q(0, "ROLLBACK")
            .q(0, "EXECUTE q1")
            .q(0, "EXECUTE q2")
            .ext(0, Batch::new().bind("n1", &[]).execute().sync())
            .ext(0, Batch::new().bind("n2", &[]).execute().sync()),
        // An error pgcorral answers in an extended batch fails the batch's implicit
        // transaction on the server too: the INSERT before it is rolled back.
        Case::new("own_error_rolls_back_its_batch", 1)
            .q(0, "CREATE TABLE r(v int)")
            .ext(0, Batch::new().parse("dup", "SELECT 1").sync())
            .ext(0, Batch::new().parse("", INS).bind("", &[Some("1")]).execute().parse("dup", "SELECT 2").sync())
            .q(0, "SELECT v FROM r ORDER BY v"),
        // A duplicate name whose text is wrong: PostgreSQL reports the text's error first.
        Case::new("duplicate_name_with_bad_text", 1)
            .no_statement()
            .ext(0, Batch::new().parse("dup", "SELECT 1").sync())
            .ext(0, Batch::new().parse("dup", "SELEC 1").sync())
            .ext(0, Batch::new().parse("dup", "SELECT * FROM no_such_table").sync())
            .ext(0, Batch::new().parse("dup", "SELECT $1").sync())
            .q(0, "PREPARE q AS SELECT 1")
            .q(0, "PREPARE q AS SELEC 1")
            .q(0, "PREPARE q AS SELECT * FROM no_such_table")
            .q(0, "  PREPARE  q AS SELECT 'x'::int")
            .q(0, "EXECUTE q('y')")
            .q(0, "BEGIN")
            .q(0, "PREPARE q AS SELECT * FROM no_such_table")
            .q(0, "ROLLBACK")
            .q(0, "BEGIN")
            .q(0, "SELECT 1/0")
            .ext(0, Batch::new().parse("dup", "SELECT 1").sync())
            .ext(0, Batch::new().parse("dup", "SELEC 1").sync())
            .q(0, "PREPARE q AS SELECT 1")
            .q(0, "DEALLOCATE ALL")
            .q(0, "ROLLBACK")
            .q(0, "EXECUTE q")
            .ext(0, Batch::new().bind("dup", &[]).execute().sync()),
        // A simple Query drops the unnamed statement (PostgreSQL's simple Query uses it).
        // Found by the generator (seed 704): so does a PREPARE, EXECUTE or DEALLOCATE that
        // pgcorral rewrites.
        Case::new("unnamed_statement_after_simple_query", 1)
            .ext(0, Batch::new().parse("", "SELECT 7").sync())
            .q(0, "SELECT 1")
            .ext(0, Batch::new().bind("", &[]).execute().sync())
            .ext(0, Batch::new().parse("", "SELECT 8").sync())
            .q(0, "PREPARE q AS SELECT 1")
            .ext(0, Batch::new().bind("", &[]).execute().sync())
            .ext(0, Batch::new().parse("", "SELECT 9").sync())
            .q(0, "EXECUTE q")
            .ext(0, Batch::new().bind("", &[]).execute().sync())
            .ext(0, Batch::new().parse("", "SELECT 10").sync())
            .q(0, "DEALLOCATE q")
            .ext(0, Batch::new().bind("", &[]).execute().sync())
            .ext(0, Batch::new().parse("", "SELECT 11").sync())
            .q(0, "PREPARE q AS SELECT 1")
            .q(0, "PREPARE q AS SELECT 1")
            .ext(0, Batch::new().bind("", &[]).execute().sync()),
        // A Bind of the unnamed statement by a client that has none: another client's is
        // never run.
        Case::new("unnamed_statement_of_another_client", 2)
            .ext(0, Batch::new().parse("", "SELECT 'c0 secret'").sync())
            .ext(1, Batch::new().bind("", &[]).execute().sync())
            .ext(1, Batch::new().describe_stmt("").sync())
            .ext(0, Batch::new().bind("", &[]).execute().sync()),
        // Found by the generator (seed 20278): the client's names survive it too.
        Case::new("discard_all_in_transaction_keeps_names", 1)
            .no_statement()
            .q(0, "BEGIN")
            .ext(0, Batch::new().parse("sel", "SELECT 1").describe_stmt("sel").sync())
            .q(0, "PREPARE q AS SELECT 2")
            .q(0, "DISCARD ALL")
            .q(0, "ROLLBACK")
            .ext(0, Batch::new().parse("sel", "SELECT 1").sync())
            .q(0, "EXECUTE q")
            .q(0, "SELECT 1; DISCARD ALL")
            .q(0, "EXECUTE q")
            .q(0, "DISCARD ALL")
            .q(0, "EXECUTE q")
            .ext(0, Batch::new().parse("sel", "SELECT 1").sync()),
        // DISCARD ALL refused inside a transaction block discards nothing.
        Case::new("discard_all_refused_in_transaction", 3)
            .no_statement()
            .q(0, "CREATE TABLE r(v int)")
            .ext(2, Batch::new().parse("ins", INS).bind("ins", &[Some("1")]).execute().sync())
            .q(1, "BEGIN")
            .q(1, "DISCARD ALL")
            .q(1, "ROLLBACK")
            .ext(0, Batch::new().parse("ins", INS).bind("ins", &[Some("2")]).execute().sync())
            .ext(2, Batch::new().bind("ins", &[Some("3")]).execute().sync())
            .q(0, "SELECT v FROM r ORDER BY v"),
        // asyncpg sends SQL EXECUTE over the extended protocol.
        Case::new("execute_name_via_extended", 1)
            .q(0, "PREPARE p1(int) AS SELECT $1 * 2")
            .ext(0, Batch::run("EXECUTE p1(21)", &[]))
            .ext(0, Batch::new().parse("e", "EXECUTE p1(4)").bind("e", &[]).describe_portal().execute().sync()),
        Case::new("duplicate_and_missing_statements", 1)
            .ext(0, Batch::new().parse("a", "SELECT 1").parse("a", "SELECT 2").sync())
            .ext(0, Batch::new().bind("nope", &[]).execute().sync())
            .ext(0, Batch::new().describe_stmt("nope").sync())
            .ext(0, Batch::new().close_stmt("nope").close_stmt("a").sync())
            .ext(0, Batch::new().bind("a", &[]).execute().sync()),
        Case::new("unnamed_statement_reused_across_syncs", 1)
            .ext(0, Batch::new().parse("", "SELECT $1::int + 1").sync())
            .ext(0, Batch::new().bind("", &[Some("1")]).execute().sync())
            .ext(0, Batch::new().bind("", &[Some("2")]).execute().sync()),
        Case::new("unnamed_statement_per_client", 2)
            .ext(0, Batch::new().parse("", "SELECT $1::int * 10").sync())
            .ext(1, Batch::new().parse("", "SELECT $1::text || 'x'").sync())
            .ext(0, Batch::new().bind("", &[Some("4")]).describe_portal().execute().sync())
            .ext(1, Batch::new().bind("", &[Some("4")]).describe_portal().execute().sync()),
        Case::new("same_text_other_parameter_types", 2)
            .ext(0, Batch::new().parse_typed("a", "SELECT $1", &[23]).describe_stmt("a").bind("a", &[Some("7")]).execute().sync())
            .ext(1, Batch::new().parse_typed("a", "SELECT $1", &[25]).describe_stmt("a").bind("a", &[Some("7")]).execute().sync())
            .ext(1, Batch::new().parse("b", "SELECT $1").describe_stmt("b").sync()),
        Case::new("statement_after_discard_all", 2)
            .ext(0, Batch::new().parse("k", "SELECT 42").sync())
            .q(0, "DISCARD ALL")
            .ext(0, Batch::new().bind("k", &[]).execute().sync())
            .ext(1, Batch::new().parse("k", "SELECT 43").bind("k", &[]).execute().sync()),
    ]
}

fn protocol() -> Vec<Case> {
    // Parse whose query string has no NUL terminator (and no parameter count).
    let bad_parse = b"\0SELECT 1".to_vec();
    let mut pipeline = Batch::new().parse("", "SELECT 1/0").bind("", &[]).execute();
    for i in 0..20 {
        pipeline = pipeline
            .parse("", &format!("SELECT {i}"))
            .bind("", &[])
            .execute();
    }
    vec![
        Case::new("parse_without_nul", 1)
            .ext(
                0,
                Batch::new()
                    .raw(b'P', &bad_parse, "P(no NUL)")
                    .bind("", &[])
                    .execute()
                    .sync(),
            )
            .q(0, "SELECT 1")
            .ext(
                0,
                Batch::new()
                    .raw(b'P', b"SELECT 1", "P(no NUL at all)")
                    .bind("", &[])
                    .execute()
                    .sync(),
            )
            .ext(
                0,
                Batch::new()
                    .raw(b'P', b"named\0SELECT 1", "P[named](no NUL)")
                    .bind("named", &[])
                    .execute()
                    .sync(),
            )
            .ext(
                0,
                Batch::new()
                    .parse("named", "SELECT 2")
                    .bind("named", &[])
                    .execute()
                    .sync(),
            )
            .ext(
                0,
                Batch::new()
                    .parse("ok", "SELECT 3")
                    .raw(b'P', b"x\0SELECT 4", "P[x](no NUL)")
                    .bind("x", &[])
                    .execute()
                    .bind("ok", &[])
                    .execute()
                    .sync(),
            ),
        // asyncpg's executemany: no Sync, no Flush; PostgreSQL sends the error at once.
        Case::new("syncless_pipeline_early_error", 1)
            .ext(0, pipeline.until(b'E'))
            .ext(0, Batch::new().sync())
            .q(0, "SELECT 2"),
        Case::new("flush_pipeline_error", 1)
            .ext(
                0,
                Batch::new()
                    .parse("", "SELECT 1")
                    .bind("", &[])
                    .execute()
                    .flush()
                    .until(b'C'),
            )
            .ext(
                0,
                Batch::new()
                    .parse("", "SELECT 1/0")
                    .bind("", &[])
                    .execute()
                    .flush()
                    .until(b'E'),
            )
            .ext(
                0,
                Batch::new()
                    .parse("", "SELECT 3")
                    .bind("", &[])
                    .execute()
                    .sync(),
            ),
        Case::new("portal_suspended", 1)
            .q(0, "CREATE TABLE t AS SELECT g FROM generate_series(1, 5) g")
            .ext(
                0,
                Batch::new()
                    .parse("", "SELECT g FROM t ORDER BY g")
                    .bind("", &[])
                    .execute_rows(2)
                    .execute_rows(2)
                    .execute_rows(0)
                    .sync(),
            ),
        Case::new("errors_skip_to_sync", 1).ext(
            0,
            Batch::new()
                .parse("", "SELECT 1")
                .bind("", &[])
                .execute()
                .parse("", "SELEC 2")
                .bind("", &[])
                .execute()
                .sync()
                .parse("", "SELECT 3")
                .bind("", &[])
                .execute()
                .sync(),
        ),
        Case::new("implicit_transaction_of_batch", 2)
            .q(0, "CREATE TABLE t(v int)")
            .ext(
                0,
                Batch::new()
                    .parse("", "INSERT INTO t VALUES (1)")
                    .bind("", &[])
                    .execute()
                    .parse("", "SELECT 1/0")
                    .bind("", &[])
                    .execute()
                    .sync(),
            )
            .q(1, "SELECT count(*) FROM t"),
        Case::new("empty_and_multi_statement_queries", 1)
            .q(0, "")
            .q(0, ";")
            .q(0, "SELECT 1; SELECT 2; SELECT 1/0; SELECT 3")
            .ext(0, Batch::run("", &[])),
        Case::new("query_inside_extended_batch", 1).ext(
            0,
            Batch::new()
                .parse("", "SELECT 1")
                .bind("", &[])
                .execute()
                .query("SELECT 2")
                .sync(),
        ),
        Case::new("copy_in_and_out", 2)
            .q(0, "CREATE TABLE t(a int, b text)")
            .copy_in(0, "COPY t FROM STDIN", &["1\tx\n", "2\ty\n"])
            .q(1, "COPY t TO STDOUT")
            .q(1, "COPY (SELECT 1/0) TO STDOUT")
            .copy_in(1, "COPY t FROM STDIN", &["3\tz\n", "oops\n"])
            .q(0, "SELECT * FROM t ORDER BY a"),
        Case::new("copy_in_extended", 1)
            .q(0, "CREATE TABLE t(a int)")
            .ext(
                0,
                Batch::new()
                    .parse("", "COPY t FROM STDIN")
                    .bind("", &[])
                    .execute()
                    .sync()
                    .until(b'G'),
            )
            .step(copy_rows(0))
            .q(0, "SELECT * FROM t"),
        Case::new("backend_pid_is_blanked", 2)
            .q(0, "SELECT pg_backend_pid(), 1 AS one")
            .q(1, "SELECT pg_backend_pid() AS pid_of_me"),
    ]
}

/// CopyData, CopyDone and the Sync the copy-in batch still owes.
fn copy_rows(c: usize) -> super::script::Step {
    let mut send = crate::support::wire::copy_data(b"5\n");
    send.extend(crate::support::wire::copy_done());
    send.extend(crate::support::wire::sync());
    super::script::Step {
        client: c,
        send,
        until: super::script::Until::Ready(1),
        label: "d c S".into(),
    }
}
