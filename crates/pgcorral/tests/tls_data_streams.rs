//! Large data over TLS on both hops: a 100 MB result through both protocols, 50 MB of COPY
//! both ways, and a slow reader who gets every byte while pgcorral's memory stays bounded.
//!
//! Both hops are TLS: clients reach pgcorral over TLS (`client_tls_sslmode = "require"`) and
//! pgcorral reaches an `ssl = on` PostgreSQL over TLS (`server_tls_sslmode = "verify-full"`),
//! with two workers so that clients and servers move between reactors (support/tls_data.rs).

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use support::tls::*;
use support::tls_data::*;
use support::*;
use tokio::io::AsyncReadExt;
use tokio_postgres::types::ToSql;
use tokio_postgres::SimpleQueryMessage;

/// Rows of the large results: `g` and `lpad(g, 1000, letter)`, about 1 kB each.
const BIG_ROWS: u64 = 100_000;

/// A query returning `rows` rows (g, value of `width` bytes): the value is g's digits padded
/// on the left with a letter that depends on g, so each row can be checked on its own.
fn rows_sql(rows: u64, width: usize) -> String {
    format!("SELECT g, lpad(g::text, {width}, chr(65 + g % 26)) FROM generate_series(1, {rows}) g")
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
