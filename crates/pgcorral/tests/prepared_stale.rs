//! Prepared statements are never stale: each script below runs with two clients directly
//! against PostgreSQL and through pgcorral (transaction mode, a pool of one server, so both
//! clients share it), and every answer each client gets must be the same: tags, SQLSTATEs,
//! parameter types, row values. The scripts are the ways a new client's Parse was once mapped
//! onto a statement another client parsed before a schema change, and the protocol deviations
//! found in the same code (a malformed Parse, SQL `EXECUTE` sent as a Parse).

mod support;

use support::wire::{Msg, Param, Wire};
use support::*;

/// One step of a script: client 0 or 1 sends these messages and reads up to the ReadyForQuery
/// of each Sync or Query among them.
struct Step(usize, Vec<Vec<u8>>);

fn q(c: usize, sql: &str) -> Step {
    Step(c, vec![wire::query(sql)])
}

/// Parse of `name`, Describe of it, Bind with one text parameter, Execute, Sync.
fn prepare_and_run(c: usize, name: &str, sql: &str, arg: &str) -> Step {
    Step(
        c,
        vec![
            wire::parse(name, sql, &[]),
            wire::describe(b'S', name),
            wire::bind("", name, &[Param::Text(arg)], false),
            wire::execute("", 0),
            wire::sync(),
        ],
    )
}

/// Bind of `name` with one text parameter, Execute, Sync.
fn run(c: usize, name: &str, arg: &str) -> Step {
    Step(
        c,
        vec![
            wire::bind("", name, &[Param::Text(arg)], false),
            wire::execute("", 0),
            wire::sync(),
        ],
    )
}

/// What a client can tell of an answer, table OIDs aside (the tables are made again for each
/// run): tags, SQLSTATEs, parameter types, column names and types, values, command tags.
fn describe(m: &Msg) -> String {
    match m.tag {
        b'E' => format!("E:{}", m.code()),
        b'D' => format!("D:{:?}", m.row()),
        b'C' => format!("C:{}", m.text()),
        b't' => {
            let n = u16::from_be_bytes([m.body[0], m.body[1]]) as usize;
            // Built-in types by OID; types made by the script have new OIDs in each run.
            let oids: Vec<String> = (0..n)
                .map(|i| u32::from_be_bytes(m.body[2 + 4 * i..6 + 4 * i].try_into().unwrap()))
                .map(|o| {
                    if o < 16384 {
                        o.to_string()
                    } else {
                        "user".into()
                    }
                })
                .collect();
            format!("t:{oids:?}")
        }
        b'T' => {
            let b = &m.body;
            let n = u16::from_be_bytes([b[0], b[1]]) as usize;
            let mut pos = 2;
            let mut cols = Vec::new();
            for _ in 0..n {
                let end = pos + b[pos..].iter().position(|&c| c == 0).unwrap();
                let name = String::from_utf8_lossy(&b[pos..end]).into_owned();
                let ty = u32::from_be_bytes(b[end + 7..end + 11].try_into().unwrap());
                cols.push(format!("{name}:{ty}"));
                pos = end + 19;
            }
            format!("T:{cols:?}")
        }
        b'N' | b'S' => String::new(), // notices and settings: not what is compared here
        t => (t as char).to_string(),
    }
}

/// Runs `script` with two clients connected to `port`; the answers to each step.
async fn play(port: u16, script: &[Step]) -> Vec<String> {
    let mut clients = [
        Wire::connect(port, "postgres", "postgres").await,
        Wire::connect(port, "postgres", "postgres").await,
    ];
    let mut out = Vec::new();
    for Step(c, msgs) in script {
        let c = &mut clients[*c];
        c.send_all(msgs).await;
        let readies = msgs.iter().filter(|m| m[0] == b'S' || m[0] == b'Q').count();
        let got = c.until_ready_n(readies).await;
        let words: Vec<String> = got.iter().map(describe).filter(|w| !w.is_empty()).collect();
        out.push(words.join(" "));
    }
    out
}

