//! The API's OpenAPI document: its routes, the JSON they take and give, bearer JWT security.
// The structs here only describe JSON for the document; nothing builds them.
#![allow(dead_code)]

use std::collections::BTreeMap;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi as Document;
use utoipa::{Modify, OpenApi, ToSchema};

use super::tenants;

/// The OpenAPI 3.1 document of the API (served at `/api/openapi`).
pub fn openapi() -> Document {
    ApiDoc::openapi()
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "pgcorral tenant API",
        description = "Tenants of pgcorral's multi-tenant mode, in Supavisor's shapes. The \
            /api/tenants routes need `Authorization: Bearer <JWT>`, an HS256 token signed with \
            the API's secret."
    ),
    paths(
        tenants::list,
        tenants::show,
        tenants::put,
        tenants::patch,
        tenants::delete,
        tenants::terminate,
        tenants::health
    ),
    components(schemas(
        Tenant, TenantUser, HostPort, Mode, TenantParams, TenantCreate, TenantData, TenantList,
        ToggleTenantBan, Terminated, ErrorBody, ValidationErrors, Unhealthy
    )),
    modifiers(&Bearer),
    tags(
        (name = "tenants", description = "Tenants in the registry"),
        (name = "health", description = "Whether this node can serve (also at /healthz)")
    )
)]
struct ApiDoc;

/// Adds the `bearer` security scheme the tenant routes name.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut Document) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .bearer_format("JWT")
            .description(Some(
                "An HS256 JWT signed with the API's secret; `exp` is honoured.",
            ))
            .build();
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// A tenant as the API returns it (users without their passwords).
#[derive(ToSchema)]
pub struct Tenant {
    /// The name clients give (`user.EXTERNAL_ID`, SNI, `options=reference=...`).
    #[schema(example = "dev_tenant")]
    external_id: String,
    #[schema(example = "localhost")]
    db_host: String,
    #[schema(example = 5432)]
    db_port: u16,
    #[schema(example = "postgres")]
    db_database: String,
    /// Read replicas beside the primary (pgcorral's own).
    replicas: Vec<HostPort>,
    /// auto, v4 or v6 (accepted; host names resolve as the system resolves them).
    ip_version: String,
    /// true: only the listed users log in; false: any user, looked up by auth_query as the
    /// manager user.
    require_user: bool,
    /// Clients must use TLS.
    enforce_ssl: bool,
    auth_query: Option<String>,
    default_pool_size: u32,
    default_max_clients: u32,
    /// Server connections of all the tenant's users together (0: no cap; pgcorral's own).
    max_db_connections: u32,
    /// Seconds a client may stay idle (0: no limit).
    client_idle_timeout: u64,
    sni_hostname: Option<String>,
    /// Client networks (CIDR) allowed to log in.
    allow_list: Vec<String>,
    /// Always false: server TLS follows pgcorral's `server_tls_sslmode`.
    upstream_ssl: bool,
    upstream_verify: Option<String>,
    #[schema(read_only)]
    banned_at: Option<String>,
    #[schema(read_only)]
    ban_reason: Option<String>,
    users: Vec<TenantUser>,
    #[schema(read_only)]
    inserted_at: Option<String>,
    #[schema(read_only)]
    updated_at: Option<String>,
}

/// One of a tenant's users. `db_password` is written, never returned.
#[derive(ToSchema)]
pub struct TenantUser {
    /// The name clients log in with (before `.EXTERNAL_ID`); `db_user` when not given.
    db_user_alias: Option<String>,
    /// The role pgcorral logs in to the server as.
    #[schema(example = "postgres")]
    db_user: String,
    /// A password, or a SCRAM-SHA-256 verifier as PostgreSQL stores it.
    #[schema(write_only)]
    db_password: String,
    #[schema(minimum = 1, example = 10)]
    pool_size: u32,
    mode_type: Mode,
    /// Clients of this user at once (the tenant's default_max_clients when null).
    max_clients: Option<u32>,
    /// Milliseconds a client waits for a server (0: forever).
    #[serde(default)]
    #[schema(default = 60000)]
    pool_checkout_timeout: u64,
    /// The user auth_query runs as (at most one; required when require_user is false).
    #[serde(default)]
    is_manager: bool,
}

/// A server address.
#[derive(ToSchema)]
pub struct HostPort {
    host: String,
    port: u16,
}

/// Pool mode.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Mode {
    Transaction,
    Session,
    Statement,
}

/// A tenant to create or update. Required on create; an update may leave fields out to keep
/// their values. Unknown fields are ignored; `upstream_ssl` true, `upstream_verify` peer and
/// `use_jit` true are refused.
#[derive(ToSchema)]
pub struct TenantParams {
    /// The path's external id when given.
    #[serde(default)]
    external_id: String,
    db_host: String,
    #[schema(minimum = 1, maximum = 65535)]
    db_port: u16,
    db_database: String,
    #[serde(default)]
    replicas: Vec<HostPort>,
    #[serde(default)]
    #[schema(default = "auto")]
    ip_version: String,
    require_user: bool,
    #[serde(default)]
    enforce_ssl: bool,
    auth_query: Option<String>,
    #[serde(default)]
    #[schema(default = 15, minimum = 1)]
    default_pool_size: u32,
    #[serde(default)]
    #[schema(default = 1000, minimum = 1)]
    default_max_clients: u32,
    #[serde(default)]
    max_db_connections: u32,
    #[serde(default)]
    client_idle_timeout: u64,
    sni_hostname: Option<String>,
    /// CIDR ranges (address/length).
    #[serde(default)]
    #[schema(default = json!(["0.0.0.0/0", "::/0"]))]
    allow_list: Vec<String>,
    /// Only false is accepted.
    #[serde(default)]
    upstream_ssl: bool,
    /// none or null; peer is refused.
    upstream_verify: Option<String>,
    users: Vec<TenantUser>,
}

/// The body of a PUT.
#[derive(ToSchema)]
pub struct TenantCreate {
    tenant: TenantParams,
}

/// One tenant.
#[derive(ToSchema)]
pub struct TenantData {
    data: Tenant,
}

/// A page of tenants.
#[derive(ToSchema)]
pub struct TenantList {
    data: Vec<Tenant>,
    /// The `after` of the next page; null on the last.
    next: Option<String>,
}

/// The body of a PATCH.
#[derive(ToSchema)]
pub struct ToggleTenantBan {
    /// true to ban (disable) the tenant, false to lift the ban.
    banned: bool,
    /// Required when banned is true.
    ban_reason: Option<String>,
}

/// A terminate's answer.
#[derive(ToSchema)]
pub struct Terminated {
    #[schema(example = "ok")]
    result: String,
}

/// An error.
#[derive(ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    error: String,
}

/// Invalid fields: messages by field path (`db_port`, `users[0].db_password`).
#[derive(ToSchema)]
pub struct ValidationErrors {
    errors: BTreeMap<String, Vec<String>>,
}

/// An unhealthy node.
#[derive(ToSchema)]
pub struct Unhealthy {
    #[schema(example = "unhealthy")]
    status: String,
    timestamp: String,
    failed_checks: Vec<String>,
}
