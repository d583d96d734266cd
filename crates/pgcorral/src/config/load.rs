//! Reading a config file or the environment into a validated `Config`.

use std::collections::BTreeMap;
use std::path::Path;

use super::pgbouncer::{from_pgbouncer_str, is_pgbouncer};
use super::pgcat::{from_pgcat_str, is_pgcat, Warning};
use super::userlist;
use super::validate::{problems, validate};
use super::{AuthType, Config, Database, General, User};

/// A config that cannot be used; the message names the key at fault.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Parses without validating; serde's messages name the key and line.
fn parse(s: &str) -> Result<Config, ConfigError> {
    toml::from_str(s).map_err(|e| ConfigError(e.to_string()))
}

/// Parses and validates a config file's text.
pub fn from_toml_str(s: &str) -> Result<Config, ConfigError> {
    let cfg = parse(s)?;
    validate(&cfg)?;
    Ok(cfg)
}

/// Reads, parses and validates `path`; every message starts with the path.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    load_file_warnings(path).map(|(cfg, _)| cfg)
}

/// [`load_file`], with the warnings to log: one per key of a PgCat or PgBouncer file (see
/// [`super::pgcat`], [`super::pgbouncer`]) that pgcorral does not honour; none for
/// pgcorral's own format.
pub fn load_file_warnings(path: &Path) -> Result<(Config, Vec<Warning>), ConfigError> {
    let (mut cfg, warnings) = read_file(path)?;
    if from_environment(&mut cfg.general, |k| std::env::var(k).ok()) {
        validate(&cfg)?;
    }
    Ok((cfg, warnings))
}

/// The settings the environment gives, over the file's (secrets a deployment keeps out of
/// files, or only a deployment knows): `PGCORRAL_TENANT_REGISTRY`, `PGCORRAL_API_JWT_SECRET`,
/// `PGCORRAL_NODE_ADDRESS`. Returns whether any was set.
pub fn from_environment(general: &mut General, var: impl Fn(&str) -> Option<String>) -> bool {
    let mut any = false;
    for (name, field) in [
        ("PGCORRAL_TENANT_REGISTRY", &mut general.tenant_registry),
        ("PGCORRAL_API_JWT_SECRET", &mut general.api_jwt_secret),
        ("PGCORRAL_NODE_ADDRESS", &mut general.node_address),
    ] {
        if let Some(v) = var(name).filter(|v| !v.is_empty()) {
            *field = v;
            any = true;
        }
    }
    any
}

/// [`load_file_warnings`] before the environment's settings.
fn read_file(path: &Path) -> Result<(Config, Vec<Warning>), ConfigError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("cannot read {shown}: {e}")))?;
    if is_pgbouncer(path, &text) {
        // Its errors start with `file:line:` (or the path) themselves.
        let (mut cfg, mut warnings) = from_pgbouncer_str(&shown.to_string(), &text)?;
        warnings.extend(auth_file(&mut cfg, &shown.to_string())?);
        return Ok((cfg, warnings));
    }
    if is_pgcat(path, &text) {
        return from_pgcat_str(&text).map_err(|e| {
            let lines: Vec<String> = e.0.lines().map(|l| format!("{shown}: {l}")).collect();
            ConfigError(lines.join("\n"))
        });
    }
    let mut cfg = parse(&text).map_err(|e| ConfigError(format!("{shown}: {e}")))?;
    // Before the checks: a deployment may give the secrets only in the environment.
    from_environment(&mut cfg.general, |k| std::env::var(k).ok());
    let found = problems(&cfg);
    if found.is_empty() {
        let warnings = auth_file(&mut cfg, &shown.to_string())?;
        Ok((cfg, warnings))
    } else {
        let lines: Vec<String> = found.iter().map(|p| format!("{shown}: {p}")).collect();
        Err(ConfigError(lines.join("\n")))
    }
}

