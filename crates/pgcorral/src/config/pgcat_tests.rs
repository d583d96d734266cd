//! Unit tests of reading a pgcat.toml: a sample file, warned keys, errors naming the key, the old format, and the choice of format.

use std::path::Path;

use super::pgcat::{from_pgcat_str, is_pgcat, Warning};
use super::{AuthType, SslMode};
use crate::config::{
    Database, DefaultRole, LoadBalancing, PoolMode, ServerEntry, ServerRole, ShardEntry,
    ShardedTable,
};
use crate::shard::key::{Function, KeyType};

/// A two-pool file in PgCat's documented format: a sharded pool (a primary and a replica
/// per shard) and a plain one.
const SAMPLE: &str = r#"
[general]
host = "127.0.0.1"
port = 6433
enable_prometheus_exporter = true
prometheus_exporter_port = 9931
connect_timeout = 3000
idle_timeout = 45000
server_lifetime = 86400000
idle_client_in_transaction_timeout = 5000
healthcheck_timeout = 2000
healthcheck_delay = 10000
shutdown_timeout = 20000
ban_time = 30
worker_threads = 3
log_client_connections = false
autoreload = 15000
tcp_keepalives_idle = 5
server_tls = false
admin_username = "cat_admin"
admin_password = "cat_admin_pw"

[pools.orders]
pool_mode = "transaction"
load_balancing_mode = "loc"
default_role = "any"
query_parser_enabled = true
query_parser_read_write_splitting = true
primary_reads_enabled = false
sharding_function = "sha1"
automatic_sharding_key = "orders.customer_id"
default_shard = "shard_1"
idle_timeout = 45000

[pools.orders.users.0]
username = "shop"
password = "shop_pw"
pool_size = 12
statement_timeout = 0

[pools.orders.users.1]
username = "analyst"
password = "analyst_pw"
pool_size = 12
statement_timeout = 15000

[pools.orders.shards.0]
servers = [["10.0.0.1", 5432, "primary"], ["10.0.0.2", 5432, "replica"]]
database = "orders_0"

[pools.orders.shards.1]
servers = [["10.0.1.1", 5432, "primary"], ["10.0.1.2", 5433, "replica"]]
database = "orders_1"

[pools.billing]
pool_mode = "session"
default_role = "primary"

[pools.billing.users.0]
username = "biller"
password = "biller_pw"
server_username = "billing_owner"
server_password = "owner_pw"
pool_size = 4
min_pool_size = 2

[pools.billing.shards.0]
servers = [["10.0.2.1", 5432, "primary"]]
database = "billing"
"#;

fn server(host: &str, port: u16, role: ServerRole) -> ServerEntry {
    ServerEntry {
        host: host.into(),
        port,
        role,
        weight: 1,
    }
}

fn keys(w: &[Warning]) -> Vec<&str> {
    w.iter().map(|w| w.key.as_str()).collect()
}

#[test]
fn a_sample_file_converts() {
    let (cfg, warnings) = from_pgcat_str(SAMPLE).unwrap();
    let g = &cfg.general;
    assert_eq!((g.listen_addr.as_str(), g.listen_port), ("127.0.0.1", 6433));
    assert_eq!(g.auth_type, AuthType::Md5);
    assert_eq!(g.metrics_addr, "127.0.0.1:9931");
    assert_eq!(
        (g.server_connect_timeout, g.query_wait_timeout),
        (3000, 3000)
    );
    assert_eq!(
        (g.server_idle_timeout, g.server_lifetime),
        (45000, 86_400_000)
    );
    assert_eq!(g.idle_transaction_timeout, 5000);
    assert_eq!((g.healthcheck_timeout, g.healthcheck_delay), (2000, 10000));
    assert_eq!(
        (g.shutdown_timeout, g.ban_time, g.workers),
        (20000, 30_000, 3)
    );
    assert_eq!(g.server_tls_sslmode, SslMode::Disable);
    assert_eq!(g.unix_socket_dir, "");
    assert_eq!(g.admin_users, ["cat_admin"]);

    let orders = &cfg.databases["orders"];
    let shard = |db: &str, servers| ShardEntry {
        host: "127.0.0.1".into(),
        port: 5432,
        dbname: Some(db.into()),
        servers,
    };
    let expected = Database {
        pool_size: Some(12),
        pool_mode: Some(PoolMode::Transaction),
        load_balancing: Some(LoadBalancing::LeastOutstanding),
        default_role: Some(DefaultRole::Any),
        query_parser_enabled: Some(true),
        primary_reads_enabled: Some(false),
        shards: vec![
            shard(
                "orders_0",
                vec![
                    server("10.0.0.1", 5432, ServerRole::Primary),
                    server("10.0.0.2", 5432, ServerRole::Replica),
                ],
            ),
            shard(
                "orders_1",
                vec![
                    server("10.0.1.1", 5432, ServerRole::Primary),
                    server("10.0.1.2", 5433, ServerRole::Replica),
                ],
            ),
        ],
        sharded_tables: vec![ShardedTable {
            name: "orders".into(),
            columns: vec!["customer_id".into()],
            types: vec![KeyType::Int8],
        }],
        default_shard: Some(1),
        sharding_function: Some(Function::Sha1),
        sharding_key_type: Some(KeyType::Int8),
        ..Database::default()
    };
    assert_eq!(orders, &expected);

    let billing = &cfg.databases["billing"];
    let expected = Database {
        dbname: Some("billing".into()),
        servers: vec![server("10.0.2.1", 5432, ServerRole::Primary)],
        pool_size: Some(4),
        min_pool_size: Some(2),
        pool_mode: Some(PoolMode::Session),
        default_role: Some(DefaultRole::Primary),
        query_parser_enabled: Some(false),
        primary_reads_enabled: Some(false),
        user: Some("billing_owner".into()),
        password: Some("owner_pw".into()),
        ..Database::default()
    };
    assert_eq!(billing, &expected);

    let users: Vec<(&str, Option<&str>)> = cfg
        .users
        .iter()
        .map(|(n, u)| (n.as_str(), u.password.as_deref()))
        .collect();
    assert_eq!(
        users,
        [
            ("analyst", Some("analyst_pw")),
            ("biller", Some("biller_pw")),
            ("cat_admin", Some("cat_admin_pw")),
            ("shop", Some("shop_pw")),
        ]
    );
    assert_eq!(
        keys(&warnings),
        [
            "general.autoreload",
            "general.tcp_keepalives_idle",
            "pools.orders.users.1.statement_timeout",
            "general.enable_prometheus_exporter",
        ]
    );
}

