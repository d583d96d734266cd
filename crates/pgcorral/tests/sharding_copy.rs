//! Loading and reading a sharded database through pgcorral, against real PostgreSQL servers
//! as shards: `COPY FROM STDIN` split row by row to the shards (text, CSV, binary; all or
//! nothing), pgbench's accounts loaded that way and read by key with pgbench in every protocol
//! mode, and psycopg and asyncpg routed by their parameters.

mod support;

use std::process::{Command, Stdio};

use bytes::Bytes;
use futures_util::SinkExt;
use support::sharding::{assert_placed, config, keys_per_shard, shard_of_int, start};
use support::{assert_pgbench_ok, pgbench_cmd, psql_cmd, run_cmd, stderr, stdout, Pooler};

use pgcorral::shard::key::KeyType;

const ACCOUNTS: &str = "CREATE TABLE accounts (aid int PRIMARY KEY, v text)";
const SHARDED: &str =
    "sharded_tables = [{ name = \"accounts\", columns = [\"aid\"], types = [\"int4\"] }]";

/// Rows of `accounts` on each shard.
fn counts(shards: &[support::Postgres]) -> Vec<String> {
    shards
        .iter()
        .map(|pg| pg.sql("postgres", "SELECT count(*) FROM accounts"))
        .collect()
}

/// Every key of `keys` is on the shard its hash names, and nothing else is anywhere.
fn assert_exactly(shards: &[support::Postgres], keys: impl Iterator<Item = i64>) {
    let mut want: Vec<Vec<i64>> = vec![Vec::new(); shards.len()];
    for k in keys {
        want[shard_of_int(k, KeyType::Int4, shards.len())].push(k);
    }
    for w in &mut want {
        w.sort();
    }
    assert_eq!(keys_per_shard(shards, "accounts", "aid"), want);
}

async fn copy_in(
    c: &tokio_postgres::Client,
    sql: &str,
    data: Vec<u8>,
) -> Result<u64, tokio_postgres::Error> {
    let sink = c.copy_in::<_, Bytes>(sql).await?;
    futures_util::pin_mut!(sink);
    // Several CopyData messages, cut inside rows.
    for chunk in data.chunks(1000) {
        sink.send(Bytes::copy_from_slice(chunk)).await?;
    }
    sink.finish().await
}

