//! Prepared statements across shards are parsed once per shard server: a client's statement
//! bound again and again (a read or write across shards, a pipeline split between shards)
//! reaches each shard's server as one prepared statement of pgcorral's, bound each time, as
//! PostgreSQL itself keeps the client's statement; what PostgreSQL reports about them
//! (`pg_prepared_statements` on each shard) and what the client gets are checked.

mod support;

use support::sharding::{config, keys_per_shard, shard_of_int, start};
use support::wire::{self, tags, Param, Wire};
use support::{Pooler, Postgres};
use tokio_postgres::Client;

use pgcorral::shard::key::KeyType;

const DDL: &str = "CREATE TABLE items (id int8 PRIMARY KEY, qty int4)";

const SHARDED: &str =
    "sharded_tables = [{ name = \"items\", columns = [\"id\"], types = [\"int8\"] }]";

/// Three shards behind pgcorral, one server per shard (so that each shard's statements are on
/// the server the checks read), rows 1..=60 with qty = id % 10.
async fn loaded() -> (Vec<Postgres>, Pooler, Client) {
    let shards = start(3, DDL);
    let p = Pooler::start(&config(&shards, "default_pool_size = 1", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;
    let rows: Vec<String> = (1..=60).map(|i| format!("({i}, {})", i % 10)).collect();
    c.simple_query(&format!("INSERT INTO items VALUES {}", rows.join(", ")))
        .await
        .unwrap();
    (shards, p, c)
}

/// pgcorral's statements on `shard`'s server (read through pgcorral, on that shard): each
/// one's text and how many times it was executed, those executed at least once, by text.
async fn executed_on(c: &Client, shard: usize) -> Vec<(String, i64)> {
    c.simple_query(&format!("SET SHARD TO '{shard}'"))
        .await
        .unwrap();
    let rows = c
        .query(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements \
             WHERE name LIKE 'pgcorral\\_%' AND generic_plans + custom_plans > 0 ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    c.simple_query("SET SHARD TO DEFAULT").await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_statement_bound_again_and_again_across_shards_is_parsed_once_on_each() {
    let (shards, p, c) = loaded().await;
    // A read across shards (planned for the merge: its aggregates' parts), six times.
    let read = c
        .prepare("SELECT count(*), sum(qty) FROM items WHERE qty >= $1")
        .await
        .unwrap();
    for at_least in 0..6i32 {
        let row = c.query_one(&read, &[&at_least]).await.unwrap();
        let want: Vec<i64> = (1..=60i64)
            .map(|i| i % 10)
            .filter(|q| *q >= at_least.into())
            .collect();
        assert_eq!(row.get::<_, i64>(0), want.len() as i64);
        assert_eq!(row.get::<_, Option<i64>>(1), Some(want.iter().sum()));
    }
    // A write across shards (no key), three times: every shard's rows, counts summed.
    let write = c
        .prepare("UPDATE items SET qty = qty + 1 WHERE qty >= $1")
        .await
        .unwrap();
    for _ in 0..3 {
        assert_eq!(c.execute(&write, &[&100i32]).await.unwrap(), 0);
    }
    assert_eq!(c.execute(&write, &[&9i32]).await.unwrap(), 6);
    for shard in 0..3 {
        let held = executed_on(&c, shard).await;
        let reads: Vec<_> = held.iter().filter(|(s, _)| s.contains("count(")).collect();
        let writes: Vec<_> = held
            .iter()
            .filter(|(s, _)| s.starts_with("UPDATE"))
            .collect();
        assert_eq!(reads.len(), 1, "shard {shard}: {held:?}");
        assert_eq!(reads[0].1, 6, "shard {shard}: {held:?}");
        assert_eq!(writes.len(), 1, "shard {shard}: {held:?}");
        assert_eq!(writes[0].1, 4, "shard {shard}: {held:?}");
    }
    // A column it reads renamed on the shards: binding it fails as PostgreSQL fails a
    // statement whose table changed under it (42703), and works again once the column is
    // back, as on one server.
    for pg in &shards {
        pg.sql("postgres", "ALTER TABLE items RENAME COLUMN qty TO amount");
    }
    let e = c.query_one(&read, &[&0i32]).await.unwrap_err();
    assert_eq!(support::sqlstate(&e), "42703", "{e:?}");
    for pg in &shards {
        pg.sql("postgres", "ALTER TABLE items RENAME COLUMN amount TO qty");
    }
    let row = c.query_one(&read, &[&0i32]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 60);
    // A column added: a statement of `*` fails as PostgreSQL fails it ("cached plan must not
    // change result type", 0A000), and keeps failing, as the client's own statement would.
    let all = c
        .prepare("SELECT * FROM items WHERE id > $1 ORDER BY id")
        .await
        .unwrap();
    assert_eq!(c.query(&all, &[&55i64]).await.unwrap().len(), 5);
    for pg in &shards {
        pg.sql("postgres", "ALTER TABLE items ADD COLUMN note text");
    }
    for _ in 0..2 {
        let e = c.query(&all, &[&55i64]).await.unwrap_err();
        assert_eq!(support::sqlstate(&e), "0A000", "{e:?}");
    }
    // The statement keeps working after its server statement is gone (DEALLOCATE ALL run on
    // each shard's server by another client of pgcorral's; pgcorral learns it and parses
    // again).
    let other = p.connect("postgres", None, "app").await;
    for shard in 0..3 {
        other
            .simple_query(&format!("SET SHARD TO '{shard}'"))
            .await
            .unwrap();
        other.simple_query("DEALLOCATE ALL").await.unwrap();
    }
    other.simple_query("SET SHARD TO DEFAULT").await.unwrap();
    let row = c.query_one(&read, &[&0i32]).await.unwrap();
    assert_eq!(row.get::<_, i64>(0), 60);
    drop(shards);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pipeline_binds_its_statement_on_each_shard_without_parsing_it_again() {
    let (shards, p, c) = loaded().await;
    // asyncpg's and tokio-postgres' shape: the statement parsed and described first, then
    // one request of many Binds and Executes of it, placed on every shard.
    let mut w = Wire::connect(p.addr.port(), "postgres", "app").await;
    let insert = "INSERT INTO items VALUES ($1, $2)";
    w.send_all(&[
        wire::parse("ins", insert, &[]),
        wire::describe(b'S', "ins"),
        wire::sync(),
    ])
    .await;
    assert_eq!(tags(&w.until_ready().await), "1tnZ");
    let ids: Vec<i64> = (101..=130).collect();
    w.send_all(&batch(None, "ins", &ids, "7")).await;
    assert_eq!(
        tags(&w.until_ready().await),
        format!("{}Z", "2C".repeat(30))
    );
    // JDBC's shape: Parse of a named statement and its many Binds in one request.
    let update = ("upd", "UPDATE items SET qty = $2 WHERE id = $1");
    w.send_all(&batch(Some(update), "upd", &ids, "8")).await;
    assert_eq!(
        tags(&w.until_ready().await),
        format!("1{}Z", "2C".repeat(30))
    );
    // Every row on its shard, with the updated value.
    let placed = keys_per_shard(&shards, "items", "id");
    for id in &ids {
        let shard = shard_of_int(*id, KeyType::Int8, 3);
        assert!(placed[shard].contains(id), "{id} not on shard {shard}");
    }
    let r = c
        .query("SELECT count(*) FROM items WHERE id > 100 AND qty = 8", &[])
        .await
        .unwrap();
    assert_eq!(r[0].get::<_, i64>(0), 30);
    // Each shard's server holds the INSERT once, executed once per row placed there.
    for (shard, keys) in placed.iter().enumerate() {
        let rows = keys.iter().filter(|k| **k > 100).count() as i64;
        let held = executed_on(&c, shard).await;
        let inserts: Vec<_> = held
            .iter()
            .filter(|(s, _)| s.starts_with("INSERT"))
            .collect();
        assert_eq!(inserts.len(), 1, "shard {shard}: {held:?}");
        assert_eq!(inserts[0].1, rows, "shard {shard}: {held:?}");
    }
    drop(shards);
}

/// One request: a Parse of `parse` (name, text) first when given, then a Bind of statement
/// `name` with values (id, `value`) and an Execute for each of `ids`, and a Sync.
fn batch(parse: Option<(&str, &str)>, name: &str, ids: &[i64], value: &str) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = parse
        .map(|(n, t)| wire::parse(n, t, &[]))
        .into_iter()
        .collect();
    for id in ids {
        let id = id.to_string();
        out.push(wire::bind(
            "",
            name,
            &[Param::Text(&id), Param::Text(value)],
            false,
        ));
        out.push(wire::execute("", 0));
    }
    out.push(wire::sync());
    out
}
