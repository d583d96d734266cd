//! The data path over TLS, on both hops at once: clients reach pgcorral over TLS
//! (`client_tls_sslmode = "require"`) and pgcorral reaches an `ssl = on` PostgreSQL over TLS
//! (`server_tls_sslmode = "verify-full"`), with two workers so that clients and servers move
//! between reactors. Large results, COPY both ways, a slow reader (pgcorral's memory stays
//! bounded), pgbench with every protocol, clients moving between workers (also with the end
//! of an answer still in pgcorral's TLS session), answers ending in the TLS session inside a
//! transaction and in session mode, pipelined requests, cancel requests over TLS, many idle
//! TLS clients, and the SNI pgcorral sends to PostgreSQL.

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use support::tls::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::ToSql;
use tokio_postgres::SimpleQueryMessage;
use tokio_rustls::rustls::ServerConfig;

// ---- setup ----------------------------------------------------------------------------------

/// pg_hba.conf lines after the superuser's: `app` may log in over TLS only, so a server
/// connection of pgcorral's that is not TLS fails its login.
const HBA_APP_TLS_ONLY: &str =
    "hostssl all app 127.0.0.1/32 trust\nhostnossl all app 127.0.0.1/32 reject";

/// Rows of the large results: `g` and `lpad(g, 1000, letter)`, about 1 kB each.
const BIG_ROWS: u64 = 100_000;

/// A query returning `rows` rows (g, value of `width` bytes): the value is g's digits padded
/// on the left with a letter that depends on g, so each row can be checked on its own.
fn rows_sql(rows: u64, width: usize) -> String {
    format!("SELECT g, lpad(g::text, {width}, chr(65 + g % 26)) FROM generate_series(1, {rows}) g")
}

/// An `ssl = on` PostgreSQL presenting `certs.server` (localhost, 127.0.0.1), with a superuser
/// `app` that may only log in over TLS.
fn ssl_postgres(certs: &Certs) -> Postgres {
    let pg = postgres_tls(certs, HBA_APP_TLS_ONLY);
    pg.sql("postgres", "CREATE ROLE app LOGIN SUPERUSER");
    pg
}

/// A pgcorral config with TLS on both hops (clients must use TLS; PostgreSQL at `host`:`port`
/// verified with verify-full), two workers, trust logins, and `general` lines added.
fn cfg_at(host: &str, port: u16, certs: &Certs, general: &str) -> String {
    format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\nworkers = 2\n\
         server_connect_timeout = 5000\n\
         client_tls_sslmode = \"require\"\nclient_tls_cert_file = \"{cert}\"\n\
         client_tls_key_file = \"{key}\"\n\
         server_tls_sslmode = \"verify-full\"\nserver_tls_ca_file = \"{ca}\"\n{general}\n\n\
         [databases.postgres]\nhost = \"{host}\"\nport = {port}\n",
        cert = certs.server.cert.display(),
        key = certs.server.key.display(),
        ca = certs.ca.cert_file.display(),
    )
}

/// `cfg_at` for `pg` at 127.0.0.1.
fn cfg(pg: &Postgres, certs: &Certs, general: &str) -> String {
    cfg_at("127.0.0.1", pg.port, certs, general)
}

/// A tokio-postgres client over TLS (sslmode require, the certificate verified against the
/// test CA) to pgcorral at `port`, as `app`.
async fn tls_client(port: u16, certs: &Certs) -> tokio_postgres::Client {
    within(
        Duration::from_secs(30),
        "TLS login to pgcorral",
        connect_tls(
            port,
            "app",
            None,
            "postgres",
            tls_config(&certs.ca, None),
            |_| {},
        ),
    )
    .await
    .unwrap_or_else(|e| panic!("TLS login to pgcorral: {e:?}"))
}

/// Checks that `c`'s queries reach PostgreSQL over TLS (the client's own hop is TLS by
/// construction: pgcorral requires it).
async fn assert_server_hop_tls(c: &tokio_postgres::Client) {
    assert_eq!(
        scalar(c, SSL_OF_BACKEND).await.unwrap().as_deref(),
        Some("t"),
        "pgcorral's server connection is not TLS"
    );
}

/// A raw protocol client over TLS to pgcorral at `port`, logged in as `app`.
async fn raw_tls_client(port: u16, certs: &Certs) -> PgStream<TlsStream> {
    let mut s = tls_connect(port, tls_config(&certs.ca, None), Negotiation::SslRequest)
        .await
        .expect("TLS to pgcorral");
    s.login("app", "postgres").await.expect("raw TLS login");
    s
}

/// As `raw_tls_client`, with the client's socket receive buffer fixed at `rcvbuf` bytes (no
/// autotuning: the kernel then buffers a steady amount of an answer the client does not read).
async fn raw_tls_client_with_rcvbuf(port: u16, certs: &Certs, rcvbuf: u32) -> PgStream<TlsStream> {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(rcvbuf).unwrap();
    let mut tcp = sock
        .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap();
    tcp.write_all(&ssl_request_bytes()).await.unwrap();
    assert_eq!(tcp.read_u8().await.unwrap(), b'S', "SSLRequest answered");
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("127.0.0.1")
        .unwrap()
        .to_owned();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(tls_config(&certs.ca, None)))
        .connect(name, tcp)
        .await
        .expect("TLS to pgcorral");
    let mut s = PgStream::new(tls);
    s.login("app", "postgres").await.expect("raw TLS login");
    s
}

// ---- checking rows ---------------------------------------------------------------------------

