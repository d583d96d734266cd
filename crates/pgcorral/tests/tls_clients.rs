//! TLS from clients to pgcorral, against a real PostgreSQL: SSLRequest and PostgreSQL 17's
//! direct TLS with ALPN, client_tls_sslmode (disable ... verify-full), client certificates and
//! `auth_type = "cert"`, SCRAM-SHA-256-PLUS channel binding, SHOW CLIENTS' tls column, protocol
//! and cipher limits, and settings that cannot work refused at startup.

mod support;

use support::tls::*;
use support::tls_pooler::*;
use support::*;
use tokio_postgres::config::{ChannelBinding, SslNegotiation};
use tokio_rustls::rustls::crypto::ring::cipher_suite;
use tokio_rustls::rustls::version::{TLS12, TLS13};

// ---- clients to pgcorral ----------------------------------------------------------------------

/// The whole certificate path: psql with sslmode=verify-full checks pgcorral's certificate
/// (127.0.0.1 is in its SANs) and logs in with `auth_type = "cert"` as the certificate's CN;
/// tokio-postgres over rustls does the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_verify_full_with_cert_auth_logs_in_as_the_certificate_cn() {
    let certs = Certs::new();
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE app LOGIN");
    let general = format!(
        "auth_type = \"cert\"\n{}",
        client_tls(&certs, "verify-full")
    );
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let app = certs.client("app");
    let opts = PsqlTls {
        cert: Some(&app),
        ..psql_opts(&certs, "verify-full")
    };
    let out = psql_tls_run(p.port(), "app", "postgres", &opts, "SELECT current_user").await;
    assert_psql_ok("psql verify-full, cert CN=app", &out, "app");
    let c = connect_tls(
        p.port(),
        "app",
        None,
        "postgres",
        tls_config(&certs.ca, Some(&app)),
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("tokio-postgres-rustls with cert CN=app: {e:?}"));
    assert_eq!(
        scalar(&c, "SELECT current_user").await.unwrap().unwrap(),
        "app"
    );
}

/// pgcorral presents the configured certificate; a client trusting another CA refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_verify_full_with_another_ca_refuses_pgcorral() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let general = format!("auth_type = \"trust\"\n{}", client_tls(&certs, "require"));
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    assert_eq!(
        peer_certificate(p.port(), &certs.ca).await.unwrap(),
        certs.server.der.to_vec(),
        "pgcorral presents client_tls_cert_file"
    );
    let other = PsqlTls {
        rootcert: Some(&certs.other_ca.cert_file),
        ..psql_opts(&certs, "verify-full")
    };
    let out = psql_tls_run(p.port(), "postgres", "postgres", &other, "SELECT 1").await;
    assert_psql_fails("verify-full, another CA", &out, "certificate verify failed");
    let out = psql_tls_run(
        p.port(),
        "postgres",
        "postgres",
        &psql_opts(&certs, "verify-full"),
        "SELECT 1",
    )
    .await;
    assert_psql_ok("verify-full, the right CA", &out, "1");
}

