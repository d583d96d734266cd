//! Sharding: one logical database over several shards (each a cluster of a primary and
//! replicas), rows placed by PostgreSQL's own hash partitioning ([`hash`]) of a key ([`key`]).
//! [`Sharding`] is what routing knows of a sharded database: its shards, function and tables.

pub mod copy;
pub mod hash;
pub mod key;
pub mod plan;

use key::{BadKey, Function, KeyType, Value};
use plan::Plans;

/// A table spread over the shards, and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// `None`: the name matches the table in any schema.
    pub schema: Option<String>,
    pub name: String,
    pub columns: Vec<String>,
    pub types: Vec<KeyType>,
}

impl Table {
    /// `name` or `schema.name`.
    pub fn new(qualified: &str, columns: Vec<String>, types: Vec<KeyType>) -> Table {
        let (schema, name) = split_name(qualified);
        Table {
            schema,
            name,
            columns,
            types,
        }
    }

    fn is(&self, schema: Option<&str>, name: &str) -> bool {
        self.name == name && (self.schema.is_none() || self.schema.as_deref() == schema)
    }
}

fn split_name(qualified: &str) -> (Option<String>, String) {
    match qualified.split_once('.') {
        Some((s, n)) => (Some(s.to_string()), n.to_string()),
        None => (None, qualified.to_string()),
    }
}

/// How a sharded database's keys map to its shards.
#[derive(Debug, PartialEq, Eq)]
pub struct Sharding {
    pub shards: usize,
    pub function: Function,
    pub tables: Vec<Table>,
    /// Tables that are the same on every shard (`schema.name` or `name`).
    pub omnisharded: Vec<(Option<String>, String)>,
    /// Where a request that names no shard goes; `None`: it is refused.
    pub default_shard: Option<usize>,
    /// The types of a key given by `SET SHARDING KEY` or a comment.
    pub key_types: Vec<KeyType>,
    /// Plans of the texts seen, by shape.
    pub plans: Plans,
}

impl Sharding {
    pub fn new(
        shards: usize,
        function: Function,
        tables: Vec<Table>,
        omnisharded: &[String],
        default_shard: Option<usize>,
        key_types: Vec<KeyType>,
    ) -> Sharding {
        Sharding {
            shards,
            function,
            tables,
            omnisharded: omnisharded.iter().map(|t| split_name(t)).collect(),
            default_shard,
            key_types,
            plans: Plans::default(),
        }
    }

    /// The sharded table a statement names as `schema.name` (or `name`).
    pub fn table(&self, schema: Option<&str>, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.is(schema, name))
    }

    pub fn is_omnisharded(&self, schema: Option<&str>, name: &str) -> bool {
        self.omnisharded
            .iter()
            .any(|(s, n)| n == name && (s.is_none() || s.as_deref() == schema))
    }

    /// The shard of a key given as its columns' values.
    pub fn shard_of(&self, types: &[KeyType], values: &[Value]) -> usize {
        let cols: Vec<(KeyType, &Value)> = types.iter().copied().zip(values).collect();
        key::shard_of(&cols, self.function, self.shards)
    }

    /// The shard of a key written as text (`SET SHARDING KEY`, a `sharding_key` comment, the
    /// console's `SHOW SHARD FOR`): one value for a one-column key.
    pub fn shard_of_text(&self, text: &str) -> Result<usize, BadKey> {
        let [ty] = self.key_types[..] else {
            return Err(BadKey {
                ty: self.key_types[0],
                why: "the database's key has several columns: name the shard, or let the query's own key route it",
            });
        };
        let v = Value::from_text(ty, text.as_bytes())?;
        Ok(self.shard_of(&[ty], &[v]))
    }
}
