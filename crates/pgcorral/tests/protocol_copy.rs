//! COPY through pgcorral against a real PostgreSQL: in and out, in the extended protocol, bad
//! data and errors while data is still in flight, a client leaving in the middle, and a large
//! COPY streamed in bounded memory.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};

use support::protocol::*;
use support::wire::{tags, Wire};
use support::*;

// ---- helpers --------------------------------------------------------------------------------

/// Rows in table `xc` as another client of the same pooler sees them: proves the server a
/// COPY ran on went back to the pool in frame.
async fn rows_in_xc(other: &mut Wire, what: &str) -> String {
    within(
        Duration::from_secs(5),
        what,
        other.scalar("SELECT count(*) FROM xc"),
    )
    .await
}

// ---- 1. COPY --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_and_out_round_trip() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let c = client(&p).await;
    let other = client(&p).await;
    c.batch_execute("CREATE TABLE t (id int PRIMARY KEY, name text, note text)")
        .await
        .unwrap();

    const ROWS: usize = 20_000;
    let mut input = Vec::new();
    for i in 1..=ROWS {
        let note = if i % 7 == 0 {
            "\\N".to_string()
        } else {
            format!("n\\t{}", i * 31 % 1000)
        };
        input.extend(format!("{i}\tname-{i:05}-{}\t{note}\n", "é".repeat(i % 5)).into_bytes());
    }
    let mut input_hash = 0xcbf2_9ce4_8422_2325u64;
    fnv(&mut input_hash, &input);

    let sink = c.copy_in("COPY t FROM STDIN").await.unwrap();
    futures_util::pin_mut!(sink);
    // Uneven chunks, some splitting rows, some bigger than tokio-postgres's 4 KiB buffer.
    let mut rest = &input[..];
    let mut k = 0;
    while !rest.is_empty() {
        let n = [100, 5000, 777, 65536, 1][k % 5].min(rest.len());
        sink.send(Bytes::copy_from_slice(&rest[..n])).await.unwrap();
        rest = &rest[n..];
        k += 1;
    }
    assert_eq!(sink.finish().await.unwrap(), ROWS as u64);
    // The COPY is over, so the only server is free for another client.
    assert_eq!(
        within(
            Duration::from_secs(5),
            "other client after COPY IN",
            backend_pid(&other)
        )
        .await,
        backend_pid(&c).await
    );

    let row = c
        .query_one(
            "SELECT count(*), sum(id)::int8, count(note), sum(length(name))::int8 FROM t",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), ROWS as i64);
    assert_eq!(row.get::<_, i64>(1), (ROWS * (ROWS + 1) / 2) as i64);
    assert_eq!(row.get::<_, i64>(2), (ROWS - ROWS / 7) as i64);
    let name_chars: i64 = (1..=ROWS).map(|i| 11 + (i % 5) as i64).sum();
    assert_eq!(row.get::<_, i64>(3), name_chars);

    // COPY OUT gives back exactly the bytes that went in.
    let stream = c
        .copy_out("COPY (SELECT * FROM t ORDER BY id) TO STDOUT")
        .await
        .unwrap();
    futures_util::pin_mut!(stream);
    let mut out_hash = 0xcbf2_9ce4_8422_2325u64;
    let mut out_len = 0usize;
    let mut out_rows = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        fnv(&mut out_hash, &chunk);
        out_len += chunk.len();
        out_rows += chunk.iter().filter(|&&b| b == b'\n').count();
    }
    assert_eq!(out_rows, ROWS);
    assert_eq!(out_len, input.len());
    assert_eq!(
        out_hash, input_hash,
        "COPY OUT checksum differs from COPY IN's"
    );

    // And the connection is fine afterwards.
    assert_eq!(
        c.query_one("SELECT 1", &[]).await.unwrap().get::<_, i32>(0),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_copy_in_releases_the_server() {
    // Clients that use the extended protocol send Sync right after Execute, before they know
    // the statement is a COPY FROM STDIN; PostgreSQL ignores Syncs in copy-in mode, so that
    // batch earns one ReadyForQuery, after CopyDone + Sync.
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    pg.sql("postgres", "CREATE TABLE xc (id int, name text)");
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    let mut other = Wire::connect(p.port(), "postgres", "postgres").await;

    // libpq / tokio-postgres style: wait for CopyInResponse, then send the data.
    w.send_all(&[
        wire::parse("", "COPY xc FROM STDIN", &[]),
        wire::bind("", "", &[], false),
        wire::describe(b'P', ""),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(w.recv().await);
    }
    assert_eq!(tags(&got), "12nG", "{got:?}");
    w.send_all(&[
        wire::copy_data(b"1\tone\n2\ttwo\n"),
        wire::copy_done(),
        wire::sync(),
    ])
    .await;
    let msgs = w.until_ready().await;
    assert_eq!(tags(&msgs), "CZ", "{msgs:?}");
    assert_eq!(msgs[0].text(), "COPY 2");
    assert!(w.silent_for(Duration::from_millis(200)).await);
    assert_eq!(
        rows_in_xc(&mut other, "other after extended COPY").await,
        "2"
    );

    // Everything in one write, with a Flush and an extra Sync after Execute.
    w.send_all(&[
        wire::parse("", "COPY xc FROM STDIN", &[]),
        wire::bind("", "", &[], false),
        wire::execute("", 0),
        wire::flush(),
        wire::sync(),
        wire::sync(),
        wire::copy_data(b"3\tthree\n"),
        wire::copy_done(),
        wire::sync(),
        wire::query("SELECT count(*) FROM xc"),
    ])
    .await;
    let msgs = w.until_ready_n(2).await;
    assert_eq!(tags(&msgs), "12GCZTDCZ", "{msgs:?}");
    assert_eq!(msgs[6].row(), [Some("3".into())]);
    assert!(w.silent_for(Duration::from_millis(200)).await);
    assert_eq!(
        rows_in_xc(&mut other, "other after pipelined COPY").await,
        "3"
    );

    // A COPY that fails on bad data: the server skips to the Sync after CopyDone.
    w.send_all(&[
        wire::parse("", "COPY xc FROM STDIN", &[]),
        wire::bind("", "", &[], false),
        wire::execute("", 0),
        wire::sync(),
    ])
    .await;
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(w.recv().await);
    }
    assert_eq!(tags(&got), "12G", "{got:?}");
    w.send(&wire::copy_data(b"x\tbad\n")).await;
    let e = w.recv().await;
    assert_eq!((e.tag, e.code()), (b'E', "22P02".into()), "{e:?}");
    assert!(w.silent_for(Duration::from_millis(200)).await);
    w.send_all(&[
        wire::copy_data(b"4\tfour\n"),
        wire::copy_done(),
        wire::sync(),
    ])
    .await;
    let msgs = w.until_ready().await;
    assert_eq!(tags(&msgs), "Z", "{msgs:?}");
    assert_eq!(msgs[0].body, b"I");
    assert_eq!(rows_in_xc(&mut other, "other after failed COPY").await, "3");
    assert_eq!(w.scalar("SELECT 'w ok'").await, "w ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_bad_data_is_an_error_and_the_connection_survives() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    let c = client(&p).await;
    c.batch_execute("CREATE TABLE ci (id int, name text)")
        .await
        .unwrap();

    let sink = c.copy_in("COPY ci FROM STDIN").await.unwrap();
    futures_util::pin_mut!(sink);
    sink.send(Bytes::from_static(b"1\tone\n2\ttwo\nnot-a-number\tthree\n"))
        .await
        .unwrap();
    let e = sink.finish().await.unwrap_err();
    assert_eq!(sqlstate(&e), "22P02", "{e}");

    assert_eq!(
        c.query_one("SELECT count(*) FROM ci", &[])
            .await
            .unwrap()
            .get::<_, i64>(0),
        0,
        "the failed COPY inserted nothing"
    );
    // The only server went back to the pool: another client can use it.
    let other = client(&p).await;
    assert_eq!(backend_pid(&other).await, backend_pid(&c).await);

    // CopyFail from the client: the server aborts the COPY with 57014.
    let mut w = Wire::connect(p.port(), "postgres", "postgres").await;
    w.send(&wire::query("COPY ci FROM STDIN")).await;
    assert_eq!(w.recv().await.tag, b'G');
    w.send_all(&[
        wire::copy_data(b"5\tfive\n"),
        wire::copy_fail("client gave up"),
    ])
    .await;
    let msgs = w.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    assert_eq!(msgs[0].code(), "57014");
    assert!(msgs[0].field(b'M').unwrap().contains("client gave up"));
    assert_eq!(w.scalar("SELECT count(*) FROM ci").await, "0");
    assert_eq!(backend_pid(&other).await, backend_pid(&c).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_error_with_data_still_in_flight_keeps_both_clients_in_frame() {
    // The server rejects a row and answers ErrorResponse + ReadyForQuery while the client is
    // still in the middle of sending a large CopyData. The rest of that message must not reach
    // whichever client gets the server next, and must not confuse this client.
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    pg.sql("postgres", "CREATE TABLE ce (id int, pad text)");
    let mut a = Wire::connect(p.port(), "postgres", "postgres").await;
    let mut b = Wire::connect(p.port(), "postgres", "postgres").await;

    a.send(&wire::query("COPY ce FROM STDIN")).await;
    assert_eq!(a.recv().await.tag, b'G');
    // One CopyData with the bad row first, then a big second CopyData of which only the first
    // half is sent for now.
    let mut big = Vec::new();
    while big.len() < 200_000 {
        big.extend_from_slice(b"7\tpadpadpadpadpadpadpadpadpadpadpadpad\n");
    }
    let big = wire::copy_data(&big);
    let half = big.len() / 2;
    a.send_all(&[wire::copy_data(b"oops\tbad\n"), big[..half].to_vec()])
        .await;
    let msgs = a.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    assert_eq!(msgs[0].code(), "22P02");
    assert_eq!(msgs[1].body, b"I");
    tokio::time::sleep(Duration::from_millis(200)).await;

    // b asks for the only server meanwhile (it may have to wait for a's message to end).
    let b_task = tokio::spawn(async move {
        let v = b.scalar("SELECT 'b ok'").await;
        (b, v)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    // a finishes its stray message and a CopyDone, then goes on normally.
    a.send_all(&[big[half..].to_vec(), wire::copy_done()]).await;
    let msgs = within(
        Duration::from_secs(5),
        "a's query",
        a.simple("SELECT 'a ok'"),
    )
    .await;
    assert_eq!(tags(&msgs), "TDCZ", "{msgs:?}");
    assert_eq!(msgs[1].row(), [Some("a ok".into())]);
    let (mut b, v) = within(Duration::from_secs(5), "b's query", b_task)
        .await
        .unwrap();
    assert_eq!(v, "b ok");
    assert_eq!(
        within(
            Duration::from_secs(5),
            "b again",
            b.scalar("SELECT count(*) FROM ce")
        )
        .await,
        "0"
    );
    assert_eq!(
        within(
            Duration::from_secs(5),
            "a again",
            a.scalar("SELECT 'a again'")
        )
        .await,
        "a again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_leaving_mid_copy_data_after_an_error_does_not_poison_the_server() {
    let pg = Postgres::start();
    let p = pooler(&pg, "default_pool_size = 1").await;
    pg.sql("postgres", "CREATE TABLE cg (id int)");
    let mut a = Wire::connect(p.port(), "postgres", "postgres").await;
    let mut b = Wire::connect(p.port(), "postgres", "postgres").await;
    a.send(&wire::query("COPY cg FROM STDIN")).await;
    assert_eq!(a.recv().await.tag, b'G');
    let big = wire::copy_data(&b"1\n".repeat(50_000));
    a.send_all(&[wire::copy_data(b"bad\n"), big[..big.len() / 3].to_vec()])
        .await;
    let msgs = a.until_ready().await;
    assert_eq!(tags(&msgs), "EZ", "{msgs:?}");
    drop(a);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let msgs = within(
        Duration::from_secs(5),
        "b's query",
        b.simple("SELECT 'b ok'"),
    )
    .await;
    assert_eq!(tags(&msgs), "TDCZ", "{msgs:?}");
    assert_eq!(msgs[1].row(), [Some("b ok".into())]);
    assert_eq!(b.scalar("SELECT count(*) FROM cg").await, "0");
}

/// Bytes per generated COPY row in the big test.
const BIG_ROW: usize = 1024;

fn big_row(id: u64, pad: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("{id:012}\t").as_bytes());
    out.extend_from_slice(pad);
    out.push(b'\n');
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_copy_streams_in_bounded_memory() {
    let big: u64 = std::env::var("PGCORRAL_TEST_COPY_BYTES")
        .ok()
        .map(|v| v.parse().expect("PGCORRAL_TEST_COPY_BYTES is a byte count"))
        .unwrap_or(1 << 30);
    let rows = big.div_ceil(BIG_ROW as u64).max(1);
    let pg = Postgres::start();
    pg.sql(
        "postgres",
        "CREATE UNLOGGED TABLE big (id text, pad text) WITH (autovacuum_enabled = off)",
    );
    let proc = PoolerProcess::start(&cfg(&pg, "log_level = \"warn\""));
    let c = connect(proc.port, "postgres", None, "postgres")
        .await
        .unwrap();
    let pad: Vec<u8> = (0..BIG_ROW - 14).map(|i| b'a' + (i % 26) as u8).collect();

    let start = Instant::now();
    let sink = c.copy_in("COPY big FROM STDIN").await.unwrap();
    futures_util::pin_mut!(sink);
    const PER_CHUNK: u64 = 256; // 256 KiB CopyData messages, made as they are sent
    let mut id = 1;
    while id <= rows {
        let mut chunk = Vec::with_capacity(PER_CHUNK as usize * BIG_ROW);
        while id <= rows && chunk.len() < PER_CHUNK as usize * BIG_ROW {
            big_row(id, &pad, &mut chunk);
            id += 1;
        }
        sink.feed(Bytes::from(chunk)).await.unwrap();
    }
    assert_eq!(sink.finish().await.unwrap(), rows);
    let copy_in = start.elapsed();

    let start = Instant::now();
    let stream = c.copy_out("COPY big TO STDOUT").await.unwrap();
    futures_util::pin_mut!(stream);
    let (mut bytes, mut n, mut sum, mut sum_sq) = (0u64, 0u64, 0u128, 0u128);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        bytes += chunk.len() as u64;
        // One CopyData per row.
        assert_eq!(chunk.len(), BIG_ROW, "row {n}");
        let id: u64 = std::str::from_utf8(&chunk[..12]).unwrap().parse().unwrap();
        assert!((1..=rows).contains(&id));
        assert_eq!(chunk[12], b'\t');
        assert!(chunk[13..BIG_ROW - 1] == pad[..], "row {id} corrupted");
        n += 1;
        sum += id as u128;
        sum_sq += (id as u128) * (id as u128);
    }
    let copy_out = start.elapsed();
    assert_eq!(n, rows);
    assert_eq!(bytes, rows * BIG_ROW as u64);
    let r = rows as u128;
    assert_eq!(sum, r * (r + 1) / 2, "ids differ");
    assert_eq!(sum_sq, r * (r + 1) * (2 * r + 1) / 6, "ids differ");

    let status = std::fs::read_to_string(format!("/proc/{}/status", proc.child.id())).unwrap();
    let hwm_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    eprintln!(
        "big COPY: {} MiB in {copy_in:.1?}, out in {copy_out:.1?}; pgcorral peak RSS {} KiB",
        bytes >> 20,
        hwm_kib
    );
    assert!(
        hwm_kib < 64 * 1024,
        "pgcorral's peak RSS {hwm_kib} KiB is over 64 MiB after streaming {bytes} bytes"
    );
}