/// With require, verify-ca or verify-full, a plaintext StartupMessage is answered with FATAL
/// 28000 "SSL required" before any authentication request; SSLRequest is answered 'S' and a TLS
/// client is served (with require, without a client certificate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_logins_get_ssl_required_when_tls_is_required() {
    let certs = Certs::new();
    let pg = Postgres::start();
    for mode in ["require", "verify-ca", "verify-full"] {
        let general = format!("auth_type = \"trust\"\n{}", client_tls(&certs, mode));
        let p = Pooler::start(&cfg(&pg, &general, "")).await;
        let e = connect(p.port(), "postgres", None, "postgres")
            .await
            .err()
            .unwrap_or_else(|| panic!("{mode}: a plaintext login succeeded"));
        assert_eq!(
            db_error(&e),
            ("FATAL".into(), "28000".into(), "SSL required".into()),
            "{mode}: {e:?}"
        );
        let mut raw = plain_connect(p.port()).await;
        raw.startup("postgres", "postgres").await.unwrap();
        let (tag, body) = raw.recv().await.unwrap().expect("an answer");
        assert_eq!(
            tag, b'E',
            "{mode}: first answer is an ErrorResponse, not auth"
        );
        assert_eq!(PgError::parse(&body).code, "28000");
        let out = psql_tls_run(
            p.port(),
            "postgres",
            "postgres",
            &psql_opts(&certs, "disable"),
            "SELECT 1",
        )
        .await;
        assert_psql_fails(
            &format!("{mode}: psql sslmode=disable"),
            &out,
            "SSL required",
        );
        assert_eq!(ssl_request(p.port()).await.1, b'S', "{mode}");
        if mode == "require" {
            let c = connect_tls(
                p.port(),
                "postgres",
                None,
                "postgres",
                tls_config(&certs.ca, None),
                |_| {},
            )
            .await
            .unwrap_or_else(|e| panic!("TLS client with require: {e:?}"));
            assert_eq!(scalar(&c, "SELECT 1").await.unwrap().unwrap(), "1");
        }
    }
}

/// With allow and prefer, TLS and plaintext clients are both served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_and_prefer_serve_tls_and_plaintext_clients() {
    let certs = Certs::new();
    let pg = Postgres::start();
    for mode in ["allow", "prefer"] {
        let general = format!("auth_type = \"trust\"\n{}", client_tls(&certs, mode));
        let p = Pooler::start(&cfg(&pg, &general, "")).await;
        assert_eq!(ssl_request(p.port()).await.1, b'S', "{mode}");
        assert_eq!(
            plain_query(p.port(), "postgres", "SELECT 1").await,
            Ok(Some("1".into())),
            "{mode}: plaintext"
        );
        let c = connect_tls(
            p.port(),
            "postgres",
            None,
            "postgres",
            tls_config(&certs.ca, None),
            |_| {},
        )
        .await
        .unwrap_or_else(|e| panic!("{mode}: TLS client: {e:?}"));
        assert_eq!(scalar(&c, "SELECT 1").await.unwrap().unwrap(), "1");
        let out = psql_tls_run(
            p.port(),
            "postgres",
            "postgres",
            &psql_opts(&certs, "verify-full"),
            "SELECT 1",
        )
        .await;
        assert_psql_ok(&format!("{mode}: psql verify-full"), &out, "1");
    }
}

/// client_tls_sslmode = "disable" (and the default) answers SSLRequest with 'N' and serves the
/// plaintext login that follows on the same connection; TLS clients that insist fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_disable_answers_n_and_serves_plaintext() {
    let certs = Certs::new();
    let pg = Postgres::start();
    for general in [
        "auth_type = \"trust\"\nclient_tls_sslmode = \"disable\"".to_string(),
        "auth_type = \"trust\"".to_string(),
    ] {
        let p = Pooler::start(&cfg(&pg, &general, "")).await;
        let (tcp, answer) = ssl_request(p.port()).await;
        assert_eq!(answer, b'N', "{general}");
        let mut raw = PgStream::new(tcp);
        raw.login("postgres", "postgres")
            .await
            .unwrap_or_else(|e| panic!("{general}: plaintext after 'N': {e:?}"));
        assert_eq!(raw.scalar("SELECT 1").await.unwrap().unwrap(), "1");
        let out = psql_tls_run(
            p.port(),
            "postgres",
            "postgres",
            &psql_opts(&certs, "require"),
            "SELECT 1",
        )
        .await;
        assert_psql_fails(&general, &out, "server does not support SSL");
        let direct = tls_connect(
            p.port(),
            tls_config_with(&certs.ca, None, &[], None, true),
            Negotiation::Direct,
        )
        .await;
        let served = match direct {
            Ok(mut s) => s.login("postgres", "postgres").await.is_ok(),
            Err(_) => false,
        };
        assert!(!served, "{general}: direct TLS served");
        assert_eq!(
            plain_query(p.port(), "postgres", "SELECT 2").await,
            Ok(Some("2".into()))
        );
    }
}

