//! A pooled client's cacheable read answered from the result cache ([`crate::cache`]), or read
//! through a server and kept; any other request to a database with the cache drops the answers
//! of the tables it names, before it runs.

use std::sync::Arc;

use bytes::{Buf, BytesMut};
use pgwire::backend::{self, TxStatus};
use pgwire::frontend;

use super::request::read_whole;
use super::state::deliver_held;
use super::{ClientConn, LoggedIn};
use crate::cache::{verdict, Caches, Follow, Key};
use crate::config::{Database, PoolMode};
use crate::error::{Error, Kind, Result};
use crate::link;
use crate::net::framed::read_message;
use crate::server::ServerConn;
use crate::services::Services;
use crate::session;

/// The longest first message whose text is read: longer ones are not cached, and drop every
/// answer of the pool (their text is not looked at).
const MAX_TEXT: usize = 64 << 10;

/// Whether the cache may serve this client: its database's `query_cache` is on (in the
/// configuration file's databases, not a tenant's), in transaction or statement mode, on a
/// database without routing.
pub(super) fn enabled(services: &Services, session: &LoggedIn, mode: PoolMode) -> bool {
    if mode == PoolMode::Session || session.cluster.routed() || session.tenant.is_some() {
        return false;
    }
    database(services, session, |d| d.query_cache == Some(true))
}

/// `f` of the client's database entry (its own, else `"*"`'s) in the configuration now.
fn database(services: &Services, session: &LoggedIn, f: impl Fn(&Database) -> bool) -> bool {
    let config = services.config.load();
    let db = session.pool.name().0;
    config
        .databases
        .get(db)
        .or_else(|| config.databases.get("*"))
        .is_some_and(f)
}

/// For a client of a database with the cache, attached to nothing and not pinned: answers the
/// buffered request from the cache, or reads and keeps it (true: answered); any other request
/// drops the answers of the tables it names and goes on (false).
pub(super) async fn serve(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
) -> Result<bool> {
    // Only a Query or a Parse carries a text (a Bind of an earlier statement is left to the
    // stream).
    let tag = match client.buf.first() {
        Some(&t @ (b'Q' | b'P')) => t,
        _ => return Ok(false),
    };
    // The follower is asked even when it cannot serve now: a write drops answers at once
    // whatever the stream's lag.
    let f = services.cache.follower(&session.pool, client.worker);
    let text = match read_whole(client, MAX_TEXT).await? {
        Some(len) => {
            let body = &client.buf[pgwire::header::HEADER_LEN..len];
            let text = match tag {
                b'Q' => frontend::query_text(body),
                _ => frontend::parse_text(body),
            };
            text.map(|t| (t, len))
        }
        None => None,
    };
    let Some((text, len)) = text else {
        // Too long, not well formed or not UTF-8: not looked at, so whatever it writes, no
        // answer of the pool is kept past it.
        services.cache.clear_pool(&f);
        return Ok(false);
    };
    if tag != b'Q' || !verdict::may_read(text.as_bytes()) || !f.fresh() {
        services.cache.written(&f, text.as_bytes());
        return Ok(false);
    }
    let key = Key {
        pool: session.pool.identity(),
        text: Arc::from(text.as_bytes()),
        settings: session.settings.clone(),
    };
    // An answer stored in this generation was judged cacheable by the catalog of its epoch:
    // a hit needs no parse.
    if let Some(answer) = services.cache.get(&key, Caches::generation(&f)) {
        client.buf.advance(len);
        client.reply(&answer).await?;
        return Ok(true);
    }
    let tables = f
        .catalog
        .load_full()
        .and_then(|catalog| verdict::judge(text, &catalog));
    let Some(tables) = tables else {
        services.cache.written(&f, text.as_bytes());
        return Ok(false);
    };
    // `query_cache_tables`: a read of another table is not kept.
    let listed = |d: &Database| match d.query_cache_tables.as_deref() {
        None | Some([]) => true,
        Some(list) => tables.iter().all(|t| list.iter().any(|l| **l == **t)),
    };
    // A miss needs a server: under PAUSE or a stop, the request loop's own path decides.
    let db = session.pool.name().0;
    if !database(services, session, listed)
        || services.control.is_paused(db)
        || services.shutdown.is_cancelled()
    {
        return Ok(false);
    }
    services.cache.missed();
    fill(client, services, session, (&f, key, &tables), len).await?;
    Ok(true)
}

/// Reads the request through a server of the pool, writes the answer to the client as it
/// comes, and keeps it unless it held anything but rows, a completion and ReadyForQuery idle.
async fn fill(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
    (f, key, tables): (&Follow, Key, &[Arc<str>]),
    len: usize,
) -> Result<()> {
    let begun = services.cache.begin(f, tables);
    let mut s = session.pool.checkout(client.worker, session.wait).await?;
    if !session::matches(&s.applied, &session.settings) {
        link::restore(&mut s, &session.settings).await?;
        if !s.held.is_empty() {
            deliver_held(client, &mut s).await?;
        }
    }
    session.slot.set(Some(s.key.clone()));
    let request = client.buf.split_to(len);
    let sent = s.stream.send(&request).await;
    if let Err(e) = sent {
        s.state.broken = true;
        session.slot.set(None);
        return Err(Error::with_source(Kind::ServerIo, "write to server", e));
    }
    let read = relay_answer(client, &mut s).await;
    session.slot.set(None);
    let answer = read?;
    drop(s);
    if let Some(answer) = answer {
        services.cache.put(key, answer.freeze(), begun);
    }
    Ok(())
}

/// Writes the server's answer to the client until ReadyForQuery; returns it whole when it may
/// be kept.
async fn relay_answer(client: &mut ClientConn, s: &mut ServerConn) -> Result<Option<BytesMut>> {
    let mut answer = Some(BytesMut::new());
    let mut out = BytesMut::new();
    loop {
        let m = read_message(&mut s.stream, &mut s.rbuf, client.max_len).await;
        let (tag, body) = match m {
            Ok(m) => m,
            Err(e) => {
                s.state.broken = true;
                return Err(Error::with_source(
                    Kind::ServerIo,
                    "server closed the connection",
                    e,
                ));
            }
        };
        let start = out.len();
        pgwire::encode::message(&mut out, tag, |b| b.extend_from_slice(&body));
        let plain = matches!(
            tag,
            backend::ROW_DESCRIPTION | backend::DATA_ROW | backend::COMMAND_COMPLETE
        ) || (tag == backend::READY_FOR_QUERY && body.first() == Some(&b'I'));
        match (&mut answer, plain) {
            (Some(a), true) => a.extend_from_slice(&out[start..]),
            _ => answer = None,
        }
        if tag == backend::READY_FOR_QUERY {
            s.state.tx = body
                .first()
                .copied()
                .and_then(TxStatus::from_byte)
                .unwrap_or(TxStatus::Failed);
            client.reply(&out).await?;
            return Ok(answer);
        }
        if out.len() >= 64 << 10 {
            client.reply(&out).await?;
            out.clear();
        }
    }
}
