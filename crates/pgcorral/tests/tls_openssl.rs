//! Certificates made with the openssl command the way PgBouncer's test suite (and many
//! deployments) make them: X.509 version 1 leaf certificates (no extensions) signed by a CA,
//! EC keys written by `openssl ecparam -genkey` (an EC PARAMETERS block before a SEC1 key) and
//! RSA keys in PKCS#1. webpki alone refuses v1 certificates; pgcorral takes them on both sides,
//! and still refuses what does not check out (another CA, another host, a key of another
//! certificate).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use support::tls::*;
use support::tls_pooler::*;
use support::*;

// ---- a PKI made by openssl ------------------------------------------------------------------

/// How a leaf's key is made.
#[derive(Clone, Copy)]
enum KeyKind {
    /// `openssl ecparam -genkey -name prime256v1`: EC PARAMETERS, then a SEC1 key.
    Ec,
    /// `openssl genrsa -traditional 2048`: PKCS#1.
    Rsa,
}

/// Serial numbers of the certificates made.
static SERIAL: AtomicU64 = AtomicU64::new(1000);

/// Certificates and keys made by the openssl command in a temporary directory.
struct OpensslPki {
    dir: tempfile::TempDir,
}

impl OpensslPki {
    fn new() -> OpensslPki {
        let dir = tempfile::Builder::new()
            .prefix("pgcorral-openssl-")
            .tempdir()
            .unwrap();
        OpensslPki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn key(&self, stem: &str, kind: KeyKind) -> PathBuf {
        let key = format!("{stem}.key");
        match kind {
            KeyKind::Ec => {
                self.openssl(&["ecparam", "-genkey", "-name", "prime256v1", "-out", &key])
            }
            KeyKind::Rsa => self.openssl(&["genrsa", "-traditional", "-out", &key, "2048"]),
        }
        let path = self.path(&key);
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        path
    }

    /// A self-signed CA (EC key, basicConstraints CA:TRUE); its certificate's path.
    fn ca(&self, stem: &str) -> PathBuf {
        self.key(stem, KeyKind::Ec);
        let (key, crt) = (format!("{stem}.key"), format!("{stem}.crt"));
        let subj = format!("/O=pgcorral tests/CN={stem}");
        self.openssl(&[
            "req",
            "-new",
            "-x509",
            "-days",
            "30",
            "-key",
            &key,
            "-out",
            &crt,
            "-subj",
            &subj,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
        ]);
        self.path(&crt)
    }

    /// A version 1 certificate for subject CN `cn`, signed by the CA `ca`.
    fn leaf(&self, ca: &str, stem: &str, cn: &str, kind: KeyKind) -> CertFiles {
        let key = self.key(stem, kind);
        let (csr, crt) = (format!("{stem}.csr"), format!("{stem}.crt"));
        let subj = format!("/O=pgcorral tests/CN={cn}");
        self.openssl(&[
            "req",
            "-new",
            "-key",
            &format!("{stem}.key"),
            "-out",
            &csr,
            "-subj",
            &subj,
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-set_serial",
            &SERIAL.fetch_add(1, Ordering::Relaxed).to_string(),
            "-days",
            "30",
            "-out",
            &crt,
        ]);
        let cert = self.path(&crt);
        let der = pem_der(&cert);
        let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert_eq!(
            parsed.version().0,
            0,
            "openssl x509 -req made a v3 certificate here; the test needs a v1 one"
        );
        CertFiles {
            cert,
            key,
            der: der.into(),
            key_der: Vec::new(),
        }
    }
}

/// The first certificate of a PEM file, as DER.
fn pem_der(path: &Path) -> Vec<u8> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    tokio_rustls::rustls::pki_types::CertificateDer::from_pem_file(path)
        .unwrap()
        .to_vec()
}

/// client_tls_* lines for `mode` with `server` and `ca`.
fn client_tls_files(mode: &str, server: &CertFiles, ca: &Path) -> String {
    format!(
        "client_tls_sslmode = \"{mode}\"\nclient_tls_cert_file = \"{}\"\n\
         client_tls_key_file = \"{}\"\nclient_tls_ca_file = \"{}\"\n",
        server.cert.display(),
        server.key.display(),
        ca.display()
    )
}