#[test]
fn unsupported_and_unknown_keys_are_warned_by_name() {
    let file = r#"
[general]
nonsense = 1
dns_cache_enabled = true
[plugins.query_logger]
enabled = true
[pools.app]
frobnicate = true
sharding_key_regex = '/\* sharding_key: (\d+) \*/'
default_shard = "random"
checkout_failure_limit = 3
connect_timeout = 9000
[pools.app.plugins.intercept]
enabled = false
[pools.app.users.0]
username = "u"
password = "p"
pool_size = 3
colour = "blue"
[pools.app.shards.0]
servers = [["h0", 5432, "primary"]]
database = "d0"
mirrors = [["m0", 5432, 0]]
[pools.app.shards.1]
servers = [["h1", 5432, "Primary"]]
database = "d1"
"#;
    let (cfg, warnings) = from_pgcat_str(file).unwrap();
    let mut got = keys(&warnings);
    got.sort_unstable();
    assert_eq!(
        got,
        [
            "general.dns_cache_enabled",
            "general.nonsense",
            "plugins",
            "pools.app.checkout_failure_limit",
            "pools.app.connect_timeout",
            "pools.app.default_shard",
            "pools.app.frobnicate",
            "pools.app.sharding_key_regex",
            "pools.app.shards.0.mirrors",
            "pools.app.users.0.colour",
        ]
    );
    let random = warnings
        .iter()
        .find(|w| w.key == "pools.app.default_shard")
        .unwrap();
    assert!(random.to_string().contains("every shard"), "{random}");
    assert_eq!(cfg.databases["app"].default_shard, None);
}

