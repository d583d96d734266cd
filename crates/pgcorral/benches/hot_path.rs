//! Hot-path micro-benchmarks: the relay's scans over a pgbench -S exchange (without and with
//! prepared-statement tracking), and pool checkout/check-in with and without contention.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use pgcorral::config::PoolMode;
use pgcorral::pool::{ClientWait, Pool, PoolSettings};
use pgcorral::prepared::expect::{Answers, Expected};
use pgcorral::prepared::rewrite::Link;
use pgcorral::prepared::{ClientStatements, Registry, ServerStatements};
use pgcorral::relay::{scan_client, scan_server, Track};
use pgcorral::server::connect::{Secret, Target};
use pgcorral::server::{CancelKey, LinkState, ServerConn};
use pgcorral::session::hooks::HookMap;
use pgwire::encode;

fn select_answer() -> BytesMut {
    let mut b = BytesMut::new();
    encode::message(&mut b, b'T', |b| b.extend_from_slice(&[0u8; 27]));
    encode::message(&mut b, b'D', |b| {
        b.extend_from_slice(b"\0\x01\0\0\0\x041234")
    });
    encode::message(&mut b, b'C', |b| b.extend_from_slice(b"SELECT 1\0"));
    encode::ready_for_query(&mut b, pgwire::backend::TxStatus::Idle);
    b
}

fn scans(c: &mut Criterion) {
    let mut q = BytesMut::new();
    encode::query(
        &mut q,
        "SELECT abalance FROM pgbench_accounts WHERE aid = 48213;",
    );
    let answer = select_answer();
    let hooks = HookMap::quiet();
    c.bench_function("scan_request_and_answer", |b| {
        b.iter(|| {
            let mut st = LinkState::default();
            let mut params = Default::default();
            let (mut cp, mut sp) = (0, 0);
            let c = scan_client(
                black_box(&q),
                &mut cp,
                &mut st,
                Track::Pin,
                &hooks,
                &mut Default::default(),
                1 << 30,
                None,
            )
            .unwrap();
            let s = scan_server(
                black_box(&answer),
                &mut sp,
                &mut st,
                &mut params,
                true,
                false,
                1 << 30,
                None,
            )
            .unwrap();
            black_box((c.ready, s.ready))
        })
    });

    // The same exchange in transaction mode, where every client message goes through the
    // prepared-statement machinery (`Mode::prepared` is set): what a link keeps between
    // exchanges (statements, the answers owed) lives outside the loop, as on a real server.
    let mut link = Tracked::default();
    c.bench_function("scan_request_and_answer_prepared", |b| {
        b.iter(|| black_box(link.exchange(black_box(&q), black_box(&answer))))
    });
    link.assert_settled();

    // pgbench -S -M extended in transaction mode: Parse of the unnamed statement, Bind,
    // Describe of the portal, Execute and Sync, answered ParseComplete, BindComplete and the
    // rows; each exchange is a new relay (the unnamed statement is not known to be on the
    // server until parsed there).
    let mut batch = BytesMut::new();
    encode::parse(
        &mut batch,
        b"",
        b"SELECT abalance FROM pgbench_accounts WHERE aid = $1;\0\0\0",
    );
    encode::message(&mut batch, b'B', |b| {
        b.extend_from_slice(b"\0\0\0\0\0\x01\0\0\0\x0548213\0\0")
    });
    encode::describe(&mut batch, b'P', b"");
    encode::message(&mut batch, b'E', |b| b.extend_from_slice(b"\0\0\0\0\0"));
    encode::sync(&mut batch);
    let mut ext_answer = BytesMut::new();
    encode::empty(&mut ext_answer, pgwire::backend::PARSE_COMPLETE);
    encode::empty(&mut ext_answer, pgwire::backend::BIND_COMPLETE);
    ext_answer.extend_from_slice(&answer);
    c.bench_function("scan_request_and_answer_extended", |b| {
        b.iter(|| {
            let r = link.exchange(black_box(&batch), black_box(&ext_answer));
            assert_eq!(r, (batch.len(), ext_answer.len()));
            black_box(r)
        })
    });
    link.assert_settled();
}

/// What a server link keeps between exchanges when prepared statements are tracked.
#[derive(Default)]
struct Tracked {
    registry: Registry,
    client: ClientStatements,
    server: ServerStatements,
    expect: Expected,
    wout: BytesMut,
    fout: BytesMut,
}