/// psql with `sslmode`, trusting `ca`, presenting `cert` when given.
fn psql_with<'a>(sslmode: &'a str, ca: &'a Path, cert: Option<&'a CertFiles>) -> PsqlTls<'a> {
    PsqlTls {
        sslmode,
        rootcert: Some(ca),
        cert,
        ..PsqlTls::default()
    }
}

// ---- clients' side --------------------------------------------------------------------------

/// pgcorral serves a v1 certificate with its EC (ecparam) or RSA (PKCS#1) key: psql with
/// verify-full logs in over TLS. A key of another certificate is refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_certificates_and_ecparam_or_pkcs1_keys_serve_clients() {
    let pki = OpensslPki::new();
    let ca = pki.ca("ca");
    let pg = Postgres::start();
    for (stem, kind) in [("ec-server", KeyKind::Ec), ("rsa-server", KeyKind::Rsa)] {
        let server = pki.leaf("ca", stem, "127.0.0.1", kind);
        let general = format!(
            "auth_type = \"trust\"\n{}",
            client_tls_files("require", &server, &ca)
        );
        let p = Pooler::start(&cfg(&pg, &general, "")).await;
        let out = psql_tls_run(
            p.port(),
            "postgres",
            "postgres",
            &psql_with("verify-full", &ca, None),
            "SELECT 1",
        )
        .await;
        assert_eq!(stdout(&out).trim(), "1", "{stem}: {}", stderr(&out));
    }
    let a = pki.leaf("ca", "a", "127.0.0.1", KeyKind::Ec);
    let b = pki.leaf("ca", "b", "127.0.0.1", KeyKind::Ec);
    let mixed = CertFiles {
        key: b.key.clone(),
        ..a.clone()
    };
    let general = format!(
        "auth_type = \"trust\"\n{}",
        client_tls_files("require", &mixed, &ca)
    );
    let config = pgcorral::config::from_toml_str(&cfg(&pg, &general, "")).unwrap();
    let err = pgcorral::Pooler::bind(config)
        .await
        .err()
        .expect("a key of another certificate was taken");
    assert!(err.to_string().contains("does not go with"), "{err}");
}

/// With a CA file, v1 client certificates are checked: one from the CA logs in with
/// auth_type = "cert" (its CN is the user), one from another CA is refused in the handshake,
/// and so is one naming another user at login.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_client_certificates_are_checked() {
    let pki = OpensslPki::new();
    let ca = pki.ca("ca");
    pki.ca("other-ca");
    let server = pki.leaf("ca", "server", "127.0.0.1", KeyKind::Ec);
    let me = pki.leaf("ca", "me", "postgres", KeyKind::Ec);
    let rsa_me = pki.leaf("ca", "rsa-me", "postgres", KeyKind::Rsa);
    let stranger = pki.leaf("other-ca", "stranger", "postgres", KeyKind::Ec);
    let someone = pki.leaf("ca", "someone", "someone", KeyKind::Ec);
    let pg = Postgres::start();
    let general = format!(
        "auth_type = \"cert\"\n{}",
        client_tls_files("verify-full", &server, &ca)
    );
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    for who in [&me, &rsa_me] {
        let out = psql_tls_run(
            p.port(),
            "postgres",
            "postgres",
            &psql_with("verify-full", &ca, Some(who)),
            "SELECT current_user",
        )
        .await;
        assert_eq!(stdout(&out).trim(), "postgres", "{}", stderr(&out));
    }
    for (who, what, why) in [
        (&stranger, "another CA", "unknown ca"),
        (
            &someone,
            "another user",
            "certificate authentication failed",
        ),
    ] {
        let out = psql_tls_run(
            p.port(),
            "postgres",
            "postgres",
            &psql_with("verify-full", &ca, Some(who)),
            "SELECT 1",
        )
        .await;
        assert!(!out.status.success(), "{what}: logged in");
        assert!(stderr(&out).contains(why), "{what}: {}", stderr(&out));
    }
}

