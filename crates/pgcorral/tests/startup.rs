//! The startup phase byte for byte as PostgreSQL 15 answers it: each odd or broken opening
//! (bad lengths, unknown protocol versions, a second SSLRequest or GSSENCRequest, plaintext
//! sent along with one, two StartupMessages in one write) is sent to a real server and to
//! pgcorral, and both must answer the same (ErrorResponse fields but the source location) and
//! close, or close without a word, alike.

mod support;

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::tls::*;
use support::*;

const SSL: [u8; 8] = [0, 0, 0, 8, 4, 210, 22, 47];
const GSS: [u8; 8] = [0, 0, 0, 8, 4, 210, 22, 48];

/// A StartupMessage of protocol `version` with `body` after the version word, as it is.
fn packet(version: i32, body: &[u8]) -> Vec<u8> {
    let mut p = ((body.len() + 8) as i32).to_be_bytes().to_vec();
    p.extend_from_slice(&version.to_be_bytes());
    p.extend_from_slice(body);
    p
}

fn startup(user: &str) -> Vec<u8> {
    wire::startup(&[("user", user), ("database", "postgres")])
}

/// What a connection got: its bytes, and whether the peer closed it (else it went quiet).
#[derive(Debug, PartialEq)]
struct Answer {
    bytes: Vec<u8>,
    closed: bool,
}

/// Connects to `port`, sends each part in its own write (a short pause between), and reads
/// until the peer closes or sends nothing for `quiet`.
async fn exchange(port: u16, parts: &[&[u8]], quiet: Duration) -> Answer {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if s.write_all(part).await.is_err() {
            break;
        }
    }
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match tokio::time::timeout(quiet, s.read(&mut chunk)).await {
            Err(_) => {
                return Answer {
                    bytes,
                    closed: false,
                }
            }
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Answer {
                    bytes,
                    closed: true,
                }
            }
            Ok(Ok(n)) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The answer as messages, with the source location (F, L, R fields) dropped from every
/// ErrorResponse, and ParameterStatus and BackendKeyData left out (a pooler's differ).
fn comparable(a: &Answer) -> (Vec<String>, bool) {
    let mut out = Vec::new();
    let mut rest = &a.bytes[..];
    while let Some(&tag) = rest.first() {
        let len = rest
            .get(1..5)
            .map(|b| i32::from_be_bytes(b.try_into().unwrap()) as usize);
        let framed = len.is_some_and(|n| n >= 4 && rest.len() > n);
        if !framed && matches!(tag, b'N' | b'S' | b'G') {
            // A one-byte answer to SSLRequest / GSSENCRequest.
            out.push((tag as char).to_string());
            rest = &rest[1..];
            continue;
        }
        let Some(len) = len.filter(|_| framed) else {
            // Not protocol 3.0 framing (protocol 2's error has no length): compared as is.
            out.push(format!("raw {:?}", String::from_utf8_lossy(rest)));
            break;
        };
        let body = &rest[5..1 + len];
        match tag {
            b'E' => {
                let fields: Vec<String> = body
                    .split(|&b| b == 0)
                    .filter(|f| !f.is_empty() && !matches!(f[0], b'F' | b'L' | b'R'))
                    .map(|f| String::from_utf8_lossy(f).into_owned())
                    .collect();
                out.push(format!("E {}", fields.join("|")));
            }
            b'v' => out.push(format!("v {body:?}")),
            b'S' | b'K' => {}
            _ => out.push((tag as char).to_string()),
        }
        rest = &rest[1 + len..];
    }
    (out, a.closed)
}

/// Sends the same opening to PostgreSQL and to pgcorral; both must answer it alike.
async fn same(pg: u16, pooler: u16, what: &str, parts: &[&[u8]]) -> Answer {
    let quiet = Duration::from_millis(1500);
    let (direct, pooled) = tokio::join!(exchange(pg, parts, quiet), exchange(pooler, parts, quiet));
    assert_eq!(
        comparable(&pooled),
        comparable(&direct),
        "{what}: pgcorral (left) and PostgreSQL (right) answer differently"
    );
    pooled
}