impl Tracked {
    /// One relay's scans of `request` then `answer` (a new relay each time); the bytes each
    /// side may forward.
    fn exchange(&mut self, request: &[u8], answer: &[u8]) -> (usize, usize) {
        let mut st = LinkState::default();
        let mut params = Default::default();
        let (mut cp, mut sp) = (0, 0);
        let mut unnamed_here = false;
        let mut tally = Default::default();
        let mut link = Link {
            registry: &self.registry,
            max: 200,
            client: &mut self.client,
            server: &mut self.server,
            expect: &mut self.expect,
            out: &mut self.wout,
            unnamed_here: &mut unnamed_here,
            tally: &mut tally,
            retry: false,
        };
        let c = scan_client(
            request,
            &mut cp,
            &mut st,
            Track::Pin,
            &HookMap::quiet(),
            &mut Default::default(),
            1 << 30,
            Some(&mut link),
        )
        .unwrap();
        let mut answers = Answers {
            registry: &self.registry,
            expect: &mut self.expect,
            server: &mut self.server,
            client: &mut self.client,
            out: &mut self.fout,
        };
        let s = scan_server(
            answer,
            &mut sp,
            &mut st,
            &mut params,
            true,
            false,
            1 << 30,
            Some(&mut answers),
        )
        .unwrap();
        (c.ready, s.ready)
    }

    /// Nothing owed and nothing of pgcorral's own left to send after whole exchanges.
    fn assert_settled(&self) {
        assert!(self.expect.is_empty() && self.wout.is_empty() && self.fout.is_empty());
    }
}

/// The session classifier (it runs on every Query and Parse of pooled clients): a pgbench query,
/// ruled out by the quick look, and two the lexer reads to their end (a longer one with joins
/// and a call of a built-in, a SELECT INTO TEMP).
fn classify(c: &mut Criterion) {
    let quiet = HookMap::quiet();
    let classify = |sql: &[u8]| pgcorral::session::scan::classify(sql, &quiet);
    let sql = b"SELECT abalance FROM pgbench_accounts WHERE aid = 48213;";
    c.bench_function("classify_pgbench_select", |b| {
        b.iter(|| black_box(classify(black_box(sql))))
    });
    let sql: &[u8] = b"SELECT o.id, o.created_at, c.name, sum(l.quantity * l.unit_price) AS total \
        FROM orders o JOIN customers c ON c.id = o.customer_id \
        JOIN order_lines l ON l.order_id = o.id \
        WHERE o.created_at >= $1 AND c.country = $2 \
        GROUP BY o.id, o.created_at, c.name ORDER BY total DESC LIMIT 50";
    c.bench_function("classify_select_with_joins", |b| {
        b.iter(|| black_box(classify(black_box(sql))))
    });
    let sql: &[u8] = b"SELECT t.id, t.payload INTO TEMP recent_events FROM events t \
        WHERE t.created_at > now() - interval '1 hour'";
    c.bench_function("classify_select_into_temp", |b| {
        b.iter(|| black_box(classify(black_box(sql))))
    });
}

/// A pool holding `n` idle connections over loopback sockets (no server behind them: checkout
/// only looks at readiness, which stays quiet).
fn pool_with(rt: &tokio::runtime::Runtime, n: usize) -> (Pool, Vec<tokio::net::TcpStream>) {
    rt.block_on(async {
        let target = Target {
            host: "127.0.0.1".into(),
            port: 1,
            database: "bench".into(),
            user: "bench".into(),
            secret: Secret::None,
            connect_timeout: Duration::from_secs(1),
            max_packet_size: 1 << 30,
            tls: Default::default(),
            startup: Vec::new(),
        };
        let settings = PoolSettings::new(n, PoolMode::Transaction);
        let pool = Pool::new(
            ("bench".into(), "bench".into()),
            target,
            settings,
            &Default::default(),
            &Default::default(),
            Default::default(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut peers = Vec::new();
        for _ in 0..n {
            let stream = corral_rt::sock::connect_tcp(addr).await.unwrap();
            peers.push(listener.accept().await.unwrap().0);
            let server = ServerConn::new(
                corral_rt::stream::Stream::Plain(stream),
                BytesMut::with_capacity(16 * 1024),
                CancelKey {
                    addr: pgcorral::server::ServerAddr::Tcp(addr),
                    pid: 1,
                    secret: 1,
                    tls: None,
                    in_flight: Default::default(),
                },
                Arc::new(Vec::new()),
                0,
            );
            assert!(pool.adopt(server));
        }
        (pool, peers)
    })
}

fn checkout(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (pool, _peers) = pool_with(&rt, 1);
    c.bench_function("checkout_checkin_uncontended", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    drop(black_box(
                        pool.checkout(0, ClientWait::default()).await.unwrap(),
                    ));
                }
                start.elapsed()
            })
        })
    });

    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (pool, _peers) = pool_with(&mt, 1);
    c.bench_function("checkout_checkin_two_tasks_one_server", |b| {
        b.iter_custom(|iters| {
            mt.block_on(async {
                let start = Instant::now();
                let tasks: Vec<_> = (0..2)
                    .map(|_| {
                        let pool = pool.clone();
                        tokio::spawn(async move {
                            for _ in 0..iters / 2 {
                                drop(pool.checkout(0, ClientWait::default()).await.unwrap());
                                tokio::task::yield_now().await;
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
                start.elapsed()
            })
        })
    });
}

criterion_group!(benches, scans, classify, checkout);
criterion_main!(benches);
