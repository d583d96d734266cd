//! Generated cases: from a seed, a few clients each get random units (one statement, a whole
//! transaction, or a block that holds server-bound state and releases it) from a pool of
//! statements that read, write, change session state, prepare and run DDL; the units of all
//! clients are interleaved at random. Deterministic per seed (statement mode gets its own
//! cases, without transactions).
//!
//! A unit is never split: with a pool of one server, another client's step while a transaction
//! is open or a client is pinned would wait for the server (PostgreSQL would run it at once), so
//! interleaving happens between units.

use super::script::{Batch, Case, Step};

pub use crate::support::rng::Rng;

/// Steps one client runs without another client in between.
#[derive(Clone, Debug)]
pub struct Unit {
    /// Each step with the known difference class it belongs to, if any (the issue item whose
    /// fix it waits for).
    pub steps: Vec<(Step, Option<&'static str>)>,
}

/// Setup of every generated case.
pub const SETUP: &[&str] = &[
    "CREATE TABLE t(id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'a'), (2, 'b')",
    "CREATE TABLE s1.t(id int, v text); INSERT INTO s1.t VALUES (10, 's1')",
    "CREATE TABLE r(v numeric)",
    "GRANT ALL ON ALL TABLES IN SCHEMA public, s1 TO PUBLIC",
    "CREATE FUNCTION f_role() RETURNS text LANGUAGE sql AS $$ SELECT set_config('role', 'r1', false) $$",
    "CREATE FUNCTION f_path() RETURNS text LANGUAGE plpgsql AS \
     $$ BEGIN PERFORM set_config('search_path', 's2', false); RETURN 'ok'; END $$",
];

/// What every client can observe of its session. A custom placeholder (`x.y`) once set stays
/// defined in its server process for good (`RESET` and `DISCARD ALL` make it `''`, never
/// undefined), so a later client of that server reads `''` where a fresh connection reads NULL:
/// the probe reads both as NULL (the seeded case `set_custom_placeholder` shows the difference).
pub const PROBE: &str = "SELECT current_user AS usr, session_user AS sess, \
     current_setting('search_path') AS path, current_setting('work_mem') AS wm, \
     current_setting('application_name') AS app, nullif(current_setting('x.y', true), '') AS xy, \
     current_setting('TimeZone') AS tz, current_setting('DateStyle') AS ds";

/// Statements that change the session the way pgcorral's text scan sees.
const SESSION: &[&str] = &[
    "SET search_path = s1, public",
    "SET work_mem = '1MB'",
    "RESET work_mem",
    "RESET ALL",
    "SET ROLE r1",
    "RESET ROLE",
    "SET application_name = 'app'",
    "SET x.y = 'v'",
    "SELECT set_config('work_mem', '3MB', false)",
    "SET TIME ZONE 'Europe/Paris'",
    "SET DateStyle = 'SQL, DMY'",
    "SET SESSION AUTHORIZATION r2",
    "RESET SESSION AUTHORIZATION",
    "DISCARD ALL",
];

/// Session changes the issue lists as missed (item 2).
const HIDDEN: &[&str] = &[
    "SELECT \"set_config\"('role', 'r2', false)",
    "SELECT pg_catalog.\"set_config\"('search_path', 's2', false)",
    "SELECT U&\"set\\005fconfig\"('work_mem', '5MB', false)",
    "UPDATE pg_settings SET setting = 's2' WHERE name = 'search_path'",
    "DO $$BEGIN PERFORM set_config('work_mem', '6MB', false); END$$",
    "SELECT f_role()",
    "SELECT f_path()",
];

const PLAIN: &[&str] = &[
    "SELECT * FROM t ORDER BY id",
    "SELECT 1/0",
    "SELECT v FROM r ORDER BY 1",
    "INSERT INTO t VALUES (3, 'c') ON CONFLICT (id) DO UPDATE SET v = excluded.v || '+'",
    "DELETE FROM t WHERE id > 2",
    "PREPARE q1 AS SELECT $1::int + 1",
    "EXECUTE q1(41)",
    "DEALLOCATE q1",
];

/// Known class: statements prepared before DDL are used after it (issue 34 item 1). A
/// difference that goes away without the DDL units is counted under it.
const STALE: &str = "1";

const DDL: &[&str] = &[
    "ALTER TABLE t ADD COLUMN IF NOT EXISTS w int",
    "ALTER TABLE t DROP COLUMN IF EXISTS w",
    "DROP TABLE IF EXISTS r; CREATE TABLE r(v int)",
    "DROP TABLE IF EXISTS r; CREATE TABLE r(v numeric)",
    "DROP TABLE IF EXISTS r; CREATE TABLE r(v date)",
    "DROP TABLE IF EXISTS r; CREATE TABLE r(v timestamp)",
];

fn q(c: usize, sql: &str) -> Step {
    Case::new("", 1).q(c, sql).steps.remove(0)
}

fn ext(c: usize, b: Batch) -> Step {
    Case::new("", 1).ext(c, b).steps.remove(0)
}

fn single(c: usize, sql: &str, known: Option<&'static str>) -> Unit {
    Unit {
        steps: vec![(q(c, sql), known)],
    }
}

/// One extended-protocol unit.
fn extended(rng: &mut Rng, c: usize) -> Unit {
    let value = rng.pick(&["1.5", "2", "2024-01-02", "x"]);
    let b = match rng.below(7) {
        0 => Batch::new()
            .parse("ins", "INSERT INTO r VALUES ($1)")
            .bind("ins", &[Some(value)])
            .execute()
            .sync(),
        1 => Batch::new().bind("ins", &[Some(value)]).execute().sync(),
        2 => Batch::new()
            .parse("sel", "SELECT * FROM t WHERE id = $1")
            .describe_stmt("sel")
            .sync(),
        3 => Batch::new()
            .bind("sel", &[Some("1")])
            .describe_portal()
            .execute()
            .sync(),
        4 => {
            let name = rng.pick(&["ins", "sel"]);
            Batch::new().close_stmt(name).sync()
        }
        // The unnamed statement of an earlier batch, if it is still there.
        5 => Batch::new().bind("", &[]).execute().sync(),
        _ => Batch::new()
            .parse("", "SELECT * FROM t ORDER BY id")
            .bind("", &[])
            .describe_portal()
            .execute()
            .sync(),
    };
    Unit {
        steps: vec![(ext(c, b), None)],
    }
}

/// A statement of any kind but transactions, with its known-difference tag.
fn any_statement(rng: &mut Rng) -> (&'static str, Option<&'static str>) {
    match rng.below(10) {
        0..=3 => (rng.pick(SESSION), None),
        4 => (rng.pick(HIDDEN), Some("2")),
        5 | 6 => (rng.pick(PLAIN), None),
        7 => (rng.pick(DDL), Some(STALE)),
        _ => (PROBE, None),
    }
}

fn transaction(rng: &mut Rng, c: usize) -> Unit {
    let begin = rng.pick(&["BEGIN", "START TRANSACTION ISOLATION LEVEL REPEATABLE READ"]);
    let mut steps = vec![(q(c, begin), None)];
    for _ in 0..1 + rng.below(3) {
        if rng.below(4) == 0 {
            // Extended-protocol messages inside the transaction (a duplicate Parse, a Bind of
            // a statement another step closed, ...).
            steps.extend(extended(rng, c).steps);
            continue;
        }
        let (sql, k) = match rng.below(5) {
            0 => (
                rng.pick(&[
                    "SET LOCAL work_mem = '9MB'",
                    "SAVEPOINT a",
                    "ROLLBACK TO a",
                    "SELECT set_config('search_path', 's1', true)",
                ]),
                None,
            ),
            _ => any_statement(rng),
        };
        steps.push((q(c, sql), k));
    }
    steps.push((q(c, PROBE), None));
    let end = rng.pick(&["COMMIT", "ROLLBACK"]);
    steps.push((q(c, end), None));
    Unit { steps }
}

/// Server-bound state taken and released by one client.
fn pinned(rng: &mut Rng, c: usize) -> Unit {
    let (take, release): (&[&str], &[&str]) = match rng.below(3) {
        0 => (
            &["SELECT pg_advisory_lock(7)"],
            &["SELECT pg_advisory_unlock(7)"],
        ),
        1 => (
            &[
                "CREATE TEMP TABLE tt(x int)",
                "INSERT INTO tt VALUES (1)",
                "SELECT * FROM tt",
            ],
            &["DROP TABLE tt"],
        ),
        _ => (&["LISTEN ch", "NOTIFY ch, 'hello'"], &["UNLISTEN ch"]),
    };
    let mut steps: Vec<(Step, Option<&'static str>)> =
        take.iter().map(|s| (q(c, s), None)).collect();
    steps.push((q(c, PROBE), None));
    steps.extend(release.iter().map(|s| (q(c, s), None)));
    Unit { steps }
}

/// The units of case `seed`; for statement mode (`statement`), without transactions and
/// server-bound state, which it refuses by design.
pub fn generate(seed: u64, statement: bool) -> (usize, Vec<Unit>) {
    let mut rng = Rng::new(seed);
    let clients = 2 + rng.below(2);
    let n = 6 + rng.below(10);
    let mut units = Vec::with_capacity(n + clients);
    for _ in 0..n {
        let c = rng.below(clients);
        let unit = match rng.below(12) {
            0..=5 => {
                let (sql, known) = any_statement(&mut rng);
                single(c, sql, known)
            }
            6 | 7 => extended(&mut rng, c),
            8 | 9 if !statement => transaction(&mut rng, c),
            10 if !statement => pinned(&mut rng, c),
            _ => single(c, PROBE, None),
        };
        units.push(unit);
    }
    // Every client looks at its session last.
    for c in 0..clients {
        units.push(single(c, PROBE, None));
    }
    (clients, units)
}

/// A case of these units, in order.
pub fn assemble(name: &str, clients: usize, units: &[Unit]) -> Case {
    let mut case = Case::new(name, clients);
    for s in SETUP {
        case = case.setup(s);
    }
    for u in units {
        for (s, _) in &u.steps {
            case = case.step(s.clone());
        }
    }
    case
}

/// The known difference classes of `units`' steps, sorted, once each.
pub fn known_classes(units: &[Unit]) -> Vec<&'static str> {
    let mut items: Vec<&'static str> = units
        .iter()
        .flat_map(|u| u.steps.iter().filter_map(|(_, k)| *k))
        .collect();
    items.sort();
    items.dedup();
    items
}

/// `units` without their steps of the known classes `drop` (a transaction keeps its other
/// steps).
pub fn without_known(units: &[Unit], drop: &[&str]) -> Vec<Unit> {
    units
        .iter()
        .map(|u| Unit {
            steps: u
                .steps
                .iter()
                .filter(|(_, k)| !k.is_some_and(|k| drop.contains(&k)))
                .cloned()
                .collect(),
        })
        .filter(|u| !u.steps.is_empty())
        .collect()
}
