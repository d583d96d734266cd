//! Seeded cases: every way of changing session state we know of (client 0 changes, then both
//! clients look), server-bound state, and notifications across clients.

use super::random::PROBE;
use super::script::{Batch, Case};

/// Client 0 runs `change`, then client 0 and client 1 look at their sessions.
pub(super) fn leak(name: &str, setup: &[&str], change: &str) -> Case {
    let mut c = Case::new(name, 2);
    for s in setup {
        c = c.setup(s);
    }
    c.q(1, PROBE)
        .q(0, change)
        .q(0, PROBE)
        .q(1, PROBE)
        .q(0, PROBE)
}

const F_SQL: &str =
    "CREATE FUNCTION f() RETURNS text LANGUAGE sql AS $$ SELECT set_config('role', 'r1', false) $$";
const F_PLPGSQL: &str = "CREATE FUNCTION f() RETURNS text LANGUAGE plpgsql AS \
     $$ BEGIN SET search_path = s1; RETURN 'ok'; END $$";
const F_ROLE: &str = "CREATE FUNCTION f() RETURNS text LANGUAGE plpgsql AS \
     $$ BEGIN SET ROLE r2; RETURN 'ok'; END $$";

pub fn cases() -> Vec<Case> {
    let mut v = hidden_changes();
    v.extend(visible_changes());
    v.extend(server_bound());
    v.extend(notifications());
    v
}

/// The list of changes pgcorral's text scan misses, and more of the same kind.
fn hidden_changes() -> Vec<Case> {
    vec![
        leak("set_config_quoted_name", &[], "select \"set_config\"('role', 'r1', false)"),
        leak("set_config_schema_quoted", &[], "select pg_catalog.\"set_config\"('search_path', 's1', false)"),
        leak("set_config_unicode_escape", &[], "select U&\"set\\005fconfig\"('work_mem', '5MB', false)"),
        leak("update_pg_settings", &[], "UPDATE pg_settings SET setting = 's1' WHERE name = 'search_path'"),
        leak("do_block_set_config", &[], "DO $$BEGIN PERFORM set_config('work_mem', '6MB', false); END$$"),
        leak("do_block_set_role", &[], "DO $$BEGIN SET ROLE r1; END$$"),
        leak("sql_function_set_config", &[F_SQL], "SELECT f()"),
        leak("plpgsql_function_set", &[F_PLPGSQL], "SELECT f()"),
        leak("plpgsql_function_set_role", &[F_ROLE], "SELECT f()"),
        leak(
            "procedure_set_config",
            &["CREATE PROCEDURE p() LANGUAGE plpgsql AS $$ BEGIN PERFORM set_config('search_path', 's2', false); END $$"],
            "CALL p()",
        ),
        leak(
            "trigger_set_config",
            &[
                "CREATE TABLE tr(v int)",
                "CREATE FUNCTION tf() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN PERFORM set_config('work_mem', '7MB', false); RETURN NEW; END $$",
                "CREATE TRIGGER t1 BEFORE INSERT ON tr FOR EACH ROW EXECUTE FUNCTION tf()",
            ],
            "INSERT INTO tr VALUES (1)",
        ),
        leak(
            "view_calling_set_config",
            &["CREATE VIEW vw AS SELECT \"set_config\"('search_path', 's2', false) AS x"],
            "SELECT * FROM vw",
        ),
        leak("prepare_then_execute_set_config", &[], "PREPARE p AS select set_config('role', 'r1', false)")
            .q(0, "EXECUTE p")
            .q(0, PROBE)
            .q(1, PROBE),
        // In one query, SQL PREPARE pins; DEALLOCATE releases, then client 1 takes the server.
        Case::new("prepare_execute_one_query", 2)
            .no_statement()
            .q(0, "PREPARE p AS select set_config('role', 'r1', false); EXECUTE p")
            .q(0, PROBE)
            .q(0, "DEALLOCATE p")
            .q(1, PROBE)
            .q(0, PROBE),
        leak("quoted_set_config_in_transaction", &[], "BEGIN; SELECT \"set_config\"('role', 'r1', false); COMMIT")
            .no_statement(),
        leak("standard_conforming_strings_off", &[], "SET standard_conforming_strings = off")
            .q(0, "SELECT 'a\\''; SET ROLE r1; SELECT ''")
            .q(0, PROBE)
            .q(1, PROBE),
        leak("escape_string_hides_set", &[], "SELECT E'\\''; SET ROLE r1; SELECT E'\\''"),
        leak("dollar_quote_then_set", &[], "SELECT $x$ ' $x$; SET ROLE r1"),
        leak("nested_comment_then_set", &[], "/* /* */ */ SET ROLE r1"),
        leak("extended_set_config_quoted", &[], "SELECT 1")
            .ext(0, Batch::run("SELECT \"set_config\"('search_path', 's1', false)", &[]))
            .q(0, PROBE)
            .q(1, PROBE),
        leak("copy_of_set_config", &[], "COPY (SELECT \"set_config\"('role', 'r1', false)) TO STDOUT"),
    ]
}

