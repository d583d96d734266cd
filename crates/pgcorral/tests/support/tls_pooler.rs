//! pgcorral set up for the TLS tests (tls_clients.rs, tls_servers.rs, tls_reload.rs): configs
//! with client TLS settings, psql's TLS options, a plaintext query with its error as SQLSTATE and
//! message, and SHOW on the admin console.

use super::tls::*;
use super::*;

/// Makes `postgres` an admin console user (add to [general]).
pub const ADMIN: &str = "admin_users = [\"postgres\"]\n";

/// A pgcorral config for database `postgres` on `pg`: `general` lines (must include auth_type)
/// in [general], `users` tables.
pub fn cfg(pg: &Postgres, general: &str, users: &str) -> String {
    format!(
        "[general]\nlisten_port = 0\nserver_connect_timeout = 3000\n\
         {general}\n\n{users}\n\n[databases.postgres]\nhost = \"127.0.0.1\"\nport = {port}\n",
        port = pg.port
    )
}

/// client_tls_* lines: `mode` with `certs.server` and `certs.ca` as the client CA.
pub fn client_tls(certs: &Certs, mode: &str) -> String {
    format!(
        "client_tls_sslmode = \"{mode}\"\nclient_tls_cert_file = \"{}\"\n\
         client_tls_key_file = \"{}\"\nclient_tls_ca_file = \"{}\"\n",
        certs.server.cert.display(),
        certs.server.key.display(),
        certs.ca.cert_file.display()
    )
}

/// psql settings: `sslmode` trusting `certs.ca`.
pub fn psql_opts<'a>(certs: &'a Certs, sslmode: &'a str) -> PsqlTls<'a> {
    PsqlTls {
        sslmode,
        rootcert: Some(&certs.ca.cert_file),
        ..PsqlTls::default()
    }
}

/// The SQLSTATE and message of a tokio-postgres error ("" when it carries none).
pub fn db_error(e: &tokio_postgres::Error) -> (String, String, String) {
    match e.as_db_error() {
        Some(d) => (
            d.severity().to_string(),
            d.code().code().to_string(),
            d.message().to_string(),
        ),
        None => Default::default(),
    }
}

/// Logs in to `port` (plaintext, trust) and runs `sql`: its value, or the first error on the
/// way (login or query) as (SQLSTATE, message, Display).
pub async fn plain_query(
    port: u16,
    user: &str,
    sql: &str,
) -> Result<Option<String>, (String, String, String)> {
    let fail = |e: tokio_postgres::Error| {
        let (_, code, msg) = db_error(&e);
        (code, msg, format!("{e:?}"))
    };
    let c = connect(port, user, None, "postgres").await.map_err(fail)?;
    scalar(&c, sql).await.map_err(fail)
}

/// Rows of an admin console SHOW as (column name → value) maps.
pub async fn show(
    c: &tokio_postgres::Client,
    what: &str,
) -> Vec<std::collections::BTreeMap<String, String>> {
    c.simple_query(&format!("SHOW {what}"))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                r.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, col)| {
                        (
                            col.name().to_string(),
                            r.get(i).unwrap_or_default().to_string(),
                        )
                    })
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}
