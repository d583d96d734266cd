//! Following one pool's database for the result cache: a logical replication stream (the
//! built-in pgoutput plugin, a temporary slot) whose every changed table drops its answers, and
//! a watch that reads the catalog's fingerprint and the WAL position, so that the cache serves
//! only while every change older than `query_cache_lag` has reached it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use bytes::BytesMut;
use parking_lot::Mutex;
use pgwire::backend;

use super::catalog;
use super::pgoutput::{self, Output, Stream};
use super::verdict::Catalog;
use super::Caches;
use crate::error::{Error, Kind, Result};
use crate::logsafe;
use crate::net::framed::read_message;
use crate::pool::Pool;
use crate::server::ServerConn;
use crate::session;
use crate::session::exec;

/// How often the watch reads the fingerprint and the WAL position.
const WATCH_EVERY: Duration = Duration::from_millis(100);
/// How often the stream asks the server where it is (and acknowledges what it read).
const STATUS_EVERY: Duration = Duration::from_millis(100);
/// How long a failed follower waits before it starts again, doubled after each failure that
/// came soon (up to [`RETRY_MAX`]).
const RETRY: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What the request loop needs of a pool's follower.
pub struct Follow {
    pub pool: Pool,
    /// The catalog the verdict is judged by (none until first read).
    pub catalog: ArcSwapOption<Catalog>,
    /// Bumped when the catalog changed: answers of an older epoch are not served.
    pub epoch: AtomicU64,
    /// Answers may be served until then (ms on [`Follow::clock`]): every change committed
    /// before `fresh_until - lag` has been applied.
    fresh_until: AtomicU64,
    /// WAL positions read by the watch and when they were read, oldest first.
    samples: Mutex<VecDeque<(u64, u64)>>,
    started: Instant,
    running: AtomicBool,
}

impl Follow {
    pub fn new(pool: Pool) -> Follow {
        Follow {
            pool,
            catalog: ArcSwapOption::empty(),
            epoch: AtomicU64::new(0),
            fresh_until: AtomicU64::new(0),
            samples: Mutex::new(VecDeque::new()),
            started: Instant::now(),
            running: AtomicBool::new(false),
        }
    }

    fn clock(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether answers may be served now.
    pub fn fresh(&self) -> bool {
        self.clock() < self.fresh_until.load(Ordering::Acquire)
    }

    /// Starts following on a task of `worker`'s unless it runs.
    pub fn start(self: &Arc<Self>, caches: &Arc<Caches>, worker: usize) {
        // Asked at every request of a cached database: a plain load, no write, once it runs.
        if self.running.load(Ordering::Acquire) || self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let (f, c) = (self.clone(), caches.clone());
        let run = async move {
            let mut wait = RETRY;
            loop {
                let began = Instant::now();
                let why = follow(&f, &c, worker).await;
                f.fresh_until.store(0, Ordering::Release);
                c.clear_pool(&f);
                tracing::warn!(db = %logsafe::Esc(f.pool.name().0), error = %logsafe::Esc(&why),
                    "the result cache stopped following its database; nothing is served from it until it follows again");
                if began.elapsed() > RETRY_MAX {
                    wait = RETRY;
                }
                corral_rt::timer::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX);
            }
        };
        if corral_rt::exec::spawn_here(run).is_err() {
            self.running.store(false, Ordering::Release);
        }
    }

    /// The stream has applied every change up to `lsn`: answers may be served until `lag`
    /// after the newest sample at or before it was read.
    fn applied(&self, lsn: u64, lag: u64) {
        let mut samples = self.samples.lock();
        let mut newest = None;
        while samples.front().is_some_and(|(at, _)| *at <= lsn) {
            newest = samples.pop_front().map(|(_, t)| t);
        }
        if let Some(t) = newest {
            self.fresh_until.fetch_max(t + lag, Ordering::AcqRel);
        }
    }
}

/// Follows until something fails; the error says what.
async fn follow(f: &Arc<Follow>, caches: &Arc<Caches>, worker: usize) -> Error {
    let mut watch = match f.pool.open_listener(worker).await {
        Ok(s) => s,
        Err(e) => return e,
    };
    let mut stream = match f.pool.open_replication(worker).await {
        Ok(s) => s,
        Err(e) => return e,
    };
    if let Err(e) = start_stream(&mut stream, caches).await {
        return e;
    }
    let watching = watch_catalog(f, caches, &mut watch);
    let streaming = read_stream(f, caches, &mut stream);
    tokio::select! {
        e = watching => e,
        e = streaming => e,
    }
}

/// Creates a temporary slot and starts the stream of the cache's publication.
async fn start_stream(stream: &mut ServerConn, caches: &Caches) -> Result<()> {
    let slot = format!("pgcorral_cache_{:016x}", rand::random::<u64>());
    exec::query(
        stream,
        &format!("CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'nothing')"),
    )
    .await?;
    let mut publication = String::new();
    session::literal(&mut publication, &caches.publication());
    let mut out = BytesMut::new();
    pgwire::encode::query(
        &mut out,
        &format!(
            "START_REPLICATION SLOT {slot} LOGICAL 0/0 (proto_version '1', publication_names {publication})"
        ),
    );
    stream
        .stream
        .send(&out)
        .await
        .map_err(|e| Error::with_source(Kind::ServerIo, "write to server", e))?;
    loop {
        let (tag, body) = read(stream).await?;
        match tag {
            b'W' => return Ok(()),
            backend::ERROR_RESPONSE => return Err(server_error(&body)),
            _ => {}
        }
    }
}

