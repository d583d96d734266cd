//! Certificate rotation: RELOAD and SIGHUP load new certificates and keep TLS clients
//! connected; a bad certificate file is refused and the old certificate kept.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::tls::*;
use support::tls_pooler::*;
use support::*;

// ---- helpers --------------------------------------------------------------------------------

/// Writes `toml` to a file in `certs`' directory and tells the in-process pooler to RELOAD from it.
fn config_file(certs: &Certs, p: &Pooler, toml: &str) -> std::path::PathBuf {
    let path = certs.dir().join("pgcorral.toml");
    std::fs::write(&path, toml).unwrap();
    p.services.config_path.set(path.clone()).unwrap();
    path
}

/// Runs an admin console command over `c`: Ok(()) or Err(message).
async fn console(c: &tokio_postgres::Client, sql: &str) -> Result<(), String> {
    c.simple_query(sql).await.map(|_| ()).map_err(|e| {
        e.as_db_error()
            .map(|d| d.message().to_string())
            .unwrap_or_else(|| e.to_string())
    })
}

// ---- reload ---------------------------------------------------------------------------------

/// RELOAD re-reads the certificate files even though their paths did not change: new
/// connections get the new certificate (not before RELOAD); a TLS client connected before keeps
/// working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_rotates_the_certificate_and_keeps_tls_clients_connected() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let general = format!(
        "auth_type = \"trust\"\n{ADMIN}{}",
        client_tls(&certs, "require")
    );
    let toml = cfg(&pg, &general, "");
    let p = Pooler::start(&toml).await;
    config_file(&certs, &p, &toml);
    let tls = || tls_config(&certs.ca, None);
    let old = connect_tls(p.port(), "postgres", None, "postgres", tls(), |_| {})
        .await
        .unwrap();
    assert_eq!(scalar(&old, "SELECT 1").await.unwrap().unwrap(), "1");
    let admin = connect_tls(p.port(), "postgres", None, "pgbouncer", tls(), |_| {})
        .await
        .unwrap();
    assert_eq!(
        peer_certificate(p.port(), &certs.ca).await.unwrap(),
        certs.server.der.to_vec()
    );

    let rotated = certs.ca.server("server", &["localhost", "127.0.0.1"]);
    assert_ne!(rotated.der, certs.server.der);
    assert_eq!(
        peer_certificate(p.port(), &certs.ca).await.unwrap(),
        certs.server.der.to_vec(),
        "the files are read at RELOAD, not before"
    );
    console(&admin, "RELOAD").await.unwrap();
    assert_eq!(
        peer_certificate(p.port(), &certs.ca).await.unwrap(),
        rotated.der.to_vec(),
        "new connections get the new certificate"
    );
    assert_eq!(scalar(&old, "SELECT 2").await.unwrap().unwrap(), "2");
    let new = connect_tls(p.port(), "postgres", None, "postgres", tls(), |_| {})
        .await
        .unwrap();
    assert_eq!(scalar(&new, "SELECT 3").await.unwrap().unwrap(), "3");
    console(&admin, "SHOW VERSION").await.unwrap();
}

