//! One PgCat pool (`[pools.NAME]`, its users and shards) as a pgcorral database and users.

use toml::{Table, Value};

use super::model::{default_host, default_port};
use super::pgcat::Conv;
use super::{
    Config, Database, DefaultRole, LoadBalancing, PoolMode, ServerEntry, ServerRole, ShardEntry,
    ShardedTable, User,
};
use crate::shard::key::{Function, KeyType};

/// A pool's user as PgCat gives it.
struct PoolUser {
    /// Its index among the pool's users (`users.N`).
    n: String,
    name: String,
    password: String,
    pool_size: u64,
    min_pool_size: Option<u64>,
    pool_mode: Option<PoolMode>,
    server_username: Option<String>,
    server_password: Option<String>,
}

/// A shard: its servers and database.
struct Shard {
    servers: Vec<ServerEntry>,
    database: String,
}

/// Adds pool `name` to `cfg`: database `name` and its users. `at` names a key of the pool
/// (`"default_role"`, `"users.0.password"`) as the file does.
pub(super) fn pool(
    c: &mut Conv,
    cfg: &mut Config,
    name: &str,
    p: &Table,
    at: &dyn Fn(&str) -> String,
) {
    let mut db = Database::default();
    let mut mode = PoolMode::Transaction;
    let (mut parser, mut split, mut primary_reads) = (false, false, false);
    let mut function = None;
    let mut auto_key = None;
    // Unset (PgCat's default is shard 0): a read that names no shard is asked of every shard,
    // so that it gets the whole answer, not shard 0's part (docs/pgcat.md).
    let mut default_shard = None;
    let (mut users, mut shards) = (Vec::new(), None);
    for (k, v) in p {
        let key = at(k);
        let key = key.as_str();
        match k.as_str() {
            "pool_mode" => mode = pool_mode(c, key, v).unwrap_or(mode),
            "load_balancing_mode" => match c.string(key, v) {
                Some("random" | "Random") => db.load_balancing = Some(LoadBalancing::Random),
                Some("loc" | "LOC" | "least_outstanding_connections") => {
                    db.load_balancing = Some(LoadBalancing::LeastOutstanding)
                }
                Some(o) => c.error(key, format!("{o:?} is not \"random\" or \"loc\"")),
                None => {}
            },
            "default_role" => match c.string(key, v) {
                Some("any") => db.default_role = Some(DefaultRole::Any),
                Some("primary") => db.default_role = Some(DefaultRole::Primary),
                Some("replica") => db.default_role = Some(DefaultRole::Replica),
                Some(o) => c.error(key, format!("{o:?} is not \"any\", \"primary\" or \"replica\"")),
                None => {}
            },
            "query_parser_enabled" => parser = c.boolean(key, v).unwrap_or(false),
            "query_parser_read_write_splitting" => split = c.boolean(key, v).unwrap_or(false),
            "primary_reads_enabled" => primary_reads = c.boolean(key, v).unwrap_or(false),
            "sharding_function" => match c.string(key, v) {
                Some("pg_bigint_hash") => function = Some(Function::PgHash),
                Some("sha1") => function = Some(Function::Sha1),
                Some(o) => c.error(key, format!("{o:?} is not \"pg_bigint_hash\" or \"sha1\"")),
                None => {}
            },
            "automatic_sharding_key" => {
                let Some(s) = c.string(key, v) else { continue };
                let s = s.replace('"', "");
                match s.split_once('.') {
                    Some((t, col)) if !t.is_empty() && !col.is_empty() && !col.contains('.') => {
                        auto_key = Some((t.to_string(), col.to_string()))
                    }
                    _ => c.error(key, format!("{s:?} is not table.column")),
                }
            }
            "default_shard" => match c.string(key, v) {
                Some("random" | "random_healthy") => c.warn(key, "not honoured: pgcorral asks every shard a read that names no shard (one shard's rows would be part of the answer) and refuses other such statements; a query naming no table at all goes to any shard"),
                Some(s) => match s.strip_prefix("shard_").and_then(|n| n.parse().ok()) {
                    Some(n) => default_shard = Some(n),
                    None => c.error(key, format!("{s:?} is not \"shard_N\", \"random\" or \"random_healthy\"")),
                },
                None => {}
            },
            "idle_timeout" | "server_lifetime" | "connect_timeout" => general_only(c, cfg, key, k, v),
            "users" => {
                if let Some(t) = c.table(key, v) {
                    users = t.iter().filter_map(|(n, u)| user(c, cfg, n, u, at)).collect();
                }
            }
            "shards" => shards = c.table(key, v).map(|t| shard_list(c, t, at)),
            "cleanup_server_connections" => {
                if v.as_bool() == Some(false) {
                    c.warn(key, "not honoured: pgcorral always cleans a server connection's session state before another client gets it");
                }
            }
            "plugins" => c.unsupported(key, v, "pgcorral has no plugins"),
            "sharding_key_regex" | "shard_id_regex" | "regex_search_limit" => c.unsupported(key, v, "pgcorral reads the comments /* sharding_key: v */ and /* shard_id: n */ at the start of a query, not a regex of the file's"),
            "auth_query" | "auth_query_user" | "auth_query_password" => c.unsupported(key, v, "pgcorral has no auth_query: every user needs its password in the file"),
            "prepared_statements_cache_size" => c.unsupported(key, v, "pgcorral always keeps clients' prepared statements (up to general.max_prepared_statements = 200 per server connection)"),
            "checkout_failure_limit" | "query_parser_max_length" | "log_client_parameter_status_changes" => c.unsupported(key, v, "pgcorral has no such setting; ignored"),
            "db_activity_based_routing" | "db_activity_init_delay" | "db_activity_ttl" | "table_mutation_cache_ms_ttl" => c.unsupported(key, v, "pgcorral has no routing by recent writes to a table (its general.read_your_writes is per client)"),
            _ => c.unknown(key),
        }
    }
    let Some(shards) = shards else {
        c.error(
            &at("shards"),
            "a pool needs at least one shard ([pools.NAME.shards.0])",
        );
        return;
    };
    // PgCat's parser infers the role only with read/write splitting on.
    db.query_parser_enabled = Some(parser && split);
    db.primary_reads_enabled = Some(primary_reads);
    if shards.len() > 1 {
        if mode == PoolMode::Session {
            c.warn(&at("pool_mode"), "not honoured: pgcorral pools a sharded database in transaction mode (each transaction goes to its key's shard)");
            mode = PoolMode::Transaction;
        }
        let (host, port) = (default_host(), default_port());
        db.shards = shards
            .into_iter()
            .map(|s| ShardEntry {
                host: host.clone(),
                port,
                dbname: Some(s.database),
                servers: s.servers,
            })
            .collect();
        match default_shard {
            Some(n) if n >= db.shards.len() => c.error(
                &at("default_shard"),
                format!(
                    "shard_{n} is not a shard (shards are 0..{})",
                    db.shards.len() - 1
                ),
            ),
            _ => db.default_shard = default_shard,
        }
        db.sharding_function = function;
        // PgCat's sharding keys are bigints.
        db.sharding_key_type = Some(KeyType::Int8);
        if let Some((table, column)) = auto_key {
            db.sharded_tables = vec![ShardedTable {
                name: table,
                columns: vec![column],
                types: vec![KeyType::Int8],
            }];
        }
    } else if let Some(s) = shards.into_iter().next() {
        if auto_key.is_some() {
            c.warn(
                &at("automatic_sharding_key"),
                "not used: the pool has one shard",
            );
        }
        db.servers = s.servers;
        db.dbname = Some(s.database);
    }
    db.pool_mode = Some(mode);
    pool_users(c, cfg, &mut db, &users, at);
    cfg.databases.insert(name.to_string(), db);
    check_user_settings(c, cfg, name, &users, at);
}

