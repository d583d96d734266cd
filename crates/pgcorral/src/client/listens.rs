//! A pooled client's LISTEN, UNLISTEN and UNLISTEN * answered by pgcorral through its
//! database's notification hub ([`crate::notify`]), and its notifications written out between
//! its transactions.

use bytes::BytesMut;
use corral_rt::timer;
use pg_query::protobuf::DiscardMode;
use pg_query::NodeEnum;
use pgwire::backend::{self, TxStatus};
use pgwire::{frontend, Header};

use super::request::{next_request, read_whole, IdleTimer, Next};
use super::{ClientConn, LoggedIn};
use crate::error::{Error, Kind, Result};
use crate::net::framed::read_message;
use crate::notify::{self, Listener, MAX_CHANNEL};
use crate::server::ServerConn;
use crate::services::Services;
use crate::session;
use crate::session::exec;

/// The longest Query read whole to see whether it is a LISTEN (one is short).
const MAX_LOOKED_AT: usize = 1024;

/// Why a client whose listening connection ended is closed (it was told the error first).
pub(super) const LISTENING_ENDED: &str = "the connection listening for notifications ended";

/// What a lone statement of a request asks of the client's listening.
#[derive(Debug, PartialEq)]
enum Asked {
    Listen(String),
    Unlisten(String),
    UnlistenAll,
    /// `DISCARD ALL`: it goes to the server, and ends the client's listening as it ends a
    /// session's.
    DiscardAll,
}

/// A quick look: the buffered request may be a Query of LISTEN, UNLISTEN or DISCARD (its
/// first word starts with `l`, `u` or `d`, or its text is not buffered yet).
#[inline]
pub(super) fn may_be_asked(client: &ClientConn) -> bool {
    if client.buf.first() != Some(&b'Q') {
        return false;
    }
    match client
        .buf
        .get(pgwire::header::HEADER_LEN..)
        .and_then(|b| b.iter().find(|c| !c.is_ascii_whitespace()))
    {
        Some(c) => matches!(c.to_ascii_lowercase(), b'l' | b'u' | b'd'),
        None => true,
    }
}

/// Answers the buffered request when it is a Query of one LISTEN, UNLISTEN or UNLISTEN *
/// (true: answered and taken from the buffer); a lone DISCARD ALL also ends the client's
/// listening, and goes on to the server (false). Anything else is left as it is (false).
pub(super) async fn answer(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
) -> Result<bool> {
    let Some((asked, len)) = look(client).await? else {
        return Ok(false);
    };
    let utf8 = client_is_utf8(session);
    let tag = match asked {
        Asked::DiscardAll => {
            session.listening = None;
            return Ok(false);
        }
        // The hub passes names and payloads as UTF-8: a client in another encoding keeps its
        // LISTEN on its own server (pinned).
        _ if !utf8 => return Ok(false),
        Asked::Listen(channel) => {
            let hub = services.notify.of(&session.pool);
            let l = session
                .listening
                .get_or_insert_with(|| Box::new(Listener::new(hub)));
            let done = l.listen(&channel, client.worker).await;
            if let Err(e) = done {
                return refused(client, session, len, &e).await;
            }
            "LISTEN"
        }
        // The listening ended in `before_request`.
        Asked::Unlisten(channel) => {
            if let Some(l) = &mut session.listening {
                l.leave(&channel);
            }
            "UNLISTEN"
        }
        Asked::UnlistenAll => {
            session.listening = None;
            "UNLISTEN"
        }
    };
    let_go_if_idle(session);
    bytes::Buf::advance(&mut client.buf, len);
    let mut out = BytesMut::with_capacity(32);
    pgwire::encode::command_complete(&mut out, tag);
    pgwire::encode::ready_for_query(&mut out, TxStatus::Idle);
    client.reply(&out).await?;
    Ok(true)
}

