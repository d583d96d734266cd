//! The Prometheus endpoint against a real PostgreSQL: `/metrics` is scraped with plain HTTP/1.1
//! and its OpenMetrics text parsed; gauges are checked while a client waits for the only server,
//! counters, errors by SQLSTATE class and histograms after the traffic; `/healthz`, 404 and 405;
//! nothing listens without `metrics_addr`; the endpoint closes on shutdown.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use support::raw::Raw;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any one step may take before the test fails instead of hanging.
const LIMIT: Duration = Duration::from_secs(20);

/// The pool every test client lands in: database `postgres`, user `postgres`.
const POOL: [(&str, &str); 2] = [("database", "postgres"), ("user", "postgres")];

// ---------------------------------------------------------------------------------------------
// HTTP and exposition parsing
// ---------------------------------------------------------------------------------------------

/// One HTTP answer.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `method path` over a fresh connection (`Connection: close`) and reads the answer.
async fn http(addr: SocketAddr, method: &str, path: &str) -> Answer {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.expect("connect to metrics");
        let req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        raw
    };
    let raw = tokio::time::timeout(LIMIT, exchange)
        .await
        .expect("HTTP answer in time");
    let text = String::from_utf8(raw).expect("UTF-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("header end");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_string(),
    }
}

/// One sample: `name{labels} value`.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition: `# TYPE` declarations and samples.
#[derive(Debug)]
struct Exposition {
    types: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

/// Parses the OpenMetrics text format: `# TYPE name type`, other `#` lines skipped, samples
/// `name{k="v",...} value`, label values with `\\`, `\"` and `\n` escapes; ends with `# EOF`.
fn parse(text: &str) -> Exposition {
    assert!(text.ends_with("# EOF\n"), "exposition ends with # EOF");
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            types.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        samples.push(parse_sample(line));
    }
    Exposition { types, samples }
}

fn parse_sample(line: &str) -> Sample {
    let end = line.find(['{', ' ']).expect("sample name");
    let mut rest = &line[end..];
    let mut labels = BTreeMap::new();
    if let Some(mut r) = rest.strip_prefix('{') {
        loop {
            r = r.strip_prefix(',').unwrap_or(r);
            if let Some(after) = r.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, value, used) = parse_label(r, line);
            labels.insert(key, value);
            r = &r[used..];
        }
    }
    // A value, then optionally a timestamp or an exemplar.
    let value = rest.trim().split(' ').next().unwrap_or_default();
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v
            .parse()
            .unwrap_or_else(|_| panic!("number {v:?} in {line}")),
    };
    Sample {
        name: line[..end].to_string(),
        labels,
        value,
    }
}

/// Parses `key="value"` at the start of `s`; returns it and the bytes used.
fn parse_label(s: &str, line: &str) -> (String, String, usize) {
    let eq = s.find('=').unwrap_or_else(|| panic!("label = in {line}"));
    let key = s[..eq].to_string();
    assert!(s[eq + 1..].starts_with('"'), "quoted value in {line}");
    let mut value = String::new();
    let mut it = s[eq + 2..].char_indices();
    loop {
        match it
            .next()
            .unwrap_or_else(|| panic!("unterminated value in {line}"))
        {
            (j, '"') => return (key, value, eq + 2 + j + 1),
            (_, '\\') => match it.next().expect("escape").1 {
                'n' => value.push('\n'),
                c => value.push(c),
            },
            (_, c) => value.push(c),
        }
    }
}

impl Exposition {
    /// Samples named `name` whose labels include all of `labels`.
    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The value of the one sample named `name` with `labels`, if there is one.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<&Sample> = self.matching(name, labels).collect();
        assert!(
            found.len() <= 1,
            "{name} {labels:?} is ambiguous: {found:?}"
        );
        found.first().map(|s| s.value)
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no sample {name} {labels:?} in {:#?}", self.samples))
    }

    /// Every sample belongs to a declared family, with the suffixes its type allows.
    fn check_families(&self) {
        for s in &self.samples {
            let ok = self.types.iter().any(|(family, kind)| {
                let suffixes: &[&str] = match kind.as_str() {
                    "counter" => &["_total", "_created"],
                    "histogram" => &["_bucket", "_sum", "_count", "_created"],
                    "info" => &["_info"],
                    _ => &[""],
                };
                suffixes
                    .iter()
                    .any(|suffix| s.name == format!("{family}{suffix}"))
            });
            assert!(ok, "sample {} has no # TYPE: {:?}", s.name, self.types);
        }
    }

