//! The registry's tables: versioned migrations applied once under an advisory lock, and the
//! mapping between their rows and [`Tenant`].

use serde::Deserialize;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, GenericClient, Row, Transaction};

use super::{HostPort, Mode, OpError, Tenant, TenantUser};

/// The key of `pg_advisory_xact_lock` that serialises migrations across nodes ("pgcorral" in
/// ASCII).
const MIGRATION_LOCK: i64 = 0x7067_636f_7272_616c;

/// The migrations, in order: entry `i` brings the schema from version `i` to `i + 1`. Append
/// only; never edit one that has shipped.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: tenants and their users.
    r#"
    CREATE TABLE pgcorral.tenants (
        external_id text COLLATE "C" PRIMARY KEY CHECK (external_id <> ''),
        db_host text NOT NULL,
        db_port int NOT NULL CHECK (db_port BETWEEN 0 AND 65535),
        db_database text NOT NULL,
        replicas jsonb NOT NULL DEFAULT '[]',
        ip_version text NOT NULL DEFAULT 'auto',
        require_user bool NOT NULL DEFAULT false,
        enforce_ssl bool NOT NULL DEFAULT false,
        auth_query text,
        default_pool_size int NOT NULL CHECK (default_pool_size >= 0),
        default_max_clients int NOT NULL CHECK (default_max_clients >= 0),
        max_db_connections int NOT NULL DEFAULT 0 CHECK (max_db_connections >= 0),
        client_idle_timeout bigint NOT NULL DEFAULT 0 CHECK (client_idle_timeout >= 0),
        sni_hostname text,
        allow_list text[] NOT NULL,
        upstream_ssl bool NOT NULL DEFAULT false,
        upstream_verify text,
        banned_at timestamptz,
        ban_reason text,
        version bigint NOT NULL DEFAULT 1,
        inserted_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE UNIQUE INDEX tenants_sni_hostname_key ON pgcorral.tenants (lower(sni_hostname))
        WHERE sni_hostname IS NOT NULL;
    CREATE TABLE pgcorral.tenant_users (
        tenant_external_id text COLLATE "C" NOT NULL
            REFERENCES pgcorral.tenants (external_id) ON DELETE CASCADE,
        db_user_alias text COLLATE "C" NOT NULL,
        db_user text NOT NULL,
        db_password text NOT NULL,
        pool_size int NOT NULL CHECK (pool_size >= 0),
        mode_type text NOT NULL CHECK (mode_type IN ('transaction', 'session', 'statement')),
        max_clients int CHECK (max_clients >= 0),
        pool_checkout_timeout bigint NOT NULL CHECK (pool_checkout_timeout >= 0),
        is_manager bool NOT NULL DEFAULT false,
        PRIMARY KEY (tenant_external_id, db_user_alias)
    );
    "#,
    // 2: the nodes of the fleet: each one's peer id (cancel keys) and where its clients
    // connect, kept alive by heartbeats.
    r#"
    CREATE TABLE pgcorral.nodes (
        peer_id int PRIMARY KEY CHECK (peer_id BETWEEN 1 AND 65535),
        host text NOT NULL,
        port int NOT NULL CHECK (port BETWEEN 1 AND 65535),
        started_at timestamptz NOT NULL DEFAULT now(),
        heartbeat_at timestamptz NOT NULL DEFAULT now()
    );
    "#,
    // 3: the fleet's leases on each tenant user's server connections: a node's share of the
    // user's pool size on one database, kept alive by renewals, with the registry session
    // that renewed it last.
    r#"
    CREATE TABLE pgcorral.leases (
        tenant_external_id text COLLATE "C" NOT NULL,
        db_name text COLLATE "C" NOT NULL,
        db_user text COLLATE "C" NOT NULL,
        peer_id int NOT NULL CHECK (peer_id BETWEEN 1 AND 65535),
        share int NOT NULL CHECK (share >= 0),
        want int NOT NULL CHECK (want >= 0),
        heartbeat_at timestamptz NOT NULL DEFAULT now(),
        backend_pid int NOT NULL DEFAULT 0,
        backend_start timestamptz,
        PRIMARY KEY (tenant_external_id, db_name, db_user, peer_id)
    );
    "#,
];