/// How long the client's server may take to deliver the marker of [`adopt`].
const MARKER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Takes the channels the client's server listens on (a LISTEN in a transaction block, with
/// the extended protocol, beside other statements, or run by a function) over to the hub, so
/// that the client need not be pinned: the hub listens on them, the server sends a marker on a
/// channel only the hub and it listen on, the server's notifications before the marker are the
/// client's (written as the server's held ones), and the hub's after it; then the server stops
/// listening. False, the server untouched, when the client cannot be served by the hub (its
/// encoding, a routed database, the hub's connection failing): it stays pinned.
pub(super) async fn adopt(
    services: &Services,
    session: &mut LoggedIn,
    server: &mut ServerConn,
    worker: usize,
) -> Result<bool> {
    if session.cluster.routed() || !client_is_utf8(session) {
        return Ok(false);
    }
    let rows = exec::query(server, "SELECT c FROM pg_catalog.pg_listening_channels() c").await?;
    let channels: Vec<String> = rows
        .into_iter()
        .filter_map(|mut r| r.pop().flatten())
        .collect();
    let hub = services.notify.of(&session.pool);
    let l = session
        .listening
        .get_or_insert_with(|| Box::new(Listener::new(hub)));
    let Ok(adopted) = l.adopt(&channels, worker).await else {
        if !l.is_listening() {
            session.listening = None;
        }
        return Ok(false);
    };
    let held_before = server.held.len();
    let mut sql = String::from("LISTEN ");
    session::ident(&mut sql, &adopted.channel);
    exec::query(server, &sql).await?;
    let mut sql = String::from("SELECT pg_catalog.pg_notify(");
    session::literal(&mut sql, &adopted.channel);
    sql.push_str(", ");
    session::literal(&mut sql, &adopted.payload);
    sql.push(')');
    exec::query(server, &sql).await?;
    let marker = (adopted.channel.as_bytes(), adopted.payload.as_bytes());
    let found = timer::timeout(MARKER_WAIT, until_marker(server, held_before, marker)).await;
    if !matches!(found, Ok(Ok(()))) {
        server.state.broken = true;
        return Err(Error::new(
            Kind::ServerIo,
            "the server did not deliver pgcorral's notification marker in time",
        ));
    }
    exec::query(server, "UNLISTEN *").await?;
    keep_before_marker(&mut server.held, held_before, marker, &adopted.new);
    Ok(true)
}

/// Reads the server's notifications into its held ones until the marker is among them (after
/// `from`).
async fn until_marker(server: &mut ServerConn, from: usize, marker: (&[u8], &[u8])) -> Result<()> {
    while !notes(&server.held[from..]).any(|(c, p)| (c, p) == marker) {
        let (tag, body) = read_message(&mut server.stream, &mut server.rbuf, 1 << 30)
            .await
            .map_err(|e| Error::with_source(Kind::ServerIo, "server closed the connection", e))?;
        if tag == backend::NOTIFICATION_RESPONSE {
            pgwire::encode::message(&mut server.held, tag, |b| b.extend_from_slice(&body));
        }
    }
    Ok(())
}

/// The channel and payload of each NotificationResponse in `held` (whole messages).
fn notes(held: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    messages(held)
        .filter(|&(tag, _)| tag == backend::NOTIFICATION_RESPONSE)
        .map(|(_, body)| notify::channel_and_payload(body))
}

/// The whole messages of `buf`: (tag, body).
fn messages(mut buf: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let h = Header::parse(buf, u32::MAX).ok().flatten()?;
        let (m, rest) = buf.split_at_checked(h.total_len())?;
        buf = rest;
        Some((h.tag, &m[pgwire::header::HEADER_LEN..]))
    })
}

/// Of the notifications the server delivered since `from`, keeps those before the marker on
/// the channels taken over (`new`): any other is the hub's to deliver (or was the marker).
fn keep_before_marker(held: &mut BytesMut, from: usize, marker: (&[u8], &[u8]), new: &[String]) {
    let mut kept = BytesMut::with_capacity(held.len());
    kept.extend_from_slice(&held[..from]);
    let mut before = true;
    for (tag, body) in messages(&held[from..]) {
        if tag != backend::NOTIFICATION_RESPONSE {
            pgwire::encode::message(&mut kept, tag, |b| b.extend_from_slice(body));
            continue;
        }
        let (channel, payload) = notify::channel_and_payload(body);
        if (channel, payload) == marker {
            before = false;
        } else if before && new.iter().any(|c| c.as_bytes() == channel) {
            pgwire::encode::message(&mut kept, tag, |b| b.extend_from_slice(body));
        }
    }
    *held = kept;
}