/// What came back of a `rows_sql` query: every row is checked as it arrives (in order, value
/// exactly as PostgreSQL computes it), and counted and hashed (64-bit FNV-1a over
/// "g\tvalue\n"), so that two paths can be compared without keeping the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tally {
    rows: u64,
    bytes: u64,
    hash: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            rows: 0,
            bytes: 0,
            hash: FNV_OFFSET,
        }
    }

    fn fnv(&mut self, bytes: &[u8]) {
        fnv(&mut self.hash, bytes);
    }

    /// Adds row (`g`, `value`) of a `rows_sql(_, width)` result; Err when it is not the next
    /// row or its value is not what PostgreSQL computes.
    fn row(&mut self, g: &[u8], value: &[u8], width: usize) -> Result<(), String> {
        let want = self.rows + 1;
        let digits = want.to_string();
        if g != digits.as_bytes() {
            return Err(format!(
                "row {want}: g = {:?}",
                String::from_utf8_lossy(&g[..g.len().min(40)])
            ));
        }
        let letter = b'A' + (want % 26) as u8;
        let pad = width - digits.len();
        if value.len() != width
            || !value[..pad].iter().all(|&b| b == letter)
            || &value[pad..] != digits.as_bytes()
        {
            return Err(format!(
                "row {want}: value of {} bytes starting {:?}, ending {:?}",
                value.len(),
                String::from_utf8_lossy(&value[..value.len().min(16)]),
                String::from_utf8_lossy(&value[value.len().saturating_sub(16)..])
            ));
        }
        self.rows += 1;
        self.bytes += value.len() as u64;
        self.fnv(g);
        self.fnv(b"\t");
        self.fnv(value);
        self.fnv(b"\n");
        Ok(())
    }
}

/// `sql` (a `rows_sql` query) through tokio-postgres' extended protocol, streamed.
async fn tally_extended(c: &tokio_postgres::Client, sql: &str, width: usize) -> Tally {
    let rows = c
        .query_raw(sql, std::iter::empty::<&(dyn ToSql + Sync)>())
        .await
        .unwrap();
    futures_util::pin_mut!(rows);
    let mut t = Tally::new();
    while let Some(row) = rows.next().await {
        let row = row.unwrap();
        let g: i32 = row.get(0);
        let v: &str = row.get(1);
        t.row(g.to_string().as_bytes(), v.as_bytes(), width)
            .unwrap();
    }
    t
}

/// `sql` (a `rows_sql` query) through tokio-postgres' simple protocol, streamed.
async fn tally_simple(c: &tokio_postgres::Client, sql: &str, width: usize) -> Tally {
    let msgs = c.simple_query_raw(sql).await.unwrap();
    futures_util::pin_mut!(msgs);
    let mut t = Tally::new();
    while let Some(m) = msgs.next().await {
        if let SimpleQueryMessage::Row(r) = m.unwrap() {
            let g = r.get(0).unwrap();
            let v = r.get(1).unwrap();
            t.row(g.as_bytes(), v.as_bytes(), width).unwrap();
        }
    }
    t
}

/// Backend messages of a `rows_sql` query read off a raw stream, in whatever pieces they
/// arrive: rows are checked as in [`Tally`], up to ReadyForQuery.
struct RawRows {
    buf: Vec<u8>,
    width: usize,
    tally: Tally,
    done: bool,
}

impl RawRows {
    fn new(width: usize) -> RawRows {
        RawRows {
            buf: Vec::new(),
            width,
            tally: Tally::new(),
            done: false,
        }
    }

    fn feed(&mut self, data: &[u8]) -> Result<(), String> {
        if self.done {
            return Err(format!("{} bytes after ReadyForQuery", data.len()));
        }
        self.buf.extend_from_slice(data);
        let mut pos = 0;
        while self.buf.len() - pos >= 5 {
            let tag = self.buf[pos];
            let len = u32::from_be_bytes(self.buf[pos + 1..pos + 5].try_into().unwrap()) as usize;
            if self.buf.len() - pos < 1 + len {
                break;
            }
            let body = &self.buf[pos + 5..pos + 1 + len];
            match tag {
                b'D' => {
                    let cols = data_row(body);
                    let (Some(g), Some(v)) = (cols.first(), cols.get(1)) else {
                        return Err(format!("a row with {} columns", cols.len()));
                    };
                    self.tally.row(g, v, self.width)?;
                }
                b'E' => {
                    let e = PgError::parse(body);
                    return Err(format!("error {} {}", e.code, e.message));
                }
                b'Z' => self.done = true,
                b'T' | b'C' => {}
                other => return Err(format!("unexpected message {:?}", other as char)),
            }
            pos += 1 + len;
            if self.done && pos != self.buf.len() {
                return Err("bytes after ReadyForQuery".into());
            }
        }
        self.buf.drain(..pos);
        Ok(())
    }
}

/// The (non-NULL) column values of a DataRow body.
fn data_row(body: &[u8]) -> Vec<&[u8]> {
    let n = i16::from_be_bytes([body[0], body[1]]);
    let mut pos = 2;
    let mut cols = Vec::new();
    for _ in 0..n {
        let len = i32::from_be_bytes(body[pos..pos + 4].try_into().unwrap());
        pos += 4;
        let len = len.max(0) as usize;
        cols.push(&body[pos..pos + len]);
        pos += len;
    }
    cols
}

/// Reads the answer to a `rows_sql(_, width)` query off `s` at no more than `rate` bytes/s
/// (0: as fast as it comes), calling `each` after every read; the rows' tally.
async fn read_rows_at(
    s: &mut PgStream<TlsStream>,
    width: usize,
    rate: u64,
    mut each: impl FnMut(),
) -> Tally {
    let mut rows = RawRows::new(width);
    let mut chunk = vec![0u8; 64 * 1024];
    let start = Instant::now();
    let mut total = 0u64;
    while !rows.done {
        let n = tokio::time::timeout(Duration::from_secs(30), s.stream.read(&mut chunk))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "nothing to read for 30 s after {total} bytes, {} rows",
                    rows.tally.rows
                )
            })
            .unwrap_or_else(|e| panic!("read after {total} bytes: {e}"));
        assert!(
            n > 0,
            "pgcorral closed the connection after {total} bytes, {} rows",
            rows.tally.rows
        );
        total += n as u64;
        rows.feed(&chunk[..n]).unwrap();
        each();
        if rate > 0 {
            let due = Duration::from_secs_f64(total as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }
    rows.tally
}

// ---- 1. large results -----------------------------------------------------------------------