fn pool_mode(c: &mut Conv, key: &str, v: &Value) -> Option<PoolMode> {
    match c.string(key, v)? {
        "transaction" | "Transaction" => Some(PoolMode::Transaction),
        "session" | "Session" => Some(PoolMode::Session),
        o => {
            c.error(key, format!("{o:?} is not \"transaction\" or \"session\""));
            None
        }
    }
}

/// A per-pool or per-user timeout pgcorral has only in `[general]`: warned when it differs.
fn general_only(c: &mut Conv, cfg: &Config, key: &str, k: &str, v: &Value) {
    let Some(ms) = c.uint(key, v) else { return };
    let g = &cfg.general;
    let (general, name) = match k {
        "idle_timeout" => (g.server_idle_timeout, "idle_timeout"),
        "server_lifetime" => (g.server_lifetime, "server_lifetime"),
        _ => (g.server_connect_timeout, "connect_timeout"),
    };
    if ms != general {
        c.warn(key, format!("not honoured: pgcorral has one {name} for all pools, general.{name} ({general} ms)"));
    }
}

/// The key `k` of user `n`, as the file names it.
fn user_key(at: &dyn Fn(&str) -> String, n: &str, k: &str) -> String {
    at(&format!("users.{n}.{k}"))
}

fn user(
    c: &mut Conv,
    cfg: &Config,
    n: &str,
    v: &Value,
    at: &dyn Fn(&str) -> String,
) -> Option<PoolUser> {
    let t = c.table(&at(&format!("users.{n}")), v)?;
    let mut u = PoolUser {
        n: n.to_string(),
        name: String::new(),
        password: String::new(),
        pool_size: 0,
        min_pool_size: None,
        pool_mode: None,
        server_username: None,
        server_password: None,
    };
    let mut ok = true;
    for (k, v) in t {
        let key = user_key(at, n, k);
        let key = key.as_str();
        let s = |c: &mut Conv| c.string(key, v).map(String::from);
        match k.as_str() {
            "username" => u.name = s(c).unwrap_or_default(),
            "password" => u.password = s(c).unwrap_or_default(),
            "server_username" => u.server_username = s(c),
            "server_password" => u.server_password = s(c),
            "pool_size" => u.pool_size = c.positive(key, v).unwrap_or(1),
            "min_pool_size" => u.min_pool_size = c.uint(key, v),
            "pool_mode" => u.pool_mode = pool_mode(c, key, v),
            "auth_type" => match c.string(key, v) {
                Some("md5" | "MD5") | None => {}
                Some("trust" | "Trust") => c.warn(key, "not honoured: pgcorral asks every user for its password (md5)"),
                Some(o) => c.error(key, format!("{o:?} is not \"md5\" or \"trust\"")),
            },
            "statement_timeout" => c.unsupported(key, v, "pgcorral has no per-user statement timeout (its general.query_timeout cancels and disconnects)"),
            "idle_timeout" | "server_lifetime" | "connect_timeout" => general_only(c, cfg, key, k, v),
            _ => c.unknown(key),
        }
    }
    for (k, missing) in [
        ("username", u.name.is_empty()),
        ("password", u.password.is_empty()),
    ] {
        if missing {
            c.error(&user_key(at, n, k), "required (pgcorral has no auth_query)");
            ok = false;
        }
    }
    if !t.contains_key("pool_size") {
        c.error(&user_key(at, n, "pool_size"), "required");
        ok = false;
    }
    if u.min_pool_size.is_some_and(|m| m > u.pool_size) {
        c.error(
            &user_key(at, n, "min_pool_size"),
            format!("larger than pool_size ({})", u.pool_size),
        );
    }
    ok.then_some(u)
}