// ---- PostgreSQL's side ----------------------------------------------------------------------

/// PostgreSQL presenting a v1 certificate (CN 127.0.0.1): require and verify-full with its CA
/// connect over TLS; verify-full with another CA fails with "certificate verify failed", and
/// verify-full to a v1 certificate naming another host fails while verify-ca connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_server_certificates_are_checked() {
    let pki = OpensslPki::new();
    let ca = pki.ca("ca");
    let other = pki.ca("other-ca");
    let server = pki.leaf("ca", "pg", "127.0.0.1", KeyKind::Ec);
    let pg = postgres_tls_with(
        &server,
        &ca,
        "hostssl all all 127.0.0.1/32 trust",
        PgOptions::default(),
    );
    let server_tls = |mode: &str, ca: &Path| {
        format!(
            "auth_type = \"trust\"\nserver_tls_sslmode = \"{mode}\"\nserver_tls_ca_file = \"{}\"\n\
             server_unavailable_wait = 0\n",
            ca.display()
        )
    };
    for mode in ["require", "verify-ca", "verify-full"] {
        let p = Pooler::start(&cfg(&pg, &server_tls(mode, &ca), "")).await;
        assert_eq!(
            plain_query(p.port(), "postgres", SSL_OF_BACKEND).await,
            Ok(Some("t".into())),
            "{mode}"
        );
    }
    for mode in ["verify-ca", "verify-full"] {
        let p = Pooler::start(&cfg(&pg, &server_tls(mode, &other), "")).await;
        let (code, msg, _) = plain_query(p.port(), "postgres", "SELECT 1")
            .await
            .expect_err("served by a server whose certificate another CA signed");
        assert!(code.starts_with("08"), "{mode}: {code} {msg}");
        assert!(msg.contains("certificate verify failed"), "{mode}: {msg}");
    }
    let elsewhere = pki.leaf("ca", "pg-elsewhere", "db.example", KeyKind::Rsa);
    let pg2 = postgres_tls_with(
        &elsewhere,
        &ca,
        "hostssl all all 127.0.0.1/32 trust",
        PgOptions::default(),
    );
    let p = Pooler::start(&cfg(&pg2, &server_tls("verify-ca", &ca), "")).await;
    assert_eq!(
        plain_query(p.port(), "postgres", SSL_OF_BACKEND).await,
        Ok(Some("t".into()))
    );
    let p = Pooler::start(&cfg(&pg2, &server_tls("verify-full", &ca), "")).await;
    let (_, msg, _) = plain_query(p.port(), "postgres", "SELECT 1")
        .await
        .expect_err("verify-full took a certificate for db.example at 127.0.0.1");
    assert!(msg.contains("certificate verify failed"), "{msg}");
}

/// pgcorral presents a v1 client certificate (and its PKCS#1 key) to a PostgreSQL that asks for
/// one (`hostssl ... cert`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_certificate_logs_in_to_postgres_cert_auth() {
    let pki = OpensslPki::new();
    let ca = pki.ca("ca");
    let server = pki.leaf("ca", "pg", "127.0.0.1", KeyKind::Ec);
    let me = pki.leaf("ca", "pgcorral", "app", KeyKind::Rsa);
    let pg = postgres_tls_with(
        &server,
        &ca,
        "hostssl all app 127.0.0.1/32 cert",
        PgOptions::default(),
    );
    pg.sql("postgres", "CREATE ROLE app LOGIN");
    let general = format!(
        "auth_type = \"trust\"\nserver_tls_sslmode = \"verify-full\"\nserver_tls_ca_file = \"{}\"\n\
         server_tls_cert_file = \"{}\"\nserver_tls_key_file = \"{}\"\n",
        ca.display(),
        me.cert.display(),
        me.key.display()
    );
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    assert_eq!(
        plain_query(p.port(), "app", "SELECT current_user").await,
        Ok(Some("app".into()))
    );
}