/// With verify-ca, a client without a certificate or with one from another CA fails in the TLS
/// handshake (an alert, no ErrorResponse), and pgcorral goes on serving a good client that was
/// connected before and new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_ca_refuses_bad_client_certificates_in_the_handshake_and_serves_others() {
    let certs = Certs::new();
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE app LOGIN");
    let general = format!("auth_type = \"trust\"\n{}", client_tls(&certs, "verify-ca"));
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let app = certs.client("app");
    let stranger = certs.other_client("app");
    let good = connect_tls(
        p.port(),
        "app",
        None,
        "postgres",
        tls_config(&certs.ca, Some(&app)),
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("good client: {e:?}"));
    assert_eq!(scalar(&good, "SELECT 1").await.unwrap().unwrap(), "1");

    for (what, cert) in [("another CA", Some(&stranger)), ("no certificate", None)] {
        let e = connect_tls(
            p.port(),
            "app",
            None,
            "postgres",
            tls_config(&certs.ca, cert),
            |_| {},
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("{what}: logged in"));
        assert_eq!(db_error(&e).1, "", "{what}: refused by TLS, not SQL: {e:?}");
        // With TLS 1.2 the client sees the refusal in the handshake itself.
        let tls12 = tls_config_with(&certs.ca, cert, &[&TLS12], None, false);
        assert!(
            tls_connect(p.port(), tls12, Negotiation::SslRequest)
                .await
                .is_err(),
            "{what}: TLS 1.2 handshake succeeded"
        );
        // With TLS 1.3 the alert arrives after the client's Finished: the login reads it.
        let tls13 = tls_config_with(&certs.ca, cert, &[&TLS13], None, false);
        if let Ok(mut s) = tls_connect(p.port(), tls13, Negotiation::SslRequest).await {
            match s.login("app", "postgres").await {
                Err(LoginError::Closed(_)) => {}
                other => panic!("{what}: TLS 1.3 login gave {other:?}"),
            }
        }
        let opts = PsqlTls {
            cert,
            ..psql_opts(&certs, "verify-full")
        };
        let out = psql_tls_run(p.port(), "app", "postgres", &opts, "SELECT 1").await;
        assert_psql_fails(&format!("{what}: psql"), &out, "alert");
    }
    assert_eq!(scalar(&good, "SELECT 2").await.unwrap().unwrap(), "2");
    let opts = PsqlTls {
        cert: Some(&app),
        ..psql_opts(&certs, "verify-full")
    };
    let out = psql_tls_run(p.port(), "app", "postgres", &opts, "SELECT current_user").await;
    assert_psql_ok("a new good client", &out, "app");
}

/// auth_type cert: a certificate whose CN is another user is refused with FATAL 28000
/// `certificate authentication failed for user "bob"`; its own user logs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_auth_refuses_a_certificate_of_another_user() {
    let certs = Certs::new();
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN");
    let general = format!("auth_type = \"cert\"\n{}", client_tls(&certs, "require"));
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let alice = certs.client("alice");
    let e = connect_tls(
        p.port(),
        "bob",
        None,
        "postgres",
        tls_config(&certs.ca, Some(&alice)),
        |_| {},
    )
    .await
    .expect_err("alice's certificate logged in as bob");
    assert_eq!(
        db_error(&e),
        (
            "FATAL".into(),
            "28000".into(),
            "certificate authentication failed for user \"bob\"".into()
        ),
        "{e:?}"
    );
    let opts = PsqlTls {
        cert: Some(&alice),
        ..psql_opts(&certs, "verify-full")
    };
    let out = psql_tls_run(p.port(), "bob", "postgres", &opts, "SELECT 1").await;
    assert_psql_fails(
        "psql as bob",
        &out,
        "certificate authentication failed for user \"bob\"",
    );
    let out = psql_tls_run(p.port(), "alice", "postgres", &opts, "SELECT current_user").await;
    assert_psql_ok("psql as alice", &out, "alice");
}