#[tokio::test(flavor = "multi_thread")]
async fn copy_from_stdin_is_split_to_the_shards_all_or_nothing() {
    let shards = start(3, ACCOUNTS);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let c = p.connect("postgres", None, "app").await;

    let text: Vec<u8> = (1..=3000)
        .flat_map(|k| format!("{k}\tv{k}\n").into_bytes())
        .collect();
    assert_eq!(
        copy_in(&c, "COPY accounts FROM STDIN", text).await.unwrap(),
        3000
    );
    let csv: Vec<u8> = std::iter::once("v,aid\n".to_string())
        .chain((3001..=4000).map(|k| format!("\"a,\"\"{k}\"\"\",{k}\n")))
        .flat_map(String::into_bytes)
        .collect();
    let n = copy_in(
        &c,
        "COPY accounts (v, aid) FROM STDIN WITH (FORMAT csv, HEADER true)",
        csv,
    )
    .await
    .unwrap();
    assert_eq!(n, 1000);
    // Binary: the file header, then (int4 aid, text v) tuples, then the trailer.
    let mut bin = b"PGCOPY\n\xff\r\n\0".to_vec();
    bin.extend_from_slice(&[0; 8]);
    for k in 4001..=5000i32 {
        bin.extend_from_slice(&2i16.to_be_bytes());
        bin.extend_from_slice(&4i32.to_be_bytes());
        bin.extend_from_slice(&k.to_be_bytes());
        let v = format!("b{k}");
        bin.extend_from_slice(&(v.len() as i32).to_be_bytes());
        bin.extend_from_slice(v.as_bytes());
    }
    bin.extend_from_slice(&(-1i16).to_be_bytes());
    let n = copy_in(&c, "COPY accounts FROM STDIN (FORMAT binary)", bin)
        .await
        .unwrap();
    assert_eq!(n, 1000);
    assert_exactly(&shards, 1..=5000);
    assert_placed(&shards, "accounts", "aid", "int4");
    assert_eq!(
        shards[shard_of_int(3500, KeyType::Int4, 3)]
            .sql("postgres", "SELECT v FROM accounts WHERE aid = 3500"),
        "a,\"3500\""
    );

    // A duplicate key on one shard fails the whole COPY: no new row anywhere.
    let before = counts(&shards);
    let data: Vec<u8> = (5001..=6000)
        .chain([17])
        .flat_map(|k| format!("{k}\tx\n").into_bytes())
        .collect();
    let e = copy_in(&c, "COPY accounts FROM STDIN", data)
        .await
        .unwrap_err();
    assert_eq!(support::sqlstate(&e), "23505");
    assert_eq!(counts(&shards), before);
    // So does a row pgcorral cannot split (too few columns for the key), and the client's
    // own CopyFail (a sink dropped before it finishes).
    let e = copy_in(
        &c,
        "COPY accounts (v, aid) FROM STDIN WITH (FORMAT csv)",
        b"x,6001\nonly\n".to_vec(),
    )
    .await
    .unwrap_err();
    assert!(!support::sqlstate(&e).is_empty(), "{e}");
    {
        let sink = c
            .copy_in::<_, Bytes>("COPY accounts FROM STDIN")
            .await
            .unwrap();
        futures_util::pin_mut!(sink);
        sink.send(Bytes::from_static(b"7001\tgone\n"))
            .await
            .unwrap();
    }
    assert_eq!(counts(&shards), before);
    // The connection goes on.
    assert_eq!(
        support::value(&c, "SELECT v FROM accounts WHERE aid = 4500").await,
        "b4500"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pgbench_accounts_loaded_by_copy_are_read_by_key_in_every_protocol() {
    let scale_rows = 30_000i64;
    let shards = start(3, "SELECT 1");
    for pg in &shards {
        // pgbench's own tables on every shard (drop, create), loaded by nobody yet.
        let out = pgbench_cmd(pg.port, "postgres", "postgres", None)
            .args(["-i", "-I", "dt", "-q"])
            .output()
            .unwrap();
        assert!(out.status.success(), "pgbench -i -I dt: {}", stderr(&out));
    }
    let db = "sharded_tables = [{ name = \"pgbench_accounts\", columns = [\"aid\"], types = [\"int4\"] }]";
    let p = Pooler::start(&config(&shards, "default_pool_size = 4", db)).await;
    // Loaded through pgcorral by psql's COPY, as pgbench -i writes them.
    let data: String = (1..=scale_rows)
        .map(|aid| format!("{aid}\t{}\t0\t\n", (aid - 1) / 100_000 + 1))
        .collect();
    let mut psql = psql_cmd(p.port(), "postgres", "app", None);
    psql.args([
        "-v",
        "ON_ERROR_STOP=1",
        "-c",
        "COPY pgbench_accounts FROM STDIN",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let out = support::blocking(move || {
        let mut child = psql.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(data.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    });
    assert!(
        out.status.success(),
        "COPY through pgcorral: {}",
        stderr(&out)
    );
    assert_eq!(stdout(&out).trim(), format!("COPY {scale_rows}"));
    let held = keys_per_shard(&shards, "pgbench_accounts", "aid");
    for (i, keys) in held.iter().enumerate() {
        assert!(keys.iter().all(|k| shard_of_int(*k, KeyType::Int4, 3) == i));
    }
    assert_eq!(held.iter().map(Vec::len).sum::<usize>() as i64, scale_rows);
    assert_placed(&shards, "pgbench_accounts", "aid", "int4");

    // pgbench -S's query, keyed by aid, in every protocol mode: every key is found.
    let script = std::env::temp_dir().join(format!("pgcorral-sharded-{}.sql", std::process::id()));
    std::fs::write(
        &script,
        format!(
            "\\set aid random(1, {scale_rows})\n\
             SELECT abalance FROM pgbench_accounts WHERE aid = :aid \\gset\n\
             \\if :abalance != 0\nSELECT 1/0;\n\\endif\n"
        ),
    )
    .unwrap();
    for mode in ["simple", "extended", "prepared"] {
        let mut c = pgbench_cmd(p.port(), "postgres", "app", None);
        c.args(["-n", "-c", "8", "-j", "2", "-T", "3", "-M", mode, "-f"])
            .arg(&script);
        let o = run_cmd(c).await;
        let tx = assert_pgbench_ok(&format!("pgbench -M {mode}"), &o);
        assert!(tx > 100, "{mode}: only {tx} transactions");
    }
    let _ = std::fs::remove_file(&script);
}

/// psycopg and asyncpg, routed by their parameters (tests/drivers/sharded_keys.py).
#[tokio::test(flavor = "multi_thread")]
async fn psycopg_and_asyncpg_are_routed_by_their_parameters() {
    let shards = start(3, ACCOUNTS);
    let p = Pooler::start(&config(&shards, "", SHARDED)).await;
    let py = std::env::var("PGCORRAL_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut c = Command::new(&py);
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/drivers"))
        .arg("sharded_keys.py")
        .args(["--port", &p.port().to_string(), "--keys", "200"])
        .stdin(Stdio::null());
    let out = run_cmd(c).await;
    assert!(
        out.status.success(),
        "sharded_keys.py failed (install the drivers: {py} -m pip install asyncpg 'psycopg[binary]')\n{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).contains("sharded ok"), "{}", stdout(&out));
    // Keys 1..=200 were written through the drivers: each is on its shard only.
    assert_exactly(&shards, 1..=200);
}