/// Whether the client's `client_encoding` is UTF-8 (the hub's names and payloads are).
fn client_is_utf8(session: &LoggedIn) -> bool {
    session
        .settings
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("client_encoding"))
        .is_none_or(|(_, v)| is_utf8(v))
}

/// Frees the client's listening state once it listens on nothing.
fn let_go_if_idle(session: &mut LoggedIn) {
    if session
        .listening
        .as_ref()
        .is_some_and(|l| !l.is_listening())
    {
        session.listening = None;
    }
}

/// A LISTEN the hub could not serve: the client gets the error, as its own server's.
async fn refused(
    client: &mut ClientConn,
    session: &mut LoggedIn,
    len: usize,
    e: &Error,
) -> Result<bool> {
    let_go_if_idle(session);
    bytes::Buf::advance(&mut client.buf, len);
    let mut out = BytesMut::new();
    e.write_response(&mut out, "ERROR");
    pgwire::encode::ready_for_query(&mut out, TxStatus::Idle);
    client.reply(&out).await?;
    Ok(true)
}

/// Before a request of a client listening through the hub is served: when it is one UNLISTEN,
/// UNLISTEN * or DISCARD ALL (a Query, or a Parse as asyncpg's `remove_listener` and JDBC
/// send), the hub first catches up, so that what was committed before the statement is
/// written to the client as its own server would have sent it while waiting for the statement,
/// and the listening ends as the statement asks (the request goes on: pgcorral answers a Query
/// of it in transaction mode, the client's server otherwise, whose session listens on nothing).
/// Then the notifications waiting are written. True when the listening ended with an error
/// (written last): the client is to be closed.
pub(super) async fn before_request(
    client: &mut ClientConn,
    session: &mut LoggedIn,
) -> Result<bool> {
    let ends = match client.buf.first() {
        Some(b'Q') if may_be_asked(client) => look(client).await?.map(|(a, _)| a),
        Some(b'P') => parsed(client).await?,
        _ => None,
    };
    let ends = ends.filter(|a| !matches!(a, Asked::Listen(_)));
    if let (Some(_), Some(l)) = (&ends, &session.listening) {
        l.catch_up().await;
    }
    let ended = deliver(client, session).await?;
    match ends {
        Some(Asked::Unlisten(c)) => {
            if let Some(l) = &mut session.listening {
                l.leave(&c);
            }
        }
        Some(Asked::UnlistenAll | Asked::DiscardAll) => session.listening = None,
        _ => {}
    }
    let_go_if_idle(session);
    Ok(ended)
}

/// What the buffered Parse's statement asks, when it is one pgcorral watches for.
async fn parsed(client: &mut ClientConn) -> Result<Option<Asked>> {
    let Some(len) = read_whole(client, MAX_LOOKED_AT).await? else {
        return Ok(None);
    };
    let body = &client.buf[pgwire::header::HEADER_LEN..len];
    Ok(frontend::parse_text(body).and_then(|text| asked(text.as_bytes())))
}

/// The buffered Query, read whole, when it is one statement pgcorral answers or watches for,
/// with its length.
async fn look(client: &mut ClientConn) -> Result<Option<(Asked, usize)>> {
    let Some(len) = read_whole(client, MAX_LOOKED_AT).await? else {
        return Ok(None);
    };
    let body = &client.buf[pgwire::header::HEADER_LEN..len];
    let Some((&0, text)) = body.split_last() else {
        return Ok(None);
    };
    Ok(asked(text).map(|a| (a, len)))
}