/// auth_type cert: a TLS client without a certificate, or a plaintext client, is refused with
/// FATAL 28000 "connection requires a valid client certificate".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cert_auth_without_a_client_certificate_is_refused() {
    let certs = Certs::new();
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE app LOGIN");
    let general = format!("auth_type = \"cert\"\n{}", client_tls(&certs, "prefer"));
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let expected = (
        "FATAL".to_string(),
        "28000".to_string(),
        "connection requires a valid client certificate".to_string(),
    );
    let e = connect_tls(
        p.port(),
        "app",
        None,
        "postgres",
        tls_config(&certs.ca, None),
        |_| {},
    )
    .await
    .expect_err("TLS without a certificate logged in");
    assert_eq!(db_error(&e), expected, "TLS: {e:?}");
    let e = connect(p.port(), "app", None, "postgres")
        .await
        .expect_err("plaintext logged in");
    assert_eq!(db_error(&e), expected, "plaintext: {e:?}");
    let out = psql_tls_run(
        p.port(),
        "app",
        "postgres",
        &psql_opts(&certs, "verify-full"),
        "SELECT 1",
    )
    .await;
    assert_psql_fails(
        "psql without a certificate",
        &out,
        "connection requires a valid client certificate",
    );
}

/// Password logins over TLS offer SCRAM-SHA-256-PLUS (plaintext ones do not): psql with
/// channel_binding=require logs in over TLS and fails over plaintext.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_over_tls_offers_channel_binding_and_psql_can_require_it() {
    let certs = Certs::new();
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE app LOGIN");
    let general = format!(
        "auth_type = \"scram-sha-256\"\n{}",
        client_tls(&certs, "prefer")
    );
    let users = "[users.app]\npassword = \"app-secret\"";
    let p = Pooler::start(&cfg(&pg, &general, users)).await;

    let mut tls = tls_connect(
        p.port(),
        tls_config(&certs.ca, None),
        Negotiation::SslRequest,
    )
    .await
    .unwrap();
    match tls.login("app", "postgres").await {
        Err(LoginError::Auth(10, rest)) => {
            let m = sasl_mechanisms(&rest);
            assert!(m.contains(&"SCRAM-SHA-256-PLUS".to_string()), "TLS: {m:?}");
            assert!(m.contains(&"SCRAM-SHA-256".to_string()), "TLS: {m:?}");
        }
        other => panic!("TLS: expected AuthenticationSASL, got {other:?}"),
    }
    let mut plain = plain_connect(p.port()).await;
    match plain.login("app", "postgres").await {
        Err(LoginError::Auth(10, rest)) => assert_eq!(
            sasl_mechanisms(&rest),
            vec!["SCRAM-SHA-256".to_string()],
            "plaintext"
        ),
        other => panic!("plaintext: expected AuthenticationSASL, got {other:?}"),
    }

    let opts = PsqlTls {
        channel_binding: Some("require"),
        password: Some("app-secret"),
        ..psql_opts(&certs, "verify-full")
    };
    let out = psql_tls_run(p.port(), "app", "postgres", &opts, "SELECT current_user").await;
    assert_psql_ok("psql channel_binding=require over TLS", &out, "app");
    let wrong = PsqlTls {
        password: Some("wrong"),
        ..opts
    };
    let out = psql_tls_run(p.port(), "app", "postgres", &wrong, "SELECT 1").await;
    assert_psql_fails("wrong password", &out, "password authentication failed");
    let plain = PsqlTls {
        sslmode: "disable",
        ..opts
    };
    let out = psql_tls_run(p.port(), "app", "postgres", &plain, "SELECT 1").await;
    assert_psql_fails(
        "channel_binding=require in plaintext",
        &out,
        "channel binding",
    );
}

