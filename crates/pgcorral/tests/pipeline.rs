//! Long Sync-less pipelines through pgcorral: an error the server raises in the middle reaches
//! the client while it is still sending, as it does when the client talks to PostgreSQL
//! directly (asyncpg's executemany stops sending on it), with backpressure kept.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::wire::{Param, Wire};
use support::*;

/// Bind/Execute pairs written per write.
const CHUNK: usize = 1000;
/// Pairs in the whole pipeline, if nothing stops the client.
const TOTAL: usize = 200_000;
/// The pair whose Execute fails (division by zero).
const FAILING: usize = 5;
/// The most pairs a client may write through pgcorral before it sees the error.
const LIMIT: usize = 15_000;

/// What a client saw: the pairs it had written when it saw the error, the error's SQLSTATE,
/// and the status of the ReadyForQuery that answered its Sync.
#[derive(Debug)]
struct Seen {
    sent: usize,
    code: String,
    status: u8,
}

/// Writes Parse, then Bind/Execute pairs of a named statement (as asyncpg's executemany does)
/// without a Sync, as fast as the connection takes them, while reading; stops writing once it
/// has read the ErrorResponse, then sends Sync and reads up to ReadyForQuery.
async fn pipeline(port: u16) -> Seen {
    let w = Wire::connect(port, "postgres", "postgres").await;
    let (mut rd, mut wr) = w.stream.into_split();
    let failed = Arc::new(AtomicBool::new(false));
    let flag = failed.clone();
    let reader = tokio::spawn(async move {
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        let mut code = String::new();
        loop {
            while buf.len() >= 5 {
                let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
                if buf.len() < 1 + len {
                    break;
                }
                let msg: Vec<u8> = buf.drain(..1 + len).collect();
                match msg[0] {
                    b'E' => {
                        let m = wire::Msg {
                            tag: b'E',
                            body: msg[5..].to_vec(),
                        };
                        code = m.code();
                        flag.store(true, Ordering::SeqCst);
                    }
                    b'Z' => return (code, msg[5]),
                    _ => {}
                }
            }
            let n = rd.read(&mut chunk).await.expect("read");
            assert!(n > 0, "connection closed");
            buf.extend_from_slice(&chunk[..n]);
        }
    });
    wr.write_all(&wire::parse("s1", "SELECT 1 / $1::int", &[23]))
        .await
        .unwrap();
    let mut sent = 0;
    while sent < TOTAL && !failed.load(Ordering::SeqCst) {
        let mut out = Vec::with_capacity(CHUNK * 40);
        for i in sent..sent + CHUNK {
            let v = if i == FAILING { "0" } else { "1" };
            out.extend_from_slice(&wire::bind("", "s1", &[Param::Text(v)], false));
            out.extend_from_slice(&wire::execute("", 0));
        }
        wr.write_all(&out).await.unwrap();
        sent += CHUNK;
    }
    wr.write_all(&wire::sync()).await.unwrap();
    let (code, status) = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("ReadyForQuery within 60 s")
        .unwrap();
    Seen { sent, code, status }
}

/// The client stops early on the error through pgcorral as it does directly: the relay reads the
/// server's error while the client's bytes keep coming (before, it forwarded them for as long
/// as the client's reads filled its buffer, and saw the server's bytes only when the worker next
/// looked for events: about 25,000 pairs later here, against 2,000-3,000 directly), and sends it
/// to the client at once (it sat in the worker's batch of writes while the relay kept streaming:
/// 23,000 pairs in CI). How many pairs the client writes first also depends on how soon each
/// process gets a core, directly too (2,000 to over 100,000 on a loaded 2-core machine), so the
/// best of three tries counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_mid_pipeline_reaches_the_client_while_it_sends() {
    const TRIES: usize = 3;
    let pg = Postgres::start();
    for mode in ["transaction", "session"] {
        let pooler =
            Pooler::start(&config(&pg, "postgres", &format!("pool_mode = \"{mode}\""))).await;
        let mut best: Option<Seen> = None;
        for _ in 0..TRIES {
            let direct = pipeline(pg.port).await;
            let pooled = pipeline(pooler.port()).await;
            eprintln!("{mode}: direct {direct:?}, through pgcorral {pooled:?}");
            for seen in [&direct, &pooled] {
                assert_eq!(seen.code, "22012", "{mode}: {seen:?}");
                assert_eq!(seen.status, b'I', "{mode}: {seen:?}");
            }
            if best.as_ref().is_none_or(|b| pooled.sent < b.sent) {
                best = Some(pooled);
            }
            if best.as_ref().is_some_and(|b| b.sent <= LIMIT) {
                break;
            }
        }
        let best = best.expect("tried");
        assert!(
            best.sent <= LIMIT,
            "{mode}: the client wrote {} pairs before it saw the error, at best of {TRIES} tries",
            best.sent,
        );
        // The connection goes on.
        let c = pooler.connect("postgres", None, "postgres").await;
        c.simple_query("SELECT 1").await.unwrap();
    }
}
