//! Validation of the API's requests into tenants, refused as Supavisor's changeset errors.
//!
//! Errors answer 422 `{"errors": {"field": ["message", ...]}}`. Fields are named by flat JSON
//! paths: `db_port`, `users[0].db_password`, `replicas[1].host`, `allow_list[2]` (Supavisor
//! nests a user's errors in a list of objects; a path names the field in one string). Unknown
//! fields are ignored, as Supavisor ignores them; a field of the wrong type is an error. As
//! Ecto casts it, `""` counts as null.

mod fields;
mod names;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::tenants::model::{HostPort, Mode, Tenant, TenantUser};
use fields::{flag, int, object, small, text, Check, Got, BLANK};
pub use names::{cidr, external_id_errors, host_name};

/// Messages by field path.
pub type Errors = BTreeMap<String, Vec<String>>;

/// Longest ban reason (it is shown to refused clients).
const MAX_BAN_REASON: usize = 1000;
/// Why per-tenant TLS to servers is refused (fail closed: no rule accepted that is not kept).
const NO_UPSTREAM_TLS: &str = "pgcorral applies server_tls_sslmode to every server and does not \
     take TLS to servers per tenant: only upstream_ssl false (upstream_verify none or null) is \
     accepted";

/// The tenant a PUT asks for (`{"tenant": {...}}`), `external_id` from the path. Fields the
/// body leaves out keep `old`'s values (the stored tenant on update, defaults on create);
/// `users`, when given, replaces every user. The ban and the timestamps are kept from `old`.
pub fn put(external_id: &str, body: &Value, old: Option<&Tenant>) -> Result<Tenant, Errors> {
    let mut c = Check::default();
    for why in external_id_errors(external_id) {
        c.add("external_id", why);
    }
    let o = match body.get("tenant") {
        Some(Value::Object(o)) => o,
        None | Some(Value::Null) => {
            c.add("tenant", BLANK);
            return Err(c.0);
        }
        Some(_) => {
            c.add("tenant", "must be an object");
            return Err(c.0);
        }
    };
    let given = c.maybe("external_id", text(o.get("external_id")), None);
    if given.is_some_and(|given| given != external_id) {
        c.add("external_id", "must be the external_id of the path");
    }
    let db_host = c.need(
        "db_host",
        text(o.get("db_host")),
        old.map(|t| t.db_host.clone()),
    );
    if db_host
        .chars()
        .any(|ch| ch.is_whitespace() || ch.is_control())
    {
        c.add("db_host", "must be a host name or address");
    }
    let db_port = int(o.get("db_port"), 1, 65535);
    let db_port = c.need("db_port", db_port, old.map(|t| t.db_port.into()));
    let db_database = text(o.get("db_database"));
    let db_database = c.need(
        "db_database",
        db_database,
        old.map(|t| t.db_database.clone()),
    );
    let ip_version = c.need(
        "ip_version",
        text(o.get("ip_version")),
        Some(old.map_or("auto".into(), |t| t.ip_version.clone())),
    );
    if !matches!(ip_version.as_str(), "auto" | "v4" | "v6") {
        c.add("ip_version", "must be one of: auto, v4, v6");
    }
    let require_user = flag(o.get("require_user"));
    let require_user = c.need("require_user", require_user, old.map(|t| t.require_user));
    let enforce_ssl = flag(o.get("enforce_ssl"));
    let enforce_ssl = c.need(
        "enforce_ssl",
        enforce_ssl,
        Some(old.is_some_and(|t| t.enforce_ssl)),
    );
    let auth_query = text(o.get("auth_query"));
    let auth_query = c.maybe(
        "auth_query",
        auth_query,
        old.and_then(|t| t.auth_query.clone()),
    );
    let limits = limits(&mut c, o, old);
    let (sni_hostname, upstream_verify) = tls(&mut c, o, old);
    let allow_list = allow_list(&mut c, o.get("allow_list"), old);
    let replicas = match c.list("replicas", o.get("replicas")) {
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, r)| replica(&mut c, i, r))
            .collect(),
        None => old.map(|t| t.replicas.clone()).unwrap_or_default(),
    };
    let users = users(&mut c, o, old);
    check_users(
        &mut c,
        &users,
        require_user,
        o.contains_key("users") || old.is_none(),
    );
    let tenant = Tenant {
        external_id: external_id.to_owned(),
        db_host,
        db_port: u16::try_from(db_port).unwrap_or_default(),
        db_database,
        replicas,
        ip_version,
        require_user,
        enforce_ssl,
        auth_query,
        default_pool_size: limits.default_pool_size,
        default_max_clients: limits.default_max_clients,
        max_db_connections: limits.max_db_connections,
        client_idle_timeout: limits.client_idle_timeout,
        sni_hostname,
        allow_list,
        upstream_ssl: false,
        upstream_verify,
        banned_at: old.and_then(|t| t.banned_at.clone()),
        ban_reason: old.and_then(|t| t.ban_reason.clone()),
        users,
        inserted_at: old.and_then(|t| t.inserted_at.clone()),
        updated_at: old.and_then(|t| t.updated_at.clone()),
    };
    c.done(tenant)
}