/// RELOAD with a bad certificate, key or CA file (garbage, missing, a key that does not match)
/// returns an ERROR naming the problem and changes nothing: the other changed setting keeps
/// its value and new connections still get the old certificate. Fixed files reload.
/// (verify-ca, so that client_tls_ca_file is surely in use.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_with_a_bad_certificate_file_fails_and_keeps_the_old_certificate() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let general = |size: u32| {
        format!(
            "auth_type = \"trust\"\n{ADMIN}default_pool_size = {size}\n{}",
            client_tls(&certs, "verify-ca")
        )
    };
    let toml = cfg(&pg, &general(5), "");
    let p = Pooler::start(&toml).await;
    let path = config_file(&certs, &p, &toml);
    std::fs::write(&path, cfg(&pg, &general(7), "")).unwrap();
    let me = certs.client("postgres");
    let tls = || tls_config(&certs.ca, Some(&me));
    let old = connect_tls(p.port(), "postgres", None, "postgres", tls(), |_| {})
        .await
        .unwrap();
    let admin = connect_tls(p.port(), "postgres", None, "pgbouncer", tls(), |_| {})
        .await
        .unwrap();
    let pool_size = || async {
        show(&admin, "CONFIG")
            .await
            .into_iter()
            .find(|r| r.get("key").map(String::as_str) == Some("default_pool_size"))
            .and_then(|r| r.get("value").cloned())
            .unwrap_or_default()
    };

    let (cert, key, ca) = (&certs.server.cert, &certs.server.key, &certs.ca.cert_file);
    let good = |p: &Path| std::fs::read(p).unwrap();
    let (good_cert, good_key, good_ca) = (good(cert), good(key), good(ca));
    let mismatched = std::fs::read(&certs.other_server.key).unwrap();
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    type Break<'a> = Box<dyn Fn() + 'a>;
    let cases: Vec<(&str, Break, String)> = vec![
        (
            "garbage certificate",
            Box::new(|| std::fs::write(cert, "not a certificate\n").unwrap()),
            name(cert),
        ),
        (
            "missing key",
            Box::new(|| std::fs::remove_file(key).unwrap()),
            name(key),
        ),
        (
            "key of another certificate",
            Box::new(|| write_private(key, &mismatched)),
            "key".to_string(),
        ),
        (
            "garbage CA",
            Box::new(|| std::fs::write(ca, "-----BEGIN CERTIFICATE-----\nAAAA\n").unwrap()),
            name(ca),
        ),
    ];
    for (what, break_it, needle) in cases {
        break_it();
        let err = console(&admin, "RELOAD")
            .await
            .expect_err(&format!("{what}: RELOAD succeeded"));
        eprintln!("{what}: RELOAD said {err:?}");
        assert!(err.contains(&needle), "{what}: {needle:?} not in {err:?}");
        assert_eq!(pool_size().await, "5", "{what}: the config changed");
        assert_eq!(
            peer_certificate_with(p.port(), tls()).await.unwrap(),
            certs.server.der.to_vec(),
            "{what}: the old certificate is still served"
        );
        assert_eq!(scalar(&old, "SELECT 1").await.unwrap().unwrap(), "1");
        std::fs::write(cert, &good_cert).unwrap();
        write_private(key, &good_key);
        std::fs::write(ca, &good_ca).unwrap();
    }
    console(&admin, "RELOAD").await.unwrap();
    assert_eq!(pool_size().await, "7");
}

/// SIGHUP re-reads the certificate files of a pgcorral process, like RELOAD; a bad file at
/// SIGHUP leaves the old certificate in use.
#[test]
fn sighup_rotates_the_certificate() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let general = format!("auth_type = \"trust\"\n{}", client_tls(&certs, "require"));
    let p = PoolerProcess::start(&cfg(&pg, &general, ""));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let peer = || rt.block_on(peer_certificate(p.port, &certs.ca)).unwrap();
    assert_eq!(peer(), certs.server.der.to_vec());
    let rotated = certs.ca.server("server", &["localhost", "127.0.0.1"]);
    p.signal("HUP");
    let start = Instant::now();
    while peer() != rotated.der.to_vec() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the new certificate was not served after SIGHUP: {}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(&rotated.cert, "garbage\n").unwrap();
    p.signal("HUP");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(peer(), rotated.der.to_vec(), "{}", p.log());
}

// ---- SET, one setting at a time -------------------------------------------------------------

/// Runs `sql` on the admin console over psql (TLS when offered, unverified): its output, with
/// notices on stderr.
async fn console_psql(port: u16, sql: &str) -> std::process::Output {
    let tls = PsqlTls {
        sslmode: "prefer",
        ..PsqlTls::default()
    };
    psql_tls_run(port, "postgres", "pgbouncer", &tls, sql).await
}