/// Runs `script` directly and through pgcorral (pool of one server, transaction mode), each
/// time after `reset`, and checks both clients got the same answers at every step; returns
/// them.
async fn same_as_postgres(reset: &str, script: &[Step]) -> Vec<String> {
    let pg = Postgres::start();
    pg.sql("postgres", reset);
    let direct = play(pg.port, script).await;
    pg.sql("postgres", reset);
    let p = Pooler::start(&config(
        &pg,
        "postgres",
        "default_pool_size = 1\npool_mode = \"transaction\"",
    ))
    .await;
    let pooled = play(p.port(), script).await;
    for (i, (d, p)) in direct.iter().zip(&pooled).enumerate() {
        assert_eq!(p, d, "step {i}: through pgcorral / directly\n{pooled:#?}");
    }
    direct
}

/// The issue's case: client 0 prepares an INSERT into a numeric column; the table is made
/// again with an int column; a new client prepares the same INSERT: its parameter is an int
/// now, so '1.5' is refused (22P02), where a statement parsed before the change would insert 2.
/// Client 0's own statement keeps its numeric parameter, as in PostgreSQL.
#[tokio::test]
async fn a_new_parse_after_a_table_is_made_again_resolves_anew() {
    let ins = "INSERT INTO r VALUES ($1)";
    let got = same_as_postgres(
        "DROP TABLE IF EXISTS r",
        &[
            q(0, "CREATE TABLE r(v numeric)"),
            prepare_and_run(0, "s", ins, "1.5"),
            q(0, "DROP TABLE r; CREATE TABLE r(v int)"),
            prepare_and_run(1, "s", ins, "1.5"),
            run(0, "s", "1.5"),
            q(1, "SELECT v FROM r ORDER BY v"),
        ],
    )
    .await;
    assert_eq!(got[1], "1 t:[\"1700\"] n 2 C:INSERT 0 1 Z");
    assert_eq!(got[3], "1 t:[\"23\"] n E:22P02 Z");
    assert_eq!(got[5], "T:[\"v:23\"] D:[Some(\"2\")] C:SELECT 1 Z");
}

/// A type dropped and created again under the same name: a new client's Parse resolves the
/// new type; pgcorral once handed it the statement that still named the dropped one, and the
/// server answered "cache lookup failed for type" (XX000).
#[tokio::test]
async fn a_new_parse_after_a_type_is_made_again_resolves_anew() {
    let ins = "INSERT INTO m VALUES ($1)";
    let got = same_as_postgres(
        "DROP TABLE IF EXISTS m; DROP TYPE IF EXISTS mood",
        &[
            q(
                0,
                "CREATE TYPE mood AS ENUM ('a', 'b'); CREATE TABLE m(x mood)",
            ),
            prepare_and_run(0, "s", ins, "a"),
            q(
                0,
                "DROP TABLE m; DROP TYPE mood; \
                 CREATE TYPE mood AS ENUM ('a', 'b'); CREATE TABLE m(x mood)",
            ),
            prepare_and_run(1, "s", ins, "b"),
            q(1, "SELECT x::text FROM m"),
        ],
    )
    .await;
    assert!(got[3].ends_with("n 2 C:INSERT 0 1 Z"), "{got:?}");
    assert!(got[4].contains("D:[Some(\"b\")]"), "{got:?}");
}

/// A date column made again as a timestamp: the new client's parameter is a timestamp (its
/// ParameterDescription says so) and keeps the time of day.
#[tokio::test]
async fn a_new_parse_gets_the_parameter_type_of_the_moment() {
    let ins = "INSERT INTO d VALUES ($1)";
    let got = same_as_postgres(
        "DROP TABLE IF EXISTS d",
        &[
            q(0, "CREATE TABLE d(t date)"),
            prepare_and_run(0, "s", ins, "2020-01-02 03:04:05"),
            q(0, "DROP TABLE d; CREATE TABLE d(t timestamp)"),
            prepare_and_run(1, "s", ins, "2020-01-02 03:04:05"),
            q(1, "SELECT t::text FROM d"),
        ],
    )
    .await;
    assert!(got[1].starts_with("1 t:[\"1082\"]"), "{got:?}");
    assert!(got[3].starts_with("1 t:[\"1114\"]"), "{got:?}");
    assert!(got[4].contains("2020-01-02 03:04:05"), "{got:?}");
}

