//! Tenants: Supavisor's multi-tenant model, kept in a PostgreSQL registry (`tenant_registry`),
//! each served as a configuration of its own beside the file's databases.

pub mod config;
pub mod fleet;
pub mod leases;
pub mod live;
pub mod model;
pub mod names;
pub mod store;

pub use live::{Loaded, Tenants};
pub use model::{HostPort, Mode, Tenant, TenantUser};
