//! A sharded database's keys in the configuration: its shards, sharded and omnisharded tables,
//! default shard and sharding function, and their validation.

use serde::Deserialize;

use super::model::{default_host, default_port, server_list, Database, PoolMode, ServerEntry};
use crate::shard::key::{Function, KeyType};

/// One shard of a sharded database: a server (`host`, `port`), or a primary and its replicas
/// (`servers`), as a database that is not sharded.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardEntry {
    #[serde(default = "default_host")]
    pub host: String,
    #[serde(default = "default_port")]
    pub port: u16,
    /// Server-side database name; defaults to the database's `dbname`, then to its key.
    pub dbname: Option<String>,
    #[serde(default)]
    pub servers: Vec<ServerEntry>,
}

impl ShardEntry {
    /// The shard's servers: `servers`, or the one at `host`/`port` (a primary).
    pub fn server_list(&self) -> Vec<ServerEntry> {
        server_list(&self.servers, &self.host, self.port)
    }
}

/// A table whose rows are spread over the shards by the hash of its key columns.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardedTable {
    /// `name` or `schema.name`, as PostgreSQL folds it (lower case unless created quoted). A
    /// name without schema matches the table in any schema.
    pub name: String,
    /// The key's columns, in the order of the partitioning key.
    pub columns: Vec<String>,
    /// Each column's type, in the same order.
    pub types: Vec<KeyType>,
}

/// One shard of a database, as the registry builds its pools: the servers and the
/// server-side database name.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardServers {
    pub servers: Vec<ServerEntry>,
    pub dbname: Option<String>,
}

impl Database {
    /// Is the database spread over shards?
    pub fn sharded(&self) -> bool {
        !self.shards.is_empty()
    }

    /// Every shard's servers in shard order: the database's own servers as its one shard when
    /// it is not sharded.
    pub fn shard_list(&self) -> Vec<ShardServers> {
        if self.shards.is_empty() {
            return vec![ShardServers {
                servers: self.server_list(),
                dbname: self.dbname.clone(),
            }];
        }
        self.shards
            .iter()
            .map(|s| ShardServers {
                servers: s.server_list(),
                dbname: s.dbname.clone().or_else(|| self.dbname.clone()),
            })
            .collect()
    }

    /// The sharding function (PostgreSQL's hash unless PgCat's `sha1` is asked for).
    pub fn function(&self) -> Function {
        self.sharding_function.unwrap_or_default()
    }

    /// The types of a key given by `SET SHARDING KEY` or a `sharding_key` comment: the
    /// database's `sharding_key_type`, else the key of its first sharded table when all share
    /// one, else int8 (PgCat's).
    pub fn key_types(&self) -> Vec<KeyType> {
        if let Some(t) = self.sharding_key_type {
            return vec![t];
        }
        match self.sharded_tables.first() {
            Some(first) if self.sharded_tables.iter().all(|t| t.types == first.types) => {
                first.types.clone()
            }
            _ => vec![KeyType::Int8],
        }
    }
}