/// Broken or odd startup packets: PostgreSQL answers some with FATAL (an unsupported protocol
/// version 0A000, in protocol 2's format below 3.0; a parameter list without its terminator
/// 08P01), closes on others without a word (a bad length, a short CancelRequest, a packet cut
/// short), and takes some that look odd (an SSLRequest longer than 8 bytes, a 10004-byte
/// packet). pgcorral must do each the same; node-postgres' quick disconnect (a Terminate where
/// the StartupMessage belongs, then close) must get nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_startup_packets_are_answered_as_postgresql_answers_them() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(&pg, "postgres", "")).await;
    let big_value = "a".repeat(10_004 - 8 - "user\0postgres\0application_name\0".len() - 2);
    let mut big = b"user\0postgres\0application_name\0".to_vec();
    big.extend_from_slice(big_value.as_bytes());
    big.extend_from_slice(b"\0\0");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("length 7", vec![0, 0, 0, 7, 0, 3, 0]),
        ("length 0", vec![0, 0, 0, 0]),
        ("length 10005", 10_005i32.to_be_bytes().to_vec()),
        (
            "an HTTP request",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        ("node-postgres' quick disconnect", b"X\0\0\0\x04".to_vec()),
        (
            "a short CancelRequest",
            vec![0, 0, 0, 12, 4, 210, 22, 46, 0, 0, 0, 1],
        ),
        ("protocol 2.0", packet(2 << 16, b"user\0postgres\0\0")),
        ("protocol 4.0", packet(4 << 16, b"user\0postgres\0\0")),
        ("protocol 0x1234.0x5678", packet(0x1234_5678, b"")),
        ("no parameters", packet(196608, b"")),
        ("no terminator", packet(196608, b"user\0postgres\0")),
        (
            "bytes after the terminator",
            packet(196608, b"user\0postgres\0\0x"),
        ),
        (
            "the terminator taken as a value",
            packet(196608, b"user\0\0"),
        ),
        ("zeros", packet(196608, &[0u8; 9992])),
        ("no user", packet(196608, b"\0")),
        (
            "a last name with no room for a value",
            packet(196608, b"user\0postgres\0x"),
        ),
        ("protocol 3.5", packet(3 << 16 | 5, b"user\0postgres\0\0")),
    ];
    for (what, bytes) in &cases {
        same(pg.port, pooler.port(), what, &[bytes]).await;
    }
    // The longest packet PostgreSQL takes: 10000 bytes after the length word (PostgreSQL adds a
    // NOTICE about the long application_name that pgcorral's client does not get).
    let pooled = exchange(
        pooler.port(),
        &[&packet(196608, &big)],
        Duration::from_secs(3),
    )
    .await;
    let (msgs, closed) = comparable(&pooled);
    assert_eq!(
        (msgs.first().map(String::as_str), closed),
        (Some("R"), false),
        "{msgs:?}"
    );
    // Cut short: part of a packet, then the client's side closed.
    for (what, part) in [
        ("two bytes", &[0u8, 0][..]),
        ("a header", &packet(196608, b"")[..8]),
    ] {
        let mut lengthy = part.to_vec();
        if lengthy.len() == 8 {
            lengthy[3] = 40;
        }
        for port in [pg.port, pooler.port()] {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.write_all(&lengthy).await.unwrap();
            s.shutdown().await.unwrap();
            let mut got = Vec::new();
            let n = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
                .await
                .unwrap_or_else(|_| panic!("{what}: not closed ({port})"));
            assert!(n.is_err() || got.is_empty(), "{what}: {port} wrote {got:?}");
        }
    }
    // pgcorral goes on serving.
    let c = pooler.connect("postgres", None, "postgres").await;
    c.simple_query("SELECT 1").await.unwrap();
}

