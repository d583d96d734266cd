//! A tenant as a configuration of its own: the file's `[general]` with the tenant's pool
//! settings and limits, its users as `[users]`, and its server(s) as the `"*"` database.

use std::collections::BTreeMap;

use super::model::{Mode, Tenant};
use crate::config::{
    AuthType, Config, Database, General, PoolMode, ServerEntry, ServerRole, User,
    DEFAULT_AUTH_QUERY,
};

/// The configuration `tenant`'s logins and pools use, under the file's `general`.
pub fn config_of(tenant: &Tenant, general: &General) -> Config {
    let mut g = general.clone();
    // Tenants' users prove who they are with their passwords (SCRAM, or a SCRAM verifier's
    // exchange); the file's hba rules, console users and forced settings are the file's.
    g.auth_type = AuthType::ScramSha256;
    g.auth_hba_file = String::new();
    g.auth_ident_file = String::new();
    g.auth_file = String::new();
    g.admin_users = Vec::new();
    g.stats_users = Vec::new();
    g.default_pool_size = tenant.default_pool_size as usize;
    g.min_pool_size = 0;
    g.max_db_connections = tenant.max_db_connections as usize;
    g.max_user_client_connections = tenant.default_max_clients as usize;
    g.max_db_client_connections = 0;
    g.client_idle_timeout = tenant.client_idle_timeout.saturating_mul(1000);
    g.auth_user = String::new();
    g.auth_query = String::new();
    g.auth_dbname = String::new();
    let mut db = Database {
        host: tenant.db_host.clone(),
        port: tenant.db_port,
        ..Database::default()
    };
    if !tenant.replicas.is_empty() {
        let primary = ServerEntry {
            host: tenant.db_host.clone(),
            port: tenant.db_port,
            role: ServerRole::Primary,
            weight: 1,
        };
        let replicas = tenant.replicas.iter().map(|r| ServerEntry {
            host: r.host.clone(),
            port: r.port,
            role: ServerRole::Replica,
            weight: 1,
        });
        db.servers = std::iter::once(primary).chain(replicas).collect();
        // The servers list names the primary: host and port stay unset.
        let unset = Database::default();
        (db.host, db.port) = (unset.host, unset.port);
    }
    if !tenant.require_user {
        // Any user, its password looked up as the manager user in the tenant's database.
        if let Some(m) = tenant.manager() {
            db.auth_user = Some(m.db_user.clone());
            db.auth_dbname = Some(tenant.db_database.clone());
            db.auth_query = Some(
                tenant
                    .auth_query
                    .clone()
                    .unwrap_or_else(|| DEFAULT_AUTH_QUERY.to_string()),
            );
        }
    }
    let users: BTreeMap<String, User> = tenant
        .users
        .iter()
        .map(|u| {
            let user = User {
                password: Some(u.db_password.clone()),
                pool_size: Some(u.pool_size as usize),
                pool_mode: Some(match u.mode_type {
                    Mode::Transaction => PoolMode::Transaction,
                    Mode::Session => PoolMode::Session,
                    Mode::Statement => PoolMode::Statement,
                }),
                max_user_client_connections: Some(
                    u.max_clients.unwrap_or(tenant.default_max_clients) as usize,
                ),
                query_wait_timeout: Some(u.pool_checkout_timeout),
                ..User::default()
            };
            (u.db_user.clone(), user)
        })
        .collect();
    Config {
        general: g,
        users,
        databases: BTreeMap::from([("*".to_string(), db)]),
        peers: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenants::model::{HostPort, TenantUser};

    fn tenant() -> Tenant {
        serde_json::from_value(serde_json::json!({
            "external_id": "acme", "db_host": "10.0.0.1", "db_port": 5433,
            "db_database": "app", "require_user": true,
            "users": [{"db_user": "alice", "db_password": "pw", "pool_size": 3,
                       "mode_type": "session", "max_clients": 7}]
        }))
        .unwrap()
    }

    #[test]
    fn a_tenant_s_users_and_server_become_its_configuration() {
        let c = config_of(&tenant(), &General::default());
        let alice = &c.users["alice"];
        assert_eq!(alice.password.as_deref(), Some("pw"));
        assert_eq!(alice.pool_size, Some(3));
        assert_eq!(alice.pool_mode, Some(PoolMode::Session));
        assert_eq!(c.user_client_cap("alice"), 7);
        let db = &c.databases["*"];
        assert_eq!((db.host.as_str(), db.port), ("10.0.0.1", 5433));
        assert!(db.auth_query.is_none());
        assert_eq!(c.general.default_pool_size, 15);
        assert!(crate::config::validate(&c).is_ok());
    }

    #[test]
    fn without_require_user_the_manager_looks_passwords_up() {
        let mut t = tenant();
        t.require_user = false;
        t.users.push(TenantUser {
            db_user_alias: String::new(),
            db_user: "manager".into(),
            db_password: "m".into(),
            pool_size: 1,
            mode_type: Mode::Transaction,
            max_clients: None,
            pool_checkout_timeout: 1000,
            is_manager: true,
        });
        t.replicas.push(HostPort {
            host: "10.0.0.2".into(),
            port: 5432,
        });
        let c = config_of(&t, &General::default());
        let db = &c.databases["*"];
        assert_eq!(db.auth_user.as_deref(), Some("manager"));
        assert_eq!(db.auth_dbname.as_deref(), Some("app"));
        assert_eq!(db.servers.len(), 2);
        if let Err(e) = crate::config::validate(&c) {
            panic!("{e}");
        }
    }
}
