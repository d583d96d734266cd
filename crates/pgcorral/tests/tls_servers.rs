//! TLS from pgcorral to PostgreSQL: server_tls_sslmode against servers with and without
//! `ssl = on`, CA and host name checks, client certificates to `hostssl ... cert`, SCRAM over
//! TLS. The `support_` tests first check the test TLS support (support/tls.rs) against
//! PostgreSQL itself.

mod support;

use std::path::Path;

use support::tls::*;
use support::tls_pooler::*;
use support::*;
use tokio_postgres::config::ChannelBinding;

// ---- helpers --------------------------------------------------------------------------------

/// server_tls_* lines: `mode`, with `ca` as the CA when given.
fn server_tls(mode: &str, ca: Option<&Path>) -> String {
    // A refused handshake is retried while clients wait (as PgBouncer), up to
    // server_unavailable_wait: off here, so a refusal reaches the client at once.
    let mut s = format!("server_tls_sslmode = \"{mode}\"\nserver_unavailable_wait = 0\n");
    if let Some(ca) = ca {
        s += &format!("server_tls_ca_file = \"{}\"\n", ca.display());
    }
    s
}

// ---- the support, against PostgreSQL itself -------------------------------------------------

/// psql verify-full against an ssl=on PostgreSQL with the test CA works (127.0.0.1 is in the
/// certificate's SANs); with the unrelated CA it fails. SSLRequest is answered 'S' by an ssl=on
/// server and 'N' by a plain one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn support_psql_verify_full_against_postgres() {
    let certs = Certs::new();
    let pg = postgres_tls(&certs, "host all all 127.0.0.1/32 trust");
    let out = psql_tls_run(
        pg.port,
        "postgres",
        "postgres",
        &psql_opts(&certs, "verify-full"),
        SSL_OF_BACKEND,
    )
    .await;
    assert_psql_ok("verify-full", &out, "t");
    let other = PsqlTls {
        rootcert: Some(&certs.other_ca.cert_file),
        ..psql_opts(&certs, "verify-full")
    };
    let out = psql_tls_run(pg.port, "postgres", "postgres", &other, "SELECT 1").await;
    assert_psql_fails("wrong CA", &out, "certificate verify failed");
    assert_eq!(ssl_request(pg.port).await.1, b'S');
    let plain = Postgres::start();
    assert_eq!(ssl_request(plain.port).await.1, b'N');
}

/// PostgreSQL's `hostssl ... cert` logins with the test client certificates: the right CN logs
/// in; another CN, no certificate, or one from the unrelated CA is refused (with the messages
/// pgcorral's cert auth is to copy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn support_postgres_cert_auth_with_test_certificates() {
    let certs = Certs::new();
    let pg = postgres_tls(&certs, "hostssl all all 127.0.0.1/32 cert");
    pg.sql("postgres", "CREATE ROLE app LOGIN; CREATE ROLE bob LOGIN");
    let app = certs.client("app");
    let opts = PsqlTls {
        cert: Some(&app),
        ..psql_opts(&certs, "verify-full")
    };
    let out = psql_tls_run(pg.port, "app", "postgres", &opts, "SELECT current_user").await;
    assert_psql_ok("cert CN=app", &out, "app");
    let out = psql_tls_run(pg.port, "bob", "postgres", &opts, "SELECT 1").await;
    assert_psql_fails(
        "CN app as bob",
        &out,
        "certificate authentication failed for user \"bob\"",
    );
    let out = psql_tls_run(
        pg.port,
        "app",
        "postgres",
        &psql_opts(&certs, "verify-full"),
        "SELECT 1",
    )
    .await;
    assert_psql_fails(
        "no certificate",
        &out,
        "connection requires a valid client certificate",
    );
    let stranger = certs.other_client("app");
    let opts = PsqlTls {
        cert: Some(&stranger),
        ..psql_opts(&certs, "verify-full")
    };
    let out = psql_tls_run(pg.port, "app", "postgres", &opts, "SELECT 1").await;
    assert_psql_fails("client cert of another CA", &out, "alert");

    // The same through tokio-postgres over rustls.
    let c = connect_tls(
        pg.port,
        "app",
        None,
        "postgres",
        tls_config(&certs.ca, Some(&app)),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(
        scalar(&c, "SELECT current_user").await.unwrap().unwrap(),
        "app"
    );
    let e = connect_tls(
        pg.port,
        "bob",
        None,
        "postgres",
        tls_config(&certs.ca, Some(&app)),
        |_| {},
    )
    .await
    .expect_err("CN app as bob refused");
    assert_eq!(db_error(&e).1, "28000", "{e:?}");
}