/// An SSLRequest or GSSENCRequest may come once: a second one (after 'N') is FATAL 0A000
/// "unsupported frontend protocol 1234.5679" (5680 for GSS), as PostgreSQL treats the request
/// code as a protocol version then; one of each is fine, in either order. Bytes sent along
/// with a request, before its answer, are refused after the 'N' (FATAL 08P01 "received
/// unencrypted data after SSL request", with PostgreSQL's detail). pgcorral declines GSSAPI as
/// a PostgreSQL built without it does (the Debian server here offers it over TCP, so those cases
/// are checked against PostgreSQL's known answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_and_gss_requests_are_answered_once_as_postgresql() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(&pg, "postgres", "")).await;
    let (pg, port) = (pg.port, pooler.port());
    let login = startup("postgres");
    same(pg, port, "SSLRequest twice", &[&SSL, &SSL]).await;
    same(pg, port, "SSLRequest, then a login", &[&SSL, &login]).await;
    same(
        pg,
        port,
        "SSLRequest with a login in one write",
        &[&[&SSL[..], &login].concat()],
    )
    .await;

    let fatal = |code: &str, msg: &str, detail: Option<&str>| {
        let mut f = format!("E SFATAL|VFATAL|C{code}|M{msg}");
        if let Some(d) = detail {
            f.push_str(&format!("|D{d}"));
        }
        f
    };
    let unsupported = |v: &str| {
        fatal(
            "0A000",
            &format!("unsupported frontend protocol 1234.{v}: server supports 3.0 to 3.0"),
            None,
        )
    };
    const DETAIL: &str = "This could be either a client-software bug or evidence of an attempted man-in-the-middle attack.";
    let quiet = Duration::from_millis(1500);
    let expect = |what: &str, got: Answer, want: Vec<String>, closed: bool| {
        assert_eq!(comparable(&got), (want, closed), "{what}");
    };
    let n = || "N".to_string();
    expect(
        "SSLRequest twice",
        exchange(port, &[&SSL, &SSL], quiet).await,
        vec![n(), unsupported("5679")],
        true,
    );
    expect(
        "GSSENCRequest twice",
        exchange(port, &[&GSS, &GSS], quiet).await,
        vec![n(), unsupported("5680")],
        true,
    );
    expect(
        "GSSENCRequest, SSLRequest, SSLRequest",
        exchange(port, &[&GSS, &SSL, &SSL], quiet).await,
        vec![n(), n(), unsupported("5679")],
        true,
    );
    expect(
        "SSLRequest, GSSENCRequest, GSSENCRequest",
        exchange(port, &[&SSL, &GSS, &GSS], quiet).await,
        vec![n(), n(), unsupported("5680")],
        true,
    );
    expect(
        "SSLRequest, GSSENCRequest, then a login",
        exchange(port, &[&SSL, &GSS, &login], quiet).await,
        vec![n(), n(), "R".into(), "Z".into()],
        false,
    );
    expect(
        "GSSENCRequest with a login in one write",
        exchange(port, &[&[&GSS[..], &login].concat()], quiet).await,
        vec![
            n(),
            fatal(
                "08P01",
                "received unencrypted data after GSSAPI encryption request",
                Some(DETAIL),
            ),
        ],
        true,
    );
    expect(
        "SSLRequest with a login in one write",
        exchange(port, &[&[&SSL[..], &login].concat()], quiet).await,
        vec![
            n(),
            fatal(
                "08P01",
                "received unencrypted data after SSL request",
                Some(DETAIL),
            ),
        ],
        true,
    );
}

/// Over TLS no second SSLRequest (nor a GSSENCRequest) may come: FATAL 0A000 over TLS, as
/// PostgreSQL; a login then works as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ssl_request_inside_tls() {
    let certs = Certs::new();
    let pg = Postgres::start();
    let general = format!(
        "client_tls_sslmode = \"require\"\nclient_tls_cert_file = \"{}\"\n\
         client_tls_key_file = \"{}\"\n",
        certs.server.cert.display(),
        certs.server.key.display(),
    );
    let pooler = Pooler::start(&config(&pg, "postgres", &general)).await;
    for (request, version) in [(SSL, "5679"), (GSS, "5680")] {
        let mut s = tls_connect(
            pooler.port(),
            tls_config(&certs.ca, None),
            Negotiation::SslRequest,
        )
        .await
        .unwrap();
        s.send(&request).await.unwrap();
        let (tag, body) = s.recv().await.unwrap().expect("an ErrorResponse");
        assert_eq!(tag, b'E');
        let e = PgError::parse(&body);
        assert_eq!((e.severity.as_str(), e.code.as_str()), ("FATAL", "0A000"));
        assert_eq!(
            e.message,
            format!("unsupported frontend protocol 1234.{version}: server supports 3.0 to 3.0")
        );
        assert!(matches!(s.recv().await, Ok(None) | Err(_)), "not closed");
    }
    let mut s = tls_connect(
        pooler.port(),
        tls_config(&certs.ca, None),
        Negotiation::SslRequest,
    )
    .await
    .unwrap();
    s.login("postgres", "postgres").await.unwrap();
}

