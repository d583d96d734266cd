//! Peering (PgBouncer's `[peers]` and `peer_id`, issue 37 item 5): several pgcorral processes
//! behind one address; a cancel request that reaches a process other than the one holding the
//! client is forwarded to that one (over its Unix socket or TCP), so the query stops.

mod support;

use std::time::Duration;

use support::raw::{self, Raw};
use support::*;

/// A pgbouncer.ini for process `id` on `port`, with `[peers]` naming the others.
fn ini(pg: &Postgres, id: u16, port: u16, sockets: &std::path::Path, peers: &str) -> String {
    format!(
        "[databases]\npostgres = host=127.0.0.1 port={pg_port} dbname=postgres\n\
         [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = {sockets}\n\
         auth_type = trust\npool_mode = transaction\npeer_id = {id}\n\
         [peers]\n{peers}",
        pg_port = pg.port,
        sockets = sockets.display(),
    )
}

/// Runs `SELECT pg_sleep(30)` as a client of `port`, cancels it with its key sent to
/// `cancel_port`, and returns the error the query got (`None`: it was not cancelled in time).
async fn cancelled_through(pg: &Postgres, port: u16, cancel_port: u16) -> Option<String> {
    let mut client = Raw::login(port, "postgres", "postgres").await.unwrap();
    let (pid, secret) = client.key.unwrap();
    let query = tokio::spawn(async move {
        let r = client.query("SELECT pg_sleep(30)").await;
        r.err().map(|e| e.message)
    });
    wait_for_sleeping_query(pg).await;
    raw::cancel(cancel_port, pid, secret).await;
    tokio::time::timeout(Duration::from_secs(10), query)
        .await
        .ok()
        .and_then(|r| r.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_at_the_wrong_process_is_forwarded_to_its_peer() {
    let pg = blocking(Postgres::start);
    let (port1, port2, port3) = (free_port(), free_port(), free_port());
    let (dir1, dir2) = (socket_dir(), socket_dir());
    // 1 knows 2 by its Unix socket; 2 knows 1 by TCP, and lists itself (PgBouncer allows it).
    let one = blocking(|| {
        let peers = format!("2 = host={} port={port2}\n", dir2.display());
        PoolerProcess::start_file("pgbouncer.ini", &ini(&pg, 1, port1, &dir1, &peers), port1)
    });
    let two = blocking(|| {
        let peers = format!("1 = host=127.0.0.1 port={port1}\n2 = host=127.0.0.1 port={port2}\n");
        PoolerProcess::start_file("pgbouncer.ini", &ini(&pg, 2, port2, &dir2, &peers), port2)
    });
    // A process without peering: keys of others are not its business.
    let three = blocking(|| {
        PoolerProcess::start_file(
            "pgbouncer.ini",
            &ini(&pg, 0, port3, &socket_dir(), ""),
            port3,
        )
    });

    for (holder, asked) in [(port1, port2), (port2, port1), (port1, port1)] {
        let err = cancelled_through(&pg, holder, asked).await;
        let err = err
            .unwrap_or_else(|| panic!("client of {holder}, cancel sent to {asked}: not cancelled"));
        assert!(
            err.contains("canceling statement due to user request"),
            "{err}"
        );
    }

    // The key carries the process's id in its low 16 bits.
    let c = Raw::login(port2, "postgres", "postgres").await.unwrap();
    assert_eq!(c.key.unwrap().1 & 0xffff, 2);
    drop(c);

    // Sent to a process that does not peer, a peer's key cancels nothing.
    let mut client = Raw::login(port1, "postgres", "postgres").await.unwrap();
    let (pid, secret) = client.key.unwrap();
    let query = tokio::spawn(async move { client.query("SELECT pg_sleep(1.5)").await });
    wait_for_sleeping_query(&pg).await;
    raw::cancel(port3, pid, secret).await;
    let r = tokio::time::timeout(Duration::from_secs(10), query)
        .await
        .unwrap()
        .unwrap();
    assert!(
        r.is_ok(),
        "cancelled through a process that does not peer: {r:?}"
    );
    drop((one, two, three));
}