/// tokio-postgres over rustls with channel binding required logs in to PostgreSQL's SCRAM over
/// TLS (so the test CA's ECDSA certificates work for tls-server-end-point); the raw TLS client
/// sees the server certificate and SCRAM-SHA-256-PLUS offered, and logs in with trust.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn support_rustls_clients_against_postgres() {
    let certs = Certs::new();
    let pg = postgres_tls(
        &certs,
        "hostssl all app 127.0.0.1/32 scram-sha-256\nhost all all 127.0.0.1/32 trust",
    );
    pg.create_user("app", "app-secret");
    let c = connect_tls(
        pg.port,
        "app",
        Some("app-secret"),
        "postgres",
        tls_config(&certs.ca, None),
        |c| {
            c.channel_binding(ChannelBinding::Require);
        },
    )
    .await
    .unwrap();
    assert_eq!(scalar(&c, SSL_OF_BACKEND).await.unwrap().unwrap(), "t");

    let mut raw = tls_connect(
        pg.port,
        tls_config(&certs.ca, None),
        Negotiation::SslRequest,
    )
    .await
    .unwrap();
    let info = raw.tls_info();
    assert_eq!(info.peer, certs.server.der.to_vec());
    assert_eq!(subject_cn(&info.peer), "localhost");
    assert!(info.version.starts_with("TLSv1_"), "{info:?}");
    match raw.login("app", "postgres").await {
        Err(LoginError::Auth(10, rest)) => assert!(
            sasl_mechanisms(&rest).contains(&"SCRAM-SHA-256-PLUS".to_string()),
            "{:?}",
            sasl_mechanisms(&rest)
        ),
        other => panic!("expected SASL, got {other:?}"),
    }
    let mut raw = tls_connect(
        pg.port,
        tls_config(&certs.ca, None),
        Negotiation::SslRequest,
    )
    .await
    .unwrap();
    raw.login("postgres", "postgres").await.unwrap();
    assert_eq!(raw.scalar(SSL_OF_BACKEND).await.unwrap().unwrap(), "t");
    // Trusting the unrelated CA, the handshake fails.
    assert!(tls_connect(
        pg.port,
        tls_config(&certs.other_ca, None),
        Negotiation::SslRequest
    )
    .await
    .is_err());
}

// ---- pgcorral to PostgreSQL -------------------------------------------------------------------

/// Against an ssl=on PostgreSQL, server_tls_sslmode prefer (the default), allow, require,
/// verify-ca and verify-full (with the test CA) make TLS server connections (every mode but
/// disable sends SSLRequest); disable does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_tls_modes_use_tls_to_an_ssl_postgres() {
    let certs = Certs::new();
    let pg = postgres_tls(&certs, "host all all 127.0.0.1/32 trust");
    let ca = Some(certs.ca.cert_file.as_path());
    for (lines, expect) in [
        (String::new(), "t"),
        (server_tls("prefer", None), "t"),
        (server_tls("allow", None), "t"),
        (server_tls("require", None), "t"),
        (server_tls("verify-ca", ca), "t"),
        (server_tls("verify-full", ca), "t"),
        (server_tls("disable", None), "f"),
    ] {
        let general = format!("auth_type = \"trust\"\n{lines}");
        let p = Pooler::start(&cfg(&pg, &general, "")).await;
        assert_eq!(
            plain_query(p.port(), "postgres", SSL_OF_BACKEND).await,
            Ok(Some(expect.into())),
            "{lines:?}"
        );
    }
}