    /// Checks histogram `name` for `labels`: `le` increasing and ending at +Inf, counts
    /// cumulative (non-decreasing), `_count` equal to the +Inf bucket. Returns (count, sum).
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> (f64, f64) {
        assert_eq!(
            self.types.get(name).map(String::as_str),
            Some("histogram"),
            "{name}"
        );
        let bucket = format!("{name}_bucket");
        let buckets: Vec<(f64, f64)> = self
            .matching(&bucket, labels)
            .map(|s| {
                let le = &s.labels["le"];
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                (le, s.value)
            })
            .collect();
        assert!(buckets.len() >= 2, "{name}: buckets {buckets:?}");
        for w in buckets.windows(2) {
            assert!(w[0].0 < w[1].0, "{name}: le in order: {buckets:?}");
            assert!(w[0].1 <= w[1].1, "{name}: cumulative: {buckets:?}");
        }
        let (last_le, inf) = *buckets.last().unwrap();
        assert_eq!(last_le, f64::INFINITY, "{name}: ends at +Inf");
        let count = self.value(&format!("{name}_count"), labels);
        assert_eq!(count, inf, "{name}: _count is the +Inf bucket");
        let sum = self.value(&format!("{name}_sum"), labels);
        assert!(sum >= 0.0, "{name}: sum {sum}");
        (count, sum)
    }
}

/// Scrapes `/metrics`: 200, the OpenMetrics content type, a well-formed exposition.
async fn scrape(addr: SocketAddr) -> Exposition {
    let a = http(addr, "GET", "/metrics").await;
    assert_eq!(a.status, 200, "{}", a.body);
    let ct = a.header("content-type").unwrap_or_default();
    assert!(
        ct.starts_with("application/openmetrics-text"),
        "content type {ct}"
    );
    let e = parse(&a.body);
    e.check_families();
    e
}