/// A ~100 MB result streams through TLS on both hops intact, with the extended and the simple
/// protocol: the same 100,000 rows, in order, byte for byte what PostgreSQL sends directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_result_streams_through_tls_on_both_hops_intact() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let p = Pooler::start(&cfg(&pg, &certs, "")).await;
    let c = tls_client(p.port(), &certs).await;
    assert_server_hop_tls(&c).await;
    let sql = rows_sql(BIG_ROWS, 1000);

    let direct = connect(pg.port, "postgres", None, "postgres")
        .await
        .unwrap();
    let want = within(
        Duration::from_secs(120),
        "the result directly from PostgreSQL",
        tally_extended(&direct, &sql, 1000),
    )
    .await;
    assert_eq!(want.rows, BIG_ROWS);
    assert_eq!(want.bytes, BIG_ROWS * 1000);

    let extended = within(
        Duration::from_secs(180),
        "the result through pgcorral, extended protocol",
        tally_extended(&c, &sql, 1000),
    )
    .await;
    assert_eq!(extended, want, "extended protocol");
    let simple = within(
        Duration::from_secs(180),
        "the result through pgcorral, simple protocol",
        tally_simple(&c, &sql, 1000),
    )
    .await;
    assert_eq!(simple, want, "simple protocol");

    // The connection is in frame afterwards.
    assert_eq!(
        scalar(&c, "SELECT 42").await.unwrap().as_deref(),
        Some("42")
    );
    assert_server_hop_tls(&c).await;
}

// ---- 2. COPY --------------------------------------------------------------------------------

/// COPY FROM STDIN of ~50 MB over TLS on both hops, sent in uneven pieces, then COPY TO STDOUT
/// of the table: exactly the bytes that went in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_and_out_of_50_mb_over_tls_on_both_hops_round_trips() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let p = Pooler::start(&cfg(&pg, &certs, "")).await;
    let c = tls_client(p.port(), &certs).await;
    assert_server_hop_tls(&c).await;
    c.batch_execute("CREATE TABLE copy_tls (id int PRIMARY KEY, a text, b text)")
        .await
        .unwrap();

    // COPY text format, as COPY TO STDOUT writes it back: escapes (\t, \\, \N), multibyte
    // characters, rows of varying length.
    const ROWS: usize = 240_000;
    let mut input = Vec::with_capacity(ROWS * 250);
    for i in 1..=ROWS {
        let letter = (b'a' + (i % 26) as u8) as char;
        let a: String = std::iter::repeat_n(letter, 150 + i % 97).collect();
        let b = match i % 7 {
            0 => "\\N".to_string(),
            1 => format!("tab\\there \\\\ {}", i * 31 % 1000),
            _ => format!("é{}ü-{}", "ß".repeat(i % 5), i),
        };
        input.extend_from_slice(format!("{i}\t{a}\t{b}\n").as_bytes());
    }
    assert!(input.len() > 45 << 20, "{} bytes of input", input.len());
    let mut want = Tally::new();
    want.fnv(&input);

    let copy_in = async {
        let sink = c.copy_in("COPY copy_tls FROM STDIN").await.unwrap();
        futures_util::pin_mut!(sink);
        let mut rest = &input[..];
        let mut k = 0;
        while !rest.is_empty() {
            let n = [1, 777, 8192, 65_536, 300_001, 16_385][k % 6].min(rest.len());
            sink.send(Bytes::copy_from_slice(&rest[..n])).await.unwrap();
            rest = &rest[n..];
            k += 1;
        }
        sink.finish().await.unwrap()
    };
    let copied = within(Duration::from_secs(180), "COPY FROM STDIN", copy_in).await;
    assert_eq!(copied, ROWS as u64);
    assert_eq!(
        scalar(&c, "SELECT count(*) FROM copy_tls")
            .await
            .unwrap()
            .as_deref(),
        Some(ROWS.to_string().as_str())
    );

    let copy_out = async {
        let stream = c
            .copy_out("COPY (SELECT * FROM copy_tls ORDER BY id) TO STDOUT")
            .await
            .unwrap();
        futures_util::pin_mut!(stream);
        let mut got = Tally::new();
        let mut len = 0usize;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.unwrap();
            got.fnv(&chunk);
            len += chunk.len();
        }
        (got.hash, len)
    };
    let (hash, len) = within(Duration::from_secs(180), "COPY TO STDOUT", copy_out).await;
    assert_eq!(len, input.len(), "COPY OUT length");
    assert_eq!(hash, want.hash, "COPY OUT differs from what COPY IN sent");

    assert_eq!(scalar(&c, "SELECT 7").await.unwrap().as_deref(), Some("7"));
    assert_server_hop_tls(&c).await;
}

// ---- 3. a slow reader -----------------------------------------------------------------------

/// pgcorral's resident set size (VmRSS) in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("pgcorral runs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// A TLS client that reads ~100 MB slowly (nothing at all for 2 s, then at 20 MB/s) gets every
/// byte, and pgcorral (the binary, so that its memory is its own) buffers little of it: its
/// RSS grows by far less than the result while it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tls_reader_gets_every_byte_while_pgcorral_memory_stays_bounded() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let p = PoolerProcess::start(&cfg(&pg, &certs, ""));
    let pid = p.child.id();
    let mut s = raw_tls_client(p.port, &certs).await;
    assert_eq!(
        s.scalar(SSL_OF_BACKEND).await.unwrap().as_deref(),
        Some("t")
    );
    // Warm up the data path once (buffers, TLS records) before taking the baseline.
    assert_eq!(
        s.scalar("SELECT length(repeat('w', 200000))")
            .await
            .unwrap()
            .as_deref(),
        Some("200000")
    );
    let base = rss_kib(pid);
    let mut peak = base;

    s.send(&wire::query(&rows_sql(BIG_ROWS, 1000)))
        .await
        .unwrap();
    // Nothing read for 2 s: PostgreSQL, pgcorral and the sockets fill up, and must stop there.
    let pause = Instant::now();
    while pause.elapsed() < Duration::from_secs(2) {
        peak = peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut last_sample = Instant::now();
    let got = within(
        Duration::from_secs(240),
        "the slow read",
        read_rows_at(&mut s, 1000, 20_000_000, || {
            if last_sample.elapsed() >= Duration::from_millis(50) {
                last_sample = Instant::now();
                peak = peak.max(rss_kib(pid));
            }
        }),
    )
    .await;
    assert_eq!(got.rows, BIG_ROWS);
    assert_eq!(got.bytes, BIG_ROWS * 1000);

    let growth_mib = (peak.saturating_sub(base)) / 1024;
    eprintln!("pgcorral RSS: {} KiB before, peak {} KiB", base, peak);
    assert!(
        growth_mib < 64,
        "pgcorral's RSS grew by {growth_mib} MiB while ~100 MB passed to a slow reader \
         ({base} KiB -> {peak} KiB)"
    );
    assert_eq!(s.scalar("SELECT 5").await.unwrap().as_deref(), Some("5"));
}