/// Changes pgcorral follows, and ones that must leave no trace.
fn visible_changes() -> Vec<Case> {
    vec![
        leak("plain_set_role", &[], "SET ROLE r1"),
        leak("plain_set_config", &[], "SELECT set_config('search_path', 's1', false)"),
        leak("set_application_name", &[], "SET application_name = 'c0'"),
        leak("set_time_zone_and_datestyle", &[], "SET TIME ZONE 'Asia/Tokyo'; SET DateStyle = 'German'"),
        leak("set_custom_placeholder", &[], "SET x.y = 'c0'")
            .q(1, "SELECT current_setting('x.y', true)"),
        leak("set_session_authorization", &[], "SET SESSION AUTHORIZATION r1"),
        leak("set_config_local_outside_transaction", &[], "SELECT set_config('work_mem', '2MB', true)"),
        leak("set_in_multi_statement_query", &[], "SET search_path = s1; SELECT 1"),
        leak("set_via_extended", &[], "SELECT 1")
            .ext(0, Batch::run("SET search_path = s2", &[]))
            .q(0, PROBE)
            .q(1, PROBE),
        leak("function_with_set_clause", &["CREATE FUNCTION g() RETURNS text LANGUAGE sql SET search_path = s1 AS $$ SELECT current_setting('search_path') $$"], "SELECT g()"),
        leak("reset_all_after_set", &[], "SET work_mem = '1MB'; SET application_name = 'x'")
            .q(0, "RESET ALL")
            .q(0, PROBE)
            .q(1, PROBE),
        leak("discard_all_after_set", &[], "SET ROLE r1")
            .q(0, "DISCARD ALL")
            .q(0, PROBE)
            .q(1, PROBE),
        leak("set_local_in_transaction", &[], "BEGIN; SET LOCAL work_mem = '9MB'; SELECT current_setting('work_mem'); COMMIT").no_statement(),
        Case::new("set_config_rolled_back", 2)
            .no_statement()
            .q(0, "BEGIN")
            .q(0, "SELECT set_config('role', 'r1', false)")
            .q(0, PROBE)
            .q(0, "ROLLBACK")
            .q(0, PROBE)
            .q(1, PROBE),
        Case::new("savepoint_rolls_back_set", 2)
            .no_statement()
            .q(0, "BEGIN")
            .q(0, "SET work_mem = '2MB'")
            .q(0, "SAVEPOINT a")
            .q(0, "SET search_path = s1")
            .q(0, "ROLLBACK TO a")
            .q(0, PROBE)
            .q(0, "COMMIT")
            .q(0, PROBE)
            .q(1, PROBE),
        Case::new("error_inside_transaction", 2)
            .no_statement()
            .setup("CREATE TABLE t(v int)")
            .q(0, "BEGIN")
            .q(0, "SET ROLE r1")
            .q(0, "INSERT INTO t VALUES (1)")
            .q(0, "SELECT 1")
            .q(0, "COMMIT")
            .q(0, PROBE)
            .q(1, PROBE)
            .q(1, "SELECT count(*) FROM t"),
        Case::new("autocommit_writes_and_settings", 2)
            .setup("CREATE TABLE t(v int)")
            .q(0, "INSERT INTO t VALUES (1)")
            .q(1, "SELECT count(*) FROM t")
            .q(0, "SET work_mem = '3MB'")
            .q(1, PROBE)
            .q(0, PROBE),
    ]
}

/// Temp tables, advisory locks, WITH HOLD cursors, SQL PREPARE: they pin in pooled modes.
fn server_bound() -> Vec<Case> {
    vec![
        Case::new("temp_table_then_drop", 2)
            .no_statement()
            .q(0, "CREATE TEMP TABLE tmp(x int)")
            .q(0, "INSERT INTO tmp VALUES (1)")
            .q(0, "SELECT * FROM tmp")
            .q(0, "DROP TABLE tmp")
            .q(1, "SELECT * FROM tmp")
            .q(1, "SELECT count(*) FROM pg_class WHERE relname = 'tmp'"),
        Case::new("temp_table_other_client", 2)
            .no_statement()
            .pool(2)
            .q(0, "CREATE TEMP TABLE tmp(x int)")
            .q(1, "SELECT * FROM tmp")
            .q(0, "SELECT * FROM tmp"),
        Case::new("advisory_lock_held_and_released", 2)
            .no_statement()
            .pool(2)
            .q(0, "SELECT pg_advisory_lock(5)")
            .q(1, "SELECT pg_try_advisory_lock(5)")
            .q(0, "SELECT pg_advisory_unlock(5)")
            .q(1, "SELECT pg_try_advisory_lock(5)")
            .q(1, "SELECT pg_advisory_unlock_all()"),
        Case::new("cursor_with_hold", 2)
            .no_statement()
            .q(0, "BEGIN")
            .q(
                0,
                "DECLARE cur CURSOR WITH HOLD FOR SELECT g FROM generate_series(1, 3) g",
            )
            .q(0, "COMMIT")
            .q(0, "FETCH 2 FROM cur")
            .q(0, "CLOSE cur")
            .q(1, "FETCH 1 FROM cur")
            .q(1, PROBE),
        Case::new("sql_prepare_in_multi_statement", 2)
            .no_statement()
            .q(0, "PREPARE m AS SELECT 7; SELECT 1")
            .q(0, "EXECUTE m")
            .q(0, "DEALLOCATE m")
            .q(1, "EXECUTE m"),
    ]
}

