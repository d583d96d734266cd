//! pgcorral's shard of a key against the partition PostgreSQL chooses: real `PARTITION BY HASH`
//! tables of every supported key type, and of multi-column keys with NULLs, under moduli 3, 4,
//! 5 and 7, thousands of keys each, every row's partition compared with the shard pgcorral
//! computes from the key as a client writes it, as the server prints it and as its binary
//! format carries it; and three servers as three shards, each holding only its own partition,
//! accepting exactly the rows pgcorral routes to it.

mod support;

use std::collections::HashMap;
use std::error::Error;

use pgcorral::shard::key::{shard_of, Function, KeyType, Value};
use support::rng::Rng;
use support::{blocking, direct, Postgres};
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{Client, SimpleQueryMessage};

/// Keys inserted into each table (all-NULL ones and edge values first, then random ones).
const KEYS_PER_TABLE: usize = 3000;

/// Non-powers of two matter: a remainder taken on the signed hash, or on its low bits, is wrong
/// for a share of the keys there.
const MODULI: [usize; 4] = [3, 4, 5, 7];

/// A partition key: the stem of its tables' names and its columns in key order (pgcorral's
/// type, the SQL type the table declares).
struct Key {
    name: &'static str,
    columns: &'static [(KeyType, &'static str)],
}

const KEYS: &[Key] = &[
    Key {
        name: "k_int2",
        columns: &[(KeyType::Int2, "smallint")],
    },
    Key {
        name: "k_int4",
        columns: &[(KeyType::Int4, "integer")],
    },
    Key {
        name: "k_int8",
        columns: &[(KeyType::Int8, "bigint")],
    },
    Key {
        name: "k_text",
        columns: &[(KeyType::Text, "text")],
    },
    Key {
        name: "k_varchar",
        columns: &[(KeyType::Varchar, "varchar(64)")],
    },
    Key {
        name: "k_bpchar",
        columns: &[(KeyType::Bpchar, "char(10)")],
    },
    Key {
        name: "k_uuid",
        columns: &[(KeyType::Uuid, "uuid")],
    },
    Key {
        name: "k_int8_text",
        columns: &[(KeyType::Int8, "bigint"), (KeyType::Text, "text")],
    },
    Key {
        name: "k_uuid_int4_text",
        columns: &[
            (KeyType::Uuid, "uuid"),
            (KeyType::Int4, "integer"),
            (KeyType::Text, "text"),
        ],
    },
    Key {
        name: "k_bpchar_int2_varchar",
        columns: &[
            (KeyType::Bpchar, "char(10)"),
            (KeyType::Int2, "smallint"),
            (KeyType::Varchar, "varchar(64)"),
        ],
    },
];

/// One row's key: each column's text as a client writes it (`None`: NULL).
type Row = Vec<Option<String>>;

/// Single-byte characters of the random strings (quotes and backslashes included).
const ASCII: &[u8] =
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_'\"\\.,;:!?/()[]{}%$#@&*+=<>|~";

/// Multi-byte UTF-8 characters (2, 3 and 4 bytes, a combining accent) and control characters
/// of the random strings.
const WIDE: &[char] = &[
    'é', 'ß', 'ñ', 'ж', 'Ω', '€', '漢', '字', '😀', '𝄞', '\u{301}', '\t', '\n',
];

fn random_char(rng: &mut Rng) -> char {
    if rng.below(4) == 0 {
        WIDE[rng.below(WIDE.len())]
    } else {
        char::from(ASCII[rng.below(ASCII.len())])
    }
}

/// A string of exactly `len` bytes, multi-byte characters where they fit: every length of
/// lookup3's last partial 12-byte block, and characters straddling the blocks.
fn string_of_bytes(rng: &mut Rng, len: usize, wide: bool) -> String {
    let mut s = String::new();
    while s.len() < len {
        let c = if wide {
            random_char(rng)
        } else {
            char::from(ASCII[rng.below(ASCII.len())])
        };
        if s.len() + c.len_utf8() <= len {
            s.push(c);
        }
    }
    s
}

fn string_of_chars(rng: &mut Rng, chars: usize) -> String {
    (0..chars).map(|_| random_char(rng)).collect()
}