// ---- 4. pgbench -----------------------------------------------------------------------------

/// Runs `c` (blocking), killing it if it has not finished within `limit`: its output then
/// tells how far it got (and the status says it was killed).
fn output_within(mut c: std::process::Command, limit: Duration) -> std::process::Output {
    let mut child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("command runs");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            eprintln!("{c:?}: still running after {limit:?}; killed");
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// pgbench (8 clients, 2 threads) over TLS on both hops with the simple, extended and prepared
/// protocols, while the busy worker flips every 20 ms so that clients move between the two
/// workers and the servers follow them: no failed transaction.
///
/// The pool has a server per client: pgbench 15 prepares each statement with a synchronous
/// PQprepare the first time a client runs it, which blocks the pgbench thread of all its
/// clients; with fewer servers than clients per thread, that Parse waits for a server held
/// in a transaction by another client of the blocked thread, forever (with or without TLS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_over_tls_on_both_hops_with_every_protocol_while_clients_move() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let mut init = pgbench_cmd(pg.port, "postgres", "postgres", None);
    init.args(["-i", "-q", "-s", "1"]);
    let o = tokio::task::spawn_blocking(move || output(init))
        .await
        .unwrap();
    assert!(o.status.success(), "pgbench -i: {}", stderr(&o));

    let p = Pooler::start(&cfg(&pg, &certs, "default_pool_size = 8")).await;
    let services = p.services.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut busy = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut loads = [0u32; 2];
                loads[busy] = 990;
                services.balance.freeze_loads(&loads);
                busy = 1 - busy;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    for protocol in ["simple", "extended", "prepared"] {
        let before = p.services.balance.moves();
        let mut run = pgbench_cmd(p.port(), "app", "postgres", None);
        run.env("PGSSLMODE", "require")
            .env("PGSSLROOTCERT", &certs.ca.cert_file)
            .env("PGSSLCERT", certs.missing())
            .env("PGSSLKEY", certs.missing())
            .env_remove("PGSSLNEGOTIATION");
        run.args([
            "-n",
            "-c",
            "8",
            "-j",
            "2",
            "-T",
            "4",
            "--protocol",
            protocol,
        ]);
        let o = tokio::task::spawn_blocking(move || output_within(run, Duration::from_secs(120)))
            .await
            .unwrap();
        let tx = assert_pgbench_ok(&format!("pgbench --protocol {protocol}"), &o);
        let moves = p.services.balance.moves() - before;
        eprintln!("pgbench --protocol {protocol}: {tx} transactions, {moves} client moves");
        assert!(moves > 0, "{protocol}: no client moved between workers");
    }
    stop.store(true, Ordering::Relaxed);
    flipper.await.unwrap();

    // Every server connection pgcorral holds is TLS (and `app` could not log in otherwise).
    let links = pg.sql(
        "postgres",
        "SELECT count(*) FILTER (WHERE s.ssl) || ' ' || count(*) FILTER (WHERE NOT s.ssl) \
         FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = 'app'",
    );
    let (tls, plain) = links.split_once(' ').unwrap();
    assert!(
        tls.parse::<u32>().unwrap() > 0,
        "no TLS server links: {links}"
    );
    assert_eq!(plain, "0", "plaintext server links: {links}");
}

// ---- 5. clients moving between workers ------------------------------------------------------

/// TLS clients move off a busy worker at a transaction boundary (their socket is re-registered
/// with the other worker's reactor, their TLS session goes with it) and keep answering; the one
/// pooled TLS server link follows them from worker to worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_clients_moved_off_a_busy_worker_keep_answering() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let p = Pooler::start(&cfg(&pg, &certs, "default_pool_size = 1")).await;
    let balance = &p.services.balance;
    balance.freeze_loads(&[0, 0]);
    assert_eq!(balance.pick(), Some(0));
    let a = tls_client(p.port(), &certs).await;
    let pid = backend_pid(&a).await;
    assert_server_hop_tls(&a).await;

    // Counted before the load changes (see limits.rs: `a` may reach its boundary only after).
    let before = balance.moves();
    balance.freeze_loads(&[950, 0]);
    assert_eq!(balance.pick(), Some(1), "new clients avoid the busy worker");
    let b = tls_client(p.port(), &certs).await;
    for _ in 0..20 {
        assert_eq!(backend_pid(&a).await, pid);
        assert_eq!(backend_pid(&b).await, pid);
        tokio::time::sleep(Duration::from_millis(6)).await;
    }
    assert!(
        balance.moves() > before,
        "the idle TLS client on the busy worker moved"
    );

    // Back and forth under concurrent use, with answers of several TLS records.
    let before = balance.moves();
    balance.freeze_loads(&[0, 950]);
    let tasks: Vec<_> = [a, b]
        .into_iter()
        .enumerate()
        .map(|(n, c)| {
            tokio::spawn(async move {
                for i in 0..100 {
                    let len = 1 + (n * 7919 + i * 4099) % 60_000;
                    let got = scalar(&c, &format!("SELECT repeat('m', {len})"))
                        .await
                        .unwrap()
                        .unwrap();
                    assert_eq!(got.len(), len);
                    assert!(got.bytes().all(|b| b == b'm'));
                }
                c
            })
        })
        .collect();
    let mut clients = Vec::new();
    for t in tasks {
        clients.push(within(Duration::from_secs(60), "clients", t).await.unwrap());
    }
    assert!(balance.moves() > before, "no client moved back");
    for c in &clients {
        assert_eq!(backend_pid(c).await, pid);
        assert_server_hop_tls(c).await;
    }
}

/// Bytes in the kernel between pgcorral's socket at local port `from` and the client's at
/// `to`: the send queue of the one plus the receive queue of the other (/proc/net/tcp).
fn kernel_queue(from: u16, to: u16) -> u64 {
    let text = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let mut total = 0;
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port = |a: &str| u16::from_str_radix(a.rsplit(':').next().unwrap(), 16).unwrap();
        let (local, remote) = (port(f[1]), port(f[2]));
        let (tx, rx) = f[4].split_once(':').unwrap();
        if (local, remote) == (from, to) {
            total += u64::from_str_radix(tx, 16).unwrap();
        } else if (local, remote) == (to, from) {
            total += u64::from_str_radix(rx, 16).unwrap();
        }
    }
    total
}

