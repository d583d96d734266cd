//! Unit tests of the validation: each invalid field named, defaults, updates, bans, limits.

use serde_json::{json, Value};

use super::super::tenants;
use super::{ban, cidr, host_name, limit, put};

#[test]
fn cidrs_and_host_names() {
    for good in [
        "0.0.0.0/0",
        "::/0",
        "10.1.2.0/24",
        "10.1.2.3/32",
        "fe80::1/128",
        "10.0.0.1/8",
    ] {
        assert!(cidr(good), "{good}");
    }
    for bad in [
        "0.0.0.0",
        "10.0.0.0/33",
        "::/129",
        "foo",
        "10.0.0.0/",
        "10.0.0.0/+8",
        "/8",
        "1.2.3/8",
        "fe80::1%eth0/64",
    ] {
        assert!(!cidr(bad), "{bad}");
    }
    for good in ["db.example.com", "a", "x-1.example"] {
        assert!(host_name(good), "{good}");
    }
    for bad in [
        "",
        "a..b",
        "-a.com",
        "a-.com",
        "a b",
        "under_score.com",
        "1.2.3.4",
        "x.",
        &"a".repeat(64),
    ] {
        assert!(!host_name(bad), "{bad}");
    }
}

fn body() -> Value {
    json!({"tenant": {
        "db_host": "localhost", "db_port": 5432, "db_database": "postgres", "require_user": true,
        "users": [{"db_user": "u", "db_password": "p", "pool_size": 3, "mode_type": "session"}],
        "something_unknown": {"ignored": true},
    }})
}

/// The fields a body's errors name.
fn fields(id: &str, body: &Value) -> Vec<String> {
    put(id, body, None).unwrap_err().into_keys().collect()
}

fn with(path: &[&str], value: Value) -> Value {
    let mut b = body();
    let mut at = &mut b["tenant"];
    for key in &path[..path.len() - 1] {
        at = match key.parse::<usize>() {
            Ok(i) => &mut at[i],
            Err(_) => &mut at[*key],
        };
    }
    at[path[path.len() - 1]] = value;
    b
}

#[test]
fn a_valid_create_gets_the_defaults() {
    let t = put("dev", &body(), None).unwrap();
    assert_eq!(
        (t.external_id.as_str(), t.db_port, t.default_pool_size),
        ("dev", 5432, 15)
    );
    assert_eq!(t.allow_list, ["0.0.0.0/0", "::/0"]);
    assert_eq!(t.users[0].db_user_alias, "u");
    assert_eq!(t.users[0].pool_checkout_timeout, 60_000);
    let view = tenants::view(&t);
    assert!(!view.to_string().contains("db_password"), "{view}");
}