/// Against a PostgreSQL without ssl, prefer (the default) and allow fall back to plaintext.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_tls_prefer_falls_back_to_plaintext_without_ssl() {
    let pg = Postgres::start();
    for lines in [
        "",
        "server_tls_sslmode = \"prefer\"",
        "server_tls_sslmode = \"allow\"",
    ] {
        let general = format!("auth_type = \"trust\"\n{lines}");
        let p = Pooler::start(&cfg(&pg, &general, "")).await;
        assert_eq!(
            plain_query(p.port(), "postgres", SSL_OF_BACKEND).await,
            Ok(Some("f".into())),
            "{lines:?}"
        );
    }
}

/// require, verify-ca and verify-full against a PostgreSQL without ssl fail the client's
/// query with SQLSTATE class 08, mentioning SSL/TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_tls_require_against_postgres_without_ssl_fails_with_class_08() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let ca = Some(certs.ca.cert_file.as_path());
    for lines in [
        server_tls("require", None),
        server_tls("verify-ca", ca),
        server_tls("verify-full", ca),
    ] {
        let general = format!("auth_type = \"trust\"\n{lines}");
        let p = Pooler::start(&cfg(&pg, &general, "")).await;
        let (code, msg, e) = plain_query(p.port(), "postgres", "SELECT 1")
            .await
            .expect_err("served without TLS");
        assert!(code.starts_with("08"), "{lines:?}: {e}");
        let m = msg.to_ascii_uppercase();
        assert!(m.contains("SSL") || m.contains("TLS"), "{lines:?}: {msg}");
    }
}

/// verify-ca and verify-full with a CA that did not sign PostgreSQL's certificate fail with
/// class 08, mentioning the certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_tls_verify_with_another_ca_fails() {
    let certs = Certs::new();
    let pg = postgres_tls(&certs, "host all all 127.0.0.1/32 trust");
    let other = Some(certs.other_ca.cert_file.as_path());
    for lines in [
        server_tls("verify-ca", other),
        server_tls("verify-full", other),
    ] {
        let general = format!("auth_type = \"trust\"\n{lines}");
        let p = Pooler::start(&cfg(&pg, &general, "")).await;
        let (code, msg, e) = plain_query(p.port(), "postgres", "SELECT 1")
            .await
            .expect_err("served by an unverified server");
        assert!(code.starts_with("08"), "{lines:?}: {e}");
        assert!(
            msg.to_lowercase().contains("certificate"),
            "{lines:?}: {code} {msg}"
        );
    }
}

/// A server whose certificate is refused is tried again while the client waits, as PgBouncer
/// does (the certificate may be replaced, or the configuration reloaded), up to
/// server_unavailable_wait; then the client gets the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_server_certificate_is_waited_for_then_reported() {
    let certs = Certs::new();
    let pg = postgres_tls(&certs, "host all all 127.0.0.1/32 trust");
    let other = Some(certs.other_ca.cert_file.as_path());
    let lines = server_tls("verify-full", other).replace(
        "server_unavailable_wait = 0",
        "server_unavailable_wait = 1500",
    );
    let general = format!("auth_type = \"trust\"\n{lines}");
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let start = std::time::Instant::now();
    let (code, msg, e) = plain_query(p.port(), "postgres", "SELECT 1")
        .await
        .expect_err("served by an unverified server");
    let took = start.elapsed();
    assert!(code.starts_with("08"), "{e}");
    assert!(msg.contains("certificate verify failed"), "{msg}");
    assert!(
        took >= std::time::Duration::from_millis(1400),
        "refused after {took:?}, without waiting"
    );
}

/// verify-full checks the host name: PostgreSQL's certificate (from the right CA) names only
/// db.example, so verify-ca connects and verify-full fails mentioning the certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_tls_verify_full_checks_the_host_name() {
    let certs = Certs::new();
    let elsewhere = certs.ca.server("db-example", &["db.example"]);
    let pg = postgres_tls_with(
        &elsewhere,
        &certs.ca.cert_file,
        "host all all 127.0.0.1/32 trust",
        PgOptions::default(),
    );
    let ca = Some(certs.ca.cert_file.as_path());
    let general = format!("auth_type = \"trust\"\n{}", server_tls("verify-ca", ca));
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    assert_eq!(
        plain_query(p.port(), "postgres", SSL_OF_BACKEND).await,
        Ok(Some("t".into()))
    );
    let general = format!("auth_type = \"trust\"\n{}", server_tls("verify-full", ca));
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let (code, msg, e) = plain_query(p.port(), "postgres", "SELECT 1")
        .await
        .expect_err("verify-full accepted a certificate for db.example at 127.0.0.1");
    assert!(code.starts_with("08"), "{e}");
    assert!(msg.to_lowercase().contains("certificate"), "{msg}");
}