/// `kernel_queue` once the writer has started and filled what it can: the same non-zero
/// value three times, 60 ms apart.
async fn settled_queue(from: u16, to: u16) -> u64 {
    let start = Instant::now();
    let (mut last, mut same) = (0, 0);
    loop {
        tokio::time::sleep(Duration::from_millis(60)).await;
        let now = kernel_queue(from, to);
        same = if now == last && now > 0 { same + 1 } else { 0 };
        if same == 2 {
            return now;
        }
        last = now;
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the kernel's queue to the client did not settle ({now} bytes)"
        );
    }
}

/// Wire size of the answer to `SELECT repeat('x', n)` (RowDescription, one DataRow,
/// CommandComplete, ReadyForQuery).
fn repeat_answer_size(n: u64) -> u64 {
    (1 + 4 + 2 + 7 + 18) + (1 + 4 + 2 + 4 + n) + (1 + 4 + 9) + 6
}

/// Reads the answer to `SELECT repeat('x', n)` off `s`, checking it.
async fn read_repeat_answer(s: &mut PgStream<TlsStream>, n: usize) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut tags = String::new();
    loop {
        while buf.len() >= 5 {
            let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
            if buf.len() < 1 + len {
                break;
            }
            let msg: Vec<u8> = buf.drain(..1 + len).collect();
            tags.push(msg[0] as char);
            match msg[0] {
                b'D' => {
                    let cols = data_row(&msg[5..]);
                    assert_eq!(cols[0].len(), n, "the row's length");
                    assert!(cols[0].iter().all(|&b| b == b'x'), "the row's bytes");
                }
                b'E' => panic!("error: {:?}", PgError::parse(&msg[5..])),
                b'Z' => {
                    assert_eq!(tags, "TDCZ");
                    assert!(buf.is_empty(), "bytes after ReadyForQuery");
                    return;
                }
                _ => {}
            }
        }
        let r = tokio::time::timeout(Duration::from_secs(30), s.stream.read(&mut chunk)).await;
        let got = buf.len();
        let k = r
            .unwrap_or_else(|_| panic!("no more of the answer for 30 s ({tags}, {got} bytes)"))
            .unwrap();
        assert!(k > 0, "closed in the answer ({tags})");
        buf.extend_from_slice(&chunk[..k]);
    }
}

/// Sizes `SELECT repeat('x', n)` answers so that pgcorral ends up holding a few tens of kB of
/// one, the end of it, once the kernel's buffers to the client are full.
struct Steer {
    n: i64,
}

impl Steer {
    fn new() -> Steer {
        Steer { n: 6_000_000 }
    }
}

/// Runs `SELECT repeat('x', n)` on `s` (a client whose receive buffer is fixed, so the kernel
/// holds a steady amount) without reading the answer until pgcorral has written all it can:
/// true when what it could not write was a few tens of kB, less than its TLS session buffers
/// (64 kB), so that the relay wrote the end of the answer (ReadyForQuery included) into the
/// session and went on with it unsent. Then reads and checks the answer, and adjusts `n` for
/// the next time (the kernel's buffers vary a little, and grow at first).
async fn ask_leaving_the_end_in_tls(
    s: &mut PgStream<TlsStream>,
    port: u16,
    steer: &mut Steer,
) -> bool {
    let me = s.stream.get_ref().0.local_addr().unwrap().port();
    let n = steer.n;
    s.send(&wire::query(&format!("SELECT repeat('x', {n})")))
        .await
        .unwrap();
    // What pgcorral holds (in its buffers and TLS session, or not yet read from PostgreSQL)
    // once the kernel's buffers to the client are full. (The kernel holds TLS records: 22
    // bytes more per 16 kB of answer.)
    let queued = settled_queue(port, me).await as i64;
    let held = repeat_answer_size(n as u64) as i64 - (queued - queued * 22 / 16_406);
    let in_session = held > 4 * 1024 && held <= 60 * 1024;
    eprintln!("{n} bytes asked: {held} left in pgcorral, {queued} in the kernel");
    if in_session {
        // Whatever pgcorral does next (end the relay, move the client), it does it now.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    within(
        Duration::from_secs(60),
        "the answer",
        read_repeat_answer(s, n as usize),
    )
    .await;
    // Aim for 32 kB left in pgcorral next time. When all of it fitted in the kernel, what
    // the kernel can hold is not known (it grows at first): ask for more until it is.
    steer.n += if held <= 0 {
        96 * 1024
    } else {
        32 * 1024 - held
    };
    in_session
}

/// A TLS client moves to the other worker while the end of its answer (ReadyForQuery
/// included) is still in its TLS session, not yet on the socket: it gets every byte on the
/// new worker, and its next queries work. Moves both ways.
///
/// To get there, the client (its receive buffer fixed, so the kernel holds a steady amount)
/// reads nothing while pgcorral writes an answer a few tens of kB bigger than what the kernel
/// holds between them (pgcorral's send queue and the client's receive queue, from
/// /proc/net/tcp): the relay puts the rest in the TLS session (which buffers 64 kB) and ends,
/// and the client moves off its busy worker with those TLS records unsent. The answer's size
/// is adjusted from round to round until that is what happened (the kernel's buffers vary a
/// little).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_moved_with_its_answer_still_in_flight_gets_all_of_it() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let p = Pooler::start(&cfg(&pg, &certs, "default_pool_size = 1")).await;
    let balance = &p.services.balance;
    balance.freeze_loads(&[0, 0]);
    let mut s = raw_tls_client_with_rcvbuf(p.port(), &certs, 256 * 1024).await;
    assert_eq!(
        s.scalar(SSL_OF_BACKEND).await.unwrap().as_deref(),
        Some("t")
    );
    let pid = s.scalar("SELECT pg_backend_pid()").await.unwrap();

    let mut steer = Steer::new();
    let mut busy = 0;
    let mut steered = 0;
    for round in 0..30 {
        let before = balance.moves();
        // The client's worker is busy from now on: it moves when the relay ends.
        let mut loads = [0u32; 2];
        loads[busy] = 950;
        balance.freeze_loads(&loads);
        if ask_leaving_the_end_in_tls(&mut s, p.port(), &mut steer).await {
            steered += 1;
        }
        // The move happens before the client's next request is read: once this is answered,
        // it has happened.
        assert_eq!(
            s.scalar("SELECT pg_backend_pid()").await.unwrap(),
            pid,
            "round {round}: the pooled server follows"
        );
        assert!(
            balance.moves() > before,
            "round {round}: the client did not move off worker {busy}"
        );
        busy = 1 - busy;
        if steered == 3 {
            break;
        }
    }
    assert!(
        steered > 0,
        "no round ended with the end of the answer in pgcorral's TLS session"
    );
    assert_eq!(
        s.scalar(SSL_OF_BACKEND).await.unwrap().as_deref(),
        Some("t")
    );
}

