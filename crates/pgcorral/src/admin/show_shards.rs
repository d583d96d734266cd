//! The console's view of sharded databases: `SHOW SHARDS` (every shard's servers, their role
//! and state) and `SHOW SHARD FOR 'value' [IN database]` (where a key lives).

use crate::cluster::topology;
use crate::config::{Config, ServerRole};
use crate::pool::registry::sharding_of;
use crate::rows::{Table, Ty};
use crate::services::Services;
use crate::shard::key::Function;

/// One row per server of each shard of each sharded database.
pub fn shards(services: &Services, config: &Config) -> Table {
    let mut t = Table::new(&[
        ("database", Ty::Text),
        ("shard", Ty::Int),
        ("host", Ty::Text),
        ("port", Ty::Int),
        ("dbname", Ty::Text),
        ("role", Ty::Text),
        ("state", Ty::Text),
    ]);
    let known = services.pools.topologies();
    for (name, db) in config.databases.iter().filter(|(_, db)| db.sharded()) {
        for (i, shard) in db.shard_list().into_iter().enumerate() {
            let topology = known.iter().find(|t| &t.database == name && t.shard == i);
            for (j, server) in shard.servers.iter().enumerate() {
                // Until a client uses the database, only the configuration is known.
                let node = topology.and_then(|t| t.nodes.get(j));
                let role = match node {
                    Some(n) => n.role().name(),
                    None => match server.role {
                        ServerRole::Primary => "primary",
                        ServerRole::Replica => "replica",
                        ServerRole::Auto => "auto",
                    },
                };
                let state = node.map_or("unused", |n| topology::status(n));
                t.row(vec![
                    name.as_str().into(),
                    i.into(),
                    server.host.as_str().into(),
                    server.port.into(),
                    shard.dbname.clone().unwrap_or_else(|| name.clone()).into(),
                    role.into(),
                    state.into(),
                ]);
            }
        }
    }
    t
}

/// The shard of a key written as text, in `database` (or the one sharded database).
pub fn shard_for(config: &Config, value: &str, database: Option<&str>) -> Result<Table, String> {
    let mut sharded = config.databases.iter().filter(|(_, db)| db.sharded());
    let (name, db) = match database {
        Some(d) => sharded
            .find(|(n, _)| n.as_str() == d)
            .ok_or_else(|| format!("database \"{d}\" is not a sharded database of pgcorral's"))?,
        None => {
            let first = sharded.next().ok_or("no database is sharded")?;
            if sharded.next().is_some() {
                return Err(
                    "several databases are sharded: SHOW SHARD FOR 'value' IN database".into(),
                );
            }
            first
        }
    };
    let sharding = sharding_of(db);
    let shard = sharding.shard_of_text(value).map_err(|e| e.to_string())?;
    let mut t = Table::new(&[
        ("database", Ty::Text),
        ("key", Ty::Text),
        ("key_type", Ty::Text),
        ("shard", Ty::Int),
        ("shards", Ty::Int),
        ("function", Ty::Text),
    ]);
    let types: Vec<&str> = sharding.key_types.iter().map(|t| t.name()).collect();
    t.row(vec![
        name.as_str().into(),
        value.into(),
        types.join(", ").into(),
        shard.into(),
        sharding.shards.into(),
        match db.function() {
            Function::PgHash => "pg_hash",
            Function::Sha1 => "sha1",
        }
        .into(),
    ]);
    Ok(t)
}
