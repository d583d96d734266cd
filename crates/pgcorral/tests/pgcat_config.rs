//! pgcorral started on a PgCat configuration file as PgCat users write it: two real servers as
//! the shards of one pool with `automatic_sharding_key`, reached through pgcorral with md5
//! logins; SET SHARD, SET SHARDING KEY, PgCat's default shard and automatic routing land where
//! PgCat would send them, and the keys pgcorral does not honour are warned about by name.

mod support;

use pgcorral::shard::key::{shard_of, Function, KeyType, Value};
use support::{blocking, connect, free_port, PoolerProcess, Postgres};
use tokio_postgres::{Client, SimpleQueryMessage};

/// The first column of the one row `sql` returns (simple protocol).
async fn one(client: &Client, sql: &str) -> String {
    let rows = client.simple_query(sql).await.unwrap();
    rows.iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(String::from),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{sql}: no row"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pgcat_file_routes_as_pgcat_does() {
    let shards: Vec<Postgres> = blocking(|| (0..2).map(|_| Postgres::start()).collect());
    for (i, pg) in shards.iter().enumerate() {
        blocking(|| {
            pg.create_user("app", "app-secret");
            pg.create_db(&format!("shard{i}"));
            pg.sql(
                &format!("shard{i}"),
                "CREATE TABLE users (id bigint PRIMARY KEY, name text)",
            );
        });
    }
    let port = free_port();
    let file = format!(
        r#"
[general]
host = "127.0.0.1"
port = {port}
connect_timeout = 5000
admin_username = "cat_admin"
admin_password = "cat_admin_pw"
tcp_keepalives_idle = 5

[pools.sharded_db]
pool_mode = "transaction"
default_role = "primary"
query_parser_enabled = true
sharding_function = "pg_bigint_hash"
automatic_sharding_key = "users.id"

[pools.sharded_db.users.0]
username = "app"
password = "app-secret"
pool_size = 4
statement_timeout = 30000

[pools.sharded_db.shards.0]
servers = [["127.0.0.1", {p0}, "primary"]]
database = "shard0"

[pools.sharded_db.shards.1]
servers = [["127.0.0.1", {p1}, "primary"]]
database = "shard1"
"#,
        p0 = shards[0].port,
        p1 = shards[1].port
    );
    let pooler = blocking(|| PoolerProcess::start_file("pgcat.toml", &file, port));
    let log = pooler.log();
    for key in [
        "general.tcp_keepalives_idle",
        "pools.sharded_db.users.0.statement_timeout",
    ] {
        assert!(
            log.lines().any(|l| l.contains("WARN") && l.contains(key)),
            "no warning naming {key}:\n{log}"
        );
    }
    let server_port = |shard: usize| shards[shard].port.to_string();
    let app = || connect(port, "app", Some("app-secret"), "sharded_db");

    // SET SHARD TO '1': the session's queries go to shard 1.
    let c = app().await.unwrap();
    c.simple_query("SET SHARD TO '1'").await.unwrap();
    assert_eq!(
        one(&c, "SELECT current_setting('port')").await,
        server_port(1)
    );
    assert_eq!(one(&c, "SELECT current_database()").await, "shard1");

    // SET SHARDING KEY TO '1234': the key's shard under PostgreSQL's hash, modulus 2.
    let want = shard_of(&[(KeyType::Int8, &Value::Int(1234))], Function::PgHash, 2);
    let c = app().await.unwrap();
    c.simple_query("SET SHARDING KEY TO '1234'").await.unwrap();
    assert_eq!(
        one(&c, "SELECT current_setting('port')").await,
        server_port(want)
    );

    // No key for the sharded table, and no default_shard: PgCat answers from shard 0; pgcorral
    // asks every shard (docs/pgcat.md), one row per shard here, through either protocol.
    let c = app().await.unwrap();
    for (i, pg) in shards.iter().enumerate() {
        pg.sql(
            &format!("shard{i}"),
            &format!("INSERT INTO users VALUES ({}, 'seed')", 1000 + i),
        );
    }
    assert_eq!(one(&c, "SELECT count(*) FROM users").await, "2");
    let n: i64 = c
        .query_one("SELECT count(*) FROM users", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
    for (i, pg) in shards.iter().enumerate() {
        pg.sql(
            &format!("shard{i}"),
            "DELETE FROM users WHERE name = 'seed'",
        );
    }

    // The key in WHERE routes by itself, as text and as a parameter.
    let want = shard_of(&[(KeyType::Int8, &Value::Int(5))], Function::PgHash, 2);
    let c = app().await.unwrap();
    let row = c
        .query_one(
            "SELECT current_setting('port'), count(*) FROM users WHERE id = 5",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), server_port(want));
    let row = c
        .query_one(
            "SELECT current_setting('port'), count(*) FROM users WHERE id = $1",
            &[&5i64],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), server_port(want));
    // A row written through pgcorral lands on its key's shard only.
    c.execute("INSERT INTO users (id, name) VALUES ($1, 'five')", &[&5i64])
        .await
        .unwrap();
    for (i, pg) in shards.iter().enumerate() {
        let n = blocking(|| {
            pg.sql(
                &format!("shard{i}"),
                "SELECT count(*) FROM users WHERE id = 5",
            )
        });
        assert_eq!(n, if i == want { "1" } else { "0" }, "shard {i}");
    }

    // The admin from admin_username reaches the console.
    let admin = connect(port, "cat_admin", Some("cat_admin_pw"), "pgbouncer")
        .await
        .unwrap();
    admin.simple_query("SHOW POOLS").await.unwrap();
    drop(pooler);
}
