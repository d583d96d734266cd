//! Seeded cases: session state changed by code the statement's text does not show (triggers,
//! rules, views, policies, defaults, checks, generated columns, index expressions, domains,
//! attribute notation, overloads, operators, casts) and server-bound state such code creates.
//! In transaction and statement mode the pool has one server, so what one client leaves on it
//! shows in the next; PostgreSQL's answer is two separate sessions.

use super::cases_state::leak;
use super::random::PROBE;
use super::script::Case;

/// What a session holds beyond its settings: session advisory locks, LISTEN channels and
/// temporary objects of its own.
const HELD: &str = "SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
     AND pid = pg_backend_pid()) AS locks, (SELECT count(*) FROM pg_listening_channels()) AS listens, \
     (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()) AS temp_rels, \
     (SELECT count(*) FROM pg_proc WHERE pronamespace = pg_my_temp_schema()) AS temp_funcs";

/// Client 0 runs `change`, then both clients look at their settings ([`leak`]), and client 1
/// at what its session holds.
fn hidden(name: &str, setup: &[&str], change: &str) -> Case {
    leak(name, setup, change).q(1, HELD)
}

/// Client 0 runs `change`, which leaves state bound to its session; client 1, on a pool of
/// two (the other server, unless client 0's was given away), looks at what it holds.
fn bound(name: &str, setup: &[&str], change: &str, look: &str) -> Case {
    let mut c = Case::new(name, 2).no_statement().pool(2);
    for s in setup {
        c = c.setup(s);
    }
    c.q(0, change).q(1, HELD).q(1, look).q(0, HELD)
}

/// A plpgsql function `name(args)` returning `returns` that runs `body` first.
fn func(name: &str, returns: &str, body: &str, ret: &str) -> String {
    format!(
        "CREATE FUNCTION {name} RETURNS {returns} LANGUAGE plpgsql AS \
         $$ BEGIN {body}; RETURN {ret}; END $$"
    )
}

