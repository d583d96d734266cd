//! A tenant as the registry keeps it and the API speaks it: Supavisor's fields that pgcorral
//! honours, plus `replicas` and `max_db_connections` of its own.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// One tenant: its database server(s), pool settings, limits, users and access rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// The name clients give (`user.EXTERNAL_ID`, SNI, `options=reference=...`).
    pub external_id: String,
    pub db_host: String,
    pub db_port: u16,
    /// The database auth_query runs in, and a client's database when it names none.
    pub db_database: String,
    /// Read replicas beside the primary `db_host:db_port` (routing as a database with
    /// `servers` in the configuration).
    #[serde(default)]
    pub replicas: Vec<HostPort>,
    /// Accepted for Supavisor's clients; pgcorral resolves host names as the system does.
    #[serde(default = "default_ip_version")]
    pub ip_version: String,
    /// true: only the tenant's listed users log in, with their passwords; false: any user,
    /// its password looked up by auth_query as the tenant's manager user (`is_manager`).
    #[serde(default)]
    pub require_user: bool,
    /// Clients must use TLS.
    #[serde(default)]
    pub enforce_ssl: bool,
    /// The lookup for users not listed (require_user = false); pgcorral's default when unset.
    #[serde(default)]
    pub auth_query: Option<String>,
    #[serde(default = "default_pool_size")]
    pub default_pool_size: u32,
    /// Each user's client cap when it sets none.
    #[serde(default = "default_max_clients")]
    pub default_max_clients: u32,
    /// Server connections of all the tenant's users together (0: no cap of the tenant's own).
    #[serde(default)]
    pub max_db_connections: u32,
    /// Seconds a client may stay idle (0: no limit).
    #[serde(default)]
    pub client_idle_timeout: u64,
    /// A host name that names this tenant in TLS's SNI, whatever its first label.
    #[serde(default)]
    pub sni_hostname: Option<String>,
    /// Client networks (CIDR) allowed to log in.
    #[serde(default = "default_allow_list")]
    pub allow_list: Vec<String>,
    /// TLS to the tenant's server: only false is honoured per tenant (`server_tls_sslmode`
    /// applies to every server); true is refused by the API.
    #[serde(default)]
    pub upstream_ssl: bool,
    #[serde(default)]
    pub upstream_verify: Option<String>,
    /// Set while the tenant is banned (disabled): its clients are closed and new ones refused.
    #[serde(default)]
    pub banned_at: Option<String>,
    #[serde(default)]
    pub ban_reason: Option<String>,
    #[serde(default)]
    pub users: Vec<TenantUser>,
    /// Set by the registry.
    #[serde(default)]
    pub inserted_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

/// A server address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

/// One of a tenant's users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantUser {
    /// The name a client logs in with (before `.EXTERNAL_ID`); `db_user` when not given.
    #[serde(default)]
    pub db_user_alias: String,
    /// The role pgcorral logs in to the server as.
    pub db_user: String,
    /// A password, or a SCRAM-SHA-256 verifier as PostgreSQL stores it. Never returned by the
    /// API.
    pub db_password: String,
    pub pool_size: u32,
    pub mode_type: Mode,
    /// Clients of this user at once (the tenant's `default_max_clients` when unset).
    #[serde(default)]
    pub max_clients: Option<u32>,
    /// Milliseconds a client waits for a server (query_wait_timeout; 0: forever).
    #[serde(default = "default_checkout_timeout")]
    pub pool_checkout_timeout: u64,
    /// The user auth_query runs as when require_user is false.
    #[serde(default)]
    pub is_manager: bool,
}

/// Pool mode of a tenant's user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Transaction,
    Session,
    Statement,
}

impl Tenant {
    /// Banned tenants are disabled: no client is served.
    pub fn enabled(&self) -> bool {
        self.banned_at.is_none()
    }

    /// The user a client names by `alias` (the part of its user name before the tenant).
    pub fn user(&self, alias: &str) -> Option<&TenantUser> {
        self.users.iter().find(|u| u.alias() == alias)
    }

    /// Whether a client from `ip` may log in (an entry of `allow_list` holds it; entries that
    /// do not parse allow nothing).
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.allow_list
            .iter()
            .filter_map(|c| parse_cidr(c))
            .any(|(net, len)| contains(net, len, ip))
    }

    /// The user auth_query runs as.
    pub fn manager(&self) -> Option<&TenantUser> {
        self.users.iter().find(|u| u.is_manager)
    }
}

impl TenantUser {
    /// The name clients log in with.
    pub fn alias(&self) -> &str {
        if self.db_user_alias.is_empty() {
            &self.db_user
        } else {
            &self.db_user_alias
        }
    }
}

/// A CIDR range `address/length` (surrounding spaces ignored, as Supavisor); an address
/// without a length is none.
pub fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = s.trim().split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: u8 = len.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((addr, len))
}

/// Whether `ip` is in `net/len` (an IPv4 client over IPv6 as its mapped address counts as
/// IPv4).
fn contains(net: IpAddr, len: u8, ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    }
}

fn default_ip_version() -> String {
    "auto".into()
}
fn default_pool_size() -> u32 {
    15
}
fn default_max_clients() -> u32 {
    1000
}
fn default_allow_list() -> Vec<String> {
    vec!["0.0.0.0/0".into(), "::/0".into()]
}
fn default_checkout_timeout() -> u64 {
    60_000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(allow: &[&str]) -> Tenant {
        let mut t: Tenant = serde_json::from_value(serde_json::json!({
            "external_id": "t", "db_host": "h", "db_port": 5432, "db_database": "d"
        }))
        .unwrap();
        t.allow_list = allow.iter().map(|s| s.to_string()).collect();
        t
    }

    #[test]
    fn allow_list_ranges_hold_their_addresses_only() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(with(&[]).allow_list.is_empty());
        assert!(!with(&[]).allows(ip("10.0.0.1")));
        let t = with(&["10.1.0.0/16 ", "2001:db8::/32"]);
        assert!(t.allows(ip("10.1.200.3")));
        assert!(!t.allows(ip("10.2.0.1")));
        assert!(t.allows(ip("2001:db8::7")));
        assert!(t.allows(ip("::ffff:10.1.0.9")));
        assert!(!t.allows(ip("2001:db9::1")));
        let all = with(&["0.0.0.0/0", "::/0"]);
        assert!(all.allows(ip("192.0.2.1")) && all.allows(ip("::1")));
        assert!(!with(&["10.0.0.1"]).allows(ip("10.0.0.1")));
        assert_eq!(parse_cidr("10.0.0.0/33"), None);
        assert_eq!(parse_cidr("10.0.0.0/+8"), None);
        assert_eq!(parse_cidr("10.0.0.0/8"), Some((ip("10.0.0.0"), 8)));
    }
}