/// Scrapes until `ready` holds; fails after [`LIMIT`].
async fn scrape_until(
    addr: SocketAddr,
    what: &str,
    ready: impl Fn(&Exposition) -> bool,
) -> Exposition {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let e = scrape(addr).await;
        if ready(&e) {
            return e;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: never seen in {:#?}",
            e.samples
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn with<'a>(key: &'a str, value: &'a str) -> [(&'a str, &'a str); 3] {
    [POOL[0], POOL[1], (key, value)]
}

/// A pooler whose only database points at a closed port: enough for the endpoint itself.
async fn pooler_without_postgres(general: &str) -> Pooler {
    Pooler::start(&format!(
        "[general]\nlisten_port = 0\nauth_type = \"trust\"\n{general}\n\n\
         [databases.postgres]\nhost = \"127.0.0.1\"\nport = 1\n"
    ))
    .await
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gauges_while_a_client_waits_then_counters_and_histograms() {
    let pg = Postgres::start();
    let general = "metrics_addr = \"127.0.0.1:0\"\ndefault_pool_size = 1";
    let pooler = Pooler::start(&config(&pg, "postgres", general)).await;
    let addr = pooler.metrics.expect("metrics_addr is set");

    let a = pooler.connect("postgres", None, "postgres").await;
    for _ in 0..5 {
        a.simple_query("SELECT 1").await.unwrap();
    }
    let e = a.simple_query("SELECT 1/0").await.unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("22012"));
    // `a` holds the only server in a transaction; `b` has to wait for it (`b` logs in first:
    // a login may need a server too).
    let b = pooler.connect("postgres", None, "postgres").await;
    a.simple_query("BEGIN").await.unwrap();
    let waiter = tokio::spawn(async move {
        let r = b.simple_query("SELECT 2").await.map(|_| ());
        (b, r)
    });

    let m = scrape_until(addr, "a waiting client", |m| {
        m.get("pgcorral_client_connections", &with("state", "waiting")) == Some(1.0)
    })
    .await;
    assert_eq!(
        m.value("pgcorral_client_connections", &with("state", "active")),
        1.0
    );
    assert_eq!(
        m.value("pgcorral_server_connections", &with("state", "active")),
        1.0
    );
    assert_eq!(
        m.value("pgcorral_server_connections", &with("state", "idle")),
        0.0
    );
    assert!(m.value("pgcorral_client_wait_max_seconds", &POOL) > 0.0);
    assert_eq!(m.value("pgcorral_pool_size", &POOL), 1.0);
    assert_eq!(
        m.value("pgcorral_pool_info", &with("mode", "transaction")),
        1.0
    );
    assert_eq!(m.value("pgcorral_clients_connected", &[]), 2.0);
    assert_eq!(m.value("pgcorral_up", &[]), 1.0);
    assert_eq!(
        m.types
            .get("pgcorral_client_connections")
            .map(String::as_str),
        Some("gauge")
    );

    a.simple_query("COMMIT").await.unwrap();
    let (_b, r) = tokio::time::timeout(LIMIT, waiter)
        .await
        .expect("the waiting client gets the server")
        .unwrap();
    r.unwrap();

    // 5 x SELECT 1, SELECT 1/0, BEGIN, COMMIT, SELECT 2; transactions: at least the five, the
    // BEGIN..COMMIT one and SELECT 2.
    let (queries, xacts) = (9.0, 7.0);
    let m = scrape_until(addr, "all traffic counted", |m| {
        m.get("pgcorral_transactions_total", &POOL) >= Some(xacts)
            && m.get("pgcorral_queries_total", &POOL) >= Some(queries)
            && m.get("pgcorral_query_duration_seconds_count", &POOL) >= Some(queries)
    })
    .await;
    assert_eq!(
        m.types.get("pgcorral_transactions").map(String::as_str),
        Some("counter")
    );
    assert!(m.value("pgcorral_received_bytes_total", &POOL) > 0.0);
    assert!(m.value("pgcorral_sent_bytes_total", &POOL) > 0.0);
    assert!(m.value("pgcorral_transaction_seconds_total", &POOL) > 0.0);
    assert_eq!(m.value("pgcorral_errors_total", &with("class", "22")), 1.0);
    assert_eq!(
        m.value("pgcorral_client_connections", &with("state", "waiting")),
        0.0
    );
    assert_eq!(m.value("pgcorral_client_wait_max_seconds", &POOL), 0.0);

    let (count, sum) = m.histogram("pgcorral_query_duration_seconds", &POOL);
    assert!(count >= queries, "query histogram count {count}");
    assert!(sum > 0.0, "query histogram sum {sum}");
    let (waits, _) = m.histogram("pgcorral_wait_duration_seconds", &POOL);
    assert!(waits >= 2.0, "wait histogram count {waits}");

    // Two queries pipelined in one write count as two queries and two transactions (a
    // driver that returns on an ErrorResponse sends its next query before the ReadyForQuery
    // too, as `SELECT 1/0` then `BEGIN` above may have).
    let before = (
        m.value("pgcorral_queries_total", &POOL),
        m.value("pgcorral_transactions_total", &POOL),
    );
    let mut raw = Raw::login(pooler.port(), "postgres", "postgres")
        .await
        .expect("login");
    raw.send(&[wire::query("SELECT 3"), wire::query("SELECT 4")].concat())
        .await;
    let mut readies = 0;
    while readies < 2 {
        let (tag, _) = raw.read().await.expect("answers");
        readies += usize::from(tag == b'Z');
    }
    let after = scrape_until(addr, "both pipelined queries counted", |m| {
        m.get("pgcorral_queries_total", &POOL) >= Some(before.0 + 2.0)
            && m.get("pgcorral_transactions_total", &POOL) >= Some(before.1 + 2.0)
    })
    .await;
    assert_eq!(after.value("pgcorral_queries_total", &POOL), before.0 + 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_unknown_paths_and_shutdown() {
    let pooler = pooler_without_postgres("metrics_addr = \"127.0.0.1:0\"").await;
    let addr = pooler.metrics.expect("metrics_addr is set");

    let h = http(addr, "GET", "/healthz").await;
    assert_eq!((h.status, h.body.trim()), (200, "ok"));
    assert_eq!(http(addr, "GET", "/nope").await.status, 404);
    assert_eq!(http(addr, "GET", "/metrics/x").await.status, 404);
    let post = http(addr, "POST", "/metrics").await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));

    // No pool yet: the process-wide samples, and pool families declared but empty.
    let m = scrape(addr).await;
    assert_eq!(m.value("pgcorral_up", &[]), 1.0);
    assert_eq!(m.value("pgcorral_clients_connected", &[]), 0.0);
    assert_eq!(m.matching("pgcorral_build_info", &[]).count(), 1);
    assert_eq!(
        m.types
            .get("pgcorral_query_duration_seconds")
            .map(String::as_str),
        Some("histogram")
    );
    assert_eq!(m.matching("pgcorral_queries_total", &[]).count(), 0);

    // Several connections at once: a stalled one does not hold up the others.
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(b"GET /metrics HTTP/1.1\r\n")
        .await
        .unwrap();
    assert_eq!(http(addr, "GET", "/healthz").await.status, 200);

    pooler.shutdown().await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    while TcpStream::connect(addr).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "metrics endpoint still open after shutdown"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_unless_metrics_addr_is_set() {
    let pooler = pooler_without_postgres("").await;
    assert!(pooler.metrics.is_none());
    pooler.shutdown().await;
}
