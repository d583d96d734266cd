//! Codec micro-benchmarks: walking headers of a typical result, and building messages.

use bytes::BytesMut;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use pgwire::{encode, frontend, Header};

/// A `SELECT abalance FROM pgbench_accounts` style answer: RowDescription, `rows` DataRows,
/// CommandComplete, ReadyForQuery.
fn result(rows: usize) -> BytesMut {
    let mut b = BytesMut::new();
    encode::message(&mut b, b'T', |b| b.extend_from_slice(&[0u8; 27]));
    for _ in 0..rows {
        encode::message(&mut b, b'D', |b| {
            b.extend_from_slice(b"\0\x01\0\0\0\x041234")
        });
    }
    encode::message(&mut b, b'C', |b| b.extend_from_slice(b"SELECT 1\0"));
    encode::ready_for_query(&mut b, pgwire::backend::TxStatus::Idle);
    b
}

fn headers(c: &mut Criterion) {
    let mut g = c.benchmark_group("headers");
    for rows in [1usize, 100] {
        let buf = result(rows);
        g.throughput(Throughput::Bytes(buf.len() as u64));
        g.bench_function(format!("walk_{rows}_rows"), |b| {
            b.iter(|| {
                let mut n = 0;
                frontend::scan(black_box(&buf), 1 << 30, |h: Header| n += h.len).unwrap()
            })
        });
    }
    g.finish();
}

fn encoders(c: &mut Criterion) {
    let mut buf = BytesMut::with_capacity(1024);
    c.bench_function("encode_query_and_ready", |b| {
        b.iter(|| {
            buf.clear();
            encode::query(
                &mut buf,
                black_box("SELECT abalance FROM pgbench_accounts WHERE aid = 1"),
            );
            encode::ready_for_query(&mut buf, pgwire::backend::TxStatus::Idle);
            black_box(buf.len())
        })
    });
}

criterion_group!(benches, headers, encoders);
criterion_main!(benches);