/// Problems with a database's sharding keys, each starting with the key at fault.
pub(super) fn check(name: &str, db: &Database, errs: &mut Vec<String>) {
    let sharding_only = [
        ("sharded_tables", !db.sharded_tables.is_empty()),
        ("omnisharded_tables", !db.omnisharded_tables.is_empty()),
        ("default_shard", db.default_shard.is_some()),
        ("sharding_function", db.sharding_function.is_some()),
        ("sharding_key_type", db.sharding_key_type.is_some()),
        ("max_gather_groups", db.max_gather_groups.is_some()),
        (
            "sharded_tables_from_catalog",
            db.sharded_tables_from_catalog.is_some(),
        ),
    ];
    if !db.sharded() {
        for (key, set) in sharding_only {
            if set {
                errs.push(format!(
                    "databases.{name}.{key}: only for a sharded database (one with shards)"
                ));
            }
        }
        return;
    }
    if !db.servers.is_empty() || db.host != default_host() || db.port != default_port() {
        errs.push(format!(
            "databases.{name}.shards: give either shards or host/port/servers, not both (each shard has its own)"
        ));
    }
    if db.pool_mode == Some(PoolMode::Session) {
        errs.push(format!(
            "databases.{name}.pool_mode: a sharded database is pooled in transaction or statement mode (each transaction goes to its key's shard)"
        ));
    }
    for (i, shard) in db.shards.iter().enumerate() {
        if !shard.servers.is_empty()
            && (shard.host != default_host() || shard.port != default_port())
        {
            errs.push(format!(
                "databases.{name}.shards[{i}]: give either servers or host/port, not both"
            ));
        }
        if shard.host.is_empty() {
            errs.push(format!(
                "databases.{name}.shards[{i}].host: must not be empty"
            ));
        }
        super::validate::check_server_list(&format!("{name}.shards[{i}]"), &shard.servers, errs);
    }
    if let Some(d) = db.default_shard {
        if d >= db.shards.len() {
            errs.push(format!(
                "databases.{name}.default_shard: {d} is not a shard (shards are 0..{})",
                db.shards.len() - 1
            ));
        }
    }
    for (i, t) in db.sharded_tables.iter().enumerate() {
        let at = format!("databases.{name}.sharded_tables[{i}]");
        if t.name.is_empty() || t.name.split('.').count() > 2 {
            errs.push(format!(
                "{at}.name: {:?} is not a table name or schema.name",
                t.name
            ));
        }
        if t.columns.is_empty() {
            errs.push(format!("{at}.columns: name at least one key column"));
        }
        if t.columns.len() != t.types.len() {
            errs.push(format!(
                "{at}.types: give one type per column ({} columns, {} types)",
                t.columns.len(),
                t.types.len()
            ));
        }
        if db.sharding_function == Some(Function::Sha1) && t.columns.len() > 1 {
            errs.push(format!(
                "{at}.columns: the sha1 function (PgCat's) takes a one-column key"
            ));
        }
        if db.omnisharded_tables.contains(&t.name) {
            errs.push(format!(
                "databases.{name}.omnisharded_tables: {:?} is also a sharded table",
                t.name
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::from_toml_str;

    fn db(body: &str) -> String {
        format!("[general]\nauth_type = \"trust\"\n[databases.app]\n{body}\n")
    }

    const TWO: &str = "shards = [{ port = 5433 }, { port = 5434, dbname = \"app1\" }]";

    #[test]
    fn a_sharded_database() {
        let cfg = from_toml_str(&db(&format!(
            "{TWO}\ndbname = \"app0\"\ndefault_shard = 1\nomnisharded_tables = [\"countries\"]\n\
             sharded_tables = [{{ name = \"accounts\", columns = [\"aid\"], types = [\"int4\"] }}]"
        )))
        .unwrap();
        let app = &cfg.databases["app"];
        let shards = app.shard_list();
        assert_eq!(shards.len(), 2);
        assert_eq!(shards[0].dbname.as_deref(), Some("app0"));
        assert_eq!(shards[1].dbname.as_deref(), Some("app1"));
        assert_eq!(shards[1].servers[0].port, 5434);
        assert_eq!(app.key_types(), vec![crate::shard::key::KeyType::Int4]);
    }

    #[test]
    fn bad_sharding_keys_are_named() {
        let cases = [
            (
                format!("{TWO}\ndefault_shard = 2"),
                "databases.app.default_shard: 2 is not a shard",
            ),
            (
                format!("{TWO}\nport = 6000"),
                "databases.app.shards: give either shards or host/port/servers",
            ),
            (
                format!("{TWO}\npool_mode = \"session\""),
                "databases.app.pool_mode: a sharded database",
            ),
            (
                format!("{TWO}\nsharded_tables = [{{ name = \"t\", columns = [\"a\", \"b\"], types = [\"int8\"] }}]"),
                "databases.app.sharded_tables[0].types: give one type per column",
            ),
            (
                format!("{TWO}\nsharded_tables = [{{ name = \"t\", columns = [\"a\"], types = [\"float8\"] }}]"),
                "float8",
            ),
            (
                "default_shard = 0".to_string(),
                "databases.app.default_shard: only for a sharded database",
            ),
            (
                "shards = [{ port = 5433, servers = [{ host = \"h\" }] }]".to_string(),
                "databases.app.shards[0]: give either servers or host/port",
            ),
        ];
        for (body, needle) in cases {
            let err = from_toml_str(&db(&body)).expect_err(&body).to_string();
            assert!(err.contains(needle), "{err:?} lacks {needle:?}");
        }
    }
}