/// Creates the schema or brings it to the latest version, in one transaction that holds the
/// migration lock, so nodes starting together migrate once. Returns the version now in place.
pub(super) async fn migrate(client: &mut Client) -> Result<i32, OpError> {
    let latest = i32::try_from(MIGRATIONS.len()).map_err(|_| OpError::Bad("migrations".into()))?;
    let tx = client.transaction().await?;
    tx.execute(
        "SELECT pg_catalog.pg_advisory_xact_lock($1)",
        &[&MIGRATION_LOCK],
    )
    .await?;
    // Looked up first: CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the
    // schema is there, which a node's role need not have once it was set up.
    let exists: bool = tx
        .query_one(
            "SELECT pg_catalog.to_regclass('pgcorral.schema_version') IS NOT NULL",
            &[],
        )
        .await?
        .try_get(0)?;
    if !exists {
        tx.batch_execute(
            "CREATE SCHEMA IF NOT EXISTS pgcorral;
             CREATE TABLE pgcorral.schema_version (version int NOT NULL);",
        )
        .await?;
    }
    let current: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM pgcorral.schema_version",
            &[],
        )
        .await?
        .try_get(0)?;
    if current >= latest {
        if current > latest {
            tracing::warn!(
                current,
                latest,
                "tenant registry: the schema is newer than this pgcorral knows; leaving it"
            );
        }
        tx.commit().await?;
        return Ok(current);
    }
    for (version, sql) in (1..).zip(MIGRATIONS) {
        if version > current {
            tracing::info!(version, "tenant registry: migrating the schema");
            tx.batch_execute(sql).await?;
        }
    }
    tx.execute("DELETE FROM pgcorral.schema_version", &[])
        .await?;
    tx.execute(
        "INSERT INTO pgcorral.schema_version (version) VALUES ($1)",
        &[&latest],
    )
    .await?;
    tx.commit().await?;
    Ok(latest)
}