/// The pool's users into `cfg.users`, and what they share into the database.
fn pool_users(
    c: &mut Conv,
    cfg: &mut Config,
    db: &mut Database,
    users: &[PoolUser],
    at: &dyn Fn(&str) -> String,
) {
    for u in users {
        match cfg.users.get_mut(&u.name) {
            Some(known) if known.password.as_deref() != Some(u.password.as_str()) => c.error(
                &user_key(at, &u.n, "password"),
                format!("user {:?} has another password in another pool; pgcorral has one password per user", u.name),
            ),
            Some(known) => {
                known.pool_mode = known.pool_mode.or(u.pool_mode);
            }
            None => {
                let user = User { password: Some(u.password.clone()), pool_mode: u.pool_mode, ..User::default() };
                cfg.users.insert(u.name.clone(), user);
            }
        }
    }
    let Some(first) = users.first() else { return };
    // A size all the pool's users share is the database's; differing ones are each user's.
    if users.iter().all(|u| u.pool_size == first.pool_size) {
        db.pool_size = usize::try_from(first.pool_size).ok();
    } else {
        for u in users {
            if let Some(known) = cfg.users.get_mut(&u.name) {
                known.pool_size = known.pool_size.or(usize::try_from(u.pool_size).ok());
            }
        }
    }
    let min = users.iter().filter_map(|u| u.min_pool_size).max();
    db.min_pool_size = min.and_then(|m| usize::try_from(m).ok());
    for u in users {
        if min.is_some() && u.min_pool_size.unwrap_or(0) != min.unwrap_or(0) {
            c.warn(&user_key(at, &u.n, "min_pool_size"), format!("not honoured as given: pgcorral keeps one min_pool_size per database, the largest of its users' ({})", min.unwrap_or(0)));
        }
    }
    // A server login every user of the pool shares is the database's.
    if users
        .iter()
        .any(|u| u.server_username.is_some() || u.server_password.is_some())
    {
        let login = |u: &PoolUser| {
            (
                u.server_username.clone().unwrap_or_else(|| u.name.clone()),
                u.server_password
                    .clone()
                    .unwrap_or_else(|| u.password.clone()),
            )
        };
        let shared = login(first);
        if users.iter().all(|u| login(u) == shared) {
            (db.user, db.password) = (Some(shared.0), Some(shared.1));
        } else {
            for u in users {
                for (k, set) in [
                    ("server_username", u.server_username.is_some()),
                    ("server_password", u.server_password.is_some()),
                ] {
                    if set {
                        c.warn(&user_key(at, &u.n, k), "not honoured: pgcorral logs in to the servers as the client (username, password) unless every user of the pool has the same server login");
                    }
                }
            }
        }
    }
}

