//! Sharding key values: the supported key types, a value read from SQL text or from a
//! parameter in text or binary format, and its column hash under the database's function.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::hash;

/// A sharding key column's type (PostgreSQL's names; the aliases PostgreSQL accepts too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyType {
    #[serde(alias = "smallint")]
    Int2,
    #[serde(alias = "integer", alias = "int")]
    Int4,
    #[serde(alias = "bigint")]
    Int8,
    Text,
    #[serde(alias = "character varying")]
    Varchar,
    /// char(n): compared and hashed without trailing spaces.
    #[serde(alias = "char", alias = "character")]
    Bpchar,
    Uuid,
}

impl KeyType {
    pub fn name(self) -> &'static str {
        match self {
            KeyType::Int2 => "int2",
            KeyType::Int4 => "int4",
            KeyType::Int8 => "int8",
            KeyType::Text => "text",
            KeyType::Varchar => "varchar",
            KeyType::Bpchar => "bpchar",
            KeyType::Uuid => "uuid",
        }
    }

    /// The type of a catalog's `format_type` or `typname`, when it is one of these.
    pub fn from_pg_name(name: &str) -> Option<KeyType> {
        let base = name.split('(').next().unwrap_or(name).trim();
        Some(match base {
            "smallint" | "int2" => KeyType::Int2,
            "integer" | "int4" | "int" => KeyType::Int4,
            "bigint" | "int8" => KeyType::Int8,
            "text" => KeyType::Text,
            "character varying" | "varchar" => KeyType::Varchar,
            "character" | "bpchar" | "char" => KeyType::Bpchar,
            "uuid" => KeyType::Uuid,
            _ => return None,
        })
    }

    pub fn is_int(self) -> bool {
        matches!(self, KeyType::Int2 | KeyType::Int4 | KeyType::Int8)
    }
}

/// How a key becomes a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Function {
    /// PostgreSQL's `PARTITION BY HASH` placement (PgCat's `pg_bigint_hash`, for every type).
    #[default]
    #[serde(alias = "pg_bigint_hash", alias = "postgres")]
    PgHash,
    /// PgCat's `sha1`: SHA-1 of the key's text, its last four bytes as a big-endian number.
    Sha1,
}

/// Why a value cannot be a key of its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadKey {
    pub ty: KeyType,
    pub why: &'static str,
}

impl fmt::Display for BadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid sharding key of type {}: {}",
            self.ty.name(),
            self.why
        )
    }
}

/// One column's value, normalised: what its hash depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Int(i64),
    /// text, varchar, bpchar (as written: the hash drops a bpchar's trailing spaces).
    Text(Vec<u8>),
    Uuid([u8; 16]),
}

impl Value {
    /// A value from its text form (SQL literal contents, a text-format parameter).
    pub fn from_text(ty: KeyType, text: &[u8]) -> Result<Value, BadKey> {
        let bad = |why| BadKey { ty, why };
        match ty {
            // Plain digits (most keys): read at once; 18 of them cannot overflow an i64.
            KeyType::Int2 | KeyType::Int4 | KeyType::Int8
                if (1..=18).contains(&text.len()) && text.iter().all(u8::is_ascii_digit) =>
            {
                let v = text.iter().fold(0i64, |v, &d| v * 10 + i64::from(d - b'0'));
                in_range(ty, v)
            }
            KeyType::Int2 | KeyType::Int4 | KeyType::Int8 => {
                let s = std::str::from_utf8(text).map_err(|_| bad("not a number"))?;
                // PostgreSQL allows surrounding whitespace and a leading '+', and '_' between
                // digits (16 and later).
                let s = s.trim_matches(|c: char| c.is_ascii_whitespace());
                let s = s.strip_prefix('+').unwrap_or(s);
                let v: i64 = if s.contains('_') {
                    let digits: String = s.chars().filter(|&c| c != '_').collect();
                    digits.parse()
                } else {
                    s.parse()
                }
                .map_err(|_| bad("not an integer"))?;
                in_range(ty, v)
            }
            KeyType::Text | KeyType::Varchar | KeyType::Bpchar => Ok(Value::Text(text.to_vec())),
            KeyType::Uuid => parse_uuid(text).map(Value::Uuid).ok_or(bad("not a uuid")),
        }
    }