pub fn cases() -> Vec<Case> {
    let trig = func(
        "tf()",
        "trigger",
        "PERFORM set_config('work_mem', '1111kB', false)",
        "NEW",
    );
    let role_trig = func("tf()", "trigger", "SET ROLE r1", "NEW");
    let imm = func(
        "g(int)",
        "int IMMUTABLE",
        "PERFORM set_config('search_path', 's1', false)",
        "$1",
    );
    let lock_trig = func("tf()", "trigger", "PERFORM pg_advisory_lock(7)", "NEW");
    let listen_trig = func("tf()", "trigger", "LISTEN ch", "NEW");
    let temp_trig = func(
        "tf()",
        "trigger",
        "CREATE TEMP TABLE IF NOT EXISTS hidden_tmp(a int)",
        "NEW",
    );
    vec![
        hidden(
            "hook_trigger_custom_setting",
            &[
                "CREATE TABLE t(a int)",
                &trig,
                "CREATE TRIGGER t1 AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION tf()",
            ],
            "INSERT INTO t VALUES (1)",
        ),
        hidden(
            "hook_trigger_set_role",
            &[
                "CREATE TABLE t(a int)",
                "GRANT ALL ON t TO r1",
                &role_trig,
                "CREATE TRIGGER t1 BEFORE UPDATE ON t FOR EACH ROW EXECUTE FUNCTION tf()",
                "INSERT INTO t VALUES (1)",
            ],
            "UPDATE t SET a = a + 1",
        ),
        hidden(
            "hook_attribute_notation",
            &[
                "CREATE TABLE t(a int)",
                "INSERT INTO t VALUES (1)",
                "CREATE FUNCTION f(t) RETURNS text LANGUAGE sql AS \
                 $$ SELECT set_config('search_path', 's2', false) $$",
            ],
            "SELECT t.f FROM t",
        ),
        hidden(
            "hook_overload_of_a_built_in",
            &["CREATE FUNCTION public.lower(integer) RETURNS text LANGUAGE sql AS \
               $$ SELECT set_config('work_mem', '1222kB', false) $$"],
            "SELECT lower(1)",
        ),
        hidden(
            "hook_domain_check_on_cast",
            &["CREATE DOMAIN dm AS int CHECK (set_config('search_path', 's2', false) IS NOT NULL)"],
            "SELECT 1::dm",
        ),
        hidden(
            "hook_check_constraint",
            &["CREATE TABLE t(a int CHECK (set_config('work_mem', '1333kB', false) IS NOT NULL))"],
            "INSERT INTO t VALUES (1)",
        ),
        hidden(
            "hook_column_default",
            &["CREATE TABLE t(a int, b text DEFAULT set_config('search_path', 's1', false))"],
            "INSERT INTO t (a) VALUES (1)",
        ),
        hidden(
            "hook_generated_column",
            &[
                &imm,
                "CREATE TABLE t(a int, b int GENERATED ALWAYS AS (g(a)) STORED)",
            ],
            "INSERT INTO t (a) VALUES (1)",
        ),
        hidden(
            "hook_index_expression",
            &[&imm, "CREATE TABLE t(a int)", "CREATE INDEX ON t (g(a))"],
            "INSERT INTO t VALUES (1)",
        ),
        hidden(
            "hook_rule",
            &[
                "CREATE TABLE t(a int)",
                "CREATE RULE r AS ON INSERT TO t DO ALSO SELECT set_config('work_mem', '1444kB', false)",
            ],
            "INSERT INTO t VALUES (1)",
        ),
        hidden(
            "hook_view",
            &["CREATE VIEW v AS SELECT set_config('search_path', 's2', false) AS x"],
            "SELECT * FROM v",
        ),
        hidden(
            "hook_row_level_security",
            &[
                "CREATE TABLE t(a int)",
                "INSERT INTO t VALUES (1)",
                "GRANT SELECT ON t TO r1",
                "ALTER TABLE t ENABLE ROW LEVEL SECURITY",
                "CREATE POLICY p ON t USING (set_config('work_mem', '1555kB', false) IS NOT NULL)",
            ],
            "SET ROLE r1; SELECT * FROM t; RESET ROLE",
        ),
        hidden(
            "hook_user_operator",
            &[
                "CREATE FUNCTION opf(int, int) RETURNS bool LANGUAGE sql AS \
                 $$ SELECT set_config('search_path', 's1', false) IS NOT NULL $$",
                "CREATE OPERATOR === (LEFTARG = int, RIGHTARG = int, FUNCTION = opf)",
            ],
            "SELECT 1 === 2",
        ),
        hidden(
            "hook_user_cast",
            &[
                "CREATE TYPE mood AS ENUM ('ok')",
                "CREATE FUNCTION mc(int) RETURNS mood LANGUAGE sql AS \
                 $$ SELECT set_config('work_mem', '1666kB', false); SELECT 'ok'::mood $$",
                "CREATE CAST (int AS mood) WITH FUNCTION mc(int)",
            ],
            "SELECT CAST(1 AS mood)",
        ),
        hidden(
            "hook_partition_trigger",
            &[
                "CREATE TABLE p(a int) PARTITION BY RANGE (a)",
                "CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10)",
                &trig,
                "CREATE TRIGGER t1 AFTER INSERT ON p1 FOR EACH ROW EXECUTE FUNCTION tf()",
            ],
            "INSERT INTO p VALUES (1)",
        ),
        // A trigger added by a client through pgcorral fires for the next statement at once.
        Case::new("hook_trigger_added_through_the_pooler", 2)
            .setup("CREATE TABLE t(a int)")
            .setup(&trig)
            .q(0, "CREATE TRIGGER t1 AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION tf()")
            .q(1, "INSERT INTO t VALUES (1)")
            .q(0, PROBE)
            .q(1, PROBE)
            .q(0, PROBE),
        bound(
            "hook_trigger_advisory_lock",
            &[
                "CREATE TABLE t(a int)",
                &lock_trig,
                "CREATE TRIGGER t1 AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION tf()",
            ],
            "INSERT INTO t VALUES (1)",
            "SELECT pg_try_advisory_lock(7)",
        ),
        bound(
            "hook_trigger_listen",
            &[
                "CREATE TABLE t(a int)",
                &listen_trig,
                "CREATE TRIGGER t1 AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION tf()",
            ],
            "INSERT INTO t VALUES (1)",
            "SELECT pg_listening_channels()",
        ),
        bound(
            "hook_trigger_temp_table",
            &[
                "CREATE TABLE t(a int)",
                &temp_trig,
                "CREATE TRIGGER t1 AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION tf()",
            ],
            "INSERT INTO t VALUES (1)",
            "SELECT * FROM hidden_tmp",
        ),
        bound(
            "temp_function_of_another_client",
            &[],
            "CREATE FUNCTION pg_temp.tfn() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "SELECT pg_temp.tfn()",
        ),
    ]
}