/// Reads the fingerprint and the WAL position every [`WATCH_EVERY`]: a changed fingerprint
/// reads the catalog again and drops the pool's answers; each position is a sample the stream
/// must reach.
async fn watch_catalog(f: &Follow, caches: &Caches, watch: &mut ServerConn) -> Error {
    let mut last = None;
    loop {
        let at = f.clock();
        let rows = match exec::query(watch, catalog::FINGERPRINT).await {
            Ok(r) => r,
            Err(e) => return e,
        };
        let (print, lsn) = match rows.first().map(|r| &r[..]) {
            Some([Some(p), Some(l)]) => (p.clone(), catalog::lsn(l).unwrap_or(u64::MAX)),
            _ => return Error::new(Kind::ServerIo, "the catalog fingerprint read no row"),
        };
        if last.as_ref() != Some(&print) {
            match catalog::read(watch, &caches.publication()).await {
                Ok(c) => f.catalog.store(Some(Arc::new(c))),
                Err(e) => return e,
            }
            f.epoch.fetch_add(1, Ordering::AcqRel);
            caches.clear_pool(f);
            last = Some(print);
        }
        f.samples.lock().push_back((lsn, at));
        corral_rt::timer::sleep(WATCH_EVERY).await;
    }
}

/// Reads the stream: each changed table drops its answers; each keepalive and commit moves
/// the applied position. Asks the server where it is every [`STATUS_EVERY`].
async fn read_stream(f: &Follow, caches: &Caches, stream: &mut ServerConn) -> Error {
    let mut names: HashMap<u32, Arc<str>> = HashMap::new();
    let mut applied = 0u64;
    let mut next_status = Instant::now();
    loop {
        if Instant::now() >= next_status {
            if let Err(e) = status(stream, applied).await {
                return e;
            }
            next_status = Instant::now() + STATUS_EVERY;
        }
        let wait = next_status.saturating_duration_since(Instant::now());
        let (tag, body) = match corral_rt::timer::timeout(wait, read(stream)).await {
            Err(_) => continue,
            Ok(Err(e)) => return e,
            Ok(Ok(m)) => m,
        };
        match tag {
            b'd' => match pgoutput::read(&body) {
                Ok(Stream::Keepalive { end, .. }) => {
                    applied = applied.max(end);
                }
                Ok(Stream::Data { message, .. }) => {
                    if let Some(lsn) = apply(f, caches, &mut names, message) {
                        applied = applied.max(lsn);
                    }
                }
                Err(e) => {
                    return Error::new(Kind::ServerIo, format!("replication stream: {}", e.0))
                }
            },
            backend::ERROR_RESPONSE => return server_error(&body),
            b'c' => return Error::new(Kind::ServerIo, "the replication stream ended"),
            _ => {}
        }
        f.applied(applied, caches.lag());
    }
}

/// One pgoutput message: a changed table drops its answers. A commit's end position is
/// returned: everything before it has been applied.
fn apply(
    f: &Follow,
    caches: &Caches,
    names: &mut HashMap<u32, Arc<str>>,
    message: Output<'_>,
) -> Option<u64> {
    match message {
        Output::Relation { id, name, .. } => {
            names.insert(id, Arc::from(String::from_utf8_lossy(name).as_ref()));
        }
        Output::Change { id } => caches.changed(f, names.get(&id)),
        Output::Truncate { ids } => {
            for id in ids {
                caches.changed(f, names.get(&id));
            }
        }
        Output::Commit { end_lsn } => return Some(end_lsn),
        Output::Begin { .. } | Output::Other(_) => {}
    }
    None
}

/// Sends the standby status update: `applied` is acknowledged, and the server asked for a
/// keepalive at once (its answer says how far it has sent).
async fn status(stream: &mut ServerConn, applied: u64) -> Result<()> {
    let payload = pgoutput::status_update(applied, true);
    let mut out = BytesMut::with_capacity(payload.len() + 5);
    pgwire::encode::message(&mut out, b'd', |b| b.extend_from_slice(&payload));
    stream
        .stream
        .send(&out)
        .await
        .map_err(|e| Error::with_source(Kind::ServerIo, "write to server", e))
}

async fn read(stream: &mut ServerConn) -> Result<(u8, BytesMut)> {
    read_message(&mut stream.stream, &mut stream.rbuf, 1 << 30)
        .await
        .map_err(|e| Error::with_source(Kind::ServerIo, "server closed the connection", e))
}

fn server_error(body: &[u8]) -> Error {
    let fields = backend::ErrorFields::parse(body).unwrap_or_default();
    Error::new(
        Kind::ServerError,
        format!("{} ({})", fields.message, fields.code),
    )
}
