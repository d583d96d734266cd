//! Sharded databases for the sharding tests: N real PostgreSQL servers as shards, the same
//! tables on each, pgcorral's config over them, and where each shard says a row lives.

use pgcorral::shard::key::{shard_of, Function, KeyType, Value};

use super::Postgres;

/// `n` servers, each a shard holding `ddl` in database `postgres`, with prepared transactions
/// on (pgcorral commits a write across shards with two-phase commit).
pub fn start(n: usize, ddl: &str) -> Vec<Postgres> {
    (0..n)
        .map(|_| {
            let pg = Postgres::start_with(super::PgOptions {
                conf: "max_prepared_transactions = 10".into(),
                ..Default::default()
            });
            pg.sql("postgres", ddl);
            pg
        })
        .collect()
}

/// A config of database `app` over `shards` (transaction mode, trust), with `db` lines added to
/// `[databases.app]` (sharded tables and the like) and `general` to `[general]`.
pub fn config(shards: &[Postgres], general: &str, db: &str) -> String {
    let list: Vec<String> = shards
        .iter()
        .map(|pg| format!("{{ host = \"127.0.0.1\", port = {} }}", pg.port))
        .collect();
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\nadmin_users = [\"postgres\"]\n\
         pool_mode = \"transaction\"\n{general}\n\n\
         [databases.app]\ndbname = \"postgres\"\nshards = [{}]\n{db}\n",
        list.join(", ")
    )
}

/// The shard of an int8-comparable key among `n` (PostgreSQL's hash partitioning).
pub fn shard_of_int(key: i64, ty: KeyType, n: usize) -> usize {
    shard_of(&[(ty, &Value::Int(key))], Function::PgHash, n)
}

/// The integer values of `column` in `table` on each shard, sorted.
pub fn keys_per_shard(shards: &[Postgres], table: &str, column: &str) -> Vec<Vec<i64>> {
    shards
        .iter()
        .map(|pg| {
            let out = pg.sql(
                "postgres",
                &format!("SELECT {column} FROM {table} ORDER BY {column}"),
            );
            out.lines()
                .filter(|l| !l.is_empty())
                .map(|l| l.parse().unwrap())
                .collect()
        })
        .collect()
}

/// Asserts every shard holds exactly the keys that hash to it, and PostgreSQL agrees: each
/// shard checks its own rows with `satisfies_hash_partition` against a hash-partitioned twin
/// of the key's type.
pub fn assert_placed(shards: &[Postgres], table: &str, column: &str, ty: &str) {
    let n = shards.len();
    for (i, pg) in shards.iter().enumerate() {
        pg.sql(
            "postgres",
            &format!(
                "CREATE TABLE IF NOT EXISTS placement_twin (k {ty}) PARTITION BY HASH (k); \
                 DO $$BEGIN FOR r IN 0..{last} LOOP EXECUTE format(\
                 'CREATE TABLE IF NOT EXISTS placement_twin_%s PARTITION OF placement_twin \
                 FOR VALUES WITH (MODULUS {n}, REMAINDER %s)', r, r); END LOOP; END$$",
                last = n - 1
            ),
        );
        let misplaced = pg.sql(
            "postgres",
            &format!(
                "SELECT count(*) FROM {table} WHERE NOT satisfies_hash_partition(\
                 'placement_twin'::regclass, {n}, {i}, {column}::{ty})"
            ),
        );
        assert_eq!(
            misplaced, "0",
            "shard {i} holds rows of {table} that hash elsewhere"
        );
    }
}