/// Reads the configuration's `auth_file` into its users (see [`userlist::merge`]), its
/// messages prefixed by the configuration file's name.
fn auth_file(cfg: &mut Config, shown: &str) -> Result<Vec<Warning>, ConfigError> {
    let read = |p: &str| std::fs::read(p);
    userlist::merge(cfg, &read).map_err(|e| ConfigError(format!("{shown}: {e}")))
}

/// The configuration used without a file: listen on 127.0.0.1:6432, route any database name
/// to PGHOST (default 127.0.0.1) : PGPORT (default 5432) in transaction mode.
///
/// Authentication: with PGPASSWORD set, clients must log in with SCRAM as PGUSER (default
/// `postgres`) with that password, and the server login is the same user and password.
/// Without it, `trust`: any user name is accepted and passed to the server as the login
/// (PGUSER instead, when set) with no password, so a client gets exactly what the server's
/// pg_hba.conf grants a loopback connection. Empty variables count as unset.
///
/// Call as `embedded_default(|k| std::env::var(k).ok())`.
pub fn embedded_default(env: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let var = |k: &str| env(k).filter(|v| !v.is_empty());
    let host = var("PGHOST").unwrap_or_else(|| "127.0.0.1".into());
    if host.starts_with('@') {
        return Err(ConfigError(format!(
            "PGHOST: {host:?} is an abstract Unix socket, which pgcorral does not support; give \
             a host name, an IP address or a socket directory"
        )));
    }
    if host.contains(',') {
        return Err(ConfigError(format!(
            "PGHOST: {host:?} lists several hosts; give one, or write a config file"
        )));
    }
    let port = match var("PGPORT") {
        None => 5432,
        Some(p) => p
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|&n| n != 0)
            .ok_or_else(|| ConfigError(format!("PGPORT: {p:?} is not a port number (1..65535)")))?,
    };
    let password = var("PGPASSWORD");
    if let Some(pw) = &password {
        if pgwire::auth::md5::is_stored_hash(pw)
            || pgwire::auth::scram::ScramSecret::parse(pw).is_some()
        {
            return Err(ConfigError(
                "PGPASSWORD: has the form of an MD5 hash or a SCRAM verifier, which pgcorral would \
                 read as one; the embedded default needs the plaintext password (or write a \
                 config file)"
                    .into(),
            ));
        }
    }
    let mut cfg = Config {
        general: General {
            listen_addr: "127.0.0.1".into(),
            ..General::default()
        },
        users: BTreeMap::new(),
        databases: BTreeMap::new(),
        peers: BTreeMap::new(),
    };
    let server_user = match &password {
        Some(pw) => {
            let user = var("PGUSER").unwrap_or_else(|| "postgres".into());
            cfg.general.auth_type = AuthType::ScramSha256;
            let entry = User {
                password: Some(pw.clone()),
                ..User::default()
            };
            cfg.users.insert(user.clone(), entry);
            Some(user)
        }
        None => {
            cfg.general.auth_type = AuthType::Trust;
            var("PGUSER")
        }
    };
    let db = Database {
        host,
        port,
        user: server_user,
        password,
        ..Database::default()
    };
    cfg.databases.insert("*".into(), db);
    validate(&cfg).map_err(|e| ConfigError(format!("embedded default (no config file): {e}")))?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoolMode;

    /// The "Full example" of docs/configuration.md: the documented example is the one tested.
    fn example() -> &'static str {
        include_str!("../../../../docs/configuration.md")
            .split("## Full example")
            .nth(1)
            .and_then(|s| s.split("```toml\n").nth(1))
            .and_then(|s| s.split("```").next())
            .expect("docs/configuration.md has a full example")
    }

    #[test]
    fn example_parses_exactly() {
        let cfg = from_toml_str(example()).unwrap();
        let general = General {
            listen_addr: "127.0.0.1".into(),
            listen_port: 6432,
            pool_mode: PoolMode::Transaction,
            default_pool_size: 20,
            max_client_conn: 5000,
            auth_type: AuthType::ScramSha256,
            admin_users: vec!["admin".into()],
            workers: 0,
            server_reset_query: "DISCARD ALL".into(),
            server_connect_timeout: 5000,
            shutdown_timeout: 30000,
            max_packet_size: 1 << 30,
            log_level: "info".into(),
            ..General::default()
        };
        let user = |pw: &str| User {
            password: Some(pw.into()),
            ..User::default()
        };
        let bench = Database {
            dbname: Some("bench".into()),
            pool_size: Some(20),
            pool_mode: Some(PoolMode::Session),
            ..Database::default()
        };
        let expected = Config {
            general,
            users: BTreeMap::from([
                ("app".into(), user("app-secret")),
                ("admin".into(), user("admin-secret")),
            ]),
            databases: BTreeMap::from([("bench".into(), bench)]),
            peers: BTreeMap::new(),
        };
        assert_eq!(cfg, expected);
        // Everything not in the example is at its default.
        let defaults = General {
            admin_users: vec!["admin".into()],
            ..General::default()
        };
        assert_eq!(cfg.general, defaults);
    }

    #[test]
    fn unknown_keys_are_refused_with_key_and_line() {
        let cases = [
            ("[general]\nlisten_adr = \"*\"\n", "listen_adr", "line 2"),
            (
                "[users.app]\npassword = \"x\"\npasswd = \"x\"\n",
                "passwd",
                "line 3",
            ),
            (
                "[users.app]\npassword = \"x\"\n[databases.bench]\nhots = \"h\"\n",
                "hots",
                "line 4",
            ),
            ("[generall]\n", "generall", "line 1"),
        ];
        for (toml, key, line) in cases {
            let err = from_toml_str(toml).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains(line), "{toml}: {err}");
        }
    }

    #[test]
    fn load_file_prefixes_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgcorral.toml");
        std::fs::write(&path, example()).unwrap();
        assert_eq!(load_file(&path).unwrap(), from_toml_str(example()).unwrap());

        std::fs::write(
            &path,
            "[general]\ndefault_pool_size = 0\nmax_client_conn = 0\n",
        )
        .unwrap();
        let err = load_file(&path).unwrap_err().to_string();
        let shown = path.display().to_string();
        assert!(err.lines().all(|l| l.starts_with(&shown)), "{err}");
        assert!(err.contains(&format!(
            "{shown}: general.default_pool_size: must be at least 1"
        )));

        std::fs::write(&path, "[general]\nnope = 1\n").unwrap();
        let err = load_file(&path).unwrap_err().to_string();
        assert!(err.starts_with(&shown) && err.contains("nope"), "{err}");

        let err = load_file(&dir.path().join("missing.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("cannot read ") && err.contains("missing.toml"),
            "{err}"
        );
    }

    #[test]
    fn toml_auth_file_and_auth_query() {
        let dir = tempfile::tempdir().unwrap();
        let userlist = dir.path().join("userlist.txt");
        std::fs::write(&userlist, "\"app\" \"app pw\"\n\"dyn\" \"\"\n").unwrap();
        let path = dir.path().join("pgcorral.toml");
        let toml = format!(
            "[general]\nauth_type = \"md5\"\nauth_file = \"{}\"\nauth_user = \"pgb\"\n\
             auth_query_cache_lifetime = 5000\n[databases.app]\nauth_dbname = \"meta\"\n",
            userlist.display()
        );
        std::fs::write(&path, &toml).unwrap();
        // No [users]: the passwords come from the file and the lookup.
        let cfg = load_file(&path).unwrap();
        assert_eq!(cfg.users["app"].password.as_deref(), Some("app pw"));
        assert_eq!(cfg.users["dyn"].password, None);
        assert_eq!(cfg.general.auth_query, super::super::DEFAULT_AUTH_QUERY);
        assert_eq!(cfg.general.auth_query_cache_lifetime, 5000);
        assert_eq!(cfg.databases["app"].auth_dbname.as_deref(), Some("meta"));
        // The file is read again at each load (a reload).
        std::fs::write(&userlist, "\"app\" \"new pw\"\n").unwrap();
        let cfg = load_file(&path).unwrap();
        assert_eq!(cfg.users["app"].password.as_deref(), Some("new pw"));
        assert!(!cfg.users.contains_key("dyn"));
        // A file that cannot be read is an error naming the key; the console's name is not
        // an auth_dbname.
        std::fs::remove_file(&userlist).unwrap();
        let err = load_file(&path).unwrap_err().to_string();
        assert!(
            err.contains("general.auth_file: could not open auth_file"),
            "{err}"
        );
        let err = from_toml_str("[general]\nauth_user = \"a\"\nauth_dbname = \"pgbouncer\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("general.auth_dbname: cannot use the reserved"),
            "{err}"
        );
        // Without either, md5 still needs [users] with passwords.
        let err = from_toml_str("[general]\nauth_type = \"md5\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("needs at least one [users.NAME] entry"),
            "{err}"
        );
    }

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn embedded_default_without_password_is_trust_on_loopback() {
        let cfg = embedded_default(env(&[])).unwrap();
        assert_eq!(cfg.general.auth_type, AuthType::Trust);
        assert_eq!(cfg.general.listen_addr, "127.0.0.1");
        assert_eq!(cfg.general.pool_mode, PoolMode::Transaction);
        assert!(cfg.users.is_empty());
        let db = &cfg.databases["*"];
        assert_eq!((db.host.as_str(), db.port), ("127.0.0.1", 5432));
        assert_eq!((db.user.as_deref(), db.password.as_deref()), (None, None));
        assert_eq!(cfg.databases.len(), 1);

        let cfg = embedded_default(env(&[
            ("PGHOST", "db.local"),
            ("PGPORT", "5433"),
            ("PGUSER", "bob"),
        ]))
        .unwrap();
        let db = &cfg.databases["*"];
        assert_eq!((db.host.as_str(), db.port), ("db.local", 5433));
        assert_eq!(
            (db.user.as_deref(), db.password.as_deref()),
            (Some("bob"), None)
        );
        assert_eq!(cfg.general.auth_type, AuthType::Trust);

        // Empty variables count as unset.
        let cfg =
            embedded_default(env(&[("PGHOST", ""), ("PGPASSWORD", ""), ("PGUSER", "")])).unwrap();
        assert_eq!(cfg, embedded_default(env(&[])).unwrap());
    }

    #[test]
    fn embedded_default_with_password_requires_scram() {
        let cfg = embedded_default(env(&[("PGPASSWORD", "s3cret")])).unwrap();
        assert_eq!(cfg.general.auth_type, AuthType::ScramSha256);
        assert_eq!(cfg.general.listen_addr, "127.0.0.1");
        assert_eq!(cfg.users.len(), 1);
        assert_eq!(cfg.users["postgres"].password.as_deref(), Some("s3cret"));
        let db = &cfg.databases["*"];
        assert_eq!(
            (db.user.as_deref(), db.password.as_deref()),
            (Some("postgres"), Some("s3cret"))
        );

        let cfg = embedded_default(env(&[("PGPASSWORD", "pw"), ("PGUSER", "app")])).unwrap();
        assert_eq!(cfg.users.keys().collect::<Vec<_>>(), ["app"]);
        assert_eq!(cfg.databases["*"].user.as_deref(), Some("app"));

        let hash = pgwire::auth::md5::stored_hash("postgres", "pw");
        let err = embedded_default(env(&[("PGPASSWORD", &hash)]))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("PGPASSWORD:"), "{err}");
        // Not a hash's exact form: a plaintext password like any other.
        embedded_default(env(&[("PGPASSWORD", "md5abc")])).unwrap();
    }

    #[test]
    fn embedded_default_takes_a_socket_directory() {
        let c = embedded_default(env(&[("PGHOST", "/var/run/postgresql")])).unwrap();
        let db = c.databases.values().next().expect("the catch-all database");
        assert_eq!(db.host, "/var/run/postgresql");
    }

    #[test]
    fn embedded_default_refuses_bad_environment() {
        for (vars, key) in [
            (&[("PGPORT", "abc")][..], "PGPORT: \"abc\""),
            (&[("PGPORT", "0")][..], "PGPORT:"),
            (&[("PGPORT", "65536")][..], "PGPORT:"),
            (&[("PGHOST", "@abstract")][..], "PGHOST:"),
            (&[("PGHOST", "a,b")][..], "PGHOST:"),
        ] {
            let err = embedded_default(env(vars)).unwrap_err().to_string();
            assert!(err.starts_with(key), "{vars:?}: {err}");
        }
    }

    #[test]
    fn peers_are_read_by_their_ids() {
        let cfg = from_toml_str(
            "[general]\nauth_type = \"trust\"\npeer_id = 1\n\
             [peers.2]\nhost = \"/run/pgcorral-2\"\nport = 6433\n\
             [peers.3]\nhost = \"10.0.0.3\"\n",
        )
        .unwrap();
        assert_eq!(cfg.general.peer_id, 1);
        assert_eq!(cfg.peers["2"].host, "/run/pgcorral-2");
        assert_eq!(cfg.peers["2"].port, 6433);
        assert_eq!(cfg.peers["3"].port, 6432);
        assert!(
            from_toml_str("[general]\nauth_type = \"trust\"\n[peers.0]\nhost = \"a\"\n").is_err()
        );
        assert!(
            from_toml_str("[general]\nauth_type = \"trust\"\n[peers.x]\nhost = \"a\"\n").is_err()
        );
    }

    #[test]
    fn client_caps_of_a_database_and_a_user_win_over_the_general_ones() {
        let cfg = from_toml_str(
            "[general]\nauth_type = \"trust\"\nmax_db_client_connections = 5\nmax_user_client_connections = 7\n\
             [databases.a]\nmax_db_client_connections = 2\n\
             [databases.b]\n\
             [users.alice]\nmax_user_client_connections = 3\n\
             [users.bob]\npool_size = 4\n",
        )
        .unwrap();
        assert_eq!(cfg.db_client_cap("a"), 2);
        assert_eq!(cfg.db_client_cap("b"), 5);
        // No "*" template: an unknown name has the general cap (it is refused anyway).
        assert_eq!(cfg.db_client_cap("c"), 5);
        assert_eq!(cfg.user_client_cap("alice"), 3);
        assert_eq!(cfg.user_client_cap("bob"), 7);
        assert_eq!(cfg.user_client_cap("carol"), 7);
        let wild = from_toml_str(
            "[general]\nauth_type = \"trust\"\n[databases.\"*\"]\nmax_db_client_connections = 1\n",
        )
        .unwrap();
        assert_eq!(wild.db_client_cap("anything"), 1);
        assert_eq!(wild.user_client_cap("anyone"), 0);
    }

    #[test]
    fn the_environment_gives_the_fleet_s_secrets_over_the_file() {
        let mut g = General {
            api_jwt_secret: "from the file".into(),
            ..General::default()
        };
        let env = |k: &str| match k {
            "PGCORRAL_TENANT_REGISTRY" => Some("host=registry".to_string()),
            "PGCORRAL_API_JWT_SECRET" => Some("from the environment".to_string()),
            "PGCORRAL_NODE_ADDRESS" => Some(String::new()),
            _ => None,
        };
        assert!(from_environment(&mut g, env));
        assert_eq!(g.tenant_registry, "host=registry");
        assert_eq!(g.api_jwt_secret, "from the environment");
        // Empty is not set.
        assert_eq!(g.node_address, "");
        assert!(!from_environment(&mut General::default(), |_| None));
    }
}