/// Answers that end inside a transaction (transaction mode, after BEGIN) or in session mode,
/// where the relay goes on after the answer rather than handing the client to its idle wait:
/// the end of each answer, left in pgcorral's TLS session while the kernel's buffers to the
/// client were full (see `ask_leaving_the_end_in_tls`), still reaches the client, which only
/// then sends its next statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_ending_in_the_tls_session_arrive_inside_a_transaction_and_in_session_mode() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    for mode in ["transaction", "session"] {
        let p = Pooler::start(&cfg(&pg, &certs, &format!("pool_mode = \"{mode}\""))).await;
        let mut s = raw_tls_client_with_rcvbuf(p.port(), &certs, 256 * 1024).await;
        assert_eq!(s.scalar("BEGIN").await, Ok(None), "{mode}");
        let mut steer = Steer::new();
        let mut steered = 0;
        for _ in 0..30 {
            if ask_leaving_the_end_in_tls(&mut s, p.port(), &mut steer).await {
                steered += 1;
                if steered == 3 {
                    break;
                }
            }
        }
        assert!(
            steered > 0,
            "{mode} mode: no answer ended in pgcorral's TLS session"
        );
        assert_eq!(
            s.scalar("SELECT now() = statement_timestamp()")
                .await
                .unwrap()
                .as_deref(),
            Some("f"),
            "{mode} mode: still in the transaction"
        );
        assert_eq!(s.scalar("COMMIT").await, Ok(None), "{mode}");
        assert_eq!(
            s.scalar(SSL_OF_BACKEND).await.unwrap().as_deref(),
            Some("t")
        );
    }
}

/// One client's requests pipelined over TLS: 300 Query messages in groups of ten sent without
/// waiting for answers, some with SQL longer than a TLS record, each group written in two
/// pieces split inside a message. All are answered, in order. In the second round the busy
/// worker flips every 3 ms, so that between groups the client moves between workers (its TLS
/// session with it) while its server follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_over_tls_are_all_answered_in_order() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let p = Pooler::start(&cfg(&pg, &certs, "default_pool_size = 2")).await;
    let services = p.services.clone();
    services.balance.freeze_loads(&[0, 0]);
    let s = raw_tls_client(p.port(), &certs).await;
    let (mut rd, mut wr) = tokio::io::split(s.stream);

    const N: usize = 300;
    for round in 0..2 {
        let before = services.balance.moves();
        let stop = Arc::new(AtomicBool::new(false));
        let flipper = (round == 1).then(|| {
            let (stop, services) = (stop.clone(), services.clone());
            tokio::spawn(async move {
                let mut busy = 0;
                while !stop.load(Ordering::Relaxed) {
                    let mut loads = [0u32; 2];
                    loads[busy] = 990;
                    services.balance.freeze_loads(&loads);
                    busy = 1 - busy;
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            })
        });
        // Groups of ten queries, each group written in two flushes split inside a message
        // (so TLS records do not line up with messages), with pauses in which the pipeline
        // drains: the relay stops, the client waits idle, and may move.
        let mut groups = vec![Vec::new()];
        let mut want = Vec::new();
        for i in 0..N {
            // Every 7th carries a 20 kB literal (more than one TLS record of request).
            let pad = if i % 7 == 0 { 20_000 } else { i % 50 };
            let sql = format!(
                "SELECT '{round}-{i}:' || length('{}') || ':' || length(repeat('r', {}))",
                "q".repeat(pad),
                i * 13 % 3000
            );
            if i % 10 == 0 && i > 0 {
                groups.push(Vec::new());
            }
            groups.last_mut().unwrap().extend(wire::query(&sql));
            want.push(format!("{round}-{i}:{pad}:{}", i * 13 % 3000));
        }
        let writer = tokio::spawn(async move {
            for (k, group) in groups.iter().enumerate() {
                let (a, b) = group.split_at((k * 7919 + 13) % group.len());
                for part in [a, b] {
                    wr.write_all(part).await.unwrap();
                    wr.flush().await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            wr
        });
        let read_all = async {
            let mut buf = Vec::new();
            let mut got = Vec::new();
            let mut chunk = vec![0u8; 32 * 1024];
            let mut readies = 0;
            while readies < N {
                while buf.len() >= 5 {
                    let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
                    if buf.len() < 1 + len {
                        break;
                    }
                    let msg: Vec<u8> = buf.drain(..1 + len).collect();
                    match msg[0] {
                        b'D' => {
                            let cols = data_row(&msg[5..]);
                            got.push(String::from_utf8_lossy(cols[0]).into_owned());
                        }
                        b'E' => panic!("error: {:?}", PgError::parse(&msg[5..])),
                        b'Z' => readies += 1,
                        _ => {}
                    }
                }
                if readies == N {
                    break;
                }
                let n = tokio::time::timeout(Duration::from_secs(30), rd.read(&mut chunk))
                    .await
                    .unwrap_or_else(|_| {
                        panic!("round {round}: no answer for 30 s after {readies} of {N}")
                    })
                    .unwrap();
                assert!(n > 0, "round {round}: closed after {readies} answers");
                buf.extend_from_slice(&chunk[..n]);
            }
            assert!(buf.is_empty(), "round {round}: more than {N} answers");
            got
        };
        let got = within(Duration::from_secs(120), "pipelined answers", read_all).await;
        wr = writer.await.unwrap();
        stop.store(true, Ordering::Relaxed);
        if let Some(f) = flipper {
            f.await.unwrap();
        }
        assert_eq!(got.len(), N, "round {round}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "round {round}, answer {i}");
        }
        eprintln!(
            "round {round}: {} client moves",
            services.balance.moves() - before
        );
        if round == 1 {
            assert!(
                services.balance.moves() > before,
                "the pipelining client never moved"
            );
        }
    }
    let mut s = PgStream::new(rd.unsplit(wr));
    assert_eq!(
        s.scalar(SSL_OF_BACKEND).await.unwrap().as_deref(),
        Some("t")
    );
}

// ---- 6. cancel ------------------------------------------------------------------------------

/// A `MakeTlsConnect` that counts the TLS handshakes its connectors complete.
#[derive(Clone)]
struct CountingTls {
    inner: Rustls,
    handshakes: Arc<AtomicUsize>,
}

struct CountingConnect<T> {
    inner: T,
    handshakes: Arc<AtomicUsize>,
}

type Rustls = tokio_postgres_rustls::MakeRustlsConnect;
type Socket = tokio_postgres::Socket;

impl MakeTlsConnect<Socket> for CountingTls {
    type Stream = <Rustls as MakeTlsConnect<Socket>>::Stream;
    type TlsConnect = CountingConnect<<Rustls as MakeTlsConnect<Socket>>::TlsConnect>;
    type Error = <Rustls as MakeTlsConnect<Socket>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Self::TlsConnect, Self::Error> {
        Ok(CountingConnect {
            inner: MakeTlsConnect::<Socket>::make_tls_connect(&mut self.inner, domain)?,
            handshakes: self.handshakes.clone(),
        })
    }
}

type Handshake<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, T> TlsConnect<S> for CountingConnect<T>
where
    T: TlsConnect<S>,
    T::Future: Send + 'static,
{
    type Stream = T::Stream;
    type Error = T::Error;
    type Future = Handshake<T::Stream, T::Error>;

    fn connect(self, stream: S) -> Self::Future {
        let handshakes = self.handshakes;
        let handshake = self.inner.connect(stream);
        Box::pin(async move {
            let s = handshake.await?;
            handshakes.fetch_add(1, Ordering::SeqCst);
            Ok(s)
        })
    }
}

/// A TLS client's cancel request, itself sent over TLS (tokio-postgres opens the cancel
/// connection with the session's sslmode, require), stops its running query: 57014 within a
/// few seconds, and the client goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_over_tls_stops_the_query() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let p = Pooler::start(&cfg(&pg, &certs, "")).await;
    let client = Arc::new(tls_client(p.port(), &certs).await);
    assert_server_hop_tls(&client).await;
    let token = client.cancel_token();
    let c = client.clone();
    let query = tokio::spawn(async move { c.simple_query("SELECT pg_sleep(30)").await });
    wait_for_sleeping_query(&pg).await;

    let handshakes = Arc::new(AtomicUsize::new(0));
    let tls = CountingTls {
        inner: tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(&certs.ca, None)),
        handshakes: handshakes.clone(),
    };
    let start = Instant::now();
    within(
        Duration::from_secs(10),
        "the cancel request",
        token.cancel_query(tls),
    )
    .await
    .unwrap_or_else(|e| panic!("cancel over TLS: {e:?}"));
    assert_eq!(
        handshakes.load(Ordering::SeqCst),
        1,
        "the cancel connection completed a TLS handshake"
    );
    let res = within(Duration::from_secs(10), "the cancelled query", query)
        .await
        .unwrap();
    let err = res.map(drop).expect_err("the query was cancelled");
    assert_eq!(sqlstate(&err), "57014", "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "cancelled after {:?}",
        start.elapsed()
    );
    assert_eq!(
        scalar(&client, "SELECT 'after'").await.unwrap().as_deref(),
        Some("after")
    );
}