/// A tenant's columns and its users (a JSON array ordered by alias), `inserted_at` and the
/// like as RFC 3339 text in UTC; followed by a filter and order on `t`.
const SELECT: &str = r#"
SELECT t.external_id, t.db_host, t.db_port, t.db_database, t.replicas::text AS replicas,
       t.ip_version, t.require_user, t.enforce_ssl, t.auth_query, t.default_pool_size,
       t.default_max_clients, t.max_db_connections, t.client_idle_timeout, t.sni_hostname,
       t.allow_list, t.upstream_ssl, t.upstream_verify, t.ban_reason,
       to_char(t.banned_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS banned_at,
       to_char(t.inserted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS inserted_at,
       to_char(t.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS updated_at,
       coalesce((SELECT json_agg(json_build_object(
                    'db_user_alias', u.db_user_alias, 'db_user', u.db_user,
                    'db_password', u.db_password, 'pool_size', u.pool_size,
                    'mode_type', u.mode_type, 'max_clients', u.max_clients,
                    'pool_checkout_timeout', u.pool_checkout_timeout,
                    'is_manager', u.is_manager) ORDER BY u.db_user_alias)
                 FROM pgcorral.tenant_users u
                 WHERE u.tenant_external_id = t.external_id), '[]')::text AS users
FROM pgcorral.tenants t
"#;

/// The tenants `tail` (a WHERE/ORDER/LIMIT clause on `t`, constant text) selects.
pub(super) async fn select(
    c: &impl GenericClient,
    tail: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Tenant>, OpError> {
    let rows = c.query(&format!("{SELECT} {tail}"), params).await?;
    rows.iter().map(tenant).collect()
}

/// The one tenant `tail` selects, if any.
pub(super) async fn select_one(
    c: &impl GenericClient,
    tail: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Tenant>, OpError> {
    Ok(select(c, tail, params).await?.into_iter().next())
}

/// A tenant from a row of [`SELECT`]; what does not fit the model is an error, never a panic.
fn tenant(row: &Row) -> Result<Tenant, OpError> {
    let external_id: String = row.try_get("external_id")?;
    let bad = |what: String| OpError::Bad(format!("tenant {external_id:?}: {what}"));
    let replicas: String = row.try_get("replicas")?;
    let replicas: Vec<HostPort> =
        serde_json::from_str(&replicas).map_err(|e| bad(format!("replicas: {}", json(&e))))?;
    let users: String = row.try_get("users")?;
    let users: Vec<StoredUser> =
        serde_json::from_str(&users).map_err(|e| bad(format!("users: {}", json(&e))))?;
    let db_port = row.try_get::<_, i32>("db_port")?;
    let u32_col = |name: &str| -> Result<u32, OpError> {
        let v: i32 = row.try_get(name)?;
        u32::try_from(v).map_err(|_| bad(format!("{name} {v} is negative")))
    };
    let client_idle_timeout: i64 = row.try_get("client_idle_timeout")?;
    Ok(Tenant {
        db_host: row.try_get("db_host")?,
        db_port: u16::try_from(db_port).map_err(|_| bad(format!("db_port {db_port}")))?,
        db_database: row.try_get("db_database")?,
        replicas,
        ip_version: row.try_get("ip_version")?,
        require_user: row.try_get("require_user")?,
        enforce_ssl: row.try_get("enforce_ssl")?,
        auth_query: row.try_get("auth_query")?,
        default_pool_size: u32_col("default_pool_size")?,
        default_max_clients: u32_col("default_max_clients")?,
        max_db_connections: u32_col("max_db_connections")?,
        client_idle_timeout: u64::try_from(client_idle_timeout)
            .map_err(|_| bad(format!("client_idle_timeout {client_idle_timeout}")))?,
        sni_hostname: row.try_get("sni_hostname")?,
        allow_list: row.try_get("allow_list")?,
        upstream_ssl: row.try_get("upstream_ssl")?,
        upstream_verify: row.try_get("upstream_verify")?,
        banned_at: row.try_get("banned_at")?,
        ban_reason: row.try_get("ban_reason")?,
        users: users.into_iter().map(StoredUser::into_user).collect(),
        inserted_at: row.try_get("inserted_at")?,
        updated_at: row.try_get("updated_at")?,
        external_id,
    })
}

/// A JSON error without the text it quotes (a user's fields, a password among them).
fn json(e: &serde_json::Error) -> String {
    format!("malformed ({:?} at column {})", e.classify(), e.column())
}

/// A user as the registry keeps it: every field stored, none defaulted.
#[derive(Deserialize)]
struct StoredUser {
    db_user_alias: String,
    db_user: String,
    db_password: String,
    pool_size: u32,
    mode_type: Mode,
    max_clients: Option<u32>,
    pool_checkout_timeout: u64,
    is_manager: bool,
}

impl StoredUser {
    /// The model's user.
    fn into_user(self) -> TenantUser {
        TenantUser {
            db_user_alias: self.db_user_alias,
            db_user: self.db_user,
            db_password: self.db_password,
            pool_size: self.pool_size,
            mode_type: self.mode_type,
            max_clients: self.max_clients,
            pool_checkout_timeout: self.pool_checkout_timeout,
            is_manager: self.is_manager,
        }
    }
}

/// Inserts or updates the tenant's own row (not its ban, which [`super::Store::set_ban`]
/// keeps); returns its version after: 1 when created.
pub(super) async fn upsert(tx: &Transaction<'_>, t: &Tenant) -> Result<i64, OpError> {
    let replicas =
        serde_json::to_string(&t.replicas).map_err(|e| OpError::Bad(format!("replicas: {e}")))?;
    let row = tx
        .query_one(
            "INSERT INTO pgcorral.tenants (external_id, db_host, db_port, db_database, replicas,
                 ip_version, require_user, enforce_ssl, auth_query, default_pool_size,
                 default_max_clients, max_db_connections, client_idle_timeout, sni_hostname,
                 allow_list, upstream_ssl, upstream_verify)
             VALUES ($1, $2, $3, $4, $5::text::jsonb, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                 $15, $16, $17)
             ON CONFLICT (external_id) DO UPDATE SET
                 db_host = excluded.db_host, db_port = excluded.db_port,
                 db_database = excluded.db_database, replicas = excluded.replicas,
                 ip_version = excluded.ip_version, require_user = excluded.require_user,
                 enforce_ssl = excluded.enforce_ssl, auth_query = excluded.auth_query,
                 default_pool_size = excluded.default_pool_size,
                 default_max_clients = excluded.default_max_clients,
                 max_db_connections = excluded.max_db_connections,
                 client_idle_timeout = excluded.client_idle_timeout,
                 sni_hostname = excluded.sni_hostname, allow_list = excluded.allow_list,
                 upstream_ssl = excluded.upstream_ssl, upstream_verify = excluded.upstream_verify,
                 version = pgcorral.tenants.version + 1, updated_at = now()
             RETURNING version",
            &[
                &t.external_id,
                &t.db_host,
                &i32::from(t.db_port),
                &t.db_database,
                &replicas,
                &t.ip_version,
                &t.require_user,
                &t.enforce_ssl,
                &t.auth_query,
                &int("default_pool_size", t.default_pool_size)?,
                &int("default_max_clients", t.default_max_clients)?,
                &int("max_db_connections", t.max_db_connections)?,
                &bigint("client_idle_timeout", t.client_idle_timeout)?,
                &t.sni_hostname,
                &t.allow_list,
                &t.upstream_ssl,
                &t.upstream_verify,
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// Replaces the tenant's users with `t.users` (each under its effective alias).
pub(super) async fn replace_users(tx: &Transaction<'_>, t: &Tenant) -> Result<(), OpError> {
    let mut aliases: Vec<&str> = t.users.iter().map(TenantUser::alias).collect();
    aliases.sort_unstable();
    if let Some(w) = aliases.windows(2).find(|w| w[0] == w[1]) {
        return Err(OpError::Bad(format!("two users named {:?}", w[0])));
    }
    tx.execute(
        "DELETE FROM pgcorral.tenant_users WHERE tenant_external_id = $1",
        &[&t.external_id],
    )
    .await?;
    if t.users.is_empty() {
        return Ok(());
    }
    let insert = tx
        .prepare(
            "INSERT INTO pgcorral.tenant_users (tenant_external_id, db_user_alias, db_user,
                 db_password, pool_size, mode_type, max_clients, pool_checkout_timeout, is_manager)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .await?;
    for u in &t.users {
        let max_clients = u.max_clients.map(|m| int("max_clients", m)).transpose()?;
        tx.execute(
            &insert,
            &[
                &t.external_id,
                &u.alias(),
                &u.db_user,
                &u.db_password,
                &int("pool_size", u.pool_size)?,
                &mode(u.mode_type),
                &max_clients,
                &bigint("pool_checkout_timeout", u.pool_checkout_timeout)?,
                &u.is_manager,
            ],
        )
        .await?;
    }
    Ok(())
}

/// A pool mode as the `mode_type` column spells it.
fn mode(m: Mode) -> &'static str {
    match m {
        Mode::Transaction => "transaction",
        Mode::Session => "session",
        Mode::Statement => "statement",
    }
}

/// `v` for an `int` column, or an error naming the field.
fn int(field: &str, v: u32) -> Result<i32, OpError> {
    i32::try_from(v).map_err(|_| OpError::Bad(format!("{field} {v} is too large")))
}

/// `v` for a `bigint` column, or an error naming the field.
fn bigint(field: &str, v: u64) -> Result<i64, OpError> {
    i64::try_from(v).map_err(|_| OpError::Bad(format!("{field} {v} is too large")))
}