/// Whether `encoding` names UTF-8 as PostgreSQL reads encoding names (case and punctuation
/// ignored: `UTF8`, `utf-8`, `Unicode`).
fn is_utf8(encoding: &str) -> bool {
    let name: String = encoding
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_uppercase())
        .collect();
    name == "UTF8" || name == "UNICODE"
}

/// Whether `text`'s first word (after white space) is LISTEN, UNLISTEN or DISCARD, in any
/// case: only such a text can parse as one of these statements (a comment or any other start
/// cannot), so every other Query, an UPDATE or a DELETE among them, is spared the parser.
fn begins_with_our_keyword(text: &[u8]) -> bool {
    let start = text
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(text.len());
    let text = &text[start..];
    let end = text
        .iter()
        .position(|c| !c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (word, rest) = text.split_at(end);
    // A keyword ends where an identifier could not go on.
    if rest
        .first()
        .is_some_and(|&c| c.is_ascii_digit() || c == b'_' || c == b'$' || c >= 0x80)
    {
        return false;
    }
    [&b"listen"[..], b"unlisten", b"discard"]
        .iter()
        .any(|k| word.eq_ignore_ascii_case(k))
}

/// What `text` asks, when it is one LISTEN, UNLISTEN, UNLISTEN * or DISCARD ALL statement.
fn asked(text: &[u8]) -> Option<Asked> {
    if !begins_with_our_keyword(text) {
        return None;
    }
    let text = std::str::from_utf8(text).ok()?;
    // No string literal can be part of these statements, so standard_conforming_strings cannot
    // change how they read.
    let parsed = pg_query::parse(text, pg_query::ParserOptions::DEFAULT).ok()?;
    let [stmt] = &parsed.protobuf.stmts[..] else {
        return None;
    };
    // A name of NAMEDATALEN - 1 bytes may have been cut by the parser, which PostgreSQL
    // tells in a notice: such a statement goes to the server.
    let name = |n: &str| (!n.is_empty() && n.len() < MAX_CHANNEL).then(|| n.to_string());
    match stmt.stmt.as_ref()?.node.as_ref()? {
        NodeEnum::ListenStmt(l) => name(&l.conditionname).map(Asked::Listen),
        NodeEnum::UnlistenStmt(u) if u.conditionname.is_empty() => Some(Asked::UnlistenAll),
        NodeEnum::UnlistenStmt(u) => name(&u.conditionname).map(Asked::Unlisten),
        NodeEnum::DiscardStmt(d) if d.target() == DiscardMode::DiscardAll => {
            Some(Asked::DiscardAll)
        }
        _ => None,
    }
}

/// Writes the notifications waiting for the client. True when its listening ended: the error
/// that ended it was written last, and the client is to be closed.
pub(super) async fn deliver(client: &mut ClientConn, session: &LoggedIn) -> Result<bool> {
    let Some(l) = &session.listening else {
        return Ok(false);
    };
    let taken = l.inbox().take();
    if !taken.out.is_empty() {
        client.reply(&taken.out).await?;
    }
    Ok(taken.ended)
}

/// Waits for the next request of a client pinned to its server between transactions, writing
/// its notifications meanwhile. `Some(why)` when the client is to leave.
pub(super) async fn wait_pinned(
    client: &mut ClientConn,
    services: &Services,
    session: &mut LoggedIn,
    idle_timeout: Option<std::time::Duration>,
) -> Result<Option<&'static str>> {
    let mut timer = IdleTimer::default();
    loop {
        let inbox = session.listening.as_deref().map(Listener::inbox);
        match next_request(
            client,
            services,
            idle_timeout,
            &mut timer,
            false,
            None,
            inbox,
        )
        .await?
        {
            Next::Notified => {
                if deliver(client, session).await? {
                    return Ok(Some(LISTENING_ENDED));
                }
            }
            Next::Gone(why) => return Ok(Some(why)),
            // What came before the request is written before it is served.
            Next::Request | Next::HandOver | Next::Slim(_) => {
                return match before_request(client, session).await? {
                    true => Ok(Some(LISTENING_ENDED)),
                    false => Ok(None),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(out: &mut BytesMut, channel: &str, payload: &str) {
        pgwire::encode::message(out, backend::NOTIFICATION_RESPONSE, |b| {
            b.extend_from_slice(&1i32.to_be_bytes());
            b.extend_from_slice(channel.as_bytes());
            b.extend_from_slice(b"\0");
            b.extend_from_slice(payload.as_bytes());
            b.extend_from_slice(b"\0");
        });
    }

    /// What the server delivered before the marker on the channels taken over is kept, in
    /// order; what came after it, the marker itself and other channels' are dropped; what was
    /// held before the takeover began is left alone.
    #[test]
    fn a_takeover_keeps_what_came_before_the_marker() {
        let mut held = BytesMut::new();
        note(&mut held, "old", "kept as it was");
        let from = held.len();
        note(&mut held, "a", "1");
        note(&mut held, "b", "hub's already");
        note(&mut held, "a", "2");
        note(&mut held, "m", "7");
        note(&mut held, "a", "3 after");
        keep_before_marker(&mut held, from, (b"m", b"7"), &["a".to_string()]);
        let mut want = BytesMut::new();
        note(&mut want, "old", "kept as it was");
        note(&mut want, "a", "1");
        note(&mut want, "a", "2");
        assert_eq!(held, want);
        let seen: Vec<_> = notes(&held).collect();
        assert_eq!(seen[1], (&b"a"[..], &b"1"[..]));
    }

    #[test]
    fn utf8_is_named_as_postgres_reads_it() {
        for n in ["UTF8", "utf-8", "Utf_8", "unicode"] {
            assert!(is_utf8(n), "{n}");
        }
        for n in ["LATIN1", "SQL_ASCII", "UTF16", ""] {
            assert!(!is_utf8(n), "{n}");
        }
    }

    #[test]
    fn only_lone_statements_are_asked() {
        assert_eq!(asked(b"LISTEN a"), Some(Asked::Listen("a".into())));
        assert_eq!(
            asked(b"  listen \"B c\";"),
            Some(Asked::Listen("B c".into()))
        );
        assert_eq!(asked(b"UNLISTEN a"), Some(Asked::Unlisten("a".into())));
        assert_eq!(asked(b"unlisten *"), Some(Asked::UnlistenAll));
        assert_eq!(asked(b"DISCARD ALL"), Some(Asked::DiscardAll));
        assert_eq!(asked(b"DISCARD PLANS"), None);
        assert_eq!(asked(b"LISTEN a; LISTEN b"), None);
        assert_eq!(asked(b"LISTEN a; SELECT 1"), None);
        assert_eq!(asked(b"listen"), None);
        assert_eq!(asked(b"SELECT 1"), None);
        assert_eq!(asked(b"/* c */ LISTEN a"), None);
        let long = format!("LISTEN {}", "x".repeat(63));
        assert_eq!(asked(long.as_bytes()), None);
        let short = format!("LISTEN {}", "x".repeat(62));
        assert_eq!(asked(short.as_bytes()), Some(Asked::Listen("x".repeat(62))));
        assert_eq!(asked(b"listen\"q\""), Some(Asked::Listen("q".into())));
        assert_eq!(asked(b"\tDiscard/**/ALL"), Some(Asked::DiscardAll));
    }

    #[test]
    fn only_our_first_words_reach_the_parser() {
        for (text, ours) in [
            (&b"LISTEN a"[..], true),
            (b" unlisten *", true),
            (b"\nDISCARD ALL", true),
            (b"listen\"x\"", true),
            (b"listen", true),
            (b"UPDATE t SET x = 1", false),
            (b"delete from t", false),
            (b"lock t", false),
            (b"listens", false),
            (b"listen_x", false),
            (b"listen1", false),
            (b"unlisten$", false),
            (b"/* c */ LISTEN a", false),
            (b"", false),
        ] {
            assert_eq!(
                begins_with_our_keyword(text),
                ours,
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }
}