    /// A value from a binary-format parameter. An integer key takes any integer width: the
    /// client chose the parameter's type (int2 for a small number, say), and the value is
    /// the same whatever its width.
    pub fn from_binary(ty: KeyType, bytes: &[u8]) -> Result<Value, BadKey> {
        let bad = |why| BadKey { ty, why };
        let int = match bytes.len() {
            2 => i64::from(i16::from_be_bytes([bytes[0], bytes[1]])),
            4 => i64::from(i32::from_be_bytes(bytes.try_into().expect("4 bytes"))),
            8 => i64::from_be_bytes(bytes.try_into().expect("8 bytes")),
            _ => 0,
        };
        match (ty, bytes.len()) {
            (KeyType::Int2 | KeyType::Int4 | KeyType::Int8, 2 | 4 | 8) => in_range(ty, int),
            (KeyType::Uuid, 16) => Ok(Value::Uuid(bytes.try_into().expect("16 bytes"))),
            (KeyType::Text | KeyType::Varchar | KeyType::Bpchar, _) => {
                Ok(Value::Text(bytes.to_vec()))
            }
            _ => Err(bad("wrong length for its binary format")),
        }
    }

    /// An integer literal the parser already read (an SQL constant of a numeric key).
    pub fn from_int(ty: KeyType, v: i64) -> Result<Value, BadKey> {
        if ty.is_int() {
            in_range(ty, v)
        } else {
            Value::from_text(ty, v.to_string().as_bytes())
        }
    }

    /// This column's hash under `function` (`None` for NULL, which the row hash skips).
    pub fn hash(&self, ty: KeyType, function: Function) -> Option<u64> {
        let seed = hash::PARTITION_SEED;
        match function {
            Function::PgHash => match self {
                Value::Null => None,
                Value::Int(v) => Some(hash::int(*v, seed)),
                Value::Text(b) if ty == KeyType::Bpchar => Some(hash::bpchar(b, seed)),
                Value::Text(b) => Some(hash::text(b, seed)),
                Value::Uuid(u) => Some(hash::uuid(u, seed)),
            },
            Function::Sha1 => match self {
                Value::Null => None,
                Value::Int(v) => Some(sha1_tail(v.to_string().as_bytes())),
                Value::Text(b) => Some(sha1_tail(b)),
                Value::Uuid(u) => Some(sha1_tail(format_uuid(u).as_bytes())),
            },
        }
    }
}

/// The shard of a key (its columns' values, in key order) among `shards`.
pub fn shard_of(values: &[(KeyType, &Value)], function: Function, shards: usize) -> usize {
    shard_of_pairs(values.iter().map(|(t, v)| (*t, *v)), function, shards)
}

/// [`shard_of`] with the key's types and values apart.
pub fn shard_of_columns(
    types: &[KeyType],
    values: &[Value],
    function: Function,
    shards: usize,
) -> usize {
    shard_of_pairs(types.iter().copied().zip(values), function, shards)
}

fn shard_of_pairs<'a>(
    mut columns: impl Iterator<Item = (KeyType, &'a Value)>,
    function: Function,
    shards: usize,
) -> usize {
    let row = match function {
        Function::PgHash => hash::row(columns.map(|(ty, v)| v.hash(ty, function))),
        // PgCat's sha1 has one column: the first non-NULL one's.
        Function::Sha1 => columns
            .find_map(|(ty, v)| v.hash(ty, function))
            .unwrap_or(0),
    };
    hash::partition(row, shards)
}

fn in_range(ty: KeyType, v: i64) -> Result<Value, BadKey> {
    let ok = match ty {
        KeyType::Int2 => i16::try_from(v).is_ok(),
        KeyType::Int4 => i32::try_from(v).is_ok(),
        _ => true,
    };
    if ok {
        Ok(Value::Int(v))
    } else {
        Err(BadKey {
            ty,
            why: "out of range",
        })
    }
}

/// PostgreSQL's uuid input: 32 hex digits, optionally in braces, with a '-' allowed after any
/// group of four digits.
fn parse_uuid(text: &[u8]) -> Option<[u8; 16]> {
    let inner = match text {
        [b'{', rest @ .., b'}'] => rest,
        _ => text,
    };
    let mut out = [0u8; 16];
    let mut n = 0;
    let mut i = 0;
    while n < 32 {
        if n > 0 && n % 4 == 0 && inner.get(i) == Some(&b'-') {
            i += 1;
        }
        let d = (*inner.get(i)? as char).to_digit(16)? as u8;
        out[n / 2] |= if n % 2 == 0 { d << 4 } else { d };
        n += 1;
        i += 1;
    }
    (i == inner.len()).then_some(out)
}