/// A tenant's pool limits, each from the body, else `old`'s, else Supavisor's default.
struct Limits {
    default_pool_size: u32,
    default_max_clients: u32,
    max_db_connections: u32,
    client_idle_timeout: u64,
}

fn limits(c: &mut Check, o: &Map<String, Value>, old: Option<&Tenant>) -> Limits {
    let num = |c: &mut Check, key: &str, lo: u32, old: Option<u32>, default: u32| {
        c.need(key, small(o.get(key), lo), Some(old.unwrap_or(default)))
    };
    let default_pool_size = num(
        c,
        "default_pool_size",
        1,
        old.map(|t| t.default_pool_size),
        15,
    );
    let default_max_clients = num(
        c,
        "default_max_clients",
        1,
        old.map(|t| t.default_max_clients),
        1000,
    );
    let max_db_connections = num(
        c,
        "max_db_connections",
        0,
        old.map(|t| t.max_db_connections),
        0,
    );
    let client_idle_timeout = int(o.get("client_idle_timeout"), 0, u32::MAX.into());
    let client_idle_timeout = c.need(
        "client_idle_timeout",
        client_idle_timeout,
        Some(old.map_or(0, |t| t.client_idle_timeout)),
    );
    Limits {
        default_pool_size,
        default_max_clients,
        max_db_connections,
        client_idle_timeout,
    }
}

/// The TLS and access fields: the SNI host name kept, and upstream TLS and JIT refused unless
/// off (fail closed). Returns `(sni_hostname, upstream_verify)`.
fn tls(
    c: &mut Check,
    o: &Map<String, Value>,
    old: Option<&Tenant>,
) -> (Option<String>, Option<String>) {
    let sni = text(o.get("sni_hostname"));
    let sni_hostname = c.maybe(
        "sni_hostname",
        sni,
        old.and_then(|t| t.sni_hostname.clone()),
    );
    if sni_hostname.as_deref().is_some_and(|h| !host_name(h)) {
        c.add(
            "sni_hostname",
            "must be a host name (labels of letters, digits and '-')",
        );
    }
    let upstream_ssl = flag(o.get("upstream_ssl"));
    if c.need("upstream_ssl", upstream_ssl, Some(false)) {
        c.add("upstream_ssl", NO_UPSTREAM_TLS);
    }
    let upstream_verify = c.maybe("upstream_verify", text(o.get("upstream_verify")), None);
    match upstream_verify.as_deref() {
        None | Some("none") => {}
        Some("peer") => c.add("upstream_verify", NO_UPSTREAM_TLS),
        Some(_) => c.add("upstream_verify", "must be none or peer"),
    }
    if o.get("use_jit") == Some(&Value::Bool(true)) {
        c.add(
            "use_jit",
            "pgcorral does not take JIT access: only false is accepted",
        );
    }
    (sni_hostname, upstream_verify)
}

/// The users: the body's list replaces every user; none given keeps `old`'s (a new tenant
/// must give some).
fn users(c: &mut Check, o: &Map<String, Value>, old: Option<&Tenant>) -> Vec<TenantUser> {
    match c.list("users", o.get("users")) {
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, u)| user(c, i, u))
            .collect(),
        None if o.get("users").is_some() => Vec::new(),
        None => match old {
            Some(t) => t.users.clone(),
            None => {
                c.add("users", BLANK);
                Vec::new()
            }
        },
    }
}

fn allow_list(c: &mut Check, v: Option<&Value>, old: Option<&Tenant>) -> Vec<String> {
    let Some(items) = c.list("allow_list", v) else {
        return match old {
            Some(t) => t.allow_list.clone(),
            None => vec!["0.0.0.0/0".into(), "::/0".into()],
        };
    };
    let mut ranges = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.as_str().map(str::trim) {
            Some(range) if cidr(range) => ranges.push(range.to_owned()),
            _ => c.add(
                &format!("allow_list[{i}]"),
                "must be a CIDR range (address/length, e.g. 10.0.0.0/8)",
            ),
        }
    }
    ranges
}

fn replica(c: &mut Check, i: usize, v: &Value) -> HostPort {
    let path = format!("replicas[{i}]");
    let Some(o) = object(c, &path, v) else {
        return HostPort {
            host: String::new(),
            port: 0,
        };
    };
    let host = c.need(&format!("{path}.host"), text(o.get("host")), None);
    let port = c.need(&format!("{path}.port"), int(o.get("port"), 1, 65535), None);
    let port = u16::try_from(port).unwrap_or_default();
    HostPort { host, port }
}