/// tokio-postgres over rustls with channel binding required logs in (the tls-server-end-point
/// binding pgcorral checks is the hash of the certificate it presents); a wrong password is
/// still refused with 28P01.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_rustls_with_channel_binding_required_logs_in() {
    let certs = Certs::new();
    let pg = Postgres::start();
    pg.sql("postgres", "CREATE ROLE app LOGIN");
    let general = format!(
        "auth_type = \"scram-sha-256\"\n{}",
        client_tls(&certs, "require")
    );
    let p = Pooler::start(&cfg(
        &pg,
        &general,
        "[users.app]\npassword = \"app-secret\"",
    ))
    .await;
    let require_binding = |c: &mut tokio_postgres::Config| {
        c.channel_binding(ChannelBinding::Require);
    };
    let c = connect_tls(
        p.port(),
        "app",
        Some("app-secret"),
        "postgres",
        tls_config(&certs.ca, None),
        require_binding,
    )
    .await
    .unwrap_or_else(|e| panic!("channel binding required: {e:?}"));
    assert_eq!(
        scalar(&c, "SELECT current_user").await.unwrap().unwrap(),
        "app"
    );
    let e = connect_tls(
        p.port(),
        "app",
        Some("wrong"),
        "postgres",
        tls_config(&certs.ca, None),
        require_binding,
    )
    .await
    .expect_err("a wrong password logged in");
    assert_eq!(db_error(&e).1, "28P01", "{e:?}");
}

/// PostgreSQL 17's direct TLS: a ClientHello with ALPN "postgresql" as the first bytes, then
/// the StartupMessage inside TLS; pgcorral selects the ALPN protocol and serves queries (raw
/// client and tokio-postgres' sslnegotiation=direct). An SSLRequest client sending ALPN (as
/// libpq 17 does) is served too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tls_with_alpn_postgresql_runs_queries() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let general = format!("auth_type = \"trust\"\n{}", client_tls(&certs, "require"));
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let mut s = tls_connect(
        p.port(),
        tls_config_with(&certs.ca, None, &[], None, true),
        Negotiation::Direct,
    )
    .await
    .unwrap_or_else(|e| panic!("direct TLS handshake: {e}"));
    let info = s.tls_info();
    assert_eq!(info.alpn.as_deref(), Some(ALPN_POSTGRESQL), "{info:?}");
    assert_eq!(info.peer, certs.server.der.to_vec());
    s.login("postgres", "postgres")
        .await
        .unwrap_or_else(|e| panic!("direct TLS login: {e:?}"));
    assert_eq!(s.scalar("SELECT 1").await.unwrap().unwrap(), "1");

    let c = connect_tls(
        p.port(),
        "postgres",
        None,
        "postgres",
        tls_config_with(&certs.ca, None, &[], None, true),
        |c| {
            c.ssl_negotiation(SslNegotiation::Direct);
        },
    )
    .await
    .unwrap_or_else(|e| panic!("tokio-postgres direct: {e:?}"));
    assert_eq!(scalar(&c, "SELECT 2").await.unwrap().unwrap(), "2");

    let mut s = tls_connect(
        p.port(),
        tls_config_with(&certs.ca, None, &[], None, true),
        Negotiation::SslRequest,
    )
    .await
    .unwrap();
    s.login("postgres", "postgres").await.unwrap();
    assert_eq!(s.scalar("SELECT 3").await.unwrap().unwrap(), "3");
}