/// The first 8 bytes of every connection pgcorral opens to PostgreSQL, seen by a proxy in
/// between that forwards everything as it is.
struct FirstBytes {
    port: u16,
    seen: Arc<std::sync::Mutex<Vec<[u8; 8]>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FirstBytes {
    async fn start(pg_port: u16) -> FirstBytes {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut from, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let mut first = [0u8; 8];
                    if from.read_exact(&mut first).await.is_err() {
                        return;
                    }
                    record.lock().unwrap().push(first);
                    let mut to = tokio::net::TcpStream::connect(("127.0.0.1", pg_port))
                        .await
                        .unwrap();
                    to.write_all(&first).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut from, &mut to).await;
                });
            }
        });
        FirstBytes { port, seen, task }
    }

    fn seen(&self) -> Vec<[u8; 8]> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for FirstBytes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// pgcorral's own CancelRequest to a server it reaches over TLS goes over TLS too (an
/// SSLRequest first, as for the login: the request carries the backend's secret key), and it
/// still stops the query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cancel_to_a_tls_server_goes_over_tls() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let proxy = FirstBytes::start(pg.port).await;
    let p = Pooler::start(&cfg_at("127.0.0.1", proxy.port, &certs, "")).await;
    let client = Arc::new(tls_client(p.port(), &certs).await);
    assert_server_hop_tls(&client).await;
    let token = client.cancel_token();
    let c = client.clone();
    let query = tokio::spawn(async move { c.simple_query("SELECT pg_sleep(30)").await });
    wait_for_sleeping_query(&pg).await;
    let opened = proxy.seen().len();

    let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(&certs.ca, None));
    within(
        Duration::from_secs(10),
        "the cancel request",
        token.cancel_query(tls),
    )
    .await
    .unwrap_or_else(|e| panic!("cancel over TLS: {e:?}"));
    let res = within(Duration::from_secs(10), "the cancelled query", query)
        .await
        .unwrap();
    let err = res.map(drop).expect_err("the query was cancelled");
    assert_eq!(sqlstate(&err), "57014", "{err:?}");

    let seen = proxy.seen();
    assert!(
        seen.len() > opened,
        "the cancel opened a connection to PostgreSQL: {seen:?}"
    );
    for first in &seen {
        assert_eq!(
            *first,
            ssl_request_bytes(),
            "every connection to PostgreSQL begins with an SSLRequest, the cancel's too"
        );
    }
}

// ---- 7. idle TLS clients --------------------------------------------------------------------