/// An integer of `ty`'s range: any bits, a small number, or one next to a power of two.
fn random_int(rng: &mut Rng, ty: KeyType) -> i64 {
    let v = match rng.below(4) {
        0 => rng.next() as i64,
        1 => rng.below(2001) as i64 - 1000,
        2 => {
            let near = (1i64 << rng.below(63)) + rng.below(3) as i64 - 1;
            if rng.one_in(2) {
                near
            } else {
                near.wrapping_neg()
            }
        }
        _ => i64::from(rng.next() as i32),
    };
    match ty {
        KeyType::Int2 => i64::from(v as i16),
        KeyType::Int4 => i64::from(v as i32),
        _ => v,
    }
}

/// An integer as a client may write it: mostly plain, sometimes with a '+' or spaces, which
/// PostgreSQL accepts.
fn int_text(rng: &mut Rng, v: i64) -> String {
    match rng.below(10) {
        0 if v >= 0 => format!("+{v}"),
        1 => format!("  {v} "),
        _ => v.to_string(),
    }
}

/// A uuid in one of the forms PostgreSQL accepts.
fn uuid_text(rng: &mut Rng, bytes: [u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let canonical = format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    );
    match rng.below(8) {
        0 => canonical.to_uppercase(),
        1 => format!("{{{canonical}}}"),
        2 => hex,
        3 => {
            let groups: Vec<&str> = (0..8).map(|i| &hex[i * 4..i * 4 + 4]).collect();
            groups.join("-")
        }
        _ => canonical,
    }
}

fn random_uuid(rng: &mut Rng) -> [u8; 16] {
    let (a, b) = (rng.next().to_le_bytes(), rng.next().to_le_bytes());
    let mut u = [0; 16];
    u[..8].copy_from_slice(&a);
    u[8..].copy_from_slice(&b);
    u
}

/// A random value of `ty` as a client writes it. Strings stay within the tables' lengths
/// (varchar(64), char(10)): PostgreSQL cuts a longer value's trailing spaces to fit, which
/// pgcorral, knowing no length, cannot.
fn random_value(rng: &mut Rng, ty: KeyType) -> String {
    match ty {
        KeyType::Int2 | KeyType::Int4 | KeyType::Int8 => {
            let v = random_int(rng, ty);
            int_text(rng, v)
        }
        KeyType::Text | KeyType::Varchar => {
            let n = rng.below(41);
            string_of_chars(rng, n)
        }
        KeyType::Bpchar => {
            let n = rng.below(11);
            let mut s = string_of_chars(rng, n);
            // Trailing spaces, which char(n) ignores, on a third of the values.
            if rng.one_in(3) {
                let pad = rng.below(10 - n + 1);
                s.extend(std::iter::repeat_n(' ', pad));
            }
            s
        }
        KeyType::Uuid => {
            let u = random_uuid(rng);
            uuid_text(rng, u)
        }
    }
}