/// Direct TLS without ALPN "postgresql" is refused (in the handshake or right after it), and
/// pgcorral goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tls_without_alpn_is_refused() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let general = format!("auth_type = \"trust\"\n{}", client_tls(&certs, "require"));
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    match tls_connect(p.port(), tls_config(&certs.ca, None), Negotiation::Direct).await {
        Err(e) => eprintln!("direct TLS without ALPN: handshake refused: {e}"),
        Ok(mut s) => match s.login("postgres", "postgres").await {
            Err(e @ (LoginError::Closed(_) | LoginError::Server(_))) => {
                eprintln!("direct TLS without ALPN: refused after the handshake: {e:?}")
            }
            other => panic!("direct TLS without ALPN: {other:?}"),
        },
    }
    let mut s = tls_connect(
        p.port(),
        tls_config_with(&certs.ca, None, &[], None, true),
        Negotiation::Direct,
    )
    .await
    .unwrap();
    s.login("postgres", "postgres").await.unwrap();
    assert_eq!(s.scalar("SELECT 1").await.unwrap().unwrap(), "1");
}

/// SHOW CLIENTS has a tls column: empty for a plaintext client, the protocol (and suite) for a
/// TLS client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_clients_tls_column_tells_tls_clients_apart() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let general = format!(
        "auth_type = \"trust\"\n{ADMIN}{}",
        client_tls(&certs, "prefer")
    );
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let mut plain_cfg = tokio_postgres::Config::new();
    plain_cfg
        .host("127.0.0.1")
        .port(p.port())
        .user("postgres")
        .dbname("postgres")
        .application_name("plain-client");
    let (plain, conn) = plain_cfg.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    scalar(&plain, "SELECT 1").await.unwrap();
    let tls = connect_tls(
        p.port(),
        "postgres",
        None,
        "postgres",
        tls_config(&certs.ca, None),
        |c| {
            c.application_name("tls-client");
        },
    )
    .await
    .unwrap();
    scalar(&tls, "SELECT 1").await.unwrap();
    let admin = connect(p.port(), "postgres", None, "pgbouncer")
        .await
        .unwrap();
    let rows = show(&admin, "CLIENTS").await;
    let tls_of = |name: &str| {
        let row = rows
            .iter()
            .find(|r| r.get("application_name").map(String::as_str) == Some(name))
            .unwrap_or_else(|| panic!("no client {name} in {rows:?}"));
        row.get("tls")
            .unwrap_or_else(|| panic!("no tls column in {row:?}"))
            .clone()
    };
    assert_eq!(tls_of("plain-client"), "", "plaintext client");
    let shown = tls_of("tls-client");
    eprintln!("SHOW CLIENTS tls of a TLS client: {shown:?}");
    assert!(shown.starts_with("TLSv1.3"), "TLS client: {shown:?}");
}

/// client_tls_protocols: "tlsv1.2" refuses TLS 1.3-only clients and "tlsv1.3" refuses TLS
/// 1.2-only clients; the default ("secure") takes both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_tls_protocols_limit_the_tls_versions() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let only = |v: &'static tokio_rustls::rustls::SupportedProtocolVersion| {
        tls_config_with(&certs.ca, None, &[v], None, false)
    };
    let version = |s: Result<PgStream<TlsStream>, std::io::Error>| {
        s.map(|s| s.tls_info().version).map_err(|e| e.to_string())
    };
    for (protocols, ok, refused, expect) in [
        ("tlsv1.2", &TLS12, &TLS13, "TLSv1_2"),
        ("tlsv1.3", &TLS13, &TLS12, "TLSv1_3"),
    ] {
        let general = format!(
            "auth_type = \"trust\"\n{}client_tls_protocols = \"{protocols}\"\n",
            client_tls(&certs, "require")
        );
        let p = Pooler::start(&cfg(&pg, &general, "")).await;
        let got = version(tls_connect(p.port(), only(ok), Negotiation::SslRequest).await);
        assert_eq!(got, Ok(expect.to_string()), "{protocols}");
        let got = version(tls_connect(p.port(), only(refused), Negotiation::SslRequest).await);
        assert!(
            got.is_err(),
            "{protocols}: other version negotiated: {got:?}"
        );
        let got = version(
            tls_connect(
                p.port(),
                tls_config(&certs.ca, None),
                Negotiation::SslRequest,
            )
            .await,
        );
        assert_eq!(
            got,
            Ok(expect.to_string()),
            "{protocols}: client offering both"
        );
    }
    let general = format!("auth_type = \"trust\"\n{}", client_tls(&certs, "require"));
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    for (v, expect) in [(&TLS12, "TLSv1_2"), (&TLS13, "TLSv1_3")] {
        let got = version(tls_connect(p.port(), only(v), Negotiation::SslRequest).await);
        assert_eq!(got, Ok(expect.to_string()), "default protocols");
    }
}