fn format_uuid(u: &[u8; 16]) -> String {
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// PgCat's `sha1`: the last four bytes of the SHA-1 digest of the key's text, big-endian.
fn sha1_tail(text: &[u8]) -> u64 {
    use sha1::{Digest, Sha1};
    let d = Sha1::digest(text);
    u64::from(u32::from_be_bytes([d[16], d[17], d[18], d[19]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_text_forms() {
        for (t, v) in [("42", 42), (" -7 ", -7), ("+5", 5), ("1_000", 1000)] {
            assert_eq!(
                Value::from_text(KeyType::Int8, t.as_bytes()),
                Ok(Value::Int(v))
            );
        }
        assert!(Value::from_text(KeyType::Int2, b"40000").is_err());
        assert!(Value::from_text(KeyType::Int4, b"abc").is_err());
        assert!(Value::from_text(KeyType::Int8, b"9223372036854775808").is_err());
    }

    /// Plain digits are read by a shortcut up to 18 of them, by the full parse beyond: both
    /// give the same value at the edge, and range checks and leading zeros are the same.
    #[test]
    fn plain_digits_shortcut_agrees_with_the_parse() {
        for (t, v) in [
            ("0", 0),
            ("007", 7),
            ("999999999999999999", 999_999_999_999_999_999),
            ("1000000000000000000", 1_000_000_000_000_000_000),
            ("9223372036854775807", i64::MAX),
        ] {
            assert_eq!(
                Value::from_text(KeyType::Int8, t.as_bytes()),
                Ok(Value::Int(v)),
                "{t}"
            );
        }
        assert!(Value::from_text(KeyType::Int2, b"32768").is_err());
        assert_eq!(
            Value::from_text(KeyType::Int2, b"32767"),
            Ok(Value::Int(32767))
        );
        assert!(Value::from_text(KeyType::Int4, b"2147483648").is_err());
        assert!(Value::from_text(KeyType::Int8, b"").is_err());
    }

    #[test]
    fn uuid_text_forms() {
        let want = parse_uuid(b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").unwrap();
        for t in [
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}",
            "a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
        ] {
            assert_eq!(parse_uuid(t.as_bytes()), Some(want), "{t}");
        }
        for t in [
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
            "-a0eebc999c0b4ef8bb6d6bb9bd380a11",
            "",
        ] {
            assert_eq!(parse_uuid(t.as_bytes()), None, "{t}");
        }
    }

    #[test]
    fn binary_and_text_agree() {
        let cases: [(KeyType, &[u8], &[u8]); 4] = [
            (KeyType::Int2, b"-3", &(-3i16).to_be_bytes()),
            (KeyType::Int4, b"70000", &70000i32.to_be_bytes()),
            (
                KeyType::Int8,
                b"-9223372036854775808",
                &i64::MIN.to_be_bytes(),
            ),
            (KeyType::Text, b"abc", b"abc"),
        ];
        for (ty, text, bin) in cases {
            assert_eq!(Value::from_text(ty, text), Value::from_binary(ty, bin));
        }
        assert!(Value::from_binary(KeyType::Int4, &[0, 1, 2]).is_err());
        assert_eq!(
            Value::from_binary(KeyType::Int8, &7i16.to_be_bytes()),
            Ok(Value::Int(7))
        );
        assert!(Value::from_binary(KeyType::Int2, &70000i32.to_be_bytes()).is_err());
    }

    /// PgCat's own expectations for its two functions (its tests' tables of keys and shards).
    #[test]
    fn pgcat_functions() {
        let int = |v| Value::Int(v);
        let shard = |f, n, v| shard_of(&[(KeyType::Int8, &int(v))], f, n);
        for (s, keys) in [
            (0, [1, 4, 5, 14, 19, 39, 40, 46, 47, 53]),
            (1, [2, 3, 11, 17, 21, 23, 30, 49, 51, 54]),
            (2, [6, 7, 15, 16, 18, 20, 25, 28, 34, 35]),
            (3, [8, 12, 13, 22, 29, 31, 33, 36, 41, 43]),
            (4, [9, 10, 24, 26, 27, 32, 37, 38, 42, 45]),
        ] {
            for k in keys {
                assert_eq!(shard(Function::PgHash, 5, k), s, "key {k}");
            }
        }
        let sha1 = [
            4, 7, 8, 3, 6, 0, 0, 10, 3, 11, 1, 7, 4, 4, 11, 2, 5, 0, 8, 3,
        ];
        for (k, s) in sha1.into_iter().enumerate() {
            assert_eq!(shard(Function::Sha1, 12, k as i64), s, "key {k}");
        }
    }
}