/// The console's SET takes TLS settings one at a time, as PgBouncer's users change them. From
/// no client TLS, the key, the certificate, the CA and the sslmode set in turn make TLS logins
/// work. A key set before its certificate is taken with a notice, and the TLS in force stays
/// (the old certificate is still served, never the new key with the old certificate); the
/// certificate that goes with it puts both in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_takes_tls_settings_one_at_a_time() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let general = format!("auth_type = \"trust\"\n{ADMIN}");
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let set = |key: &str, path: &Path| format!("SET {key} = '{}'", path.display());
    let kept = "TLS settings could not be applied";

    for sql in [
        set("client_tls_key_file", &certs.server.key),
        set("client_tls_cert_file", &certs.server.cert),
        set("client_tls_ca_file", &certs.ca.cert_file),
        "SET client_tls_sslmode = 'require'".to_string(),
    ] {
        let out = console_psql(p.port(), &sql).await;
        assert!(out.status.success(), "{sql}: {}", stderr(&out));
        assert!(!stderr(&out).contains(kept), "{sql}: {}", stderr(&out));
    }
    assert_eq!(
        peer_certificate(p.port(), &certs.ca).await.unwrap(),
        certs.server.der.to_vec()
    );
    let out = psql_tls_run(
        p.port(),
        "postgres",
        "postgres",
        &psql_opts(&certs, "verify-full"),
        "SELECT 1",
    )
    .await;
    assert_eq!(stdout(&out).trim(), "1", "{}", stderr(&out));

    let out = console_psql(
        p.port(),
        &set("client_tls_key_file", &certs.other_server.key),
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(kept), "{}", stderr(&out));
    assert_eq!(
        peer_certificate(p.port(), &certs.ca).await.unwrap(),
        certs.server.der.to_vec(),
        "the TLS in force stays while the key does not go with the certificate"
    );
    let out = console_psql(
        p.port(),
        &set("client_tls_cert_file", &certs.other_server.cert),
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains(kept), "{}", stderr(&out));
    assert_eq!(
        peer_certificate(p.port(), &certs.other_ca).await.unwrap(),
        certs.other_server.der.to_vec()
    );

    // The TLS 1.3 suites, on their own.
    let out = console_psql(
        p.port(),
        "SET client_tls13_ciphers = 'TLS_CHACHA20_POLY1305_SHA256'",
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let tls13 = tls_config_with(
        &certs.other_ca,
        None,
        &[&tokio_rustls::rustls::version::TLS13],
        None,
        false,
    );
    let s = tls_connect(p.port(), tls13, Negotiation::SslRequest)
        .await
        .unwrap();
    assert_eq!(s.tls_info().suite, "TLS13_CHACHA20_POLY1305_SHA256");
    let out = console_psql(p.port(), "SET client_tls13_ciphers = 'unknown'").await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("failed to set the TLSv1.3 cipher suites"),
        "{}",
        stderr(&out)
    );
}

/// A SET of a server TLS setting replaces the servers opened before it: after
/// `server_tls_sslmode = require`, the next query runs on a new server connection, over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_of_server_tls_replaces_idle_servers() {
    let certs = Certs::new();
    let pg = postgres_tls(&certs, "host all all 127.0.0.1/32 trust");
    let general = format!("auth_type = \"trust\"\n{ADMIN}server_tls_sslmode = \"disable\"\n");
    let p = Pooler::start(&cfg(&pg, &general, "")).await;
    let c = connect(p.port(), "postgres", None, "postgres")
        .await
        .unwrap();
    assert_eq!(scalar(&c, SSL_OF_BACKEND).await.unwrap().unwrap(), "f");
    let before = scalar(&c, "SELECT pg_backend_pid()").await.unwrap();
    let out = console_psql(p.port(), "SET server_tls_sslmode = 'require'").await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(scalar(&c, SSL_OF_BACKEND).await.unwrap().unwrap(), "t");
    assert_ne!(scalar(&c, "SELECT pg_backend_pid()").await.unwrap(), before);
}