/// client_tls_ciphers limits the suites: with only TLS13_CHACHA20_POLY1305_SHA256, a client
/// offering every suite gets it, and one offering only AES-256-GCM is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_tls_ciphers_limit_the_cipher_suites() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let general = format!(
        "auth_type = \"trust\"\n{}client_tls_protocols = \"tlsv1.3\"\n\
         client_tls_ciphers = \"TLS13_CHACHA20_POLY1305_SHA256\"\n",
        client_tls(&certs, "require")
    );
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let mut s = tls_connect(
        p.port(),
        tls_config(&certs.ca, None),
        Negotiation::SslRequest,
    )
    .await
    .unwrap();
    assert_eq!(s.tls_info().suite, "TLS13_CHACHA20_POLY1305_SHA256");
    s.login("postgres", "postgres").await.unwrap();
    assert_eq!(s.scalar("SELECT 1").await.unwrap().unwrap(), "1");
    let aes = tls_config_with(
        &certs.ca,
        None,
        &[],
        Some(vec![cipher_suite::TLS13_AES_256_GCM_SHA384]),
        false,
    );
    let got = tls_connect(p.port(), aes, Negotiation::SslRequest)
        .await
        .map(|s| s.tls_info().suite);
    assert!(got.is_err(), "a suite outside client_tls_ciphers: {got:?}");
}

/// Settings that cannot work are refused at startup, naming the key: TLS modes without a
/// certificate and key, verify-ca/verify-full and auth_type cert without a CA file, an
/// unknown sslmode, a certificate file that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_settings_that_cannot_work_are_refused_at_startup() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let cert_key = format!(
        "client_tls_cert_file = \"{}\"\nclient_tls_key_file = \"{}\"\n",
        certs.server.cert.display(),
        certs.server.key.display()
    );
    let missing = certs.missing();
    let cases = [
        (
            "auth_type = \"trust\"\nclient_tls_sslmode = \"require\"".to_string(),
            "client_tls_cert_file",
        ),
        (
            format!("auth_type = \"trust\"\nclient_tls_sslmode = \"verify-ca\"\n{cert_key}"),
            "client_tls_ca_file",
        ),
        (
            format!("auth_type = \"cert\"\nclient_tls_sslmode = \"require\"\n{cert_key}"),
            "client_tls_ca_file",
        ),
        (
            format!("auth_type = \"trust\"\nclient_tls_sslmode = \"sometimes\"\n{cert_key}"),
            "client_tls_sslmode",
        ),
        (
            format!(
                "auth_type = \"trust\"\nclient_tls_sslmode = \"require\"\n\
                 client_tls_cert_file = \"{}\"\nclient_tls_key_file = \"{}\"\n",
                missing.display(),
                certs.server.key.display()
            ),
            "does-not-exist",
        ),
    ];
    for (general, needle) in cases {
        let toml = cfg(&pg, &general, "");
        let err = match pgcorral::config::from_toml_str(&toml) {
            Err(e) => e.to_string(),
            Ok(c) => match pgcorral::Pooler::bind(c).await {
                Err(e) => e.to_string(),
                Ok(_) => panic!("accepted: {general}"),
            },
        };
        assert!(err.contains(needle), "{general}: {needle:?} not in {err}");
    }
}