/// A column added under a statement client 0 prepared: a brand-new Parse by client 1 gets the
/// new row shape, never "cached plan must not change result type" (PostgreSQL answers that
/// only for a statement prepared before the change: client 0's, still).
#[tokio::test]
async fn a_new_parse_is_never_answered_that_its_plan_changed() {
    let sel = "SELECT * FROM t WHERE $1::int IS NOT NULL";
    let got = same_as_postgres(
        "DROP TABLE IF EXISTS t",
        &[
            q(0, "CREATE TABLE t(a int); INSERT INTO t VALUES (1)"),
            prepare_and_run(0, "s", sel, "1"),
            q(0, "ALTER TABLE t ADD COLUMN b int DEFAULT 2"),
            Step(
                1,
                vec![
                    wire::parse("s", sel, &[]),
                    wire::bind("", "s", &[Param::Text("1")], false),
                    wire::execute("", 0),
                    wire::sync(),
                ],
            ),
            run(0, "s", "1"),
        ],
    )
    .await;
    assert_eq!(got[3], "1 2 D:[Some(\"1\"), Some(\"2\")] C:SELECT 1 Z");
    assert_eq!(got[4], "E:0A000 Z");
}

/// Two clients preparing the same text with nothing changed in between still get the same
/// answers (their statements are shared on the server), and a Parse with a NUL missing is
/// refused as PostgreSQL refuses it (08P01), with the rest of its batch skipped.
#[tokio::test]
async fn shared_statements_and_a_malformed_parse() {
    let sel = "SELECT $1::int + 1";
    // Parse "s2" whose body has no NUL at all, then a Bind of the unnamed statement.
    let bad = {
        let mut m = vec![b'P'];
        m.extend_from_slice(&6i32.to_be_bytes());
        m.extend_from_slice(b"s2");
        m
    };
    let got = same_as_postgres(
        "SELECT 1",
        &[
            prepare_and_run(0, "s", sel, "1"),
            prepare_and_run(1, "s", sel, "2"),
            run(0, "s", "3"),
            Step(0, vec![wire::parse("", "SELECT 7", &[]), wire::sync()]),
            Step(
                0,
                vec![
                    bad,
                    wire::bind("", "", &[], false),
                    wire::execute("", 0),
                    wire::sync(),
                ],
            ),
            Step(
                0,
                vec![
                    wire::parse("s3", "SELECT 8", &[]),
                    wire::bind("", "s3", &[], false),
                    wire::execute("", 0),
                    wire::sync(),
                ],
            ),
        ],
    )
    .await;
    assert_eq!(got[2], "2 D:[Some(\"4\")] C:SELECT 1 Z");
    assert_eq!(got[4], "E:08P01 Z");
    assert_eq!(got[5], "1 2 D:[Some(\"8\")] C:SELECT 1 Z");
}

/// SQL `EXECUTE` of a statement made by SQL `PREPARE`, sent with the extended protocol (as
/// asyncpg does), named and unnamed.
#[tokio::test]
async fn sql_execute_in_a_parse() {
    let got = same_as_postgres(
        "SELECT 1",
        &[
            q(0, "PREPARE p(int) AS SELECT $1 * 2"),
            Step(
                0,
                vec![
                    wire::parse("", "EXECUTE p(21)", &[]),
                    wire::bind("", "", &[], false),
                    wire::execute("", 0),
                    wire::sync(),
                ],
            ),
            Step(
                0,
                vec![
                    wire::parse("x", "execute P (4)", &[]),
                    wire::describe(b'S', "x"),
                    wire::bind("", "x", &[], false),
                    wire::execute("", 0),
                    wire::sync(),
                ],
            ),
            // Client 1 has no statement p: PostgreSQL says so.
            Step(
                1,
                vec![
                    wire::parse("", "EXECUTE p(1)", &[]),
                    wire::bind("", "", &[], false),
                    wire::execute("", 0),
                    wire::sync(),
                ],
            ),
            Step(
                0,
                vec![
                    wire::bind("", "x", &[], false),
                    wire::execute("", 0),
                    wire::sync(),
                ],
            ),
        ],
    )
    .await;
    assert_eq!(got[1], "1 2 D:[Some(\"42\")] C:SELECT 1 Z");
    assert!(got[2].contains("D:[Some(\"8\")]"), "{got:?}");
    assert_eq!(got[3], "1 2 E:26000 Z");
    assert!(got[4].contains("D:[Some(\"8\")]"), "{got:?}");
}