fn user(c: &mut Check, i: usize, v: &Value) -> TenantUser {
    let path = format!("users[{i}]");
    let empty = Map::new();
    let o = object(c, &path, v).unwrap_or(&empty);
    let p = |key: &str| format!("{path}.{key}");
    let db_user = c.need(&p("db_user"), text(o.get("db_user")), None);
    let alias = c.maybe(&p("db_user_alias"), text(o.get("db_user_alias")), None);
    let db_password = c.need(&p("db_password"), text(o.get("db_password")), None);
    let pool_size = c.need(&p("pool_size"), small(o.get("pool_size"), 1), None);
    let mode = text(o.get("mode_type"));
    let mode_type = match c.need(&p("mode_type"), mode, None).as_str() {
        "transaction" | "" => Mode::Transaction,
        "session" => Mode::Session,
        "statement" => Mode::Statement,
        _ => {
            c.add(
                &p("mode_type"),
                "must be one of: transaction, session, statement",
            );
            Mode::Transaction
        }
    };
    let max_clients = c.maybe(&p("max_clients"), small(o.get("max_clients"), 1), None);
    let timeout = int(o.get("pool_checkout_timeout"), 0, u32::MAX.into());
    let pool_checkout_timeout = c.need(&p("pool_checkout_timeout"), timeout, Some(60_000));
    let is_manager = c.need(&p("is_manager"), flag(o.get("is_manager")), Some(false));
    let control = |name: &str| name.chars().any(char::is_control);
    if control(&db_user) {
        c.add(&p("db_user"), "must not contain control characters");
    }
    if alias.as_deref().is_some_and(control) {
        c.add(&p("db_user_alias"), "must not contain control characters");
    }
    TenantUser {
        db_user_alias: alias.unwrap_or_else(|| db_user.clone()),
        db_user,
        db_password,
        pool_size,
        mode_type,
        max_clients,
        pool_checkout_timeout,
        is_manager,
    }
}

/// The rules across users: unique aliases, at most one manager, a manager when any user may
/// log in (auth_query runs as it), at least one user. `given`: the request named the users.
fn check_users(c: &mut Check, users: &[TenantUser], require_user: bool, given: bool) {
    if given && users.is_empty() && !c.0.contains_key("users") {
        c.add("users", "must list at least one user");
    }
    for (i, u) in users.iter().enumerate() {
        if users[..i]
            .iter()
            .any(|earlier| earlier.alias() == u.alias())
        {
            c.add(
                &format!("users[{i}].db_user_alias"),
                "has already been taken",
            );
        }
    }
    let managers = users.iter().filter(|u| u.is_manager).count();
    if managers > 1 {
        c.add("users", "at most one user may be the manager (is_manager)");
    }
    let require_user_known = !c.0.contains_key("require_user");
    if !require_user && require_user_known && managers == 0 && !users.is_empty() {
        c.add(
            "users",
            "needs a manager user (is_manager: true) when require_user is false: auth_query \
             runs as it",
        );
    }
}

/// A PATCH: `{"banned": true, "ban_reason": "..."}` → `Some(reason)` (ban), `{"banned":
/// false}` → `None` (unban). `"true"`/`"false"` are taken too, as Supavisor takes them.
pub fn ban(body: &Value) -> Result<Option<String>, Errors> {
    let mut c = Check::default();
    let banned = match body.get("banned") {
        Some(Value::String(s)) if s == "true" => Got::Val(true),
        Some(Value::String(s)) if s == "false" => Got::Val(false),
        v => flag(v),
    };
    let banned = c.need("banned", banned, None);
    if body.get("banned_until").is_some_and(|v| !v.is_null()) {
        c.add(
            "banned_until",
            "pgcorral does not take timed bans: lift a ban with banned false",
        );
    }
    let reason = if banned {
        let reason = c.need("ban_reason", text(body.get("ban_reason")), None);
        if reason.len() > MAX_BAN_REASON {
            c.add("ban_reason", "must be at most 1000 bytes");
        }
        Some(reason)
    } else {
        None
    };
    c.done(reason)
}

/// The `limit` of a list: 1 to 1000, 100 when not given.
pub fn limit(v: Option<&str>) -> Result<usize, Errors> {
    match v.map(str::parse::<usize>) {
        None => Ok(100),
        Some(Ok(n)) if (1..=1000).contains(&n) => Ok(n),
        Some(_) => {
            let mut c = Check::default();
            c.add("limit", "must be an integer from 1 to 1000");
            Err(c.0)
        }
    }
}

#[cfg(test)]
mod tests;