/// Two StartupMessages in one write: the second is read where the password (or, after a
/// trusting login, the first query) belongs, and refused at once by its first byte, as
/// PostgreSQL does: FATAL 08P01 "expected SASL response, got message type 0" (SCRAM),
/// "expected password response ..." (md5), "invalid frontend message type 0" (trust), not a
/// wait for the rest of a message that will never come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_startup_messages_in_one_write_are_refused_at_once() {
    let pg = Postgres::start_with(PgOptions {
        auth: "scram-sha-256",
        conf: String::new(),
    });
    pg.create_user("app", "app-secret");
    pg.sql(
        "postgres",
        "SET password_encryption = 'md5'; CREATE ROLE appmd5 LOGIN PASSWORD 'app-secret'",
    );
    // md5 on the server for the md5 role, SCRAM for the others.
    set_hba(
        &pg,
        "host all postgres 127.0.0.1/32 trust\nhost all appmd5 127.0.0.1/32 md5\n\
         host all all 127.0.0.1/32 scram-sha-256\n",
    );
    for (auth, user, direct) in [
        ("scram-sha-256", "app", "app"),
        ("md5", "app", "appmd5"),
        ("trust", "postgres", "postgres"),
    ] {
        let users = match auth {
            "trust" => String::new(),
            _ => "[users.app]\npassword = \"app-secret\"\n".to_string(),
        };
        let toml = format!(
            "[general]\nlisten_port = 0\nauth_type = \"{auth}\"\nclient_login_timeout = 60000\n\n\
             {users}\n[databases.postgres]\nhost = \"127.0.0.1\"\nport = {}\nuser = \"postgres\"\n",
            pg.port
        );
        let pooler = Pooler::start(&toml).await;
        // With only a user name the second packet is short: its first five bytes, read as a
        // message header, announce a body of a few kB, which never comes (the hang).
        for short in [false, true] {
            let two = |u: &str| match short {
                false => [startup(u), startup(u)].concat(),
                true => [wire::startup(&[("user", u)]), wire::startup(&[("user", u)])].concat(),
            };
            let start = Instant::now();
            let quiet = Duration::from_secs(20);
            let (to_pg, to_pooler) = (two(direct), two(user));
            let (to_pg, to_pooler): ([&[u8]; 1], [&[u8]; 1]) = ([&to_pg], [&to_pooler]);
            let (direct, pooled) = tokio::join!(
                exchange(pg.port, &to_pg, quiet),
                exchange(pooler.port(), &to_pooler, quiet)
            );
            let what = format!("{auth}, short {short}");
            assert!(start.elapsed() < Duration::from_secs(10), "{what}: slow");
            assert_eq!(comparable(&pooled), comparable(&direct), "{what}");
            assert!(pooled.closed, "{what}");
        }
    }
}