/// 200 TLS clients connect and sit idle (pgcorral waits on their sockets' readiness, holding
/// no buffer), then each runs a query, twice: all answered, each with its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_idle_tls_clients_each_get_their_answer() {
    let certs = Certs::new();
    let pg = ssl_postgres(&certs);
    let p = Pooler::start(&cfg(&pg, &certs, "")).await;
    let port = p.port();
    let mut clients = Vec::new();
    for batch in 0..10 {
        let logins = (0..20).map(|_| tls_client(port, &certs));
        let batch_clients = within(
            Duration::from_secs(60),
            &format!("login batch {batch}"),
            futures_util::future::join_all(logins),
        )
        .await;
        clients.extend(batch_clients.into_iter().map(Arc::new));
    }
    assert_eq!(clients.len(), 200);

    for round in 0..2 {
        // Idle: every client is waiting in pgcorral for its next request.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let tasks: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let c = c.clone();
                tokio::spawn(async move {
                    scalar(
                        &c,
                        &format!(
                            "SELECT '{round}-{i}-' || ssl FROM pg_stat_ssl \
                             WHERE pid = pg_backend_pid()"
                        ),
                    )
                    .await
                })
            })
            .collect();
        for (i, t) in tasks.into_iter().enumerate() {
            let got = within(Duration::from_secs(60), "an idle client's query", t)
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}, client {i}: {e:?}"));
            assert_eq!(got, Some(format!("{round}-{i}-true")), "round {round}");
        }
    }
}

// ---- 8. SNI ---------------------------------------------------------------------------------

/// Where pgcorral's TLS connections to a "server" end, for looking at pgcorral's ClientHello.
/// Not a mock of PostgreSQL: it answers the SSLRequest with 'S', reads the SNI of the
/// ClientHello, completes the handshake (with a certificate from the test CA for localhost and
/// 127.0.0.1, so verify-full accepts it) and closes. It checks only what pgcorral puts in its
/// ClientHello; PostgreSQL does not expose the SNI it received.
struct SniProbe {
    port: u16,
    /// Per connection: the SNI (None when the ClientHello had none), and whether the
    /// handshake completed.
    seen: tokio::sync::mpsc::UnboundedReceiver<Result<(Option<String>, bool), String>>,
    task: tokio::task::JoinHandle<()>,
}

impl SniProbe {
    async fn start(cert: &CertFiles) -> SniProbe {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let config = Arc::new(
            ServerConfig::builder_with_provider(Arc::new(provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert.der.clone()], cert.private_key())
                .unwrap(),
        );
        let (tx, seen) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut tcp, _)) = listener.accept().await else {
                    return;
                };
                let (config, tx) = (config.clone(), tx.clone());
                tokio::spawn(async move {
                    let mut req = [0u8; 8];
                    if let Err(e) = tcp.read_exact(&mut req).await {
                        let _ = tx.send(Err(format!("no SSLRequest: {e}")));
                        return;
                    }
                    if req != ssl_request_bytes() {
                        let _ = tx.send(Err(format!("not an SSLRequest: {req:?}")));
                        return;
                    }
                    tcp.write_all(b"S").await.unwrap();
                    let acceptor = tokio_rustls::LazyConfigAcceptor::new(
                        tokio_rustls::rustls::server::Acceptor::default(),
                        tcp,
                    );
                    let start = match acceptor.await {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = tx.send(Err(format!("no ClientHello: {e}")));
                            return;
                        }
                    };
                    let sni = start.client_hello().server_name().map(str::to_string);
                    let done = start.into_stream(config).await.is_ok();
                    let _ = tx.send(Ok((sni, done)));
                })
                .await
                .ok();
            }
        });
        SniProbe { port, seen, task }
    }

    /// What the next connection's ClientHello carried.
    async fn next(&mut self) -> (Option<String>, bool) {
        within(
            Duration::from_secs(20),
            "a TLS connection to the probe",
            async { self.seen.recv().await.expect("probe running") },
        )
        .await
        .unwrap_or_else(|e| panic!("probe: {e}"))
    }
}

impl Drop for SniProbe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// pgcorral sends the database's `host` as SNI when it is a DNS name: against an ssl=on
/// PostgreSQL whose certificate names only "localhost", `host = "localhost"` with verify-full
/// works; a probe sees SNI "localhost" in the ClientHello for `host = "localhost"`, and none
/// for `host = "127.0.0.1"` (TLS has no SNI for addresses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgcorral_sends_the_database_host_name_as_sni() {
    let certs = Certs::new();
    let localhost_only = certs.ca.server("localhost-only", &["localhost"]);
    let pg = postgres_tls_with(
        &localhost_only,
        &certs.ca.cert_file,
        HBA_APP_TLS_ONLY,
        PgOptions::default(),
    );
    pg.sql("postgres", "CREATE ROLE app LOGIN SUPERUSER");
    let p = Pooler::start(&cfg_at("localhost", pg.port, &certs, "")).await;
    let c = tls_client(p.port(), &certs).await;
    assert_server_hop_tls(&c).await;
    assert_eq!(scalar(&c, "SELECT 3").await.unwrap().as_deref(), Some("3"));

    for (host, want) in [("localhost", Some("localhost")), ("127.0.0.1", None)] {
        let mut probe = SniProbe::start(&certs.server).await;
        let p = Pooler::start(&cfg_at(host, probe.port, &certs, "")).await;
        // The probe closes after the handshake, so the login or the query fails (pgcorral
        // may retry for a while); only the ClientHello matters, so the attempt is dropped
        // once the probe has seen it.
        let mut tcfg = tokio_postgres::Config::new();
        tcfg.host("127.0.0.1")
            .port(p.port())
            .user("app")
            .dbname("postgres")
            .ssl_mode(tokio_postgres::config::SslMode::Require)
            .connect_timeout(Duration::from_secs(10));
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(&certs.ca, None));
        let attempt = tokio::spawn(async move {
            if let Ok((client, conn)) = tcfg.connect(tls).await {
                tokio::spawn(conn);
                let _ = client.simple_query("SELECT 1").await;
            }
        });
        let (sni, handshake) = probe.next().await;
        attempt.abort();
        assert_eq!(sni.as_deref(), want, "host = {host:?}");
        assert!(
            handshake,
            "host = {host:?}: pgcorral completed the handshake"
        );
    }
}