/// Warns where pgcorral's per-user settings (global to all databases) give a pool's user
/// another pool size or pool mode than PgCat would.
fn check_user_settings(
    c: &mut Conv,
    cfg: &Config,
    name: &str,
    users: &[PoolUser],
    at: &dyn Fn(&str) -> String,
) {
    let db = &cfg.databases[name];
    for u in users {
        let Some(known) = cfg.users.get(&u.name) else {
            continue;
        };
        let size = known
            .pool_size
            .or(db.pool_size)
            .unwrap_or(cfg.general.default_pool_size);
        if u64::try_from(size).ok() != Some(u.pool_size) {
            c.warn(&user_key(at, &u.n, "pool_size"), format!("not honoured as given: pgcorral has one pool_size per user across databases; this pool gets {size}"));
        }
        let mode = known
            .pool_mode
            .or(db.pool_mode)
            .unwrap_or(cfg.general.pool_mode);
        let wanted = u
            .pool_mode
            .or(db.pool_mode)
            .unwrap_or(PoolMode::Transaction);
        if mode != wanted && !(db.sharded() && mode == PoolMode::Transaction) {
            c.warn(&user_key(at, &u.n, "pool_mode"), format!("not honoured as given: pgcorral has one pool_mode per user across databases; this pool gets {mode:?}"));
        }
    }
}