/// A login that runs out of time before the client has authenticated is closed without a word,
/// as PostgreSQL's authentication_timeout closes it: while it waits for the startup packet (or
/// the rest of it), after answering an SSLRequest ('N', or 'S' and no handshake), and in the
/// middle of a SCRAM exchange (its FATAL "canceling authentication due to timeout" goes to
/// the server's log only). Both sides here give up after 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_out_of_time_is_closed_without_a_word() {
    let certs = Certs::new();
    let pg = postgres_tls_with(
        &certs.server,
        &certs.ca.cert_file,
        "host all all 127.0.0.1/32 scram-sha-256\n",
        PgOptions {
            auth: "scram-sha-256",
            conf: "authentication_timeout = 1".into(),
        },
    );
    pg.create_user("app", "app-secret");
    let general = format!(
        "client_login_timeout = 1000\nclient_tls_sslmode = \"prefer\"\nclient_tls_cert_file = \"{}\"\n\
         client_tls_key_file = \"{}\"\n",
        certs.server.cert.display(),
        certs.server.key.display(),
    );
    let toml = format!(
        "{}\n[users.app]\npassword = \"app-secret\"\n",
        config(&pg, "postgres", &general).replace("\"trust\"", "\"scram-sha-256\"")
    );
    let pooler = Pooler::start(&toml).await;
    let login = startup("app");
    let cases: [(&str, Vec<&[u8]>); 5] = [
        ("nothing sent", vec![]),
        ("half a startup packet", vec![&login[..login.len() / 2]]),
        ("a length word only", vec![&login[..4]]),
        ("an SSLRequest, then nothing", vec![&SSL]),
        ("a stalled SCRAM exchange", vec![&login]),
    ];
    // Every case on both sides at once: each waits out the timeout.
    let quiet = Duration::from_secs(4);
    let (pg_port, port) = (pg.port, pooler.port());
    let runs = cases.iter().map(|(what, parts)| async move {
        let start = Instant::now();
        let (direct, pooled) = tokio::join!(
            exchange(pg_port, parts, quiet),
            exchange(port, parts, quiet)
        );
        (*what, start.elapsed(), direct, pooled)
    });
    for (what, took, direct, pooled) in futures_util::future::join_all(runs).await {
        assert!(
            direct.closed,
            "{what}: PostgreSQL did not close: {direct:?}"
        );
        assert_eq!(
            comparable(&pooled),
            comparable(&direct),
            "{what}: pgcorral (left) and PostgreSQL (right) answer differently"
        );
        let (msgs, _) = comparable(&direct);
        assert!(
            !msgs.iter().any(|m| m.starts_with("E ")),
            "{what}: {msgs:?}"
        );
        assert!(took < quiet, "{what}: {took:?}");
    }
}

/// A StartupMessage of `params` (any bytes but NUL), then, when `sql` is given, a Query for it
/// in the same write.
fn login_then(params: &[(&[u8], &[u8])], sql: Option<&str>) -> Vec<u8> {
    let mut out = bytes::BytesMut::new();
    pgwire::encode::startup(&mut out, params);
    if let Some(sql) = sql {
        pgwire::encode::query(&mut out, sql);
    }
    out.to_vec()
}

/// An ErrorResponse's SQLSTATE and message (as sent: any bytes).
type Failure = (String, Vec<u8>);

/// The first ErrorResponse in `a`, and the first column of its first DataRow.
fn error_and_value(a: &Answer) -> (Option<Failure>, Option<Vec<u8>>) {
    let (mut error, mut value) = (None, None);
    let mut rest = &a.bytes[..];
    while rest.len() >= 5 {
        let len = i32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
        let Some(body) = rest.get(5..1 + len) else {
            break;
        };
        match rest[0] {
            b'E' if error.is_none() => {
                let field = |t: u8| {
                    body.split(|&b| b == 0)
                        .find(|f| f.first() == Some(&t))
                        .map(|f| f[1..].to_vec())
                        .unwrap_or_default()
                };
                let code = String::from_utf8(field(b'C')).unwrap();
                error = Some((code, field(b'M')));
            }
            b'D' if value.is_none() => {
                let n = i32::from_be_bytes(body[2..6].try_into().unwrap()) as usize;
                value = Some(body[6..6 + n].to_vec());
            }
            _ => {}
        }
        rest = &rest[1 + len..];
    }
    (error, value)
}