#[test]
fn wrong_values_name_the_key() {
    let pool = |extra: &str, user: &str, shard1: &str| {
        format!(
            "[pools.app]\n{extra}\n[pools.app.users.0]\nusername = \"u\"\n{user}\n\
             [pools.app.shards.0]\nservers = [[\"h\", 5432, \"primary\"]]\ndatabase = \"d\"\n{shard1}\n"
        )
    };
    let ok_user = "password = \"p\"\npool_size = 2";
    let second = "[pools.app.shards.1]\nservers = [[\"h2\", 5432, \"primary\"]]\ndatabase = \"d\"";
    let cases = [
        (pool("pool_mode = \"statement\"", ok_user, ""), "pools.app.pool_mode: \"statement\""),
        (pool("sharding_function = \"md5\"", ok_user, ""), "pools.app.sharding_function:"),
        (pool("default_shard = \"shard_2\"", ok_user, second), "pools.app.default_shard: shard_2 is not a shard"),
        (pool("default_shard = \"first\"", ok_user, ""), "pools.app.default_shard:"),
        (pool("automatic_sharding_key = \"id\"", ok_user, second), "pools.app.automatic_sharding_key:"),
        (pool("default_role = \"leader\"", ok_user, ""), "pools.app.default_role:"),
        (pool("", "pool_size = 2", ""), "pools.app.users.0.password: required"),
        (pool("", "password = \"p\"", ""), "pools.app.users.0.pool_size: required"),
        (pool("", "password = \"p\"\npool_size = 0", ""), "pools.app.users.0.pool_size: must be greater than 0"),
        (pool("", "password = \"p\"\npool_size = 2\nmin_pool_size = 3", ""), "pools.app.users.0.min_pool_size:"),
        (pool("", ok_user, "[pools.app.shards.2]\nservers = []\ndatabase = \"d\""), "pools.app.shards.2: shards are numbered"),
        (pool("", ok_user, "[pools.app.shards.1]\nservers = [[\"h\", 70000, \"primary\"]]\ndatabase = \"d\""), "pools.app.shards.1.servers[0]: must be a port number"),
        (pool("", ok_user, "[pools.app.shards.1]\nservers = [[\"h\", 5432, \"leader\"]]\ndatabase = \"d\""), "pools.app.shards.1.servers[0]: role \"leader\""),
        (pool("", ok_user, "[pools.app.shards.1]\nservers = [[\"h\", 5432, \"replica\"]]\ndatabase = \"d\""), "pools.app.shards.1.servers: pgcorral needs exactly one \"primary\""),
        (format!("[general]\nban_time = -1\n{}", pool("", ok_user, "")), "general.ban_time:"),
        (format!("[general]\nconnect_timeout = 0\n{}", pool("", ok_user, "")), "general.connect_timeout: must be greater than 0"),
        (format!("[general]\nhost = \"nowhere\"\n{}", pool("", ok_user, "")), "general.host:"),
        (format!("[general]\nport = \"6432\"\n{}", pool("", ok_user, "")), "general.port:"),
        (format!("[general]\nadmin_username = \"u\"\nadmin_password = \"other\"\n{}", pool("", ok_user, "")), "general.admin_password:"),
        (format!("{}[pools.more.users.0]\nusername = \"u\"\npassword = \"q\"\npool_size = 1\n[pools.more.shards.0]\nservers = [[\"h\", 5432, \"primary\"]]\ndatabase = \"d\"\n", pool("", ok_user, "")), "pools.more.users.0.password: user \"u\" has another password"),
        ("[pools.pgbouncer.shards.0]\n".into(), "pools.pgbouncer:"),
    ];
    for (file, needle) in cases {
        let err = from_pgcat_str(&file).expect_err(&file).to_string();
        assert!(
            err.contains(needle),
            "{err:?} lacks {needle:?}\nin:\n{file}"
        );
    }
}

#[test]
fn the_old_format_is_one_pool_for_any_database() {
    let file = "[general]\nport = 6432\npool_size = 7\npool_mode = \"session\"\n\
                [user]\nname = \"u\"\npassword = \"p\"\n\
                [shards.0]\nservers = [[\"h\", 5432, \"primary\"], [\"r\", 5432, \"replica\"]]\ndatabase = \"d\"\n\
                [query_router]\ndefault_role = \"any\"\nquery_parser_enabled = true\nprimary_reads_enabled = true\nsharding_function = \"pg_bigint_hash\"\n";
    let (cfg, warnings) = from_pgcat_str(file).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let db = &cfg.databases["*"];
    assert_eq!(
        (db.pool_size, db.pool_mode),
        (Some(7), Some(PoolMode::Session))
    );
    assert_eq!(
        (db.query_parser_enabled, db.primary_reads_enabled),
        (Some(true), Some(true))
    );
    assert_eq!(db.servers.len(), 2);
    assert_eq!(cfg.users["u"].password.as_deref(), Some("p"));
    let err = from_pgcat_str(&file.replace("\"session\"", "\"stmt\"")).unwrap_err();
    assert!(err.to_string().starts_with("general.pool_mode:"), "{err}");
    let err = from_pgcat_str(&file.replace("password = \"p\"\n", "")).unwrap_err();
    assert!(
        err.to_string().starts_with("user.password: required"),
        "{err}"
    );
    let err = from_pgcat_str(&file.replace("pool_size = 7", "pool_size = 0")).unwrap_err();
    assert!(err.to_string().starts_with("general.pool_size:"), "{err}");
}

#[test]
fn the_format_is_chosen_by_name_and_content() {
    let ours = "[general]\nauth_type = \"trust\"\n[databases.app]\nport = 5433\n";
    assert!(is_pgcat(Path::new("/etc/pgcat.toml"), SAMPLE));
    assert!(is_pgcat(Path::new("/etc/pooler.toml"), SAMPLE));
    assert!(!is_pgcat(Path::new("/etc/pgcat.toml"), ours));
    assert!(!is_pgcat(Path::new("/etc/pgcorral.toml"), ours));
    assert!(is_pgcat(Path::new("x/pgcat.toml"), "not toml ["));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pgcat.toml");
    std::fs::write(&path, SAMPLE).unwrap();
    let (cfg, warnings) = super::load_file_warnings(&path).unwrap();
    assert_eq!(cfg.databases.len(), 2);
    assert_eq!(warnings.len(), 4);
    std::fs::write(&path, SAMPLE.replace("\"loc\"", "\"fastest\"")).unwrap();
    let err = super::load_file(&path).unwrap_err().to_string();
    let shown = format!("{}: pools.orders.load_balancing_mode:", path.display());
    assert!(err.starts_with(&shown), "{err}");
}