/// server_tls_cert_file/key_file: pgcorral presents a client certificate, so PostgreSQL's
/// `hostssl ... cert` logins work (PostgreSQL sees CN=app); without it PostgreSQL refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_tls_client_certificate_logs_in_to_hostssl_cert() {
    let certs = Certs::new();
    let pg = postgres_tls(&certs, "hostssl all app 127.0.0.1/32 cert");
    pg.sql("postgres", "CREATE ROLE app LOGIN");
    let app = certs.client("app");
    let verify = server_tls("verify-full", Some(&certs.ca.cert_file));
    let general = format!(
        "auth_type = \"trust\"\n{verify}server_tls_cert_file = \"{}\"\n\
         server_tls_key_file = \"{}\"\n",
        app.cert.display(),
        app.key.display()
    );
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    assert_eq!(
        plain_query(p.port(), "app", "SELECT current_user").await,
        Ok(Some("app".into()))
    );
    assert_eq!(
        plain_query(
            p.port(),
            "app",
            "SELECT client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        )
        .await,
        Ok(Some("/CN=app".into())),
        "PostgreSQL sees pgcorral's client certificate"
    );
    let general = format!("auth_type = \"trust\"\n{verify}");
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let (code, msg, e) = plain_query(p.port(), "app", "SELECT 1")
        .await
        .expect_err("logged in without a client certificate");
    assert!(!code.is_empty(), "{e}");
    assert!(msg.contains("certificate"), "{msg}");
}

/// SCRAM logins to PostgreSQL over server TLS work (PostgreSQL then offers
/// SCRAM-SHA-256-PLUS, which pgcorral must either use or decline properly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_logins_to_postgres_work_over_server_tls() {
    let certs = Certs::new();
    let pg = postgres_tls(&certs, "hostssl all app 127.0.0.1/32 scram-sha-256");
    pg.create_user("app", "app-secret");
    let general = format!(
        "auth_type = \"scram-sha-256\"\n{}",
        server_tls("verify-full", Some(&certs.ca.cert_file))
    );
    let p = Pooler::start(&cfg(
        &pg,
        &general,
        "[users.app]\npassword = \"app-secret\"",
    ))
    .await;
    let c = connect(p.port(), "app", Some("app-secret"), "postgres")
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(scalar(&c, SSL_OF_BACKEND).await.unwrap().unwrap(), "t");
}

/// verify-ca and verify-full without server_tls_ca_file check PostgreSQL's certificate against
/// the system's CAs (as PgBouncer): pgcorral starts, and a server whose certificate a private CA
/// signed is refused with "certificate verify failed", never used unchecked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_tls_verify_without_a_ca_file_uses_the_system_cas() {
    let certs = Certs::new();
    let pg = postgres_tls(&certs, "host all all 127.0.0.1/32 trust");
    for mode in ["verify-ca", "verify-full"] {
        let general = format!("auth_type = \"trust\"\n{}", server_tls(mode, None));
        let toml = cfg(&pg, &general, "");
        let config = pgcorral::config::from_toml_str(&toml).unwrap();
        let bound = pgcorral::Pooler::bind(config).await;
        if let Err(e) = &bound {
            // A machine without a system CA bundle: refused at start, naming the setting.
            assert!(e.to_string().contains("server_tls_ca_file"), "{e}");
            continue;
        }
        drop(bound);
        let p = Pooler::start(&toml).await;
        let (code, msg, e) = plain_query(p.port(), "postgres", "SELECT 1")
            .await
            .expect_err("served by a server no system CA vouches for");
        assert!(code.starts_with("08"), "{mode}: {e}");
        assert!(msg.contains("certificate verify failed"), "{mode}: {msg}");
    }
}
