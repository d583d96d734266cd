//! TLS clients moving between pgcorral's workers, on both hops at once: pgbench with every
//! protocol while clients move, clients moved off a busy worker (also with the end of an answer
//! still in pgcorral's TLS session), answers ending in the TLS session inside a transaction and
//! in session mode, and pipelined requests answered in order.
//!
//! Both hops are TLS: clients reach pgcorral over TLS (`client_tls_sslmode = "require"`) and
//! pgcorral reaches an `ssl = on` PostgreSQL over TLS (`server_tls_sslmode = "verify-full"`),
//! with two workers so that clients and servers move between reactors (support/tls_data.rs).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::tls::*;
use support::tls_data::*;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---- 1. pgbench -----------------------------------------------------------------------------

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

// ---- 2. clients moving between workers ------------------------------------------------------

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