/// Startup parameters that are not UTF-8 (PostgreSQL takes any bytes there, whatever the
/// encoding): a user or database is quoted as sent in the error that refuses it, as
/// PostgreSQL quotes a role or database that does not exist (pgcorral's message for a database
/// says where it looked); application_name loses each byte outside printable ASCII to `?`, as
/// in PostgreSQL; a `_pq_.` option is announced unknown as sent. Any other setting whose bytes
/// are not UTF-8 refuses the login with 22021 (PostgreSQL keeps the bytes, which pgcorral could
/// carry to a pooled server only in SQL, where they are refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_parameters_that_are_not_utf8() {
    let pg = Postgres::start();
    let pooler = Pooler::start(&config(&pg, "postgres", "")).await;
    let quiet = Duration::from_millis(1500);
    let both = |bytes: Vec<u8>| {
        let (pg, port) = (pg.port, pooler.port());
        async move {
            let parts: [&[u8]; 1] = [&bytes];
            tokio::join!(exchange(pg, &parts, quiet), exchange(port, &parts, quiet))
        }
    };
    let db: (&[u8], &[u8]) = (b"database", b"postgres");
    for (what, params, code, message) in [
        (
            "user",
            vec![(&b"user"[..], &b"p\xffx"[..]), db],
            "28000",
            &b"role \"p\xffx\" does not exist"[..],
        ),
        (
            "user and database",
            vec![(b"user", b"p\xffx"), (b"database", b"d\xfe")],
            "28000",
            b"role \"p\xffx\" does not exist",
        ),
        (
            "database",
            vec![(b"user", b"postgres"), (b"database", b"po\xffstgres")],
            "3D000",
            b"database \"po\xffstgres\" does not exist",
        ),
    ] {
        let (direct, pooled) = both(login_then(&params, None)).await;
        for (side, a) in [("PostgreSQL", &direct), ("pgcorral", &pooled)] {
            let (e, _) = error_and_value(a);
            let (c, m) = e.unwrap_or_else(|| panic!("{what}: {side}: no error in {a:?}"));
            assert_eq!(c, code, "{what}: {side}");
            assert!(
                m.starts_with(message),
                "{what}: {side}: {:?}",
                String::from_utf8_lossy(&m)
            );
            assert!(a.closed, "{what}: {side}");
        }
    }
    let user: (&[u8], &[u8]) = (b"user", b"postgres");
    // application_name, cleaned alike.
    let app = login_then(
        &[user, db, (b"application_name", b"a\xffb\xc3\xa9")],
        Some("SHOW application_name"),
    );
    let (direct, pooled) = both(app).await;
    assert_eq!(error_and_value(&direct).1.as_deref(), Some(&b"a?b??"[..]));
    assert_eq!(error_and_value(&pooled), error_and_value(&direct));
    // A protocol option, listed as sent.
    let (direct, pooled) = both(login_then(&[user, db, (b"_pq_.a\xff", b"1")], None)).await;
    assert_eq!(comparable(&pooled), comparable(&direct));
    assert!(comparable(&direct).0[0].starts_with("v "), "{direct:?}");
    // Other settings: refused by pgcorral, the first bad character named.
    for (what, param, bytes) in [
        (
            "a value",
            (&b"search_path"[..], &b"a\xe9b"[..]),
            "0xe9 0x62",
        ),
        ("options", (b"options", b"-c search_path=a\xffb"), "0xff"),
        ("a name", (b"my\xff.opt", b"1"), "0xff"),
    ] {
        let sql = Some("SHOW search_path");
        let pooled = exchange(
            pooler.port(),
            &[&login_then(&[user, db, param], sql)],
            quiet,
        )
        .await;
        let (e, _) = error_and_value(&pooled);
        let want = format!("invalid byte sequence for encoding \"UTF8\": {bytes}");
        assert_eq!(
            e,
            Some(("22021".to_string(), want.into_bytes())),
            "{what}: {pooled:?}"
        );
        assert!(pooled.closed, "{what}");
    }
    // PostgreSQL keeps such bytes as they are.
    let app = login_then(
        &[user, db, (b"search_path", b"a\xe9b")],
        Some("SHOW search_path"),
    );
    let (direct, _) = both(app).await;
    assert_eq!(error_and_value(&direct), (None, Some(b"a\xe9b".to_vec())));

    // Where pgcorral knows its users, such a name is an unknown user's, even beside a user
    // its lossy reading would name: with a password the exchange runs (and fails); trusted,
    // it is refused at once.
    for auth in ["scram-sha-256", "trust"] {
        let toml = format!(
            "{}\n[users.app]\npassword = \"app-secret\"\n[users.\"a\u{fffd}pp\"]\n\
             password = \"app-secret\"\n",
            config(&pg, "postgres", "").replace("\"trust\"", &format!("\"{auth}\""))
        );
        let pooler = Pooler::start(&toml).await;
        let sent = login_then(&[(b"user", b"a\xffpp"), db], None);
        let pooled = exchange(pooler.port(), &[&sent], quiet).await;
        if auth == "trust" {
            let e = error_and_value(&pooled).0;
            let want = b"\"trust\" authentication failed for user \"a\xffpp\"".to_vec();
            assert_eq!(e, Some(("28000".to_string(), want)), "{pooled:?}");
        } else {
            assert_eq!(comparable(&pooled), (vec!["R".into()], false), "{pooled:?}");
        }
    }
}