fn notifications() -> Vec<Case> {
    let mut many = Case::new("listen_then_many_notifies", 2)
        .no_statement()
        .pool(2)
        .q(0, "LISTEN ch");
    for i in 0..20 {
        many = many.q(1, &format!("NOTIFY ch, 'n{i}'"));
    }
    many = many.q(0, "UNLISTEN ch");
    let mut set = Case::new("notify_then_set_on_pinned_listener", 2)
        .no_statement()
        .pool(2)
        .q(0, "LISTEN ch");
    for i in 0..10 {
        set = set
            .q(1, &format!("NOTIFY ch, 's{i}'"))
            .q(0, &format!("SET work_mem = '{}MB'", i + 1));
    }
    set = set.q(0, "UNLISTEN *");
    let mut load = Case::new("notifications_under_load", 3)
        .no_statement()
        .pool(3)
        .q(0, "LISTEN a")
        .q(1, "LISTEN a; LISTEN b");
    for i in 0..15 {
        load = load
            .q(2, &format!("NOTIFY a, 'a{i}'; NOTIFY b, 'b{i}'"))
            .q(2, &format!("SET application_name = 'n{i}'"));
        if i % 5 == 0 {
            load = load.q(0, "SELECT 1").q(1, "SET work_mem = '2MB'");
        }
    }
    load = load.q(0, "UNLISTEN *").q(1, "UNLISTEN *");
    vec![
        many,
        set,
        load,
        Case::new("notify_in_transaction_to_self", 1)
            .no_statement()
            .q(0, "LISTEN a")
            .q(
                0,
                "BEGIN; NOTIFY a, '1'; NOTIFY a, '2'; NOTIFY a, '1'; COMMIT",
            )
            .q(0, "NOTIFY a, 'after'")
            .q(0, "UNLISTEN a"),
        // LISTENs answered by pgcorral's hub in transaction and statement mode.
        Case::new("listen_twice_then_unlisten_all", 2)
            .pool(1)
            .q(0, "LISTEN a")
            .q(0, "LISTEN a")
            .q(0, "LISTEN b")
            .q(1, "NOTIFY a, '1'")
            .q(1, "NOTIFY b, '2'")
            .q(0, "UNLISTEN *")
            .q(1, "NOTIFY a, '3'")
            .q(0, "SELECT 1"),
        Case::new("discard_all_ends_listening", 2)
            .pool(1)
            .q(0, "LISTEN a")
            .q(1, "NOTIFY a, '1'")
            .q(0, "DISCARD ALL")
            .q(1, "NOTIFY a, '2'")
            .q(0, "SELECT 1"),
        Case::new("unlisten_unknown_and_quoted_names", 2)
            .pool(1)
            .q(0, "UNLISTEN nothing_here")
            .q(0, "LISTEN \"Mixed Case\"")
            .q(1, "NOTIFY \"Mixed Case\", 'q'")
            .q(1, "NOTIFY mixed_case, 'not this'")
            .q(0, "UNLISTEN \"Mixed Case\""),
        Case::new("listener_in_a_transaction_hears_after_it", 2)
            .no_statement()
            .pool(2)
            .q(0, "LISTEN a")
            .q(0, "BEGIN")
            .q(1, "NOTIFY a, 'while'")
            .q(0, "SELECT 1")
            .q(0, "COMMIT")
            .q(1, "NOTIFY a, 'after'")
            .q(0, "UNLISTEN a"),
        Case::new("notify_rolled_back", 2)
            .no_statement()
            .pool(2)
            .q(0, "LISTEN b")
            .q(1, "BEGIN; NOTIFY b, 'lost'; ROLLBACK")
            .q(1, "SELECT pg_notify('b', 'kept')")
            .q(0, "UNLISTEN b"),
        Case::new("notices", 1)
            .q(
                0,
                "DO $$BEGIN RAISE NOTICE 'hello'; RAISE WARNING 'careful'; END$$",
            )
            .q(0, "DROP TABLE IF EXISTS not_there")
            .q(0, "SET client_min_messages = warning")
            .q(
                0,
                "DO $$BEGIN RAISE NOTICE 'hidden'; RAISE WARNING 'shown'; END$$",
            ),
    ]
}
