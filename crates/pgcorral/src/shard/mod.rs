//! Sharding: one logical database over several shards (each a cluster of a primary and
//! replicas), rows placed by PostgreSQL's own hash partitioning ([`hash`]) of a key ([`key`]).
//! [`Sharding`] is what routing knows of a sharded database: its shards, function and tables.

pub mod copy;
pub mod gather;
pub mod gids;
pub mod hash;
pub mod ids;
pub mod insert;
pub mod key;
pub mod number;
pub mod plan;
pub mod read;
pub mod scatter;
pub mod values;

use key::{BadKey, Function, KeyType, Value};
use plan::Plans;

/// A table spread over the shards, and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// `None`: the name matches the table in any schema. A name a statement gives without a
    /// schema matches the table whatever its schema (the search path finds it).
    pub schema: Option<String>,
    pub name: String,
    pub columns: Vec<String>,
    pub types: Vec<KeyType>,
    /// Why requests naming it are refused (a key column PostgreSQL hashes in a way pgcorral
    /// cannot: a non-deterministic collation).
    pub refused: Option<String>,
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
            refused: None,
        }
    }

    /// `schema.name`, or `name`.
    pub fn qualified(&self) -> String {
        match &self.schema {
            Some(s) => format!("{s}.{}", self.name),
            None => self.name.clone(),
        }
    }

    /// Whether a statement's `schema.name` (or `name`, found by the search path) is this table.
    fn is(&self, schema: Option<&str>, name: &str) -> bool {
        self.name == name
            && (self.schema.is_none() || schema.is_none() || self.schema.as_deref() == schema)
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
    /// Read the shards' hash-partitioned tables as sharded tables too.
    pub from_catalog: bool,
    /// The shards' catalogs were read (key collations, and tables when `from_catalog`).
    pub checked: bool,
    /// Where the clients' prepared transactions are.
    pub gids: gids::Gids,
    /// What reads across shards need from the catalog ([`gather`]).
    pub facts: Facts,
    /// The most groups (or distinct rows) a read across shards merges in memory.
    pub max_gather_groups: usize,
}

/// What the shards' catalog says that reads across shards need to merge answers right.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The names of the database's aggregate and window functions (its own included).
    pub aggregates: Vec<String>,
    /// Text compares as bytes: the database's collation is C (or POSIX) and no column has a
    /// collation of its own other than those.
    pub text_bytewise: bool,
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
            from_catalog: false,
            checked: false,
            gids: Default::default(),
            facts: Facts::default(),
            max_gather_groups: gather::MAX_GROUPS,
        }
    }

    /// This sharding completed from the shards' catalogs: `more` tables (those not declared
    /// already), reasons to refuse some of the declared ones (by index), and the `facts` reads
    /// across shards need.
    pub fn completed(
        &self,
        more: Vec<Table>,
        refused: Vec<(usize, String)>,
        facts: Facts,
    ) -> Sharding {
        let mut tables = self.tables.clone();
        for (i, why) in refused {
            if let Some(t) = tables.get_mut(i) {
                t.refused = Some(why);
            }
        }
        for t in more {
            if self.table(t.schema.as_deref(), &t.name).is_none() {
                tables.push(t);
            }
        }
        Sharding {
            shards: self.shards,
            function: self.function,
            tables,
            omnisharded: self.omnisharded.clone(),
            default_shard: self.default_shard,
            key_types: self.key_types.clone(),
            plans: Plans::default(),
            from_catalog: self.from_catalog,
            checked: true,
            gids: self.gids.clone(),
            facts,
            max_gather_groups: self.max_gather_groups,
        }
    }

    /// The sharded table a statement names as `schema.name` (or `name`).
    pub fn table(&self, schema: Option<&str>, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.is(schema, name))
    }

    pub fn is_omnisharded(&self, schema: Option<&str>, name: &str) -> bool {
        self.omnisharded
            .iter()
            .any(|(s, n)| n == name && (s.is_none() || schema.is_none() || s.as_deref() == schema))
    }

    /// The shard of a key given as its columns' values.
    pub fn shard_of(&self, types: &[KeyType], values: &[Value]) -> usize {
        key::shard_of_columns(types, values, self.function, self.shards)
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