#[test]
fn each_invalid_field_is_named() {
    let cases: Vec<(Value, &str)> = vec![
        (with(&["db_host"], Value::Null), "db_host"),
        (with(&["db_port"], json!(0)), "db_port"),
        (with(&["db_port"], json!(70000)), "db_port"),
        (with(&["db_port"], json!("5432")), "db_port"),
        (with(&["db_database"], json!(7)), "db_database"),
        (with(&["require_user"], Value::Null), "require_user"),
        (with(&["require_user"], json!("yes")), "require_user"),
        (with(&["users"], json!({})), "users"),
        (with(&["users"], json!([])), "users"),
        (
            with(&["users", "0", "db_password"], Value::Null),
            "users[0].db_password",
        ),
        (
            with(&["users", "0", "db_user"], json!("")),
            "users[0].db_user",
        ),
        (
            with(&["users", "0", "pool_size"], json!(0)),
            "users[0].pool_size",
        ),
        (
            with(&["users", "0", "mode_type"], json!("bogus")),
            "users[0].mode_type",
        ),
        (
            with(&["users", "0", "is_manager"], json!(1)),
            "users[0].is_manager",
        ),
        (
            with(&["allow_list"], json!(["10.0.0.0/8", "10.0.0.1"])),
            "allow_list[1]",
        ),
        (with(&["allow_list"], json!("0.0.0.0/0")), "allow_list"),
        (with(&["sni_hostname"], json!("not a host")), "sni_hostname"),
        (with(&["upstream_ssl"], json!(true)), "upstream_ssl"),
        (with(&["upstream_verify"], json!("peer")), "upstream_verify"),
        (with(&["ip_version"], json!("v5")), "ip_version"),
        (
            with(&["replicas"], json!([{"host": "r"}])),
            "replicas[0].port",
        ),
        (with(&["external_id"], json!("other")), "external_id"),
        (with(&["use_jit"], json!(true)), "use_jit"),
        (json!({"tenant": 5}), "tenant"),
        (json!({}), "tenant"),
    ];
    for (body, field) in cases {
        assert_eq!(fields("dev", &body), [field], "{body}");
    }
    let mut create = body();
    create["tenant"]
        .as_object_mut()
        .unwrap()
        .remove("require_user");
    assert_eq!(fields("dev", &create), ["require_user"]);
    for id in ["", "has space", "tab\t", "a.b", &"x".repeat(64)] {
        assert_eq!(fields(id, &body()), ["external_id"], "{id:?}");
    }
    let msg = &put("dev", &with(&["upstream_ssl"], json!(true)), None).unwrap_err()["upstream_ssl"];
    assert!(msg[0].contains("server_tls_sslmode"), "{msg:?}");
}

#[test]
fn managers() {
    let user = |name: &str, manager: bool| json!({"db_user": name, "db_password": "p", "pool_size": 1, "mode_type": "transaction", "is_manager": manager});
    let two = with(&["users"], json!([user("a", true), user("b", true)]));
    assert_eq!(fields("dev", &two), ["users"]);
    let none = with(&["require_user"], json!(false));
    assert_eq!(fields("dev", &none), ["users"]);
    let one = with(&["users"], json!([user("a", true), user("b", false)]));
    let mut one = one;
    one["tenant"]["require_user"] = json!(false);
    assert!(put("dev", &one, None).is_ok());
    let twice = with(&["users"], json!([user("a", false), user("a", false)]));
    assert_eq!(fields("dev", &twice), ["users[1].db_user_alias"]);
}

#[test]
fn an_update_keeps_what_it_leaves_out() {
    let mut old = put("dev", &body(), None).unwrap();
    old.banned_at = Some("2026-01-01T00:00:00Z".into());
    old.inserted_at = Some("2025-01-01T00:00:00Z".into());
    let t = put("dev", &json!({"tenant": {"db_port": 6432}}), Some(&old)).unwrap();
    assert_eq!(t.db_port, 6432);
    assert_eq!(
        (t.db_host.as_str(), &t.users, &t.banned_at),
        ("localhost", &old.users, &old.banned_at)
    );
    assert_eq!(t.inserted_at, old.inserted_at);
    let e = put(
        "dev",
        &json!({"tenant": {"require_user": false}}),
        Some(&old),
    );
    assert_eq!(e.unwrap_err().into_keys().collect::<Vec<_>>(), ["users"]);
}

#[test]
fn bans_and_limits() {
    assert_eq!(
        ban(&json!({"banned": true, "ban_reason": "abuse"})),
        Ok(Some("abuse".into()))
    );
    assert_eq!(ban(&json!({"banned": "false"})), Ok(None));
    let keys = |v: Value| ban(&v).unwrap_err().into_keys().collect::<Vec<_>>();
    assert_eq!(keys(json!({"banned": true})), ["ban_reason"]);
    assert_eq!(keys(json!({"banned": 1})), ["banned"]);
    assert_eq!(keys(json!({})), ["banned"]);
    assert_eq!(
        keys(json!({"banned": true, "ban_reason": "x", "banned_until": "2030-01-01"})),
        ["banned_until"]
    );
    assert_eq!(limit(None), Ok(100));
    assert_eq!(limit(Some("1000")), Ok(1000));
    for bad in ["0", "1001", "-1", "x", ""] {
        assert!(limit(Some(bad)).is_err(), "{bad}");
    }
}