/// The values of `ty` every run must check: the integer bounds, and strings of every byte
/// length up to 40 (every tail of lookup3's 12-byte blocks), with and without trailing spaces.
fn edge_values(rng: &mut Rng, ty: KeyType) -> Vec<String> {
    let mut ints: Vec<i64> = vec![0, 1, -1, 2, -2, 255, 256, -256, 12345, -12345];
    ints.extend([i16::MIN, i16::MIN + 1, i16::MAX - 1, i16::MAX].map(i64::from));
    if ty != KeyType::Int2 {
        ints.extend([i32::MIN, i32::MIN + 1, i32::MAX - 1, i32::MAX].map(i64::from));
        ints.extend([65535, 65536, -65536, 1 << 24, -(1 << 24)]);
    }
    if ty == KeyType::Int8 {
        ints.extend([i64::MIN, i64::MIN + 1, i64::MAX - 1, i64::MAX]);
        ints.extend([
            1 << 31,
            -(1 << 31) - 1,
            (1 << 32) - 1,
            1 << 32,
            (1 << 32) + 1,
        ]);
        ints.extend([-(1 << 32), -(1 << 32) - 1, 1 << 53, 1 << 62, -(1 << 62)]);
        ints.extend([0x1234_5678_9abc_def0, -0x1234_5678_9abc_def0]);
    }
    match ty {
        KeyType::Int2 | KeyType::Int4 | KeyType::Int8 => {
            ints.iter().map(|v| v.to_string()).collect()
        }
        KeyType::Text | KeyType::Varchar => {
            let mut v = Vec::new();
            for len in 0..=40 {
                v.push(string_of_bytes(rng, len, false));
                v.push(string_of_bytes(rng, len, true));
            }
            v.extend(
                [
                    "abc",
                    "hello world!!",
                    " leading",
                    "trailing  ",
                    "  ",
                    "a'b",
                    "back\\slash",
                    "tab\tand\nnewline",
                    "Grüße aus Köln",
                    "日本語のテキスト",
                    "😀😀😀",
                    "e\u{301}",
                    "0123456789ab",
                    "0123456789abc",
                ]
                .map(String::from),
            );
            v.push("x".repeat(64));
            v
        }
        KeyType::Bpchar => {
            let mut v = Vec::new();
            for n in 0..=10 {
                let s = string_of_chars(rng, n);
                v.push(format!("{s:<10}"));
                v.push(format!("{s} "));
                v.push(s);
            }
            v.extend(
                [
                    "",
                    " ",
                    "          ",
                    " a",
                    "a b",
                    "a b ",
                    "ab\t",
                    "日本 ",
                    "ñandú",
                    // Longer than 10 only by trailing spaces: PostgreSQL cuts them, and its
                    // hash and pgcorral's ignore them.
                    "ab               ",
                ]
                .map(String::from),
            );
            v
        }
        KeyType::Uuid => {
            let mut v = Vec::new();
            for u in [
                [0; 16],
                [0xff; 16],
                [0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                [
                    0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd,
                    0x38, 0x0a, 0x11,
                ],
            ] {
                for _ in 0..4 {
                    v.push(uuid_text(rng, u));
                }
            }
            v
        }
    }
}

/// The keys of `key`'s tables: all-NULL rows (ids 0 to 2, partition 0), each column's edge
/// values with the other columns random or NULL, then random keys with a NULL now and then.
fn generate(rng: &mut Rng, key: &Key) -> Vec<Row> {
    let width = key.columns.len();
    let mut rows: Vec<Row> = vec![vec![None; width]; 3];
    let maybe = |rng: &mut Rng, ty: KeyType| (!rng.one_in(5)).then(|| random_value(rng, ty));
    for (j, &(ty, _)) in key.columns.iter().enumerate() {
        for edge in edge_values(rng, ty) {
            let row = (0..width)
                .map(|k| {
                    if k == j {
                        Some(edge.clone())
                    } else {
                        maybe(rng, key.columns[k].0)
                    }
                })
                .collect();
            rows.push(row);
        }
    }
    let null_in = if width == 1 { 50 } else { 8 };
    while rows.len() < KEYS_PER_TABLE {
        let row = key
            .columns
            .iter()
            .map(|&(ty, _)| (!rng.one_in(null_in)).then(|| random_value(rng, ty)))
            .collect();
        rows.push(row);
    }
    rows
}

/// A column's value in its binary format, as a binary-format parameter carries it.
struct Binary(Vec<u8>);

impl<'a> FromSql<'a> for Binary {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Binary, Box<dyn Error + Sync + Send>> {
        Ok(Binary(raw.to_vec()))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// pgcorral's shard of a key among `n`.
fn shard(key: &Key, values: &[Value], n: usize) -> usize {
    let columns: Vec<(KeyType, &Value)> = key
        .columns
        .iter()
        .zip(values)
        .map(|(&(ty, _), v)| (ty, v))
        .collect();
    shard_of(&columns, Function::PgHash, n)
}

fn column_names(key: &Key) -> Vec<String> {
    (1..=key.columns.len()).map(|j| format!("c{j}")).collect()
}

fn table(key: &Key, n: usize) -> String {
    format!("{}_m{n}", key.name)
}

/// The table of `key` for each modulus, partitioned by hash into `{table}_r{remainder}`.
async fn create_tables(c: &Client, key: &Key) {
    let cols = column_names(key);
    let defs: Vec<String> = cols
        .iter()
        .zip(key.columns)
        .map(|(name, (_, sql))| format!("{name} {sql}"))
        .collect();
    let mut ddl = String::new();
    for n in MODULI {
        let t = table(key, n);
        ddl += &format!(
            "CREATE TABLE {t} (id int4 NOT NULL, {}) PARTITION BY HASH ({});\n",
            defs.join(", "),
            cols.join(", ")
        );
        for r in 0..n {
            ddl += &format!(
                "CREATE TABLE {t}_r{r} PARTITION OF {t} FOR VALUES WITH (MODULUS {n}, REMAINDER {r});\n"
            );
        }
    }
    c.batch_execute(&ddl).await.expect("create the hash tables");
}

/// Inserts `rows` (ids are their indexes) into every table of `key`, each column sent as text
/// and cast by the server as its input function reads it.
async fn insert(c: &Client, key: &Key, rows: &[Row]) {
    let ids: Vec<i32> = (0..rows.len() as i32).collect();
    let columns: Vec<Vec<Option<String>>> = (0..key.columns.len())
        .map(|j| rows.iter().map(|r| r[j].clone()).collect())
        .collect();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&ids];
    params.extend(columns.iter().map(|c| c as &(dyn ToSql + Sync)));
    let cols = column_names(key);
    let arrays: Vec<String> = (2..=cols.len() + 1)
        .map(|i| format!("${i}::text[]"))
        .collect();
    let casts: Vec<String> = cols
        .iter()
        .zip(key.columns)
        .map(|(name, (ty, _))| format!("{name}::{}", ty.name()))
        .collect();
    for n in MODULI {
        let sql = format!(
            "INSERT INTO {t} (id, {cols}) SELECT id, {casts} FROM unnest($1::int4[], {arrays}) \
             AS u(id, {cols})",
            t = table(key, n),
            cols = cols.join(", "),
            casts = casts.join(", "),
            arrays = arrays.join(", "),
        );
        let inserted = c.execute(&sql, &params).await.expect("insert the keys");
        assert_eq!(inserted, rows.len() as u64, "{sql}");
    }
}

/// The remainder of the partition PostgreSQL put each row of `key`'s table of modulus `n` in,
/// by id, read from the name of the row's `tableoid`.
async fn partitions(c: &Client, key: &Key, n: usize) -> HashMap<i32, usize> {
    let t = table(key, n);
    let rows = c
        .query(
            &format!("SELECT id, tableoid::regclass::text FROM {t}"),
            &[],
        )
        .await
        .expect("read the partitions");
    rows.iter()
        .map(|row| {
            let part: String = row.get(1);
            let r = part
                .strip_prefix(&format!("{t}_r"))
                .and_then(|r| r.parse().ok())
                .unwrap_or_else(|| panic!("partition {part:?} of {t}"));
            (row.get(0), r)
        })
        .collect()
}

/// Each row's key as the server prints it (simple protocol: text) and as its binary format
/// carries it (extended protocol: binary), by id.
async fn stored_keys(
    c: &Client,
    key: &Key,
) -> (HashMap<i32, Vec<Value>>, HashMap<i32, Vec<Value>>) {
    let sql = format!(
        "SELECT id, {} FROM {}",
        column_names(key).join(", "),
        table(key, MODULI[0])
    );
    let mut text = HashMap::new();
    for m in c.simple_query(&sql).await.expect("read the keys as text") {
        if let SimpleQueryMessage::Row(r) = m {
            let id: i32 = r.get(0).expect("an id").parse().expect("an id");
            let values = key
                .columns
                .iter()
                .enumerate()
                .map(|(j, &(ty, _))| match r.get(j + 1) {
                    None => Value::Null,
                    Some(s) => Value::from_text(ty, s.as_bytes())
                        .unwrap_or_else(|e| panic!("{s:?} as printed by the server: {e}")),
                })
                .collect();
            text.insert(id, values);
        }
    }
    let mut binary = HashMap::new();
    for r in c.query(&sql, &[]).await.expect("read the keys as binary") {
        let values = key
            .columns
            .iter()
            .enumerate()
            .map(|(j, &(ty, _))| match r.get::<_, Option<Binary>>(j + 1) {
                None => Value::Null,
                Some(Binary(b)) => Value::from_binary(ty, &b)
                    .unwrap_or_else(|e| panic!("{b:?} in binary from the server: {e}")),
            })
            .collect();
        binary.insert(r.get(0), values);
    }
    (text, binary)
}

/// The key's column types as the catalog names them (`format_type`), in key order.
async fn catalog_types(c: &Client, key: &Key) -> Vec<String> {
    let sql = format!(
        "SELECT format_type(a.atttypid, a.atttypmod) \
         FROM pg_partitioned_table p, unnest(p.partattrs::int2[]) WITH ORDINALITY AS k(attnum, i) \
         JOIN pg_attribute a ON a.attnum = k.attnum \
         WHERE p.partrelid = '{}'::regclass AND a.attrelid = p.partrelid ORDER BY k.i",
        table(key, MODULI[0])
    );
    let rows = c.query(&sql, &[]).await.expect("read the partition key");
    rows.iter().map(|r| r.get(0)).collect()
}

/// Rows PostgreSQL's own `satisfies_hash_partition` disagrees on, given pgcorral's remainders
/// of the rows of `key`'s table of modulus `n`: those that do not satisfy pgcorral's remainder,
/// and those that satisfy the next one too.
async fn rejected_by_satisfies_hash_partition(
    c: &Client,
    key: &Key,
    n: usize,
    ours: &[(i32, i32)],
) -> (i64, i64) {
    let t = table(key, n);
    let cols = column_names(key).join(", ");
    let sql = format!(
        "SELECT count(*) FILTER (WHERE NOT satisfies_hash_partition('{t}'::regclass, {n}, s.r, {cols})), \
                count(*) FILTER (WHERE satisfies_hash_partition('{t}'::regclass, {n}, (s.r + 1) % {n}, {cols})), \
                count(*) \
         FROM {t} JOIN unnest($1::int4[], $2::int4[]) AS s(id, r) USING (id)"
    );
    let (ids, rs): (Vec<i32>, Vec<i32>) = ours.iter().copied().unzip();
    let row = c
        .query_one(&sql, &[&ids, &rs])
        .await
        .expect("satisfies_hash_partition");
    assert_eq!(row.get::<_, i64>(2), ours.len() as i64, "{t}: rows checked");
    (row.get(0), row.get(1))
}

/// One server holds every table: where PostgreSQL places a row depends only on the key, the
/// key's types and the modulus, never on the server, so more servers would add startup time and
/// nothing to this check (the three-server test below covers shards as separate servers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_lands_in_the_partition_postgresql_chooses() {
    let pg = blocking(Postgres::start);
    let c = direct(&pg).await;
    let mut rng = Rng(0x5EED_0FC0_22A1);
    let mut mismatches: Vec<String> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut checked = 0usize;
    for key in KEYS {
        let rows = generate(&mut rng, key);
        create_tables(&c, key).await;
        // The catalog's names of the key's types are pgcorral's types.
        let types = catalog_types(&c, key).await;
        let expected: Vec<Option<KeyType>> = key.columns.iter().map(|&(ty, _)| Some(ty)).collect();
        let read: Vec<Option<KeyType>> = types.iter().map(|t| KeyType::from_pg_name(t)).collect();
        assert_eq!(read, expected, "{}: key types {types:?}", key.name);
        insert(&c, key, &rows).await;
        let (printed, binary) = stored_keys(&c, key).await;
        for n in MODULI {
            let placed = partitions(&c, key, n).await;
            assert_eq!(placed.len(), rows.len(), "{}: rows", table(key, n));
            let mut per_partition = vec![0usize; n];
            let mut ours = Vec::with_capacity(rows.len());
            for (id, written) in rows.iter().enumerate() {
                let id = id as i32;
                let pg_r = placed[&id];
                per_partition[pg_r] += 1;
                let from_client: Vec<Value> = key
                    .columns
                    .iter()
                    .zip(written)
                    .map(|(&(ty, _), v)| match v {
                        None => Value::Null,
                        Some(s) => Value::from_text(ty, s.as_bytes())
                            .unwrap_or_else(|e| panic!("{s:?} as written: {e}")),
                    })
                    .collect();
                // From the key as the client wrote it, as the server prints it, and in binary.
                let r = shard(key, &from_client, n);
                let got = [r, shard(key, &printed[&id], n), shard(key, &binary[&id], n)];
                if got != [pg_r; 3] {
                    mismatches.push(format!(
                        "{} id {id} key {written:?}: PostgreSQL {pg_r}, pgcorral {got:?} \
                         (written, printed, binary)",
                        table(key, n)
                    ));
                }
                ours.push((id, r as i32));
                checked += 1;
            }
            assert!(
                per_partition.iter().all(|&k| k > 0),
                "{}: a partition got no row: {per_partition:?}",
                table(key, n)
            );
            for id in 0..3 {
                assert_eq!(placed[&id], 0, "{}: the all-NULL key", table(key, n));
            }
            let (unsatisfied, also_next) =
                rejected_by_satisfies_hash_partition(&c, key, n, &ours).await;
            if (unsatisfied, also_next) != (0, 0) {
                refused.push(format!(
                    "{}: {unsatisfied} rows do not satisfy pgcorral's remainder, {also_next} \
                     satisfy the next one too",
                    table(key, n)
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty() && refused.is_empty(),
        "{} of {checked} rows placed elsewhere than pgcorral says; satisfies_hash_partition:\n{}\n\
         first rows:\n{}",
        mismatches.len(),
        refused.join("\n"),
        mismatches[..mismatches.len().min(20)].join("\n")
    );
    assert_eq!(checked, KEYS.len() * MODULI.len() * KEYS_PER_TABLE);
}

/// Three servers as the three shards of table `orders`, keyed by (customer int8, region text):
/// each holds only its own hash partition (modulus 3, remainder = its shard number), so that
/// PostgreSQL refuses a row sent to the wrong server. Every row pgcorral routes is accepted
/// where it goes, the shards split the keys, and a row sent elsewhere is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shard_server_accepts_exactly_the_rows_pgcorral_routes_to_it() {
    let servers: Vec<Postgres> = blocking(|| {
        std::thread::scope(|s| {
            let starting: Vec<_> = (0..3).map(|_| s.spawn(Postgres::start)).collect();
            starting.into_iter().map(|h| h.join().unwrap()).collect()
        })
    });
    let mut shards = Vec::new();
    for (i, pg) in servers.iter().enumerate() {
        let c = direct(pg).await;
        c.batch_execute(&format!(
            "CREATE TABLE orders (customer bigint, region text, amount int4 NOT NULL) \
             PARTITION BY HASH (customer, region);\n\
             CREATE TABLE orders_r{i} PARTITION OF orders FOR VALUES WITH (MODULUS 3, REMAINDER {i});"
        ))
        .await
        .expect("create the shard's partition");
        shards.push(c);
    }

    let key = KEYS.iter().find(|k| k.name == "k_int8_text").unwrap();
    let mut rng = Rng(0x0005_4A2D_5EED);
    let rows = generate(&mut rng, key);
    let mut routed: Vec<Vec<&Row>> = vec![Vec::new(); 3];
    for row in &rows {
        let values: Vec<Value> = key
            .columns
            .iter()
            .zip(row)
            .map(|(&(ty, _), v)| match v {
                None => Value::Null,
                Some(s) => Value::from_text(ty, s.as_bytes()).expect("a key"),
            })
            .collect();
        routed[shard(key, &values, 3)].push(row);
    }

    let insert = "INSERT INTO orders (customer, region, amount) \
                  SELECT c::int8, r, 1 FROM unnest($1::text[], $2::text[]) AS u(c, r)";
    let columns = |rows: &[&Row]| -> (Vec<Option<String>>, Vec<Option<String>>) {
        rows.iter().map(|r| (r[0].clone(), r[1].clone())).unzip()
    };
    for (i, (c, rows)) in shards.iter().zip(&routed).enumerate() {
        let (customers, regions) = columns(rows);
        let n = c
            .execute(insert, &[&customers, &regions])
            .await
            .unwrap_or_else(|e| panic!("shard {i} refused a row pgcorral routed to it: {e}"));
        assert_eq!(n, rows.len() as u64, "shard {i}");
        assert!(
            rows.len() > KEYS_PER_TABLE / 5,
            "shard {i} got only {} of {} keys",
            rows.len(),
            KEYS_PER_TABLE
        );
        let held = support::value(c, "SELECT count(*) FROM orders").await;
        assert_eq!(held, rows.len().to_string(), "shard {i}");
    }

    // A key of each shard, sent to the next server instead, is refused there.
    for (i, rows) in routed.iter().enumerate() {
        let wrong = (i + 1) % 3;
        let (customers, regions) = columns(&rows[..1]);
        let e = shards[wrong]
            .execute(insert, &[&customers, &regions])
            .await
            .expect_err("a row on the wrong shard");
        assert_eq!(support::sqlstate(&e), "23514", "{e}");
    }
}
