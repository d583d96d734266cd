//! The relay over socket pairs while a client streams a long pipeline: what the server says
//! meanwhile reaches the client though no worker sends the thread's batch of writes.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use corral_rt::stream::Stream;

use super::{run, Mode, Outcome};
use crate::client_conn::ClientConn;
use crate::server::{CancelKey, ServerAddr, ServerConn};

/// Bind/Execute pairs (of a named statement) per write, and at most in all.
const CHUNK: usize = 1000;
const TOTAL: usize = 200_000;

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// The client writes its pipeline until it has read the server's error; the server reads
/// everything and sends the error once it has its first bytes. The thread batches writes
/// (`corral_rt::batch`) as a worker does, but nothing sends the batch but the relay: without it, the
/// error would reach the client only when the relay ends, after the whole pipeline.
#[tokio::test]
async fn an_error_reaches_a_streaming_client_while_it_sends() {
    if !corral_rt::batch::enable() {
        eprintln!("io_uring is not available here: nothing to test");
        return;
    }
    let (mut app, c) = UnixStream::pair().unwrap();
    let (s, mut pg) = UnixStream::pair().unwrap();
    let error = msg(b'E', b"SERROR\0C22012\0Mdivision by zero\0\0");
    let seen = Arc::new(AtomicBool::new(false));
    let pg_side = std::thread::spawn({
        let error = error.clone();
        move || {
            let mut buf = vec![0u8; 64 * 1024];
            let mut told = false;
            while let Ok(n) = pg.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if !told {
                    pg.write_all(&error).unwrap();
                    told = true;
                }
            }
        }
    });
    let reader = std::thread::spawn({
        let (mut app, seen) = (app.try_clone().unwrap(), seen.clone());
        move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = app.read(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                if got.len() >= error.len() {
                    seen.store(true, Ordering::SeqCst);
                    return got;
                }
            }
            got
        }
    });
    let writer = std::thread::spawn(move || {
        let mut pair = msg(b'B', b"\0s1\0\0\0\0\x01\0\0\0\x011\0\0");
        pair.extend(msg(b'E', b"\0\0\0\0\0"));
        let chunk = pair.repeat(CHUNK);
        let mut sent = 0;
        while sent < TOTAL && !seen.load(Ordering::SeqCst) {
            app.write_all(&chunk).unwrap();
            sent += CHUNK;
        }
        app.shutdown(std::net::Shutdown::Write).unwrap();
        sent
    });
    let mut client = ClientConn {
        stream: Stream::Unix(corral_rt::sock::Socket::new(c).unwrap()),
        peer: crate::net::peer::Peer::Unix {
            port: 0,
            pid: 0,
            uid: None,
        },
        buf: BytesMut::new(),
        pass: 0,
        max_len: 1 << 20,
        worker: 0,
        custom: Default::default(),
        statements: Default::default(),
        read_armed: false,
    };
    let key = CancelKey {
        addr: ServerAddr::Unix("test".into()),
        pid: 1,
        secret: 1,
        tls: None,
        in_flight: Default::default(),
    };
    let stream = Stream::Unix(corral_rt::sock::Socket::new(s).unwrap());
    let mut server = ServerConn::new(stream, BytesMut::new(), key, Default::default(), 0);
    let outcome = run(&mut client, &mut server, &Mode::default()).await;
    assert_eq!(outcome, Outcome::ClientGone { eof: true });
    let sent = writer.join().unwrap();
    drop((client, server));
    corral_rt::batch::disable();
    pg_side.join().unwrap();
    let got = reader.join().unwrap();
    assert!(got.starts_with(&msg(b'E', b"SERROR\0C22012\0Mdivision by zero\0\0")));
    assert!(
        sent < TOTAL,
        "the client sent all {sent} pairs before it saw the error"
    );
}