/// `[pools.NAME.shards]`: shards "0", "1", ... in order.
fn shard_list(c: &mut Conv, t: &Table, at: &dyn Fn(&str) -> String) -> Vec<Shard> {
    let mut out = Vec::new();
    for k in t.keys() {
        if k.parse::<usize>()
            .ok()
            .is_none_or(|n| n >= t.len() || n.to_string() != *k)
        {
            c.error(
                &at(&format!("shards.{k}")),
                format!("shards are numbered 0..{} without gaps", t.len() - 1),
            );
        }
    }
    for i in 0..t.len() {
        let here = at(&format!("shards.{i}"));
        let Some(s) = t.get(&i.to_string()).and_then(|v| c.table(&here, v)) else {
            continue;
        };
        let mut shard = Shard {
            servers: Vec::new(),
            database: String::new(),
        };
        for (k, v) in s {
            let key = format!("{here}.{k}");
            match k.as_str() {
                "database" => shard.database = c.string(&key, v).unwrap_or_default().to_string(),
                "servers" => match v.as_array() {
                    Some(list) => {
                        shard.servers = list
                            .iter()
                            .enumerate()
                            .filter_map(|(j, v)| server(c, &format!("{key}[{j}]"), v))
                            .collect()
                    }
                    None => c.error(&key, "must be a list of [host, port, role]"),
                },
                "mirrors" => c.unsupported(&key, v, "pgcorral does not mirror traffic"),
                _ => c.unknown(&key),
            }
        }
        if shard.database.is_empty() {
            c.error(&format!("{here}.database"), "required");
        }
        let primaries = shard
            .servers
            .iter()
            .filter(|s| s.role == ServerRole::Primary)
            .count();
        if primaries != 1 {
            c.error(
                &format!("{here}.servers"),
                format!("pgcorral needs exactly one \"primary\" per shard, found {primaries}"),
            );
        }
        out.push(shard);
    }
    out
}

/// `[host, port, role]`.
fn server(c: &mut Conv, key: &str, v: &Value) -> Option<ServerEntry> {
    let entry = match v.as_array().map(Vec::as_slice) {
        Some([Value::String(host), port, Value::String(role)]) => {
            let port = c.port(key, port)?;
            let role = match role.to_ascii_lowercase().as_str() {
                "primary" => ServerRole::Primary,
                "replica" => ServerRole::Replica,
                _ => {
                    c.error(
                        key,
                        format!("role {role:?} is not \"primary\" or \"replica\""),
                    );
                    return None;
                }
            };
            ServerEntry {
                host: host.clone(),
                port,
                role,
                weight: 1,
            }
        }
        _ => {
            c.error(key, format!("must be [host, port, role], got {v}"));
            return None;
        }
    };
    Some(entry)
}

/// PgCat's first format, before `[pools]`: `[general]` (with pool_size and pool_mode),
/// `[user]`, `[shards.N]` and `[query_router]`; it served one pool under any database name,
/// so it becomes pgcorral's database `"*"`.
pub(super) fn old_format(c: &mut Conv, cfg: &mut Config, file: &Table) {
    let mut p = Table::new();
    let general = file.get("general").and_then(Value::as_table);
    let mut user = Table::new();
    user.insert(
        "pool_size".into(),
        general
            .and_then(|g| g.get("pool_size"))
            .cloned()
            .unwrap_or(Value::Integer(15)),
    );
    if let Some(mode) = general.and_then(|g| g.get("pool_mode")) {
        p.insert("pool_mode".into(), mode.clone());
    }
    if let Some(u) = file.get("user").and_then(|v| c.table("user", v)) {
        for (k, v) in u {
            let k = if k == "name" { "username" } else { k.as_str() };
            user.insert(k.into(), v.clone());
        }
    }
    p.insert(
        "users".into(),
        Value::Table(Table::from_iter([("0".into(), Value::Table(user))])),
    );
    if let Some(s) = file.get("shards") {
        p.insert("shards".into(), s.clone());
    }
    if let Some(q) = file
        .get("query_router")
        .and_then(|v| c.table("query_router", v))
    {
        for (k, v) in q {
            // Then, the parser also split reads from writes.
            if k == "query_parser_enabled" {
                p.insert("query_parser_read_write_splitting".into(), v.clone());
            }
            p.insert(k.clone(), v.clone());
        }
    }
    let at = |k: &str| match k {
        "users.0.username" => "user.name".to_string(),
        "users.0.pool_size" => "general.pool_size".to_string(),
        "pool_mode" => "general.pool_mode".to_string(),
        k if k.starts_with("users.0.") => format!("user.{}", &k["users.0.".len()..]),
        k if k.starts_with("shards") => k.to_string(),
        "users" | "users.0" => "user".to_string(),
        "query_parser_read_write_splitting" => "query_router.query_parser_enabled".to_string(),
        k => format!("query_router.{k}"),
    };
    pool(c, cfg, "*", &p, &at);
}
